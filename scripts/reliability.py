"""Reliability suite: overload, recovery and soak against a real tritonserver.

Starts its own tritonserver (``triton_backend.launcher.TritonServer``, free ports) on a
temporary copy of ``model_repository/`` in which ``emulated_explicit`` and
``emulated_native`` get the model-config parameter ``time_scale`` = 10: the EMULATED device
(a cost model of BERT-base on a T4 that sleeps for each batch's cost) runs 10x slower, so
this 2-core machine can overload it with an open-loop gRPC load generator
(``operator_tools/loadgen.py``). SLA classes are scaled alike: 50/100/200 ms -> 500/1000/2000
ms. Only those two models are loaded (``--model-control-mode=explicit``): the real MiniLM
models would only take CPU and memory from the load generator.

Cases (``--quick``: short versions, for ``make test``):

overload 2x         Poisson arrivals at 0.5x capacity (warm-up, then the baseline), 2x
                    capacity, then 0.5x again (recovery) against emulated_explicit. Bounds:
                    lost 0; errors only UNAVAILABLE; stub and server RSS bounded; the
                    queue-depth gauge never above max_queue_size; recovery (per-second p99
                    of ok latencies back within 1.5x of the baseline p99) within 5 s.
                    Reported as a WARNING (a failure with --strict): refusals that arrive
                    after the request's own deadline (p99 of error latency / SLA > 1).
soak                0.7x capacity for 10 min (quick: 15 s). Bounds: every request answered
                    (ok + errors == sent, lost 0); stub RSS growth after warm-up (the first
                    20 %) <= 5 %; stub thread count not growing.
native overload 2x  the same overload against emulated_native (Triton's dynamic batcher, no
                    SLA input), for comparison; only "lost 0" is a bound (quick: skipped).
                    Requests unanswered after a 10 s client timeout end as
                    DEADLINE_EXCEEDED (the client's own deadline, not a server answer).

Capacity: ``scheduler_core.simulator.capacity_rps`` of the t4 profile's cost model, padded,
time scale 10, on lengths from the default ``LogNormalLengths``, with the profile's
max_batch_size and max_batch_tokens.

Prints a markdown table (case | requests sent | responses | errors by code | lost | notes);
the full run also writes it to results/reliability.md. Exits 1 if any case loses a request
or fails a bound.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from operator_tools.loadgen import LoadGenerator, LoadResult, concat_phases  # noqa: E402
from operator_tools.records import OK  # noqa: E402
from scheduler_core import workload as W  # noqa: E402
from scheduler_core.profile_files import load_profile, profile_path  # noqa: E402
from scheduler_core.simulator import capacity_rps  # noqa: E402
from scheduler_core.stats import percentile  # noqa: E402
from operator_tools.measure import PeriodicSampler, queue_gauges  # noqa: E402
from operator_tools.procinfo import cpu_s, find_stub, rss_mb, threads  # noqa: E402
from sidecar.triton_metrics import MetricsParseError  # noqa: E402
from triton_backend.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer  # noqa: E402

TIME_SCALE = 10.0
EXPLICIT, NATIVE = "emulated_explicit", "emulated_native"
PROFILE_DIR = os.path.join(REPO_ROOT, "model_repository", EXPLICIT, "profiles")
PROFILE = "t4"
SLA_CLASSES_MS = tuple(s * TIME_SCALE for s in W.DEFAULT_SLA_CLASSES_MS)  # 500/1000/2000
LENGTHS = W.LogNormalLengths()
CAPACITY_SAMPLE = 100_000
SEED = 20240601
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "reliability.md")

RECOVERY_FACTOR = 1.5  # per-second ok p99 back within this factor of the baseline p99
RECOVERY_BOUND_S = 5.0
ERROR_SLA_RATIO_BOUND = 1.0  # p99 of error latency / the request's own SLA
STUB_RSS_GROWTH_BOUND_MB = 64.0  # overload: what a full 4096-request queue may hold, and more
SERVER_RSS_GROWTH_BOUND_MB = 256.0
SOAK_RSS_GROWTH_BOUND = 0.05
NATIVE_CLIENT_TIMEOUT_S = 10.0
MONITOR_PERIOD_S = 0.5


# -- the server ---------------------------------------------------------------------------

def prepare_repository(dest_dir: str) -> str:
    """A copy of the shipped repository with time_scale 10 on the two emulated models."""
    repo = os.path.join(dest_dir, "model_repository")
    shutil.copytree(DEFAULT_MODEL_REPOSITORY, repo,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for model in (EXPLICIT, NATIVE):
        with open(os.path.join(repo, model, "config.pbtxt"), "a") as fh:
            fh.write(f'\nparameters {{ key: "time_scale" value: {{ string_value: '
                     f'"{TIME_SCALE:g}" }} }}\n')
    return repo


@dataclass
class Sample:
    t_s: float  # from the load generator's start (negative before it)
    queue_depth: float | None
    pending: float | None
    server_rss_mb: float | None
    stub_rss_mb: float | None
    stub_threads: int | None
    server_cpu_s: float | None = None
    stub_cpu_s: float | None = None
    self_cpu_s: float | None = None


class Monitor:
    """Samples the metrics port and /proc every 0.5 s in a background thread."""

    def __init__(self, server: TritonServer, stub_pid: int | None, model: str):
        self.server, self.stub_pid, self.model = server, stub_pid, model
        self.scrape_errors = 0
        self._t0 = time.monotonic()
        self._sampler = PeriodicSampler(self._read, MONITOR_PERIOD_S,
                                        name="reliability-monitor")

    @property
    def samples(self) -> list[Sample]:
        return self._sampler.samples

    def set_t0(self, t0: float) -> None:
        self._t0 = t0

    def sample(self) -> Sample:
        return self._sampler.sample_once()

    def _read(self) -> Sample:
        depth = pending = None
        try:
            values = queue_gauges(self.server.metrics_url)
            depth = values.get(("explicit_batching_queue_depth", self.model))
            pending = values.get(("nv_inference_pending_request_count", self.model))
        except (OSError, MetricsParseError):
            self.scrape_errors += 1
        times = os.times()
        return Sample(time.monotonic() - self._t0, depth, pending,
                      rss_mb(self.server.process.pid), rss_mb(self.stub_pid),
                      threads(self.stub_pid), cpu_s(self.server.process.pid),
                      cpu_s(self.stub_pid), times.user + times.system)

    def __enter__(self) -> "Monitor":
        self.sample()
        self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        self._sampler.stop(timeout_s=60.0)
        self.sample()

    def cpu_note(self) -> str:
        """Average CPU use over the samples, in % of one core (2 cores = 200 %)."""
        a, b = self.samples[0], self.samples[-1]
        span = b.t_s - a.t_s
        if span <= 0:
            return ""
        def pct(x, y):
            return "n/a" if x is None or y is None else f"{100.0 * (y - x) / span:.0f} %"
        return (f"CPU (% of one core): tritonserver {pct(a.server_cpu_s, b.server_cpu_s)} "
                f"(without its stubs), stub {pct(a.stub_cpu_s, b.stub_cpu_s)}, load generator "
                f"+ monitor {pct(a.self_cpu_s, b.self_cpu_s)}")

    def between(self, start_s: float, end_s: float) -> list[Sample]:
        return [s for s in self.samples if start_s <= s.t_s < end_s]

    def last_before(self, t_s: float) -> Sample | None:
        before = [s for s in self.samples if s.t_s <= t_s]
        return before[-1] if before else None


# -- workload and capacity ----------------------------------------------------------------

def capacity() -> tuple[float, object]:
    profile = load_profile(profile_path(PROFILE_DIR, PROFILE))
    lengths = W.sample_lengths(CAPACITY_SAMPLE, SEED, LENGTHS)
    cap = capacity_rps(profile.cost_model, "padded", TIME_SCALE, lengths,
                       profile.scheduler.max_batch_size, profile.scheduler.max_batch_tokens)
    return cap, profile


def poisson(rate_rps: float, duration_s: float, seed: int) -> list[W.Arrival]:
    return W.generate(W.Poisson(rate_rps), duration_s, seed, LENGTHS,
                      W.SlaMix(SLA_CLASSES_MS))


# -- cases ----------------------------------------------------------------------------------

@dataclass
class CaseResult:
    name: str
    result: LoadResult | None
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # extra markdown for the report
    skipped: str = ""
    warnings: list[str] = field(default_factory=list)  # reported; failures with --strict

    @property
    def passed(self) -> bool:
        return not self.failures and (self.result is None or self.result.lost == 0)

    def verdict(self) -> str:
        if self.result is None:
            return "skipped"
        problems = self.failures + ([f"{self.result.lost} lost"] if self.result.lost else [])
        text = "PASS" if not problems else "FAIL: " + "; ".join(problems)
        if self.warnings:
            text += " (WARN: " + "; ".join(self.warnings) + ")"
        return text


@dataclass
class Context:
    server: TritonServer
    repo: str
    capacity_rps: float
    max_queue_size: int
    quick: bool
    stubs: dict[str, int | None] = field(default_factory=dict)


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def _error_breakdown(r: LoadResult) -> str:
    """UNAVAILABLE errors by reason (queue full / deadline infeasible / other)."""
    reasons: dict[str, int] = {}
    for rec in r.records:
        if rec.outcome in (OK, "LOST"):
            continue
        msg = rec.message.lower()
        why = ("queue full" if "queue full" in msg else
               "deadline infeasible" if "infeasible" in msg else
               "shutting down" if "shutting down" in msg or "unloaded" in msg else
               rec.outcome)
        reasons[why] = reasons.get(why, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none"


def _recovery(result: LoadResult, overload_end_s: float, end_s: float, threshold_ms: float
              ) -> tuple[float | None, list]:
    """Seconds after the overload ends until the per-second ok p99 is back within
    ``threshold_ms``: the start of the first 1-s bucket that, with the next one (when there
    is one), has ok responses and a p99 within it (None: never in the recovery phase)."""
    buckets = result.window(overload_end_s, end_s).buckets(1.0)
    good = [b.ok > 0 and b.p99_ms <= threshold_ms for b in buckets]
    for i, b in enumerate(buckets):
        if good[i] and (i + 1 == len(buckets) or good[i + 1]):
            return b.start_s, buckets
    return None, buckets


def _bucket_table(buckets_by_phase: list[tuple[str, float, list]]) -> list[str]:
    lines = ["| t (s) | phase | sent | ok | errors | ok p50 (ms) | ok p99 (ms) | "
             "error p99 (ms) |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for phase, offset, buckets in buckets_by_phase:
        for b in buckets:
            lines.append(f"| {offset + b.start_s:.0f} | {phase} | {b.sent} | {b.ok} | "
                         f"{b.errors} | {_fmt(b.p50_ms)} | {_fmt(b.p99_ms)} | "
                         f"{_fmt(b.error_p99_ms)} |")
    return lines


def _rejection_timing(result: LoadResult) -> tuple[str, float | None]:
    """A note on when errors arrived against each request's own SLA, and the p99 of
    error latency / SLA (None without SLA-carrying errors)."""
    errs = [r for r in result.records if r.outcome not in (OK, "LOST", "SEND_FAILED")
            and r.latency_ms is not None]
    if not errs:
        return "", None
    lat = [r.latency_ms for r in errs]
    text = (f"errors: {_error_breakdown(result)}; error latency p50/p99 "
            f"{_fmt(percentile(lat, 50))}/{_fmt(percentile(lat, 99))} ms, "
            f"{sum(1 for x in lat if x <= 50.0)} of {len(lat)} within 50 ms")
    with_sla = [r for r in errs if r.sla_ms]
    if not with_sla:
        return text, None
    ratios = [r.latency_ms / r.sla_ms for r in with_sla]
    late = [r.latency_ms - r.sla_ms for r in with_sla if r.latency_ms > r.sla_ms]
    by_class: dict[float, list[float]] = {}
    for r in with_sla:
        by_class.setdefault(r.sla_ms, []).append(r.latency_ms)
    per_class = ", ".join(f"{sla:g} ms class p50 {_fmt(percentile(v, 50))}"
                          for sla, v in sorted(by_class.items()))
    text += (f"; by SLA: {per_class} ms; {len(late)} of {len(with_sla)} "
             f"({100.0 * len(late) / len(with_sla):.0f} %) answered after their own deadline"
             + (f" (by up to {max(late):.0f} ms)" if late else "")
             + f"; p99 of error latency / own SLA {percentile(ratios, 99):.2f}")
    return text, percentile(ratios, 99)


def run_overload(ctx: Context, model: str, name: str) -> CaseResult:
    quick = ctx.quick
    # warm-up (not measured: the controller starts cold), baseline, overload, recovery
    warm_s, baseline_s, overload_s, recovery_s = ((3.0, 5.0, 6.0, 6.0) if quick
                                                  else (5.0, 10.0, 60.0, 10.0))
    cap = ctx.capacity_rps
    low, high = 0.5 * cap, 2.0 * cap
    explicit = model == EXPLICIT
    arrivals = concat_phases(
        [poisson(low, warm_s, SEED), poisson(low, baseline_s, SEED + 1),
         poisson(high, overload_s, SEED + 2), poisson(low, recovery_s, SEED + 3)],
        [warm_s, baseline_s, overload_s, recovery_s])
    t_base = warm_s
    t_over = t_base + baseline_s
    t_rec = t_over + overload_s
    t_end = t_rec + recovery_s
    stub = ctx.stubs.get(model)
    gen = LoadGenerator(ctx.server.grpc_url, model, clients=4, include_sla=explicit,
                        client_timeout_s=None if explicit else NATIVE_CLIENT_TIMEOUT_S,
                        seed=SEED)
    drain = 30.0 if explicit else NATIVE_CLIENT_TIMEOUT_S + 20.0
    with Monitor(ctx.server, stub, model) as mon:
        result = gen.run(arrivals, max_duration_s=t_end, drain_timeout_s=drain,
                         on_start=mon.set_t0)
    case = CaseResult(name, result)
    notes, fails = case.notes, case.failures

    # Offered rates and the load generator's own timing.
    notes.append(f"capacity {cap:.1f} req/s; offered {low:.0f} req/s (warm-up {warm_s:g} s + "
                 f"baseline {baseline_s:g} s) -> {high:.0f} req/s ({overload_s:g} s) -> "
                 f"{low:.0f} req/s ({recovery_s:g} s)")
    notes.append(f"send lag mean {result.send_lag_mean_ms:.2f} ms, p99 "
                 f"{result.send_lag_p99_ms:.2f} ms, max {result.send_lag_max_ms:.1f} ms")
    if result.duplicates:
        fails.append(f"{result.duplicates} duplicate responses")

    # Latencies and errors.
    base = result.window(t_base, t_over)
    over = result.window(t_over, t_rec)
    baseline_p99 = base.p99_ms
    notes.append(f"baseline (0.5x) ok p50/p99 {_fmt(base.p50_ms)}/{_fmt(baseline_p99)} ms; "
                 f"overload ok p50/p99 {_fmt(over.p50_ms)}/{_fmt(over.p99_ms)} ms, "
                 f"{over.ok / overload_s:.0f} ok/s, {over.errors / overload_s:.0f} errors/s")
    timing, ratio_p99 = _rejection_timing(result)
    if timing:
        notes.append(timing)
    if explicit:
        bad_codes = {c: n for c, n in result.errors_by_code.items() if c != "UNAVAILABLE"}
        if bad_codes:
            fails.append(f"errors other than UNAVAILABLE: {bad_codes} "
                         f"(e.g. {result.messages(next(iter(bad_codes)), 1)})")
        if ratio_p99 is not None and ratio_p99 > ERROR_SLA_RATIO_BOUND:
            case.warnings.append(
                f"slow rejections: p99 of error latency / own SLA {ratio_p99:.2f} > "
                f"{ERROR_SLA_RATIO_BOUND:g} (refusals after the deadline)")

    # Queue depth (explicit: the plugin's gauge; native: Triton's pending count).
    depths = [s.queue_depth for s in mon.samples if s.queue_depth is not None]
    pendings = [s.pending for s in mon.samples if s.pending is not None]
    if explicit:
        if not depths:
            fails.append("queue-depth gauge never scraped")
        else:
            notes.append(f"queue depth max {max(depths):.0f} (bound {ctx.max_queue_size})")
            if max(depths) > ctx.max_queue_size:
                fails.append(f"queue depth {max(depths):.0f} > max_queue_size "
                             f"{ctx.max_queue_size}")
    if pendings:
        notes.append(f"Triton pending requests max {max(pendings):.0f}")

    # Memory: before the overload (end of baseline) vs after the drain.
    before, after = mon.last_before(t_over), mon.samples[-1]
    peak_stub = max((s.stub_rss_mb for s in mon.samples if s.stub_rss_mb), default=None)
    peak_srv = max((s.server_rss_mb for s in mon.samples if s.server_rss_mb), default=None)
    if before and before.stub_rss_mb and after.stub_rss_mb:
        notes.append(f"stub RSS {before.stub_rss_mb:.0f} -> {after.stub_rss_mb:.0f} MB "
                     f"(peak {_fmt(peak_stub)}); server RSS {_fmt(before.server_rss_mb)} -> "
                     f"{_fmt(after.server_rss_mb)} MB (peak {_fmt(peak_srv)})")
        if after.stub_rss_mb - before.stub_rss_mb > STUB_RSS_GROWTH_BOUND_MB:
            fails.append(f"stub RSS grew {after.stub_rss_mb - before.stub_rss_mb:.0f} MB "
                         f"> {STUB_RSS_GROWTH_BOUND_MB:g} MB")
        if (before.server_rss_mb and after.server_rss_mb and
                after.server_rss_mb - before.server_rss_mb > SERVER_RSS_GROWTH_BOUND_MB):
            fails.append(f"server RSS grew {after.server_rss_mb - before.server_rss_mb:.0f} "
                         f"MB > {SERVER_RSS_GROWTH_BOUND_MB:g} MB")
    else:
        fails.append("could not read the stub's RSS")

    notes.append(mon.cpu_note())

    # Recovery.
    threshold = RECOVERY_FACTOR * baseline_p99
    recovered, rec_buckets = _recovery(result, t_rec, t_end, threshold)
    if recovered is None:
        notes.append(f"recovery: per-second ok p99 not back within {RECOVERY_FACTOR:g}x "
                     f"baseline ({_fmt(threshold)} ms) in the {recovery_s:g} s after")
        if explicit:
            fails.append("no recovery")
    else:
        notes.append(f"recovery {recovered:.0f} s (per-second ok p99 <= {_fmt(threshold)} ms "
                     f"= {RECOVERY_FACTOR:g}x baseline, two seconds running; 1 s resolution)")
        if explicit and recovered > RECOVERY_BOUND_S:
            fails.append(f"recovery {recovered:.0f} s > {RECOVERY_BOUND_S:g} s")

    # Per-second table for the report.
    case.details = [f"#### {name}: per-second buckets (by scheduled time)", "",
                    *_bucket_table([
                        ("warm-up 0.5x", 0.0, result.window(0.0, t_base).buckets(1.0)),
                        ("baseline 0.5x", t_base, base.buckets(1.0)),
                        ("overload 2x", t_over, over.buckets(1.0)),
                        ("recovery 0.5x", t_rec, rec_buckets)]), ""]
    return case


def case_overload(ctx: Context) -> CaseResult:
    return run_overload(ctx, EXPLICIT, "overload 2x")


def case_native_overload(ctx: Context) -> CaseResult:
    if ctx.quick:
        return CaseResult("native overload 2x", None, skipped="skipped in --quick")
    return run_overload(ctx, NATIVE, "native overload 2x")


def case_soak(ctx: Context) -> CaseResult:
    duration = 15.0 if ctx.quick else 600.0
    warm = 0.2 * duration
    rate = 0.7 * ctx.capacity_rps
    stub = ctx.stubs.get(EXPLICIT)
    gen = LoadGenerator(ctx.server.grpc_url, EXPLICIT, clients=4, seed=SEED)
    with Monitor(ctx.server, stub, EXPLICIT) as mon:
        result = gen.run(poisson(rate, duration, SEED + 10), max_duration_s=duration,
                         drain_timeout_s=30.0, on_start=mon.set_t0)
    case = CaseResult("soak", result)
    notes, fails = case.notes, case.failures
    notes.append(f"{rate:.0f} req/s (0.7x capacity) for {duration:g} s; ok p50/p99 "
                 f"{_fmt(result.p50_ms)}/{_fmt(result.p99_ms)} ms")
    notes.append(f"send lag mean {result.send_lag_mean_ms:.2f} ms, p99 "
                 f"{result.send_lag_p99_ms:.2f} ms, max {result.send_lag_max_ms:.1f} ms")
    if result.errors:
        notes.append(f"errors: {_error_breakdown(result)}")
    if result.ok + result.errors != result.sent:
        fails.append(f"ok + errors = {result.ok + result.errors} != sent {result.sent}")
    if result.duplicates:
        fails.append(f"{result.duplicates} duplicate responses")
    warm_samples = mon.between(0.0, warm)
    ref = mon.last_before(warm)
    end = mon.last_before(duration)
    if ref and end and ref.stub_rss_mb and end.stub_rss_mb:
        growth = end.stub_rss_mb / ref.stub_rss_mb - 1.0
        notes.append(f"stub RSS after warm-up {ref.stub_rss_mb:.1f} MB -> end "
                     f"{end.stub_rss_mb:.1f} MB ({growth * 100:+.1f} %); server RSS "
                     f"{_fmt(ref.server_rss_mb)} -> {_fmt(end.server_rss_mb)} MB")
        if growth > SOAK_RSS_GROWTH_BOUND:
            fails.append(f"stub RSS grew {growth * 100:.1f} % > "
                         f"{SOAK_RSS_GROWTH_BOUND * 100:g} % after warm-up")
    else:
        fails.append("could not read the stub's RSS")
    warm_threads = [s.stub_threads for s in warm_samples if s.stub_threads]
    all_threads = [s.stub_threads for s in mon.samples if s.stub_threads]
    if warm_threads and all_threads:
        notes.append(f"stub threads {max(warm_threads)} after warm-up, max {max(all_threads)}, "
                     f"end {all_threads[-1]}")
        if max(all_threads) > max(warm_threads):
            fails.append(f"stub threads grew {max(warm_threads)} -> {max(all_threads)}")
    depths = [s.queue_depth for s in mon.samples if s.queue_depth is not None]
    if depths:
        notes.append(f"queue depth max {max(depths):.0f}")
    notes.append(mon.cpu_note())
    case.details = ["#### soak: over time (requests by scheduled time; process figures at "
                    "the end of each slice)", "",
                    "| t (s) | sent | ok | errors | ok p99 (ms) | stub RSS (MB) | stub threads | "
                    "server RSS (MB) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    step = duration / 10.0
    for k in range(10):
        part = result.window(k * step, (k + 1) * step)
        smp = mon.last_before((k + 1) * step)
        case.details.append(
            f"| {k * step:g}-{(k + 1) * step:g} | {part.sent} | {part.ok} | {part.errors} | "
            f"{_fmt(part.p99_ms)} | {_fmt(smp.stub_rss_mb if smp else None, 1)} | "
            f"{smp.stub_threads if smp else 'n/a'} | "
            f"{_fmt(smp.server_rss_mb if smp else None, 1)} |")
    case.details.append("")
    return case


CASES = {"overload": case_overload, "soak": case_soak, "native": case_native_overload}


# -- report ------------------------------------------------------------------------------

def table(cases: list[CaseResult]) -> str:
    lines = ["| case | requests sent | responses | errors by code | lost (must be 0) | notes |"
             " verdict |", "|---|---:|---:|---|---:|---|---|"]
    for c in cases:
        if c.result is None:
            lines.append(f"| {c.name} | - | - | - | 0 | {c.skipped} | skipped |")
            continue
        r = c.result
        errs = ", ".join(
            f"{k} (client timeout {r.client_timeout_s:g} s, no server answer) {v}"
            if k == "DEADLINE_EXCEEDED" and r.client_timeouts else f"{k} {v}"
            for k, v in r.errors_by_code.items()) or "none"
        notes = "; ".join(c.notes).replace("|", "/")
        lines.append(f"| {c.name} | {r.sent} | {r.responses} | {errs} | {r.lost} | {notes} | "
                     f"{c.verdict()} |")
    return "\n".join(lines)


def machine_notes() -> str:
    return (f"Machine: {os.cpu_count()} cores ({platform.machine()}, {platform.system()}), "
            f"shared by tritonserver, the Python-backend stubs and the load generator; no GPU. "
            f"The device is EMULATED (cost model of BERT-base on a T4, profile `{PROFILE}`) and "
            f"slowed {TIME_SCALE:g}x (model-config parameter `time_scale`), SLA classes scaled "
            f"alike (50/100/200 ms -> {'/'.join(f'{s:g}' for s in SLA_CLASSES_MS)} ms), so the "
            f"load generator can overload it from this machine. Load: open-loop gRPC "
            f"(operator_tools/loadgen.py), Poisson arrivals, lengths LogNormal(median 64, "
            f"sigma 0.8) in 16..512.")


def bounds_legend() -> str:
    return (
        f"Bounds (exit 1 if one fails): **lost 0** in every case (a request without an answer "
        f"when the post-schedule wait ends). *overload 2x* (emulated_explicit): errors only "
        f"UNAVAILABLE; the `explicit_batching_queue_depth` gauge (scraped every "
        f"{MONITOR_PERIOD_S:g} s) never above max_queue_size; stub RSS growth <= "
        f"{STUB_RSS_GROWTH_BOUND_MB:g} MB and tritonserver RSS growth <= "
        f"{SERVER_RSS_GROWTH_BOUND_MB:g} MB from the end of the baseline to after the drain; "
        f"recovery <= {RECOVERY_BOUND_S:g} s: the first second after the overload from which "
        f"two consecutive per-second p99s of ok latency (requests by scheduled time) are "
        f"within {RECOVERY_FACTOR:g}x the baseline p99 (all ok latencies of the 0.5x baseline, "
        f"after a warm-up). *soak*: ok + errors == sent; stub RSS growth after the warm-up "
        f"(first 20 %) <= {SOAK_RSS_GROWTH_BOUND * 100:g} %; stub thread count never above "
        f"the warm-up's. *native overload 2x*: comparison only, lost 0 is its one bound; its "
        f"client gives up after {NATIVE_CLIENT_TIMEOUT_S:g} s (DEADLINE_EXCEEDED, no server "
        f"answer), since Triton's dynamic-batcher queue is unbounded. **WARN** (reported, "
        f"fails only with `--strict`): p99 of error latency / the request's own SLA <= "
        f"{ERROR_SLA_RATIO_BOUND:g}, i.e. refusals arrive before the deadline they announce. "
        f"Latency = response time - actual send time; send lag = actual - scheduled send "
        f"time.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short cases (make test)")
    parser.add_argument("--case", action="append", choices=sorted(CASES),
                        help="run only these cases (default: all)")
    parser.add_argument("--out", default=None,
                        help="report path (full run default: results/reliability.md; "
                             "--quick prints only)")
    parser.add_argument("--strict", action="store_true",
                        help="warnings (e.g. refusals after the deadline) fail the run too")
    parser.add_argument("--details", action="store_true",
                        help="print the per-second buckets too")
    args = parser.parse_args(argv)
    exe = sys.executable
    if os.path.abspath(exe).startswith(REPO_ROOT + os.sep):
        exe = os.path.relpath(exe, REPO_ROOT)
    command = " ".join(shlex.quote(a) for a in [
        exe, "scripts/reliability.py", *(argv if argv is not None else sys.argv[1:])])
    cap, profile = capacity()
    max_queue = profile.scheduler.max_queue_size
    print(f"capacity of {EXPLICIT} (t4, padded, time scale {TIME_SCALE:g}): {cap:.1f} req/s",
          flush=True)
    names = args.case or list(CASES)
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        repo = prepare_repository(tmp)
        log = os.path.join(tmp, "tritonserver.log")
        server = TritonServer(repo, log_path=log, exit_timeout_s=15, extra_args=(
            "--model-control-mode=explicit", f"--load-model={EXPLICIT}",
            f"--load-model={NATIVE}"))
        started = time.monotonic()
        try:
            with server:
                print(f"server ready in {time.monotonic() - started:.1f} s "
                      f"(gRPC {server.grpc_url})", flush=True)
                ctx = Context(server, repo, cap, max_queue, args.quick)
                for model in (EXPLICIT, NATIVE):
                    ctx.stubs[model] = find_stub(server.process.pid, repo, model)
                for name in names:
                    t = time.monotonic()
                    case = CASES[name](ctx)
                    results.append(case)
                    r = case.result
                    print(f"[{case.name}] {r.summary() if r else case.skipped} "
                          f"({time.monotonic() - t:.0f} s)", flush=True)
                    if args.strict:
                        case.failures.extend(case.warnings)
                        case.warnings = []
                    for f in case.failures:
                        print(f"[{case.name}] FAIL: {f}", flush=True)
                    for w in case.warnings:
                        print(f"[{case.name}] WARN: {w}", flush=True)
        finally:
            failed = any(not c.passed for c in results)
            if failed and os.path.exists(log):
                with open(log, errors="replace") as fh:
                    tail = fh.read().splitlines()[-30:]
                print("--- tritonserver log (tail) ---\n" + "\n".join(tail), file=sys.stderr)
    report = "\n".join([
        "# Reliability suite", "", "```bash", command, "```", "", machine_notes(), "",
        table(results), "", bounds_legend(), ""])
    print("\n" + report)
    if args.details:
        for c in results:
            if c.details:
                print("\n".join(c.details))
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out:
        with open(out, "w") as fh:
            fh.write(report)
            details = [line for c in results for line in c.details]
            if details:
                fh.write("\n## Per-second latency (recovery analysis)\n\n" + "\n".join(details))
        print(f"wrote {out}")
    ok = bool(results) and all(c.passed for c in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
