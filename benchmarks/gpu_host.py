"""``scripts/gpu_bench.py`` on the GPU host: the device, its measured costs, perf_analyzer
there, and the server's checks (sanity, placement, idle).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import time
from contextlib import contextmanager

from benchmarks.gpu_plan import EXPLICIT_LINE, MODEL_LINE, ModelFamily, Settings, log
from triton_backend.device_calibration import calibration_grid, measure_cost_table


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


def measure_costs(settings: Settings, info: dict, out_dir: str, family: ModelFamily,
                  shape_bucket_tokens: int = 0) -> dict:
    """The cost table of the model's encoder (its shapes bucketed as the served models'
    are) on this process's device, written to cost_table.json."""
    encoder = family.encoder(info["torch_device"], settings.bert_layers, shape_bucket_tokens)
    name = type(encoder).__name__
    log(f"cost table: {name} on {info['torch_device']}")
    batches, lengths = calibration_grid(*settings.grid)
    result = measure_cost_table(encoder.run, batches, lengths, settings.calibration_budget_s,
                                warmups=settings.warmups, repeats=settings.repeats,
                                max_batch_tokens=settings.grid[2])
    del encoder
    if info["torch_device"].startswith("cuda"):
        import torch
        torch.cuda.empty_cache()
    doc = {
        "what": (f"wall time of {name}.run() on {info['torch_device']} "
                 f"({family.outputs}; eager, torch {info['torch']}), batch "
                 f"of B sequences of L tokens each (no padding inside), median of "
                 f"{settings.repeats} after {settings.warmups} warm-ups; includes host-to-"
                 "device copy and .cpu() of the result; measured by scripts/gpu_bench.py"),
        "encoder": name,
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


def sanity_check(server, models: list[str], width: int) -> dict[str, str]:
    """One request per model: a ``width``-float EMBEDDING back (an empty one is the numpy-2
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
            if emb is None or emb.size != width:
                raise RuntimeError(f"{model}: EMBEDDING of shape "
                                   f"{None if emb is None else emb.shape}, expected (1, {width}) "
                                   "(numpy 2 under Triton 24.10 gives empty outputs)")
            out[model] = f"ok, |embedding| = {float(np.linalg.norm(emb)):.3f}"
    finally:
        client.close()
    return out


def server_placement_lines(log_path: str) -> list[str]:
    """The models' own log lines about their device and profile, from the server log."""
    lines = []
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = MODEL_LINE.search(line)
                if not m or not any(k in m.group(1) for k in ("placement", "KIND_", "device=")):
                    continue
                text = m.group(1)
                e = EXPLICIT_LINE.search(text)
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
