"""``calibrate``: the design's tuning road map (docs/design.md, section 5.2) against a live server.

Cold start (default)
    Explicit control off (the model is reloaded with ``control.enabled=false`` through
    Triton's model-load API), a perf_analyzer request-rate sweep, the load-latency curve,
    and this deployment's zone boundaries: where the P99 coefficient of variation crosses
    0.1 and 0.3 and where the queue depth crosses 5 and 15 (the design's table). The
    thresholds measured there go into a hardware profile (a copy of the model's current
    one, only the six zone thresholds changed), and a control-effect baseline for
    ``monitor --check-metric-drift`` is recorded with control back as it was.
``--reset-parameters baseline --profile PATH``
    The design's conservative start, scheduler.alpha=0.2 and beta=0.1, written in place.
``--step``
    Walk alpha, then beta, in steps (one reload with ``scheduler.alpha``/``scheduler.beta``
    parameters and one perf_analyzer run per change) and report goodput and P99 per setting.
    Each reload also sets ``control.infeasible_policy=serve_late`` (benchmark mode,
    ``operator_tools.benchmark_mode``; ``--infeasible-policy as-configured`` leaves it):
    perf_analyzer stops at the first refused request, so a step rate past the knee would
    otherwise measure nothing. The cold-start sweep needs no such change: with
    ``control.enabled=false`` the plugin refuses no request for its deadline.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import click

from scheduler_core.perception import coefficient_of_variation
from scheduler_core.profile import ControlConfig, HardwareProfile, ProfileError
from scheduler_core.profile_files import load_profile

from . import resources
from . import live
from .benchmark_mode import RECIPE as BENCHMARK_MODE, SERVED_LATE_NOTE
from .live import LoadRefused, LoadRun, PluginSnapshot, Series
from .measure import default_metrics_url
from .perf_analyzer import failure_reason, load_sweep
from .profile_editor import write_profile

# From the package when installed as a wheel, else the checkout (operator_tools.resources).
DEFAULT_REPOSITORY = resources.model_templates_dir()
DEFAULT_INPUT = os.path.join(resources.configs_dir(), "mixed_sla.json")
DEFAULT_SWEEP = os.path.join(resources.configs_dir(), "sweeps", "request_rate.yaml")
THRESHOLD_KEYS = ("utilization_safe", "utilization_danger", "queue_depth_safe",
                  "queue_depth_danger", "p99_cv_safe", "p99_cv_danger")
# The design's conservative start and recommended ranges (section 4.2 and 5.2).
BASELINE_ALPHA, BASELINE_BETA = 0.2, 0.1
ALPHA_RANGE, BETA_RANGE = (0.2, 0.5), (0.1, 0.3)
SAMPLE_INTERVAL_S = 0.2
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


# -- profile files ---------------------------------------------------------------------

def reset_parameters(path: str) -> tuple[dict[str, float], HardwareProfile]:
    """Rewrite the profile at ``path`` in place with the design's conservative start
    (scheduler.alpha=0.2, beta=0.1); returns the previous values and the new profile."""
    before = load_profile(path)
    profile = write_profile(path, path, {"scheduler": {"alpha": BASELINE_ALPHA,
                                                       "beta": BASELINE_BETA}}, rename=False)
    return {"alpha": before.scheduler.alpha, "beta": before.scheduler.beta}, profile


# -- the load-latency curve --------------------------------------------------------------

def plot_curve(points: Sequence[RatePoint], calibration: Calibration, path: str, title: str) -> None:
    """P50/P99 against offered load; utilisation and queue depth on second axes; the
    calibrated boundaries as vertical lines."""
    import matplotlib  # noqa: PLC0415 - only the sweep draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    ok = [p for p in points if p.ok]
    rates = [p.rate for p in ok]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    ax.plot(rates, [p.p50_ms for p in ok], "o-", color="tab:blue", label="P50 latency")
    ax.plot(rates, [p.p99_ms for p in ok], "s-", color="tab:red", label="P99 latency")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("latency (ms)")
    if ok and min(p.p50_ms or 1 for p in ok) > 0 and max(p.p99_ms or 0 for p in ok) > 20 * min(
            p.p50_ms or 1 for p in ok):
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    util_ax = ax.twinx()
    util_ax.plot(rates, [p.utilization for p in ok], "^--", color="tab:green", label="utilisation")
    util_ax.set_ylabel("utilisation (0-1)", color="tab:green")
    util_ax.set_ylim(0, 1.05)
    queue_ax = ax.twinx()
    queue_ax.spines["right"].set_position(("axes", 1.12))
    queue_ax.plot(rates, [p.queue_depth for p in ok], "d--", color="tab:purple",
                  label="queue depth (mean)")
    queue_ax.set_ylabel("queue depth (requests)", color="tab:purple")
    for boundary, label, color in ((calibration.nml, "no-man's land", "orange"),
                                   (calibration.danger, "danger", "darkred")):
        if boundary is not None and boundary.rate is not None:
            ax.axvline(boundary.rate, color=color, linestyle=":", linewidth=1.5)
            ax.annotate(f"{label}\n{boundary.rate:.0f} req/s", (boundary.rate, 1.0),
                        xycoords=("data", "axes fraction"), xytext=(3, -28),
                        textcoords="offset points", color=color, fontsize=8)
    handles = []
    for a in (ax, util_ax, queue_ax):
        handles += a.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- tables ------------------------------------------------------------------------------

def _f(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def sweep_table(points: Sequence[RatePoint], calibration: Calibration | None) -> str:
    lines = ["| offered (req/s) | throughput (req/s) | P50 (ms) | P99 (ms) | P99 CV | "
             "utilisation | queue depth mean (max) | goodput (req/s) | kept schedule | zone |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for p in sorted(points, key=lambda p: p.rate):
        if not p.ok:
            lines.append(f"| {p.rate:g} | failed: {p.error} |  |  |  |  |  |  |  |  |")
            continue
        zone = zone_of(p.rate, calibration) if calibration else ""
        lines.append(
            f"| {p.rate:g} | {_f(p.throughput)} | {_f(p.p50_ms)} | {_f(p.p99_ms)} | "
            f"{_f(p.p99_cv, '.3f')} | {_f(p.utilization, '.2f')} | {_f(p.queue_depth)} "
            f"({_f(p.queue_depth_max, '.0f')}) | {_f(p.goodput)} | "
            f"{'yes' if p.kept_schedule else 'NO'} | {zone} |")
    return "\n".join(lines)


def crossing_table(calibration: Calibration) -> str:
    lines = ["| indicator | level | status | offered (req/s) | utilisation | queue depth | P99 CV |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for c in calibration.crossings:
        lines.append(f"| {c.indicator} | {c.level:g} | {c.status} | {_f(c.rate)} | "
                     f"{_f(c.utilization, '.3f')} | {_f(c.queue_depth)} | {_f(c.p99_cv, '.3f')} |")
    return "\n".join(lines)


def threshold_table(before: ControlConfig, calibration: Calibration) -> str:
    lines = ["| control key | before | calibrated |", "|---|---:|---:|"]
    for key in THRESHOLD_KEYS:
        new = calibration.thresholds[key]
        mark = "" if key in calibration.calibrated else " (kept)"
        lines.append(f"| {key} | {getattr(before, key):g} | {new:g}{mark} |")
    return "\n".join(lines)


# -- injection points (the unit tests replace them) --------------------------------------

@dataclass
class CalibrateDeps:
    run_load: Callable[..., LoadRun] = live.run_load
    model_control: Callable[[str, str], Any] = live.ModelControl
    sampler: Callable[[str, str, float], Any] = live.BackgroundSampler
    snapshot: Callable[[str, str], PluginSnapshot] = live.snapshot
    progress: Callable[..., Any] | None = None  # tqdm-like; None: tqdm on stderr


def _progress(deps: CalibrateDeps, items, desc: str):
    if deps.progress is not None:
        return deps.progress(items, desc=desc)
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(items, desc=desc, unit="run", file=sys.stderr, dynamic_ncols=True)


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in re.split(r"[,\s]+", text.strip()) if x]
    except ValueError:
        raise click.BadParameter(f"rates must be numbers separated by commas, got {text!r}") from None
    if not rates or any(not math.isfinite(r) or r <= 0 for r in rates):
        raise click.BadParameter(f"rates must be positive numbers, got {text!r}")
    return sorted(set(rates))


def _command_line(ctx: click.Context) -> str:
    """The invocation as an equivalent command line (options given on the command line)."""
    import shlex  # noqa: PLC0415

    parts = ["explicit-batching", "calibrate", ctx.info_name or "cold-start"]
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name != "COMMANDLINE":
            continue
        value = ctx.params[param.name]
        opt = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            if value:
                parts.append(opt)
        elif value is not None:
            parts += [opt, str(value)]
    return shlex.join(parts)


def _show(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it (reports stay
    readable and portable), else absolute."""
    full, cwd = os.path.abspath(path), os.getcwd()
    return os.path.relpath(full, cwd) if os.path.commonpath([full, cwd]) == cwd else full


