"""The scheduler: the design's three control layers as a synchronous step function.

It implements ``policy.BatchingPolicy``; the caller (the Triton adapter, or the simulator)
owns the loop and the clock and drives it as ``contract.py`` describes. No I/O, no threads,
no clock reads: ``now_s`` is always passed in.

One ``schedule(now_s)`` reads as the design's layers, each in its own file:

1. perceive and decide - ``Controller.tick`` (controller.py): observations, the zone,
   the elastic window, compensation; it leaves a ``ControlState``;
2. shed - requests that can no longer make their deadline (entry_queue.py,
   ``infeasible_entries``), when the profile's ``infeasible_policy`` is ``reject``; again
   after a dispatch, for what must now wait for that batch too;
3. form - the batch former the mode calls for proposes a batch (formers.py);
4. dispatch or wait - the dispatch rule below: full, immediate (flush / compensation /
   emergency), the SLA guard, the elastic window, or the worth-its-wait rule.
"""

from __future__ import annotations

import math
from typing import Sequence

from .controller import Controller, Observation
from .cost_model import CostEstimator, LengthEstimates
from .as_handed import AsHandedRule
from .entry_queue import (SMALL_QUEUE, Entry, EntryQueue, infeasible_detail, infeasible_entries,
                          late_even_alone, take_fifo)
from .formers import BatchFormer, Candidate, make_former
from .overload import OverloadState
from .contract import BatchDecision, Mode, QueueFull, Reason, Refusal, RejectReason
from .profile import ControlConfig, HardwareProfile, SchedulerConfig
from .request import QueuedRequest, Served
from .scheduler_stats import SchedulerStats

__all__ = ["Scheduler", "SchedulerStats", "Observation", "BatchDecision", "QueueFull"]


