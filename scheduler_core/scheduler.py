"""The scheduler: the design's three control layers as a synchronous step function.

It implements ``policy.BatchingPolicy``; the caller (the Triton adapter, or the simulator)
owns the loop and the clock and drives it as ``policy.py`` describes. No I/O, no threads,
no clock reads: ``now_s`` is always passed in.

One ``schedule(now_s)`` reads as the design's layers, each in its own file:

1. perceive and decide - ``ControlLoop.tick`` (control_loop.py): observations, the zone,
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
from dataclasses import dataclass
from typing import Sequence

from .control_loop import ControlLoop, Observation
from .cost_model import CostEstimator
from .entry_queue import SMALL_QUEUE, Entry, EntryQueue, infeasible_entries
from .formers import BatchFormer, Candidate, make_former
from .policy import BatchDecision, Mode, QueueFull, Reason, Refusal, RejectReason
from .profile import ControlConfig, HardwareProfile, SchedulerConfig
from .request import QueuedRequest

__all__ = ["Scheduler", "SchedulerStats", "Observation", "BatchDecision", "QueueFull"]


@dataclass(frozen=True)
class SchedulerStats:
    """Plain numbers for the adapter to log or publish; the core exports no metrics."""

    queue_depth: int
    window_ms: float
    utilization: float
    delay_variation: float
    batches: int
    requests: int
    cost_correction: float  # the estimator's drift from its seed (1 = none)
    zone: int = 0
    prewarmed: bool = False
    zone_score: float = 0.0
    observation_age_ms: float = 0.0
    p99_ms: float = 0.0
    p99_cv: float = 0.0
    logical_rate: float = 1.0
    sla_met: int = 0
    sla_missed: int = 0
    rejected_infeasible: int = 0
    emergency_batches: int = 0
    compensation_batches: int = 0
    explicit_batches: int = 0
    perception_ok: bool = True
    control_period_ms: float = 0.0  # measured interval between the last two decisions
    control_lag_ms: float = 0.0  # how late the last decision ran against control_period_ms
    utilization_source: str = "busy_fraction"
    former: str = ""  # the batch former of the current mode
    cost_error: float = 0.0  # smoothed |measured - predicted| / measured batch time


def infeasible_detail(e: Entry, now_s: float, start_s: float, margin_s: float, behind: bool,
                      correction: float) -> str:
    """The numbers an infeasibility refusal was made on, as the client reads them: how long
    the request waited, when it could start, what running it costs by the estimate, against
    its SLA (the same expression as ``infeasible_entries``)."""
    seed_ms = e.efficient_ms if behind else e.alone_ms
    run_ms = seed_ms * correction
    finish_ms = (start_s - margin_s - e.req.arrival_s) * 1000.0 + run_ms
    start = (f"starts in {(start_s - now_s) * 1000.0:.1f} ms, after the batch just dispatched"
             if start_s > now_s else "starts now")
    margin = f" (less the {margin_s * 1000.0:.1f} ms margin)" if margin_s else ""
    how = "in an efficient batch (queue behind)" if behind else "alone"
    return (f"estimated finish {finish_ms:.1f} ms after arrival > SLA {e.req.sla_ms:.1f} ms: "
            f"waited {(now_s - e.req.arrival_s) * 1000.0:.1f} ms, {start}{margin}, then runs "
            f"{run_ms:.1f} ms {how}: {e.seq_len} tokens, estimate {seed_ms:.1f} ms x cost "
            f"correction {correction:.2f}")


class _HandedOver:
    """A hand-over the caller holds, as perception reads a queue (``takes_as_handed``)."""

    __slots__ = ("n", "deadline_s")

    def __init__(self, n: int, deadline_s: float):
        self.n, self.deadline_s = n, deadline_s

    def __len__(self) -> int:
        return self.n

    def min_deadline(self) -> float:
        return self.deadline_s


class Scheduler:
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
        self.loop = ControlLoop(cfg, self.control, start_s, seed)  # seed: see ControlLoop
        self.small_queue = small_queue
        self._queue = EntryQueue()
        self._efficient_size = max(1, math.ceil(self.control.min_batch_fill * cfg.max_batch_size))
        ctl = self.control
        safe = ctl.safe_zone_batching
        if safe == "auto":
            safe = "length_aware" if estimator.cost_mode == "padded" else "fifo"
        self.formers: dict[Mode, BatchFormer] = {
            mode: make_former(name, cfg, ctl, estimator, small_queue)
            for mode, name in ((Mode.DEFAULT, safe), (Mode.EXPLICIT, ctl.explicit_former),
                               (Mode.EMERGENCY, ctl.emergency_former))}
        self.overload_former = make_former(ctl.overload_former, cfg, ctl, estimator, small_queue)
        # The smoothed share of the queue that the estimate calls late (_measure_late_share).
        self.late_share = 0.0
        self._overloaded = False  # see ``overloaded``
        self._late_share_at_s = start_s
        self._arrived = False  # a request was queued since the late share was measured
        self._expired = 0  # hand-over_expired's requests, for the next measurement
        self.counts = {"batches": 0, "requests": 0, "rejected_infeasible": 0,
                       "emergency_batches": 0, "compensation_batches": 0,
                       "explicit_batches": 0}

    # -- arrivals ---------------------------------------------------------------------
    def submit(self, request: QueuedRequest, now_s: float) -> None:
        """Queue a request; raises ``QueueFull`` when the queue is at its bound."""
        if len(self._queue) >= self.cfg.max_queue_size:
            raise QueueFull(self.queue_full_message())
        alone, efficient = self._estimates(request.seq_len)
        logical_arrival = self.loop.on_arrival(now_s, request.sla_ms,
                                               alone * self.estimator.correction)
        self._arrived = True
        self._queue.append(Entry(request, logical_arrival, alone, efficient))

    def _estimates(self, n: int) -> tuple[float, float]:
        """A request of ``n`` tokens, its uncorrected estimates as its ``Entry`` keeps
        them: run alone, and in an efficient batch of its length."""
        k = max(1, min(self._efficient_size, self.cfg.max_batch_tokens // n))
        base = self.estimator.base_parts_ms
        return base(1, n, n, n * n), base(k, n, k * n, k * n * n)

    def queue_full_message(self) -> str:
        return f"queue holds max_queue_size={self.cfg.max_queue_size} requests"

    def submit_all(self, requests: Sequence[QueuedRequest], now_s: float
                   ) -> list[QueuedRequest]:
        """Queue a call's requests, all arrived at ``now_s``, as ``submit`` queues each in
        turn, with one arrival count for them all; returns those the queue bound left out
        (the last ones), which the caller refuses as ``submit`` would have raised."""
        room = max(0, self.cfg.max_queue_size - len(self._queue))
        taken, left = requests[:room], list(requests[room:])
        if not taken:
            return left
        loop, correction = self.loop, self.estimator.correction
        entries = []
        for request in taken:
            alone, efficient = self._estimates(request.seq_len)
            loop.note_sla(request.sla_ms, alone * correction)
            entries.append((request, alone, efficient))
        logical_arrival = loop.on_arrival(now_s, math.inf, 0.0, len(taken))
        self._arrived = True
        for request, alone, efficient in entries:
            self._queue.append(Entry(request, logical_arrival, alone, efficient))
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
        self.loop.set_external_utilization(value, measured_at_s, source)

    def set_perception_health(self, ok: bool) -> None:
        """False while the sidecar is unhealthy or stale: default batching until it is back."""
        self.loop.set_perception_health(ok)

    # -- the step ----------------------------------------------------------------------
    def tick(self, now_s: float) -> None:
        """Run the perception and decision layers if their periods have elapsed."""
        self.loop.tick(now_s, self._queue)

    @property
    def observation(self) -> Observation:
        return self.loop.state.observation

    def mode(self) -> str:
        """scheduling_decision: which policy the current zone calls for."""
        return self.loop.state.mode

    def schedule(self, now_s: float, flush: bool = False) -> BatchDecision:
        """Decide, with the device free at ``now_s``, whether to dispatch a batch now.

        ``flush`` dispatches whatever is queued without waiting (shutdown drain).
        """
        self.loop.tick(now_s, self._queue)  # perceive, decide
        state = self.loop.state
        rejected = self._shed(now_s, now_s)
        mode = state.mode
        former = self.overload_former if self._overloaded else self.formers[mode]
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

    def takes_as_handed(self, now_s: float, batch: Sequence[QueuedRequest]) -> float | None:
        """A hand-over the caller holds (intake hold's call) as one batch, as Triton's
        batcher handed it over, where that is the batch ``schedule`` would form from it
        anyway, known from a few sums instead of a decision's scans. A number (the batch's
        estimate, ms): ``batch`` is taken, its arrivals counted as ``submit`` counts them
        (the caller runs it, then ``batch_started`` / ``batch_finished`` as for any
        batch); None: nothing changed but the control loop's tick, and the caller submits
        the requests and asks ``schedule``.

        The conditions, each one a reason ``schedule`` could form something else:

        * nothing is queued; no compensation batch is due; no sustained overload; the
          mode's former is FIFO or length-aware (default batching, or explicit control:
          not the emergency policy's small batches);
        * the batch fits one batch (``max_batch_size``, ``max_batch_tokens``);
        * every member ends in time in it, by the estimate (less the infeasibility
          margin): none is refused, and no deadline guard or urgency order has anything
          to change; with a length-aware former, the batch is also within the reserved
          capacity's duration cap;
        * on a padded device, no split into two batches saves a launch
          (``_no_split_pays``): the former splits only where its split costs less than
          the whole batch, and no split of more batches pays where none of two does.

        Outside explicit control this is the design's flow chart (batch conventionally, no
        per-request decision); inside it, the decision it would take. The tick sees the
        hand-over as the queue (depth, tightest deadline), as it would once submitted, and
        the late share is measured (none late), so the control loop follows the load
        whichever path the call takes."""
        n = len(batch)
        cfg, est = self.cfg, self.estimator
        if not n or self._queue or n > cfg.max_batch_size:
            return None
        lengths = [r.seq_len for r in batch]
        longest, real = max(lengths), sum(lengths)
        if n * longest > cfg.max_batch_tokens:
            return None
        first_deadline = min(r.deadline_s for r in batch)
        # ``schedule`` ticks after ``submit`` registered the SLAs, so a perception on that
        # tick sees the hand-over's tightest SLA (the reserved-capacity cap follows it):
        # registered before this tick too. Only the smallest can set it; one infeasible
        # even alone is declined below anyway.
        tightest = min(batch, key=lambda r: r.sla_ms)
        k = tightest.seq_len
        self.loop.note_sla(tightest.sla_ms, self.estimator.base_parts_ms(1, k, k, k * k)
                           * self.estimator.correction)
        self.loop.tick(now_s, _HandedOver(n, first_deadline))
        state = self.loop.state
        former = self.formers[state.mode].name
        if (former not in ("fifo", "length_aware") or state.compensation_size > 0
                or self.overloaded):
            return None
        squared = sum(k * k for k in lengths)
        batch_ms = est.estimate_parts_ms(n, longest, real, squared)
        margin_s = self.control.infeasible_margin_ms * est.time_scale / 1000.0
        if now_s + batch_ms / 1000.0 > first_deadline - margin_s:
            return None
        if former != "fifo":
            if state.tightest_sla_ms and batch_ms > (
                    (1.0 - self.control.reserved_capacity) * 0.5 * state.tightest_sla_ms):
                return None
            if est.cost_mode == "padded" and not self._no_split_pays(
                    lengths, n, longest, real, squared):
                return None
        # Every member ends in time in the batch: the smallest SLA is a feasible one.
        self.loop.on_arrival(now_s, min(r.sla_ms for r in batch), batch_ms, n)
        self._arrived = True
        self._measure_late_share(now_s, 0, n)
        self._count_dispatch(n, state.mode, Reason.FLUSH, False)
        return batch_ms

    def _no_split_pays(self, lengths: list[int], n: int, longest: int, real: int,
                       squared: int) -> bool:
        """Whether a padded batch costs less whole than split in two (the cost model's
        line; a measured table keeps the line it was fitted with), time-scaled, where a
        split costs one more launch and one more batch's host time (``batch_host_ms``).

        Its padding costing less than that is enough, and cheap: a split saves at most
        the padding. On the formula (no table) the
        exact rule follows: the cheapest split of two puts a shortest-first prefix of
        ``k`` requests, longest ``L``, beside the rest, and saves
        ``k * (per_token * (longest - L) + per_token_squared * (longest^2 - L^2))``
        against one more launch (``per_sequence`` is paid either way). Where no such
        split saves a launch, none of more batches does either: each further cut saves
        at most what a prefix split of two saves, and costs a launch more. So this is
        exactly when ``LengthAwareFormer`` keeps the batch whole: it splits only where
        its split (one batch, then the rest as one) costs less than the whole."""
        est = self.estimator
        cm, scale = est.cfg, est.time_scale * est.correction
        per_tok, per_sq = cm.per_token_ms * scale, cm.per_token_squared_ms * scale
        # What a split adds: a launch, and one more batch's host time (not time-scaled).
        launch = cm.fixed_ms * scale + self.cfg.batch_host_ms
        padding_ms = (per_tok * (n * longest - real)
                      + per_sq * (n * longest * longest - squared))
        if padding_ms < launch or est.table is not None:
            return padding_ms < launch
        bound = launch * (1.0 - 1e-9)  # a tie splits or not by rounding: count it a split
        k = 0
        for length in sorted(lengths):
            if length == longest:
                break  # the rest are the longest: a split there saves nothing
            k += 1
            if k * (per_tok * (longest - length)
                    + per_sq * (longest * longest - length * length)) >= bound:
                return False
        return True

    def min_meetable_sla_ms(self) -> float:
        """The smallest SLA in the queue that its request can meet, run alone now (inf:
        none): a request late even alone is refused at once whatever the load."""
        correction = self.estimator.correction
        return min((e.req.sla_ms for e in self._queue if not _late_even_alone(e, correction)),
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
            self._measure_late_share(now_s, len(doomed), len(self._queue))
        if doomed and not self._refusing_late():  # only the hopeless: late even alone, at once
            doomed = [e for e in doomed if _late_even_alone(e, correction)]
        if not doomed:
            return ()
        self._queue.discard(doomed)
        self.counts["rejected_infeasible"] += len(doomed)
        return tuple((e.req, Refusal(RejectReason.INFEASIBLE,
                                     infeasible_detail(e, now_s, start_s, margin_s, behind,
                                                       correction)))
                     for e in doomed)

    def _count_dispatch(self, size: int, mode: str, reason: str, compensation: bool) -> None:
        self.loop.on_dispatch(size, compensation)
        if compensation:
            self.counts["compensation_batches"] += 1
        if reason == Reason.EMERGENCY:
            self.counts["emergency_batches"] += 1
        if mode == Mode.EXPLICIT:
            self.counts["explicit_batches"] += 1

    @property
    def overloaded(self) -> bool:
        """A sustained overload: from when the smoothed late share reaches
        ``overload_late_share`` until it falls below ``overload_exit_late_share`` (intake
        hold budgets its calls meanwhile; see ControlConfig)."""
        return self._overloaded

    def refuse_queued(self, now_s: float, call_size: int = 0) -> list[QueuedRequest]:
        """Empty the queue and count its requests as refused (the caller answers each):
        intake hold's call budget under overload. With the ``call_size`` they came in, the
        share refused counts as late in ``late_share``: demand the device did not carry.
        A budgeted call keeps the next hand-over young, so the hand-overs alone read a
        steady overload as over every few calls; a call that refuses little (a short
        clump) moves the share little, so the state still ends once the load falls."""
        refused = self.drain()
        self.counts["rejected_infeasible"] += len(refused)
        if refused and call_size:
            self._smooth_late_share(now_s, min(1.0, len(refused) / call_size))
        return refused

    def hand_over_expired(self, now_s: float, count: int, queued: int) -> None:
        """``count`` requests of a hand-over whose client timeout passed in Triton's queue,
        refused by the caller before they were queued: demand that came too late, so they
        count as late in that hand-over's late-share measurement, as a request the
        estimate calls late does (at its first decision; at once where none of the
        hand-over was queued, ``queued`` 0). Uncounted, a timeout shorter than the SLA
        hides the overload from the late share until the calls run long."""
        if count <= 0:
            return
        self._expired += count
        self._arrived = True
        if not queued:
            self._measure_late_share(now_s, 0, 0)

    def _measure_late_share(self, now_s: float, late: int, queued: int) -> None:
        """Smooth ``late`` (of the ``queued`` requests, by the estimate, now; with the
        hand-over's expired ones) into ``late_share``: at the first decision after
        arrivals, so a call's hand-over counts once, not again as the queue drains."""
        if not self._arrived:
            return
        self._arrived = False
        late, queued, self._expired = late + self._expired, queued + self._expired, 0
        self._smooth_late_share(now_s, late / queued)

    def call_overran(self, refused: int, handled: int) -> None:
        """Intake hold: a call has run past its overload budget (a share of the smallest
        SLA it carries) and refused ``refused`` of the ``handled`` requests it decided so
        far. At overload_exit_late_share or more, the call is an overload on its own: the
        state is entered at once, held at that share, and the call keeps its budget. What
        arrives during a call waits, unseen, in Triton's queue until it returns; at an
        overload's onset the smoothed share moves a call too late, and one unbudgeted
        call runs long enough to make the next hand-over late before the plugin sees it
        (docs/reliability.md, the overload's onset)."""
        share = refused / handled if handled else 0.0
        ctl = self.control
        if not self._overloaded and share >= min(ctl.overload_exit_late_share,
                                                 ctl.overload_late_share):
            self._overloaded = True
            self.late_share = max(self.late_share, share)

    def _smooth_late_share(self, now_s: float, share: float) -> None:
        """Move ``late_share`` towards ``share`` (exponentially, over refusal_window_ms)
        and update the overload state (entered at overload_late_share, left below
        overload_exit_late_share)."""
        dt = max(0.0, now_s - self._late_share_at_s)
        self._late_share_at_s = now_s
        weight = 1.0 - math.exp(-dt * 1000.0 / self.control.refusal_window_ms)
        self.late_share += weight * (share - self.late_share)
        ctl = self.control
        if self.late_share >= ctl.overload_late_share:
            self._overloaded = True
        elif self.late_share < min(ctl.overload_exit_late_share, ctl.overload_late_share):
            self._overloaded = False

    def _refusing_late(self) -> bool:
        """Whether a request late from waiting is refused: once ``late_share`` reaches
        ``refusal_late_share`` (0: always; see ControlConfig). One late even alone and at
        once (its SLA below its own run time) is refused always, in ``_shed``."""
        share = self.control.refusal_late_share
        return share <= 0 or self.late_share >= share

    def _behind(self) -> bool:
        return len(self._queue) >= self.cfg.max_batch_size

    def window_close_s(self, now_s: float) -> float:
        """When the oldest queued request's elastic window closes (physical time)."""
        return self.loop.window_close_s(self._queue.first().logical_arrival_s, now_s)

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
        expected = self.loop.arrival_rate_rps(now_s) * self.estimator.batch_overhead_ms() / 1000.0
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
        self.loop.batch_started(now_s)

    def batch_finished(self, batch: Sequence[QueuedRequest], started_s: float,
                       now_s: float, succeeded: bool = True) -> None:
        """Feed back a finished batch: busy time, per-request latency and SLA, cost refit."""
        self.counts["batches"] += 1
        self.counts["requests"] += len(batch)
        if succeeded:
            self.estimator.observe([r.seq_len for r in batch], (now_s - started_s) * 1000.0)
        self.loop.batch_finished(batch, now_s, succeeded)

    def stats(self, now_s: float) -> SchedulerStats:
        loop = self.loop
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
        return (f"Scheduler(queue_depth={len(self._queue)}, zone={self.loop.zones.zone.name}, "
                f"batches={self.counts['batches']})")


def _late_even_alone(e: Entry, correction: float) -> bool:
    """Whether ``e``'s SLA is below its own run time alone: hopeless at any load."""
    return e.alone_ms * correction > e.req.sla_ms
