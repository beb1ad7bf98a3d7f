"""``analyze --control-feedback-lag``: how old is what the controller acts on?

The design (docs/design.md, section 3.2) names the cause of the no-man's land: from the collection of a
metric to the action taken on it typically passes 3-5 scheduling periods, about
100-200 ms, and a batch already sent cannot be called back. The plugin exports both
halves of that lag on the metrics port: ``explicit_batching_observation_age_seconds`` (age
of the perception sample the last decision used) and ``_control_lag_seconds`` (how late that
decision ran against its period, e.g. behind a long batch). Lag = their sum.

Live (``--metrics-url``: sampled for a few seconds) or from a recorded trace
(``--trace FILE``; ``--record-trace`` writes one). Reports the distribution, a verdict
against the design's 100-200 ms, and the effect: per second, the lag against the SLA miss
rate from ``explicit_batching_sla_requests_total``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import click

from scheduler_core.stats import percentile

from . import live
from .exit_codes import FINDING, check_reached
from .live import Series, counter_delta
from .output import echo_for, emit_json, json_option

TRACE_KIND = "explicit_batching_lag_trace"


@dataclass(frozen=True)
class LagSample:
    t_s: float  # seconds since the start of the trace
    observation_age_ms: float
    control_lag_ms: float
    control_period_ms: float | None = None
    sla_met: float | None = None  # cumulative counters (all SLA classes)
    sla_missed: float | None = None

    @property
    def lag_ms(self) -> float:
        return self.observation_age_ms + self.control_lag_ms


def samples_from_series(series: Series) -> list[LagSample]:
    snaps = series.snapshots
    if not snaps:
        return []
    t0 = snaps[0].taken_s
    out = []
    for s in snaps:
        if "observation_age_seconds" not in s.gauges or "control_lag_seconds" not in s.gauges:
            continue
        period_s = s.gauges.get("control_period_seconds")
        met = sum(v for (_, outcome), v in s.sla.items() if outcome == "met")
        missed = sum(v for (_, outcome), v in s.sla.items() if outcome == "missed")
        out.append(LagSample(s.taken_s - t0, s.gauges["observation_age_seconds"] * 1000.0,
                             s.gauges["control_lag_seconds"] * 1000.0,
                             None if period_s is None else period_s * 1000.0,
                             met if s.sla else None, missed if s.sla else None))
    return out


def trace_document(samples: Sequence[LagSample], model: str, interval_s: float) -> dict:
    return {"kind": TRACE_KIND, "version": 1, "model": model, "interval_s": interval_s,
            "samples": [{k: getattr(s, k) for k in LagSample.__dataclass_fields__} for s in samples]}


def read_trace(path: str) -> tuple[list[LagSample], dict[str, Any]]:
    """A recorded trace: ``{"samples": [...]}`` (as --record-trace writes) or a bare list of
    samples, each with ``t_s`` (or ``t``), ``observation_age_ms`` and ``control_lag_ms``;
    ``control_period_ms``, ``sla_met`` and ``sla_missed`` (cumulative) are optional."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"trace {path}: cannot be read as JSON: {exc}") from None
    meta = raw if isinstance(raw, Mapping) else {}
    rows = raw.get("samples") if isinstance(raw, Mapping) else raw
    if not isinstance(rows, list) or not rows:
        raise click.ClickException(f"trace {path}: no samples (expected a list under 'samples')")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise click.ClickException(f"trace {path}: sample {i} is not an object")
        try:
            t = row["t_s"] if "t_s" in row else row["t"]
            out.append(LagSample(
                float(t), float(row["observation_age_ms"]), float(row["control_lag_ms"]),
                *(None if row.get(k) is None else float(row[k])
                  for k in ("control_period_ms", "sla_met", "sla_missed"))))
        except KeyError as exc:
            raise click.ClickException(f"trace {path}: sample {i} lacks {exc}") from None
        except (TypeError, ValueError) as exc:
            raise click.ClickException(f"trace {path}: sample {i}: {exc}") from None
    return sorted(out, key=lambda s: s.t_s), dict(meta)


@dataclass(frozen=True)
class Distribution:
    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Distribution":
        if not values:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(len(values), sum(values) / len(values), percentile(values, 50),
                   percentile(values, 90), percentile(values, 99), max(values))


@dataclass(frozen=True)
class LagReport:
    lag: Distribution
    observation_age: Distribution
    control_lag: Distribution
    control_period: Distribution
    verdict: str  # "within", "faster", "exceeds", "no data"
    share_over_budget: float
    per_second: list[tuple[float, float, float, float]] = field(default_factory=list)
    # (second, mean lag ms, answered requests, SLA miss rate)
    correlation: float | None = None
    miss_rate_over_budget: float | None = None
    miss_rate_within_budget: float | None = None


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 3:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sxx * syy)


