"""Reliability suite: overload, recovery and soak against a real tritonserver.

Starts its own tritonserver (``triton_backend.launcher.TritonServer``, free ports) on a
temporary copy of ``model_repository/`` in which ``emulated_explicit`` and
``emulated_native`` get the model-config parameter ``time_scale`` = 10: the EMULATED device
(a cost model of BERT-base on a T4 that sleeps for each batch's cost) runs 10x slower, so
this 2-core machine can overload it with an open-loop gRPC load generator
(``benchmarks/loadgen.py``). SLA classes are scaled alike: 50/100/200 ms -> 500/1000/2000
ms. Only those two models are loaded (``--model-control-mode=explicit``): the real MiniLM
models would only take CPU and memory from the load generator.

Cases (``--quick``: short versions, for ``make test``; ``--case NAME``, repeatable, runs
only those and keeps the other cases' rows of the last report, marked "previous run"):

overload 2x         (``overload``) Poisson arrivals at 0.5x capacity (warm-up, then the
                    baseline), 2x capacity, then 0.5x again (recovery) against
                    emulated_explicit. Bounds: lost 0; errors only UNAVAILABLE; refusals
                    before the deadline: p99 of (refusal latency / the request's own SLA)
                    <= 1.0; stub and server RSS bounded; the queue-depth gauge never above
                    max_queue_size; recovery (per-second p99 of ok latencies back within 1.5x
                    of the baseline p99) within 5 s.
timeout 2x          (``timeout``) the overload 2x case with each request's SLA sent as
                    Triton's own per-request ``timeout`` (no SLA input): every answer,
                    served or refused, by its timeout + 50 ms; the overload case's bounds too.
burst 3x            (``burst``) 1.4x capacity (warm-up, then the first phase), 12 s at 3x,
                    then 1.4x again. Bounds: lost 0; from 5 s after the burst, ok P50 and
                    attainment (ok within the request's own SLA, of those sent) within
                    10 % of the first phase's (a model must not stay in a slower state).
soak                (``soak``) 0.7x capacity for 10 min (quick: 15 s). Bounds: every request
                    answered (ok + errors == sent, lost 0); stub RSS growth after warm-up (the
                    first 20 %) <= 5 %; stub thread count not growing.
native overload 2x  (``native``) the same overload against emulated_native (Triton's dynamic
                    batcher, no SLA input), for comparison; only "lost 0" is a bound (quick:
                    skipped). Requests unanswered after a 10 s client timeout end as
                    DEADLINE_EXCEEDED (the client's own deadline, not a server answer).
server stop         one row per server: PASS when tritonserver exits by itself within its
                    exit timeout (exit code 0, no "Exit timeout expired"). Two Triton 2.51
                    behaviours make a server wait its whole exit timeout, for any Python
                    model (reproduced with a ten-line model): a refused reload, and a stub
                    that died with an execute() call in flight, each leave a version that
                    counts as live until exit. The kill and hostile cases therefore run on
                    servers of their own (exit timeout 5 s), whose stop rows say
                    "documented"; the main server's stop must PASS.
stub kill -9        (``kill-hold``) ``crash_hold`` (emulated_explicit as shipped: ``intake: hold``)
  (intake hold)     gets 150 requests of 512 tokens (SLA 600 s) in 0.3 s; 1 s later its stub
                    is killed (SIGKILL, by PID) while a StubSupervisor watches. Bounds: >= 100
                    unanswered at the kill (else the case tested nothing); lost 0: every
                    client answered within 30 s of the kill, none twice; afterwards the model
                    is reloaded and answers an inference. A kill that lands while the stub
                    holds the shared-memory lock aborts tritonserver itself (Triton 2.51, as
                    a stall does): the verdict is then "documented", lost 0 still a bound.
stub kill -9        (``kill-release``) the same against ``crash_release`` (switched to
  (intake release)  ``intake: release``), comparison only: the backend keeps nothing for
                    released requests, so clients give up after a 10 s client timeout
                    (counted, DEADLINE_EXCEEDED); lost 0 is its one bound (quick: skipped).
hostile reloads     (``hostile``) ``hostile_target`` (live) is reloaded with profile_dir
                    symlinked out of the repository, a profile symlinked to /etc/passwd, a
                    100 MB profile, and an inner_model that does not exist. Bounds per
                    reload: refused by the plugin within 2 s (from the server log: Triton's
                    ModelInstanceInitialize to the failure; the whole call, which adds
                    Triton starting the version's stubs, is reported), the refusal names
                    the problem and quotes
                    nothing from outside the repository (the outside folder's path, its
                    secret, /etc/passwd), and the old version still answers.
drip-feeding        (``drip``) ``drip_explicit``'s sidecar scrapes a local endpoint
  metrics endpoint  (``metrics_url``) that serves a real Triton page, then drips one byte
                    every 0.2 s, under 5 req/s. Bound: ``explicit_batching_sidecar_health``
                    on Triton's metrics port (read every 0.1 s) below 1 within 2 s of the drip
                    starting; lost 0.
stub SIGSTOP 5 s    (``stall``) on a server of its own, 4 req/s for 14 s with a 10 s client
                    timeout; the stub is stopped at 3 s for 5 s (default settings). PASS if
                    the server survives; if it aborts (Triton 2.51 does, see docs/reliability.md "Stub
                    crashes and stalls": no setting prevents it) the verdict is "documented",
                    and the clients' errors count as errors. lost 0 either way; the stubs
                    found at the start are killed by PID if the abort orphaned them, and the
                    server is reaped (quick: skipped).

Time bounds (overload's refusal timing and recovery, the hostile refusals' 2 s, the drip's
2 s) are bounds of the full run, reported with the machine's load average. ``--quick`` runs
inside ``make test`` on a possibly loaded machine: there a missed time bound is reported as
a missed target (WARN, with its measurement), and only the behaviour fails the run: lost 0,
exactly one answer, the refusal naming the problem, nothing quoted, the old version serving.

Every row also says whether the server was healthy afterwards: ready, and the case's model
answers one inference. Processes are only ever signalled by PID, and only those this
script started (the servers' own stubs).

Capacity: ``scheduler_core.simulator.capacity_rps`` of the t4 profile's cost model, padded,
time scale 10, on lengths from the default ``LogNormalLengths``, with the profile's
max_batch_size and max_batch_tokens.

Prints a markdown table (case | requests sent | answered | errors by code | lost | healthy
afterwards | notes | verdict); the full run also writes it to results/reliability.md.
Exits 1 if any case loses a request or fails a bound.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from benchmarks.bench import emulated_capacity_rps, profile
from benchmarks.loadgen import (Arrival, LoadGenerator, LoadResult, concat_phases,
                                    fixed_rate)
from operator_tools.records import OK
from scheduler_core import workload as W
from scheduler_core.stats import percentile
from operator_tools.measure import PeriodicSampler, queue_gauges, scrape
from benchmarks.procinfo import cpu_s, find_stub, is_stub, rss_mb, threads
from benchmarks.repository import copy_model, edit_model
from sidecar.triton_metrics import MetricsParseError, read_samples
from triton_backend.intake_config import release_config
from triton_backend.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer
from triton_backend.supervisor import StubSupervisor, stub_pids

TIME_SCALE = 10.0
EXPLICIT, NATIVE = "emulated_explicit", "emulated_native"
PROFILE = "t4"  # of EXPLICIT's profiles, read through benchmarks.bench.profile
SLA_CLASSES_MS = tuple(s * TIME_SCALE for s in W.DEFAULT_SLA_CLASSES_MS)  # 500/1000/2000
LENGTHS = W.LogNormalLengths()
CAPACITY_SAMPLE = 100_000
SEED = 20240601
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "reliability.md")

RECOVERY_FACTOR = 1.5  # per-second ok p99 back within this factor of the baseline p99
RECOVERY_BOUND_S = 5.0
ERROR_SLA_RATIO_BOUND = 1.0  # p99 of error latency / the request's own SLA
TIMEOUT_GRACE_MS = 50.0  # case timeout: every answer by its Triton timeout + this
STUB_RSS_GROWTH_BOUND_MB = 64.0  # overload: what a full 4096-request queue may hold, and more
SERVER_RSS_GROWTH_BOUND_MB = 256.0
SOAK_RSS_GROWTH_BOUND = 0.05
NATIVE_CLIENT_TIMEOUT_S = 10.0
MONITOR_PERIOD_S = 0.5

# Models the new cases load on demand (explicit model control) from the same repository.
HOLD, RELEASE = "crash_hold", "crash_release"  # copies of emulated_explicit, for kill -9
HOSTILE, DRIP = "hostile_target", "drip_explicit"
STALL = "stall_explicit"  # in a repository and server of its own: a stall aborts the server
CRASH_REQUESTS = 150  # sent in 0.3 s, 512 tokens each: seconds of work at time scale 10
CRASH_SEQ_LEN = 512
CRASH_SLA_MS = 600_000.0  # so that none is refused for its deadline before the kill
CRASH_KILL_AT_S = 1.0  # after the first send
CRASH_MIN_QUEUED = 100  # unanswered requests at the kill, or the case tested nothing
CRASH_ANSWER_BOUND_S = 30.0  # every client answered within this of the kill
RELEASE_CLIENT_TIMEOUT_S = 10.0
RELOAD_BOUND_S = 30.0  # the supervisor's reload after the kill
HOSTILE_REFUSAL_BOUND_S = 2.0
HOSTILE_SECRET = "s3cr3t-outside-the-repository"
HOSTILE_PROFILE_MB = 100
DRIP_BYTE_EVERY_S = 0.2
DRIP_HEALTH_BOUND_S = 2.0
DRIP_SCRAPE_EVERY_S = 0.1
STALL_RATE_RPS = 4.0
STALL_AT_S, STALL_FOR_S, STALL_RUN_S = 3.0, 5.0, 14.0
STALL_CLIENT_TIMEOUT_S = 10.0


# -- the server ---------------------------------------------------------------------------

def copy_explicit(repo: str, name: str, release: bool = False,
                  params: dict[str, str] | None = None) -> str:
    """A copy of the shipped emulated_explicit named ``name`` in ``repo`` (time scale 10,
    its own profiles; the shipped intake, hold, or ``intake: release`` when ``release``);
    returns its folder."""
    return copy_model(EXPLICIT, repo, name, text_writer=release_config if release else None,
                      params={"time_scale": f"{TIME_SCALE:g}", "profile_dir": f"{name}/profiles",
                              **(params or {})})


def prepare_hostile(repo: str, dest_dir: str) -> str:
    """HOSTILE's folder with the profile folders the hostile reloads point at: a symlink out
    of the repository, a profile symlinked to /etc/passwd, a 100 MB profile. Returns the
    outside folder (its path and its secret must never be quoted)."""
    folder = copy_explicit(repo, HOSTILE)
    t4 = os.path.join(folder, "profiles", f"{PROFILE}.yaml")
    outside = os.path.join(dest_dir, "outside")
    os.makedirs(outside)
    shutil.copy(t4, outside)
    with open(os.path.join(outside, "secret.yaml"), "w") as fh:
        fh.write(f"name: {HOSTILE_SECRET}\n")
    os.symlink(outside, os.path.join(folder, "linked_out"), target_is_directory=True)
    passwd = os.path.join(folder, "passwd_profiles")
    os.makedirs(passwd)
    shutil.copy(t4, passwd)
    os.symlink("/etc/passwd", os.path.join(passwd, "passwd.yaml"))
    huge = os.path.join(folder, "huge_profiles")
    os.makedirs(huge)
    with open(os.path.join(huge, f"{PROFILE}.yaml"), "w") as fh:
        fh.write(f"name: {PROFILE}\ndescription: |\n")
        line = "  " + "x" * 1022 + "\n"
        fh.writelines(line for _ in range(HOSTILE_PROFILE_MB * 1024))
    return outside


def prepare_repository(dest_dir: str, drip_url: str) -> str:
    """A copy of the shipped repository with time_scale 10 on the two emulated models, plus
    the models the crash and drip cases load on demand. Returns the repository."""
    repo = os.path.join(dest_dir, "model_repository")
    shutil.copytree(DEFAULT_MODEL_REPOSITORY, repo,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for model in (EXPLICIT, NATIVE):
        edit_model(os.path.join(repo, model), params={"time_scale": f"{TIME_SCALE:g}"})
    copy_explicit(repo, DRIP, params={"metrics_url": drip_url})
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


class ResourceMonitor:
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

    def __enter__(self) -> "ResourceMonitor":
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
                f"+ monitor {pct(a.self_cpu_s, b.self_cpu_s)}; load average {load_average()}")

    def between(self, start_s: float, end_s: float) -> list[Sample]:
        return [s for s in self.samples if start_s <= s.t_s < end_s]

    def last_before(self, t_s: float) -> Sample | None:
        before = [s for s in self.samples if s.t_s <= t_s]
        return before[-1] if before else None


# -- workload and capacity ----------------------------------------------------------------

def capacity() -> tuple[float, object]:
    cap = emulated_capacity_rps(PROFILE, W.sample_lengths(CAPACITY_SAMPLE, SEED, LENGTHS),
                                TIME_SCALE)
    return cap, profile(PROFILE)  # the file emulated_capacity_rps read (cached)


def poisson(rate_rps: float, duration_s: float, seed: int) -> list[W.Arrival]:
    return W.generate(W.Poisson(rate_rps), duration_s, seed, LENGTHS,
                      W.SlaMix(SLA_CLASSES_MS))


# -- cases ----------------------------------------------------------------------------------

@dataclass
class Tally:
    """Counts of a case whose calls are not one load run (reload calls, inferences)."""

    sent: int = 0
    responses: int = 0
    errors_by_code: dict[str, int] = field(default_factory=dict)
    lost: int = 0

    def add(self, outcome: str | None) -> None:
        """One call: ``None`` = no answer (lost), "OK", or an error code."""
        self.sent += 1
        if outcome is None:
            self.lost += 1
            return
        self.responses += 1
        if outcome != "OK":
            self.errors_by_code[outcome] = self.errors_by_code.get(outcome, 0) + 1


@dataclass
class CaseResult:
    name: str
    result: LoadResult | None
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # extra markdown for the report
    skipped: str = ""
    warnings: list[str] = field(default_factory=list)  # reported; failures with --strict
    tally: Tally | None = None  # instead of ``result``
    healthy: str = ""  # was the server healthy afterwards (its model answering)?
    comparison: bool = False  # a comparison row: only "lost 0" is a bound
    documented: str = ""  # a known, documented limit hit (verdict says so; not a failure)

    @property
    def lost(self) -> int:
        if self.result is not None:
            return self.result.lost
        return self.tally.lost if self.tally is not None else 0

    @property
    def ran(self) -> bool:
        return self.result is not None or self.tally is not None

    @property
    def passed(self) -> bool:
        return self.lost == 0 and (self.comparison or not self.failures)

    def verdict(self) -> str:
        if not self.ran:
            return "skipped"
        lost = [f"{self.lost} lost"] if self.lost else []
        if self.comparison:
            text = ("comparison only (not a bound)" if not lost
                    else "FAIL: " + "; ".join(lost))
            if self.failures:
                text += ": " + "; ".join(self.failures)
        else:
            problems = self.failures + lost
            text = ("FAIL: " + "; ".join(problems) if problems
                    else self.documented or "PASS")
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
    drip: "DripServer | None" = None
    tmp: str = ""
    extra_rows: list = field(default_factory=list)  # rows a case adds (its own server's stop)


def missed_time_bound(ctx: Context, case: CaseResult, missed: str) -> None:
    """A time bound the case missed. The full run (``make reliability``) measures it as a
    bound: a failure. ``--quick`` (``make test``) reports it as a missed target with its
    measurement and the machine's load, never as a failure: a loaded 2-core machine may
    miss a bound of seconds while every behaviour holds."""
    missed_full_run_bound(ctx, case, missed, f"time target missed ({missed}; load average "
                                             f"{load_average()}; a bound only in the full run)")


def missed_resource_bound(ctx: Context, case: CaseResult, missed: str) -> None:
    """A soak's resource bound (RSS growth, thread count) the case missed: a failure in the
    full run, a WARN in ``--quick``, whose seconds cannot tell a leak from noise."""
    missed_full_run_bound(ctx, case, missed,
                          f"resource target missed ({missed}; a bound only in the full run)")


def missed_full_run_bound(ctx: Context, case: CaseResult, missed: str, warning: str) -> None:
    """A bound of the full run only: ``missed`` is a failure there, ``warning`` in --quick."""
    if ctx.quick:
        case.warnings.append(warning)
    else:
        case.failures.append(missed)


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as the kernel reports them."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


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
    notes.append(f"baseline (0.5x) ok p50/p99 {_fmt(base.p50_ms)}/{_fmt(baseline_p99)} ms; "
                 f"overload ok p50/p99 {_fmt(over.p50_ms)}/{_fmt(over.p99_ms)} ms, "
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
            missed_time_bound(ctx, case, f"no recovery within the {recovery_s:g} s after")
    else:
        notes.append(f"recovery {recovered:.0f} s (per-second ok p99 <= {_fmt(threshold)} ms "
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


# The burst case (issue "The shipped default at native's speed", item 5): a phase at
# BURST_BASE x capacity, BURST_S at BURST_PEAK x, then BURST_BASE x again; from
# BURST_SETTLE_S after the burst, P50 and attainment must be within BURST_TOLERANCE of the
# first phase (a live model must not fall into a slower state after a burst).
BURST_BASE, BURST_PEAK = 1.4, 3.0
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
        f"{_fmt(first.p50_ms)} ms, attainment {_fmt(a_first and 100 * a_first)} %; from "
        f"{BURST_SETTLE_S:g} s after the burst ok p50 {_fmt(settled.p50_ms)} ms, attainment "
        f"{_fmt(a_settled and 100 * a_settled)} %")
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
            f"{_fmt(part.p99_ms)} | {_fmt(smp.stub_rss_mb if smp else None, 1)} | "
            f"{smp.stub_threads if smp else 'n/a'} | "
            f"{_fmt(smp.server_rss_mb if smp else None, 1)} |")
    case.details.append("")
    return case


# -- stub crashes, stalls, hostile reloads, a dripping metrics endpoint ------------------

def _http_client(server: TritonServer, timeout_s: float = 30.0):
    import tritonclient.http as httpclient
    return httpclient.InferenceServerClient(server.http_url, connection_timeout=timeout_s,
                                            network_timeout=timeout_s)


def _infer_error(server: TritonServer, model: str, timeout_s: float = 10.0) -> str | None:
    """None when ``model`` answers one short inference (HTTP), else why not."""
    import numpy as np
    import tritonclient.http as httpclient
    try:
        client = _http_client(server, timeout_s)
        try:
            ids = httpclient.InferInput("INPUT_IDS", [1, 6], "INT64")
            ids.set_data_from_numpy(np.array([[101, 2023, 2003, 1037, 3231, 102]],
                                             dtype=np.int64))
            out = client.infer(model, [ids]).as_numpy("EMBEDDING")
        finally:
            client.close()
    except Exception as exc:  # refused, down, timed out: all "not serving"
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    return None if out is not None and out.shape == (1, 384) else "wrong output shape"


SERVER_ABORT_DOCUMENTED = "documented (docs/reliability.md: Stub crashes and stalls)"


def server_abort_notes(server: TritonServer) -> list[str]:
    """What an aborted tritonserver left: its exit code and the log's first abort line."""
    rc = server.process.returncode
    notes = [f"tritonserver aborted (exit {rc}" + (f", signal {-rc}" if rc < 0 else "") + ")"]
    with open(server.log_path, errors="replace") as fh:
        cause = [line.strip() for line in fh if "lock_exception" in line
                 or "terminate called" in line]
    if cause:
        notes.append(f"log: {cause[0][:120]!r}")
    return notes


