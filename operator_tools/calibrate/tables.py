"""The sweep as tables and a load-latency plot, and the design's conservative start
(``reset_parameters``).
"""

from __future__ import annotations

from typing import Sequence

from ..profile_editor import write_profile
from scheduler_core.profile import ControlConfig, HardwareProfile
from scheduler_core.profile_files import load_profile
from .boundaries import Calibration, RatePoint, THRESHOLD_KEYS, zone_of
from .common import BASELINE_ALPHA, BASELINE_BETA
from ..report import fmt_num


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
            f"| {p.rate:g} | {fmt_num(p.throughput)} | {fmt_num(p.p50_ms)} | "
            f"{fmt_num(p.p99_ms)} | {fmt_num(p.p99_cv, '.3f')} | {fmt_num(p.utilization, '.2f')} | "
            f"{fmt_num(p.queue_depth)} "
            f"({fmt_num(p.queue_depth_max, '.0f')}) | {fmt_num(p.goodput)} | "
            f"{'yes' if p.kept_schedule else 'NO'} | {zone} |")
    return "\n".join(lines)


def crossing_table(calibration: Calibration) -> str:
    lines = ["| indicator | level | status | offered (req/s) | utilisation | queue depth | P99 CV |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for c in calibration.crossings:
        lines.append(f"| {c.indicator} | {c.level:g} | {c.status} | {fmt_num(c.rate)} | "
                     f"{fmt_num(c.utilization, '.3f')} | {fmt_num(c.queue_depth)} | "
                     f"{fmt_num(c.p99_cv, '.3f')} |")
    return "\n".join(lines)


def threshold_table(before: ControlConfig, calibration: Calibration) -> str:
    lines = ["| control key | before | calibrated |", "|---|---:|---:|"]
    for key in THRESHOLD_KEYS:
        new = calibration.thresholds[key]
        mark = "" if key in calibration.calibrated else " (kept)"
        lines.append(f"| {key} | {getattr(before, key):g} | {new:g}{mark} |")
    return "\n".join(lines)
