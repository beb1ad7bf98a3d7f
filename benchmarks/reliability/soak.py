"""The soak case: a long steady load, memory and answers checked throughout.
"""

from __future__ import annotations

from benchmarks.loadgen import LoadGenerator
from .fixtures import (CaseResult, Context, EXPLICIT, fmt, missed_resource_bound, poisson,
                       ResourceMonitor, SEED, SOAK_RSS_GROWTH_BOUND)
from .overload import error_breakdown
from .servers import health_after


def case_soak(ctx: Context) -> CaseResult:
    duration = 15.0 if ctx.quick else 600.0
    warm = 0.2 * duration
    rate = 0.7 * ctx.capacity_rps
    stub = ctx.stubs.get(EXPLICIT)
    gen = LoadGenerator(ctx.server.grpc_url, EXPLICIT, clients=4, seed=SEED)
    with ResourceMonitor(ctx.server, stub, EXPLICIT) as mon:
        result = gen.run(poisson(rate, duration, SEED + 10), max_duration_s=duration,
                         drain_timeout_s=30.0, on_start=mon.set_t0)
    case = CaseResult("soak", result)
    case.healthy = health_after(ctx.server, EXPLICIT)
    notes, fails = case.notes, case.failures
    notes.append(f"{rate:.0f} req/s (0.7x capacity) for {duration:g} s; ok p50/p99 "
                 f"{fmt(result.p50_ms)}/{fmt(result.p99_ms)} ms")
    notes.append(f"send lag mean {result.send_lag_mean_ms:.2f} ms, p99 "
                 f"{result.send_lag_p99_ms:.2f} ms, max {result.send_lag_max_ms:.1f} ms")
    if result.errors:
        notes.append(f"errors: {error_breakdown(result)}")
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
                     f"{fmt(ref.server_rss_mb)} -> {fmt(end.server_rss_mb)} MB")
        if growth > SOAK_RSS_GROWTH_BOUND:
            # A leak shows over the full run's 10 minutes; over --quick's 12 s a few MB of
            # allocator noise cross 5 % of a small stub: a bound of the full run only.
            missed_resource_bound(ctx, case, f"stub RSS grew {growth * 100:.1f} % > "
                                  f"{SOAK_RSS_GROWTH_BOUND * 100:g} % after warm-up")
    else:
        missed_resource_bound(ctx, case, "could not read the stub's RSS")
    warm_threads = [s.stub_threads for s in warm_samples if s.stub_threads]
    all_threads = [s.stub_threads for s in mon.samples if s.stub_threads]
    if warm_threads and all_threads:
        notes.append(f"stub threads {max(warm_threads)} after warm-up, max {max(all_threads)}, "
                     f"end {all_threads[-1]}")
        if max(all_threads) > max(warm_threads):
            # (a thread started lazily after --quick's 3 s warm-up is no leak yet)
            missed_resource_bound(ctx, case, f"stub threads grew {max(warm_threads)} -> "
                                  f"{max(all_threads)}")
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
            f"{fmt(part.p99_ms)} | {fmt(smp.stub_rss_mb if smp else None, 1)} | "
            f"{smp.stub_threads if smp else 'n/a'} | "
            f"{fmt(smp.server_rss_mb if smp else None, 1)} |")
    case.details.append("")
    return case
