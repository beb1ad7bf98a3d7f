"""The zone boundaries from a sweep: each rate's measurements (``RatePoint``), where an
indicator crosses a level (``find_crossing``), and the thresholds they give (``find_boundaries``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..live import LoadRun, Series
from scheduler_core.perception import coefficient_of_variation
from scheduler_core.profile import ControlConfig


THRESHOLD_KEYS = ("utilization_safe", "utilization_danger", "queue_depth_safe",
                  "queue_depth_danger", "p99_cv_safe", "p99_cv_danger")


# A queue-depth threshold below one request would count any queued request as pressure.
MIN_QUEUE_DEPTH_THRESHOLD = 1.0

# -- per-rate measurements ---------------------------------------------------------------

@dataclass(frozen=True)
class RatePoint:
    """One offered load of the sweep: perf_analyzer's client-side view plus the explicit
    model's own queue depth and utilisation from the metrics port."""

    rate: float
    throughput: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p99_cv: float | None = None  # across per-second P99s of the run
    utilization: float | None = None  # mean over the run's samples
    queue_depth: float | None = None  # mean over the run's samples
    queue_depth_max: float | None = None
    goodput: float | None = None  # requests/s that met their SLA
    kept_schedule: bool = True
    samples: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def summarize_rate(rate: float, run: LoadRun, series: Series) -> RatePoint:
    """A ``RatePoint`` from one run and the snapshots sampled while it ran (those inside
    perf_analyzer's measurement windows when there are any)."""
    snaps = series.snapshots
    if len(run.windows) >= 2:
        inside = [s for s in snaps if run.windows[0] <= s.wall_s <= run.windows[-1]]
        snaps = inside or snaps

    def mean(name: str) -> float | None:
        values = [s.gauges[name] for s in snaps if name in s.gauges]
        return sum(values) / len(values) if values else None

    depths = [s.gauges["queue_depth"] for s in snaps if "queue_depth" in s.gauges]
    p99s = run.p99_per_bucket(1.0)
    return RatePoint(
        rate=rate, throughput=run.perf.throughput, p50_ms=run.perf.p50_ms,
        p99_ms=run.perf.p99_ms,
        p99_cv=coefficient_of_variation(p99s) if len(p99s) >= 2 else None,
        utilization=mean("utilization_ratio"), queue_depth=mean("queue_depth"),
        queue_depth_max=max(depths) if depths else None, goodput=run.goodput(),
        kept_schedule=run.perf.kept_schedule, samples=len(snaps))

# -- zone boundaries ---------------------------------------------------------------------

@dataclass(frozen=True)
class Crossing:
    """Where one indicator first rises through ``level`` along the sweep.

    ``status``: "found" (interpolated between two rates), "below_range" (already at or
    above the level at the lowest rate), "not_reached" (below it at every rate), or
    "no_data"."""

    indicator: str
    level: float
    status: str
    position: float | None = None  # fractional index into the sweep's points
    rate: float | None = None
    utilization: float | None = None
    queue_depth: float | None = None
    p99_cv: float | None = None


def _interpolate(points: Sequence[RatePoint], position: float) -> dict[str, float | None]:
    """Every indicator at a fractional index, each interpolated between its own nearest
    known values (a missing value at one rate does not blank the others)."""
    out = {}
    for key in ("rate", "utilization", "queue_depth", "p99_cv"):
        known = [(i, getattr(p, key)) for i, p in enumerate(points) if getattr(p, key) is not None]
        lower = [(i, v) for i, v in known if i <= position]
        upper = [(i, v) for i, v in known if i >= position]
        if not lower or not upper:
            out[key] = None
            continue
        (i, a), (j, b) = lower[-1], upper[0]
        out[key] = a if j == i else a + (position - i) / (j - i) * (b - a)
    return out