def analyze_lag(samples: Sequence[LagSample], lower_ms: float = 100.0, upper_ms: float = 200.0,
                bucket_s: float = 1.0, min_requests: int = 1) -> LagReport:
    """Distribution of the observation-to-action lag, the verdict against
    [lower_ms, upper_ms] (judged on the 90th percentile), and the per-second effect."""
    lags = [s.lag_ms for s in samples]
    dist = Distribution.of(lags)
    if not lags:
        verdict = "no data"
    elif dist.p90 > upper_ms:
        verdict = "exceeds"
    elif dist.p90 < lower_ms:
        verdict = "faster"
    else:
        verdict = "within"
    over = sum(v > upper_ms for v in lags) / len(lags) if lags else 0.0

    # Per second: mean lag, and SLA misses among the requests answered in that second.
    buckets: dict[int, dict[str, float]] = {}
    for prev, cur in zip(samples, samples[1:]):
        b = buckets.setdefault(int(cur.t_s // bucket_s), {"lag": 0.0, "n": 0, "met": 0.0,
                                                           "missed": 0.0, "sla": 0})
        b["lag"] += cur.lag_ms
        b["n"] += 1
        if None not in (prev.sla_met, prev.sla_missed, cur.sla_met, cur.sla_missed):
            b["met"] += counter_delta(prev.sla_met, cur.sla_met)
            b["missed"] += counter_delta(prev.sla_missed, cur.sla_missed)
            b["sla"] += 1
    per_second = []
    for key in sorted(buckets):
        b = buckets[key]
        answered = b["met"] + b["missed"]
        if b["sla"] and answered >= min_requests:
            per_second.append((key * bucket_s, b["lag"] / b["n"], answered, b["missed"] / answered))
    correlation = pearson([p[1] for p in per_second], [p[3] for p in per_second])

    def pooled(rows) -> float | None:
        answered = sum(r[2] for r in rows)
        return sum(r[2] * r[3] for r in rows) / answered if answered else None

    return LagReport(
        lag=dist, observation_age=Distribution.of([s.observation_age_ms for s in samples]),
        control_lag=Distribution.of([s.control_lag_ms for s in samples]),
        control_period=Distribution.of([s.control_period_ms for s in samples
                                        if s.control_period_ms is not None]),
        verdict=verdict, share_over_budget=over, per_second=per_second, correlation=correlation,
        miss_rate_over_budget=pooled([r for r in per_second if r[1] > upper_ms]),
        miss_rate_within_budget=pooled([r for r in per_second if r[1] <= upper_ms]))


def _dist_row(name: str, d: Distribution) -> str:
    if not d.count:
        return f"  {name:22s} (no samples)"
    return (f"  {name:22s} mean {d.mean:7.1f}  p50 {d.p50:7.1f}  p90 {d.p90:7.1f}  "
            f"p99 {d.p99:7.1f}  max {d.max:7.1f}")


def render(report: LagReport, source: str, lower_ms: float, upper_ms: float) -> str:
    lines = [f"control feedback lag ({source}): lag = observation age + control lag, "
             f"{report.lag.count} samples", "",
             "  (ms)", _dist_row("lag", report.lag), _dist_row("observation age", report.observation_age),
             _dist_row("control lag", report.control_lag),
             _dist_row("control period", report.control_period), ""]
    d = report.lag
    band = f"the design's {lower_ms:g}-{upper_ms:g} ms"
    if report.verdict == "no data":
        lines.append("verdict: NO DATA (no lag samples)")
    elif report.verdict == "exceeds":
        lines += [f"verdict: EXCEEDS {band} (p90 {d.p90:.0f} ms; {report.share_over_budget:.0%} of "
                  f"samples over {upper_ms:g} ms): decisions act on stale observations.",
                  "  remedies: shorten the control period within 50-200 ms and the perception "
                  "period; a long control lag means decisions wait behind batches (cap the batch "
                  "cost with max_batch_tokens) or for the CPU (pin the server, fewer processes)."]
    elif report.verdict == "faster":
        lines.append(f"verdict: WITHIN {band} (faster than it: p90 {d.p90:.0f} ms)")
    else:
        lines.append(f"verdict: WITHIN {band} (p90 {d.p90:.0f} ms; "
                     f"{report.share_over_budget:.0%} of samples over {upper_ms:g} ms)")
    lines.append("")
    if not report.per_second:
        lines.append("effect on SLAs: n/a (no SLA counters or no answered requests in the samples)")
    else:
        lines.append("effect on SLAs, per second:")
        lines.append("  second  mean lag (ms)  answered  SLA miss rate")
        for sec, lag, answered, miss in report.per_second:
            lines.append(f"  {sec:6.0f}  {lag:13.1f}  {answered:8.0f}  {miss:13.1%}")
        if report.correlation is None:
            lines.append("  correlation lag vs miss rate: n/a (fewer than 3 seconds, or no "
                         "variation in lag or misses)")
        else:
            r = report.correlation
            meaning = ("misses rise with the lag" if r >= 0.3 else
                       "misses fall as the lag rises" if r <= -0.3 else "no clear relation")
            lines.append(f"  correlation lag vs miss rate: r = {r:+.2f} over "
                         f"{len(report.per_second)} s ({meaning})")
        if report.miss_rate_over_budget is not None:
            lines.append(f"  miss rate in seconds with mean lag > {upper_ms:g} ms: "
                         f"{report.miss_rate_over_budget:.1%}"
                         + (f"; otherwise {report.miss_rate_within_budget:.1%}"
                            if report.miss_rate_within_budget is not None else ""))
    return "\n".join(lines)


