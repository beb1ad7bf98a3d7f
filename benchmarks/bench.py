"""``make bench``: explicit control vs Triton's own dynamic batcher, best-tuned, same run.

Starts one tritonserver (``--model-control-mode=explicit``, free ports) on the shipped
model repository and drives it with the open-loop gRPC load generator
(``benchmarks/loadgen.py``: it keeps sending whatever the server does, records every
request's outcome and its own send lag, and counts shed requests instead of stopping, which
perf_analyzer cannot). Each model is reconfigured between blocks through Triton's
model-repository API (``load_model`` with a config): hardware profile, time scale, cost
mode, and for the native model its ``dynamic_batching`` section.

Blocks, in order (``--quick`` shortens every segment and thins the grid, for a smoke run):

ts1          t4, padded, time scale 1 (device speed): low load (20 % of capacity, P50) for
             explicit and native at delays 0 / 500 / 2000 us; overhead: same-length (64),
             no-SLA traffic at rising fixed rates, the highest rate each model sustains,
             the explicit path's CPU per request, and the closed-loop peak (perf_analyzer,
             concurrency 64, same length, no SLA) of explicit and of both natives.
emulated     for t4 and a100 x padded and ragged: the native sweep at 70 % load (every
             max_queue_delay x preferred_batch_size option), then the grid with the
             goodput-best native setting: Poisson at 10/20/30 % (the knee ladder), Poisson
             and bursty at 40/60/70/80/90 %, Poisson at 200 % (overload). Explicit and
             native alternate (order flipped per cell) on the very same arrivals.
minilm       the real all-MiniLM-L6-v2 on this CPU (lengths 16-256): a rate ladder for
             minilm_explicit and minilm_native, the knee (throughput at >= 99 % attainment).
decision     ``scripts/bench_decision.py``: one scheduling decision at queue depth 1000.
h200         the ``h200_minilm`` profile: an EMULATION of MiniLM costs MEASURED on an NVIDIA
             H200 (a cost table: flat ~3.9 ms up to ~4k tokens, then linear), native
             max_batch_size 64 as the profile. Run twice: time-scaled (``bench_time_scale``:
             the device bounds the rate near 200 req/s) and at time scale 1 (the host path
             bounds it; SLAs at device speed). Each run: a closed-loop peak (perf_analyzer,
             concurrency 64) of native at delay 0 sets the sweep's rate (70 % of it); the
             native sweep (every delay x preferred size) picks the goodput-best native; the
             closed-loop peaks of explicit and of that native; Poisson at 0.3-2.0x NATIVE's
             closed-loop peak, explicit and native alternating on the same arrivals (goodput,
             % in SLA, P50, P99, refusals, send lag, stub CPU per request). Then a host-bound
             run (time scale 0.01: the device nearly free): closed-loop peaks of both. Issue
             11's targets are evaluated against these figures, and the t4/a100 rows against
             the last committed ``results/bench/bench.json`` (``git show HEAD:...``).
             Time-scaled rows: 2 s warm-up + 6 s measured (a batch takes 0.2-1.5 s there);
             time-scale-1 rows: 1 + 3 s. About 10 min in full, 3 in ``--quick``.

One block alone, e.g. ``python scripts/bench.py --quick --blocks h200 --out-dir /tmp/b``
(``--out-dir`` keeps a trial run out of results/bench/).

The EMULATED device sleeps for each batch's modelled cost times the time scale. A time
scale puts each profile's capacity near ``TARGET_CAPACITY_RPS`` (what 2 cores can drive);
SLA classes are multiplied by the same factor. Capacity (100 % load) is
``scheduler_core.simulator.capacity_rps``: the length mix sorted and cut into full batches
(no padding waste), requests / device time. Every emulated segment is also simulated
(``scheduler_core.simulator``) on the same arrivals; the report puts the prediction beside
the measurement.

Writes results/bench/report.md, bench.json and plots. Exit status 0 when the run completed
(missed targets are reported, not failed); 1 when a segment lost a request.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from benchmarks import benchmark as B
from operator_tools.benchmark_mode import POLICY_KEY, SERVE_LATE
from operator_tools.live import ModelControl, with_parameters
from operator_tools.measure import (PeriodicSampler, Sample, busy_series,
                                    inside, model_sampler, padding_waste, queue_gauges)
from benchmarks.loadgen import LoadGenerator, fixed_rate
from operator_tools.perf_analyzer import run_request_rate
from benchmarks.procinfo import cpu_s, find_stub
from scheduler_core import baselines
from scheduler_core import workload as W
from scheduler_core.profile import with_emulation
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.scheduler import Scheduler
from scheduler_core.simulator import capacity_rps, simulate
from sidecar.triton_metrics import MetricsParseError, fetch_url, model_sample_sum
from triton_backend.intake import DEFAULT_INTAKE
from triton_backend.intake_config import gather_config_json
from triton_backend.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer
from triton_backend.metric_catalog import WAKE_REQUESTS_METRIC

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


# -- the server side ----------------------------------------------------------------------

class BatchMonitor:
    """Every second: Triton's metrics and each watched model's batch statistics, stamped
    with time.monotonic_ns (the load generator's clock). Each ``watch`` starts a fresh
    sampler, so no sample of one set of models lands among another's; a missed sample
    only thins the series."""

    def __init__(self, server: TritonServer, period_s: float = 1.0):
        self.server, self.period_s = server, period_s
        self._sampler: PeriodicSampler | None = None

    def watch(self, models: list[str]) -> None:
        self.stop()
        if models:
            self._sampler = model_sampler(self.server.metrics_url,
                                          f"http://{self.server.http_url}", models,
                                          self.period_s, clock_ns=time.monotonic_ns,
                                          name="bench-monitor").start()

    def snapshot(self) -> list[Sample]:
        return list(self._sampler.samples) if self._sampler else []

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop(timeout_s=5)
            self._sampler = None


class Bench:
    def __init__(self, server: TritonServer, models: Sequence[str] = (),
                 explicit_intake: str = EXPLICIT_INTAKE):
        """``models``: what ``server`` loads at its start (its --load-model arguments);
        ``explicit_intake``: the plugin's intake in every block (a variant other than the
        shipped default is named in the report's first lines)."""
        self.server = server
        self.explicit_intake = explicit_intake
        self.monitor = BatchMonitor(server)
        self.controls: dict[str, ModelControl] = {}
        self.base_configs: dict[str, dict] = {}
        self.started_models = tuple(models)
        # What is loaded now, and with which config (None: the repository's): what a
        # restart after a server crash brings back.
        self.live: dict[str, dict | None] = dict.fromkeys(models)
        self.lost = 0
        self.segments = 0
        self.server_crashes: list[dict] = []

    # models
    def control(self, model: str) -> ModelControl:
        if model not in self.controls:
            self.controls[model] = ModelControl(self.server.http_url, model, settle_s=0.3)
        return self.controls[model]

    def configure(self, model: str, params: dict[str, str],
                  native: B.NativeSetting | None = None,
                  max_batch_size: int | None = None) -> None:
        """Reload ``model`` with its config as the server first served it (the repository's
        config.pbtxt on disk when the run started, never a text of ours) plus ``params``,
        and for native a ``dynamic_batching`` section and optionally a max_batch_size."""
        ctl = self.control(model)
        if model not in self.base_configs:
            self.base_configs[model] = ctl.config()
        if model == EXPLICIT and self.explicit_intake != EXPLICIT_INTAKE:
            params = {**params, "intake": self.explicit_intake}
        config = with_parameters(self.base_configs[model], params)
        if params.get("intake") == "gather":
            config = gather_config_json(config)
        if native is not None:
            config["dynamic_batching"] = native.dynamic_batching()
        if max_batch_size is not None:
            config["max_batch_size"] = int(max_batch_size)
        ctl.load(config)
        self.live[model] = config

    def load(self, model: str) -> None:
        """Load ``model`` with the config in the repository."""
        self.server.load_model(model)
        self.live[model] = None

    def unload(self, model: str) -> None:
        self.server.unload_model(model)
        self.live.pop(model, None)

    def server_died(self) -> bool:
        return self.server.process is not None and self.server.process.poll() is not None

    def restart(self) -> None:
        """Start the server again after it died, with every model as it was: tritonserver
        2.51's gRPC front end can crash when clients cancel at a high rate (docs/platform.md,
        results/tritonserver_sigsegv.md), which a bench's overload rungs do."""
        self.monitor.stop()
        self.server.stop()
        self.server.start()
        self.server.wait_ready()
        self.controls.clear()  # their URLs may be stale after a start on new ports
        for model in self.started_models:
            if model not in self.live:
                self.server.unload_model(model)
        for model, config in self.live.items():
            if config is None:
                self.server.load_model(model)
            else:
                self.control(model).load(config)

    def _queue_idle(self, model: str, timeout_s: float = 15.0) -> None:
        """Wait until the model holds no request (explicit: its queue-depth gauge; native:
        Triton's pending count), so one segment's backlog never lands in the next."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                gauges = queue_gauges(self.server.metrics_url, timeout_s=2.0)
            except (OSError, MetricsParseError):
                return
            if not any(value > 0 for (_, m), value in gauges.items() if m == model):
                return
            time.sleep(0.2)

    # one segment
    def segment(self, role: str, model: str, arrivals, duration_s: float, include_sla: bool,
                client_timeout_s: float, warmup_s: float = 0.0,
                busy: bool = False) -> B.SegmentStats:
        """Send ``arrivals`` (a warm-up of ``warmup_s`` seconds, then ``duration_s`` measured)
        and measure the window after the warm-up; ``busy``: also the per-second busy
        fraction (one more monitor sample after the run). A segment during which the server
        died is recorded in ``server_crashes``, and run once more on a restarted server."""
        stats, result = self._segment(role, model, arrivals, duration_s, include_sla,
                                      client_timeout_s, warmup_s, busy)
        if self.server_died():
            code = self.server.process.returncode
            self.server_crashes.append({
                "model": model, "role": role, "requests": len(result.records),
                "rate_rps": len(result.records) / max(1e-9, warmup_s + duration_s),
                "exit_code": code, "at": time.strftime("%H:%M:%S")})
            log(f"tritonserver died (exit code {code}) during a {role} segment of {model}; "
                "restarting it and running the segment again")
            self.restart()
            stats, result = self._segment(role, model, arrivals, duration_s, include_sla,
                                          client_timeout_s, warmup_s, busy)
            if self.server_died():
                raise RuntimeError(f"tritonserver died twice in one {role} segment of {model}")
        self.lost += sum(1 for r in result.records if r.outcome == "LOST")
        self.segments += 1
        return stats

    def _segment(self, role: str, model: str, arrivals, duration_s: float, include_sla: bool,
                 client_timeout_s: float, warmup_s: float, busy: bool):
        self._queue_idle(model)
        stub = find_stub(self.server.process.pid, model)
        server_pid = self.server.process.pid
        if busy:
            self.monitor.watch([model])
        box: list[float] = []
        cpu0 = (cpu_s(stub), cpu_s(server_pid))
        gen = LoadGenerator(self.server.grpc_url, model, clients=4, include_sla=include_sla,
                            client_timeout_s=client_timeout_s, seed=SEED)
        result = gen.run(arrivals, max_duration_s=warmup_s + duration_s,
                         drain_timeout_s=client_timeout_s + 5.0,
                         on_start=lambda t0: box.append(t0))
        cpu1 = (cpu_s(stub), cpu_s(server_pid))
        answered = max(1, sum(1 for r in result.records if r.response_s is not None))
        per_req = [None if None in (a, b) else (b - a) * 1e6 / answered
                   for a, b in zip(cpu0, cpu1)]
        series, waste = [], None
        if busy:
            time.sleep(1.05)  # one more sample closes the last second
            samples = self.monitor.snapshot()
            self.monitor.watch([])
            t0_ns = int((box[0] + warmup_s) * 1e9) if box else 0
            spans = [(t0_ns, t0_ns + int(duration_s * 1e9) + 1)]
            gauge = role == "explicit"
            series = inside(busy_series(samples, model, gauge), spans)
            waste = padding_waste(samples, model, spans) if gauge else None
        stats = B.measured_stats(role, result.window(warmup_s, warmup_s + duration_s),
                                 series, waste, per_req[0], per_req[1])
        return stats, result

    def success_count(self, model: str) -> int | None:
        """Requests ``model`` answered successfully: Triton's count (statistics API) less
        the plugin's own wake requests (intake hold; Triton counts them too). The plugin
        publishes its counters every control period (0.1 s): wait WAKE_COUNT_SETTLE_S."""
        import tritonclient.http as httpclient  # noqa: PLC0415
        time.sleep(WAKE_COUNT_SETTLE_S)
        client = httpclient.InferenceServerClient(self.server.http_url, network_timeout=30.0)
        try:
            stats = client.get_inference_statistics(model)
            wakes = model_sample_sum(fetch_url(self.server.metrics_url, 30.0),
                                     WAKE_REQUESTS_METRIC, model)
            return sum(int(m["inference_stats"]["success"]["count"])
                       for m in stats.get("model_stats", [])) - int(wakes)
        except Exception:  # noqa: BLE001 - a missing figure only blanks one cell
            return None
        finally:
            client.close()

    def closed_loop_peak(self, model: str, input_data: str, measure_ms: int) -> dict:
        """perf_analyzer closed loop (gRPC, ``PEAK_CONCURRENCY`` in flight) on ``input_data``:
        throughput, P50/P99, and the stub's CPU per request answered during the whole run
        (warm-up included; Triton's success count). ``error`` when perf_analyzer failed."""
        self._queue_idle(model)
        stub = find_stub(self.server.process.pid, model)
        n0, c0 = self.success_count(model), cpu_s(stub)
        try:
            r = run_request_rate(self.server.grpc_url, model, input_data, 0, measure_ms,
                                 protocol="grpc", extra=PEAK_EXTRA, timeout_s=180,
                                 concurrency=PEAK_CONCURRENCY)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            return {"error": " / ".join(lines[-2:])[:300] or repr(exc)}
        n1, c1 = self.success_count(model), cpu_s(stub)
        answered = None if None in (n0, n1) else n1 - n0
        cpu_us = (None if None in (c0, c1) or not answered else (c1 - c0) * 1e6 / answered)
        self.segments += 1
        return {"throughput_rps": r.throughput, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                "requests": answered, "stub_cpu_us_per_request": cpu_us,
                "concurrency": PEAK_CONCURRENCY, "error": None}


# -- simulation ---------------------------------------------------------------------------

def sim_segment(role: str, prof, arrivals, duration_s: float, warmup_s: float,
                native: B.NativeSetting | None = None) -> B.SegmentStats:
    """The simulator on the same arrivals, measured over the same window."""
    s = prof.scheduler
    if role == "explicit":
        policy = Scheduler.from_profile(prof, prof.emulation.time_scale)
    else:
        policy = baselines.TritonDynamicBatcher(s.max_batch_size, native.max_queue_delay_us,
                                                native.preferred_batch_sizes)
    result = simulate(policy, arrivals, prof.cost_model, prof.emulation.cost_mode,
                      prof.emulation.time_scale, name=role)
    return B.simulated_stats(role, result, duration_s, warmup_s)


# -- blocks -------------------------------------------------------------------------------

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


def run_emulated_block(bench: Bench, name: str, cost_mode: str, quick: bool) -> dict:
    ts = bench_time_scale(name)
    prof = profile(name, cost_mode, ts)
    cap = capacity_at_device_speed(name, cost_mode) / ts
    slas = tuple(c * ts for c in SLA_CLASSES_MS)
    timeout_s = CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0
    tm = QUICK_TIMING if quick else TIMING
    warm = tm.warmup_s
    params = emulated_params(name, cost_mode, ts)
    block = {"profile": name, "cost_mode": cost_mode, "time_scale": ts, "capacity_rps": cap,
             "capacity_device_rps": cap * ts, "sla_classes_ms": slas, "sweep": [], "cells": [],
             "warmup_s": warm, "measure_s": tm.measure_s, "fluctuation_s": tm.fluctuation_s}
    log(f"block {name}/{cost_mode}: time scale {ts:g}, capacity {cap:.1f} req/s")
    bench.configure(EXPLICIT, params)

    # 1. the native sweep at 70 %
    settings = B.native_sweep(NATIVE_DELAYS_US, NATIVE_PREFERRED)
    if quick:
        settings = settings[:2]
    dur = tm.fluctuation_s
    arrivals = arrivals_for("poisson", SWEEP_LOAD * cap, warm + dur, SEED + 70, slas)
    for setting in settings:
        bench.configure(NATIVE, params, setting)
        measured = bench.segment("native", NATIVE, arrivals, dur, False, timeout_s, warm,
                                 busy=True)
        sim = sim_segment("native", prof, arrivals, dur, warm, setting)
        block["sweep"].append({"setting": setting, "measured": measured, "sim": sim})
        log(f"  sweep {setting.label}: goodput {measured.goodput_rps:.1f} "
            f"attainment {measured.attainment:.1%} (sim {sim.goodput_rps:.1f})")
    chosen = B.best_by(((e["setting"], e["measured"]) for e in block["sweep"]), "goodput")
    best_native = chosen[0] if chosen else settings[0]
    block["native_setting"] = best_native
    bench.configure(NATIVE, params, best_native)
    log(f"  native for the grid: {best_native.label}")

    # 2. the grid, explicit and native alternating on the same arrivals
    cells = [(load, "poisson") for load in LADDER_LOADS]
    cells += [(load, kind) for load in GRID_LOADS for kind in ("poisson", "bursty")]
    cells += [(OVERLOAD, "poisson")]
    if quick:
        cells = [(0.2, "poisson"), (0.7, "poisson"), (0.7, "bursty"), (OVERLOAD, "poisson")]
    for i, (load, kind) in enumerate(cells):
        fluct = load == SWEEP_LOAD
        dur = tm.fluctuation_s if fluct else tm.measure_s
        seed = SEED + int(round(load * 100)) + (1000 if kind == "bursty" else 0)
        arrivals = arrivals_for(kind, load * cap, warm + dur, seed, slas)
        order = ("explicit", "native") if i % 2 == 0 else ("native", "explicit")
        measured = {role: bench.segment(role, EXPLICIT if role == "explicit" else NATIVE,
                                        arrivals, dur, role == "explicit", timeout_s, warm,
                                        busy=fluct)
                    for role in order}
        sims = {"explicit": sim_segment("explicit", prof, arrivals, dur, warm),
                "native": sim_segment("native", prof, arrivals, dur, warm, best_native)}
        sim_best = {}
        if not quick:  # the simulator's best native for this cell, over the whole sweep
            sweep_sims = [(s, sim_segment("native", prof, arrivals, dur, warm, s))
                          for s in settings]
            found = B.best_by(sweep_sims, "goodput")
            if found:
                sim_best["goodput"] = {"setting": found[0], "sim": found[1]}
        block["cells"].append({"load": load, "arrival": kind, "rate_rps": load * cap,
                               "measured": measured, "sim": sims, "sim_best_native": sim_best})
        e, n = measured["explicit"], measured["native"]
        log(f"  {kind} {load:.0%}: explicit {e.goodput_rps:.1f} ({e.attainment:.1%}) "
            f"native {n.goodput_rps:.1f} ({n.attainment:.1%}) | sim "
            f"{sims['explicit'].goodput_rps:.1f} ({sims['explicit'].attainment:.1%}) / "
            f"{sims['native'].goodput_rps:.1f}; lag p99 {e.send_lag_p99_ms:.1f}/"
            f"{n.send_lag_p99_ms:.1f} ms")
    return block


def run_ts1_block(bench: Bench, quick: bool) -> dict:
    """t4, padded, time scale 1: low-load P50 and the overhead ramp."""
    name, mode = "t4", "padded"
    prof = profile(name, mode, 1.0)
    cap = capacity_at_device_speed(name, mode)
    params = emulated_params(name, mode, 1.0)
    timeout_s = 2.0
    tm = QUICK_TIMING if quick else TIMING
    warm = tm.warmup_s
    bench.configure(EXPLICIT, params)
    out = {"profile": name, "cost_mode": mode, "capacity_rps": cap, "lowload": {},
           "overhead": []}
    # low load
    dur = tm.fluctuation_s
    arrivals = arrivals_for("poisson", LOWLOAD * cap, warm + dur, SEED + 20, SLA_CLASSES_MS)
    ll = out["lowload"]
    ll["rate_rps"] = LOWLOAD * cap
    ll["explicit"] = bench.segment("explicit", EXPLICIT, arrivals, dur, True, timeout_s, warm)
    ll["explicit_sim"] = sim_segment("explicit", prof, arrivals, dur, warm)
    ll["native"] = []
    for delay in LOWLOAD_NATIVE_DELAYS_US:
        setting = B.NativeSetting(delay)
        bench.configure(NATIVE, params, setting)
        ll["native"].append({
            "setting": setting,
            "measured": bench.segment("native", NATIVE, arrivals, dur, False, timeout_s, warm),
            "sim": sim_segment("native", prof, arrivals, dur, warm, setting)})
    log(f"low load {LOWLOAD:.0%} ({ll['rate_rps']:.0f} req/s): explicit P50 "
        f"{ll['explicit'].p50_ms:.2f} ms; native "
        + ", ".join(f"{e['setting'].max_queue_delay_us} us {e['measured'].p50_ms:.2f} ms"
                    for e in ll["native"]))

    # overhead: same length, no SLA, fixed rates
    dur = tm.measure_s
    rates = OVERHEAD_RATES[:2] if quick else OVERHEAD_RATES
    alive = {"explicit": True, **{s.label: True for s in OVERHEAD_NATIVE}}
    for rate in rates:
        arrivals = fixed_rate(rate, warm + dur, OVERHEAD_SEQ_LEN)
        row = {"rate_rps": rate}
        if alive["explicit"]:
            stats = bench.segment("explicit", EXPLICIT, arrivals, dur, False, timeout_s, warm)
            row["explicit"] = stats
            alive["explicit"] = B.sustainable(stats, rate, OVERHEAD_P99_BOUND_MS)
        for setting in OVERHEAD_NATIVE:
            if not alive[setting.label]:
                continue
            bench.configure(NATIVE, params, setting)
            stats = bench.segment("native", NATIVE, arrivals, dur, False, timeout_s, warm)
            row[setting.label] = stats
            alive[setting.label] = B.sustainable(stats, rate, OVERHEAD_P99_BOUND_MS)
        out["overhead"].append(row)
        log(f"overhead {rate} req/s: " + ", ".join(
            f"{k}: p99 {v.p99_ms:.1f} ms ok {v.ok}/{v.sent} lag p99 {v.send_lag_p99_ms:.1f}"
            for k, v in row.items() if k != "rate_rps"))
        if not any(alive.values()):
            break

    # closed-loop peak on the same-length traffic: explicit and both natives
    peak_ms = peak_window_ms(quick, 1.0)
    with tempfile.TemporaryDirectory(prefix="bench-ts1-") as tmp:
        data = write_input_data(os.path.join(tmp, "same_length.json"),
                                [(OVERHEAD_SEQ_LEN, None)] * 16)
        closed = {"concurrency": PEAK_CONCURRENCY, "seq_len": OVERHEAD_SEQ_LEN,
                  "explicit": explicit_peak(bench, params, data, peak_ms),
                  "native": []}
        for setting in OVERHEAD_NATIVE:
            bench.configure(NATIVE, params, setting)
            closed["native"].append({"setting": setting,
                                     "peak": bench.closed_loop_peak(NATIVE, data, peak_ms)})
    out["closed_loop"] = closed
    log(f"closed loop (same length, concurrency {PEAK_CONCURRENCY}): explicit "
        f"{_peak_text(closed['explicit'])}; " + ", ".join(
            f"native {e['setting'].label} {_peak_text(e['peak'])}" for e in closed["native"]))
    return out


def peak_window_ms(quick: bool, time_scale: float) -> int:
    """perf_analyzer's measurement window for a closed-loop peak at ``time_scale``."""
    base = QUICK_PEAK_MEASURE_MS if quick else PEAK_MEASURE_MS
    return int(round(base * max(1.0, time_scale / PEAK_WINDOW_TS)))


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


def explicit_peak(bench: Bench, params: dict[str, str], input_data: str,
                  measure_ms: int, intake: str | None = None) -> dict:
    """The explicit model's closed-loop peak with ``control.infeasible_policy=serve_late``
    (perf_analyzer stops at the first refused request), with ``intake`` if given; its
    config restored after."""
    if intake:
        peak = explicit_peak(bench, {**params, "intake": intake}, input_data, measure_ms)
        bench.configure(EXPLICIT, params)
        return {**peak, "intake": intake}
    bench.configure(EXPLICIT, {**params, POLICY_KEY: SERVE_LATE})
    try:
        return bench.closed_loop_peak(EXPLICIT, input_data, measure_ms)
    finally:
        bench.configure(EXPLICIT, params)


def _peak_text(peak: dict) -> str:
    if peak.get("error"):
        return f"failed ({peak['error']})"
    return f"{peak['throughput_rps']:.0f} req/s (p50 {peak['p50_ms']:.1f} ms)"


def run_h200_run(bench: Bench, time_scale: float, quick: bool, tmp: str,
                 rows_timing: Timing, prof_name: str = H200, extra_params: dict | None = None,
                 label: str = "") -> dict:
    """One run of the h200 block at ``time_scale``: native sweep, closed-loop peaks, then
    the open-loop rows at fractions of native's closed-loop peak. ``prof_name`` and
    ``extra_params`` (profile overrides, to both models) give another profile's run,
    ``label`` its name in the report."""
    ts = float(time_scale)
    params = {**emulated_params(prof_name, H200_MODE, ts), **(extra_params or {})}
    params_e = params  # the run's intake: Bench.configure sets a variant's
    slas = tuple(c * ts for c in SLA_CLASSES_MS)
    timeout_s = CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0
    warm = rows_timing.warmup_s
    peak_ms = peak_window_ms(quick, ts)
    cap = (capacity_at_device_speed(H200, H200_MODE) / ts if prof_name == H200 and not extra_params
           else float("nan"))  # the simulator's capacity is the h200 profile's only
    tag = f"{prof_name}{'_flat' if extra_params else ''}_ts{ts:g}"
    data_e = write_input_data(os.path.join(tmp, f"h200_{tag}_sla.json"), mix_entries(slas))
    data_n = write_input_data(os.path.join(tmp, f"h200_{tag}.json"), mix_entries(None))
    run = {"profile": prof_name, "label": label or f"{prof_name} EMULATED",
           "intake": bench.explicit_intake, "cost_mode": H200_MODE, "time_scale": ts,
           "sla_classes_ms": slas,
           "capacity_rps": cap, "native_max_batch_size": H200_NATIVE_MAX_BATCH,
           "warmup_s": warm, "measure_s": rows_timing.measure_s,
           "sweep_s": rows_timing.fluctuation_s, "client_timeout_s": timeout_s,
           "peak_measure_ms": peak_ms, "sweep": [], "rows": []}
    log(f"block h200, {run['label']} at time scale {ts:g}: simulator capacity {cap:.1f} req/s, SLA classes "
        f"{'/'.join(f'{x:g}' for x in slas)} ms")
    bench.configure(EXPLICIT, params_e)

    # 1. native at delay 0: its closed-loop peak sets the sweep's rate
    settings = B.native_sweep(NATIVE_DELAYS_US, NATIVE_PREFERRED)
    if quick:
        settings = settings[:2]
    bench.configure(NATIVE, params, settings[0], H200_NATIVE_MAX_BATCH)
    pre = bench.closed_loop_peak(NATIVE, data_n, peak_ms)
    run["sweep_reference_peak"] = {"setting": settings[0], "peak": pre}
    ref = pre.get("throughput_rps") or cap
    run["sweep_rate_rps"] = H200_SWEEP_LOAD * ref
    log(f"  native {settings[0].label} closed loop: {_peak_text(pre)}; sweep at "
        f"{run['sweep_rate_rps']:.0f} req/s")

    # 2. the sweep
    dur = rows_timing.fluctuation_s
    arrivals = arrivals_for("poisson", run["sweep_rate_rps"], warm + dur, SEED + 70, slas)
    for setting in settings:
        bench.configure(NATIVE, params, setting, H200_NATIVE_MAX_BATCH)
        measured = bench.segment("native", NATIVE, arrivals, dur, False, timeout_s, warm)
        run["sweep"].append({"setting": setting, "measured": measured})
        log(f"  sweep {setting.label}: goodput {measured.goodput_rps:.1f} "
            f"attainment {measured.attainment:.1%}")
    chosen = B.best_by(((e["setting"], e["measured"]) for e in run["sweep"]), "goodput")
    best = chosen[0] if chosen else settings[0]
    run["native_setting"] = best

    # 3. closed-loop peaks: the best native, then explicit
    bench.configure(NATIVE, params, best, H200_NATIVE_MAX_BATCH)
    peaks = {"native": bench.closed_loop_peak(NATIVE, data_n, peak_ms),
             "explicit": explicit_peak(bench, params_e, data_e, peak_ms)}
    run["peaks"] = peaks
    native_peak = peaks["native"].get("throughput_rps")
    if native_peak:
        run["load_reference"] = "native's closed-loop peak"
    else:  # said in the report: the rows are then fractions of something else
        native_peak = ref
        run["load_reference"] = ("native's closed-loop peak FAILED; loads are fractions of "
                                 + ("native's peak at delay 0" if pre.get("throughput_rps")
                                    else "the simulator's capacity"))
    run["native_peak_rps"] = native_peak
    log(f"  native {best.label}; closed loop: native {_peak_text(peaks['native'])}, "
        f"explicit {_peak_text(peaks['explicit'])}")

    # 4. open loop at fractions of native's peak, alternating on the same arrivals
    dur = rows_timing.measure_s
    loads = H200_QUICK_LOADS if quick else H200_LOADS
    for i, load in enumerate(loads):
        rate = load * native_peak
        arrivals = arrivals_for("poisson", rate, warm + dur,
                                SEED + 5000 + int(round(load * 100)), slas)
        order = ("explicit", "native") if i % 2 == 0 else ("native", "explicit")
        measured = {role: bench.segment(role, EXPLICIT if role == "explicit" else NATIVE,
                                        arrivals, dur, role == "explicit", timeout_s, warm)
                    for role in order}
        run["rows"].append({"load": load, "rate_rps": rate, "measured": measured})
        e, n = measured["explicit"], measured["native"]
        log(f"  {load:.1f}x ({rate:.0f} req/s): explicit {e.met / dur:.1f} in SLA/s "
            f"({e.attainment:.1%}, P50 {e.p50_ms:.1f} ms, refused "
            f"{e.errors.get('UNAVAILABLE', 0)}) native {n.met / dur:.1f} ({n.attainment:.1%}, "
            f"P50 {n.p50_ms:.1f} ms); lag p99 {e.send_lag_p99_ms:.1f}/"
            f"{n.send_lag_p99_ms:.1f} ms")
    return run


def run_h200_block(bench: Bench, quick: bool) -> dict:
    """The h200 block: the h200_minilm EMULATION time-scaled and at time scale 1, then
    host-bound (time scale 0.01) closed-loop peaks."""
    out = {"profile": H200, "cost_mode": H200_MODE, "runs": [],
           "profile_description": profile(H200).description}
    with tempfile.TemporaryDirectory(prefix="bench-h200-") as tmp:
        for ts in (bench_time_scale(H200), 1.0):
            tm = QUICK_TIMING if quick else H200_SCALED_TIMING if ts > 1 else TIMING
            out["runs"].append(run_h200_run(bench, ts, quick, tmp, tm,
                                            label="h200_minilm EMULATED"))
        out["runs"].append(run_h200_run(bench, 1.0, quick, tmp,
                                        QUICK_TIMING if quick else TIMING, FLAT_PROFILE,
                                        FLAT_PARAMS, FLAT_LABEL))
        # host-bound: the device nearly free; the native tuned at time scale 1; SLAs at
        # device speed (x0.01 would make every request infeasible)
        ts = HOST_BOUND_TIME_SCALE
        params = emulated_params(H200, H200_MODE, ts)
        params_e = params  # the run's intake: Bench.configure sets a variant's
        setting = out["runs"][1]["native_setting"]  # h200_minilm at time scale 1
        peak_ms = peak_window_ms(quick, ts)
        data_e = write_input_data(os.path.join(tmp, "h200_host_sla.json"),
                                  mix_entries(SLA_CLASSES_MS))
        data_n = write_input_data(os.path.join(tmp, "h200_host.json"), mix_entries(None))
        bench.configure(NATIVE, params, setting, H200_NATIVE_MAX_BATCH)
        host = {"time_scale": ts, "native_setting": setting, "sla_classes_ms": SLA_CLASSES_MS,
                "peak_measure_ms": peak_ms,
                "peaks": {"native": bench.closed_loop_peak(NATIVE, data_n, peak_ms),
                          "explicit": explicit_peak(bench, params_e, data_e, peak_ms)}}
        out["host_bound"] = host
        log(f"host-bound (time scale {ts:g}) closed loop: native "
            f"{_peak_text(host['peaks']['native'])}, explicit "
            f"{_peak_text(host['peaks']['explicit'])}")
    return out


def run_minilm_block(bench: Bench, quick: bool) -> dict:
    slas = tuple(c * MINI_SLA_SCALE for c in SLA_CLASSES_MS)
    timeout_s = CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0
    warm, dur = (0.5, 2.0) if quick else (1.5, 6.0)
    rates = MINI_RATES[:2] if quick else MINI_RATES
    out = {"sla_classes_ms": slas, "rungs": [], "warmup_s": warm, "measure_s": dur}
    alive = {"explicit": True, "native": True}
    for i, rate in enumerate(rates):
        arrivals = arrivals_for("poisson", rate, warm + dur, SEED + rate, slas, MINI_LENGTHS)
        row = {"rate_rps": rate}
        order = ("explicit", "native") if i % 2 == 0 else ("native", "explicit")
        for role in order:
            if not alive[role]:
                continue
            model = MINI_EXPLICIT if role == "explicit" else MINI_NATIVE
            stats = bench.segment(role, model, arrivals, dur, role == "explicit", timeout_s,
                                  warm)
            row[role] = stats
            alive[role] = stats.attainment >= B.KNEE_ATTAINMENT
        out["rungs"].append(row)
        log(f"minilm {rate} req/s: " + ", ".join(
            f"{k} {v.attainment:.1%} (p99 {v.p99_ms:.0f} ms)" for k, v in row.items()
            if k != "rate_rps"))
        if not any(alive.values()):
            break
    return out


def run_decision_bench(quick: bool, out_dir: str) -> dict | None:
    """``scripts/bench_decision.py`` (its exit status says pass/miss; both are reported)."""
    script = os.path.join(REPO_ROOT, "scripts", "bench_decision.py")
    if not os.path.exists(script):
        return None
    path = os.path.join(out_dir, "decision.json")
    cmd = [sys.executable, script, "--json", path, "--profile",
           "--out", os.path.join(out_dir, "decision_microbench.md")]
    if quick:
        cmd += ["--calls", "200", "--repeats", "1"]
    subprocess.run(cmd, check=False, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


BLOCKS = ("ts1", "emulated", "minilm", "decision", "h200")
SERVER_BLOCKS = {"ts1", "emulated", "minilm", "h200"}


def committed_baseline(path: str = "results/bench/bench.json") -> dict:
    """The last committed report's figures (``git show HEAD:<path>``, read before this run
    writes anything): what the t4/a100 rows are compared against."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
        text = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=REPO_ROOT,
                              capture_output=True, text=True, check=True).stdout
        data = json.loads(text)
    except (OSError, subprocess.CalledProcessError, ValueError) as exc:
        return {"source": f"git show HEAD:{path}", "error": str(exc).strip()[:200]}
    from benchmarks import bench_report  # noqa: PLC0415
    return {"source": f"git show HEAD:{path}", "commit": commit,
            "started": data.get("started"), "quick": data.get("quick", False),
            "emulated": bench_report.compact_emulated(data.get("emulated", []))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short segments, thin grid")
    parser.add_argument("--blocks", nargs="+", default=list(BLOCKS), choices=list(BLOCKS),
                        help="blocks to run, in the default order (default: all)")
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES))
    parser.add_argument("--cost-modes", nargs="+", default=list(COST_MODES))
    parser.add_argument("--out-dir", default=OUT_DIR)
    parser.add_argument("--intake", choices=(EXPLICIT_INTAKE, "gather"), default=EXPLICIT_INTAKE,
                        help="the plugin's intake in every block (default: the shipped "
                             f"one, {EXPLICIT_INTAKE}; another is a variant, named so in "
                             "the report)")
    parser.add_argument("--render", metavar="PICKLE",
                        help="only rewrite the report from a previous run's bench.pickle")
    argv = sys.argv[1:] if argv is None else argv  # the command the report names
    args = parser.parse_args(argv)
    from benchmarks import bench_report  # noqa: PLC0415 - matplotlib only here

    if args.render:
        with open(args.render, "rb") as fh:
            bench_report.write(pickle.load(fh), args.out_dir)
        return 0

    os.makedirs(args.out_dir, exist_ok=True)
    baseline = committed_baseline()
    started = time.monotonic()
    results: dict = {"command": "make bench" if not argv else
                     "python scripts/bench.py " + " ".join(map(shlex.quote, argv)),
                     "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                                f"{platform.python_version()}",
                     "quick": args.quick, "emulated": [], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                     "capacity_sample": CAPACITY_SAMPLE, "target_capacity_rps": TARGET_CAPACITY_RPS,
                     "baseline": baseline, "explicit_intake": args.intake}
    log_path = os.path.join(args.out_dir, "tritonserver.log")
    if os.path.exists(log_path):
        os.remove(log_path)
    models = [EXPLICIT, NATIVE]
    server = TritonServer(DEFAULT_MODEL_REPOSITORY, log_path=log_path, exit_timeout_s=15,
                          extra_args=("--model-control-mode=explicit",
                                      *(f"--load-model={m}" for m in models)))
    if SERVER_BLOCKS & set(args.blocks):
        with server:
            log(f"server ready (gRPC {server.grpc_url})")
            bench = Bench(server, models, args.intake)
            try:
                if "ts1" in args.blocks:
                    results["ts1"] = run_ts1_block(bench, args.quick)
                if "emulated" in args.blocks:
                    for name in args.profiles:
                        for mode in args.cost_modes:
                            results["emulated"].append(
                                run_emulated_block(bench, name, mode, args.quick))
                if "minilm" in args.blocks:
                    for m in models:
                        bench.unload(m)
                    for m in (MINI_EXPLICIT, MINI_NATIVE):
                        bench.load(m)
                    results["minilm"] = run_minilm_block(bench, args.quick)
                    if "h200" in args.blocks:  # back to the emulated models
                        for m in (MINI_EXPLICIT, MINI_NATIVE):
                            bench.unload(m)
                        for m in models:
                            bench.load(m)
                if "h200" in args.blocks:
                    results["h200"] = run_h200_block(bench, args.quick)
            finally:
                bench.monitor.stop()
            results["lost"] = bench.lost
            results["segments"] = bench.segments
            results["server_crashes"] = bench.server_crashes
    if "decision" in args.blocks:
        results["decision"] = run_decision_bench(args.quick, args.out_dir)
    results["wall_s"] = time.monotonic() - started
    with open(os.path.join(args.out_dir, "bench.pickle"), "wb") as fh:
        pickle.dump(results, fh)  # for --render after a change to the report only
    bench_report.write(results, args.out_dir)
    log(f"wrote {args.out_dir}/report.md in {results['wall_s']:.0f} s")
    return 1 if results.get("lost") else 0


if __name__ == "__main__":
    sys.exit(main())
