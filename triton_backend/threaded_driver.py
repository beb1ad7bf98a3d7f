"""The threaded intakes' driver (release, gather): ``execute()`` queues, a scheduler
thread steps, responder threads answer.

    execute():          date the call -> decode -> submit -> (gather: park) -> return None
    scheduler thread:   step -> run -> hand the answers to the responders -> wait

Each request's ``answers.Ticket`` sends through the ``Responder``, so the scheduler thread
goes on to the next batch while the answers travel. ``execute()`` returns None: the
requests are the plugin's from then on (a stub crash loses them; intake.py says so).

Invariants:

* every request ends with exactly one answer (``Ticket.answer``), a malformed one
  at once (INVALID_ARG);
* the scheduler thread never dies of a step's exception (counted: ``loop_errors_total``);
* it stops only once the model is stopping and the queue is empty (``stop``).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Sequence

from .answers import Ticket
from .decode import decode_call
from .responder import Responder
from .runner import Runner

CANCEL_SWEEP_PERIOD_S = 1.0
CANCEL_SWEEP_MAX = 256  # each is_cancelled() is a message to the server


class ThreadedDriver:
    """Drives a model whose intake is threaded (``intake.Intake``: release or gather)."""

    def __init__(self, runner: Runner, intake, responder: Responder, default_sla_ms: float,
                 control_period_s: float, profiler=None, decode_fault_token: int = 0):
        self.runner = runner
        self.intake = intake
        self.responder = responder
        self._default_sla_ms = default_sla_ms
        self._control_period_s = control_period_s
        self._profiler = profiler  # cProfile of the scheduler thread, or None
        self._decode_fault_token = decode_fault_token  # a test hook, 0 = off
        self._ids = itertools.count()
        self._last_cancel_sweep = 0.0
        self.cpu_s = 0.0  # the scheduler thread's CPU seconds, once it ended
        self._thread = threading.Thread(target=self._run_thread, name="explicit-scheduler",
                                        daemon=True)
        self._thread.start()

    # -- execute() ----------------------------------------------------------------------
    def execute(self, requests: Sequence) -> None:
        """Queue the call's requests for the scheduler thread and return (gather: once the
        batch in flight has ended)."""
        runner = self.runner
        now = time.monotonic()
        arrival = self.intake.call_arrival(now, len(requests))
        tickets = [Ticket(r, self.responder, sender=r.get_response_sender()) for r in requests]
        call = decode_call(requests, runner.contract, tickets, arrival, now,
                           self._default_sla_ms, self._ids,
                           fault_token=self._decode_fault_token)
        runner.answers.refuse_each(call.invalid, "invalid_input")
        runner.answers.refuse_each(call.failed, "decode_failed")
        runner.answers.refuse_each(call.expired, "timed_out")
        runner.timeouts.watch(call.timed)
        generation = self.intake.generation()  # a release from now on lets it return
        with runner.cond:  # one wake-up for the whole call
            refused = runner.submit_locked(call.queued, now)
            self.intake.call_queued_locked()
            runner.cond.notify()
        runner.refuse(*refused)
        self.intake.after_queued(len(requests), call.min_sla_ms, generation)
        return None

    # -- the scheduler thread -----------------------------------------------------------
    def _run_thread(self) -> None:
        """Supervised loop until stopping with an empty queue: an exception in one step
        is logged and counted, never fatal."""
        if self._profiler is not None:
            self._profiler.enable()  # this thread only
        try:
            while True:
                try:
                    if not self._step():
                        return
                except Exception:
                    self.runner.step_failed()
                    time.sleep(0.01)
        finally:
            if self._profiler is not None:
                self._profiler.disable()
            self.cpu_s = time.thread_time()

    def _step(self) -> bool:
        runner = self.runner
        ran = runner.step(flush=runner.stopping)
        now = ran.now_s
        if ran.started_s is not None:
            with runner.cond:  # the device is free again: gather may let a call go
                self.intake.batch_finished_locked(ran.started_s)
        runner.flush_metrics_if_due(now, ran.sidecar_health)
        if ran.step.batch:
            return True
        if runner.stopping:
            return False
        self._sweep_cancelled(now)
        # Wake for the engine's own time, an arrival, or the next decision period.
        timeout = self._control_period_s
        if ran.step.wake_at_s is not None:
            timeout = min(timeout, ran.step.wake_at_s - now)
        with runner.cond:
            if runner.arrivals == ran.arrivals_seen:  # nothing arrived since the step
                self.intake.idle_locked()  # gather: let parked calls go
                runner.cond.wait(timeout=timeout)
        runner.log.maybe_stats(time.monotonic(), self.intake.summary())
        return True

    def _sweep_cancelled(self, now: float) -> None:
        """Once a second, take cancelled requests out of the queue (the oldest first)."""
        if now - self._last_cancel_sweep < CANCEL_SWEEP_PERIOD_S:
            return
        self._last_cancel_sweep = now
        runner = self.runner
        with runner.cond:
            oldest = runner.scheduler.peek(CANCEL_SWEEP_MAX)
        cancelled = [r.request_id for r in oldest if runner.is_cancelled(r)]
        if cancelled:
            with runner.cond:
                removed = runner.scheduler.remove(cancelled)
            # Each was seen cancelled just now and is out of the queue: answer it without
            # asking again (a second is_cancelled() that failed would read "no" and leave
            # it unanswered).
            runner.refuse(removed, "cancelled", "request cancelled by the client")

    # -- unload -------------------------------------------------------------------------
    def stop(self, timeout_s: float) -> None:
        """The model is stopping (``Runner.stopping`` set): nothing parks any more, and
        the scheduler thread serves what is queued (it flushes) and ends."""
        with self.runner.cond:
            self.intake.stop_locked()
        self._thread.join(timeout=timeout_s)

    def close(self, timeout_s: float) -> None:
        """After the queue was drained: the responders send what they hold, then end."""
        self.responder.stop(timeout_s)

    def summary(self) -> str:
        return ""