def _profile_dir(config: Mapping[str, Any], model: str, repository: str) -> str:
    return os.path.join(repository, live.parameter(config, "profile_dir") or
                        os.path.join(model, "profiles"))


def _emulation_note(config: Mapping[str, Any], profile: HardwareProfile | None) -> tuple[str, float]:
    """("EMULATED device ... " or "", time scale) of the model."""
    if live.parameter(config, "executor") != "emulated":
        return "", 1.0
    scale = live.parameter(config, "time_scale")
    try:
        time_scale = float(scale) if scale else (profile.emulation.time_scale if profile else 1.0)
    except ValueError:
        time_scale = 1.0
    return (f"EMULATED device (a cost model slept, not a GPU), time scale {time_scale:g}: "
            f"the device runs {time_scale:g}x slower than the profile's hardware"), time_scale


def _resolve_sla_scale(text: str, time_scale: float) -> float:
    if text == "auto":
        return time_scale
    try:
        value = float(text)
    except ValueError:
        raise click.BadParameter(f"--sla-scale must be a number or 'auto', got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise click.BadParameter(f"--sla-scale must be positive, got {text!r}")
    return value


# -- the command -------------------------------------------------------------------------

# Every option of the four subcommands, by name; each subcommand takes the ones it lists.
_OPTIONS = {
    "url": click.option("--url", required=True,
                        help="Triton HTTP endpoint HOST:PORT of the running server."),
    "model": click.option("--model", default="emulated_explicit", show_default=True,
                          help="The explicit-control model to calibrate."),
    "metrics_url": click.option("--metrics-url",
                                help="Triton metrics page [default: http://HOST:PORT+2/metrics]."),
    "out_path": click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True,
                             help="Profile YAML to write (its name becomes the profile name)."),
    "rates": click.option("--rates", help="Offered loads in requests/s, comma separated "
                          "[default: perf_analyzer_configs/sweeps/request_rate.yaml when present]."),
    "sweep_file": click.option("--sweep", "sweep_file",
                               type=click.Path(exists=True, dir_okay=False),
                               help="Request-rate sweep YAML (keys: perf_analyzer_configs/README.md)."),
    "measurement_ms": click.option(
        "--measurement-ms", type=click.IntRange(200, 60_000), default=None,
        help="Length of each perf_analyzer measurement window (three per run) [1000, or the "
             "sweep's run_duration_s]."),
    "request_distribution": click.option(
        "--request-distribution", type=click.Choice(["poisson", "constant"]), default=None,
        help="Arrival process of each run [poisson, or the sweep's]."),
    "input_data": click.option(
        "--input-data", type=click.Path(exists=True, dir_okay=False), default=None,
        help="perf_analyzer --input-data file [perf_analyzer_configs/mixed_sla.json]."),
    "sla_scale": click.option(
        "--sla-scale", default="auto", show_default=True,
        help="Multiply the input's SLA_MS by this ('auto': the emulated device's time scale)."),
    "protocol": click.option("--protocol", type=click.Choice(["http", "grpc"]), default="http",
                             show_default=True),
    "base_profile": click.option(
        "--base-profile", type=click.Path(exists=True, dir_okay=False),
        help="Profile to start from [default: the one the model runs, from its profiles folder]."),
    "model_repository": click.option(
        "--model-repository", type=click.Path(file_okay=False), default=DEFAULT_REPOSITORY,
        show_default=True, help="Where the model's profiles folder is (to find the base profile)."),
    "plot_path": click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
                              help="Load-latency curve PNG [default: load_latency.png beside --out]."),
    "report_path": click.option("--report", "report_path", type=click.Path(dir_okay=False),
                                help="Markdown report [default: calibrate.md beside --out]."),
    "baseline_path": click.option(
        "--baseline", "baseline_path", type=click.Path(dir_okay=False),
        help="Control-effect baseline JSON for monitor [default: baseline.json beside --out]."),
    "baseline_rate": click.option(
        "--baseline-rate", type=float, default=None,
        help="Offered load of the baseline run [default: the highest rate below the danger zone]."),
    "no_baseline": click.option("--no-baseline", is_flag=True, help="Skip the baseline run."),
    "step_rate": click.option("--step-rate", type=float, default=None,
                              help="Offered load of each run [default: the first of --rates]."),
    "step_size": click.option("--step-size", type=click.FloatRange(0.01, 0.3), default=0.1,
                              show_default=True,
                              help="Step of alpha and beta (0.1: the design's 10% steps)."),
    "max_steps": click.option("--max-steps", type=click.IntRange(1, 1000), default=None,
                              help="At most this many runs (settings)."),
    "infeasible_policy": click.option(
        "--infeasible-policy", type=click.Choice(["serve_late", "as-configured"]),
        default="serve_late", show_default=True,
        help="serve_late reloads each setting with control.infeasible_policy=serve_late "
             "(perf_analyzer stops at the first refused request); as-configured leaves the "
             "model's policy."),
    "profile_path": click.option("--profile", "profile_path", required=True,
                                 type=click.Path(exists=True, dir_okay=False),
                                 help="The profile to rewrite in place."),
    "table_json": click.option(
        "--table-json", type=click.Path(exists=True, dir_okay=False), default=None,
        help="A measured cost table (JSON rows of batch/length/ms, as scripts/gpu_bench.py "
             "writes). No server needed."),
    "measure_table": click.option(
        "--measure", "measure_table", is_flag=True,
        help="Measure the cost table of the real MiniLM executor on this host (--device)."),
    "table_device": click.option("--device", "table_device", default="cpu", show_default=True,
                                 help="--measure: torch device (cpu, cuda:0)."),
    "table_budget_s": click.option("--budget-s", "table_budget_s",
                                   type=click.FloatRange(0.1, 600), default=10.0,
                                   show_default=True, help="--measure: wall-clock budget."),
}
_SWEEP = ("url", "model", "metrics_url", "rates", "sweep_file", "measurement_ms",
          "request_distribution", "input_data", "sla_scale", "protocol", "base_profile",
          "model_repository")
