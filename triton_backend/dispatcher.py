"""The scheduler's driver inside the server: one decision, carried out.

``Dispatcher`` queues a call's requests with ``scheduler_core``'s ``Scheduler``, asks it
for a decision (``decide``), answers what it sheds, runs the batch it forms on the
executor and answers each member exactly once. Intake hold calls ``dispatch_once`` from
``execute()`` until the call's requests are answered; the threaded intakes run
``run_thread`` on the scheduler thread. Answers go into intake hold's call list, or to
the ``Responder``.
"""

from __future__ import annotations

import functools
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

from scheduler_core.policy import ZONE_NAMES, decide, refusal_message, wake_time
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler

from .control_metrics import ControlMetrics
from .metric_catalog import AS_HANDED, METRICS_PUBLISH_PERIOD_S
from .model_settings import CANCEL_CHECK_MIN_WAIT_S
from .responder import Responder
from .responses import embedding_response, error, outputs_response, send
from .tensor_contract import GenericRequest

STATS_LOG_PERIOD_S = 5.0
CANCEL_SWEEP_PERIOD_S = 1.0
CANCEL_SWEEP_MAX = 256  # each is_cancelled() is a message to the server


@dataclass
class Pending:
    """What the adapter keeps for one queued request (the core sees it as ``handle``)."""

    request: Any  # kept alive until answered
    sender: Any
    input_ids: np.ndarray
    answered: bool = False
    decoded: GenericRequest | None = None  # any other tensor contract: the whole request
    # intake: hold - the running execute() call's response list and this request's place
    # in it: its answer is returned from that call (none is sent from another thread).
    responses: list | None = None
    slot: int = -1
    # intake hold: the earliest it can have arrived (the previous call's start): whether
    # its client may have cancelled it is asked by this date, not the arrival estimate
    earliest_s: float = float("inf")


def reply(handle: Pending, response) -> None:
    """Answer now, from this thread: into the running call's list (intake hold), or sent."""
    if handle.responses is not None:
        handle.responses[handle.slot] = response
    else:
        send(handle.sender, response)