@click.command(name="analyze")
@click.option("--control-feedback-lag", is_flag=True,
              help="Measure the lag from observation to action (the only analysis so far).")
@click.option("--metrics-url", help="Live: sample this Triton metrics page.")
@click.option("--trace", "trace_path", type=click.Path(exists=True, dir_okay=False),
              help="Offline: a recorded JSON trace of the samples.")
@click.option("--model", help="Live: the explicit-control model to sample (required with "
              "--metrics-url).")
@click.option("--duration-s", type=click.FloatRange(0.5, 3600), default=5.0, show_default=True)
@click.option("--interval-s", type=click.FloatRange(0.02, 10), default=0.1, show_default=True)
@click.option("--record-trace", "record_path", type=click.Path(dir_okay=False),
              help="Live: also write the samples as a trace for --trace.")
@click.option("--lower-ms", type=click.FloatRange(0), default=100.0, show_default=True)
@click.option("--upper-ms", type=click.FloatRange(0), default=200.0, show_default=True,
              help="The design's band is 100-200 ms; the verdict judges the lag's p90.")
@click.option("--fail-on-exceeds", is_flag=True,
              help="Exit with status 1 when the lag exceeds the band (a missed target).")
@json_option
@click.pass_context
def command(ctx: click.Context, control_feedback_lag: bool, metrics_url: str | None,
            trace_path: str | None, model: str, duration_s: float, interval_s: float,
            record_path: str | None, lower_ms: float, upper_ms: float, fail_on_exceeds: bool,
            as_json: bool) -> None:
    """Diagnose the control loop: --control-feedback-lag live (--metrics-url) or from a
    --trace."""
    deps = ctx.find_object(live.SamplingDeps) or live.SamplingDeps()
    if not control_feedback_lag:
        raise click.UsageError("choose an analysis: --control-feedback-lag")
    if bool(metrics_url) == bool(trace_path):
        raise click.UsageError("give exactly one of --metrics-url (live) or --trace FILE")
    if lower_ms >= upper_ms:
        raise click.UsageError(f"--lower-ms ({lower_ms:g}) must be below --upper-ms ({upper_ms:g})")
    if metrics_url and not model:
        raise click.UsageError("--metrics-url needs --model (the explicit-control model to sample)")
    if trace_path:
        samples, meta = read_trace(trace_path)
        source = f"trace {trace_path}" + (f", model {meta['model']}" if meta.get("model") else "")
    else:
        click.echo(f"sampling {metrics_url} for {duration_s:g} s (model {model}) ...", err=True)
        series = deps.sample(metrics_url, model, duration_s, interval_s)
        samples = samples_from_series(series)
        if not samples:
            check_reached(series, metrics_url)
            raise click.ClickException(
                f"no lag samples for model '{model}' from {metrics_url} ({series.failures} "
                f"scrapes failed: {series.last_error})")
        source = f"live {metrics_url}, model {model}, {duration_s:g} s"
        if record_path:
            os.makedirs(os.path.dirname(os.path.abspath(record_path)), exist_ok=True)
            with open(record_path, "w", encoding="utf-8") as fh:
                json.dump(trace_document(samples, model, interval_s), fh, indent=1)
                fh.write("\n")
    report = analyze_lag(samples, lower_ms, upper_ms)
    say = echo_for(as_json)
    say(render(report, source, lower_ms, upper_ms))
    if record_path and not trace_path:
        say(f"\ntrace written to {record_path}")
    if as_json:
        emit_json(report_document(report, source, lower_ms, upper_ms))
    if fail_on_exceeds and report.verdict == "exceeds":
        ctx.exit(FINDING)


def report_document(report: LagReport, source: str, lower_ms: float, upper_ms: float) -> dict:
    """``--json``: the report's figures (lags in ms)."""
    doc = {"kind": "control_feedback_lag", "source": source, "band_ms": [lower_ms, upper_ms],
           **{k: getattr(report, k) for k in LagReport.__dataclass_fields__}}
    doc["per_second"] = [{"second": sec, "mean_lag_ms": lag, "answered": answered,
                          "sla_miss_rate": miss}
                         for sec, lag, answered, miss in report.per_second]
    return doc