# Each subcommand passes its own options to the helpers; the one shared helper that reads
# options of another subcommand, _sweep_settings (cold-start and step), reads these two.
_UNSET = {"step": False, "step_rate": None}


def _options(*names: str):
    def decorate(f):
        for name in reversed(names):
            f = _OPTIONS[name](f)
        return f
    return decorate


@click.group(name="calibrate", invoke_without_command=True)
@click.option("--reset-parameters", type=click.Choice(["baseline"]), default=None,
              help="The design's spelling of `calibrate reset`: rewrite --profile with "
                   "alpha=0.2, beta=0.1.")
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False),
              help="With --reset-parameters: the profile to rewrite in place.")
@click.pass_context
def command(ctx: click.Context, reset_parameters: str | None, profile_path: str | None) -> None:
    """The design's tuning road map: cold-start (explicit control off, request-rate sweep,
    zone boundaries, a hardware profile), step (alpha/beta walk on the live model), reset
    (the conservative start) and table (a measured cost table into a profile)."""
    if ctx.invoked_subcommand is not None:
        return
    if reset_parameters:
        if not profile_path:
            raise click.UsageError("--reset-parameters baseline needs --profile PATH")
        _reset({"profile_path": profile_path})
        return
    click.echo(ctx.get_help())


@command.command(name="cold-start")
@_options(*_SWEEP, "out_path", "plot_path", "report_path", "baseline_path", "baseline_rate",
          "no_baseline")
