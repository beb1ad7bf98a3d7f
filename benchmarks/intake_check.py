"""Intake modes side by side: the plugin with ``intake: gather`` (Triton's batcher in front;
execute() parks while a batch runs, so arrivals come over in one call), ``intake: release``
(execute() returns at once, one call per request) and ``intake: hold`` (execute() returns
once its requests are answered; crash-safe), and Triton's own batcher, in ONE server on
the EMULATED device, with perf_analyzer at the same open-loop rates and the same sequences
(order alternated per rate), plus a closed-loop peak (concurrency 64). For every run it
reads the model's Python-stub CPU time (/proc) and Triton's request and execution counts,
so each row carries the stub CPU per request and the requests per execute() call.
Writes results/intake_check.md (``--out``).

    .venv/bin/python scripts/intake_check.py [--time-scale 1] [--flat] \
        [--rates 100 200 300] [--measurement-ms 4000] [--concurrency 64]

``--time-scale 0.01`` makes the emulated device nearly free (host-bound: only the
per-request host path counts). ``--flat`` is the GPU-like flat-cost profile: t4
with cost_model fixed_ms 3.9, per_sequence_ms 0, per_token_ms 0.0006,
per_token_squared_ms 0, padded, scheduler max_batch_size 64 and max_batch_tokens 32768
(64 of the longest, as native may batch), and control.refusal_late_share 0.2 as the
launch-bound h200_minilm profile ships it; Triton's batcher then with max_batch_size 64.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from operator_tools.report import fmt_num

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from operator_tools.perf_analyzer import PerfResult, run_request_rate
from benchmarks.procinfo import cpu_s, find_stub
from benchmarks.pages import write_page
from benchmarks.repository import copy_model, set_max_batch_size
from server_ops.intake_config import gather_config, hold_config, release_config
from sidecar.triton_metrics import fetch_url, model_sample_sum
from server_ops.launcher import TritonServer
from triton_backend.metric_catalog import WAKE_REQUESTS_METRIC

CONFIGS = os.path.join(REPO_ROOT, "perf_analyzer_configs")
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "intake_check.md")
NATIVE = "emulated_native"
INTAKE_CONFIG = {"gather": gather_config, "release": release_config, "hold": hold_config}
FLAT = {"cost_model.fixed_ms": "3.9", "cost_model.per_sequence_ms": "0",
        "cost_model.per_token_ms": "0.0006", "cost_model.per_token_squared_ms": "0",
        "cost_mode": "padded", "scheduler.max_batch_size": "64",
        "scheduler.max_batch_tokens": "32768",
        "control.refusal_late_share": "0.2"}
# Closed loop: perf_analyzer's default stability (10 %) over 3 windows sometimes never
# settles at the peak on 2 shared cores ("Failed to obtain stable measurement").
CLOSED_LOOP_FLAGS = ("--stability-percentage", "30", "--max-trials", "6")


def _params(time_scale: float, flat: bool) -> dict[str, str]:
    return {"time_scale": f"{time_scale:g}", **(FLAT if flat else {})}


def _variant(repo: str, intake: str, time_scale: float, flat: bool) -> str:
    """emulated_explicit as ``explicit_<intake>``, with that intake; returns the name."""
    name = f"explicit_{intake}"
    # serve_late: perf_analyzer stops at the first error, and the closed-loop peak
    # overloads the device (refusals are the reliability suite's business).
    copy_model("emulated_explicit", repo, name, text_writer=INTAKE_CONFIG[intake],
               params={"control.infeasible_policy": "serve_late",
                       "profile_dir": f"{name}/profiles", **_params(time_scale, flat)})
    return name


def _native(repo: str, profiles_of: str, time_scale: float, flat: bool) -> None:
    copy_model(NATIVE, repo, edit=set_max_batch_size(64) if flat else None,
               params={"profile_dir": f"{profiles_of}/profiles", **_params(time_scale, flat)})


def _counts(server: TritonServer, model: str) -> tuple[int, int]:
    """(requests answered successfully, execute() calls) from Triton's statistics, less
    intake hold's wake requests (Triton counts them as requests)."""
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats",
                                timeout=5) as resp:
        stats = json.load(resp)["model_stats"][0]
    wakes = int(model_sample_sum(fetch_url(server.metrics_url, 30.0),
                                 WAKE_REQUESTS_METRIC, model))
    return (int(stats["inference_stats"]["success"]["count"]) - wakes,
            int(stats["execution_count"]))


@dataclass
class Row:
    result: PerfResult | None
    model: str
    rate: float
    stub_us_per_request: float | None
    requests_per_call: float | None
    error: str = ""


def _measure(server: TritonServer, model: str, rate: float, measurement_ms: int,
             concurrency: int = 0) -> Row:
    data = os.path.join(CONFIGS, "mixed.json" if model == NATIVE else "mixed_sla.json")
    stub = find_stub(server.process.pid, model)
    cpu0, (n0, calls0) = cpu_s(stub), _counts(server, model)
    try:
        result = run_request_rate(server.http_url, model, data, rate, measurement_ms,
                                  concurrency=concurrency,
                                  extra=CLOSED_LOOP_FLAGS if concurrency else ())
        error = ""
    except RuntimeError as exc:
        result, error = None, str(exc)[-1500:]
    cpu1, (n1, calls1) = cpu_s(stub), _counts(server, model)
    n, calls = n1 - n0, calls1 - calls0
    per_request = (1e6 * (cpu1 - cpu0) / n if n and cpu0 is not None and cpu1 is not None
                   else None)
    return Row(result, model, rate, per_request, n / calls if calls else None, error)


