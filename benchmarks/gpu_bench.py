"""MiniLM on a real device: the measured cost table, and explicit control vs Triton's own
dynamic batcher, in one bounded run.

On a GPU host, from the project root, given a tritonserver 2.51 and a Python with the
``cli`` and ``minilm`` extras (numpy<2). In the NGC container (``tritonserver`` on PATH)::

    python3 scripts/gpu_bench.py [--time-limit-s 480] [--out results/gpu]

Elsewhere name the server with EXPLICIT_BATCHING_TRITONSERVER (and, if its backends are not
beside its ``bin/``, EXPLICIT_BATCHING_BACKEND_DIR); with the ``nvidia-pytriton`` wheel
installed (``make setup``) nothing needs naming. An offline host may instead run a packed
copy of this project's environment, as its own tooling provides.

Here, on a CPU, to check the whole path end to end before a GPU session spends its minutes::

    .venv/bin/python scripts/gpu_bench.py --cpu-smoke        # a few minutes; writes to /tmp

What it does, in order, within ``--time-limit-s`` (the segment length is computed from what
is left once the server is up and the peaks are measured):

1. **Cost table.** ``MiniLMEncoder.run`` (``triton_backend.executors``) timed on a grid of
   batch sizes x lengths with ``triton_backend.device_calibration.measure_cost_table``, on
   ``cuda:0`` when torch sees CUDA, else on the CPU. Written to ``cost_table.json`` in the
   row form of ``results/gpu/h200_minilm_costs.json``, with the device name (torch and
   NVML), the date and the torch version.
2. **One tritonserver** on a temporary copy of the model repository: ``minilm_explicit``
   (as shipped), ``minilm_explicit_peak`` (the same with ``control.infeasible_policy=
   serve_late``, for the closed-loop peak only: perf_analyzer stops at the first refusal),
   and ``minilm_native_d<delay>`` for each native ``max_queue_delay`` (default 0 / 1000 /
   5000 us), ``max_batch_size`` 64. The minilm models are ``KIND_CPU`` instances, which
   stay on the CPU; on a CUDA host every copy gets the model-config parameter
   ``device: cuda:0`` (``triton_backend.placement``), so each moves itself to GPU 0, and
   NVML then names the explicit model's profile.
3. **Closed-loop peaks** (perf_analyzer, gRPC, concurrency 64, the same length mix) of
   the explicit model and of each native setting; native's peak is the best of them.
   **Open loop** at 0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.5, 2.0 x native's peak: Poisson
   arrivals, a long-tailed length mix, SLA classes 50 / 100 / 200 ms, sent by
   ``benchmarks/loadgen.py`` through ``scripts/bench.py``'s ``Bench.segment``;
   explicit and every native setting on the very same arrivals, order flipped per load;
   the best native (goodput) per load.
4. ``report.md`` and ``results.json`` in ``--out``, naming the device that produced them.

``--cpu-smoke`` runs the same path on the CPU with a tiny grid, a short length mix, SLA
classes x5, concurrency 8, three loads and short segments. Its figures are NOT a device
result, and its output goes to a temporary folder unless ``--out`` says otherwise (never
commit it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from benchmarks import bench as BENCH  # Bench.segment, arrivals, mixes
from benchmarks import benchmark as B
from benchmarks.repository import copy_model
from scheduler_core import workload as W
from triton_backend.device_calibration import (calibration_grid,
                                               measure_cost_table)

SHIPPED = os.path.join(REPO_ROOT, "model_repository")
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "gpu")
EXPLICIT, EXPLICIT_PEAK = "minilm_explicit", "minilm_explicit_peak"
NATIVE_SRC = "minilm_native"
LOADS = (0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.5, 2.0)
NATIVE_DELAYS_US = (0, 1000, 5000)
NATIVE_MAX_BATCH = 64
SEED = BENCH.SEED


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
                 server_start_timeout_s=240.0)


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


# -- the device ----------------------------------------------------------------------------

def device_info(smoke: bool) -> dict:
    """torch's view of the device, and NVML's name of GPU 0 when NVML answers."""
    import torch
    info = {"torch": torch.__version__, "cuda_available": bool(torch.cuda.is_available()),
            "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count()}
    try:
        import numpy
        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    use_cuda = info["cuda_available"] and not smoke
    info["torch_device"] = "cuda:0" if use_cuda else "cpu"
    info["torch_name"] = (torch.cuda.get_device_name(0) if use_cuda
                          else f"CPU ({platform.processor() or platform.machine()}, "
                               f"{os.cpu_count()} cores)")
    info["nvml_name"] = None
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            info["nvml_name"] = name.decode() if isinstance(name, bytes) else str(name)
            info["driver"] = pynvml.nvmlSystemGetDriverVersion()
            if isinstance(info["driver"], bytes):
                info["driver"] = info["driver"].decode()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # no NVML is a normal state (CPU hosts)
        info["nvml_error"] = f"{type(exc).__name__}: {exc}"
    return info


def device_label(info: dict) -> str:
    name = info.get("nvml_name") or info.get("torch_name")
    return f"{name} ({info['torch_device']})"


def measure_costs(settings: Settings, info: dict, out_dir: str) -> dict:
    """The cost table of MiniLMEncoder on this process's device, written to cost_table.json."""
    from triton_backend.executors import MiniLMEncoder

    log(f"cost table: loading MiniLMEncoder on {info['torch_device']}")
    encoder = MiniLMEncoder(intra_op_threads=1, device=info["torch_device"])
    batches, lengths = calibration_grid(*settings.grid)
    result = measure_cost_table(encoder.run, batches, lengths, settings.calibration_budget_s,
                                warmups=settings.warmups, repeats=settings.repeats,
                                max_batch_tokens=settings.grid[2])
    del encoder
    if info["torch_device"].startswith("cuda"):
        import torch
        torch.cuda.empty_cache()
    doc = {
        "what": (f"wall time of MiniLMEncoder.run() on {info['torch_device']} "
                 f"(all-MiniLM-L6-v2 architecture, eager fp32, torch {info['torch']}), batch "
                 f"of B sequences of L tokens each (no padding inside), median of "
                 f"{settings.repeats} after {settings.warmups} warm-ups; includes host-to-"
                 "device copy and .cpu() of the result; measured by scripts/gpu_bench.py"),
        "device": device_label(info),
        "torch_device_name": info["torch_name"],
        "nvml_name": info.get("nvml_name"),
        "driver": info.get("driver"),
        "torch": info["torch"],
        "date": datetime.date.today().isoformat(),
        "source": ("CPU smoke run, not a device result" if settings.smoke
                   else "measured on the device named above"),
        **result.to_dict(),
    }
    with open(os.path.join(out_dir, "cost_table.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    log(f"cost table: {len(result.rows)} cells in {result.elapsed_s:.1f} s "
        f"(budget {settings.calibration_budget_s:g} s, "
        f"{'complete' if result.complete else f'{len(result.skipped)} cells skipped'})")
    return doc


# -- the model repository ------------------------------------------------------------------

def native_name(delay_us: int) -> str:
    return f"{NATIVE_SRC}_d{int(delay_us)}"


def build_repository(repo: str, delays_us, device_param: str | None,
                     explicit_params: dict[str, str]) -> list[str]:
    """The bench's model repository in ``repo``; returns the model names."""
    os.makedirs(repo, exist_ok=True)
    device = {"device": device_param} if device_param else {}
    models = []
    for name, extra in ((EXPLICIT, {}),
                        (EXPLICIT_PEAK, {"control.infeasible_policy": "serve_late"})):
        copy_model(EXPLICIT, repo, name, source=SHIPPED,
                   params={**device, **explicit_params, **extra})
        models.append(name)
    for delay in delays_us:
        def native(model, delay=delay):
            model.max_batch_size = NATIVE_MAX_BATCH
            model.dynamic_batching.max_queue_delay_microseconds = int(delay)
        copy_model(NATIVE_SRC, repo, native_name(delay), source=SHIPPED, params=device,
                   edit=native)
        models.append(native_name(delay))
    return models


# -- perf_analyzer on the GPU host ---------------------------------------------------------

@contextmanager
def perf_analyzer_environment():
    """``remote.sh`` exports PERF_ANALYZER (the binary) and PERF_ANALYZER_LD_LIBRARY_PATH (its
    libraries, for perf_analyzer only): put them in place around perf_analyzer runs only, so
    the server (already started) never sees them."""
    binary = os.environ.get("PERF_ANALYZER")
    libs = os.environ.get("PERF_ANALYZER_LD_LIBRARY_PATH")
    saved = {k: os.environ.get(k) for k in ("PATH", "LD_LIBRARY_PATH")}
    try:
        if binary:
            os.environ["PATH"] = os.path.dirname(binary) + os.pathsep + os.environ.get("PATH", "")
        if libs:
            old = os.environ.get("LD_LIBRARY_PATH")
            os.environ["LD_LIBRARY_PATH"] = libs + (os.pathsep + old if old else "")
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def closed_loop_peak(server, model: str, input_data: str, settings: Settings) -> dict:
    from operator_tools.perf_analyzer import run_request_rate
    with perf_analyzer_environment():
        r = run_request_rate(server.grpc_url, model, input_data, 0,
                             settings.peak_measurement_ms, protocol="grpc",
                             extra=("--max-trials", "3", "--stability-percentage", "1000"),
                             timeout_s=120, concurrency=settings.concurrency)
    return {"model": model, "concurrency": settings.concurrency,
            "throughput_rps": r.throughput, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
            "server_queue_ms": r.server_queue_ms}


def sanity_check(server, models: list[str]) -> dict[str, str]:
    """One request per model: a 384-float EMBEDDING back (an empty one is the numpy-2
    failure: numpy 2 under Triton 24.10's Python backend)."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    out = {}
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        ids = np.array([[101, *range(2000, 2030), 102]], dtype=np.int64)
        for model in models:
            t = grpcclient.InferInput("INPUT_IDS", list(ids.shape), "INT64")
            t.set_data_from_numpy(ids)
            res = client.infer(model, [t], client_timeout=60.0)
            emb = res.as_numpy("EMBEDDING")
            if emb is None or emb.size != 384:
                raise RuntimeError(f"{model}: EMBEDDING of shape "
                                   f"{None if emb is None else emb.shape}, expected (1, 384) "
                                   "(numpy 2 under Triton 24.10 gives empty outputs)")
            out[model] = f"ok, |embedding| = {float(np.linalg.norm(emb)):.3f}"
    finally:
        client.close()
    return out


_MODEL_LINE = re.compile(r'\w+\.py:\d+\] "((?:minilm)[^"]*)"')
_EXPLICIT_LINE = re.compile(r"^(?P<model>\S+): explicit batching on profile '(?P<profile>[^']*)' "
                            r"\(chosen by (?P<why>[^;]*);.*placement: (?P<placement>.*)$")


def server_placement_lines(log_path: str) -> list[str]:
    """The models' own log lines about their device and profile, from the server log."""
    lines = []
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = _MODEL_LINE.search(line)
                if not m or not any(k in m.group(1) for k in ("placement", "KIND_", "device=")):
                    continue
                text = m.group(1)
                e = _EXPLICIT_LINE.search(text)
                if e:  # "<model>: profile 'h200' (chosen by ...); placement: ..."
                    text = (f"{e.group('model')}: profile '{e.group('profile')}' (chosen by "
                            f"{e.group('why')}); placement: {e.group('placement')}")
                lines.append(text[:400])
    except OSError:
        pass
    return lines[:20]


def wait_all_idle(server, timeout_s: float) -> float:
    """Wait until no model holds a request (explicit: its queue-depth gauge; native:
    Triton's pending count). Every model shares the device (and here the CPU), so one
    model's backlog - requests whose clients gave up are still served - would slow the
    next segment of another. Returns the seconds waited (``timeout_s`` when it gave up)."""
    from operator_tools.measure import queue_gauges
    from sidecar.triton_metrics import MetricsParseError

    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            gauges = queue_gauges(server.metrics_url, timeout_s=2.0)
        except (OSError, MetricsParseError):
            return time.monotonic() - start
        if not any(v > 0 for v in gauges.values()):
            return time.monotonic() - start
        time.sleep(0.2)
    return timeout_s


# -- the run -------------------------------------------------------------------------------

def run_bench(args, settings: Settings, clock: Clock, info: dict, out_dir: str,
              results: dict) -> None:
    from triton_backend.launcher import TritonServer

    delays = tuple(args.native_delays_us)
    device_param = "cuda:0" if info["torch_device"].startswith("cuda") else None
    explicit_params = dict(kv.split("=", 1) for kv in args.explicit_param)
    work = tempfile.mkdtemp(prefix="gpu_bench_")
    repo = os.path.join(work, "repo")
    models = build_repository(repo, delays, device_param, explicit_params)
    natives = [native_name(d) for d in delays]
    results["server"] = {"models": models, "device_parameter": device_param,
                         "explicit_params": explicit_params,
                         "native": {"max_batch_size": NATIVE_MAX_BATCH, "delays_us": delays}}
    slas = settings.sla_classes_ms
    timeout_s = BENCH.CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0

    # closed-loop input data: the open loop's length mix and SLA classes
    mix = W.generate(W.Poisson(100.0), 5.0, SEED + 1, settings.lengths, W.SlaMix(slas))
    with_sla, no_sla = os.path.join(work, "mix_sla.json"), os.path.join(work, "mix.json")
    W.write_input_data(mix, with_sla, SEED, include_sla=True)
    W.write_input_data(mix, no_sla, SEED, include_sla=False)

    log_path = os.path.join(out_dir, "tritonserver.log")
    server = TritonServer(repo, log_path=log_path, exit_timeout_s=15,
                          extra_args=("--model-control-mode=explicit",
                                      *(f"--load-model={m}" for m in models)))
    log(f"starting tritonserver with {', '.join(models)}"
        + (f" (parameter device={device_param})" if device_param else ""))
    server.start()
    try:
        server.wait_ready(min(settings.server_start_timeout_s, max(30.0, clock.left() - 30)))
        results["timeline"]["server_ready_s"] = clock.elapsed()
        log(f"server ready after {clock.elapsed():.0f} s of the run (gRPC {server.grpc_url})")
        results["sanity"] = sanity_check(server, models)
        results["placement_log"] = server_placement_lines(log_path)
        for line in results["placement_log"]:
            log(f"  server log: {line}")
        bench = BENCH.Bench(server, models)

        # closed-loop peaks
        peaks = {}
        for model, data in ((EXPLICIT_PEAK, with_sla), *((n, no_sla) for n in natives)):
            if clock.left() < 60:
                log("time limit: skipping the remaining closed-loop peaks")
                break
            try:
                peaks[model] = closed_loop_peak(server, model, data, settings)
                log(f"closed loop {model}: {peaks[model]['throughput_rps']:.1f} req/s "
                    f"(P50 {peaks[model]['p50_ms']:.1f} ms)")
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                peaks[model] = {"model": model, "error": str(exc)[-2000:]}
                log(f"closed loop {model} FAILED: {str(exc)[-300:]}")
        results["closed_loop"] = peaks
        results["timeline"]["peaks_done_s"] = clock.elapsed()
        bench.unload(EXPLICIT_PEAK)  # its stub would only take CPU from here on
        native_peaks = [p["throughput_rps"] for m, p in peaks.items()
                        if m in natives and p.get("throughput_rps")]
        if args.native_peak_rps:
            peak = float(args.native_peak_rps)
            results["native_peak_source"] = "--native-peak-rps"
        elif native_peaks:
            peak = max(native_peaks)
            results["native_peak_source"] = "closed loop, best native setting"
        else:
            raise RuntimeError("no native closed-loop peak measured (see closed_loop errors); "
                               "pass --native-peak-rps to run the open loop anyway")
        results["native_peak_rps"] = peak

        # open loop
        reserve = 25.0  # server shutdown and the report
        seg_s = plan_segment_s(clock.left() - reserve, settings.loads, len(natives),
                               settings.warmup_s, settings.segment_overhead_s,
                               settings.min_segment_s, settings.max_segment_s)
        results["open_loop_plan"] = {"segment_s": seg_s, "warmup_s": settings.warmup_s,
                                     "time_left_s": clock.left(), "loads": settings.loads,
                                     "client_timeout_s": timeout_s}
        log(f"open loop: native peak {peak:.1f} req/s; segments of {seg_s:.1f} s "
            f"(+{settings.warmup_s:g} s warm-up), {clock.left():.0f} s left")
        rows = results["open_loop"]
        for i, load in enumerate(settings.loads):
            rate = load * peak
            arrivals = BENCH.arrivals_for("poisson", rate, settings.warmup_s + seg_s,
                                          SEED + int(round(load * 100)), slas, settings.lengths)
            roles = [("explicit", EXPLICIT)] + [(f"native_d{d}", native_name(d)) for d in delays]
            if i % 2:
                roles.reverse()
            row = {"load": load, "rate_rps": rate, "cells": {}, "skipped": [],
                   "idle_wait_s": {}}
            for role, model in roles:
                need = ((settings.warmup_s + seg_s)
                        * segment_cost_factor(load, role != "explicit")
                        + settings.segment_overhead_s + reserve)
                if clock.left() < need:
                    row["skipped"].append(role)
                    continue
                waited = wait_all_idle(server, min(settings.idle_timeout_s,
                                                   max(1.0, clock.left() - need)))
                row["idle_wait_s"][role] = round(waited, 2)
                stats = bench.segment("explicit" if role == "explicit" else "native", model,
                                      arrivals, seg_s, role == "explicit", timeout_s,
                                      settings.warmup_s)
                row["cells"][role] = stats
            rows.append(row)
            log(row_line(row))
            if row["skipped"]:
                results["cut_short"] = True
        results["lost"] = bench.lost
        results["timeline"]["open_loop_done_s"] = clock.elapsed()
    finally:
        log("stopping tritonserver")
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def row_line(row: dict) -> str:
    parts = [f"load {row['load']:.1f}x ({row['rate_rps']:.1f} req/s):"]
    for role, s in row["cells"].items():
        parts.append(f"{role} {s.goodput_rps:.1f} good/s {s.attainment:.1%} "
                     f"P50 {s.p50_ms:.1f} server errors {server_errors(s)} "
                     f"lag99 {s.send_lag_p99_ms:.1f} "
                     f"waited {row['idle_wait_s'].get(role, 0):.1f}s")
    if row["skipped"]:
        parts.append(f"SKIPPED (time limit): {', '.join(row['skipped'])}")
    return " | ".join(parts)


# -- the report ----------------------------------------------------------------------------

def _f(x, fmt="{:.1f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def stats_cells(s: B.SegmentStats | None) -> list[str]:
    if s is None:
        return ["-"] * 6
    return [_f(s.goodput_rps), _f(100 * s.attainment), _f(s.p50_ms), _f(s.p99_ms),
            str(server_errors(s)), _f(s.send_lag_p99_ms)]


def render_report(results: dict) -> str:
    info, smoke = results["device"], results["smoke"]
    source = ("**CPU smoke run, not a device result.** It only checks that the script works "
              "end to end; its figures say nothing about a GPU." if smoke else
              f"**Figures from a real device: {device_label(info)}** (torch "
              f"'{info['torch_name']}', NVML '{info.get('nvml_name') or 'not available'}').")
    lines = [f"# MiniLM on {device_label(info)}: explicit control vs Triton's batcher", "",
             source, "",
             f"Generated by `{results['command']}` on {results['started']} "
             f"({results['wall_s']:.0f} s of a {results['time_limit_s']:.0f} s limit"
             + ("; CUT SHORT by the time limit" if results.get("cut_short") else "") + "). "
             f"torch {info['torch']}, numpy {info.get('numpy', '?')}, Python {info['python']}, "
             f"{info['cpus']} CPUs.", ""]
    if results.get("error"):
        lines += [f"**The run failed:** `{results['error']}`", ""]
    ct = results.get("cost_table")
    if ct:
        cut = "" if ct["complete"] else f"; {len(ct['skipped'])} cells skipped by the budget"
        lines += ["## Cost table (MiniLMEncoder.run on the device)", "",
                  f"{len(ct['rows'])} cells in {ct['elapsed_s']:.1f} s (budget "
                  f"{ct['budget_s']:g} s; median of {ct['repeats']} after {ct['warmups']} "
                  f"warm-ups){cut}. Full rows in `cost_table.json`.", ""]
        lens = sorted({r["length"] for r in ct["rows"]})
        bats = sorted({r["batch"] for r in ct["rows"]})
        ms = {(r["batch"], r["length"]): r["ms"] for r in ct["rows"]}
        lines += ["| batch \\ length (ms) | " + " | ".join(map(str, lens)) + " |",
                  "|---|" + "---:|" * len(lens)]
        for b in bats:
            lines.append(f"| {b} | " + " | ".join(_f(ms.get((b, n)), "{:.2f}") for n in lens)
                         + " |")
        lines.append("")
    srv = results.get("server")
    if srv:
        lines += ["## Server", "",
                  f"One tritonserver, models {', '.join(srv['models'])}; "
                  + (f"every model given the parameter `device: {srv['device_parameter']}` "
                     "(KIND_CPU instances that move themselves to that GPU)"
                     if srv["device_parameter"] else "models on the CPU (KIND_CPU, no device "
                     "parameter)")
                  + f"; native max_batch_size {srv['native']['max_batch_size']}, "
                    f"max_queue_delay {', '.join(map(str, srv['native']['delays_us']))} us."
                  + (f" Extra explicit parameters: {srv['explicit_params']}."
                     if srv["explicit_params"] else ""), ""]
        for line in results.get("placement_log", [])[:8]:
            lines.append(f"    {line}")
        lines.append("")
    peaks = results.get("closed_loop") or {}
    if peaks:
        lines += [f"## Closed loop (perf_analyzer, gRPC, concurrency "
                  f"{results['settings']['concurrency']})", "",
                  "| model | req/s | P50 (ms) | P99 (ms) |", "|---|---:|---:|---:|"]
        for m, p in peaks.items():
            if "error" in p:
                lines.append(f"| {m} | failed: {p['error'][-120:]!r} | | |")
            else:
                lines.append(f"| {m} | {p['throughput_rps']:.1f} | {p['p50_ms']:.1f} | "
                             f"{p['p99_ms']:.1f} |")
        lines += ["", f"{EXPLICIT_PEAK} is {EXPLICIT} with control.infeasible_policy="
                      "serve_late (perf_analyzer stops at the first refused request).", ""]
    rows = results.get("open_loop") or []
    if rows:
        plan = results["open_loop_plan"]
        sla_text = ", ".join(f"{c:g}" for c in results["settings"]["sla_classes_ms"])
        lines += ["## Open loop", "",
                  f"Poisson arrivals at each load x native's closed-loop peak "
                  f"({results['native_peak_rps']:.1f} req/s, {results['native_peak_source']}); "
                  f"{plan['segment_s']:.1f} s measured after a {plan['warmup_s']:g} s warm-up; "
                  f"SLA classes {sla_text} ms; "
                  f"client timeout {plan['client_timeout_s'] * 1000:.0f} ms. Explicit and each "
                  "native setting on the same arrivals (order flipped per load); best native = "
                  "highest goodput. Server errors = error answers of any code (not client "
                  "timeouts); lag = P99 "
                  "of the load generator's send lag.", "",
                  "| load | rate | explicit goodput | % in SLA | P50 | P99 | server errors | lag "
                  "| best native | goodput | % in SLA | P50 | P99 | server errors | lag |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
        for row in rows:
            best = best_native(row["cells"])
            lines.append(f"| {row['load']:.1f} | {row['rate_rps']:.0f} | "
                         + " | ".join(stats_cells(row["cells"].get("explicit"))) + " | "
                         + (best[0] if best else "-") + " | "
                         + " | ".join(stats_cells(best[1] if best else None)) + " |")
        lines += ["", "Every segment (wait = seconds spent before it until no model held a "
                      "request):", "",
                  "| load | model | goodput | % in SLA | P50 | P99 | server errors | lag | wait |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for row in rows:
            for role, s in row["cells"].items():
                lines.append(f"| {row['load']:.1f} | {role} | "
                             + " | ".join(stats_cells(s))
                             + f" | {_f(row['idle_wait_s'].get(role))} |")
            for role in row["skipped"]:
                lines.append(f"| {row['load']:.1f} | {role} | skipped (time limit) "
                             "| | | | | | |")
        lines.append("")
        lines.append(f"Requests lost (no answer at all): {results.get('lost', 0)}.")
    return "\n".join(lines) + "\n"


def jsonable(obj):
    if isinstance(obj, B.SegmentStats):
        return obj.to_dict()
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_outputs(results: dict, out_dir: str) -> None:
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(jsonable(results), fh, indent=1)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as fh:
        fh.write(render_report(results))


# -- main ----------------------------------------------------------------------------------

class TimeLimit(Exception):
    pass


def _alarm(signum, frame):
    raise TimeLimit("hard time limit reached")


def _terminate(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny loads and short segments on the CPU (not a device result)")
    parser.add_argument("--time-limit-s", type=float, default=None,
                        help="hard limit on the whole run (default 480; 300 with --cpu-smoke)")
    parser.add_argument("--out", default=None,
                        help="output folder (default results/gpu; with --cpu-smoke a new "
                             "temporary folder)")
    parser.add_argument("--calibration-budget-s", type=float, default=None)
    parser.add_argument("--native-delays-us", type=int, nargs="+", default=list(NATIVE_DELAYS_US))
    parser.add_argument("--loads", type=float, nargs="+", default=None,
                        help="open-loop loads as fractions of native's closed-loop peak")
    parser.add_argument("--native-peak-rps", type=float, default=None,
                        help="base the open-loop loads on this rate instead of the measured "
                             "native peak (the peaks are still measured and reported)")
    parser.add_argument("--explicit-param", action="append", default=[], metavar="KEY=VALUE",
                        help="extra model-config parameter for the explicit models (repeatable)")
    parser.add_argument("--skip-calibration", action="store_true")
    args = parser.parse_args(argv)
    for kv in args.explicit_param:
        if "=" not in kv:
            parser.error(f"--explicit-param wants KEY=VALUE, got {kv!r}")
    settings = SMOKE if args.cpu_smoke else GPU
    if args.calibration_budget_s is not None:
        settings = _replace(settings, calibration_budget_s=args.calibration_budget_s)
    if args.loads:
        settings = _replace(settings, loads=tuple(args.loads))
    limit = args.time_limit_s or (300.0 if args.cpu_smoke else 480.0)
    clock = Clock(limit)
    out_dir = args.out or (tempfile.mkdtemp(prefix="gpu_bench_smoke_") if args.cpu_smoke
                           else DEFAULT_OUT)
    os.makedirs(out_dir, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(limit + 45))  # last resort: segments are planned to end well before

    info = device_info(args.cpu_smoke)
    results: dict = {
        "command": "python3 scripts/gpu_bench.py " + " ".join(argv if argv is not None
                                                              else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "smoke": settings.smoke,
        "time_limit_s": limit, "device": info, "device_label": device_label(info),
        "source": ("CPU smoke run, not a device result" if settings.smoke else
                   f"real device: {device_label(info)}"),
        "settings": {"grid": settings.grid, "lengths": vars(settings.lengths),
                     "sla_classes_ms": settings.sla_classes_ms,
                     "concurrency": settings.concurrency, "loads": settings.loads},
        "timeline": {}, "open_loop": [], "cut_short": False}
    log(f"device: {device_label(info)}; {'CPU SMOKE RUN' if settings.smoke else 'device run'}; "
        f"limit {limit:.0f} s; output {out_dir}")
    if not settings.smoke and not info["cuda_available"]:
        log("WARNING: torch sees no CUDA: this is a CPU run with GPU-sized loads "
            "(use --cpu-smoke on a CPU)")
    rc = 0
    try:
        if not args.skip_calibration:
            results["cost_table"] = measure_costs(settings, info, out_dir)
            results["timeline"]["cost_table_done_s"] = clock.elapsed()
        run_bench(args, settings, clock, info, out_dir, results)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - the report says what failed
        results["error"] = f"{type(exc).__name__}: {exc}"
        log(f"FAILED: {results['error']}")
        rc = 1
    finally:
        signal.alarm(0)
        results["wall_s"] = clock.elapsed()
        write_outputs(results, out_dir)
        log(f"wrote {out_dir}/report.md, results.json, cost_table.json in "
            f"{results['wall_s']:.0f} s")
    return rc if not results.get("lost") else 1


def _replace(settings: Settings, **changes) -> Settings:
    import dataclasses
    return dataclasses.replace(settings, **changes)


if __name__ == "__main__":
    sys.exit(main())