@click.pass_context
def cold_start(ctx: click.Context, **given) -> None:
    """Explicit control off, a request-rate sweep, the zone boundaries it finds, written
    into a validated profile (and a baseline for monitor)."""
    opts = {**_UNSET, **given}
    deps = ctx.find_object(CalibrateDeps) or CalibrateDeps()
    metrics_url = opts["metrics_url"] or default_metrics_url(opts["url"])
    _cold_start(ctx, deps, opts, metrics_url, _sweep_settings(opts))


@command.command(name="step")
@_options(*_SWEEP, "step_rate", "step_size", "max_steps", "infeasible_policy")
@click.pass_context
def step(ctx: click.Context, **given) -> None:
    """Walk scheduler.alpha (0.2..0.5), then beta (0.1..0.3), on the live model: one reload
    and one perf_analyzer run per setting; goodput and P99 of each, and the best."""
    opts = {**_UNSET, **given, "step": True}
    deps = ctx.find_object(CalibrateDeps) or CalibrateDeps()
    metrics_url = opts["metrics_url"] or default_metrics_url(opts["url"])
    _step(ctx, deps, opts, metrics_url, _sweep_settings(opts))


@command.command(name="reset")
@_options("profile_path")
def reset(profile_path: str) -> None:
    """Rewrite --profile in place with the design's conservative start (alpha=0.2,
    beta=0.1), validated."""
    _reset({"profile_path": profile_path})


@command.command(name="table")
@_options("base_profile", "out_path", "table_json", "measure_table", "table_device",
          "table_budget_s")
def table(**given) -> None:
    """A measured cost table (--table-json FILE, or --measure on this host) written into
    --base-profile as cost_model.table, saved to --out."""
    opts = {**_UNSET, **given}
    if bool(opts["table_json"]) == bool(opts["measure_table"]):
        raise click.UsageError("give exactly one of --table-json FILE and --measure")
    _write_table(opts)


def _write_table(opts: Mapping[str, Any]) -> None:
    """calibrate table: a measured cost table into a profile."""
    from .cost_table_io import measure_minilm_table, read_table_json, write_table_profile

    if not opts["base_profile"]:
        raise click.UsageError("calibrate table needs --base-profile")
    try:
        if opts["table_json"]:
            rows, source = read_table_json(opts["table_json"])
        else:
            base = load_profile(opts["base_profile"])
            rows, source = measure_minilm_table(base, opts["table_device"],
                                                opts["table_budget_s"])
        profile = write_table_profile(opts["base_profile"], opts["out_path"], rows, source)
    except (ProfileError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{opts['out_path']}: cost_model.table with {len(profile.cost_model.table)} "
               f"cells ({profile.cost_model.table_source}); validated")


def _reset(opts: Mapping[str, Any]) -> None:
    try:
        before, profile = reset_parameters(opts["profile_path"])
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{opts['profile_path']}: scheduler.alpha {before['alpha']:g} -> "
               f"{profile.scheduler.alpha:g}, scheduler.beta {before['beta']:g} -> "
               f"{profile.scheduler.beta:g} (the design's conservative start; validated)")


