"""The engine's steps carried out inside the server, for both drivers.

``Runner`` holds one model's ``Engine`` behind the model's lock and does what the engine
never does: it answers what a step refused, runs the step's batch on the executor (in
process, or BLS to an inner model), answers each member, and brackets the batch
(``started`` / ``finished``). Intake hold's driver calls ``step`` from ``execute()``; the
threaded driver calls it from the scheduler thread. Neither calls back into the model.

Invariants:

* every request a step takes out of the queue leaves with exactly one answer
  (``Ticket.answer``): an exception in a step answers its requests INTERNAL, is logged
  and counted (``step_failed``), and never stops the driver;
* a batch is bracketed exactly once: ``finished(ok=False)`` when it never ended normally;
  else ``ended`` at once, ``observed`` while a later one runs (``deferred.Deferred``: a
  few batches' feedback together);
* the engine is only touched with ``cond`` held (the threaded intakes' arrivals and the
  hold model's metrics thread run beside the step);
* a batch on the executor past its bound (``watchdog.check``, called from the model's
  metrics thread) has its requests answered INTERNAL at once; when the executor
  returns, its results find them answered and are dropped.
"""

from __future__ import annotations

import functools
import threading
import time
import traceback
from typing import Callable, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

from scheduler_core.engine import Engine, Step
from scheduler_core.contract import refusal_message
from scheduler_core.request import QueuedRequest, Served

from .answers import (Answers, answer_all, embedding_response, embedding_slots,
                      outputs_response, retry_hint)
from .bls import call_timeout_s
from .deferred import Deferred
from .executors import launch
from .launch_first import LaunchFirst, Ran
from .sidecar_sample import Perception
from .stats_log import StatsLog
from .timeout_guard import TimeoutGuard
from .watchdog import Watchdog
from .control_metrics import ControlMetrics
from .metric_catalog import HISTOGRAM_PUBLISH_PERIOD_S, METRICS_PUBLISH_PERIOD_S
from .model_settings import CANCEL_CHECK_MIN_WAIT_S, FEEDBACK_BATCHES, FEEDBACK_MAX_AGE_PERIODS

WhileRunning = Callable[[float, float], None]  # host work beside a batch: (start, estimate ms)


