"""The scheduler: the design's three control layers as a synchronous step function.

The caller (the Triton adapter, or the simulator) owns the loop and the clock:

    scheduler.submit(request, now_s)          # on arrival (may raise QueueFull)
    decision = scheduler.schedule(now_s)      # whenever the device is free
    scheduler.batch_started(batch, now_s)     # it dispatched decision.batch
    scheduler.batch_finished(batch, started_s, now_s, succeeded)   # responses went out

``schedule`` returns a batch to run now, or the time at which it wants to be asked again
(``wake_at_s``) if nothing arrives first; requests in ``decision.rejected`` must be failed
by the caller. No I/O, no threads, no clock reads: ``now_s`` is always passed in.

Layers (periods from the profile's ``control`` section, run lazily on the caller's clock):

* perception (``perception_period_ms``, 200): utilisation (the sidecar's, when fresh, else
  the executor's measured busy fraction), queue depth, P99 and its coefficient of
  variation, the tightest remaining SLA; every observation carries its time, so the
  decision layer knows how old its data is.
* decision (``control_period_ms``, 100): zone (safe / no-man's land / danger, with
  hysteresis and pre-warm), the elastic window (as the logical clock's rate), and
  compensation after a P99 breach.
* execution (every ``schedule`` call): ``scheduling_decision`` - danger -> emergency policy;
  no-man's land (or pre-warmed) -> explicit control; safe -> default dynamic batching.
  In every mode a partial batch waits for the elastic window only while waiting pays
  (``_waiting_pays``: more requests arrive within one batch overhead than are queued);
  otherwise the free device takes it at once, as Triton's batcher does at delay 0.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from itertools import islice, repeat
from typing import Iterable, Iterator, Sequence

import numpy as np

from .clock import MAX_RATE, LogicalClock
from .cost_model import CostEstimator
from .perception import ArrivalRate, BusyTracker, LatencyWindow, coefficient_of_variation
from .profile import ControlConfig, HardwareProfile, SchedulerConfig
from .request import QueuedRequest
from .window import ElasticWindow
from .zones import Zone, ZoneDetector

# Above this age a sidecar utilisation sample is stale: fall back to the busy fraction.
EXTERNAL_UTILIZATION_MAX_AGE_S = 1.0
P99_HISTORY = 10  # perception periods over which the P99 coefficient of variation is taken
MIN_SAMPLES_FOR_COMPENSATION = 20
INFEASIBLE = "deadline infeasible"
# One fixed message (no per-request numbers), so it also serves as a metric label.
INFEASIBLE_REASON = f"{INFEASIBLE}: the estimated finish already misses the request's SLA"


class QueueFull(Exception):
    """The queue holds ``max_queue_size`` requests already."""


@dataclass(frozen=True)
class BatchDecision:
    batch: tuple[QueuedRequest, ...]
    wake_at_s: float | None  # ask again at this time if nothing arrives; None = on arrival
    reason: str  # why the batch went ("full", "window", "deadline", "no_gain", ...) or "wait"/"idle"
    window_ms: float
    utilization: float
    estimated_ms: float  # estimated run time of ``batch`` (0 when empty)
    # Requests taken out of the queue to be failed now (UNAVAILABLE), each with its reason:
    # the caller must answer every one of them.
    rejected: tuple[tuple[QueuedRequest, str], ...] = ()
    zone: int = 0  # 0 safe, 1 no-man's land, 2 danger
    mode: str = "default"  # default | explicit | emergency


@dataclass(frozen=True)
class Observation:
    """One perception sample (all times on the caller's clock)."""

    taken_s: float
    utilization: float
    utilization_source: str  # "busy_fraction" or the sidecar's source (e.g. "nvml")
    utilization_age_ms: float  # how old the utilisation reading was when taken
    queue_depth: int
    p99_ms: float
    p99_cv: float
    min_remaining_sla_ms: float  # tightest remaining SLA in the queue (inf when empty)

    def age_ms(self, now_s: float) -> float:
        return (now_s - self.taken_s) * 1000.0


@dataclass(frozen=True)
class SchedulerStats:
    """Plain numbers for the adapter to log or publish; the core exports no metrics."""

    queue_depth: int
    window_ms: float
    utilization: float
    delay_variation: float
    batches: int
    requests: int
    cost_correction: float
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


class _Entry:
    """A queued request plus what the scheduler keeps about it."""

    __slots__ = ("req", "seq_len", "logical_arrival_s", "alone_ms", "efficient_ms",
                 "deadline_s", "slot")

    def __init__(self, req: QueuedRequest, logical_arrival_s: float, alone_ms: float,
                 efficient_ms: float):
        self.req = req
        self.seq_len = req.seq_len
        self.logical_arrival_s = logical_arrival_s
        # Uncorrected estimates: running it alone, and in an efficient batch of its length.
        self.alone_ms = alone_ms
        self.efficient_ms = efficient_ms
        self.deadline_s = req.deadline_s  # the same float, computed once
        self.slot = -1  # index in _EntryQueue.items while queued


# Urgency scores are first computed with numpy, decay ** x as exp(x * ln(decay)), which is
# within about 1e-15 (absolute) of the libm pow() that Python's ** uses; where that could
# change the order or the urgent flag, the score is recomputed exactly (_exact_rank). The
# margin, relative to the scores' size, is many orders of magnitude above that error.
_URGENCY_MARGIN = 1e-9
# Up to this many queued requests, scanning the queue in plain Python beats numpy's fixed
# cost per call (measured with scripts/bench_decision.py --depth).
_SMALL_QUEUE = 64


def _exact_rank(score: np.ndarray, exact_ok: np.ndarray, threshold: float, exact
                ) -> tuple[np.ndarray, np.ndarray]:
    """Rank candidates by an exact score known only approximately, without computing it
    for (nearly) all of them.

    ``score``: approximate scores, in arrival order, each within ``_URGENCY_MARGIN * (1 +
    |score|)`` of the exact one - except where ``exact_ok`` is false, where the score is
    exact already. ``exact(i)`` computes candidate ``i``'s exact score. Returns the indices
    in the order of the exact scores (highest first, ties in arrival order) and, per
    candidate, ``exact_ok & (exact score >= threshold)``.

    Two candidates whose approximate scores are further apart than twice the margin are in
    the same order by the exact scores; so are a score and ``threshold``. The exact score is
    computed only for candidates in a run of nearly equal scores (after sorting) or nearly
    at the threshold - typically none.
    """
    order = np.argsort(-score, kind="stable")
    if not order.size:
        return order, exact_ok
    ranked = score[order]
    margin = 2.0 * _URGENCY_MARGIN * (1.0 + max(abs(float(ranked[0])), abs(float(ranked[-1])),
                                                  abs(threshold)))
    close = ranked[:-1] - ranked[1:] <= margin
    near = np.abs(ranked - threshold) <= margin
    if close.any() or near.any():
        near[:-1] |= close
        near[1:] |= close
        redo = order[near & exact_ok[order]]
        if redo.size:
            score = score.copy()
            for i in redo.tolist():
                score[i] = exact(i)
            order = np.argsort(-score, kind="stable")
    return order, exact_ok & (score >= threshold)


class _EntryQueue:
    """The queue in arrival order with O(1) removal anywhere, and numpy columns beside it.

    Entries sit in slots ``lo .. hi-1`` of ``items`` (``None`` where one was taken out);
    ``deadline``, ``arrival``, ``alone``, ``efficient``, ``length`` and ``alive`` mirror them
    slot by slot, so a scan over the whole queue (infeasible requests, urgency scores, the tightest
    deadline) is a few vectorised operations instead of a Python loop. A removed slot's
    deadline is +inf, so it is never infeasible and never the tightest. Slot order is
    arrival order; the holes are squeezed out (``_compact``) when they outnumber the
    entries by more than 64 or the arrays are full.
    """

    def __init__(self, capacity: int = 256):
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: list[_Entry | None] = [None] * capacity
        self.deadline = np.full(capacity, np.inf)
        self.arrival = np.zeros(capacity)
        self.alone = np.zeros(capacity)
        self.efficient = np.zeros(capacity)
        self.length = np.zeros(capacity, dtype=np.int64)
        self.alive = np.zeros(capacity, dtype=bool)
        self.lo = self.hi = self.n = 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[_Entry]:
        # C-level iteration (no generator frame): entries are always truthy, holes None.
        return filter(None, islice(self.items, self.lo, self.hi))

    def first(self) -> _Entry:
        return self.items[self.lo]  # type: ignore[return-value]

    def append(self, e: _Entry) -> None:
        if self.hi == self.capacity:
            self._compact(grow=2 * self.n > self.capacity)
        i = self.hi
        self.items[i] = e
        e.slot = i
        self.deadline[i] = e.deadline_s
        self.arrival[i] = e.req.arrival_s
        self.alone[i] = e.alone_ms
        self.efficient[i] = e.efficient_ms
        self.length[i] = e.seq_len
        self.alive[i] = True
        self.hi = i + 1
        self.n += 1

    def discard(self, entries: Iterable[_Entry]) -> None:
        """Take queued entries out (each at most once)."""
        items = self.items
        slots = []
        for e in entries:
            slots.append(e.slot)
            items[e.slot] = None
            e.slot = -1
        if len(slots) > 8:
            self.deadline[slots] = math.inf
            self.alive[slots] = False
        else:  # cheaper one by one than as an index array
            deadline, alive = self.deadline, self.alive
            for i in slots:
                deadline[i] = math.inf
                alive[i] = False
        self.n -= len(slots)
        if not self.n:
            self.alive[self.lo:self.hi] = False
            self.lo = self.hi = 0
            return
        lo = self.lo
        while items[lo] is None:
            lo += 1
        self.lo = lo
        if self.hi - lo > 2 * self.n + 64:
            self._compact(grow=False)

    def clear(self) -> None:
        for e in self:
            e.slot = -1
        self._allocate(self.capacity)

    def _compact(self, grow: bool) -> None:
        """Squeeze the holes out (slot order kept); double the capacity if ``grow``."""
        lo, hi = self.lo, self.hi
        live = [e for e in self.items[lo:hi] if e is not None]
        idx = np.flatnonzero(self.alive[lo:hi]) + lo
        columns = (self.deadline, self.arrival, self.alone, self.efficient, self.length)
        if grow:
            old = columns
            self._allocate(2 * self.capacity)
            columns = (self.deadline, self.arrival, self.alone, self.efficient, self.length)
            for new, col in zip(columns, old):
                new[:len(live)] = col[idx]
        else:
            for col in columns:
                col[:len(live)] = col[idx]
            self.deadline[len(live):hi] = np.inf
            self.alive[len(live):hi] = False
        m = len(live)
        self.alive[:m] = True
        self.items[:hi] = live + [None] * (hi - m)
        for k, e in enumerate(live):
            e.slot = k
        self.lo, self.hi, self.n = 0, m, m

    def min_deadline(self) -> float:
        if not self.n:
            return math.inf
        return float(self.deadline[self.lo:self.hi].min())


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


class Scheduler:
    """Explicit-control batching over one device (one batch in flight at a time)."""

    @classmethod
    def from_profile(cls, profile: HardwareProfile, time_scale: float | None = None,
                     control: ControlConfig | None = None) -> "Scheduler":
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
        self.arrivals = ArrivalRate(window_s)
        self.latencies = LatencyWindow(window_s)
        self.sla_ratios = LatencyWindow(window_s)  # latency / SLA of finished requests
        self._queue = _EntryQueue()
        self._efficient_size = max(1, math.ceil(self.control.min_batch_fill * cfg.max_batch_size))
        batching = self.control.safe_zone_batching
        self._length_aware_safe_zone = batching == "length_aware" or (
            batching == "auto" and estimator.cost_mode == "padded")
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
        self.arrivals.add(now_s)
        # The tightest SLA sets the reserved capacity; one that cannot be met even alone
        # (say, 0.5 ms) must not shrink everyone's batches.
        if alone * self.estimator.correction <= request.sla_ms < self._period_min_sla_ms:
            self._period_min_sla_ms = request.sla_ms

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
        min_remaining = self._queue.min_deadline()
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
        self._queue.discard(entries)

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
        q = self._queue
        if not q.n:
            return ()
        corr = self.estimator.correction
        behind = self._behind()
        lo, hi = q.lo, q.hi
        if q.n <= _SMALL_QUEUE:
            doomed = [e for e in q if now_s + (e.efficient_ms if behind else e.alone_ms)
                      * corr / 1000.0 > e.deadline_s]
        else:
            # The same expression elementwise: the same IEEE operations, so the same
            # answers; taken-out slots have deadline +inf.
            cost = (q.efficient if behind else q.alone)[lo:hi]
            late = np.flatnonzero(now_s + cost * corr / 1000.0 > q.deadline[lo:hi])
            items = q.items
            doomed = [items[lo + i] for i in late.tolist()]  # in queue order
        if not doomed:
            return ()
        self._take(doomed)
        self.counts["rejected_infeasible"] += len(doomed)
        return tuple((e.req, INFEASIBLE_REASON) for e in doomed)

    def _window_close_s(self, now_s: float) -> float:
        oldest = self._queue.first()
        return self.clock.physical_at(oldest.logical_arrival_s + self.cfg.base_window_ms / 1000.0,
                                      now_s)

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
        expected = self.arrivals.rate_rps(now_s) * self.estimator.batch_overhead_ms() / 1000.0
        return batch_size < self.cfg.wait_ms_per_saved_device_ms * expected

    def _dispatch_or_wait(self, now_s: float, entries: list[_Entry], est_ms: float, full: bool,
                          immediate: str | None, deadline_s: float):
        """Common dispatch rule: full, immediate (flush/compensation/emergency), the SLA
        guard (waiting longer would miss ``deadline_s``), the elastic window, or waiting
        would not pay (``_waiting_pays``: reason ``no_gain``)."""
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
        if not self._waiting_pays(len(entries), now_s):
            return entries, est_ms, "no_gain", None
        return [], 0.0, "wait", min(window_close_s, latest_start_s)

    def _default_batch(self, now_s: float, flush: bool, compensation: bool):
        """Default dynamic batching: FIFO prefix, elastic window, SLA guard - or, where the
        profile's ``safe_zone_batching`` asks for it (a padded device, by default), the
        length-aware batch former of explicit control."""
        if self._length_aware_safe_zone:
            return self._explicit_batch(now_s, flush, compensation, emergency=False)
        cfg = self.cfg
        cap = self._compensation_size if compensation else cfg.max_batch_size
        entries = take_fifo(self._queue, cap, cfg.max_batch_tokens)
        est_ms = self.estimator.estimate_ms([e.seq_len for e in entries])
        full = len(entries) < len(self._queue) or len(entries) >= cap
        immediate = "flush" if flush else ("compensation" if compensation else None)
        deadline = min(e.deadline_s for e in entries)
        return self._dispatch_or_wait(now_s, entries, est_ms, full and not compensation,
                                      immediate, deadline)

    def _urgency_order(self, now_s: float, limit: int
                       ) -> tuple[list[bool], list[bool], list[int], list[int]]:
        """The ``limit`` most urgent queued requests, most urgent first, as parallel lists:
        whether each is urgent (feasible and urgency >= ``urgent_threshold``), whether its
        deadline is still feasible (alone, or efficiently when behind), its slot in
        ``self._queue.items`` and its length.

        Urgency = urgency_decay_rate ** (slack_ms / urgency_slack_unit_ms) + aging_per_s *
        waited_s; a request that cannot make its deadline even alone scores -1 + aging
        instead (it goes last, but aging still lifts it, so nothing starves). The order is
        by urgency, most urgent first, equal urgency in arrival order.
        """
        q = self._queue
        ctl = self.control
        corr = self.estimator.correction
        decay, unit, aging = ctl.urgency_decay_rate, ctl.urgency_slack_unit_ms, ctl.aging_per_s
        threshold = ctl.urgent_threshold
        behind = self._behind()
        lo, hi = q.lo, q.hi
        # (The vectorised form needs 0 < decay < 1 and unit > 0, as profiles are validated
        # to have; anything else takes the scalar definition, errors included.)
        if q.n <= _SMALL_QUEUE or not (0.0 < decay < 1.0 and unit > 0.0):
            scored = []
            for e in q:
                slack_ms = (e.deadline_s - now_s) * 1000.0 - (
                    e.efficient_ms if behind else e.alone_ms) * corr
                waited_s = now_s - e.req.arrival_s
                if slack_ms >= 0:
                    scored.append((decay ** (slack_ms / unit) + aging * waited_s, True, e))
                else:
                    scored.append((-1.0 + aging * waited_s, False, e))
            scored.sort(key=lambda t: -t[0])  # stable: equal urgency keeps arrival order
            del scored[limit:]
            return ([ok and u >= threshold for u, ok, _ in scored], [ok for _, ok, _ in scored],
                    [e.slot for _, _, e in scored], [e.seq_len for _, _, e in scored])

        # Vectorised: the same order, and every urgent flag the same (see _exact_rank).
        cost = (q.efficient if behind else q.alone)[lo:hi]
        # The scalar expressions above, elementwise: the same floats (IEEE).
        slack = (q.deadline[lo:hi] - now_s) * 1000.0 - cost * corr
        ok = slack >= 0
        aged = aging * (now_s - q.arrival[lo:hi])
        # Approximate scores (exp for **: see _URGENCY_MARGIN); slack clipped at 0 so a
        # long-missed deadline cannot overflow (those score -1 + aging, exactly, anyway).
        approx = np.where(ok, np.exp(np.maximum(slack, 0.0) * (math.log(decay) / unit)),
                          -1.0) + aged
        alive = q.alive[lo:hi]
        approx[~alive] = -np.inf
        if limit < q.n:
            # Whatever could be among the first ``limit`` (by the exact score) is within the
            # margin of the limit-th largest approximate score, or above it.
            kth = np.partition(approx, approx.size - limit)[approx.size - limit]
            cand = np.flatnonzero(approx >= kth - 2.0 * _URGENCY_MARGIN * (1.0 + abs(kth)))
        else:
            cand = np.flatnonzero(alive)
        ok_c = ok[cand]

        def exact(i: int) -> float:
            """The scalar formula for candidate ``i`` (feasible ones only)."""
            return decay ** (float(slack[cand[i]]) / unit) + float(aged[cand[i]])

        order, urgent = _exact_rank(approx[cand], ok_c, threshold, exact)
        order = order[:limit]
        slots = cand[order] + lo
        return (urgent[order].tolist(), ok_c[order].tolist(), slots.tolist(),
                q.length[slots].tolist())

    def _explicit_batch(self, now_s: float, flush: bool, compensation: bool, emergency: bool):
        """Explicit control: urgency order, priority slots, compute-aware splitting by
        length, reserved capacity; in danger, small emergency batches for urgent work."""
        cfg, ctl, est = self.cfg, self.control, self.estimator
        padded = est.cost_mode == "padded"
        size_cap = self._compensation_size if compensation else cfg.max_batch_size
        # Looking far down the urgency order buys little: the scan is bounded to the
        # 8 * size_cap most urgent (seed included).
        urgent_flags, feasible, top, lengths = self._urgency_order(now_s, 8 * size_cap)
        q = self._queue
        items = q.items
        duration_cap_ms = math.inf
        if not emergency and not compensation and self._tightest_sla_ms:
            duration_cap_ms = (1.0 - ctl.reserved_capacity) * 0.5 * self._tightest_sla_ms
        urgent_lane = False
        if emergency and not compensation:
            # A burst (not yet a full batch behind): small batches for the most urgent.
            # Once behind, only full, efficient batches keep the device ahead of the queue.
            if not self._behind() and urgent_flags[0]:
                size_cap = min(size_cap, ctl.emergency_batch_size)
                urgent_lane = True
            if ctl.dilution and now_s < self._last_finish_s + ctl.dilution_gap_ms / 1000.0:
                return [], 0.0, "dilution", self._last_finish_s + ctl.dilution_gap_ms / 1000.0

        seed_ok, seed = feasible[0], items[top[0]]
        members = [top[0]]
        longest = real = seed.seq_len
        squared = real * real
        deadline = seed.deadline_s if seed_ok else math.inf
        priority_slots = ctl.priority_slots
        stop_noncritical = emergency and ctl.emergency_stop_noncritical
        noncritical_ms = ctl.noncritical_sla_ms
        seed_noncritical = seed.req.sla_ms >= noncritical_ms
        max_waste = ctl.max_padding_waste
        check_waste = padded and not compensation
        max_tokens = cfg.max_batch_tokens
        est_ms = est.estimate_parts_ms(1, longest, real, squared)
        # est.estimate_parts_ms inlined (the same float operations, in the same order):
        # this loop runs up to 8 * size_cap times per decision.
        cm = est.cfg
        fixed, per_seq, per_tok, per_sq = (cm.fixed_ms, cm.per_sequence_ms, cm.per_token_ms,
                                           cm.per_token_squared_ms)
        scale, corr = est.time_scale, est.correction
        # The seed and the candidates after it, most urgent first (none for a batch of one).
        stop = 8 * size_cap if size_cap > 1 else 1
        # Urgency matters only for priority slots and the urgent lane.
        urgent_flags = (islice(urgent_flags, 1, stop) if priority_slots > 0 or urgent_lane
                        else repeat(False))
        filtering = urgent_lane or stop_noncritical
        size = 2  # the batch's size if the next candidate joins
        span = longest * size  # its padded tokens if the candidate is not longer
        # Every check below only skips a candidate, so their order is free: the cheapest
        # and most selective first (padding waste rejects most candidates).
        for urgent, ok, n, slot in zip(urgent_flags, islice(feasible, 1, stop),
                                       islice(lengths, 1, stop), islice(top, 1, stop)):
            if n <= longest:
                new_longest, new_span = longest, span
            else:
                new_longest, new_span = n, n * size
            # Compute-aware splitting (padded): too much padding, unless on a priority slot.
            if check_waste and 1.0 - (real + n) / new_span > max_waste and not (
                    urgent and priority_slots > 0):
                continue
            if new_span > max_tokens:
                continue
            if filtering and ((urgent_lane and not urgent) or (stop_noncritical and (
                    seed_noncritical or items[slot].req.sla_ms >= noncritical_ms))):
                continue
            if padded:
                candidate_ms = (fixed + per_seq * size + per_tok * new_span
                                + per_sq * (new_span * new_longest)) * scale * corr
            else:
                candidate_ms = (fixed + per_seq * size + per_tok * (real + n)
                                + per_sq * (squared + n * n)) * scale * corr
            if candidate_ms > duration_cap_ms:
                continue
            if ok:
                due = items[slot].deadline_s
                bound = deadline if deadline <= due else due
            else:
                bound = deadline
            if now_s + candidate_ms / 1000.0 > bound:
                continue  # adding it would make a member miss: leave it for another batch
            members.append(slot)
            longest, real, squared, deadline, est_ms = (new_longest, real + n, squared + n * n,
                                                        bound, candidate_ms)
            if urgent and priority_slots > 0:
                priority_slots -= 1
            size += 1
            if size > size_cap:
                break
            span = longest * size
        members = [items[slot] for slot in members]

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
        return (f"Scheduler(queue_depth={len(self._queue)}, zone={self.zones.zone.name}, "
                f"batches={self.counts['batches']})")
