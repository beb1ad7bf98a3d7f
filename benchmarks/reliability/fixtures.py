"""The reliability suite's fixtures: its constants and bounds, the repository it
prepares, the resource monitor, the arrivals, and the result types every case fills.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from benchmarks.bench_setup import emulated_capacity_rps, profile
from benchmarks.load_result import LoadResult
from benchmarks.procinfo import cpu_s, rss_mb, threads
from benchmarks.repository import copy_model, edit_model
from operator_tools.measure import PeriodicSampler, queue_gauges
from operator_tools.report import fmt_num
from server_ops.intake_config import release_config
from server_ops.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer
from sidecar.triton_metrics import MetricsParseError
from simulation import workload as W

if TYPE_CHECKING:  # the drip case's server, kept on the context for the report
    from .drip import DripServer


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
DRIP_HEALTH_BOUND_S = 2.0  # from the sidecar's first scrape that meets the drip
# The drip's length: the sidecar's scrape cadence (5 s as shipped), the bound, and room.
DRIP_FOR_S = 9.0
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
    max_queued_requests: int  # the plugin's queue bound (scheduler.max_queued_requests)
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


# The burst case (issue "The shipped default at native's speed", item 5): a phase at
# BURST_BASE x capacity, BURST_S at BURST_PEAK x, then BURST_BASE x again; from
# BURST_SETTLE_S after the burst, P50 and attainment must be within BURST_TOLERANCE of the
# first phase (a live model must not fall into a slower state after a burst).
BURST_BASE, BURST_PEAK = 1.4, 3.0


def fmt(x: float | None, digits: int = 0) -> str:
    """The suite's numbers: ``operator_tools.report.fmt_num`` with ``digits`` decimals, "n/a"
    where there is none."""
    return fmt_num(x, f".{digits}f", "n/a")
