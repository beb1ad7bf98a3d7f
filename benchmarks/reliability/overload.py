"""The overload cases: 2x overload and recovery (``overload``), the SLA carried as
Triton's timeout (``timeout``), a 3x burst between two 1.4x phases (``burst``), and native
behind Triton's batcher at 2x (``native_overload``).
"""

from __future__ import annotations

from benchmarks.load_result import LoadResult

from benchmarks.loadgen import LoadGenerator, concat_phases
from operator_tools.records import OK
from scheduler_core.stats import percentile
from .fixtures import (BURST_BASE, BURST_PEAK, CaseResult, Context, ERROR_SLA_RATIO_BOUND,
                       EXPLICIT, fmt, missed_time_bound, NATIVE, NATIVE_CLIENT_TIMEOUT_S, poisson,
                       RECOVERY_BOUND_S, RECOVERY_FACTOR, ResourceMonitor, SEED,
                       SERVER_RSS_GROWTH_BOUND_MB, STUB_RSS_GROWTH_BOUND_MB, TIMEOUT_GRACE_MS)
from .servers import health_after


def error_breakdown(r: LoadResult) -> str:
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
                         f"{b.errors} | {fmt(b.p50_ms)} | {fmt(b.p99_ms)} | "
                         f"{fmt(b.error_p99_ms)} |")
    return lines


def _rejection_timing(result: LoadResult) -> tuple[str, float | None]:
    """A note on when errors arrived against each request's own SLA, and the p99 of
    error latency / SLA (None without SLA-carrying errors)."""
    errs = [r for r in result.records if r.outcome not in (OK, "LOST", "SEND_FAILED")
            and r.latency_ms is not None]
    if not errs:
        return "", None
    lat = [r.latency_ms for r in errs]
    text = (f"errors: {error_breakdown(result)}; error latency p50/p99 "
            f"{fmt(percentile(lat, 50))}/{fmt(percentile(lat, 99))} ms, "
            f"{sum(1 for x in lat if x <= 50.0)} of {len(lat)} within 50 ms")
    with_sla = [r for r in errs if r.sla_ms]
    if not with_sla:
        return text, None
    ratios = [r.latency_ms / r.sla_ms for r in with_sla]
    late = [r.latency_ms - r.sla_ms for r in with_sla if r.latency_ms > r.sla_ms]
    by_class: dict[float, list[float]] = {}
    for r in with_sla:
        by_class.setdefault(r.sla_ms, []).append(r.latency_ms)
    per_class = ", ".join(f"{sla:g} ms class p50 {fmt(percentile(v, 50))}"
                          for sla, v in sorted(by_class.items()))
    text += (f"; by SLA: {per_class} ms; {len(late)} of {len(with_sla)} "
             f"({100.0 * len(late) / len(with_sla):.0f} %) answered after their own deadline"
             + (f" (by up to {max(late):.0f} ms)" if late else "")
             + f"; p99 of error latency / own SLA {percentile(ratios, 99):.2f}")
    return text, percentile(ratios, 99)


