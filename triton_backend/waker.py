"""intake hold's wake requests: a cure, opt-in, for a lost wake-up in Triton's dynamic
batcher (``Waker``'s docstring has the mechanism). No Triton import: unit-tested with a
fake clock and a fake thread starter."""

from __future__ import annotations

import threading
import time
from typing import Callable

# The request id of the waker's own requests: the hold driver answers them empty.
WAKE_REQUEST_ID = "explicit-batching-wake"

# intake hold: a wake request goes into the model when no call has started this long after
# the last one returned, and again every as long (see Waker); parameter wake_after_ms.
# OFF by default (0): one make-bench run with it on ended in Triton 2.51's crash under
# gRPC client cancellations; it stays an opt-in (docs/defaults.md has the measurements).
WAKE_AFTER_MS = 0.0
WAKE_AFTER_MS_MEASURED = 2.0  # the setting docs/defaults.md (and results/bench_hold_wake) measured
WAKE_IDLE_CALLS = 3  # ... until this many calls in a row held wake requests only
# Wake requests not yet answered, at most. One sent while the instance is still busy wakes
# nothing and waits for the next call, so a small cap is used up by those
# (docs/defaults.md).
WAKE_MAX_IN_FLIGHT = 16


def is_wake_request(request) -> bool:
    """Whether ``request`` is one of the waker's own (answered empty, never decoded)."""
    return request.request_id() == WAKE_REQUEST_ID


class Waker:
    """intake hold's cure for a lost wake-up in Triton 2.51's dynamic batcher.

    With any ``default_queue_policy`` (the shipped bound) or priority levels, Triton's
    queue does not prefetch: the batcher waits for the model instance to be idle before it
    forms the next batch (core r24.10, ``DynamicBatchScheduler::WaitForPayloadSlotAvailable``,
    a 500 ms ``wait_for`` whose deadline is fixed when it starts). The end of an
    ``execute()`` call wakes it a moment before the instance counts as idle again
    (``Payload::Execute`` calls back before ``RateLimiter::DequeuePayload`` raises the
    waiting-consumer count, which notifies no one); after that only an arrival wakes it
    (``Enqueue`` notifies only while an instance is idle). When every waiting request
    arrived before that moment - closed-loop clients resending at once - the instance
    stands idle with work queued until the 500 ms deadline. Measured with Triton's request
    trace: QUEUE_START to COMPUTE_START 0.50 s for 1,501 of 17,660 requests, every one of
    them queued by 2.6 ms after the previous call's end (flat profile, 64 in flight).

    So (opt-in: WAKE_AFTER_MS says why) after each call, if no call has started within
    ``after_s``, the waker ``send()``s a wake request into the model (on a thread of its
    own: it blocks until answered), and again every ``after_s`` until a call starts. It is an arrival: the batcher wakes and
    hands it over with whatever waited; the driver answers it (empty) and counts nothing
    else for it. After WAKE_IDLE_CALLS calls in a row that held wake requests only, the
    waker stops until a real request comes, so an idle model sends a few and then none.
    A full queue refuses wake requests too: there nothing but the batcher's own 500 ms
    timeout ends a stall (Triton 2.51 wakes it on no refusal), so after a refusal the waker
    waits for the next call. So does it while the server shuts down.

    The driver's contract: ``start()`` once; ``call_started()`` at the start of every
    ``execute()`` call; ``call_returned(end_s, answered_real)`` just before it returns
    (``answered_real``: the call held a request that was not a wake request); ``stop()``
    at unload, first (it waits for the wake requests in flight). ``send()`` returns False
    when the wake request was refused or failed.
    """

    def __init__(self, after_s: float, send: Callable[[], bool],
                 clock: Callable[[], float] = time.monotonic,
                 start_thread: Callable[[Callable[[], None]], None] | None = None):
        self.after_s = after_s
        self._send = send
        self._clock = clock
        self._start_thread = start_thread or _daemon_thread
        self._cond = threading.Condition()
        self._due_at: float | None = None  # when the next wake request is due; None: not armed
        self._waiting = False  # the thread waits with no deadline (needs a notify)
        self._stopping = False
        self._idle_calls = 0  # calls in a row that held wake requests only
        self.in_flight = 0
        self.sent = 0
        self.refused = 0
        self._thread: threading.Thread | None = None

    def start(self) -> "Waker":
        self._thread = threading.Thread(target=self._run, name="explicit-waker", daemon=True)
        self._thread.start()
        return self

    def call_started(self) -> None:
        self._due_at = None  # a plain store: the thread re-reads it under its lock

    def call_returned(self, end_s: float, answered_real: bool) -> None:
        self._idle_calls = 0 if answered_real else self._idle_calls + 1
        if self._idle_calls > WAKE_IDLE_CALLS:
            return
        with self._cond:
            self._due_at = end_s + self.after_s
            if self._waiting:
                self._cond.notify()

    def tick(self, now_s: float) -> float | None:
        """Send the wake request if it is due; then the seconds until the next look (None:
        not armed). The thread's step, held lock."""
        due = self._due_at
        if due is None:
            return None
        if now_s < due:
            return due - now_s
        self._due_at = due + self.after_s  # look again if still no call comes
        if self.in_flight < WAKE_MAX_IN_FLIGHT:
            self.in_flight += 1
            self.sent += 1
            self._start_thread(self._send_one)
        return self.after_s

    def _send_one(self) -> None:
        ok = False
        try:
            ok = self._send()
        except Exception:  # a failed wake request changes nothing
            ok = False
        with self._cond:
            self.in_flight -= 1
            if not ok:  # a full queue, or the model going away: wait for the next call
                self.refused += 1
                self._due_at = None
            self._cond.notify_all()

    def _run(self) -> None:
        with self._cond:
            while not self._stopping:
                left = self.tick(self._clock())
                self._waiting = left is None
                self._cond.wait(left)
                self._waiting = False

    def stop(self, timeout_s: float = 5.0) -> None:
        """Send no more, and wait (at most ``timeout_s``) until the ones in flight have
        been answered: the Python backend must not unload with them under way."""
        deadline = self._clock() + timeout_s
        with self._cond:
            self._stopping = True
            self._due_at = None
            self._cond.notify_all()
            while self.in_flight and self._clock() < deadline:
                self._cond.wait(max(0.0, deadline - self._clock()))
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, deadline - self._clock()))

    def summary(self) -> str:
        return (f" waker: after_us={1e6 * self.after_s:.0f} sent={self.sent} "
                f"refused={self.refused}")


def _daemon_thread(target: Callable[[], None]) -> None:
    threading.Thread(target=target, name="explicit-wake-request", daemon=True).start()
