"""``scripts/gpu_bench.py``'s settings and plan: the models, loads and time budget, and
how long each segment may run in the time left.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from benchmarks import bench_setup as BENCH
from benchmarks import segment_stats as B
from simulation import workload as W


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


SHIPPED = os.path.join(REPO_ROOT, "model_repository")
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "gpu")
# The shipped models every bench model is copied from (executor and output width edited).
EXPLICIT_SRC, NATIVE_SRC = "minilm_explicit", "minilm_native"
LOADS = (0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.5, 2.0)
NATIVE_DELAYS_US = (0, 1000, 5000)
NATIVE_MAX_BATCH = 64
SEED = BENCH.SEED


@dataclass(frozen=True)
class ModelFamily:
    """One model the bench runs (``--model``): its executor, its output width and what its
    outputs mean. Its Triton models are ``<key>_explicit``, ``<key>_explicit_peak`` and
    ``<key>_native_d<delay>``."""

    key: str
    title: str  # the report's heading
    executor: str  # the ``executor`` model-config parameter
    output_dim: int  # floats of EMBEDDING a request
    outputs: str  # what the answers mean, for the report

    @property
    def explicit(self) -> str:
        return f"{self.key}_explicit"

    @property
    def explicit_peak(self) -> str:
        return f"{self.key}_explicit_peak"

    def native(self, delay_us: int) -> str:
        return f"{self.key}_native_d{int(delay_us)}"

    def params(self, bert_layers: int, shape_bucket_tokens: int = 0) -> dict[str, str]:
        """The model-config parameters that make a model of this family run its executor."""
        return {"executor": self.executor,
                **({"bert_layers": str(bert_layers)}
                   if self.executor == "bert_large_random" else {}),
                **({"shape_bucket_tokens": str(shape_bucket_tokens)}
                   if shape_bucket_tokens else {})}

    def encoder(self, device: str, bert_layers: int, shape_bucket_tokens: int = 0):
        """The executor in this process, for the bench's own cost table: built from
        ``params`` as a served model builds it (``model_loading.make_executor``)."""
        from triton_backend.model_loading import make_executor
        from triton_backend.model_settings import ModelSettings
        from triton_backend.placement import placement

        settings = ModelSettings.from_parameters(
            self.explicit, {**self.params(bert_layers, shape_bucket_tokens), "device": device})
        where = placement("CPU", "0", True, settings.device)
        executor, _ = make_executor({"model_name": self.explicit}, settings, where, warn=log)
        return executor


FAMILIES = {
    "minilm": ModelFamily(
        "minilm", "MiniLM", "minilm", 384,
        "all-MiniLM-L6-v2 (on a host without its weights, gpu/remote.sh gives it random "
        "ones: the timings are the architecture's)"),
    "bert_large": ModelFamily(
        "bert_large", "BERT-large (random weights, fp16)", "bert_large_random", 1024,
        "the BERT-large architecture with RANDOM weights (fp16 on a GPU, nothing "
        "downloaded): the outputs are meaningless, the costs are real"),
}


def log(msg: str) -> None:
    print(f"[gpu_bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)

# -- settings ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """Everything a mode fixes; ``--cpu-smoke`` shrinks each."""

    smoke: bool
    grid: tuple[int, int, int]  # calibration_grid(max batch, max length, max batch tokens)
    calibration_budget_s: float
    warmups: int
    repeats: int
    lengths: W.LogNormalLengths
    sla_classes_ms: tuple[float, ...]
    concurrency: int
    peak_measurement_ms: int
    loads: tuple[float, ...]
    warmup_s: float
    min_segment_s: float
    max_segment_s: float
    segment_overhead_s: float  # queue-idle check, stub lookup, client set-up, drain
    idle_timeout_s: float  # longest wait for every model's backlog to clear before a segment
    server_start_timeout_s: float
    bert_layers: int = 24  # bert_large's encoder layers (the smoke run's CPU takes fewer)


GPU = Settings(smoke=False, grid=(64, 512, 64 * 512), calibration_budget_s=20.0, warmups=3,
               repeats=15, lengths=BENCH.LENGTHS, sla_classes_ms=BENCH.SLA_CLASSES_MS,
               concurrency=64, peak_measurement_ms=2000, loads=LOADS, warmup_s=1.0,
               min_segment_s=2.0, max_segment_s=20.0, segment_overhead_s=1.0, idle_timeout_s=30.0,
               server_start_timeout_s=240.0)
SMOKE = Settings(smoke=True, grid=(8, 64, 8 * 64), calibration_budget_s=5.0, warmups=1,
                 repeats=3, lengths=W.LogNormalLengths(median=24.0, sigma=0.5, lo=16, hi=64),
                 sla_classes_ms=tuple(5.0 * c for c in BENCH.SLA_CLASSES_MS), concurrency=8,
                 peak_measurement_ms=1500, loads=(0.5, 1.0, 2.0), warmup_s=0.5,
                 min_segment_s=1.5, max_segment_s=3.0, segment_overhead_s=1.5, idle_timeout_s=20.0,
                 server_start_timeout_s=240.0, bert_layers=1)


@dataclass
class Clock:
    """The run's hard time limit: ``left()`` seconds remain."""

    limit_s: float
    start: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.limit_s - self.elapsed()

# -- the plan: segment length from the time left -------------------------------------------

def segment_cost_factor(load: float, native: bool) -> float:
    """How many schedule-lengths a segment holds the run: a native model past its peak
    keeps a backlog of (load - 1) x the schedule to work off before the next segment."""
    return 1.0 + (max(0.0, load - 1.0) if native else 0.0)


def plan_segment_s(time_left_s: float, loads, n_native: int, warmup_s: float,
                   overhead_s: float, min_s: float, max_s: float) -> float:
    """The measured length of each open-loop segment so that every load x (explicit +
    ``n_native`` native settings) fits ``time_left_s``; clamped to [min_s, max_s] (at the
    minimum the run may be cut short: segments that no longer fit are skipped)."""
    factors = [segment_cost_factor(load, native)
               for load in loads for native in [False] + [True] * n_native]
    fixed = len(factors) * overhead_s + warmup_s * sum(factors)
    raw = (time_left_s - fixed) / sum(factors) if factors else max_s
    return float(min(max_s, max(min_s, raw)))


def best_native(cells: dict[str, B.SegmentStats]) -> tuple[str, B.SegmentStats] | None:
    """The native setting with the best goodput (``B.best_by``), ties to the first."""
    return B.best_by(((k, v) for k, v in cells.items() if k.startswith("native")), "goodput")


def server_errors(stats: B.SegmentStats) -> int:
    """Requests the server answered with an error of any code (UNAVAILABLE refusals among
    them: ``bench_report.refusals`` counts those alone); the client's own timeouts, lost
    requests and failed sends are not server errors."""
    from operator_tools.records import CLIENT_TIMEOUT, LOST, SEND_FAILED
    return sum(n for code, n in stats.errors.items()
               if code not in (CLIENT_TIMEOUT, LOST, SEND_FAILED))


MODEL_LINE = re.compile(r'\w+\.py:\d+\] "((?:%s)[^"]*)"' % "|".join(FAMILIES))
EXPLICIT_LINE = re.compile(r"^(?P<model>\S+): explicit batching on profile '(?P<profile>[^']*)' "
                            r"\(chosen by (?P<why>[^;]*);.*placement: (?P<placement>.*)$")