def run_overload(ctx: Context, model: str, name: str, sla_as_timeout: bool = False
                 ) -> CaseResult:
    """``sla_as_timeout``: each request's SLA goes as Triton's own ``timeout`` instead."""
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
                        sla_as_timeout=sla_as_timeout, seed=SEED)
    drain = 30.0 if explicit else NATIVE_CLIENT_TIMEOUT_S + 20.0
    with ResourceMonitor(ctx.server, stub, model) as mon:
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
    notes.append(f"baseline (0.5x) ok p50/p99 {fmt(base.p50_ms)}/{fmt(baseline_p99)} ms; "
                 f"overload ok p50/p99 {fmt(over.p50_ms)}/{fmt(over.p99_ms)} ms, "
                 f"{over.ok / overload_s:.0f} ok/s, {over.errors / overload_s:.0f} errors/s")
    timing, ratio_p99 = _rejection_timing(result)
    if timing:
        notes.append(timing)
    if sla_as_timeout:
        past = _past_timeout(result)
        notes.append(past[0])
        if past[1]:
            missed_time_bound(ctx, case, f"{past[1]} answers later than their timeout + "
                              f"{TIMEOUT_GRACE_MS:g} ms")
    if explicit:
        bad_codes = {c: n for c, n in result.errors_by_code.items() if c != "UNAVAILABLE"}
        if bad_codes:
            fails.append(f"errors other than UNAVAILABLE: {bad_codes} "
                         f"(e.g. {result.messages(next(iter(bad_codes)), 1)})")
        if ratio_p99 is None:
            notes.append("no refusals with an SLA: the refusal bound was not exercised")
        elif ratio_p99 > ERROR_SLA_RATIO_BOUND:
            missed_time_bound(ctx, case, f"slow refusals: p99 of refusal time / own SLA "
                              f"{ratio_p99:.2f} > {ERROR_SLA_RATIO_BOUND:g} (refused after "
                              f"the deadline)")

    # Queue depth (explicit: the plugin's gauge; native: Triton's pending count).
    depths = [s.queue_depth for s in mon.samples if s.queue_depth is not None]
    pendings = [s.pending for s in mon.samples if s.pending is not None]
    if explicit:
        if not depths:
            fails.append("queue-depth gauge never scraped")
        else:
            notes.append(f"queue depth max {max(depths):.0f} (bound {ctx.max_queued_requests})")
            if max(depths) > ctx.max_queued_requests:
                fails.append(f"queue depth {max(depths):.0f} > max_queued_requests "
                             f"{ctx.max_queued_requests}")
    if pendings:
        notes.append(f"Triton pending requests max {max(pendings):.0f}")

    # Memory: before the overload (end of baseline) vs after the drain.
    before, after = mon.last_before(t_over), mon.samples[-1]
    peak_stub = max((s.stub_rss_mb for s in mon.samples if s.stub_rss_mb), default=None)
    peak_srv = max((s.server_rss_mb for s in mon.samples if s.server_rss_mb), default=None)
    if before and before.stub_rss_mb and after.stub_rss_mb:
        notes.append(f"stub RSS {before.stub_rss_mb:.0f} -> {after.stub_rss_mb:.0f} MB "
                     f"(peak {fmt(peak_stub)}); server RSS {fmt(before.server_rss_mb)} -> "
                     f"{fmt(after.server_rss_mb)} MB (peak {fmt(peak_srv)})")
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
                     f"baseline ({fmt(threshold)} ms) in the {recovery_s:g} s after")
        if explicit:
            missed_time_bound(ctx, case, f"no recovery within the {recovery_s:g} s after")
    else:
        notes.append(f"recovery {recovered:.0f} s (per-second ok p99 <= {fmt(threshold)} ms "
                     f"= {RECOVERY_FACTOR:g}x baseline, two seconds running; 1 s resolution)")
        if explicit and recovered > RECOVERY_BOUND_S:
            missed_time_bound(ctx, case, f"recovery {recovered:.0f} s > {RECOVERY_BOUND_S:g} s")

    case.healthy = health_after(ctx.server, model)

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


def _past_timeout(result: LoadResult) -> tuple[str, int]:
    """(a note, how many answers came after their Triton ``timeout`` + TIMEOUT_GRACE_MS):
    every answer counts, served or refused."""
    answered = [r for r in result.records if r.sla_ms and r.latency_ms is not None
                and r.outcome not in ("LOST", "SEND_FAILED")]
    over = [r.latency_ms - r.sla_ms for r in answered]
    late = sum(1 for x in over if x > TIMEOUT_GRACE_MS)
    return (f"answers after timeout T + {TIMEOUT_GRACE_MS:g} ms: {late} of {len(answered)}"
            + (f"; latency - T p99 {percentile(over, 99):.0f} ms, max {max(over):.0f} ms"
               if over else ""), late)


def case_timeout(ctx: Context) -> CaseResult:
    """The 2x overload with each SLA sent as Triton's ``timeout`` (no SLA input): the
    plugin enforces the timeout itself (Triton's queue would only under a queue policy,
    which turns its prefetch off), so every answer must come by T + TIMEOUT_GRACE_MS."""
    return run_overload(ctx, EXPLICIT, "overload 2x, SLA as Triton timeout",
                        sla_as_timeout=True)