def find_crossing(points: Sequence[RatePoint], indicator: str, level: float) -> Crossing:
    """First sustained upward crossing of ``level`` by ``indicator`` (a RatePoint field),
    the points ordered by offered rate: the indicator is below the level at one rate and at
    or above it at the next and at the one after (if any) - a one-rate blip of a noisy
    signal is not a boundary. The other fields are interpolated at the same place."""
    indexed = [(i, getattr(p, indicator)) for i, p in enumerate(points)
               if getattr(p, indicator) is not None]
    if not indexed:
        return Crossing(indicator, level, "no_data")
    if indexed[0][1] >= level:
        return Crossing(indicator, level, "below_range", float(indexed[0][0]),
                        **_interpolate(points, float(indexed[0][0])))
    for k, ((i, a), (j, b)) in enumerate(zip(indexed, indexed[1:])):
        after = indexed[k + 2][1] if k + 2 < len(indexed) else None
        if a < level <= b and (after is None or after >= level):
            position = i + (j - i) * (level - a) / (b - a)
            return Crossing(indicator, level, "found", position, **_interpolate(points, position))
    return Crossing(indicator, level, "not_reached")


@dataclass(frozen=True)
class Calibration:
    """The sweep's zone boundaries and the thresholds measured at them."""

    crossings: tuple[Crossing, ...]
    nml: Crossing | None  # where the no-man's land begins (earliest lower-level crossing)
    danger: Crossing | None  # where the danger zone begins
    thresholds: dict[str, float]  # the six control keys, calibrated or kept
    calibrated: tuple[str, ...]  # the keys whose value was measured
    notes: tuple[str, ...] = ()


def _earliest(crossings: Sequence[Crossing]) -> Crossing | None:
    found = [c for c in crossings if c.status == "found"]
    return min(found, key=lambda c: c.position) if found else None


def find_boundaries(points: Sequence[RatePoint], current: ControlConfig,
                    p99_cv_levels: tuple[float, float] = (0.1, 0.3),
                    queue_depth_levels: tuple[float, float] = (5.0, 15.0)) -> Calibration:
    """This deployment's zone boundaries from a sweep (points ordered by offered rate).

    The no-man's land begins where the first of the two latency/queue signals reaches the
    design's lower level (P99 CV 0.1, queue depth 5), the danger zone where the first
    reaches the upper level (0.3, 15). The utilisation, queue depth and P99 CV measured at
    each boundary become that boundary's thresholds, so that on this deployment the three
    indicators cross together where it actually turns unstable. A boundary the sweep did
    not locate keeps the current thresholds."""
    points = sorted((p for p in points if p.ok), key=lambda p: p.rate)
    notes: list[str] = []
    p99_cv_levels = _p99_cv_levels_above_floor(points, p99_cv_levels, notes)
    cv_lo, cv_hi = (find_crossing(points, "p99_cv", level) for level in p99_cv_levels)
    qd_lo, qd_hi = (find_crossing(points, "queue_depth", level) for level in queue_depth_levels)
    nml, danger = _earliest((cv_lo, qd_lo)), _earliest((cv_hi, qd_hi))
    if nml is not None and danger is not None and nml.position >= danger.position:
        notes.append(f"the no-man's land boundary ({nml.indicator} at {nml.rate:.1f} req/s) is not "
                     f"below the danger boundary ({danger.indicator} at {danger.rate:.1f} req/s): "
                     "the signals disagree, the no-man's land boundary is left unlocated")
        nml = None
    thresholds = {k: getattr(current, k) for k in THRESHOLD_KEYS}
    _note_unlocated_crossings((cv_lo, cv_hi, qd_lo, qd_hi), points, notes)
    calibrated = _measured_thresholds(nml, danger, thresholds, notes)
    calibrated = _keep_safe_below_danger(thresholds, calibrated, current, notes)
    return Calibration((cv_lo, cv_hi, qd_lo, qd_hi), nml, danger, thresholds, tuple(calibrated),
                       tuple(notes))


