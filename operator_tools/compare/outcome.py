"""``compare``'s outcome: per-model summaries, the segment table, the per-request CSV, the
plot, the warnings, and the report's text.
"""

from __future__ import annotations

import csv
import math
import time
from typing import Sequence

from .. import report
from ..measure import (EXPLICIT_GAUGE, PADDING_HISTOGRAM, busy_series, counter_busy, inside,
                       padding_waste)
from scheduler_core.stats import percentile
from simulation.simulator import capacity_rps, fifo_capacity_rps
from .model_info import ModelInfo
from .segments import Segment
from ..report import fmt_num


def summarise_model(role: str, model: str, segments: Sequence[Segment], samples,
                    from_gauge: bool) -> tuple[report.Summary, list, list[float]]:
    mine = [s for s in segments if s.model == model and s.ok]
    spans = [(s.start_ns, s.end_ns) for s in mine]
    requests = [r for s in mine for r in s.requests]
    series = busy_series(samples, model, from_gauge)
    busy = inside(series, spans)
    lags = []
    for s in mine:
        lags += [(r.sent_ns - s.start_ns) / 1e6 - r.scheduled_s * 1e3 for r in s.requests]
    duration_s = sum((e - s) / 1e9 for s, e in spans)
    summary = report.summarise_requests(
        role, [r.sla_ms for r in requests], [r.latency_ms for r in requests], duration_s,
        busy, unlisted=sum(s.planned - len(s.requests) for s in mine),
        lost=sum(s.lost for s in mine),
        padding_waste=padding_waste(samples, model, spans) if from_gauge else None,
        send_lag_ms=lags)
    return summary, series, [r.latency_ms for r in requests if r.latency_ms is not None]


def segment_table(segments: Sequence[Segment]) -> str:
    """One line per segment, in run order: how consistent the alternating segments were."""
    lines = ["| segment | model | span (s) | answered | goodput (req/s) | SLA attainment | "
             "P50 / P99 (ms) | lost |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for s in segments:
        if not s.ok:
            lines.append(f"| {s.index + 1} | {s.model} | - | - | - | - | - | failed |")
            continue
        lat = sorted(r.latency_ms for r in s.requests if r.latency_ms is not None)
        met = sum(1 for r in s.requests if r.latency_ms is not None and r.latency_ms <= r.sla_ms)
        span = (s.end_ns - s.start_ns) / 1e9
        lines.append(
            f"| {s.index + 1} | {s.model} | {span:.1f} | {len(lat):,} | "
            f"{met / span if span > 0 else 0.0:,.1f} | {met / s.planned:.1%} | "
            f"{report.fmt_ms(percentile(lat, 50))} / {report.fmt_ms(percentile(lat, 99))} | "
            f"{s.lost} |")
    return "\n".join(lines)


def write_requests_csv(path: str, segments: Sequence[Segment], t0_ns: int) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["segment", "model", "scheduled_ms", "sent_ms", "latency_ms", "seq_len",
                    "sla_ms", "met"])
        for s in segments:
            for r in s.requests:
                lat = r.latency_ms
                w.writerow([s.index, s.model, f"{r.scheduled_s * 1e3:.3f}",
                            f"{(r.sent_ns - t0_ns) / 1e6:.3f}",
                            "" if lat is None else f"{lat:.3f}", r.seq_len, f"{r.sla_ms:g}",
                            "" if lat is None else int(lat <= r.sla_ms)])


def summarise_models(runs: Sequence[Segment], samples, explicit_model: str,
                     native_model: str) -> tuple[dict, dict, dict]:
    """({role: summary}, {role: busy series}, {role: latencies}) of both models."""
    summaries, series, latencies = {}, {}, {}
    for role, model, gauge in (("explicit", explicit_model, True),
                               ("native", native_model, False)):
        summaries[role], series[role], latencies[role] = summarise_model(
            role, model, runs, samples, gauge)
    return summaries, series, latencies


def raw_counter_busy(samples, ok_runs: Sequence[Segment], models: Sequence[str]
                     ) -> dict[str, float | None]:
    """{model: what Triton's compute counter claims as its busy fraction in its segments}."""
    spans = {m: [(s.start_ns, s.end_ns) for s in ok_runs if s.model == m] for m in models}
    return {m: counter_busy(samples, m, spans[m]) for m in spans}