def health_after(server: TritonServer, model: str) -> str:
    """'yes' when the server is up and ready and ``model`` answers an inference."""
    if server.process is None or server.process.poll() is not None:
        return f"no: server exited ({server.process.returncode if server.process else '-'})"
    if not server.is_ready():
        return "no: server not ready"
    why = _infer_error(server, model)
    return "yes" if why is None else f"no: {model} fails ({why})"



def _load(server: TritonServer, model: str) -> float:
    """Load ``model`` (explicit model control); seconds it took."""
    return server.load_model(model, timeout_s=120.0)


def _unload(server: TritonServer, model: str, case: CaseResult) -> None:
    """Unload ``model`` and wait for its stubs to go; a stub still there after 30 s is
    killed by PID and counts as a failure of the case."""
    try:
        server.unload_model(model)
    except Exception as exc:
        case.failures.append(f"unload of {model} failed: {exc}")
    deadline = time.monotonic() + 30.0
    while stub_pids(server.process.pid, model) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = stub_pids(server.process.pid, model)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    if left:
        case.failures.append(f"stub(s) {sorted(left)} still running 30 s after the unload "
                             f"(killed by PID)")


def run_stub_kill(ctx: Context, server: TritonServer, model: str, name: str,
                  comparison: bool) -> CaseResult:
    """kill -9 of ``model``'s stub with CRASH_REQUESTS requests queued; the stub supervisor
    reloads it. ``comparison`` (intake release): clients give up after
    RELEASE_CLIENT_TIMEOUT_S, since the backend keeps nothing for released requests."""
    case = CaseResult(name, None, comparison=comparison)
    notes, fails = case.notes, case.failures
    why = _infer_error(server, model)
    stubs = stub_pids(server.process.pid, model)
    if why or len(stubs) != 1:
        fails.append(f"{model} not serving before the kill ({why}; stubs {sorted(stubs)})")
        case.tally = Tally()
        return case
    (stub,) = stubs
    log: list[str] = []
    supervisor = StubSupervisor(server.process.pid, server.http_url, [model],
                                period_s=0.25, log=log.append).start()
    try:
        time.sleep(0.6)  # the supervisor has seen the stub
        kill: dict = {}

        def kill_later(t0: float) -> None:
            def fire() -> None:
                kill["at_s"] = time.monotonic() - t0
                kill["mono"] = time.monotonic()
                os.kill(stub, signal.SIGKILL)  # ours: a child of the server we started
            kill["timer"] = threading.Timer(
                max(0.0, t0 + CRASH_KILL_AT_S - time.monotonic()), fire)
            kill["timer"].start()

        arrivals = [Arrival(i * 0.002, CRASH_SEQ_LEN, CRASH_SLA_MS)
                    for i in range(CRASH_REQUESTS)]
        timeout = RELEASE_CLIENT_TIMEOUT_S if comparison else None
        # The drain ends CRASH_ANSWER_BOUND_S after the kill (a request unanswered by
        # then is LOST) or, with a client timeout, after it.
        drain = (CRASH_KILL_AT_S - arrivals[-1].time_s
                 + (timeout + 5.0 if timeout else CRASH_ANSWER_BOUND_S))
        gen = LoadGenerator(server.grpc_url, model, clients=4, client_timeout_s=timeout,
                            seed=SEED)
        result = gen.run(arrivals, drain_timeout_s=drain, on_start=kill_later)
        kill["timer"].join()
        case.result = result
        kill_at = kill["at_s"]
        queued = sum(1 for r in result.records if r.sent_s is not None
                     and r.sent_s <= kill_at and (r.response_s is None
                                                  or r.response_s > kill_at))
        answers = [r.response_s - kill_at for r in result.records
                   if r.response_s is not None and r.outcome != "DEADLINE_EXCEEDED"
                   and r.response_s > kill_at]
        last_s = max(answers) if answers else None
        notes.append(f"{CRASH_REQUESTS} requests x {CRASH_SEQ_LEN} tokens sent in "
                     f"{arrivals[-1].time_s:.1f} s; kill -9 of stub {stub} at "
                     f"{kill_at:.1f} s with {queued} unanswered (bound >= "
                     f"{CRASH_MIN_QUEUED}); on a server of its own")
        notes.append(f"last server answer {last_s:.1f} s after the kill" if last_s
                     is not None else "no server answer after the kill")
        codes = [c for c in result.errors_by_code if c != "DEADLINE_EXCEEDED"]
        for code in codes:
            notes.append(f"{code} e.g. {result.messages(code, 1)[0][:120]!r}")
        if result.client_timeouts:
            notes.append(f"{result.client_timeouts} clients timed out after "
                         f"{timeout:g} s: no answer from the server (intake release "
                         f"keeps nothing for them)")
        if queued < CRASH_MIN_QUEUED:
            fails.append(f"only {queued} requests unanswered at the kill "
                         f"(< {CRASH_MIN_QUEUED}): the kill tested too little")
        if result.duplicates:
            fails.append(f"{result.duplicates} requests answered twice")
        if not comparison and last_s is not None and last_s > CRASH_ANSWER_BOUND_S:
            fails.append(f"last answer {last_s:.1f} s after the kill > "
                         f"{CRASH_ANSWER_BOUND_S:g} s")
        deadline = kill["mono"] + RELOAD_BOUND_S
        while supervisor.reloads[model] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        reloaded = supervisor.reloads[model] > 0
    finally:
        supervisor.stop()
    if server.process.poll() is not None:
        # A kill that lands while the stub holds the shared-memory lock aborts the whole
        # server (Triton 2.51; the same corrupted mutex as a stall): nothing to reload.
        case.healthy = "no: tritonserver aborted after the kill"
        case.documented = SERVER_ABORT_DOCUMENTED
        notes.extend(server_abort_notes(server))
        notes.append("; ".join(log))
        return case
    why = _infer_error(server, model)
    if reloaded and why is None:
        case.healthy = "yes (reloaded by the supervisor, answers)"
        notes.append("; ".join(log))
    elif not _http_ready(server, model):
        case.healthy = "no: model reports not ready"
        fails.append(f"not reloaded and answering within {RELOAD_BOUND_S:g} s of the kill "
                     f"(supervisor: {log})")
    else:
        case.healthy = f"no: model READY but fails ({why})"
        fails.append(f"model reports ready but does not serve after the kill ({why}; "
                     f"supervisor: {log})")
    if stub in stub_pids(server.process.pid, model):
        fails.append(f"killed stub {stub} still listed")
    return case