def open_loop_table(rows: list[Row]) -> list[str]:
    lines = ["| model | offered rate (req/s) | throughput (req/s) | p50 (ms) | p90 (ms) | "
             "p99 (ms) | stub CPU (us/request) | requests per execute() | load generator "
             "kept schedule |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        r = row.result
        if r is None:
            lines.append(f"| {row.model} | {row.rate:g} | failed: {row.error} | | | | | | |")
            continue
        lines.append(f"| {row.model} | {row.rate:g} | {r.throughput:.1f} | {r.p50_ms:.2f} | "
                     f"{r.p90_ms:.2f} | {r.p99_ms:.2f} | "
                     f"{fmt_num(row.stub_us_per_request, '.0f')} "
                     f"| {fmt_num(row.requests_per_call, '.1f')} | "
                     f"{'yes' if r.kept_schedule else 'NO'} |")
    return lines


def closed_loop_table(rows: list[Row], native: Row | None) -> list[str]:
    lines = ["| model | throughput (req/s) | x native | p50 (ms) | p99 (ms) | "
             "stub CPU (us/request) | stub CPU - native's (us/request) | "
             "requests per execute() |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    base = native.result.throughput if native and native.result else None
    base_cpu = native.stub_us_per_request if native else None
    for row in rows:
        r = row.result
        if r is None:
            lines.append(f"| {row.model} | failed: {row.error} | | | | | | |")
            continue
        ratio = r.throughput / base if base else None
        extra = (row.stub_us_per_request - base_cpu
                 if row.stub_us_per_request is not None and base_cpu is not None else None)
        lines.append(f"| {row.model} | {r.throughput:.0f} | {fmt_num(ratio, '.2f')} | "
                     f"{r.p50_ms:.1f} | {r.p99_ms:.1f} | "
                     f"{fmt_num(row.stub_us_per_request, '.0f')} "
                     f"| {fmt_num(extra, '+.0f')} | {fmt_num(row.requests_per_call, '.1f')} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", nargs="*", type=float, default=[100.0, 200.0, 300.0])
    parser.add_argument("--measurement-ms", type=int, default=4000)
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="the emulated device's slow-down (0.01: nearly free, host-bound)")
    parser.add_argument("--flat", action="store_true",
                        help="the GPU-like flat-cost profile (see the module doc)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--intakes", nargs="+", default=list(INTAKE_CONFIG),
                        choices=list(INTAKE_CONFIG))
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(repo)
        explicit = [_variant(repo, intake, args.time_scale, args.flat)
                    for intake in args.intakes]
        _native(repo, explicit[0], args.time_scale, args.flat)
        models = [*explicit, NATIVE]
        rows, peaks = [], []
        with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
            for k, rate in enumerate(args.rates):
                shift = k % len(models)
                for model in models[shift:] + models[:shift]:  # alternate who goes first
                    rows.append(_measure(server, model, rate, args.measurement_ms))
                    print(open_loop_table(rows[-1:])[-1], flush=True)
            for model in models:
                peaks.append(_measure(server, model, 0, args.measurement_ms,
                                      concurrency=args.concurrency))
                print(closed_loop_table(peaks[-1:], None)[-1], flush=True)
        with open(os.path.join(tmp, "server.log"), errors="replace") as fh:
            hand_over = [line.split("] ", 1)[-1].strip().strip('"') for line in fh
                         if "unloading; thread CPU" in line]
    rows.sort(key=lambda r: (r.rate, r.model))
    profile = ("the flat GPU-like t4 override (fixed 3.9 ms, 0.0006 ms/token, "
               "padded, max batch 64)" if args.flat else "t4")
    command = " ".join(["scripts/intake_check.py", f"--time-scale {args.time_scale:g}",
                        *(["--flat"] if args.flat else []),
                        "--rates", *(f"{r:g}" for r in args.rates)])
    native = next((p for p in peaks if p.model == NATIVE), None)
    text = "\n".join([
        f"# Intake modes: gather vs release vs hold vs Triton's batcher (EMULATED {profile}, "
        f"time scale {args.time_scale:g})", "",
        f"Generated by `.venv/bin/python {command}` on this machine (2 shared cores; the "
        f"EMULATED device at time scale {args.time_scale:g}, not a GPU; server, stubs and "
        "perf_analyzer share the cores). One server, perf_analyzer open loop at each rate, "
        "order alternated; the same sequences (mixed_sla.json / mixed.json). The plugin "
        "variants serve infeasible requests late instead of refusing them (perf_analyzer "
        "stops at the first error). Stub CPU: the model's Python-stub process (all its "
        "threads, /proc schedstat) over the whole perf_analyzer run, divided by the "
        "requests Triton counted as answered in that time; requests per execute(): the "
        "same requests over Triton's execution count.", "",
        *open_loop_table(rows), "",
        f"Closed loop (concurrency {args.concurrency}; perf_analyzer "
        f"{' '.join(CLOSED_LOOP_FLAGS)}):", "",
        *closed_loop_table(peaks, native), "",
        "The plugin's own account at unload (thread CPU seconds over the whole run; "
        "gather's hand-over figures):", "",
        *[f"- `{line}`" for line in hand_over], ""])
    write_page(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