def _sweep_settings(opts: Mapping[str, Any]) -> dict[str, Any]:
    """Rates, window length, input data and arrival distribution: the sweep file's
    (``perf_analyzer.load_sweep``), each overridden by its command-line option."""
    settings: dict[str, Any] = {"measurement_ms": 1000, "input_data": DEFAULT_INPUT,
                                "distribution": "poisson", "max_trials": 3}
    sweep_file = opts["sweep_file"] or (DEFAULT_SWEEP if not opts["rates"] and
                                        os.path.exists(DEFAULT_SWEEP) else None)
    if sweep_file:
        try:
            sweep = load_sweep(sweep_file)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        settings.update(rates=sorted(set(sweep.request_rates_rps)),
                        measurement_ms=int(round(sweep.run_duration_s * 1000)),
                        input_data=sweep.input_data, distribution=sweep.request_distribution,
                        max_trials=sweep.max_trials, sweep_file=sweep_file)
    if opts["rates"]:
        settings["rates"] = parse_rates(opts["rates"])
    if opts["measurement_ms"]:
        settings["measurement_ms"] = opts["measurement_ms"]
    if opts["input_data"]:
        settings["input_data"] = opts["input_data"]
    if opts["request_distribution"]:
        settings["distribution"] = opts["request_distribution"]
    if "rates" not in settings and not (opts["step"] and opts["step_rate"]):
        raise click.UsageError("give --rates (e.g. --rates 10,20,40) or --sweep FILE")
    return settings


def _base_profile(opts, config, snap: PluginSnapshot | None) -> tuple[str, HardwareProfile]:
    path = opts["base_profile"]
    if not path:
        # The metrics name the profile actually chosen (the environment variable wins over
        # the parameter) unless a reload left two profile_info series behind.
        name = (snap.profile if snap else None) or live.parameter(config, "hardware_profile")
        if not name:
            raise click.ClickException(
                "cannot tell which profile the model runs (no profile_info metric, no "
                "hardware_profile parameter): give --base-profile")
        path = os.path.join(_profile_dir(config, opts["model"], opts["model_repository"]),
                            f"{name}.yaml")
    try:
        return path, load_profile(path)
    except ProfileError as exc:
        raise click.ClickException(f"{exc} (give --base-profile or --model-repository)") from None


def _measure(deps: CalibrateDeps, url: str, model: str, metrics_url: str, input_data: str,
             rate: float, settings: Mapping[str, Any], protocol: str
             ) -> tuple[RatePoint, LoadRun | None, Series]:
    with deps.sampler(metrics_url, model, SAMPLE_INTERVAL_S) as sampler:
        try:
            run = deps.run_load(url, model, input_data, rate, settings["measurement_ms"],
                                protocol, settings["distribution"], settings["max_trials"])
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            run = None
            error = failure_reason(str(exc))
    if run is None:
        return RatePoint(rate=rate, error=error), None, sampler.series
    return summarize_rate(rate, run, sampler.series), run, sampler.series


def _read_config(deps: CalibrateDeps, url: str, model: str):
    """(the model's control handle, its current config); ClickException when unreadable."""
    try:
        control = deps.model_control(url, model)
        original = control.config()
    except Exception as exc:  # noqa: BLE001 - any client failure ends here, said plainly
        raise click.ClickException(f"cannot read the config of model '{model}' at {url}: {exc}")
    return control, original