def _http_ready(server: TritonServer, model: str) -> bool:
    try:
        client = _http_client(server, 5.0)
        try:
            return bool(client.is_model_ready(model))
        finally:
            client.close()
    except Exception:
        return False


# Triton 2.51 keeps a model version counted as live until it exits when its stub died with
# an execute() call in flight (reproduced with a ten-line Python model; unloading or
# reloading it does not help): that server waits its whole exit timeout at shutdown. So
# the kill cases run on servers of their own, and their stop rows say so.
KILLED_STUB_STOP = ("Triton 2.51 counts a version whose stub died inside execute() as live "
                    "until exit, so this server waits its exit timeout (docs/reliability.md, Stub "
                    "crashes and stalls)")
OWN_SERVER_EXIT_TIMEOUT_S = 5


def on_own_server(ctx: Context, model: str, label: str, expected_stop: str,
                  run: Callable[[TritonServer], CaseResult], **copy_args) -> CaseResult:
    """Run ``run(server)`` on a server of its own holding a copy of emulated_explicit named
    ``model``; its stop becomes a row of its own (``expected_stop``: documented when the
    stop runs into the exit timeout)."""
    repo = os.path.join(ctx.tmp, f"{model}_repository")
    os.makedirs(repo)
    copy_explicit(repo, model, **copy_args)
    server = TritonServer(repo, log_path=os.path.join(ctx.tmp, f"{model}-tritonserver.log"),
                          exit_timeout_s=OWN_SERVER_EXIT_TIMEOUT_S,
                          extra_args=("--model-control-mode=explicit", f"--load-model={model}"))
    stops: list[CaseResult] = []
    with ServerStop(server, f"server stop ({label})", stops, expected=expected_stop):
        case = run(server)
    ctx.extra_rows.extend(stops)
    return case


