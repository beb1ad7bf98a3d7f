"""A frozen copy of ``scheduler_core.scheduler.Scheduler`` as it was before the decision
path was optimised (commit 28e32f2): it scores and sorts the whole queue on every call and
scans the whole queue for infeasible requests. ``test_scheduler_equivalence`` drives it and
the live scheduler through the same workloads and asserts identical decisions.

Do not optimise or "fix" this file: its only job is to be the old behaviour. The
dataclasses it returns, the clock, cost model, perception, window and zone detector are
the live ones (shared, unchanged by the optimisation).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Iterable, Sequence

from scheduler_core.clock import MAX_RATE, LogicalClock
from scheduler_core.cost_model import CostEstimator
from scheduler_core.perception import BusyTracker, LatencyWindow, coefficient_of_variation
from scheduler_core.profile import ControlConfig, HardwareProfile, SchedulerConfig
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import (EXTERNAL_UTILIZATION_MAX_AGE_S, INFEASIBLE_REASON,
                                      MIN_SAMPLES_FOR_COMPENSATION, P99_HISTORY, BatchDecision,
                                      Observation, QueueFull, SchedulerStats)
from scheduler_core.window import ElasticWindow
from scheduler_core.zones import Zone, ZoneDetector


class _Entry:
    """A queued request plus what the scheduler keeps about it."""

    __slots__ = ("req", "seq_len", "logical_arrival_s", "alone_ms", "efficient_ms")

    def __init__(self, req: QueuedRequest, logical_arrival_s: float, alone_ms: float,
                 efficient_ms: float):
        self.req = req
        self.seq_len = req.seq_len
        self.logical_arrival_s = logical_arrival_s
        # Uncorrected estimates: running it alone, and in an efficient batch of its length.
        self.alone_ms = alone_ms
        self.efficient_ms = efficient_ms


def take_fifo(queue: Iterable, max_batch_size: int, max_batch_tokens: int) -> list:
    """The longest queue prefix within the batch-size and padded-token limits.

    Items need a ``seq_len``. The first is always taken, even alone over the token limit,
    so an oversized request can never block the queue.
    """
    batch: list = []
    longest = 0
    for item in queue:
        if len(batch) >= max_batch_size:
            break
        new_longest = max(longest, item.seq_len)
        if batch and new_longest * (len(batch) + 1) > max_batch_tokens:
            break
        batch.append(item)
        longest = new_longest
    return batch


class ReferenceScheduler:
    """The pre-optimisation ``Scheduler`` (frozen copy)."""

    @classmethod
    def from_profile(cls, profile: HardwareProfile, time_scale: float | None = None,
                     control: ControlConfig | None = None) -> "ReferenceScheduler":
        """A scheduler with the profile's settings; ``time_scale`` scales the cost estimate
        (the emulated device's slow-down; default: the profile's own)."""
        scale = profile.emulation.time_scale if time_scale is None else time_scale
        estimator = CostEstimator(profile.cost_model, profile.emulation.cost_mode, scale)
        return cls(profile.scheduler, estimator, control or profile.control)

    def __init__(self, cfg: SchedulerConfig, estimator: CostEstimator,
                 control: ControlConfig | None = None, start_s: float = 0.0):
        self.cfg = cfg
        self.control = control or ControlConfig()
        self.estimator = estimator
        self.window = ElasticWindow.from_config(cfg)
        self.zones = ZoneDetector(self.control)
        self.clock = LogicalClock(start_s)
        window_s = cfg.perception_window_ms / 1000.0
        self.busy = BusyTracker(window_s)
        self.latencies = LatencyWindow(window_s)
        self.sla_ratios = LatencyWindow(window_s)  # latency / SLA of finished requests
        self._queue: deque[_Entry] = deque()
        self._efficient_size = max(1, math.ceil(self.control.min_batch_fill * cfg.max_batch_size))
        self._last_perception_s = -math.inf
        self._last_decision_s = -math.inf
        self._p99_history: deque[float] = deque(maxlen=P99_HISTORY)
        self._external: tuple[float, float, str] | None = None  # (value, measured_at_s, source)
        self._perception_ok = True
        self._control_period_ms = 0.0  # measured interval between the last two decisions
        self._window_ms = cfg.base_window_ms
        self._tightest_sla_ms: float | None = None
        self._period_min_sla_ms = math.inf
        self._avg_batch_size = 1.0
        self._compensation_size = 0
        self._last_compensation_s = -math.inf
        self._last_finish_s = -math.inf
        self.observation = Observation(start_s, 0.0, "busy_fraction", 0.0, 0, 0.0, 0.0, math.inf)
        self.counts = {"batches": 0, "requests": 0, "sla_met": 0, "sla_missed": 0,
                       "rejected_infeasible": 0, "emergency_batches": 0,
                       "compensation_batches": 0, "explicit_batches": 0}

    # -- arrivals ---------------------------------------------------------------------
    def submit(self, request: QueuedRequest, now_s: float) -> None:
        """Queue a request; raises ``QueueFull`` when the queue is at its bound."""
        if len(self._queue) >= self.cfg.max_queue_size:
            raise QueueFull(f"queue holds max_queue_size={self.cfg.max_queue_size} requests")
        n = request.seq_len
        k = max(1, min(self._efficient_size, self.cfg.max_batch_tokens // n))
        alone = self.estimator.base_parts_ms(1, n, n, n * n)
        efficient = self.estimator.base_parts_ms(k, n, k * n, k * n * n)
        self._queue.append(_Entry(request, self.clock.now(now_s), alone, efficient))
        # The tightest SLA sets the reserved capacity; one that cannot be met even alone
        # (say, 0.5 ms) must not shrink everyone's batches.
        if alone * self.estimator.correction <= request.sla_ms < self._period_min_sla_ms:
            self._period_min_sla_ms = request.sla_ms

    def remove(self, request_ids: Sequence[int]) -> list[QueuedRequest]:
        """Take requests out of the queue (cancelled, or failed by the adapter)."""
        wanted = set(request_ids)
        removed = [e.req for e in self._queue if e.req.request_id in wanted]
        if removed:
            self._queue = deque(e for e in self._queue if e.req.request_id not in wanted)
        return removed

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
        self._external = (min(max(value, 0.0), 1.0), measured_at_s, source)

    def set_perception_health(self, ok: bool) -> None:
        """False while the sidecar is unhealthy or stale: the controller then falls back to
        safe default batching (it cannot trust what it would act on)."""
        self._perception_ok = ok

    # -- perception and decision layers ------------------------------------------------
    def tick(self, now_s: float) -> None:
        """Run the perception and decision layers if their periods have elapsed."""
        ctl = self.control
        # The epsilon keeps exact multiples of a period (0.3 - 0.2 = 0.0999...) on time.
        if (now_s - self._last_perception_s) * 1000.0 >= ctl.perception_period_ms - 1e-9:
            self._perceive(now_s)
        if (now_s - self._last_decision_s) * 1000.0 >= ctl.control_period_ms - 1e-9:
            self._decide(now_s)

    def _utilization(self, now_s: float) -> tuple[float, str, float]:
        if self._external is not None:
            value, measured_at, source = self._external
            age = now_s - measured_at
            if age <= EXTERNAL_UTILIZATION_MAX_AGE_S:
                return value, source, age * 1000.0
        return self.busy.utilization(now_s), "busy_fraction", 0.0

    def _perceive(self, now_s: float) -> None:
        self._last_perception_s = now_s
        util, source, util_age_ms = self._utilization(now_s)
        p99 = 0.0
        if self.latencies.count(now_s):
            p99 = self.latencies.percentile(now_s, 99)
            self._p99_history.append(p99)
        min_remaining = min((e.req.deadline_s for e in self._queue), default=math.inf)
        if self._period_min_sla_ms < math.inf:
            self._tightest_sla_ms = self._period_min_sla_ms
            self._period_min_sla_ms = math.inf
        self.observation = Observation(now_s, util, source, util_age_ms, len(self._queue), p99,
                                       coefficient_of_variation(self._p99_history), (min_remaining - now_s) * 1000.0)

    def _decide(self, now_s: float) -> None:
        if self._last_decision_s > -math.inf:
            self._control_period_ms = (now_s - self._last_decision_s) * 1000.0
        self._last_decision_s = now_s
        obs = self.observation
        if self.control.enabled:
            # Queue depth is read live (it is exact and free); utilisation and P99 come
            # from the latest observation, whose age is reported in the stats.
            self.zones.update(now_s, obs.utilization, len(self._queue), obs.p99_cv)
        window_ms = self.window.adjusted_ms(obs.utilization,
                                            self.latencies.coefficient_of_variation(now_s))
        self._window_ms = window_ms
        base = self.cfg.base_window_ms
        self.clock.set_rate(now_s, base / window_ms if window_ms > 0 and base > 0 else MAX_RATE)
        if self.control.enabled:
            self._check_compensation(now_s)

    def _check_compensation(self, now_s: float) -> None:
        """After a P99 breach, size a compensation batch: historical average batch size
        times (1 + the current latency deviation), the deviation capped by max_compensation."""
        ctl = self.control
        if self.sla_ratios.count(now_s) < MIN_SAMPLES_FOR_COMPENSATION:
            return
        if (now_s - self._last_compensation_s) * 1000.0 < ctl.compensation_cooldown_ms:
            return
        p99_ratio = self.sla_ratios.percentile(now_s, 99)
        if p99_ratio <= 1.0:
            return
        deviation = min(p99_ratio - 1.0, ctl.max_compensation)
        size = round(self._avg_batch_size * (1.0 + deviation))
        self._compensation_size = max(1, min(size, self.cfg.max_batch_size))
        self._last_compensation_s = now_s

    # -- execution layer ---------------------------------------------------------------
    def mode(self) -> str:
        """scheduling_decision: which policy the current zone calls for."""
        if not self.control.enabled or not self._perception_ok:
            return "default"
        zone = self.zones.zone
        if zone == Zone.DANGER:
            return "emergency"
        if zone == Zone.NO_MANS_LAND or self.zones.prewarmed:
            return "explicit"
        return "default"

    def schedule(self, now_s: float, flush: bool = False) -> BatchDecision:
        """Decide, with the device free at ``now_s``, whether to dispatch a batch now.

        ``flush`` dispatches whatever is queued without waiting (shutdown drain).
        """
        self.tick(now_s)
        util = self.observation.utilization
        zone = int(self.zones.zone)
        rejected: tuple = ()
        if self.control.enabled and self.control.infeasible_policy == "reject":
            rejected = self._take_infeasible(now_s)
        mode = self.mode()
        if not self._queue:
            return BatchDecision((), None, "idle", self._window_ms, util, 0.0, rejected, zone, mode)
        compensation = self._compensation_size > 0
        if mode == "default":
            entries, est_ms, reason, wake = self._default_batch(now_s, flush, compensation)
        else:
            entries, est_ms, reason, wake = self._explicit_batch(now_s, flush, compensation,
                                                                 emergency=mode == "emergency")
        if not entries:
            return BatchDecision((), wake, reason, self._window_ms, util, 0.0, rejected, zone, mode)
        self._take(entries)
        self._count_dispatch(len(entries), mode, reason)
        return BatchDecision(tuple(e.req for e in entries), None, reason, self._window_ms, util,
                             est_ms, rejected, zone, mode)

    def _take(self, entries: list[_Entry]) -> None:
        if len(entries) <= len(self._queue) and all(
                a is b for a, b in zip(entries, self._queue)):
            for _ in entries:  # a FIFO prefix: the common case
                self._queue.popleft()
            return
        chosen = {id(e) for e in entries}
        self._queue = deque(e for e in self._queue if id(e) not in chosen)

    def _count_dispatch(self, size: int, mode: str, reason: str) -> None:
        self._avg_batch_size += 0.1 * (size - self._avg_batch_size)
        if reason == "compensation":
            self.counts["compensation_batches"] += 1
            self._compensation_size = 0
        if reason == "emergency":
            self.counts["emergency_batches"] += 1
        if mode == "explicit":
            self.counts["explicit_batches"] += 1

    def _behind(self) -> bool:
        return len(self._queue) >= self.cfg.max_batch_size

    def _take_infeasible(self, now_s: float) -> tuple:
        """Requests that miss their deadline even run at once, alone - or, when behind, in an
        efficient batch (reject policy)."""
        corr = self.estimator.correction
        behind = self._behind()
        doomed = [e for e in self._queue if now_s + (e.efficient_ms if behind else e.alone_ms)
                  * corr / 1000.0 > e.req.deadline_s]
        if not doomed:
            return ()
        self._take(doomed)
        self.counts["rejected_infeasible"] += len(doomed)
        return tuple((e.req, INFEASIBLE_REASON) for e in doomed)

    def _window_close_s(self, now_s: float) -> float:
        oldest = self._queue[0]
        return self.clock.physical_at(oldest.logical_arrival_s + self.cfg.base_window_ms / 1000.0,
                                      now_s)

    def _dispatch_or_wait(self, now_s: float, entries: list[_Entry], est_ms: float, full: bool,
                          immediate: str | None, deadline_s: float):
        """Common dispatch rule: full, immediate (flush/compensation/emergency), the SLA
        guard (waiting longer would miss ``deadline_s``), or the elastic window."""
        latest_start_s = deadline_s - est_ms / 1000.0
        window_close_s = self._window_close_s(now_s)
        if full:
            return entries, est_ms, "full", None
        if immediate:
            return entries, est_ms, immediate, None
        if now_s >= latest_start_s:
            return entries, est_ms, "deadline", None
        if now_s >= window_close_s:
            return entries, est_ms, "window", None
        return [], 0.0, "wait", min(window_close_s, latest_start_s)

    def _default_batch(self, now_s: float, flush: bool, compensation: bool):
        """Default dynamic batching: FIFO prefix, elastic window, SLA guard."""
        cfg = self.cfg
        cap = self._compensation_size if compensation else cfg.max_batch_size
        entries = take_fifo(self._queue, cap, cfg.max_batch_tokens)
        est_ms = self.estimator.estimate_ms([e.seq_len for e in entries])
        full = len(entries) < len(self._queue) or len(entries) >= cap
        immediate = "flush" if flush else ("compensation" if compensation else None)
        deadline = min(e.req.deadline_s for e in entries)
        return self._dispatch_or_wait(now_s, entries, est_ms, full and not compensation,
                                      immediate, deadline)

    def _urgency_order(self, now_s: float) -> list[tuple[float, bool, _Entry]]:
        """Queue by SLA urgency, most urgent first: urgency_decay_rate ** (slack / unit)
        plus aging; requests that cannot make their deadline even alone go last (aging
        still lifts them, so nothing starves)."""
        ctl = self.control
        corr = self.estimator.correction
        decay, unit, aging = ctl.urgency_decay_rate, ctl.urgency_slack_unit_ms, ctl.aging_per_s
        behind = self._behind()
        scored = []
        for e in self._queue:
            req = e.req
            slack_ms = (req.deadline_s - now_s) * 1000.0 - (
                e.efficient_ms if behind else e.alone_ms) * corr
            waited_s = now_s - req.arrival_s
            if slack_ms >= 0:
                scored.append((decay ** (slack_ms / unit) + aging * waited_s, True, e))
            else:
                scored.append((-1.0 + aging * waited_s, False, e))
        scored.sort(key=lambda t: -t[0])  # stable: equal urgency keeps arrival order
        return scored

    def _explicit_batch(self, now_s: float, flush: bool, compensation: bool, emergency: bool):
        """Explicit control: urgency order, priority slots, compute-aware splitting by
        length, reserved capacity; in danger, small emergency batches for urgent work."""
        cfg, ctl, est = self.cfg, self.control, self.estimator
        scored = self._urgency_order(now_s)
        padded = est.cost_mode == "padded"
        size_cap = self._compensation_size if compensation else cfg.max_batch_size
        duration_cap_ms = math.inf
        if not emergency and not compensation and self._tightest_sla_ms:
            duration_cap_ms = (1.0 - ctl.reserved_capacity) * 0.5 * self._tightest_sla_ms
        urgent_lane = False
        if emergency and not compensation:
            # A burst (not yet a full batch behind): small batches for the most urgent.
            # Once behind, only full, efficient batches keep the device ahead of the queue.
            if not self._behind() and scored[0][1] and scored[0][0] >= ctl.urgent_threshold:
                size_cap = min(size_cap, ctl.emergency_batch_size)
                urgent_lane = True
            if ctl.dilution and now_s < self._last_finish_s + ctl.dilution_gap_ms / 1000.0:
                return [], 0.0, "dilution", self._last_finish_s + ctl.dilution_gap_ms / 1000.0

        seed_u, seed_ok, seed = scored[0]
        members = [seed]
        longest = real = seed.seq_len
        squared = real * real
        deadline = seed.req.deadline_s if seed_ok else math.inf
        slots = ctl.priority_slots
        stop_noncritical = emergency and ctl.emergency_stop_noncritical
        seed_noncritical = seed.req.sla_ms >= ctl.noncritical_sla_ms
        est_ms = est.estimate_parts_ms(1, longest, real, squared)
        # Looking far down the urgency order buys little: bound the scan.
        for u, ok, e in scored[1:8 * size_cap]:
            if len(members) >= size_cap:
                break
            n = e.seq_len
            new_longest = longest if n <= longest else n
            size = len(members) + 1
            if new_longest * size > cfg.max_batch_tokens:
                continue
            urgent = ok and u >= ctl.urgent_threshold
            if urgent_lane and not urgent:
                continue
            if stop_noncritical and (seed_noncritical or e.req.sla_ms >= ctl.noncritical_sla_ms):
                continue
            use_slot = urgent and slots > 0
            if padded and not use_slot and not compensation:
                if 1.0 - (real + n) / (new_longest * size) > ctl.max_padding_waste:
                    continue
            candidate_ms = est.estimate_parts_ms(size, new_longest, real + n, squared + n * n)
            if candidate_ms > duration_cap_ms:
                continue
            bound = min(deadline, e.req.deadline_s) if ok else deadline
            if now_s + candidate_ms / 1000.0 > bound:
                continue  # adding it would make a member miss: leave it for another batch
            members.append(e)
            longest, real, squared, deadline, est_ms = (new_longest, real + n, squared + n * n,
                                                        bound, candidate_ms)
            if use_slot:
                slots -= 1

        immediate = ("flush" if flush else "compensation" if compensation
                     else "emergency" if urgent_lane else "drain" if emergency else None)
        full = len(members) >= size_cap and not compensation and not urgent_lane
        return self._dispatch_or_wait(now_s, members, est_ms, full, immediate, deadline)

    # -- feedback ----------------------------------------------------------------------
    def batch_started(self, batch: Sequence[QueuedRequest], now_s: float) -> None:
        self.busy.start(now_s)

    def batch_finished(self, batch: Sequence[QueuedRequest], started_s: float,
                       now_s: float, succeeded: bool = True) -> None:
        """Feed back a finished batch: busy time, per-request latency and SLA, cost refit."""
        self.busy.stop(now_s)
        self._last_finish_s = now_s
        counts = self.counts
        counts["batches"] += 1
        counts["requests"] += len(batch)
        if not succeeded:
            return
        self.estimator.observe([r.seq_len for r in batch], (now_s - started_s) * 1000.0)
        for req in batch:
            latency_ms = (now_s - req.arrival_s) * 1000.0
            self.latencies.add(now_s, latency_ms)
            self.sla_ratios.add(now_s, latency_ms / req.sla_ms)
            counts["sla_met" if latency_ms <= req.sla_ms else "sla_missed"] += 1

    def stats(self, now_s: float) -> SchedulerStats:
        obs = self.observation
        c = self.counts
        return SchedulerStats(
            queue_depth=len(self._queue),
            window_ms=self._window_ms,
            utilization=obs.utilization,
            delay_variation=self.latencies.coefficient_of_variation(now_s),
            batches=c["batches"],
            requests=c["requests"],
            cost_correction=self.estimator.correction,
            zone=int(self.zones.zone),
            prewarmed=self.zones.prewarmed,
            zone_score=self.zones.score,
            observation_age_ms=obs.age_ms(now_s),
            p99_ms=obs.p99_ms,
            p99_cv=obs.p99_cv,
            logical_rate=self.clock.rate,
            sla_met=c["sla_met"],
            sla_missed=c["sla_missed"],
            rejected_infeasible=c["rejected_infeasible"],
            emergency_batches=c["emergency_batches"],
            compensation_batches=c["compensation_batches"],
            explicit_batches=c["explicit_batches"],
            perception_ok=self._perception_ok,
            control_period_ms=self._control_period_ms,
            control_lag_ms=max(0.0, self._control_period_ms - self.control.control_period_ms)
            if self._control_period_ms else 0.0,
            utilization_source=obs.utilization_source,
        )

    def __repr__(self) -> str:
        return (f"ReferenceScheduler(queue_depth={len(self._queue)}, zone={self.zones.zone.name}, "
                f"batches={self.counts['batches']})")
