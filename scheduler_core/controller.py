"""The design's perception and decision layers, and the control state they leave for the
execution layer (the batch formers and the dispatch rule in ``scheduler.py``).

* perception (``perception_period_ms``, 200): utilisation (the sidecar's, when fresh, else
  the executor's measured busy fraction), queue depth, P99 and its coefficient of
  variation, the tightest remaining SLA; every observation carries its time, so the
  decision layer knows how old its data is.
* decision (``control_period_ms``, 100): zone (safe / no-man's land / danger, with
  hysteresis and pre-warm), the elastic window, and compensation after a P99 breach.

The elastic window is kept on the design's two clocks: a request's batching window is
``base_window_ms`` of *logical* time from its logical arrival, and the logical clock runs
at ``base / adjusted`` times the physical one, so when the window changes while a request
waits, the rest of its window stretches or shrinks at once. ``window_close_s`` turns that
back into physical time: the one call that answers "when does this window close?".

Pure and clock-injected like the rest of the core: every method takes ``now_s``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from .clock import MAX_RATE, LogicalClock
from .perception import ArrivalRate, BusyTracker, LatencyWindow, coefficient_of_variation
from .contract import Mode, Zone
from .profile import ControlConfig, SchedulerConfig
from .request import Served
from .window import ElasticWindow
from .zones import ZoneDetector

# Above this age a sidecar utilisation sample is stale: fall back to the busy fraction.
EXTERNAL_UTILIZATION_MAX_AGE_S = 1.0
P99_HISTORY = 10  # perception periods over which the P99 coefficient of variation is taken
MIN_SAMPLES_FOR_COMPENSATION = 20


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
    arrival_rate_rps: float = 0.0  # arrivals per second over the perception window

    def age_ms(self, now_s: float) -> float:
        return (now_s - self.taken_s) * 1000.0


@dataclass(frozen=True)
class ControlState:
    """What the decision layer left for the execution layer (renewed whenever an input
    changes: a layer ran, a batch went or finished, perception health changed)."""

    zone: Zone
    mode: Mode  # scheduling_decision: which policy the zone calls for
    window_ms: float  # the elastic window
    tightest_sla_ms: float | None  # tightest feasible SLA of the last perception period
    compensation_size: int  # > 0: the next batch is a compensation batch of this size
    last_finish_s: float  # when the device last finished a batch
    observation: Observation


class QueueView(Protocol):
    """What perception reads of the queue."""

    def __len__(self) -> int: ...

    def min_deadline(self) -> float: ...


class Controller:
    """Perception windows, zone detector, elastic window, clocks and compensation."""

    def __init__(self, cfg: SchedulerConfig, control: ControlConfig, start_s: float = 0.0,
                 seed: int = 0):
        """``seed``: this controller's draw of jittered decision periods and zone exit
        dwells (give each of several controllers on one load its own, e.g. its instance
        index)."""
        self.cfg = cfg
        self.control = control
        self.window = ElasticWindow.from_config(cfg)
        self._rng = random.Random(seed)
        self.zones = ZoneDetector(control, self._rng)
        self.clock = LogicalClock(start_s)
        window_s = cfg.perception_window_ms / 1000.0
        self.busy = BusyTracker(window_s)
        self.arrivals = ArrivalRate(window_s)
        self.latencies = LatencyWindow(window_s)
        self.sla_ratios = LatencyWindow(window_s)  # latency / SLA of finished requests
        self.sla_met = self.sla_missed = 0
        self.perception_ok = True
        self.control_period_ms = 0.0  # measured interval between the last two decisions
        self._last_perception_s = -math.inf
        self._last_decision_s = -math.inf
        self._decision_gap_ms = self._next_gap_ms()
        self._p99_history: deque[float] = deque(maxlen=P99_HISTORY)
        self._external: tuple[float, float, str] | None = None  # (value, measured_at_s, source)
        self._window_ms = cfg.base_window_ms
        # Since when arrivals have come without an idle spell of a perception window
        # (None: no load yet); the window is smoothed only once that is a window old.
        self._load_since_s: float | None = None
        self._last_arrival_s = -math.inf
        self._tightest_sla_ms: float | None = None
        self._period_min_sla_ms = math.inf
        # The smallest SLA any request noted here has had (inf: none yet); a floor under
        # every later one but a smaller first (``Scheduler.launches_as_handed``).
        self.sla_floor_ms = math.inf
        self._avg_batch_size = 1.0
        self._compensation_size = 0
        self._last_compensation_s = -math.inf
        self._last_finish_s = -math.inf
        self.observation = Observation(start_s, 0.0, "busy_fraction", 0.0, 0, 0.0, 0.0, math.inf)
        self._refresh()

    # -- inputs ------------------------------------------------------------------------
    def on_arrival(self, now_s: float, sla_ms: float, alone_ms: float,
                   count: int = 1) -> float:
        """Count ``count`` arrivals of the same time; returns their logical arrival time.
        ``sla_ms``: the smallest SLA among them; ``alone_ms``: its request's estimated
        cost run alone (an SLA it cannot meet even so does not set the reserved capacity:
        say, 0.5 ms must not shrink everyone's batches)."""
        self.arrivals.add(now_s, count)
        if now_s - self._last_arrival_s > self.arrivals.window_s:
            self._load_since_s = now_s  # the load (re)starts after an idle spell
        self._last_arrival_s = now_s
        self.note_sla(sla_ms, alone_ms)
        return self.clock.now(now_s)

    def note_sla(self, sla_ms: float, alone_ms: float) -> None:
        """An arriving request's SLA for the period's tightest feasible SLA (what the next
        perception makes ``tightest_sla_ms``), as ``on_arrival`` counts it, without
        counting an arrival."""
        if sla_ms < self.sla_floor_ms:
            self.sla_floor_ms = sla_ms
        if alone_ms <= sla_ms < self._period_min_sla_ms:
            self._period_min_sla_ms = sla_ms

    def set_external_utilization(self, value: float, measured_at_s: float,
                                 source: str = "sidecar") -> None:
        """Feed a utilisation sample from the sidecar (NVML, Triton metrics)."""
        self._external = (min(max(value, 0.0), 1.0), measured_at_s, source)

    def set_perception_health(self, ok: bool) -> None:
        """False while the sidecar is unhealthy or stale: the controller then falls back to
        safe default batching (it cannot trust what it would act on). Read every call;
        the state is rebuilt only when the health changed."""
        if ok != self.perception_ok:
            self.perception_ok = ok
            self._refresh()

    def batch_started(self, now_s: float) -> None:
        self.busy.start(now_s)

    def batch_ended(self, now_s: float) -> None:
        """The device went free at ``now_s``: busy time, and the state the next decision
        reads (``ControlState.last_finish_s``)."""
        self.busy.stop(now_s)
        self._last_finish_s = now_s
        self._refresh()

    def batch_observed(self, served: Served, now_s: float, succeeded: bool) -> None:
        """A batch that ended at ``now_s`` (``batch_ended``), its latencies and SLAs (a
        batch that succeeded): the windows the next perception reads. The server may feed
        it a few batches late, while a later one runs (``runner.Runner``, at most a
        quarter of a perception period): nothing decided reads these windows before
        the perception period's next tick."""
        if succeeded and served.seq_lens:
            latency_ms, ratios, met = [], [], 0
            for arrival, sla in zip(served.arrivals_s, served.slas_ms):  # one pass a batch
                latency = (now_s - arrival) * 1000.0
                latency_ms.append(latency)
                ratios.append(latency / sla)
                met += latency <= sla
            self.latencies.add_many(now_s, latency_ms)
            self.sla_ratios.add_many(now_s, ratios)
            self.sla_met += met
            self.sla_missed += len(ratios) - met

    def on_dispatch(self, size: int, compensation: bool) -> None:
        """A batch of ``size`` went: the running batch size; ``compensation``: it was
        formed as the compensation batch, which is then spent."""
        self._avg_batch_size += 0.1 * (size - self._avg_batch_size)
        if compensation:
            self._compensation_size = 0
            self._refresh()

    # -- the layers --------------------------------------------------------------------
    def tick(self, now_s: float, queue: QueueView) -> None:
        """Run the perception and decision layers if their periods have elapsed."""
        ctl = self.control
        ran = False
        # The epsilon keeps exact multiples of a period (0.3 - 0.2 = 0.0999...) on time.
        if (now_s - self._last_perception_s) * 1000.0 >= ctl.perception_period_ms - 1e-9:
            self._perceive(now_s, queue)
            ran = True
        if (now_s - self._last_decision_s) * 1000.0 >= self._decision_gap_ms - 1e-9:
            self._decide(now_s, len(queue))
            self._decision_gap_ms = self._next_gap_ms()
            ran = True
        if ran:
            self._refresh()

    def _next_gap_ms(self) -> float:
        """The next decision period: control_period_ms, jittered by period_jitter."""
        jitter = self.control.period_jitter
        period = self.control.control_period_ms
        return period * (1.0 + jitter * self._rng.uniform(-1.0, 1.0)) if jitter else period

    def _utilization(self, now_s: float) -> tuple[float, str, float]:
        if self._external is not None:
            value, measured_at, source = self._external
            age = now_s - measured_at
            if age <= EXTERNAL_UTILIZATION_MAX_AGE_S:
                return value, source, age * 1000.0
        return self.busy.utilization(now_s), "busy_fraction", 0.0

    def _perceive(self, now_s: float, queue: QueueView) -> None:
        self._last_perception_s = now_s
        util, source, util_age_ms = self._utilization(now_s)
        p99 = 0.0
        if self.latencies.count(now_s):
            p99 = self.latencies.percentile(now_s, 99)
            self._p99_history.append(p99)
        min_remaining = queue.min_deadline()
        if self._period_min_sla_ms < math.inf:
            self._tightest_sla_ms = self._period_min_sla_ms
            self._period_min_sla_ms = math.inf
        self.observation = Observation(now_s, util, source, util_age_ms, len(queue), p99,
                                       coefficient_of_variation(self._p99_history),
                                       (min_remaining - now_s) * 1000.0,
                                       self.arrivals.rate_rps(now_s))

    def delay_variation(self, now_s: float) -> float:
        """The design's delay variation, the one input both the elastic window and the zone
        detector read: the coefficient of variation of the P99 latency over the last
        ``P99_HISTORY`` perception periods (``Observation.p99_cv``)."""
        return self.observation.p99_cv

    def _decide(self, now_s: float, queue_depth: int) -> None:
        if self._last_decision_s > -math.inf:
            self.control_period_ms = (now_s - self._last_decision_s) * 1000.0
        self._last_decision_s = now_s
        obs = self.observation
        if self.control.enabled:
            # Queue depth is read live (it is exact and free); utilisation and P99 come
            # from the latest observation, whose age is reported in the stats.
            self.zones.update(now_s, obs.utilization, queue_depth, obs.p99_cv)
        window_ms = self.window.adjusted_ms(obs.utilization, self.delay_variation(now_s))
        tau_ms = self.control.window_time_constant_ms
        if tau_ms and self._under_settled_load(now_s):
            # First-order smoothing with a time constant, not a per-decision factor, so a
            # jittered period does not change how fast the window follows.
            kept = math.exp(-self.control_period_ms / tau_ms)
            window_ms = kept * self._window_ms + (1.0 - kept) * window_ms
        self._window_ms = window_ms
        base = self.cfg.base_window_ms
        self.clock.set_rate(now_s, base / window_ms if window_ms > 0 and base > 0 else MAX_RATE)
        if self.control.enabled:
            self._check_compensation(now_s)

    def _under_settled_load(self, now_s: float) -> bool:
        """Whether requests have kept arriving for a whole perception window. Smoothing
        damps the window's reaction to a load that fluctuates; before that, the window
        follows the elastic window at once, so an idle device's wide window is not carried
        into a new load (a cold start, or the end of a lull longer than the window)."""
        window_s = self.arrivals.window_s
        return (self._load_since_s is not None and now_s - self._last_arrival_s <= window_s
                and now_s - self._load_since_s >= window_s)

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

    def _mode(self) -> Mode:
        """scheduling_decision: which policy the current zone calls for."""
        if not self.control.enabled or not self.perception_ok:
            return Mode.DEFAULT
        zone = self.zones.zone
        if zone == Zone.DANGER:
            return Mode.EMERGENCY
        if zone == Zone.NO_MANS_LAND or self.zones.prewarmed:
            return Mode.EXPLICIT
        return Mode.DEFAULT

    def _refresh(self) -> None:
        self.state = ControlState(self.zones.zone, self._mode(), self._window_ms,
                                  self._tightest_sla_ms, self._compensation_size,
                                  self._last_finish_s, self.observation)

    # -- the elastic window on the two clocks ------------------------------------------
    def window_close_s(self, logical_arrival_s: float, now_s: float) -> float:
        """Physical time at which the batching window of a request that arrived at logical
        time ``logical_arrival_s`` closes, at the current elastic window."""
        return self.clock.physical_at(logical_arrival_s + self.cfg.base_window_ms / 1000.0,
                                      now_s)

    def arrival_rate_rps(self, now_s: float) -> float:
        return self.arrivals.rate_rps(now_s)