class Scheduler(AsHandedRule):
    """Explicit-control batching over one device (one batch in flight at a time)."""

    @classmethod
    def from_profile(cls, profile: HardwareProfile, time_scale: float | None = None,
                     control: ControlConfig | None = None,
                     small_queue: int = SMALL_QUEUE, seed: int = 0) -> "Scheduler":
        """A scheduler with the profile's settings; ``time_scale`` scales the cost estimate
        (the emulated device's slow-down; default: the profile's own)."""
        scale = profile.emulation.time_scale if time_scale is None else time_scale
        estimator = CostEstimator(profile.cost_model, profile.emulation.cost_mode, scale)
        return cls(profile.scheduler, estimator, control or profile.control,
                   small_queue=small_queue, seed=seed)

    def __init__(self, cfg: SchedulerConfig, estimator: CostEstimator,
                 control: ControlConfig | None = None, start_s: float = 0.0,
                 small_queue: int = SMALL_QUEUE, seed: int = 0):
        """``small_queue``: up to this many queued requests the scans run in plain Python
        (cheaper there); above it, vectorised. Both decide identically: tests run one
        against the other by setting it to 0 or to a huge number."""
        self.cfg = cfg
        self.control = control or ControlConfig()
        self.estimator = estimator
        self.controller = Controller(cfg, self.control, start_s, seed)  # seed: see Controller
        self.small_queue = small_queue
        self._queue = EntryQueue()
        self._estimates = LengthEstimates(
            self.estimator, max(1, math.ceil(self.control.min_batch_fill * cfg.max_batch_size)),
            cfg.max_batch_tokens)
        ctl = self.control
        safe = ctl.safe_zone_batching
        if safe == "auto":
            safe = "length_aware" if estimator.cost_mode == "padded" else "fifo"
        self.formers: dict[Mode, BatchFormer] = {
            mode: make_former(name, cfg, ctl, estimator, small_queue)
            for mode, name in ((Mode.DEFAULT, safe), (Mode.EXPLICIT, ctl.explicit_former),
                               (Mode.EMERGENCY, ctl.emergency_former))}
        self.overload_former = make_former(ctl.overload_former, cfg, ctl, estimator, small_queue)
        self.overload = OverloadState(ctl, start_s)  # the late share (overload.py)
        self.counts = {"batches": 0, "requests": 0, "rejected_infeasible": 0,
                       "emergency_batches": 0, "compensation_batches": 0,
                       "explicit_batches": 0}

    # -- arrivals ---------------------------------------------------------------------
    def submit(self, request: QueuedRequest, now_s: float) -> None:
        """Queue a request; raises ``QueueFull`` when the queue is at its bound."""
        if len(self._queue) >= self.cfg.max_queued_requests:
            raise QueueFull(self.queue_full_message())
        alone, efficient = self._estimates(request.seq_len)
        logical_arrival = self.controller.on_arrival(now_s, request.sla_ms,
                                               alone * self.estimator.correction)
        self.overload.arrived()
        self._queue.append(Entry(request, logical_arrival, alone, efficient))

    def backlog_ms(self) -> float:
        """The device time the queue needs by the estimate (ms): each request's share of an
        efficient batch of its length, corrected. A refused client's retry-after hint."""
        return self.estimator.correction * sum(
            e.efficient_ms / self._estimates.efficient_batch(e.seq_len) for e in self._queue)

    def queued_run_ms(self) -> float:
        """How long the device needs for the queue by the estimate (ms): the queue in its
        order, cut into batches at ``max_batch_size`` and ``max_batch_tokens`` (padded
        to each batch's longest), each estimated whole, so each pays its launch. What a
        hold call still has to run (``HoldDriver._remaining_s``)."""
        cfg, estimate = self.cfg, self.estimator.estimate_ms
        rest, total = list(self._queue), 0.0
        while rest:  # take_fifo: the cut the FIFO former makes
            batch = take_fifo(rest, cfg.max_batch_size, cfg.max_batch_tokens)
            total += estimate([e.seq_len for e in batch])
            rest = rest[len(batch):]
        return total


    def queue_full_message(self) -> str:
        return f"queue holds max_queued_requests={self.cfg.max_queued_requests} requests"

    def submit_all(self, requests: Sequence[QueuedRequest], now_s: float
                   ) -> list[QueuedRequest]:
        """Queue a call's requests, all arrived at ``now_s``, as ``submit`` queues each in
        turn, with one arrival count for them all; returns those the queue bound left out
        (the last ones), which the caller refuses as ``submit`` would have raised."""
        self.count_taken()
        room = max(0, self.cfg.max_queued_requests - len(self._queue))
        taken, left = requests[:room], list(requests[room:])
        if not taken:
            return left
        loop, correction = self.controller, self.estimator.correction
        estimates = [self._estimates(request.seq_len) for request in taken]
        for request, (alone, _) in zip(taken, estimates):
            loop.note_sla(request.sla_ms, alone * correction)
        logical_arrival = loop.on_arrival(now_s, math.inf, 0.0, len(taken))
        self.overload.arrived()
        self._queue.extend([Entry(request, logical_arrival, alone, efficient)
                            for request, (alone, efficient) in zip(taken, estimates)])
        return left

    def remove(self, request_ids: Sequence[int]) -> list[QueuedRequest]:
        """Take requests out of the queue (cancelled, or failed by the adapter)."""
        wanted = set(request_ids)
        removed = [e for e in self._queue if e.req.request_id in wanted]
        if removed:
            self._queue.discard(removed)
        return [e.req for e in removed]

    def drain(self) -> list[QueuedRequest]:
        """Empty the queue (shutdown): the caller must answer every returned request."""
        drained = [e.req for e in self._queue]
        self._queue.clear()
        return drained

    def peek(self, count: int) -> list[QueuedRequest]:
        """The ``count`` oldest queued requests, left in the queue."""
        return [e.req for _, e in zip(range(count), self._queue)]

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def set_external_utilization(self, value: float, measured_at_s: float,
                                 source: str = "sidecar") -> None:
        """Feed a utilisation sample from the sidecar (NVML, Triton metrics)."""
        self.controller.set_external_utilization(value, measured_at_s, source)

    def set_perception_health(self, ok: bool) -> None:
        """False while the sidecar is unhealthy or stale: default batching until it is back."""
        self.controller.set_perception_health(ok)

    # -- the step ----------------------------------------------------------------------
    def tick(self, now_s: float) -> None:
        """Run the perception and decision layers if their periods have elapsed."""
        self.controller.tick(now_s, self._queue)

    @property
    def observation(self) -> Observation:
        return self.controller.state.observation

    def mode(self) -> str:
        """scheduling_decision: which policy the current zone calls for."""
        return self.controller.state.mode

    def schedule(self, now_s: float, flush: bool = False) -> BatchDecision:
        """Decide, with the device free at ``now_s``, whether to dispatch a batch now.

        ``flush`` dispatches whatever is queued without waiting (shutdown drain).
        """
        self.count_taken()
        self.controller.tick(now_s, self._queue)  # perceive, decide
        state = self.controller.state
        rejected = self._shed(now_s, now_s)
        mode = state.mode
        former = self.overload_former if self.overload.overloaded else self.formers[mode]
        util = state.observation.utilization
        if not self._queue:
            return BatchDecision((), None, Reason.IDLE, state.window_ms, util, 0.0, rejected,
                                 state.zone, mode, former.name)
        candidate = former.form(self._queue, state, now_s, flush)  # form
        reason, wake_at_s = self._dispatch_rule(candidate, now_s)  # dispatch or wait
        if wake_at_s is not None or not candidate.entries:
            return BatchDecision((), wake_at_s, reason, state.window_ms, util, 0.0, rejected,
                                 state.zone, mode, former.name)
        entries = candidate.entries
        self._queue.discard(entries)
        # A compensation batch is spent by being formed, whatever sent it (intake hold's
        # flush sends every batch as FLUSH; keeping the size would cap every later batch).
        self._count_dispatch(len(entries), mode, reason, state.compensation_size > 0)
        # What stays queued waits for this batch too: whoever can no longer start in time
        # after it is refused now, not when it ends (and maybe past its own deadline).
        rejected += self._shed(now_s, now_s + candidate.estimated_ms / 1000.0)
        return BatchDecision(tuple(e.req for e in entries), None, reason, state.window_ms, util,
                             candidate.estimated_ms, rejected, state.zone, mode, former.name)

    def min_meetable_sla_ms(self) -> float:
        """The smallest SLA in the queue that its request can meet, run alone now (inf:
        none): a request late even alone is refused at once whatever the load."""
        correction = self.estimator.correction
        return min((e.req.sla_ms for e in self._queue if not late_even_alone(e, correction)),
                   default=math.inf)

    def _shed(self, now_s: float, start_s: float) -> tuple[tuple[QueuedRequest, str], ...]:
        """Requests that miss their deadline even run from ``start_s`` (now, or when the
        batch just dispatched ends), alone - or, when behind, in an efficient batch
        (reject policy). Each refusal carries the estimate it was made on."""
        if not (self.control.enabled and self.control.infeasible_policy == "reject"):
            return ()
        margin_s = self.control.infeasible_margin_ms * self.estimator.time_scale / 1000.0
        behind, correction = self._behind(), self.estimator.correction
        doomed = infeasible_entries(self._queue, start_s - margin_s, correction, behind,
                                    self.small_queue)
        if start_s == now_s and self._queue:  # the decision's first look
            self.overload.measure(now_s, len(doomed), len(self._queue))
        if doomed and not self.overload.refusing_late():  # only the hopeless: late even alone, at once
            doomed = [e for e in doomed if late_even_alone(e, correction)]
        if not doomed:
            return ()
        self._queue.discard(doomed)
        self.counts["rejected_infeasible"] += len(doomed)
        return tuple((e.req, Refusal(RejectReason.INFEASIBLE,
                                     infeasible_detail(e, now_s, start_s, margin_s, behind,
                                                       correction)))
                     for e in doomed)

    def _count_dispatch(self, size: int, mode: str, reason: str, compensation: bool) -> None:
        self.controller.on_dispatch(size, compensation)
        if compensation:
            self.counts["compensation_batches"] += 1
        if reason == Reason.EMERGENCY:
            self.counts["emergency_batches"] += 1
        if mode == Mode.EXPLICIT:
            self.counts["explicit_batches"] += 1

    @property
    def late_share(self) -> float:
        """The smoothed share of each hand-over the estimate calls late (overload.py)."""
        return self.overload.late_share

    @property
    def overloaded(self) -> bool:
        """A sustained overload (overload.py): intake hold budgets its calls meanwhile."""
        return self.overload.overloaded

    def refuse_queued(self, now_s: float, call_size: int = 0) -> list[QueuedRequest]:
        """Empty the queue and count its requests as refused (the caller answers each):
        intake hold's call budget under overload; with the ``call_size`` they came in, the
        share refused counts as late (``OverloadState.refused``)."""
        refused = self.drain()
        self.counts["rejected_infeasible"] += len(refused)
        self.overload.refused(now_s, len(refused), call_size)
        return refused

    def hand_over_expired(self, now_s: float, count: int, queued: int, sla_ms: float = math.inf):
        """A hand-over's requests refused for their passed client timeout (``OverloadState.
        hand_over_expired``); ``sla_ms``, the smallest SLA among them, for the SLA floor."""
        self.controller.note_sla(sla_ms, math.inf)  # the floor only: they have left
        self.overload.hand_over_expired(now_s, count, queued)

    def call_overran(self, refused: int, handled: int) -> None:
        """Intake hold's call is past its overload budget (``OverloadState.call_overran``)."""
        self.overload.call_overran(refused, handled)

    def _behind(self) -> bool:
        return len(self._queue) >= self.cfg.max_batch_size

    def window_close_s(self, now_s: float) -> float:
        """When the oldest queued request's elastic window closes (physical time)."""
        return self.controller.window_close_s(self._queue.first().logical_arrival_s, now_s)

    def _waiting_pays(self, batch_size: int, now_s: float) -> bool:
        """The worth-its-wait rule: is a partial batch of ``batch_size`` worth holding back
        while the device is free?

        Waiting for the next arrival (1/rate on average) costs the queued requests
        ``batch_size / rate`` of latency in all; the newcomer, by riding along, saves one
        batch overhead of device time. Waiting pays while the first is smaller than the
        second, weighted by ``wait_ms_per_saved_device_ms``::

            batch_size < wait_ms_per_saved_device_ms * rate * batch_overhead

        i.e. while more requests arrive within one batch overhead than are queued. At low
        load that is never, and the batch goes at once, as with Triton's batcher at
        ``max_queue_delay`` 0; as the rate rises the batch waits until it holds about
        ``rate * overhead`` requests (never past the elastic window or the SLA guard).
        """
        expected = (self.controller.arrival_rate_rps(now_s)
                    * self.estimator.batch_overhead_ms() / 1000.0)
        return batch_size < self.cfg.wait_ms_per_saved_device_ms * expected

    def _dispatch_rule(self, candidate: Candidate, now_s: float) -> tuple[str, float | None]:
        """(reason, None) to send the candidate now, or (reason, wake time) to wait: full,
        immediate (flush/compensation/emergency), the SLA guard (waiting longer would miss
        its deadline), the elastic window, or waiting would not pay (``no_gain``)."""
        if candidate.hold_reason is not None:
            return candidate.hold_reason, candidate.hold_until_s
        latest_start_s = candidate.deadline_s - candidate.estimated_ms / 1000.0
        window_close_s = self.window_close_s(now_s)
        if candidate.full:
            return Reason.FULL, None
        if candidate.immediate:
            return candidate.immediate, None
        if now_s >= latest_start_s:
            return Reason.DEADLINE, None
        if now_s >= window_close_s:
            return Reason.WINDOW, None
        if not self._waiting_pays(len(candidate.entries), now_s):
            return Reason.NO_GAIN, None
        return Reason.WAIT, min(window_close_s, latest_start_s)

    # -- feedback ----------------------------------------------------------------------
    def batch_started(self, batch: Sequence[QueuedRequest], now_s: float) -> None:
        self.count_taken()  # a hand-over taken as handed counts once it runs
        self.controller.batch_started(now_s)

    def batch_finished(self, batch: Sequence[QueuedRequest], started_s: float,
                       now_s: float, succeeded: bool = True) -> None:
        """Feed back a finished batch: busy time, per-request latency and SLA, cost refit
        (``batch_ended``, then ``batch_observed``)."""
        self.batch_ended(now_s)
        self.batch_observed(Served.of(batch), started_s, now_s, succeeded)

    def batch_ended(self, now_s: float) -> None:
        """The device went free at ``now_s``: what the next decision needs at once."""
        self.controller.batch_ended(now_s)

    def batch_observed(self, served: Served, started_s: float, ended_s: float,
                       succeeded: bool = True) -> None:
        """The rest of a finished batch's feedback, which may come a few batches late
        (the server feeds several together while a later batch runs): counts, latency
        and SLA windows, the cost refit."""
        self.counts["batches"] += 1
        self.counts["requests"] += len(served.seq_lens)
        if succeeded:
            self.estimator.observe(served.seq_lens, (ended_s - started_s) * 1000.0)
        self.controller.batch_observed(served, ended_s, succeeded)

    def stats(self, now_s: float) -> SchedulerStats:
        loop = self.controller
        state = loop.state
        obs = state.observation
        c = self.counts
        period_ms = loop.control_period_ms
        return SchedulerStats(
            queue_depth=len(self._queue),
            window_ms=state.window_ms,
            utilization=obs.utilization,
            delay_variation=loop.delay_variation(now_s),
            batches=c["batches"],
            requests=c["requests"],
            cost_correction=self.estimator.drift_ratio,
            zone=int(state.zone),
            prewarmed=loop.zones.prewarmed,
            zone_score=loop.zones.score,
            observation_age_ms=obs.age_ms(now_s),
            p99_ms=obs.p99_ms,
            p99_cv=obs.p99_cv,
            logical_rate=loop.clock.rate,
            sla_met=loop.sla_met,
            sla_missed=loop.sla_missed,
            rejected_infeasible=c["rejected_infeasible"],
            emergency_batches=c["emergency_batches"],
            compensation_batches=c["compensation_batches"],
            explicit_batches=c["explicit_batches"],
            perception_ok=loop.perception_ok,
            control_period_ms=period_ms,
            control_lag_ms=max(0.0, period_ms - self.control.control_period_ms)
            if period_ms else 0.0,
            utilization_source=obs.utilization_source,
            former=self.formers[state.mode].name,
            cost_error=self.estimator.error_ratio,
        )

    def __repr__(self) -> str:
        return (f"Scheduler(queue_depth={len(self._queue)}, "
                f"zone={self.controller.zones.zone.name}, "
                f"batches={self.counts['batches']})")