def _cold_start(ctx, deps: CalibrateDeps, opts, metrics_url: str, settings) -> None:
    url, model = opts["url"], opts["model"]
    out_path = os.path.abspath(opts["out_path"])
    out_dir = os.path.dirname(out_path)
    plot_path = opts["plot_path"] or os.path.join(out_dir, "load_latency.png")
    report_path = opts["report_path"] or os.path.join(out_dir, "calibrate.md")
    baseline_path = opts["baseline_path"] or os.path.join(out_dir, "baseline.json")
    control, original = _read_config(deps, url, model)
    try:
        snap = deps.snapshot(metrics_url, model)
    except (OSError, ValueError) as exc:
        snap = None
        click.echo(f"warning: metrics page {metrics_url} unreadable ({exc}); queue depth and "
                   "utilisation will be missing", err=True)
    base_path, base = _base_profile(opts, original, snap)
    emulation_note, time_scale = _emulation_note(original, base)
    sla_scale = _resolve_sla_scale(opts["sla_scale"], time_scale)
    overrides = sorted(k for k in (original.get("parameters") or {}) if k.startswith("control."))
    original_enabled = live.parameter(original, "control.enabled")
    original_state = (original_enabled if original_enabled is not None
                      else f"{str(base.control.enabled).lower()} (profile)")

    with tempfile.TemporaryDirectory() as tmp:
        input_data = live.scaled_input_data(settings["input_data"], sla_scale, tmp)
        points, control_line, restore_line = _sweep_with_control_off(
            deps, opts, metrics_url, settings, input_data, control, original, original_state)
        if not any(p.ok for p in points):
            raise click.ClickException("every perf_analyzer run failed: " +
                                       "; ".join(f"{p.rate:g}: {p.error}" for p in points))
        calibration = find_boundaries(points, base.control)
        stamp = datetime.date.today().isoformat()
        comment = (f"zone thresholds calibrated {stamp} by `explicit-batching calibrate` "
                   f"(model {model}, control off)")
        profile = write_profile(base_path, out_path,
                                {"control": {k: calibration.thresholds[k] for k in THRESHOLD_KEYS}},
                                comment=comment)
        title = (f"{model}: load-latency curve, explicit control off"
                 + (f" (EMULATED device, time scale {time_scale:g})" if emulation_note else ""))
        plot_curve(points, calibration, plot_path, title)

        baseline_line = "baseline: skipped (--no-baseline)"
        if not opts["no_baseline"]:
            baseline_line = _record_baseline(deps, opts, metrics_url, input_data, settings,
                                             points, calibration, baseline_path, profile,
                                             original_state, sla_scale)

    lines = _cold_start_header(ctx, model, emulation_note, sla_scale, control_line,
                               restore_line, settings, base_path, base)
    lines += _cold_start_results(points, calibration, base, out_path, profile, overrides,
                                 plot_path, baseline_line)
    text = "\n".join(lines) + "\n"
    with open(report_path, "w", encoding="utf-8") as fh:
        fh.write(text)
    click.echo(text)
    click.echo("wrote " + ", ".join(_show(p) for p in (out_path, plot_path, report_path))
               + ("" if opts["no_baseline"] else f", {_show(baseline_path)}"))


def _sweep_with_control_off(deps: CalibrateDeps, opts, metrics_url: str, settings,
                            input_data: str, control, original, original_state: str
                            ) -> tuple[list[RatePoint], str, str]:
    """One measured point per rate with explicit control switched off by a reload (as is
    when the server refuses it), the original config restored after: (points, what was
    done to control, how it was restored)."""
    url, model = opts["url"], opts["model"]
    points: list[RatePoint] = []
    reloaded = False
    try:
        try:
            control.load(live.with_parameters(original, {"control.enabled": "false"}))
            reloaded = True
            control_line = ("explicit control OFF during the sweep (model reloaded with "
                            "parameter control.enabled=false)")
        except LoadRefused as exc:
            control_line = (f"the server refused to reload the model ({exc}); start it with "
                            "--model-control-mode=explicit to switch control off. Measured "
                            f"AS IS, control.enabled={original_state}")
            click.echo(f"warning: {control_line}", err=True)
        for rate in _progress(deps, settings["rates"], "calibrate sweep"):
            point, _, _ = _measure(deps, url, model, metrics_url, input_data, rate,
                                   settings, opts["protocol"])
            points.append(point)
    finally:
        if reloaded:
            try:
                control.load(original)
                restore_line = f"control.enabled restored to {original_state}"
            except LoadRefused as exc:
                restore_line = (f"RESTORING THE ORIGINAL CONFIG FAILED ({exc}): the model "
                                "still runs with control.enabled=false")
                click.echo(f"error: {restore_line}", err=True)
        else:
            restore_line = "the model's config was not changed"
    return points, control_line, restore_line


def _cold_start_header(ctx, model: str, emulation_note: str, sla_scale: float,
                       control_line: str, restore_line: str, settings,
                       base_path: str, base: HardwareProfile) -> list[str]:
    """The report's command, title and how the sweep was measured."""
    lines = ["```", f"$ {_command_line(ctx)}", "```", "",
             f"# Cold-start calibration of `{model}`", ""]
    if emulation_note:
        lines += [f"**{emulation_note}.** SLAs of the input scaled x{sla_scale:g}.", ""]
    lines += [f"* {control_line}; {restore_line}.",
              f"* perf_analyzer --async --request-rate-range per rate "
              f"({settings['distribution']} arrivals), {settings['max_trials']} windows x "
              f"{settings['measurement_ms']} ms, input {_show(settings['input_data'])}"
              + (f" (sweep file {_show(settings['sweep_file'])})"
                 if settings.get("sweep_file") else "") + ".",
              f"* queue depth and utilisation: `explicit_batching_queue_depth` / "
              f"`_utilization_ratio` sampled every {SAMPLE_INTERVAL_S:g} s during each run; "
              "P99 CV: coefficient of variation of the per-second P99s of each run.",
              f"* base profile {_show(base_path)} ({base.name})."]
    return lines