class Dispatcher:
    """Carries out the scheduler's decisions for one model. Every request it takes out of
    the queue leaves with exactly one response; an exception in one step fails that
    step's requests (INTERNAL), is logged and counted, and never stops the loop."""

    def __init__(self, model_name: str, scheduler: Scheduler, cond: threading.Condition,
                 intake, metrics: ControlMetrics, executor, contract,
                 perceive: Callable[[float], float], responder: Responder | None,
                 control_period_s: float, loop_fault_token: int = 0):
        self.model_name = model_name
        self.scheduler = scheduler
        self.cond = cond  # guards the scheduler; the scheduler thread waits on it
        self.intake = intake
        self.metrics = metrics
        self.executor = executor
        self.contract = contract  # None: the INPUT_IDS -> EMBEDDING contract
        self._perceive = perceive  # feeds the sidecar's sample in (under the lock)
        self._responder = responder  # None: intake hold returns its answers
        self._control_period_s = control_period_s
        # Test hook, off unless configured: a request holding this token id makes the
        # step fail after its batch was taken (proves nothing is stranded).
        self._loop_fault_token = loop_fault_token
        self.stopping = False
        self.arrivals = 0
        self.loop_errors = 0
        self._last_zone = None
        self._last_stats_log = 0.0
        self._last_flush = 0.0
        self._flush_lock = threading.Lock()  # one metrics flush at a time
        self._last_cancel_sweep = 0.0

    # -- arrivals ---------------------------------------------------------------------
    def submit(self, queued: list[QueuedRequest], now: float) -> None:
        """Queue a call's requests with the scheduler (held lock: one wake-up for the whole
        call); the ones refused at the door are answered UNAVAILABLE."""
        refused: list[tuple[QueuedRequest, str, str]] = []
        with self.cond:
            if self.stopping:
                refused = [(q, "model is shutting down", "shutting_down") for q in queued]
            else:
                left = self.scheduler.submit_all(queued, now)
                message = f"queue full: {self.scheduler.queue_full_message()}"
                refused = [(q, message, "queue_full") for q in left]
                self.arrivals += len(queued) - len(refused)
            self.intake.call_queued_locked()
            self.cond.notify()
        for q, message, reason in refused:
            self.metrics.on_rejected(reason)
            q.handle.answered = True
            reply(q.handle, error(message, pb_utils.TritonError.UNAVAILABLE))

    def answer(self, req: QueuedRequest, response) -> None:
        """The one final response of a queued request (a second one is never sent).
        ``response`` is a response or a function that builds one: intake hold keeps it for
        the call's return; otherwise a responder thread builds and sends it."""
        if not req.handle.answered:
            req.handle.answered = True
            if req.handle.responses is not None:
                req.handle.responses[req.handle.slot] = response
            else:
                self._responder.put(req.handle.sender, response)

    # -- one decision -----------------------------------------------------------------
    def dispatch_once(self, flush: bool):
        """Ask the scheduler once, answer what it sheds and run the batch it forms (the
        scheduler thread, or intake hold's execute() with ``flush``: nothing arrives until
        that call has answered its requests, so waiting for arrivals cannot pay). Returns
        (now, the decision, the arrivals counted when it was made)."""
        with self.cond:
            now = time.monotonic()
            sidecar_health = self._perceive(now)
            decision = decide(self.scheduler, now, flush=flush)
            arrivals_seen = self.arrivals
        owed = [*decision.batch, *(r for r, _ in decision.rejected)]
        started = None
        try:
            if decision.rejected:
                self.metrics.on_rejected("deadline_infeasible", len(decision.rejected))
            for req, reason in decision.rejected:
                self.answer(req, error(refusal_message(reason),
                                       pb_utils.TritonError.UNAVAILABLE))
            self._log_zone_change(decision.zone, decision.mode, decision.former, now)
            if self.intake.threaded:  # intake hold: its metrics thread publishes instead
                self.flush_metrics_if_due(now, sidecar_health)
            if decision.batch:
                batch = self._drop_cancelled(decision.batch, now)
                with self.cond:
                    started = time.monotonic()
                    self.scheduler.batch_started(batch, started)
                if self._loop_fault_token and any(
                        self._loop_fault_token in r.handle.input_ids for r in batch):
                    raise RuntimeError("injected scheduler-loop fault (loop_fault_token)")
                self._run_batch(batch, started, decision.former)
                started = None
        finally:
            for r in owed:
                if not r.handle.answered:
                    self.answer(r, error("scheduler loop failed while handling this request",
                                         pb_utils.TritonError.INTERNAL))
            if started is not None:  # the batch never finished normally
                self._batch_finished(batch, started, succeeded=False)
        return now, decision, arrivals_seen

    def run_as_handed(self, batch: list[QueuedRequest]) -> tuple[float, float] | None:
        """Intake hold's call as one batch, as handed over, where the scheduler says that
        is the batch it would form anyway (``Scheduler.takes_as_handed``): (when it
        started, its estimate in ms); None: nothing ran, submit and decide instead. Every
        member leaves with exactly one answer, as in ``dispatch_once``; a failure of the
        step is logged and counted (``step_failed``), never raised."""
        now = time.monotonic()
        with self.cond:
            self._perceive(now)
            estimated_ms = None if self.stopping else self.scheduler.takes_as_handed(now, batch)
            if estimated_ms is None:
                return None
            self.arrivals += len(batch)
            state = self.scheduler.loop.state
            dispatched = time.monotonic()
            self.scheduler.batch_started(batch, dispatched)
        finished = False
        try:
            self._log_zone_change(state.zone, state.mode,
                                  self.scheduler.formers[state.mode].name, now)
            batch = self._drop_cancelled(batch, now)
            if self._loop_fault_token and any(
                    self._loop_fault_token in r.handle.input_ids for r in batch):
                raise RuntimeError("injected scheduler-loop fault (loop_fault_token)")
            self._run_batch(batch, dispatched, AS_HANDED)
            finished = True
        except Exception:  # its members are answered below (INTERNAL); the call goes on
            self.step_failed()
        finally:
            for r in batch:
                if not r.handle.answered:
                    self.answer(r, error("scheduler loop failed while handling this request",
                                         pb_utils.TritonError.INTERNAL))
            if not finished:  # the batch never finished normally
                self._batch_finished(batch, dispatched, succeeded=False)
        return dispatched, estimated_ms

    def hand_over_expired(self, count: int, queued: int) -> None:
        """A hand-over's requests refused because their client timeout passed in
        Triton's queue: late, for the scheduler's late share
        (``Scheduler.hand_over_expired``)."""
        with self.cond:
            self.scheduler.hand_over_expired(time.monotonic(), count, queued)

    def call_overran(self, refused: int, handled: int) -> None:
        """Intake hold's call is past its overload budget (``Scheduler.call_overran``)."""
        with self.cond:
            self.scheduler.call_overran(refused, handled)

    def answer_queued(self, message: str, code, refused: bool = False,
                      call_size: int = 0) -> None:
        """Take everything still queued out and answer each with the error ``message``
        (``code``); ``refused``: counted as refusals (deadline_infeasible), in the
        scheduler's figures and the metrics (and, with the ``call_size`` they came in, in
        its late share: ``Scheduler.refuse_queued``)."""
        with self.cond:
            taken = (self.scheduler.refuse_queued(time.monotonic(), call_size) if refused
                     else self.scheduler.drain())
        if refused and taken:
            self.metrics.on_rejected("deadline_infeasible", len(taken))
        for r in taken:
            self.answer(r, error(message, code))

    def step_failed(self) -> None:
        """A scheduling step raised (its requests were answered): count and log it."""
        self.loop_errors += 1
        self.metrics.on_event("loop_errors_total")
        pb_utils.Logger.log_error(
            f"{self.model_name}: scheduler step failed (#{self.loop_errors}):\n"
            f"{traceback.format_exc()}")

    # -- the scheduler thread (threaded intakes) --------------------------------------
    def run_thread(self) -> None:
        """Supervised loop until stopping with an empty queue: an exception in one step
        is logged and counted, never fatal."""
        while True:
            try:
                if not self._step():
                    return
            except Exception:
                self.step_failed()
                time.sleep(0.01)

    def _step(self) -> bool:
        now, decision, arrivals_seen = self.dispatch_once(flush=self.stopping)
        if decision.batch:
            return True
        if self.stopping:
            return False
        self._sweep_cancelled(now)
        # Wake for the scheduler's own time, an arrival, or the next decision period.
        timeout = self._control_period_s
        wake_at = wake_time(decision, now)
        if wake_at is not None:
            timeout = min(timeout, wake_at - now)
        with self.cond:
            if self.arrivals == arrivals_seen:  # nothing arrived since the decision
                self.intake.idle_locked()  # gather: let parked calls go
                self.cond.wait(timeout=timeout)
        self.maybe_log_stats(time.monotonic())
        return True

    # -- cancellation -----------------------------------------------------------------
    @staticmethod
    def _is_cancelled(req: QueuedRequest) -> bool:
        try:
            return bool(req.handle.request.is_cancelled())
        except Exception:  # asking costs a message to the server; a failure means "no"
            return False

    def _drop_cancelled(self, batch: Sequence[QueuedRequest], now: float
                        ) -> list[QueuedRequest]:
        """Answer requests the client cancelled (gRPC cancel) instead of computing them
        (asked of those that waited CANCEL_CHECK_MIN_WAIT_S or more)."""
        kept = []
        for r in batch:
            waited = now - min(r.arrival_s, r.handle.earliest_s)
            if waited >= CANCEL_CHECK_MIN_WAIT_S and self._is_cancelled(r):
                self._answer_cancelled(r)
            else:
                kept.append(r)
        return kept

    def _answer_cancelled(self, r: QueuedRequest) -> None:
        self.metrics.on_event("cancelled_requests_total")
        self.answer(r, error("request cancelled by the client", pb_utils.TritonError.CANCELLED))

    def _sweep_cancelled(self, now: float) -> None:
        """Once a second, take cancelled requests out of the queue (the oldest first)."""
        if now - self._last_cancel_sweep < CANCEL_SWEEP_PERIOD_S:
            return
        self._last_cancel_sweep = now
        with self.cond:
            oldest = self.scheduler.peek(CANCEL_SWEEP_MAX)
        cancelled = [r.request_id for r in oldest if self._is_cancelled(r)]
        if cancelled:
            with self.cond:
                removed = self.scheduler.remove(cancelled)
            # Each was seen cancelled just now and is out of the queue: answer it without
            # asking again (a second is_cancelled() that failed would read "no" and leave
            # it unanswered).
            for r in removed:
                self._answer_cancelled(r)

    # -- running a batch --------------------------------------------------------------
    def _run_batch(self, batch: Sequence[QueuedRequest], started: float, former: str) -> None:
        if not batch:  # every member was cancelled
            self._batch_finished(batch, started, succeeded=False)
            return
        succeeded = False
        try:
            builders = self._run_executor(batch)
            succeeded = True
        except Exception as exc:  # fail this batch's requests, keep the loop
            pb_utils.Logger.log_error(f"{self.model_name}: batch of {len(batch)} failed: {exc}")
            for r in batch:
                self.answer(r, error(f"inference failed: {exc}", pb_utils.TritonError.INTERNAL))
        self.metrics.on_batch([r.seq_len for r in batch], former)
        if succeeded:
            for r, build in zip(batch, builders):
                self.answer(r, build)
            done = time.monotonic()  # handed to the responder, or returned with the call
            self.metrics.on_served([r.sla_ms for r in batch], [r.arrival_s for r in batch],
                                   started, done)
        else:
            self.metrics.on_event("batch_failures_total")
        self._batch_finished(batch, started, succeeded)

    def _batch_finished(self, batch: Sequence[QueuedRequest], started: float,
                        succeeded: bool) -> None:
        """The device is free again (gather: a parked call may return, see intake.py)."""
        with self.cond:
            self.scheduler.batch_finished(batch, started, time.monotonic(), succeeded)
            self.intake.batch_finished_locked(started)

    def _run_executor(self, batch: Sequence[QueuedRequest]) -> list:
        """Run ``batch``; one response builder per request (built where it is sent)."""
        if self.contract is None:
            embeddings = self.executor.run([r.handle.input_ids for r in batch])
            return [functools.partial(embedding_response, e) for e in embeddings]
        outputs = self.executor.run([r.handle.decoded for r in batch])
        return [functools.partial(outputs_response, o) for o in outputs]

    # -- metrics and logs -------------------------------------------------------------
    def flush_metrics_if_due(self, now: float, sidecar_health: float) -> None:
        """Publish the control metrics once per ``METRICS_PUBLISH_PERIOD_S``; a flush
        already running elsewhere is not waited for."""
        if now - self._last_flush < METRICS_PUBLISH_PERIOD_S:
            return
        if not self._flush_lock.acquire(blocking=False):
            return
        try:
            self._last_flush = now
            with self.cond:
                stats = self.scheduler.stats(now)
            self.metrics.flush(stats, sidecar_health)
        finally:
            self._flush_lock.release()

    def _log_zone_change(self, zone: int, mode: str, former: str, now: float) -> None:
        key = (zone, mode, former)
        if key != self._last_zone:
            self._last_zone = key
            s = self.scheduler.stats(now)
            pb_utils.Logger.log_info(
                f"{self.model_name}: zone={ZONE_NAMES[zone]} mode={mode} "
                f"former={former} "
                f"score={s.zone_score:.2f} utilization={s.utilization:.2f} "
                f"queue_depth={s.queue_depth} p99_cv={s.p99_cv:.2f} window_ms={s.window_ms:.2f}")

    def maybe_log_stats(self, now: float) -> None:
        if now - self._last_stats_log < STATS_LOG_PERIOD_S:
            return
        self._last_stats_log = now
        s = self.scheduler.stats(now)
        if s.batches:
            pb_utils.Logger.log_info(
                f"{self.model_name}: zone={ZONE_NAMES[s.zone]} prewarmed={s.prewarmed} "
                f"window_ms={s.window_ms:.2f} utilization={s.utilization:.2f} "
                f"queue_depth={s.queue_depth} p99_ms={s.p99_ms:.1f} p99_cv={s.p99_cv:.2f} "
                f"observation_age_ms={s.observation_age_ms:.0f} batches={s.batches} "
                f"requests={s.requests} sla_met={s.sla_met} sla_missed={s.sla_missed} "
                f"rejected={s.rejected_infeasible} emergency={s.emergency_batches} "
                f"compensation={s.compensation_batches} cost_correction={s.cost_correction:.2f}"
                f"{self.intake.summary()}")

    def drain(self) -> None:
        """At unload: fail whatever is still queued (UNAVAILABLE)."""
        self.answer_queued("model unloaded before the request ran",
                           pb_utils.TritonError.UNAVAILABLE)