class Runner(LaunchFirst):
    """Carries out one model's engine steps (see the module docstring)."""

    def __init__(self, model_name: str, engine: Engine, cond: threading.Condition,
                 answers: Answers, metrics: ControlMetrics, executor, contract,
                 perception: Perception, loop_fault_token: int = 0,
                 clock: Callable[[], float] = time.monotonic,
                 batch_timeout_floor_s: float = 5.0, step_perception: Perception | None = None):
        self.model_name = model_name
        self.engine = engine
        self.scheduler = engine.policy  # the explicit-control Scheduler
        # A device emulated slower by its time scale slows its clients' patience alike
        # (CANCEL_CHECK_MIN_WAIT_S); a faster one does not speed it up.
        self.wait_scale = max(1.0, self.scheduler.estimator.time_scale)
        self.cond = cond  # guards the engine; the scheduler thread waits on it
        self.answers = answers
        self.metrics = metrics
        self.executor = executor
        self.contract = contract  # None: the INPUT_IDS -> EMBEDDING contract
        self.perception = perception  # what ``perceive`` applies
        # What a step applies before it decides (intake hold's: none; see ExplicitModel)
        self.step_perception = step_perception or perception
        # Test hook, off unless configured: a request holding this token id makes the
        # step fail after its batch was taken (proves nothing is stranded).
        self._loop_fault_token = loop_fault_token
        self._clock = clock
        self.stopping, self.arrivals, self.loop_errors = False, 0, 0
        self.log = StatsLog(model_name, self.scheduler)
        self._last_flush = self._last_histograms = 0.0
        self._flush_lock = threading.Lock()  # one metrics flush at a time
        self.watchdog = Watchdog(model_name, answers, metrics, batch_timeout_floor_s)
        self._began = False  # the engine heard the running step's batch started (_start)
        self._fed: Sequence[QueuedRequest] = ()  # what the engine hears the batch ran
        self._ended_s: float | None = None  # the last batch's end, not heard yet
        self.executor_s = 0.0  # the running batch's run on the executor (``Ran.executor_s``)
        self._device_free_s: float | None = None  # where it ended (``_executor_ran``)
        self.timeouts = TimeoutGuard(answers, model_name, clock)
        # Finished batches' feedback (``_observe``), run together (FEEDBACK_BATCHES): its
        # windows are read at perception's ticks, its refit moves estimates a smoothed step.
        self.deferred = Deferred(
            self.step_failed, FEEDBACK_BATCHES,
            FEEDBACK_MAX_AGE_PERIODS * self.scheduler.control.perception_period_ms / 1000.0)
        self._decided_s = -float("inf")  # the last step's time (``_decide``)
        self._running: Step | None = None  # the step whose batch runs (``running``)

    # -- arrivals ---------------------------------------------------------------------
    def submit_locked(self, queued: list[QueuedRequest], now: float
                      ) -> tuple[list[QueuedRequest], str, str]:
        """Queue a call's requests (``cond`` held); returns those refused at the door,
        with the ``ENDINGS`` kind and the message to answer them with (``refuse``)."""
        if self.stopping:
            return queued, "shutting_down", ("model is shutting down; retry on another "
                                             "instance")
        left = self.engine.submit(queued, now)
        self.arrivals += len(queued) - len(left)
        return left, "queue_full", (f"queue full: {self.scheduler.queue_full_message()}; "
                                    f"{retry_hint(self.scheduler.backlog_ms())}")

    def submit(self, queued: list[QueuedRequest], now: float) -> None:
        """Queue a call's requests; answer the ones refused at the door."""
        with self.cond:
            refused = self.submit_locked(queued, now)
            self.cond.notify()
        self.refuse(*refused)

    def refuse(self, requests: Sequence[QueuedRequest], kind: str, message: str) -> None:
        self.answers.refuse([r.handle for r in requests], kind, message)

    def perceive(self, now: float) -> float:
        """Apply the sidecar's sample (``cond`` held); its health for the metric."""
        sample, health = self.perception.read(now)
        self.engine.perceive(sample)
        return health

    # -- one step ---------------------------------------------------------------------
    def step(self, flush: bool, while_running: WhileRunning | None = None,
             decided: Ran | None = None) -> Ran:
        """Take one engine step, answer what it refused and run its batch (the scheduler
        thread; or intake hold's ``execute()`` with ``flush``: nothing arrives until that
        call has answered its requests, so waiting cannot pay); ``while_running``: the
        caller's work while the batch is on the device; ``decided``: the step
        ``decide_ahead`` took while the last batch ran (its refusals answered), run now."""
        ran = decided if decided is not None else self._decide(None, flush)
        if not ran.step.batch:
            return ran
        started = self._run(ran.step, ran.now_s, while_running)
        return Ran(ran.now_s, ran.step, ran.arrivals_seen, started, ran.sidecar_health,
                   self.executor_s)

    @property
    def running(self) -> Step | None:
        """The step whose batch is on the executor (``_run``; None between batches)."""
        return self._running

    def decide_ahead(self, end_s: float) -> Ran | None:
        """Intake hold's next step, taken while a batch of its call is on the device, at
        ``end_s`` (its estimated end; nothing arrives during a hold call, so only the
        clock differs): launched once the running batch returns (``step``'s ``decided``),
        so the device does not wait for the decision. The engine hears the running
        batch's end before the next decision after it; until then the busy time runs to
        ``end_s``. None where the step took no batch (its refusals are answered)."""
        ran = self._decide(end_s, True)
        return ran if ran.step.batch else None

    def _decide(self, now: float | None, flush: bool) -> Ran:
        """One engine step at ``now`` (None: the clock's, the last batch's end heard
        first; else a running batch's estimated end; never before the last step's, which
        may have been taken ahead), its refusals answered; its batch not run."""
        with self.cond:
            device_free = now is None
            now = max(self._clock() if device_free else now, self._decided_s)
            self._decided_s = now
            sample, health = self.step_perception.read(now)
            if device_free:
                self._hear_ended()
            step = self.engine.step(now, flush, sample)
            arrivals_seen = self.arrivals
            backlog_ms = self.scheduler.backlog_ms() if step.refused else 0.0
        try:
            self._refuse_shed(step.refused, backlog_ms + step.estimated_ms)
            self.log.zone_change(step.decision.zone, step.decision.mode, step.former, now)
        except Exception:  # counted and logged; the batch still runs
            self.step_failed()
        finally:  # a step never strands what it took out of the queue
            self.refuse([r for r, _ in step.refused if not r.handle.answered], "step_failed",
                        "scheduler loop failed while handling this request")
        return Ran(now, step, arrivals_seen, None, health)

    def _refuse_shed(self, refused, backlog_ms: float) -> None:
        """A step's refusals, each with its own numbers (``Refusal.detail``) and when to
        retry: the queue left and the batch just formed, by the estimate."""
        hint = retry_hint(backlog_ms)
        self.answers.refuse_each([(r.handle, f"{refusal_message(reason)}; {hint}")
                                  for r, reason in refused], "deadline_infeasible")

    def take_planned(self, batch: list[QueuedRequest],
                     while_second: WhileRunning | None = None) -> list[Ran] | None:
        """Intake hold's call as handed over, or as the decision's two batches known at
        hand-over (``Engine.take_planned``), back to back (``while_second``: host work
        beside the second); None: nothing ran, ``submit`` and ``step`` instead."""
        with self.cond:
            now = self._clock()
            sample, health = self.step_perception.read(now)
            self._hear_ended()
            steps = None if self.stopping else self.engine.take_planned(batch, now, sample)
            if steps is None:
                return None
            self.arrivals += len(batch)
        d = steps[0].decision
        self.log.zone_change(d.zone, d.mode, self.scheduler.formers[d.mode].name, now)
        ran = []
        for i, step in enumerate(steps):  # the second's ``now``: when the first returned
            started = self._run(step, now, while_second if i else None)
            ran.append(Ran(now, step, self.arrivals, started, health, self.executor_s))
            now = self._clock()
        return ran

    def _run(self, step: Step, now: float, while_running: WhileRunning | None = None
             ) -> float:
        """Run ``step``'s batch and bracket it; every member ends answered. Returns when
        it started. An exception is counted and logged (``step_failed``), not raised."""
        batch: Sequence[QueuedRequest] = step.batch
        started, finished, self._began, self._fed, self._running = now, False, False, batch, step
        self.executor_s, self._device_free_s = 0.0, None
        try:
            batch = self._drop_cancelled(batch, now)
            started = self._clock()
            if self._loop_fault_token and any(
                    self._loop_fault_token in r.handle.input_ids for r in batch):
                self._fed = batch
                self._start(batch, started)
                raise RuntimeError("injected scheduler-loop fault (loop_fault_token)")
            self._run_batch(batch, started, step.former, step.estimated_ms, while_running)
            finished = True
        except Exception:  # its members are answered below (INTERNAL); the driver goes on
            self.step_failed()
        finally:
            unanswered = [r for r in step.batch if not r.handle.answered]
            if unanswered:
                self.refuse(unanswered, "step_failed",
                            "scheduler loop failed while handling this request")
            if self._began and not finished:  # the batch never finished normally
                self._finished(self._fed, started, ok=False)
            self._fed, self._running = (), None  # nor its Triton requests kept past it
        return started

    def _hear_ended(self) -> None:
        """(``cond`` held) The last batch's end to the engine (``Engine.ended``) before
        anything decides, starts a batch or reads the figures, not at the batch's end: the
        device does not wait for it (a launch first reads none of it)."""
        if self._ended_s is not None:
            self.engine.ended(self._ended_s)
            self._ended_s = None

    def _start(self, batch: Sequence[QueuedRequest], started: float) -> None:
        """The engine hears ``batch`` started at ``started``, once it is on the device
        (or failed to get there): its bookkeeping runs beside the device, not before it."""
        with self.cond:
            self._hear_ended()
            self.engine.started(batch, started)
        self._began = True

    def refuse_queued(self, kind: str, message: str, call_size: int = 0) -> int:
        """Take everything still queued out and answer each with ``message``; a
        ``deadline_infeasible`` refusal also enters the scheduler's figures (with the
        ``call_size`` they came in: its late share, ``Scheduler.refuse_queued``)."""
        with self.cond:
            backlog_ms = self.scheduler.backlog_ms()
            taken = (self.scheduler.refuse_queued(self._clock(), call_size)
                     if kind == "deadline_infeasible" else self.engine.drain())
        if kind == "deadline_infeasible":
            message = f"{message}; {retry_hint(backlog_ms)}"
        self.refuse(taken, kind, message)
        return len(taken)

    def step_failed(self) -> None:
        """A step raised (its requests were answered): count and log it."""
        self.loop_errors += 1
        self.metrics.on_event("loop_errors_total")
        pb_utils.Logger.log_error(
            f"{self.model_name}: scheduler step failed (#{self.loop_errors}):\n"
            f"{traceback.format_exc()}")

    # -- cancellation -----------------------------------------------------------------
    @staticmethod
    def is_cancelled(req: QueuedRequest) -> bool:
        try:
            return bool(req.handle.request.is_cancelled())
        except Exception:  # asking costs a message to the server; a failure means "no"
            return False

    def _drop_cancelled(self, batch: Sequence[QueuedRequest], now: float
                        ) -> list[QueuedRequest]:
        """Answer requests the client cancelled (gRPC cancel) instead of computing them
        (asked of those that waited CANCEL_CHECK_MIN_WAIT_S x ``wait_scale``); leave out those
        answered already (a timeout that passed while they queued)."""
        kept, cancelled = [], []
        min_wait_s = CANCEL_CHECK_MIN_WAIT_S * self.wait_scale
        for r in batch:
            if r.handle.answered:  # its timeout passed while it queued (timeout_guard)
                continue
            waited = now - min(r.arrival_s, r.handle.earliest_s)
            if waited >= min_wait_s and self.is_cancelled(r):
                cancelled.append(r)
            else:
                kept.append(r)
        self.refuse(cancelled, "cancelled", "request cancelled by the client")
        return kept

    # -- running a batch --------------------------------------------------------------
    def _run_batch(self, batch: Sequence[QueuedRequest], started: float, former: str,
                   estimated_ms: float = 0.0, while_running: WhileRunning | None = None
                   ) -> None:
        """``batch`` on the executor, answered and bracketed (the engine hears ``_fed``)."""
        self._fed = batch
        if not batch:  # every member was cancelled
            self._start(self._fed, started)
            self._finished(self._fed, started, ok=False)
            return
        succeeded = False
        running = self.watchdog.watch(batch, started, estimated_ms)
        try:
            try:
                timeout_s = call_timeout_s(max(r.deadline_s for r in batch), started,
                                           estimated_ms, running.bound_s)
                launched_s = self._clock()
                flight = self._launch_executor(batch, timeout_s)
            finally:  # on the device, or it failed to get there
                self._start(self._fed, started)
            # The device runs the batch: the host does what can wait for it meanwhile.
            self.deferred.run_due(started)
            if while_running is not None:
                self.deferred.guarded(while_running, started, estimated_ms)
            # The EMBEDDING contract's responses are built while the device runs.
            slots = self.contract is None and embedding_slots(self.executor, len(batch))
            out = flight.result()
            builders = slots.responses(out) if slots else self._builders(out)
            self._executor_ran(flight, launched_s)
            succeeded = True
        except Exception as exc:  # fail this batch's requests, keep the driver going
            self._batch_failed([r.handle for r in batch], exc)
        finally:
            self.watchdog.clear()
        if running.hung:  # the watchdog answered its requests; the late results are dropped
            self._hung_returned(started)
            succeeded = False
        elif succeeded:  # handed to the responder, or returned with the call
            answer_all([r.handle for r in batch], builders)
        else:
            self.metrics.on_event("batch_failures_total")
        self._batch_over(self._fed, former, started, succeeded)

    def _observe(self, served: Served, former: str, started: float, done: float) -> None:
        """A batch that succeeded, its deferred bookkeeping: metrics, the engine's feedback."""
        self.metrics.on_batch(served.seq_lens, former)
        self.metrics.on_served(served.slas_ms, served.arrivals_s, started, done)
        with self.cond:
            self.engine.observed(served, started, done, True)

    def metrics_due_in_s(self, now: float, publish: bool) -> float:
        """Seconds until the metrics thread has work: the watchdog's next look
        (``Watchdog.due_in_s``) and, with ``publish``, the next metrics flush."""
        due_s = self.watchdog.due_in_s(now)
        return min(due_s, self._last_flush + METRICS_PUBLISH_PERIOD_S - now) if publish else due_s

    def _finished(self, batch: Sequence[QueuedRequest], started: float, ok: bool) -> None:
        with self.cond:
            self._hear_ended()
            self.engine.finished(batch, started, self._clock(), ok)

    def _launch_executor(self, batch: Sequence[QueuedRequest], timeout_s: float):
        """Start ``batch`` on the executor (``executors.launch``): its flight."""
        contract = self.contract is not None  # None: the INPUT_IDS -> EMBEDDING contract
        return launch(self.executor, [r.handle.decoded if contract else r.handle.input_ids
                                      for r in batch], timeout_s)

    def _builders(self, outputs) -> list:
        """One response builder per request of a batch's outputs (built where it is sent);
        an EMBEDDING builder holds its request's row of the batch's array, as a view."""
        if self.contract is not None:
            return [functools.partial(outputs_response, out) for out in outputs]
        rows = np.asarray(outputs)
        return [functools.partial(embedding_response, rows[i:i + 1]) for i in range(len(rows))]

    # -- metrics -------------------------------------------------------------------
    def flush_metrics_if_due(self, now: float, sidecar_health: float) -> None:
        """Publish the control metrics once per ``METRICS_PUBLISH_PERIOD_S``, the
        histograms' series once per ``HISTOGRAM_PUBLISH_PERIOD_S``; a flush already running
        elsewhere is not waited for."""
        if now - self._last_flush < METRICS_PUBLISH_PERIOD_S:
            return
        if not self._flush_lock.acquire(blocking=False):
            return
        try:
            self.deferred.run_all()  # the counts as of the last batch that ended
            self._last_flush = now
            histograms = now - self._last_histograms >= HISTOGRAM_PUBLISH_PERIOD_S
            if histograms:
                self._last_histograms = now
            with self.cond:
                self._hear_ended()
                stats = self.scheduler.stats(now)
            self.metrics.flush(stats, sidecar_health, histograms)
        finally:
            self._flush_lock.release()