def _cold_start_results(points: Sequence[RatePoint], calibration: Calibration,
                        base: HardwareProfile, out_path: str, profile: HardwareProfile,
                        overrides: Sequence[str], plot_path: str, baseline_line: str
                        ) -> list[str]:
    """The report's sweep table, zone boundaries, profile written, notes and files."""
    sorted_points = sorted(points, key=lambda p: p.rate)
    lines = ["", sweep_table(sorted_points, calibration), "", "## Zone boundaries", "",
             crossing_table(calibration), ""]
    lines += _boundary_lines(calibration)
    lines += ["", "## Profile", "", threshold_table(base.control, calibration), "",
              f"Written to `{_show(out_path)}` (profile `{profile.name}`, validated by load_profile). "
              f"Load it with model-config parameter hardware_profile={profile.name} after copying "
              "it into the model's profiles folder."]
    if overrides:
        lines.append(f"**Note:** the model config overrides {', '.join(overrides)}: a model-config "
                     "parameter wins over the profile.")
    for note in calibration.notes:
        lines.append(f"* note: {note}")
    lines += ["", f"Plot: `{_show(plot_path)}`.", f"{baseline_line}"]
    return lines


def _boundary_lines(calibration: Calibration) -> list[str]:
    out = []
    for label, b in (("no-man's land", calibration.nml), ("danger zone", calibration.danger)):
        if b is None:
            out.append(f"* {label}: not located in this sweep.")
        else:
            out.append(f"* {label} from ~{b.rate:.1f} req/s offered (set by {b.indicator} "
                       f"reaching {b.level:g}): utilisation {_f(b.utilization, '.3f')}, queue depth "
                       f"{_f(b.queue_depth)}, P99 CV {_f(b.p99_cv, '.3f')}.")
    return out