def _p99_cv_levels_above_floor(points: Sequence[RatePoint], p99_cv_levels: tuple[float, float],
                               notes: list[str]) -> tuple[float, float]:
    """The P99 CV levels, counted from the lowest rate's P99 CV when that is already at or
    above the lower level (a note says so)."""
    floor = next((p.p99_cv for p in points if p.p99_cv is not None), None)
    if floor is not None and floor >= p99_cv_levels[0]:
        # A P99 taken over a second of a light load is the maximum of a few requests: its
        # variation has a floor of its own. The design's levels then count from that floor.
        shifted = (round(floor + p99_cv_levels[0], 3), round(floor + p99_cv_levels[1], 3))
        notes.append(f"the P99 CV at the lowest rate ({floor:.3f}) is already at or above "
                     f"{p99_cv_levels[0]:g} (few requests per second: the measurement's own "
                     f"floor): its levels are taken above that floor, {shifted[0]:g} and "
                     f"{shifted[1]:g}")
        p99_cv_levels = shifted
    return p99_cv_levels


def _note_unlocated_crossings(crossings: Sequence[Crossing], points: Sequence[RatePoint],
                              notes: list[str]) -> None:
    """A note per crossing the sweep's rates did not bracket, saying which rates to add."""
    for c in crossings:
        if c.status == "below_range":
            notes.append(f"{c.indicator} was already at or above {c.level:g} at the lowest rate "
                         f"({points[int(c.position)].rate:g} req/s): add lower rates to locate it")
        elif c.status == "not_reached":
            notes.append(f"{c.indicator} stayed below {c.level:g} at every rate: add higher rates "
                         "to locate it")


def _measured_thresholds(nml: Crossing | None, danger: Crossing | None,
                         thresholds: dict[str, float], notes: list[str]) -> list[str]:
    """Set ``thresholds`` to what was measured at each located boundary (clamped and
    rounded); the keys set."""
    calibrated: list[str] = []
    for boundary, suffix in ((nml, "safe"), (danger, "danger")):
        if boundary is None:
            notes.append(f"the {'no-mans-land' if suffix == 'safe' else 'danger'} boundary was "
                         f"not located: the *_{suffix} thresholds keep their current values")
            continue
        measured = {"utilization": boundary.utilization, "queue_depth": boundary.queue_depth,
                    "p99_cv": boundary.p99_cv}
        for indicator, value in measured.items():
            if value is None:
                continue
            if indicator == "utilization":
                value = round(min(max(value, 0.0), 1.0), 3)
            elif indicator == "queue_depth":
                if value < MIN_QUEUE_DEPTH_THRESHOLD:
                    notes.append(f"queue depth at the {suffix} boundary was {value:.2f}: raised "
                                 f"to {MIN_QUEUE_DEPTH_THRESHOLD:g} (below one request any "
                                 "queued request would count as pressure)")
                value = round(max(value, MIN_QUEUE_DEPTH_THRESHOLD), 1)
            else:
                value = round(max(value, 0.0), 3)
            thresholds[f"{indicator}_{suffix}"] = value
            calibrated.append(f"{indicator}_{suffix}")
    return calibrated


def _keep_safe_below_danger(thresholds: dict[str, float], calibrated: list[str],
                            current: ControlConfig, notes: list[str]) -> list[str]:
    """Restore the current pair of any indicator whose measured safe threshold is not
    below its danger one; the keys still calibrated."""
    for indicator in ("utilization", "queue_depth", "p99_cv"):
        safe, danger_key = f"{indicator}_safe", f"{indicator}_danger"
        if thresholds[safe] >= thresholds[danger_key]:
            notes.append(f"measured {safe}={thresholds[safe]:g} is not below {danger_key}="
                         f"{thresholds[danger_key]:g}: both keep their current values")
            thresholds[safe], thresholds[danger_key] = getattr(current, safe), getattr(current,
                                                                                         danger_key)
            calibrated = [k for k in calibrated if k not in (safe, danger_key)]
    return calibrated


def zone_of(rate: float, calibration: Calibration) -> str:
    """The calibrated zone of an offered load."""
    if calibration.danger is not None and rate >= calibration.danger.rate - 1e-9:
        return "danger"
    if calibration.nml is not None and rate >= calibration.nml.rate - 1e-9:
        return "no-mans-land"
    return "safe"
