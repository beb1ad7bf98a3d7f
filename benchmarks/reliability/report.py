"""The reliability report: the table of cases, the previous run's rows, the machine and
the bounds.
"""

from __future__ import annotations

import os
import platform

from .fixtures import (CRASH_ANSWER_BOUND_S, CRASH_MIN_QUEUED, CaseResult, DRIP_FOR_S,
                       DRIP_HEALTH_BOUND_S, ERROR_SLA_RATIO_BOUND, HOSTILE_REFUSAL_BOUND_S,
                       MONITOR_PERIOD_S,
                       NATIVE_CLIENT_TIMEOUT_S, PROFILE, RECOVERY_BOUND_S, RECOVERY_FACTOR,
                       RELEASE_CLIENT_TIMEOUT_S, SERVER_RSS_GROWTH_BOUND_MB, SLA_CLASSES_MS,
                       SOAK_RSS_GROWTH_BOUND, STUB_RSS_GROWTH_BOUND_MB, TIME_SCALE)


TABLE_HEADER = ("| case | requests sent | answered | errors by code | lost (must be 0) | "
                "healthy afterwards | notes | verdict |")


def table(cases: list[CaseResult], previous: dict[str, str] | None = None) -> str:
    """The results table; ``previous``: rows (by case name) of cases not rerun, copied
    from the last report."""
    lines = [TABLE_HEADER, "|---|---:|---:|---|---:|---|---|---|"]
    ran = set()
    for c in cases:
        if not c.ran:
            if previous and c.name in previous:
                continue
            lines.append(f"| {c.name} | - | - | - | 0 | - | {c.skipped} | skipped |")
            continue
        ran.add(c.name)
        if c.result is not None:
            r = c.result
            sent, answered, lost = r.sent, r.responses, r.lost
            errs = ", ".join(
                f"{k} (client timeout {r.client_timeout_s:g} s, no server answer) {v}"
                if k == "DEADLINE_EXCEEDED" and r.client_timeouts else f"{k} {v}"
                for k, v in r.errors_by_code.items()) or "none"
        else:
            t = c.tally
            sent, answered, lost = t.sent, t.responses, t.lost
            errs = ", ".join(f"{k} {v}" for k, v in sorted(t.errors_by_code.items())) or "none"
        notes = "; ".join(c.notes).replace("|", "/")
        lines.append(f"| {c.name} | {sent} | {answered} | {errs} | {lost} | "
                     f"{(c.healthy or 'n/a').replace('|', '/')} | {notes} | {c.verdict()} |")
    for name, row in (previous or {}).items():
        if name not in ran:
            lines.append(row)
    return "\n".join(lines)