def _record_baseline(deps, opts, metrics_url, input_data, settings, points, calibration,
                     baseline_path, profile, original_state, sla_scale) -> str:
    """One more run, control as it originally was, to record the control effect that
    ``monitor --check-metric-drift`` compares against."""
    rate = opts["baseline_rate"]
    if rate is None:
        ok = sorted(p.rate for p in points if p.ok)
        below = [r for r in ok if zone_of(r, calibration) != "danger"]
        rate = below[-1] if below else ok[0]
    point, run, series = _measure(deps, opts["url"], opts["model"], metrics_url, input_data, rate,
                                  settings, opts["protocol"])
    if not point.ok or len(series.snapshots) < 2:
        return (f"baseline: NOT recorded (run at {rate:g} req/s: "
                f"{point.error or 'fewer than two metric samples'})")
    effect = live.control_effect(series.snapshots, opts["model"])
    doc = {"kind": "explicit_batching_control_baseline", "version": 1,
           "recorded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "source": f"calibrate baseline run at {rate:g} req/s, control.enabled={original_state}",
           "offered_rate": rate, "sla_scale": sla_scale, "p99_ms": point.p99_ms,
           "goodput": point.goodput, "calibrated_profile": profile.name,
           "effect": effect.to_dict()}
    with open(baseline_path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    return (f"Baseline for `monitor --check-metric-drift`: `{_show(baseline_path)}` ({rate:g} req/s, "
            f"control as originally configured, profile {effect.profile}; SLA attainment "
            + ", ".join(f"{c} {v:.1%}" for c, v in sorted(effect.sla_attainment.items()))
            + f"; mean batch size {_f(effect.mean_batch_size)}).")


# -- --step ------------------------------------------------------------------------------

def _grid(lo: float, hi: float, step: float) -> list[float]:
    n = int(math.floor((hi - lo) / step + 1e-9))
    return [round(lo + i * step, 6) for i in range(n + 1)]


@dataclass
class StepResult:
    alpha: float
    beta: float
    goodput: float | None = None
    p99_ms: float | None = None
    throughput: float | None = None
    error: str = ""


GOODPUT_TIE = 0.01  # goodputs within 1 % are a tie (run-to-run noise); P99 decides then


def _better(a: StepResult, b: StepResult | None) -> bool:
    """``a`` beats ``b``: more goodput (beyond GOODPUT_TIE), else a lower P99."""
    if a.error or a.goodput is None:
        return False
    if b is None or b.goodput is None:
        return True
    if not math.isclose(a.goodput, b.goodput, rel_tol=GOODPUT_TIE):
        return a.goodput > b.goodput
    return (a.p99_ms or math.inf) < (b.p99_ms or math.inf)


def _step(ctx, deps: CalibrateDeps, opts, metrics_url: str, settings) -> None:
    url, model = opts["url"], opts["model"]
    rate = opts["step_rate"] or settings["rates"][0]
    alphas = _grid(*ALPHA_RANGE, opts["step_size"])
    betas = _grid(*BETA_RANGE, opts["step_size"])
    budget = opts["max_steps"] or (len(alphas) + len(betas) - 1)
    control, original = _read_config(deps, url, model)
    _, time_scale = _emulation_note(original, None)
    sla_scale = _resolve_sla_scale(opts["sla_scale"], time_scale)
    results, best = _step_walk(deps, opts, metrics_url, settings, control, original, rate,
                               alphas, betas, budget, sla_scale)
    lines = _step_report(ctx, model, rate, settings, sla_scale, results, best,
                         len(alphas) + len(betas) - 1, budget, _step_policy(opts))
    click.echo("\n".join(lines))


def _step_walk(deps: CalibrateDeps, opts, metrics_url: str, settings, control, original,
               rate: float, alphas: Sequence[float], betas: Sequence[float], budget: int,
               sla_scale: float) -> tuple[list[StepResult], StepResult | None]:
    """Alpha first (beta at the conservative start), then beta at the best alpha, one
    reload and one measured run per setting, at most ``budget`` of them; the original
    config restored after. (every result, the best)"""
    url, model = opts["url"], opts["model"]
    results: list[StepResult] = []
    changed = []  # non-empty once a reload went through: the original must come back

    def run(alpha: float, beta: float) -> StepResult:
        result = StepResult(alpha, beta)
        control.load(live.with_parameters(original, {"scheduler.alpha": f"{alpha:g}",
                                                     "scheduler.beta": f"{beta:g}",
                                                     **_step_policy(opts)}))
        changed.append(True)
        point, load, _ = _measure(deps, url, model, metrics_url, input_data, rate, settings,
                                  opts["protocol"])
        result.error = point.error
        if load is not None:
            result.goodput, result.p99_ms, result.throughput = (point.goodput, point.p99_ms,
                                                                 point.throughput)
        results.append(result)
        return result

    plan = [(a, BASELINE_BETA) for a in alphas]
    best: StepResult | None = None
    with tempfile.TemporaryDirectory() as tmp:
        input_data = live.scaled_input_data(settings["input_data"], sla_scale, tmp)
        bar = _progress(deps, range(budget), "calibrate step")
        steps = iter(bar)
        try:
            for alpha, beta in plan:  # alpha first, beta at the conservative start
                if next(steps, None) is None:
                    break
                r = run(alpha, beta)
                best = r if _better(r, best) else best
            best_alpha = best.alpha if best else BASELINE_ALPHA
            for beta in betas[1:]:  # then beta, at the best alpha
                if next(steps, None) is None:
                    break
                r = run(best_alpha, beta)
                best = r if _better(r, best) else best
        except LoadRefused as exc:
            raise click.ClickException(
                f"the server refused to reload '{model}' with new parameters ({exc}): --step "
                "needs a server started with --model-control-mode=explicit") from None
        finally:
            if hasattr(bar, "close"):
                bar.close()
            if changed:
                try:
                    control.load(original)
                except LoadRefused as exc:
                    click.echo(f"error: restoring the original config failed: {exc}", err=True)
    return results, best


def _step_policy(opts) -> dict[str, str]:
    """The benchmark-mode parameter each --step reload adds (none when as-configured)."""
    return dict(BENCHMARK_MODE) if opts.get("infeasible_policy", "serve_late") == "serve_late" \
        else {}


def _step_report(ctx, model: str, rate: float, settings, sla_scale: float,
                 results: Sequence[StepResult], best: StepResult | None, full_walk: int,
                 budget: int, policy: Mapping[str, str] | None = None) -> list[str]:
    """The --step report: how each setting was run, one row per setting, the best."""
    lines = ["```", f"$ {_command_line(ctx)}", "```", "",
             f"--step on `{model}` at {rate:g} req/s offered ({settings['distribution']} "
             f"arrivals, SLAs x{sla_scale:g}), one perf_analyzer run ({settings['max_trials']} x "
             f"{settings['measurement_ms']} ms) per setting, each applied by reloading the model "
             "with parameters scheduler.alpha / scheduler.beta"
             + (f" and {', '.join(f'{k}={v}' for k, v in policy.items())} (benchmark mode: "
                f"{SERVED_LATE_NOTE}; goodput counts met SLAs only)" if policy else
                " (infeasible_policy as configured: a refused request ends its run)")
             + "; original config restored after.",
             "", "| alpha | beta | goodput (req/s) | P99 (ms) | throughput (req/s) |",
             "|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.alpha:g} | {r.beta:g} | failed: {r.error} |  |  |")
        else:
            lines.append(f"| {r.alpha:g} | {r.beta:g} | {_f(r.goodput)} | {_f(r.p99_ms)} | "
                         f"{_f(r.throughput)} |")
    if best is not None and best.goodput is not None:
        lines += ["", f"best: alpha={best.alpha:g} beta={best.beta:g} (goodput "
                      f"{best.goodput:.1f} req/s, P99 {_f(best.p99_ms)} ms; goodput within "
                      f"{GOODPUT_TIE:.0%} is a tie, broken by the lower P99). Keep it with "
                      "scheduler.alpha/beta in the profile (or as model-config parameters)."]
    else:
        lines += ["", "best: none (no run completed)"]
    if len(results) < full_walk:
        lines.append(f"(walk bounded by --max-steps {budget}: {len(results)} settings tried)")
    return lines
