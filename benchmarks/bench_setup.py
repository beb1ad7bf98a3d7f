"""``make bench``'s setup: its constants, profiles and capacities, arrivals, and the
perf_analyzer input data of the mix.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks import segment_stats as B
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.profile_parse import with_emulation
from simulation import workload as W
from simulation.simulator import capacity_rps
from triton_backend.intake import DEFAULT_INTAKE


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


WAKE_COUNT_SETTLE_S = 0.5

EXPLICIT, NATIVE = "emulated_explicit", "emulated_native"
MINI_EXPLICIT, MINI_NATIVE = "minilm_explicit", "minilm_native"
PROFILE_DIR = os.path.join(REPO_ROOT, "model_repository", EXPLICIT, "profiles")
OUT_DIR = os.path.join(REPO_ROOT, "results", "bench")
SEED = 20240601

TARGET_CAPACITY_RPS = 200.0
SLA_CLASSES_MS = (50.0, 100.0, 200.0)  # at device speed; x time scale on the emulated device
LENGTHS = W.LogNormalLengths(median=64.0, sigma=0.8, lo=16, hi=512)
CAPACITY_SAMPLE = 200_000
PROFILES = ("t4", "a100")
COST_MODES = ("padded", "ragged")
LADDER_LOADS = (0.2, 0.3, 0.5)  # Poisson only: the knee ladder's extra rungs
GRID_LOADS = (0.4, 0.6, 0.7, 0.8, 0.9)
OVERLOAD = 2.0
SWEEP_LOAD = 0.7
NATIVE_DELAYS_US = (0, 500, 1000, 2000, 5000, 10000)
NATIVE_PREFERRED = ((), (8, 16, 32))
BURST_HIGH, BURST_LOW = 3.0, 0.5  # x the mean rate (mean dwell 0.25 s high, 1 s low)
CLIENT_TIMEOUT_SLAS = 1.1  # a client gives up after 1.1x the largest SLA class

# ts1 block
LOWLOAD = 0.2
LOWLOAD_NATIVE_DELAYS_US = (0, 500, 2000)
OVERHEAD_SEQ_LEN = 64
OVERHEAD_RATES = (400, 600, 800, 1000, 1200, 1500)
OVERHEAD_NATIVE = (B.NativeSetting(0), B.NativeSetting(2000))
OVERHEAD_P99_BOUND_MS = 50.0
CPU_TARGET_US = 150.0

# minilm block
MINI_SLA_SCALE = 5.0  # SLA classes 250/500/1000 ms: one CPU core runs a 1x256 batch in ~80 ms
MINI_LENGTHS = W.LogNormalLengths(median=48.0, sigma=0.8, lo=16, hi=256)
MINI_RATES = (4, 6, 8, 10, 12, 14, 17, 20, 24, 28, 34)

# closed-loop peaks (perf_analyzer, gRPC): concurrency 64, measurement windows of
# PEAK_MEASURE_MS (longer on a slowed device: x time scale / PEAK_WINDOW_TS); a 1000 %
# stability band ends the run after its first 3 windows, whose average it reports (a peak
# is a throughput, not a latency study, and at time scale 57 a batch takes 0.2-1.5 s, so
# perf_analyzer's default 10 % band does not settle: "Failed to obtain stable measurement")
PEAK_CONCURRENCY = 64
PEAK_MEASURE_MS, QUICK_PEAK_MEASURE_MS = 2000, 1000
PEAK_WINDOW_TS = 20.0
PEAK_EXTRA = ("--stability-percentage", "1000", "--max-trials", "4")
PEAK_DATA_ENTRIES = 256

# h200 block: the h200_minilm EMULATION, loads as fractions of native's
# closed-loop peak
H200 = "h200_minilm"
H200_MODE = "padded"
H200_NATIVE_MAX_BATCH = 64  # the profile's max_batch_size
# Every block measures the plugin as shipped: its config as the server first served it,
# with the shipped default intake (``triton_backend.intake.DEFAULT_INTAKE``). A variant
# would go beside it under its own name (scripts/intake_check.py and host_ledger.py
# measure the other intakes).
EXPLICIT_INTAKE = DEFAULT_INTAKE
# The h200 block's third run: the GPU-like flat profile - t4 re-costed
# as a fixed 3.9 ms + 0.0006 ms per padded token, batches of up to 64 - at time scale 1.
FLAT_PROFILE = "t4"
FLAT_PARAMS = {"cost_model.fixed_ms": "3.9", "cost_model.per_sequence_ms": "0",
               "cost_model.per_token_ms": "0.0006", "cost_model.per_token_squared_ms": "0",
               "scheduler.max_batch_size": "64", "scheduler.max_batch_tokens": "32768",
               "control.refusal_late_share": "0.2"}
FLAT_LABEL = "flat GPU-like t4 (fixed 3.9 ms, 0.0006 ms/token) EMULATED"
H200_LOADS = (0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.3, 2.0)
H200_QUICK_LOADS = (0.5, 1.2, 2.0)
H200_SWEEP_LOAD = 0.7  # of native's closed-loop peak at delay 0
HOST_BOUND_TIME_SCALE = 0.01


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@functools.lru_cache(maxsize=None)
def profile(name: str, cost_mode: str | None = None, time_scale: float | None = None):
    p = load_profile(profile_path(PROFILE_DIR, name))
    changes = {k: v for k, v in (("cost_mode", cost_mode), ("time_scale", time_scale))
               if v is not None}
    return with_emulation(p, changes, "bench") if changes else p


def emulated_capacity_rps(name: str, lengths: Sequence[int], time_scale: float = 1.0,
                          cost_mode: str = "padded") -> float:
    """The EMULATED device of profile ``name`` serving ``lengths`` in full batches of
    similar lengths, slowed ``time_scale`` times (req/s): the capacity every live script
    offers its load against."""
    p = profile(name)
    return capacity_rps(p.cost_model, cost_mode, time_scale, lengths,
                        p.scheduler.max_batch_size, p.scheduler.max_batch_tokens)


@functools.lru_cache(maxsize=None)
def capacity_at_device_speed(name: str, cost_mode: str) -> float:
    return emulated_capacity_rps(name, W.sample_lengths(CAPACITY_SAMPLE, SEED, LENGTHS),
                                 cost_mode=cost_mode)


def bench_time_scale(name: str) -> float:
    """A round time scale that puts the padded capacity near TARGET_CAPACITY_RPS."""
    return float(max(1, round(capacity_at_device_speed(name, "padded") / TARGET_CAPACITY_RPS)))


def arrivals_for(kind: str, rate: float, duration_s: float, seed: int, slas, lengths=LENGTHS):
    if kind == "poisson":
        process = W.Poisson(rate)
    elif kind == "bursty":
        process = W.Bursty(low_rps=BURST_LOW * rate, high_rps=BURST_HIGH * rate)
    else:
        raise ValueError(kind)
    return W.generate(process, duration_s, seed, lengths, W.SlaMix(tuple(slas)))


def emulated_params(name: str, cost_mode: str, time_scale: float) -> dict[str, str]:
    return {"hardware_profile": name, "cost_mode": cost_mode, "time_scale": f"{time_scale:g}",
            "profile_dir": "emulated_explicit/profiles", "executor": "emulated"}


@dataclass(frozen=True)
class Timing:
    warmup_s: float
    measure_s: float
    fluctuation_s: float  # the 70 % cells and the sweep: long enough for per-second busy


TIMING = Timing(warmup_s=1.0, measure_s=3.0, fluctuation_s=4.0)
QUICK_TIMING = Timing(warmup_s=0.5, measure_s=1.5, fluctuation_s=2.0)
# h200 time-scaled: a batch takes 0.2-1.5 s at time scale 57 and native's closed-loop peak
# is ~55 req/s there, so a row at 0.3x would see only ~50 requests in 3 s
H200_SCALED_TIMING = Timing(warmup_s=2.0, measure_s=6.0, fluctuation_s=6.0)


def write_input_data(path: str, entries: list[tuple[int, float | None]]) -> str:
    """perf_analyzer ``--input-data`` JSON: one entry per (length, SLA ms or None), the ids
    as the load generator makes them (101 ... 102, ids in 1000..29999)."""
    import numpy as np  # noqa: PLC0415
    rng = np.random.default_rng(SEED)
    data = []
    for seq_len, sla_ms in entries:
        length = max(2, int(seq_len))
        ids = [101, *(int(x) for x in rng.integers(1000, 30000, size=length - 2)), 102]
        entry = {"INPUT_IDS": {"content": ids, "shape": [length]}}
        if sla_ms is not None:
            entry["SLA_MS"] = {"content": [float(sla_ms)], "shape": [1]}
        data.append(entry)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"data": data}, fh)
    return path


def mix_entries(slas, n: int = PEAK_DATA_ENTRIES) -> list[tuple[int, float | None]]:
    """The open-loop rows' traffic for a closed loop: the long-tailed length mix, the SLA
    classes in turn (equal weights, as SlaMix draws them); ``slas`` None: no SLA input."""
    lengths = W.sample_lengths(n, SEED + 7, LENGTHS)
    return [(L, None if slas is None else slas[i % len(slas)]) for i, L in enumerate(lengths)]