def case_kill_hold(ctx: Context) -> CaseResult:
    return on_own_server(ctx, HOLD, "stub kill -9, intake hold", KILLED_STUB_STOP,
                         lambda server: run_stub_kill(ctx, server, HOLD,
                                                      "stub kill -9 (intake hold)",
                                                      comparison=False))


def case_kill_release(ctx: Context) -> CaseResult:
    name = "stub kill -9 (intake release, comparison)"
    if ctx.quick:
        return CaseResult(name, None, skipped="skipped in --quick")
    return on_own_server(ctx, RELEASE, "stub kill -9, intake release", KILLED_STUB_STOP,
                         lambda server: run_stub_kill(ctx, server, RELEASE, name,
                                                      comparison=True), release=True)


HOSTILE_RELOADS = (  # (label, config parameters, expected in the refusal)
    ("profile_dir symlinked out of the repository", {"profile_dir": f"{HOSTILE}/linked_out"},
     "resolves outside the model repository"),
    ("profile symlinked to /etc/passwd", {"profile_dir": f"{HOSTILE}/passwd_profiles"},
     "passwd.yaml: resolves outside"),
    (f"{HOSTILE_PROFILE_MB} MB profile", {"profile_dir": f"{HOSTILE}/huge_profiles"},
     "byte limit for a profile file"),
    ("missing inner_model", {"inner_model": "does_not_exist"},
     "inner_model='does_not_exist'"),
)