def responses_per_second(ok_runs: Sequence[Segment], model: str, t0: int
                         ) -> list[tuple[float, float]]:
    """(seconds since ``t0``, responses per second) of the model's segments, each on its
    own clock; a nan point between segments breaks the line."""
    points: list[tuple[float, float]] = []
    for s in ok_runs:
        if s.model != model:
            continue
        # Responses per second of the segment's own clock; the last, partial
        # second is divided by its actual length.
        span_s = (s.end_ns - s.start_ns) / 1e9
        bins = [0] * max(1, math.ceil(span_s))
        for r in s.requests:
            if r.response_ns is not None:
                k = min(int((r.response_ns - s.start_ns) // 1_000_000_000), len(bins) - 1)
                bins[k] += 1
        widths = [min(1.0, span_s - k) if span_s > k else 1.0 for k in range(len(bins))]
        if len(bins) > 1 and widths[-1] < 0.5:  # fold a sliver into its neighbour
            bins[-2] += bins.pop()
            widths[-2] += widths.pop()
        offset = (s.start_ns - t0) / 1e9
        for k, (count, width) in enumerate(zip(bins, widths)):
            points.append((offset + k + width / 2, count / max(width, 1e-3)))
        points.append((math.nan, math.nan))  # no line across other segments
    return points


def write_plot(png: str, ok_runs: Sequence[Segment], models: tuple[str, str], latencies,
               series, t0: int, sla_lines: Sequence[float], title: str) -> None:
    """The plot: latency CDFs, per-second responses and busy fraction."""
    per_second = {role: responses_per_second(ok_runs, model, t0)
                  for role, model in zip(("explicit", "native"), models)}
    busy_pts = {role: [((s1 - t0) / 1e9, v) for s0, s1, v in series[role]
                       if s1 >= t0] for role in series}
    report.comparison_plot(
        png, latencies, per_second, busy_pts, sla_lines, title=title,
        segments=[((s.start_ns - t0) / 1e9, (s.end_ns - t0) / 1e9, s.role) for s in ok_runs])


def fifo_and_capacity(profile, xi: ModelInfo, ni: ModelInfo, lengths_all: Sequence[int]
                      ) -> tuple[float, float]:
    """(what a FIFO batcher reaches at best on these lengths, the capacity with full
    batches of similar lengths), req/s on the emulated device."""
    scale = xi.time_scale
    mb = ni.max_batch_size or profile.scheduler.max_batch_size
    cm, mode = profile.cost_model, xi.cost_mode or profile.emulation.cost_mode
    fifo = fifo_capacity_rps(cm, mode, scale, lengths_all, mb)
    cap = capacity_rps(cm, mode, scale, lengths_all, profile.scheduler.max_batch_size,
                       profile.scheduler.max_batch_tokens)
    return fifo, cap


def run_warnings(runs: Sequence[Segment], scraper) -> list[str]:
    """What the report must warn about: failed scrapes, unmatched exports, a lagging
    sender, failed segments."""
    warnings = []
    if scraper.failures:
        warnings.append(f"{scraper.failures} metric scrapes failed (last: "
                        f"{scraper.last_error})")
    unmatched = sum(s.unmatched for s in runs)
    if unmatched:
        warnings.append(f"{unmatched} exported requests carried inputs found in no trace "
                        f"entry (left out)")
    behind = [s for s in runs if s.ok and not s.run.kept_schedule]
    if behind:
        warnings.append(f"perf_analyzer said it could not keep up in segment(s) "
                        f"{', '.join(str(s.index + 1) for s in behind)}")
    for s in runs:
        if s.hung:
            ended = ("" if s.hung_ended is None else
                     f"; the server ended {s.hung_ended} of its {s.planned} requests"
                     + (" (perf_analyzer sent none: its worker slept, docs/platform.md)"
                        if s.hung_ended == 0 else ""))
            warnings.append(f"segment {s.index + 1} ({s.model}) was replayed once: the first "
                            f"replay {s.hung[len('perf_analyzer '):]}{ended}")
        if not s.ok:
            warnings.append(f"segment {s.index + 1} ({s.model}) produced no data: "
                            f"{s.run.error}. perf_analyzer stops a run at the first error "
                            f"response: run the explicit model with --infeasible-policy "
                            f"serve_late on a server in explicit model-control mode, or lower "
                            f"--rate to stay where every request is answered")
    return warnings


def _setup_lines(http: str, metrics_url: str, xi: ModelInfo, ni: ModelInfo,
                 workload_text: str, offered: float, fifo, cap, runs, gap_s: float, n: int
                 ) -> list[str]:
    """The report's list of what ran: server, devices, native batcher, workload, segments."""
    explicit_model, native_model = xi.name, ni.name
    return [
        f"- Server: {http} (metrics {metrics_url}); {time.strftime('%Y-%m-%d %H:%M %Z')}.",
        f"- Device: `{explicit_model}`: {xi.device_text()}; `{native_model}`: "
        f"{ni.device_text()}. Read from each model's config (`GET /v2/models/<m>/config`)."
        + (" An EMULATED device sleeps for each batch's cost-model time: this compares "
           "batching policies, not hardware." if xi.emulated else ""),
        f"- Native batcher: Triton's dynamic batcher, max_batch_size {ni.max_batch_size}, "
        f"max_queue_delay_microseconds {fmt_num(ni.max_queue_delay_us, '{}')}.",
        f"- Workload: {workload_text}; offered {offered:,.1f} req/s"
        + (f" = {offered / fifo:.0%} of what a FIFO batcher reaches at best on these "
           f"lengths ({fifo:,.1f} req/s: full batches in arrival order) and "
           f"{offered / cap:.0%} of the capacity with full batches of similar lengths "
           f"({cap:,.1f} req/s)" if fifo else "") + ".",
        f"- Segments: {len(runs)} in one run, alternating "
        + ", ".join(s.role for s in runs) + f", {gap_s:g} s apart; each replays the same "
        f"trace with perf_analyzer `--request-intervals` (`--async`, `--request-count "
        f"{n}`, `--max-threads 1`), per-request timestamps from `--profile-export-file`.",
        "",
    ]


def _method_lines(runs, xi: ModelInfo, ni: ModelInfo, raw_busy, scrape_period_s: float
                  ) -> list[str]:
    """The per-segment table and how each column and the utilisation were measured."""
    explicit_model, native_model = xi.name, ni.name
    return [
        "Per segment, in run order:",
        "",
        segment_table(runs),
        "",
        "Throughput and goodput are per second of the model's own segments (first send "
        "to last response); SLA attainment = met / requests planned; P50 / P99 over "
        "answered requests, per SLA class (scaled by the time scale). lost = planned "
        "requests without a response. Send lag = actual send time minus the trace's "
        "scheduled time (perf_analyzer's schedule start is the export's first window "
        "boundary).",
        "",
        "Utilisation (util. fluctuation = std of the per-second busy fraction over the "
        "seconds inside the model's own segments; mean busy = their mean): "
        f"`{explicit_model}` from its own gauge `{EXPLICIT_GAUGE}` (the executor's busy "
        "share over its 1 s perception window, sampled every "
        f"{scrape_period_s:g} s; Triton's counters see only `execute()`, which hands "
        f"requests to the model's own queue); `{native_model}` from Triton's per-batch "
        "compute time (statistics extension `batch_stats`, polled with the metrics). "
        "Triton's `nv_inference_compute_infer_duration_us` is not busy time for either: "
        f"its growth per second averaged {fmt_num(raw_busy[explicit_model], '{:.2f}')} for "
        f"`{explicit_model}` (hand-overs only) and "
        f"{fmt_num(raw_busy[native_model], '{:.2f}')} for "
        f"`{native_model}` (a batch's time added once per request in it). Padding waste: "
        f"the explicit model's mean per-batch padding share (`{PADDING_HISTOGRAM}`); "
        "Triton does not export the native model's.",
        "",
    ]


def report_text(*, command_line: str, note, http: str, metrics_url: str, xi: ModelInfo,
                ni: ModelInfo, workload_text: str, offered: float, fifo_cap, runs, gap_s: float,
                n: int, rows, raw_busy, scrape_period_s: float, warnings: Sequence[str],
                name: str) -> str:
    """The markdown report."""
    explicit_model, native_model = xi.name, ni.name
    fifo, cap = fifo_cap if fifo_cap else (None, None)
    lines = [
        f"# explicit vs native on a live server: `{explicit_model}` vs `{native_model}`",
        "",
        f"Command: `{command_line}`",
        "",
    ]
    if note:
        lines += [note, ""]
    lines += _setup_lines(http, metrics_url, xi, ni, workload_text, offered, fifo, cap, runs,
                          gap_s, n)
    lines += [
        report.summary_table(rows, ratio=("explicit", "native")),
        "",
    ]
    lines += _method_lines(runs, xi, ni, raw_busy, scrape_period_s)
    if warnings:
        lines += ["**Warnings:**", ""] + [f"- {w}" for w in warnings] + [""]
    lines += [f"![latency CDF and per-second throughput]({name}.png)", ""]
    return "\n".join(lines)
