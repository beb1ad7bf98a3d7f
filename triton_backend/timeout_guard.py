"""A client's Triton ``timeout`` kept while the plugin holds its request.

Triton's queue enforces a request's timeout only under a queue policy (which would turn its
prefetch off, docs/platform.md), and a request past its timeout is answered at hand-over
(``decode.decode_call``). Once handed over, a request can still pass its timeout waiting
for its batch, or in a batch that runs longer than its estimate; its answer would then come
when the batch ends. ``TimeoutGuard`` answers it at its deadline instead: UNAVAILABLE,
naming the timeout, sent at once (``Answers.fail_now``, as the watchdog does), and a result
that comes later is dropped (an answer is check-and-set, ``answers.Ticket``).

Invariants:

* only requests that carry a client timeout are watched (an SLA alone is a target: a late
  answer is still an answer);
* a watched request is answered no earlier than its deadline as the plugin dates it (the
  call's conservative arrival plus its timeout, ``intake.HoldIntake.admission_arrival``),
  and at most ``COALESCE_S`` after it, give or take the thread's turn for the GIL;
* one thread, started at the first watched request, waking once per ``COALESCE_S`` at most
  while deadlines are due (not once per request).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Callable, Sequence

# Deadlines due within this much of the earliest are answered in one wake-up: the guard
# wakes at most this often, and answers at most this late (a setting, well inside the
# 50 ms that issue 29's reliability row allows past a timeout).
COALESCE_S = 0.01


class TimeoutGuard:
    """Answers each watched request whose client timeout passes before its answer."""

    def __init__(self, answers, model_name: str, clock: Callable[[], float] = time.monotonic):
        self._answers = answers
        self._model_name = model_name
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list = []  # (deadline_s, seq, ticket, timeout_ms)
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.expired = 0  # requests it answered

    def watch(self, watched: Sequence[tuple[object, float, float]]) -> None:
        """Watch each ``(ticket, deadline_s, timeout_ms)``."""
        if not watched:
            return
        with self._cond:
            if self._stopped:
                return
            earliest = self._heap[0][0] if self._heap else None
            for ticket, deadline_s, timeout_ms in watched:
                heapq.heappush(self._heap, (deadline_s, next(self._seq), ticket, timeout_ms))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name=f"{self._model_name}-timeouts")
                self._thread.start()
            elif earliest is None or self._heap[0][0] < earliest:
                self._cond.notify()

    def stop(self, timeout_s: float) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def _due(self) -> list | None:
        """Wait until deadlines are due; pop them (None once stopped)."""
        with self._cond:
            while not self._stopped:
                if not self._heap:
                    self._cond.wait()
                    continue
                wait_s = self._heap[0][0] + COALESCE_S - self._clock()
                if wait_s <= 0:
                    break
                self._cond.wait(wait_s)
            if self._stopped:
                return None
            now, due = self._clock(), []
            while self._heap and self._heap[0][0] <= now:
                _, _, ticket, timeout_ms = heapq.heappop(self._heap)
                if not ticket.answered:
                    due.append((ticket, timeout_ms))
            return due

    def _loop(self) -> None:
        while (due := self._due()) is not None:
            if due:
                self.expired += self._answers.refuse_each(
                    [(ticket, f"request timed out: its timeout of {timeout_ms:.1f} ms passed "
                      "while it waited for its batch or its batch ran; answered at its "
                      "deadline") for ticket, timeout_ms in due],
                    "timed_out", at_once=True)