# Triton 2.51 keeps the version of a refused reload counted as a live model until it exits:
# a server that refused a reload waits its whole exit timeout at shutdown ("Found 1 live
# models"), for any Python model (reproduced with a model whose initialize() raises; a
# refused first load does not do it). So the hostile reloads run on a server of their own,
# with a short exit timeout, and its stop row says so.
REFUSED_RELOAD_STOP = ("Triton 2.51 counts a refused reload's version as live until exit, "
                       "so this server waits its exit timeout (docs/reliability.md, Stub crashes and "
                       "stalls)")


def case_hostile(ctx: Context) -> CaseResult:
    """A live model reloaded with hostile profiles: each reload refused within 2 s, quoting
    nothing from outside the repository, the old version still serving. On a server of its
    own (see REFUSED_RELOAD_STOP); its stop is a row of its own."""
    repo = os.path.join(ctx.tmp, "hostile_repository")
    os.makedirs(repo)
    outside = prepare_hostile(repo, ctx.tmp)
    log = os.path.join(ctx.tmp, "hostile-tritonserver.log")
    server = TritonServer(repo, log_path=log, exit_timeout_s=OWN_SERVER_EXIT_TIMEOUT_S,
                          extra_args=("--model-control-mode=explicit",
                                      f"--load-model={HOSTILE}"))
    stops: list[CaseResult] = []
    with ServerStop(server, "server stop (hostile reloads)", stops,
                    expected=REFUSED_RELOAD_STOP):
        case = run_hostile(ctx, server, outside)
    ctx.extra_rows.extend(stops)
    return case


def _log_clock_s(line: str) -> float | None:
    """Seconds of the day of a tritonserver log line ("I1201 09:43:01.070325 ...")."""
    try:
        h, m, s = line.split()[1].split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)
    except (IndexError, ValueError):
        return None


def plugin_refusal_s(log_path: str, offset: int, model: str) -> float | None:
    """From the server log past byte ``offset``: seconds from Triton handing the new
    version's instance to the Python backend (``ModelInstanceInitialize``) to the load's
    failure - the plugin's share of a refused load; before it, Triton starts stubs."""
    with open(log_path, "rb") as fh:
        fh.seek(offset)
        lines = fh.read().decode("utf-8", "replace").splitlines()
    begin = next((_log_clock_s(x) for x in lines
                  if f"ModelInstanceInitialize: {model}_" in x), None)
    end = next((_log_clock_s(x) for x in lines if f"failed to load '{model}'" in x), None)
    return None if begin is None or end is None else (end - begin) % 86400.0


