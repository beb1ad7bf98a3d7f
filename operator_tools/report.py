"""Tables and plots shared by ``simulate`` and ``compare``: one summary type, one table.

Both commands describe each policy (simulated) or model (live) with a :class:`Summary`
and print it with :func:`summary_table`, so a simulated row and a measured row read the
same way:

throughput        completed requests (met + missed) per second of the run
goodput           requests answered within their own SLA per second
SLA attainment    met / all requests (a rejected or unanswered request counts as missed)
P50 / P99         latency of completed requests, per SLA class (nearest rank)
util. fluctuation standard deviation of the per-second device busy fraction
mean busy         mean of the per-second busy fraction
padding waste     (padded - real tokens) / padded tokens over all batches (``-`` where
                  nobody can see the batches)
rejected          requests answered with an error (simulated: queue full, shed, never
                  served)
lost              requests without any answer (live runs only)
send lag          load generator's actual send time minus the trace's scheduled one
                  (live runs only)
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from simulation.simulator import SimResult
from scheduler_core.stats import percentile


@dataclass(frozen=True)
class ClassSummary:
    """One SLA class: request count, how many met it, latency percentiles (ms)."""

    sla_ms: float
    requests: int
    met: int
    p50_ms: float
    p99_ms: float

    @property
    def attainment(self) -> float:
        return self.met / self.requests if self.requests else math.nan


@dataclass(frozen=True)
class Summary:
    """What one policy (simulated) or one model (live) did with one workload."""

    name: str
    requests: int
    completed: int  # answered with a result (met + missed)
    met: int
    rejected: int  # answered with an error
    duration_s: float  # the span the rates are computed over
    p50_ms: float
    p99_ms: float
    per_class: Mapping[float, ClassSummary]
    utilization_fluctuation: float  # std of the per-second busy fraction
    mean_busy_fraction: float
    padding_waste: float | None = None  # None: not observable
    lost: int | None = None  # None: not applicable (simulation)
    send_lag_mean_ms: float | None = None
    send_lag_p99_ms: float | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def throughput_rps(self) -> float:
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def goodput_rps(self) -> float:
        return self.met / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def sla_attainment(self) -> float:
        return self.met / self.requests if self.requests else math.nan


def from_sim(result: SimResult, name: str | None = None) -> Summary:
    """A :class:`Summary` of one simulator run."""
    per_class = {sla: ClassSummary(sla, c.arrivals, c.met, c.p50_ms, c.p99_ms)
                 for sla, c in result.per_class.items()}
    return Summary(name=name or result.policy, requests=result.arrivals,
                   completed=result.completed, met=result.met, rejected=result.rejected,
                   duration_s=result.duration_s, p50_ms=result.p50_ms, p99_ms=result.p99_ms,
                   per_class=per_class,
                   utilization_fluctuation=result.utilization_fluctuation,
                   mean_busy_fraction=result.mean_busy_fraction,
                   padding_waste=result.padding_waste)


def summarise_requests(name: str, sla_ms: Sequence[float],
                       latency_ms: Sequence[float | None], duration_s: float,
                       busy_fractions: Sequence[float], *, rejected: int = 0,
                       unlisted: int = 0, lost: int = 0, padding_waste: float | None = None,
                       send_lag_ms: Sequence[float] = (),
                       notes: Sequence[str] = ()) -> Summary:
    """A :class:`Summary` from per-request data: each request's SLA (ms) and latency (ms,
    None when it got no result). ``rejected`` (error answers) and ``unlisted`` requests
    (whose SLA class is unknown) count on top of the listed ones; ``lost`` (requests
    without any answer, listed or not) is only shown."""
    if len(sla_ms) != len(latency_ms):
        raise ValueError(f"sla_ms and latency_ms differ in length "
                         f"({len(sla_ms)} != {len(latency_ms)})")
    by_class: dict[float, list[float]] = {}
    counts: dict[float, list[int]] = {}
    everything: list[float] = []
    met = 0
    for sla, lat in zip(sla_ms, latency_ms):
        c = counts.setdefault(sla, [0, 0])
        by_class.setdefault(sla, [])
        c[0] += 1
        if lat is None:
            continue
        by_class[sla].append(lat)
        everything.append(lat)
        if lat <= sla:
            c[1] += 1
            met += 1
    per_class = {}
    for sla in sorted(counts):
        lat = sorted(by_class[sla])
        per_class[sla] = ClassSummary(sla, counts[sla][0], counts[sla][1],
                                      percentile(lat, 50), percentile(lat, 99))
    everything.sort()
    lags = sorted(send_lag_ms)
    return Summary(
        name=name, requests=len(sla_ms) + rejected + unlisted, completed=len(everything),
        met=met, rejected=rejected, duration_s=duration_s,
        p50_ms=percentile(everything, 50), p99_ms=percentile(everything, 99),
        per_class=per_class,
        utilization_fluctuation=(statistics.pstdev(busy_fractions)
                                 if busy_fractions else math.nan),
        mean_busy_fraction=(statistics.fmean(busy_fractions) if busy_fractions else math.nan),
        padding_waste=padding_waste, lost=lost,
        send_lag_mean_ms=statistics.fmean(lags) if lags else None,
        send_lag_p99_ms=percentile(lags, 99) if lags else None,
        notes=tuple(notes))


# -- formatting -----------------------------------------------------------------------------

def command_line(ctx) -> str:
    """The command as the operator typed it: ``sys.argv`` when this process is that
    command (``explicit-batching <command> ...`` from a shell), else rebuilt from the click
    context (every option not left at its default)."""
    import shlex
    import sys

    import click

    name = ctx.info_name or ctx.command.name
    if len(sys.argv) > 1 and sys.argv[1] == name and os.path.basename(
            sys.argv[0]).startswith("explicit-batching"):
        return shlex.join(sys.argv)
    parts = ["explicit-batching", name]
    for param in ctx.command.params:
        if not isinstance(param, click.Option):
            continue
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            continue
        value = ctx.params.get(param.name)
        flag = max(param.opts, key=len)
        if param.is_flag:
            if value:
                parts.append(flag)
            continue
        values = value if param.multiple else (value,)
        for v in values:
            if v is not None:
                parts += [flag, shlex.quote(f"{v:g}" if isinstance(v, float) else str(v))]
    return " ".join(parts)


def fmt_num(value, spec: str = ".1f", missing: str = "-") -> str:
    """The one number formatter for tables and log lines: ``missing`` where there is no
    number (None, NaN or infinite), else ``value`` by ``spec``, a format spec (".2f") or a
    ``str.format`` template ("{:.2f}x")."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return spec.format(value) if "{" in spec else format(value, spec)


def fmt_ms(value: float | None) -> str:
    """Milliseconds for a table cell: ``-`` when unknown, no decimals from 100 ms on."""
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def fmt_ratio(value: float | None) -> str:
    if value is None or math.isnan(value) or math.isinf(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f}x"
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"


def fmt_share(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.1%}"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b == 0:
        return None
    return a / b


def sla_classes(rows: Sequence[Summary]) -> list[float]:
    """Every SLA class any row has, ascending."""
    return sorted({sla for r in rows for sla in r.per_class})


def summary_table(rows: Sequence[Summary], classes: Sequence[float] | None = None,
                  ratio: tuple[str, str] | None = None) -> str:
    """The markdown table of both commands; ``ratio=(a, b)`` appends a row of the ratios
    of row ``a`` to row ``b`` (e.g. explicit / native). Live columns (lost, send lag)
    appear when any row has them."""
    classes = list(classes) if classes is not None else sla_classes(rows)
    live = any(r.lost is not None for r in rows)
    lag = any(r.send_lag_mean_ms is not None for r in rows)
    head = ["policy", "requests", "throughput (req/s)", "goodput (req/s)", "SLA attainment"]
    head += [f"P50 / P99 {c:g} ms class (ms)" for c in classes]
    head += ["util. fluctuation", "mean busy", "padding waste", "rejected"]
    if live:
        head.append("lost")
    if lag:
        head.append("send lag mean / P99 (ms)")
    lines = ["| " + " | ".join(head) + " |",
             "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        cells = [r.name, f"{r.requests:,}", f"{r.throughput_rps:,.1f}", f"{r.goodput_rps:,.1f}",
                 fmt_share(r.sla_attainment)]
        for c in classes:
            cs = r.per_class.get(c)
            cells.append(f"{fmt_ms(cs.p50_ms)} / {fmt_ms(cs.p99_ms)}" if cs else "-")
        cells += [f"{r.utilization_fluctuation:.3f}"
                  if not math.isnan(r.utilization_fluctuation) else "-",
                  fmt_share(r.mean_busy_fraction), fmt_share(r.padding_waste),
                  f"{r.rejected:,}"]
        if live:
            cells.append("-" if r.lost is None else f"{r.lost:,}")
        if lag:
            cells.append("-" if r.send_lag_mean_ms is None else
                         f"{r.send_lag_mean_ms:.2f} / {r.send_lag_p99_ms:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    if ratio is not None:
        by_name = {r.name: r for r in rows}
        a, b = by_name[ratio[0]], by_name[ratio[1]]
        both = a.completed > 0 and b.completed > 0  # a row without data has no ratios

        def q(x: float | None, y: float | None) -> str:
            return fmt_ratio(_ratio(x, y)) if both else "-"

        cells = [f"**{a.name} / {b.name}**", "", q(a.throughput_rps, b.throughput_rps),
                 q(a.goodput_rps, b.goodput_rps), q(a.sla_attainment, b.sla_attainment)]
        for c in classes:
            ca, cb = a.per_class.get(c), b.per_class.get(c)
            cells.append(f"{q(ca.p50_ms, cb.p50_ms)} / {q(ca.p99_ms, cb.p99_ms)}"
                         if ca and cb else "-")
        cells += [q(a.utilization_fluctuation, b.utilization_fluctuation),
                  q(a.mean_busy_fraction, b.mean_busy_fraction),
                  q(a.padding_waste, b.padding_waste), ""]
        if live:
            cells.append("")
        if lag:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- plots ----------------------------------------------------------------------------------

def comparison_plot(path: str, latencies_ms: Mapping[str, Sequence[float]],
                    per_second: Mapping[str, Sequence[tuple[float, float]]],
                    busy: Mapping[str, Sequence[tuple[float, float]]] | None = None,
                    sla_ms: Sequence[float] = (), title: str = "",
                    segments: Sequence[tuple[float, float, str]] = ()) -> None:
    """A PNG: latency CDF per model (left) and, over the run's time axis, responses per
    second (and the busy fraction, when given) per model (right). ``segments``:
    (start_s, end_s, model) spans shaded in the model's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(latencies_ms)
    colours = {n: f"C{i}" for i, n in enumerate(names)}
    rows = 2 if busy else 1
    fig = plt.figure(figsize=(13, 4.2 * rows))
    grid = fig.add_gridspec(rows, 2, width_ratios=(1, 1.6))
    _latency_cdf(fig.add_subplot(grid[:, 0]), names, colours, latencies_ms, sla_ms)

    ax_tp = fig.add_subplot(grid[0, 1])
    axes = [ax_tp]
    if busy:
        ax_busy = fig.add_subplot(grid[1, 1], sharex=ax_tp)
        axes.append(ax_busy)
    for ax in axes:
        for start, end, n in segments:
            ax.axvspan(start, end, color=colours.get(n, "grey"), alpha=0.07)
    for n in names:
        pts = per_second.get(n, ())
        if pts:
            ax_tp.plot([p[0] for p in pts], [p[1] for p in pts], ".-", color=colours[n],
                       label=n, linewidth=1)
    ax_tp.set_ylabel("responses per second")
    ax_tp.set_title("per-second throughput (shaded: whose segment)")
    ax_tp.grid(True, alpha=0.3)
    ax_tp.legend(fontsize=8)
    if busy:
        _busy_panel(ax_busy, names, colours, busy)
    else:
        ax_tp.set_xlabel("time since the first segment started (s)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _latency_cdf(ax_cdf, names: Sequence[str], colours: Mapping[str, str],
                 latencies_ms: Mapping[str, Sequence[float]], sla_ms: Sequence[float]) -> None:
    """The latency CDF per model on a log axis, with the SLA classes as lines."""
    for n in names:
        values = sorted(latencies_ms[n])
        if not values:
            continue
        ys = [(i + 1) / len(values) for i in range(len(values))]
        ax_cdf.step(values, ys, where="post", label=f"{n} ({len(values):,})", color=colours[n])
    for i, s in enumerate(sla_ms):
        ax_cdf.axvline(s, color="grey", linestyle=":", linewidth=1,
                       label="SLA classes" if i == 0 else None)
    ax_cdf.set_xscale("log")
    ax_cdf.set_xlabel("latency (ms, log scale)")
    ax_cdf.set_ylabel("share of completed requests")
    ax_cdf.set_title("latency CDF")
    ax_cdf.grid(True, which="both", alpha=0.3)
    ax_cdf.legend(loc="lower right", fontsize=8)


def _busy_panel(ax_busy, names: Sequence[str], colours: Mapping[str, str],
                busy: Mapping[str, Sequence[tuple[float, float]]]) -> None:
    """The per-second busy fraction per model."""
    for n in names:
        pts = busy.get(n, ())
        if pts:
            ax_busy.plot([p[0] for p in pts], [p[1] for p in pts], ".-",
                         color=colours[n], label=n, linewidth=1)
    ax_busy.set_ylim(-0.02, 1.05)
    ax_busy.set_ylabel("busy fraction")
    ax_busy.set_xlabel("time since the first segment started (s)")
    ax_busy.set_title("per-second device busy fraction")
    ax_busy.grid(True, alpha=0.3)