def previous_report(path: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """From an earlier report: its table rows and its detail blocks, by case name, marked
    as from the previous run (a run of some cases keeps the others' last results)."""
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return {}, {}
    rows: dict[str, str] = {}
    in_table = False
    for line in text.splitlines():
        if line.startswith("| case |"):
            in_table = "lost" in line
            old_format = "healthy" not in line  # before the "healthy afterwards" column
            continue
        if in_table and line.startswith("| ") and not line.startswith("|---"):
            if old_format:
                cells = line.split("|")
                cells.insert(6, " not recorded ")
                line = "|".join(cells)
            name = line.split("|")[1].strip()
            if name.endswith("*(previous run)*"):
                rows[name.replace(" *(previous run)*", "")] = line
            else:
                rows[name] = line.replace(f"| {name} |", f"| {name} *(previous run)* |", 1)
        elif in_table and not line.startswith("|"):
            in_table = False
    blocks: dict[str, list[str]] = {}
    current = None
    for line in text.split("## Per-second latency (recovery analysis)", 1)[-1].splitlines() \
            if "## Per-second latency" in text else []:
        if line.startswith("#### "):
            current = line[5:].split(":", 1)[0].replace(" *(previous run)*", "")
            blocks[current] = [line if "*(previous run)*" in line else
                               line.replace(current, f"{current} *(previous run)*", 1)]
        elif current:
            blocks[current].append(line)
    return rows, blocks


def machine_notes() -> str:
    return (f"Machine: {os.cpu_count()} cores ({platform.machine()}, {platform.system()}), "
            f"shared by tritonserver, the Python-backend stubs and the load generator; no GPU. "
            f"The device is EMULATED (cost model of BERT-base on a T4, profile `{PROFILE}`) and "
            f"slowed {TIME_SCALE:g}x (model-config parameter `time_scale`), SLA classes scaled "
            f"alike (50/100/200 ms -> {'/'.join(f'{s:g}' for s in SLA_CLASSES_MS)} ms), so the "
            f"load generator can overload it from this machine. Load: open-loop gRPC "
            f"(benchmarks/loadgen.py), Poisson arrivals, lengths LogNormal(median 64, "
            f"sigma 0.8) in 16..512.")


def bounds_legend() -> str:
    return (
        f"Bounds (exit 1 if one fails): **lost 0** in every case (a request without an answer "
        f"when the post-schedule wait ends). *overload 2x* (emulated_explicit): errors only "
        f"UNAVAILABLE; the `explicit_batching_queue_depth` gauge (scraped every "
        f"{MONITOR_PERIOD_S:g} s) never above max_queued_requests; stub RSS growth <= "
        f"{STUB_RSS_GROWTH_BOUND_MB:g} MB and tritonserver RSS growth <= "
        f"{SERVER_RSS_GROWTH_BOUND_MB:g} MB from the end of the baseline to after the drain; "
        f"recovery <= {RECOVERY_BOUND_S:g} s: the first second after the overload from which "
        f"two consecutive per-second p99s of ok latency (requests by scheduled time) are "
        f"within {RECOVERY_FACTOR:g}x the baseline p99 (all ok latencies of the 0.5x baseline, "
        f"after a warm-up). *soak*: ok + errors == sent; stub RSS growth after the warm-up "
        f"(first 20 %) <= {SOAK_RSS_GROWTH_BOUND * 100:g} %; stub thread count never above "
        f"the warm-up's. *native overload 2x*: comparison only, lost 0 is its one bound; its "
        f"client gives up after {NATIVE_CLIENT_TIMEOUT_S:g} s (DEADLINE_EXCEEDED, no server "
        f"answer), since Triton's dynamic-batcher queue is unbounded. *overload 2x* also: "
        f"refusals before the deadline, p99 of (refusal latency / the request's own SLA) <= "
        f"{ERROR_SLA_RATIO_BOUND:g}. *stub kill -9 (intake hold)*: >= {CRASH_MIN_QUEUED} "
        f"requests unanswered at the kill; every client answered within "
        f"{CRASH_ANSWER_BOUND_S:g} s of the kill (else lost), none twice; afterwards the model "
        f"is reloaded by `server_ops/supervisor.py` and answers (\"documented\" when the "
        f"kill aborts tritonserver itself, as a stall does). "
        f"*stub kill -9 (intake release)*: comparison only; its client gives up after "
        f"{RELEASE_CLIENT_TIMEOUT_S:g} s. *hostile reloads*: each refused by the plugin "
        f"within {HOSTILE_REFUSAL_BOUND_S:g} s of Triton handing it the new instance (the "
        f"server log's ModelInstanceInitialize to the failure; the whole call, which adds "
        f"Triton's start of the new version's stubs, is reported), naming the problem, quoting nothing from outside "
        f"the repository, the old version still answering. *drip-feeding metrics endpoint*: "
        f"`explicit_batching_sidecar_health` < 1 within {DRIP_HEALTH_BOUND_S:g} s of the "
        f"sidecar's first scrape that meets the drip (its first dripped byte; the drip lasts "
        f"{DRIP_FOR_S:g} s, the sidecar scraping at its own cadence). *stub SIGSTOP*: PASS "
        f"when the server survives; \"documented\" when it "
        f"aborts (docs/reliability.md, \"Stub crashes and stalls\"). *healthy afterwards*: the server "
        f"ready and the case's model answering one inference (a failure when not, except in "
        f"comparison rows and documented aborts). "
        f"Latency = response time - actual send time; send lag = actual - scheduled send "
        f"time. Time bounds (refusal timing, recovery, the hostile refusals, the drip) are "
        f"bounds of the full run only; `--quick` reports a missed one as WARN with its "
        f"measurement and the load average.")


def report_case(case: CaseResult, took_s: float, strict: bool) -> None:
    """Print a finished case's summary, failures and warnings (``strict``: warnings fail);
    a case whose model was unhealthy afterwards fails unless it is a comparison row or a
    documented abort."""
    if case.healthy.startswith("no") and not case.comparison and not case.documented:
        case.failures.append(f"not healthy afterwards ({case.healthy})")
    r = case.result
    summary = (r.summary() if r else
               f"sent {case.tally.sent}, answered {case.tally.responses}, "
               f"errors {case.tally.errors_by_code}, lost {case.tally.lost}"
               if case.tally else case.skipped)
    print(f"[{case.name}] {summary}; healthy afterwards: {case.healthy or 'n/a'}; "
          f"{case.verdict()} ({took_s:.0f} s); {'; '.join(case.notes)[:300] if not r else ''}",
          flush=True)
    if strict:
        case.failures.extend(case.warnings)
        case.warnings = []
    for f in case.failures:
        print(f"[{case.name}] FAIL: {f}", flush=True)
    for w in case.warnings:
        print(f"[{case.name}] WARN: {w}", flush=True)