BURST_S = 12.0
BURST_SETTLE_S = 5.0
BURST_TOLERANCE = 0.10


def _attainment(result: LoadResult) -> float | None:
    """Answered OK within the request's own SLA, of those sent (None: none sent)."""
    sent = [r for r in result.records if r.sla_ms]
    if not sent:
        return None
    met = sum(1 for r in sent if r.outcome == OK and r.latency_ms is not None
              and r.latency_ms <= r.sla_ms)
    return met / len(sent)


def case_burst(ctx: Context) -> CaseResult:
    name = "burst 3x"
    warm_s, first_s, after_s = (3.0, 6.0, 10.0) if ctx.quick else (5.0, 15.0, 20.0)
    burst_s = 4.0 if ctx.quick else BURST_S
    cap = ctx.capacity_rps
    base, peak = BURST_BASE * cap, BURST_PEAK * cap
    arrivals = concat_phases(
        [poisson(base, warm_s, SEED + 40), poisson(base, first_s, SEED + 41),
         poisson(peak, burst_s, SEED + 42), poisson(base, after_s, SEED + 43)],
        [warm_s, first_s, burst_s, after_s])
    t_first, t_burst = warm_s, warm_s + first_s
    t_after = t_burst + burst_s
    t_end = t_after + after_s
    gen = LoadGenerator(ctx.server.grpc_url, EXPLICIT, clients=4, include_sla=True, seed=SEED)
    result = gen.run(arrivals, max_duration_s=t_end, drain_timeout_s=30.0)
    case = CaseResult(name, result)
    first = result.window(t_first, t_burst)
    settled = result.window(t_after + BURST_SETTLE_S, t_end)
    a_first, a_settled = _attainment(first), _attainment(settled)
    case.notes.append(
        f"capacity {cap:.1f} req/s; {base:.0f} req/s ({first_s:g} s after a {warm_s:g} s "
        f"warm-up) -> {peak:.0f} req/s ({burst_s:g} s) -> {base:.0f} req/s ({after_s:g} s); "
        f"send lag p99 {result.send_lag_p99_ms:.2f} ms; first phase ok p50 "
        f"{fmt(first.p50_ms)} ms, attainment {fmt(a_first and 100 * a_first)} %; from "
        f"{BURST_SETTLE_S:g} s after the burst ok p50 {fmt(settled.p50_ms)} ms, attainment "
        f"{fmt(a_settled and 100 * a_settled)} %")
    if result.duplicates:
        case.failures.append(f"{result.duplicates} duplicate responses")
    if a_first is None or a_settled is None or not first.ok or not settled.ok:
        case.failures.append("a phase without answered requests: nothing to compare")
    else:
        p50_ratio = settled.p50_ms / first.p50_ms
        if p50_ratio > 1.0 + BURST_TOLERANCE:
            missed_time_bound(ctx, case, f"P50 after the burst {p50_ratio:.2f}x the first "
                              f"phase's (> {1.0 + BURST_TOLERANCE:g}x)")
        if a_settled < (1.0 - BURST_TOLERANCE) * a_first:
            missed_time_bound(ctx, case, f"attainment after the burst {100 * a_settled:.1f} % "
                              f"< {1.0 - BURST_TOLERANCE:g} x the first phase's "
                              f"{100 * a_first:.1f} %")
    case.healthy = health_after(ctx.server, EXPLICIT)
    case.details = [f"#### {name}: per-second buckets (by scheduled time)", "",
                    *_bucket_table([
                        ("first 1.4x", t_first, first.buckets(1.0)),
                        ("burst 3x", t_burst, result.window(t_burst, t_after).buckets(1.0)),
                        ("after 1.4x", t_after, result.window(t_after, t_end).buckets(1.0))]),
                    ""]
    return case


def case_native_overload(ctx: Context) -> CaseResult:
    if ctx.quick:
        return CaseResult("native overload 2x", None, skipped="skipped in --quick")
    return run_overload(ctx, NATIVE, "native overload 2x")