def run_hostile(ctx: Context, server: TritonServer, outside: str) -> CaseResult:
    from tritonclient.utils import InferenceServerException

    case = CaseResult("hostile reloads", None, tally=Tally())
    tally, notes, fails = case.tally, case.notes, case.failures
    notes.append(f"{HOSTILE} on a server of its own; calls: each hostile reload (an error "
                 f"is the expected answer) and one inference after it")
    client = _http_client(server, 30.0)
    try:
        for label, params, expected in HOSTILE_RELOADS:
            config = client.get_model_config(HOSTILE)
            for key, value in params.items():
                config.setdefault("parameters", {})[key] = {"string_value": value}
            started = time.monotonic()
            log_offset = os.path.getsize(server.log_path)
            message = ""
            try:
                client.load_model(HOSTILE, config=json.dumps(config))
                tally.add("OK")
            except InferenceServerException as exc:
                message = str(exc)
                tally.add(f"load refused (HTTP {exc.status() or '?'})")
            except Exception as exc:  # no answer within the client's timeout
                message = f"{type(exc).__name__}: {exc}"
                tally.add(None)
            took = time.monotonic() - started
            plugin_s = plugin_refusal_s(server.log_path, log_offset, HOSTILE)
            checks = []
            if not message:
                fails.append(f"{label}: the reload was accepted")
            elif expected not in message:
                fails.append(f"{label}: refusal without {expected!r}: {message[:200]!r}")
            if plugin_s is None or plugin_s > HOSTILE_REFUSAL_BOUND_S:
                missed_time_bound(ctx, case, f"{label}: the plugin refused after "
                                  f"{_fmt(plugin_s, 2)} s > {HOSTILE_REFUSAL_BOUND_S:g} s")
            quoted = [w for w in (outside, HOSTILE_SECRET, "root:") if w in message]
            if quoted or len(message) > 2000:
                fails.append(f"{label}: the refusal quotes outside content {quoted} "
                             f"({len(message)} chars)")
            else:
                checks.append("nothing from outside quoted")
            why = _infer_error(server, HOSTILE)
            tally.add("OK" if why is None else "INFER_FAILED")
            if why is None and _http_ready(server, HOSTILE):
                checks.append("old version serves")
            else:
                fails.append(f"{label}: the old version stopped serving ({why})")
            notes.append(f"{label}: refused in {took:.2f} s, of which the plugin "
                         f"{_fmt(plugin_s, 2)} s (bound {HOSTILE_REFUSAL_BOUND_S:g} s; the rest "
                         f"is Triton starting the new version's stubs; load average "
                         f"{load_average()}), " + ", ".join(checks))
    finally:
        client.close()
        case.healthy = health_after(server, HOSTILE)
    return case


class DripServer:
    """A metrics endpoint on 127.0.0.1 (free port): serves ``page`` whole, or, once
    ``start_drip()`` is called, one byte every DRIP_BYTE_EVERY_S."""

    def __init__(self):
        self.page = ""
        self.drip_since: float | None = None  # monotonic time of start_drip()
        self.first_drip_s: float | None = None  # monotonic time of the first dripped byte
        self.release = threading.Event()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body = state.page.encode("utf-8")
                head = (f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                        ).encode("ascii")
                try:
                    if state.drip_since is None:
                        self.wfile.write(head + body)
                    else:
                        self.wfile.write(head)
                        for i in range(len(body)):
                            if state.first_drip_s is None:
                                state.first_drip_s = time.monotonic()
                            self.wfile.write(body[i:i + 1])
                            self.wfile.flush()
                            if state.release.wait(DRIP_BYTE_EVERY_S) or state.drip_since is None:
                                break
                except OSError:  # the scraper gave up: the point of the drip
                    pass
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def start_drip(self) -> None:
        self.first_drip_s = None
        self.drip_since = time.monotonic()

    def stop_drip(self) -> None:
        self.drip_since = None

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _sidecar_health(server: TritonServer, model: str) -> float | None:
    try:
        text = scrape(server.metrics_url, 1.0)
    except (OSError, MetricsParseError):
        return None
    for s in read_samples(text):
        if (s.name == "explicit_batching_sidecar_health"
                and s.labels.get("model") == model):
            return float(s.value)
    return None


