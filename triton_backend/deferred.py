"""Host work a finished batch leaves for later (``runner.Runner``): done while a later
batch is on the device once it is due (``run_due``), at the metrics thread's next flush,
or at unload, whichever comes first.

It is due once ``max_items`` wait or the oldest has waited ``max_age_s``. A batch's
feedback run alone runs cold: it runs once a call, after the device's wait, while the
server and its clients had the cores. Run together, the items after the first run warm
(results/batched_feedback/).

Invariants:

* each item runs once, in the order it was added;
* an item waits at most ``max_age_s`` of the caller's clock, or ``max_items - 1`` later
  items, for a ``run_due`` while a batch runs (none comes while the model is idle: the
  metrics thread's flush runs it);
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

    def __init__(self, on_error: Callable[[], None], max_items: int = 1,
                 max_age_s: float = 0.0):
        self._items: list[Callable[[], None]] = []
        self._first_s = 0.0  # when the oldest waiting item was added
        self._lock = threading.Lock()
        self._on_error = on_error
        self.max_items, self.max_age_s = max_items, max_age_s

    def add(self, work: Callable[[], None], now_s: float = 0.0) -> None:
        """``work`` added at ``now_s`` (the caller's clock)."""
        with self._lock:
            if not self._items:
                self._first_s = now_s
            self._items.append(work)

    def run_due(self, now_s: float) -> None:
        """``run_all`` where the items are due at ``now_s`` (see the module doc). Read
        without the lock: a stale read runs them a call early or late, never twice."""
        items = self._items
        if items and (len(items) >= self.max_items
                      or now_s - self._first_s >= self.max_age_s - 1e-9):  # exact ages on time
            self.run_all()

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
