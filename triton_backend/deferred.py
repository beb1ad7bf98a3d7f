"""Host work a finished batch leaves for later (``runner.Runner``): done while the next
batch is on the device, at the metrics thread's next flush, or at unload, whichever
comes first.

Invariants:

* each item runs once, in the order it was added;
* the lock is held while items run, so two threads (the one running batches, the metrics
  thread) never run them out of order; ``run_all`` is never called with the model's
  ``cond`` held (items take it);
* a failing item is reported (``on_error``) and dropped: it never fails a batch.
"""

from __future__ import annotations

import threading
from typing import Callable


class Deferred:
    """Host work waiting for a moment the device is busy anyway (see the module doc)."""

    def __init__(self, on_error: Callable[[], None]):
        self._items: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._on_error = on_error

    def add(self, work: Callable[[], None]) -> None:
        with self._lock:
            self._items.append(work)

    def run_all(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            for item in items:
                self.guarded(item)

    def guarded(self, work: Callable, *args) -> None:
        """Run ``work(*args)``; a failure is reported, never raised."""
        try:
            work(*args)
        except Exception:  # reported (counted and logged by the runner); the batch goes on
            self._on_error()