def case_drip(ctx: Context) -> CaseResult:
    """The perception sidecar's metrics endpoint starts drip-feeding: sidecar_health must
    drop below 1 within DRIP_HEALTH_BOUND_S, while the model keeps serving a light load."""
    server, drip = ctx.server, ctx.drip
    case = CaseResult("drip-feeding metrics endpoint", None)
    notes, fails = case.notes, case.failures
    drip.stop_drip()
    drip.page = scrape(server.metrics_url, 5.0)  # a real Triton page: health reads ok
    load_s = _load(server, DRIP)
    readings: list[tuple[float, float | None]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            readings.append((time.monotonic(), _sidecar_health(server, DRIP)))
            stop.wait(DRIP_SCRAPE_EVERY_S)

    watcher = threading.Thread(target=watch, name="health-watch", daemon=True)
    try:
        watcher.start()
        deadline = time.monotonic() + 15.0
        while not any(v == 1.0 for _, v in readings) and time.monotonic() < deadline:
            time.sleep(0.1)
        first_ok = next((t for t, v in readings if v == 1.0), None)
        if first_ok is None:
            fails.append(f"sidecar_health never read 1 before the drip (readings "
                         f"{sorted({v for _, v in readings}, key=str)})")
        good_s, drip_s = 2.0, 6.0
        gen = LoadGenerator(server.grpc_url, DRIP, clients=2, seed=SEED)
        timer: list[threading.Timer] = []

        def drip_later(t0: float) -> None:
            timer.append(threading.Timer(max(0.0, t0 + good_s - time.monotonic()),
                                         drip.start_drip))
            timer[0].start()

        result = gen.run(fixed_rate(5.0, good_s + drip_s, 64, SLA_CLASSES_MS[-1]),
                         drain_timeout_s=30.0, on_start=drip_later)
        timer[0].join()
        case.result = result
        since = drip.drip_since
        dropped = next((t for t, v in readings if t >= since and v is not None and v < 1.0),
                       None)
        values = sorted({v for t, v in readings if t >= since and v is not None})
        drip.stop_drip()
        stopped = time.monotonic()
        back = None
        while back is None and time.monotonic() < stopped + 10.0:
            time.sleep(0.1)
            back = next((t for t, v in list(readings) if t > stopped and v == 1.0), None)
        notes.append(f"{DRIP} loaded in {load_s:.1f} s; 5 req/s for {good_s + drip_s:g} s; "
                     f"the endpoint serves a whole page {good_s:g} s, then drips one byte "
                     f"every {DRIP_BYTE_EVERY_S:g} s; Triton's metrics port scraped every "
                     f"{DRIP_SCRAPE_EVERY_S:g} s ({len(readings)} reads)")
        if dropped is None:
            fails.append(f"sidecar_health not below 1 within {drip_s:g} s of the drip "
                         f"(values {values})")
        else:
            took = dropped - since
            first = (f", {dropped - drip.first_drip_s:.2f} s after the first dripped byte"
                     if drip.first_drip_s else "")
            notes.append(f"sidecar_health < 1 {took:.2f} s after the drip started{first} "
                         f"(bound {DRIP_HEALTH_BOUND_S:g} s; load average {load_average()}); "
                         f"values while dripping {values}")
            if took > DRIP_HEALTH_BOUND_S:
                missed_time_bound(ctx, case, f"sidecar_health < 1 only {took:.2f} s after the "
                                  f"drip > {DRIP_HEALTH_BOUND_S:g} s")
        notes.append(f"back to 1 {back - stopped:.1f} s after the drip stopped" if back
                     else "not back to 1 within 10 s of the drip stopping")
        if result.errors:
            notes.append(f"errors: {_error_breakdown(result)}")
    finally:
        stop.set()
        watcher.join(timeout=5)
        drip.stop_drip()
        case.healthy = health_after(server, DRIP)
        _unload(server, DRIP, case)
    return case


def case_stall(ctx: Context) -> CaseResult:
    """SIGSTOP of a stub for STALL_FOR_S under light load, on a server of its own (Triton
    2.51 aborts when a stub with work stalls > ~1 s: docs/reliability.md, "Stub crashes and stalls")."""
    name = f"stub SIGSTOP {STALL_FOR_S:g} s"
    if ctx.quick:
        return CaseResult(name, None, skipped="skipped in --quick (a server of its own)")
    case = CaseResult(name, None)
    notes, fails = case.notes, case.failures
    repo = os.path.join(ctx.tmp, "stall_repository")
    os.makedirs(repo)
    copy_explicit(repo, STALL)
    log = os.path.join(ctx.tmp, "stall-tritonserver.log")
    server = TritonServer(repo, log_path=log, exit_timeout_s=10, extra_args=(
        "--model-control-mode=explicit", f"--load-model={STALL}"))
    stubs: set[int] = set()
    timers: list[threading.Timer] = []
    events: dict[str, float] = {}
    server.start()
    try:
        server.wait_ready()
        stubs = stub_pids(server.process.pid, STALL)  # found now: after an abort they are orphans
        if len(stubs) != 1:
            fails.append(f"expected one stub of {STALL}, found {sorted(stubs)}")
            case.tally = Tally()
            return case
        (stub,) = stubs

        def signal_at(t0: float, at_s: float, sig: int, key: str) -> None:
            def fire() -> None:
                events[key] = time.monotonic() - t0
                try:
                    os.kill(stub, sig)
                except ProcessLookupError:
                    pass
            timers.append(threading.Timer(max(0.0, t0 + at_s - time.monotonic()), fire))
            timers[-1].start()

        def stall_later(t0: float) -> None:
            signal_at(t0, STALL_AT_S, signal.SIGSTOP, "stop")
            signal_at(t0, STALL_AT_S + STALL_FOR_S, signal.SIGCONT, "cont")

        gen = LoadGenerator(server.grpc_url, STALL, clients=2,
                            client_timeout_s=STALL_CLIENT_TIMEOUT_S, seed=SEED)
        result = gen.run(fixed_rate(STALL_RATE_RPS, STALL_RUN_S, 64, SLA_CLASSES_MS[-1]),
                         drain_timeout_s=STALL_CLIENT_TIMEOUT_S + 5.0, on_start=stall_later)
        for t in timers:
            t.join()
        case.result = result
        died = server.process.poll() is not None
        notes.append(f"own server; {STALL_RATE_RPS:g} req/s for {STALL_RUN_S:g} s; SIGSTOP of "
                     f"stub {stub} at {events.get('stop', math.nan):.1f} s, SIGCONT at "
                     f"{events.get('cont', math.nan):.1f} s; default settings (no setting "
                     f"prevents the abort: docs/reliability.md)")
        if result.errors_by_code:
            for code in result.errors_by_code:
                notes.append(f"{code} e.g. {(result.messages(code, 1) or [''])[0][:100]!r}")
        if result.client_timeouts:
            notes.append(f"{result.client_timeouts} clients gave up after "
                         f"{STALL_CLIENT_TIMEOUT_S:g} s (no server answer)")
        if result.duplicates:
            fails.append(f"{result.duplicates} requests answered twice")
        case.healthy = health_after(server, STALL)
        if died:
            case.documented = SERVER_ABORT_DOCUMENTED
            notes.extend(server_abort_notes(server))
        else:
            notes.append("tritonserver survived")
    finally:
        for t in timers:
            t.cancel()
        for pid in stubs:  # a stopped stub would hold the server's shutdown
            if is_stub(pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        server.stop()  # reaps the server, whether it aborted or not
        left = [pid for pid in stubs if is_stub(pid)]
        for pid in left:  # orphans of an aborted server ignore SIGTERM
            os.kill(pid, signal.SIGKILL)
        if left:
            notes.append(f"killed {len(left)} leftover stub(s) by PID {left}")
        deadline = time.monotonic() + 5.0
        while any(is_stub(pid) for pid in left) and time.monotonic() < deadline:
            time.sleep(0.1)
        if any(is_stub(pid) for pid in left):
            fails.append(f"stub(s) {left} still running after SIGKILL")
    return case


EXIT_TIMEOUT_EXPIRED = "Exit timeout expired"  # tritonserver's log line when it gives up


class ServerStop:
    """Runs a server (context manager) and, when it stops, adds a row for the stop: PASS
    when tritonserver exited by itself within its exit timeout (exit code 0, no "Exit
    timeout expired" in its log), with what it still waited for when it did not."""

    def __init__(self, server: TritonServer, name: str, results: list,
                 expected: str = ""):
        self.server, self.name, self.results = server, name, results
        self.expected = expected  # a documented reason the stop runs into the timeout

    def __enter__(self) -> TritonServer:
        self.server.start()
        try:
            self.server.wait_ready()
        except BaseException:
            self.server.stop()
            raise
        return self.server

    def __exit__(self, *exc) -> None:
        self.results.append(stop_case(self.server, self.name, self.expected))


def stop_case(server: TritonServer, name: str, expected: str = "") -> CaseResult:
    """Stop ``server`` (SIGINT, the launcher's wait) and judge the stop."""
    case = CaseResult(name, None, tally=Tally())
    started = time.monotonic()
    rc = server.stop()
    took = time.monotonic() - started
    with open(server.log_path, errors="replace") as fh:
        lines = fh.read().splitlines()
    shutdown = lines[next((i for i, line in enumerate(lines) if "Signal (2)" in line), 0):]
    expired = any(EXIT_TIMEOUT_EXPIRED in line for line in shutdown)
    waiting = sorted({line.split('"')[1].split(": ", 1)[-1] for line in shutdown
                      if "Timeout " in line and '"' in line and "Found 0 " not in line})
    case.notes.append(f"stopped in {took:.1f} s (exit timeout {server.exit_timeout_s} s), "
                      f"exit code {rc}; load average {load_average()}")
    if waiting:
        case.notes.append("waited for: " + "; ".join(waiting[:3]))
    if expired or rc != 0:
        why = (f"tritonserver gave up at its {server.exit_timeout_s} s exit timeout "
               f"({EXIT_TIMEOUT_EXPIRED!r} in its log)" if expired else f"exit code {rc}")
        if expected:
            case.documented = f"documented: {expected}"
            case.notes.append(why)
        else:
            case.failures.append(why)
    case.healthy = "n/a (stopped)"
    return case


CASES = {"overload": case_overload, "timeout": case_timeout, "burst": case_burst, "soak": case_soak,
         "native": case_native_overload,
         "kill-hold": case_kill_hold, "kill-release": case_kill_release,
         "hostile": case_hostile, "drip": case_drip, "stall": case_stall}


# -- report ------------------------------------------------------------------------------

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
        f"answer), since Triton's dynamic-batcher queue is unbounded. *overload 2x* also: "
        f"refusals before the deadline, p99 of (refusal latency / the request's own SLA) <= "
        f"{ERROR_SLA_RATIO_BOUND:g}. *stub kill -9 (intake hold)*: >= {CRASH_MIN_QUEUED} "
        f"requests unanswered at the kill; every client answered within "
        f"{CRASH_ANSWER_BOUND_S:g} s of the kill (else lost), none twice; afterwards the model "
        f"is reloaded by `triton_backend/supervisor.py` and answers (\"documented\" when the "
        f"kill aborts tritonserver itself, as a stall does). "
        f"*stub kill -9 (intake release)*: comparison only; its client gives up after "
        f"{RELEASE_CLIENT_TIMEOUT_S:g} s. *hostile reloads*: each refused by the plugin "
        f"within {HOSTILE_REFUSAL_BOUND_S:g} s of Triton handing it the new instance (the "
        f"server log's ModelInstanceInitialize to the failure; the whole call, which adds "
        f"Triton's start of the new version's stubs, is reported), naming the problem, quoting nothing from outside "
        f"the repository, the old version still answering. *drip-feeding metrics endpoint*: "
        f"`explicit_batching_sidecar_health` < 1 within {DRIP_HEALTH_BOUND_S:g} s of the drip "
        f"starting. *stub SIGSTOP*: PASS when the server survives; \"documented\" when it "
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short cases (make test)")
    parser.add_argument("--case", action="append", choices=sorted(CASES),
                        help="run only these cases (default: all)")
    parser.add_argument("--out", default=None,
                        help="report path (full run default: results/reliability.md; "
                             "--quick prints only)")
    parser.add_argument("--strict", action="store_true",
                        help="warnings fail the run too")
    parser.add_argument("--details", action="store_true",
                        help="print the per-second buckets too")
    args = parser.parse_args(argv)
    exe = sys.executable
    if os.path.abspath(exe).startswith(REPO_ROOT + os.sep):
        exe = os.path.relpath(exe, REPO_ROOT)
    command = " ".join(shlex.quote(a) for a in [
        exe, "scripts/reliability.py", *(argv if argv is not None else sys.argv[1:])])
    cap, t4 = capacity()
    max_queue = t4.scheduler.max_queue_size
    print(f"capacity of {EXPLICIT} (t4, padded, time scale {TIME_SCALE:g}): {cap:.1f} req/s",
          flush=True)
    names = args.case or list(CASES)
    out = args.out or (None if args.quick else DEFAULT_OUT)
    # A run of some cases keeps the other cases' rows of the last report (marked so).
    previous_rows, previous_blocks = (previous_report(out) if out and args.case
                                      else ({}, {}))
    results: list[CaseResult] = []
    drip = DripServer()
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        repo = prepare_repository(tmp, drip.url)
        log = os.path.join(tmp, "tritonserver.log")
        server = TritonServer(repo, log_path=log, exit_timeout_s=15, extra_args=(
            "--model-control-mode=explicit", f"--load-model={EXPLICIT}",
            f"--load-model={NATIVE}"))
        started = time.monotonic()
        try:
            with ServerStop(server, "server stop (after the cases)", results):
                print(f"server ready in {time.monotonic() - started:.1f} s "
                      f"(gRPC {server.grpc_url})", flush=True)
                ctx = Context(server, repo, cap, max_queue, args.quick, drip=drip, tmp=tmp)
                for model in (EXPLICIT, NATIVE):
                    ctx.stubs[model] = find_stub(server.process.pid, model)
                for name in names:
                    t = time.monotonic()
                    case = CASES[name](ctx)
                    for row in (case, *ctx.extra_rows):
                        results.append(row)
                        report_case(row, time.monotonic() - t, args.strict)
                    ctx.extra_rows.clear()
            report_case(results[-1], time.monotonic() - started, args.strict)  # the stop
        finally:
            drip.close()
            failed = any(not c.passed for c in results)
            if failed and os.path.exists(log):
                with open(log, errors="replace") as fh:
                    tail = fh.read().splitlines()[-30:]
                print("--- tritonserver log (tail) ---\n" + "\n".join(tail), file=sys.stderr)
    ran = {c.name for c in results if c.ran}
    kept = {n: row for n, row in previous_rows.items() if n not in ran}
    kept_note = ([f"Rows marked *(previous run)* ({', '.join(kept)}) were not rerun by this "
                  f"command: they are copied from the report it replaced.", ""]
                 if kept else [])
    report = "\n".join([
        "# Reliability suite", "", "```bash", command, "```", "", machine_notes(), "",
        table(results, kept), "", *kept_note, bounds_legend(), ""])
    print("\n" + report)
    if args.details:
        for c in results:
            if c.details:
                print("\n".join(c.details))
    if out:
        with open(out, "w") as fh:
            fh.write(report)
            details = [line for c in results for line in c.details]
            details += [line for n, block in previous_blocks.items() if n not in ran
                        for line in block]
            if details:
                fh.write("\n## Per-second latency (recovery analysis)\n\n" + "\n".join(details))
        print(f"wrote {out}")
    ok = bool(results) and all(c.passed for c in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
