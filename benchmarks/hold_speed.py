"""The shipped default at device speed, measured with NVIDIA's perf_analyzer: the plugin as
shipped (``model_repository/emulated_explicit/config.pbtxt``) beside Triton's own batcher
on the same Python model, on the GPU-like flat profile, at fractions of native's
closed-loop peak; variants of the hold intake beside them, under their own names.

    .venv/bin/python scripts/hold_speed.py [--fractions 0.2 0.5 0.8 0.94 1.1] \
        [--hand-over 64 128] [--out results/hold_speed.md]

Setup (issue "The shipped default at native's speed"): the EMULATED t4 re-costed as
3.9 ms + 0.0006 ms/token, padded, device batch 64, time scale 1; native is
``emulated_native`` behind Triton's batcher (delay 0, max_batch_size 64, no queue policy;
the shipped emulated_native waits up to 2 ms).
Traffic: perf_analyzer ``--request-distribution poisson`` with 2,000 requests of the
benchmark's long-tailed length mix (16-512 tokens, log-normal around 64) as input data,
SLA classes 50/100/200 ms in turn (native's file has no SLA input). Load fractions are of
native's closed-loop peak (concurrency 64), measured first in the same run.

perf_analyzer stops at the first error: a plugin row that refuses a request reads
"refused" with the plugin's message. Each row also carries the model stub's CPU per
request (/proc, all threads), Triton's requests per ``execute()`` call and its mean
compute time per call. With ``--timeline DIR`` the plugin writes its per-call timeline
there (``triton_backend/timeline.py``) and the report adds each plugin's totals.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from typing import Callable

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data
from benchmarks.intake_check import FLAT
from operator_tools.report import fmt_num
from benchmarks.pages import write_page
from benchmarks.procinfo import cpu_s, find_stub
from benchmarks.repository import copy_model
from operator_tools.perf_analyzer import run_request_rate
from server_ops.intake_config import hold_config
from tritonclient.grpc import model_config_pb2 as mc
from server_ops.launcher import TritonServer
from triton_backend.timeline import TIMELINE_ENV

DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "hold_speed.md")
NATIVE, SHIPPED = "emulated_native", "emulated_explicit"
DATA_ENTRIES = 2000
POISSON = ("--request-distribution", "poisson", "--stability-percentage", "30", "--max-trials", "4")
# The SLA as a request parameter (perf_analyzer sends one value, over gRPC only).
SLA_PARAMETER = ("--request-parameter", "sla_ms:100:int")
CLOSED_LOOP_FLAGS = ("--stability-percentage", "30", "--max-trials", "6")


NATIVE_POLICY = "native_queue_policy"


def _native(model) -> None:
    """Native as the issue sets it up: Triton's batcher at delay 0, batches of up to 64
    (the shipped emulated_native waits up to 2 ms)."""
    model.max_batch_size = 64
    model.dynamic_batching.max_queue_delay_microseconds = 0


def _with_queue_policy(model) -> None:
    """Native, plus the queue policy the plugin shipped before this round."""
    _native(model)
    policy = model.dynamic_batching.default_queue_policy
    policy.timeout_action = mc.ModelQueuePolicy.REJECT
    policy.allow_timeout_override = True
    policy.max_queue_size = 128


VARIANT = "explicit_variant"


# The device each model emulates, by --profile: the issue's flat profile, or the measured
# H200 MiniLM table (make bench's h200 block), both padded at time scale 1.
DEVICES = {"flat": FLAT,
           "h200_minilm": {"hardware_profile": "h200_minilm", "cost_mode": "padded"},
           # the device nearly free (make bench's host-bound run): the host path bounds
           "host_bound": {"hardware_profile": "h200_minilm", "cost_mode": "padded",
                          "time_scale": "0.01"}}


def device_params(device: str, time_scale: float | None = None) -> dict[str, str]:
    """The parameters that put a model on ``device`` (``DEVICES``; at ``time_scale`` where
    given), reading the shipped plugin's profiles."""
    return {"profile_dir": f"{SHIPPED}/profiles", "time_scale": "1", **DEVICES[device],
            **({"time_scale": f"{time_scale:g}"} if time_scale is not None else {})}


def add_variant(repo: str, params: dict[str, str], device: str = "flat",
                time_scale: float | None = None, name: str = VARIANT) -> str:
    """The shipped plugin copied into ``repo`` as ``name``, on ``device``, with ``params``
    set. Returns its folder."""
    return copy_model(SHIPPED, repo, name, params={**device_params(device, time_scale),
                                                   **params, "profile_dir": f"{name}/profiles"})


def add_checkout(repo: str, checkout: str, name: str, params: dict[str, str] | None = None,
                 device: str = "flat") -> str:
    """``add_variant`` whose stub imports the plugin from ``checkout`` (another checkout,
    e.g. a ``git worktree`` of an earlier commit) first: code A/Bs in one server. Returns
    ``name``."""
    add_variant(repo, params or {}, device, name=name)
    path = os.path.join(repo, name, "1", "model.py")
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(f"import sys; sys.path.insert(0, {checkout!r})\n{text}")
    return name


def build_repo(repo: str, hand_overs: list[int], native_policy: bool = False,
               variant: dict[str, str] | None = None, device: str = "flat",
               time_scale: float | None = None) -> list[str]:
    """The shipped plugin, its hold variants and native (with ``native_policy``, also
    native behind a queue policy: Triton's own tax), all on ``device`` (``DEVICES``, at
    ``time_scale`` where given); with ``variant``, also the shipped plugin with those
    parameters (``explicit_variant``)."""
    profiles = device_params(device, time_scale)
    copy_model(SHIPPED, repo, params={**profiles, "profile_dir": f"{SHIPPED}/profiles"})
    models = [SHIPPED]
    for n in hand_overs:
        name = f"hold_handover{n}"
        copy_model(SHIPPED, repo, name,
                   text_writer=lambda text, n=n: hold_config(text, max_hand_over=n,
                                                             max_queue_size=0),
                   params={**profiles, "profile_dir": f"{name}/profiles"})
        models.append(name)
    if variant:
        add_variant(repo, variant, device, time_scale)
        models.append(VARIANT)
    if native_policy:
        copy_model(NATIVE, repo, NATIVE_POLICY, edit=_with_queue_policy,
                   params={**profiles, "profile_dir": f"{SHIPPED}/profiles"})
        models.append(NATIVE_POLICY)
    copy_model(NATIVE, repo, edit=_native,
               params={**profiles, "profile_dir": f"{SHIPPED}/profiles"})
    return [*models, NATIVE]


@contextlib.contextmanager
def shipped_beside_native(tmp: str, device: str = "flat", time_scale: float | None = None,
                          also: Callable[[str], str] | None = None):
    """The shipped plugin and native in one server on ``device`` (``build_repo``, in
    ``tmp``; at ``time_scale`` where given, the SLA classes scaled alike), each warmed up:
    yields the server, the models and each model's perf_analyzer input data (the mix, with
    its SLA classes for the plugin). ``also``: adds one more copy of the shipped plugin to
    the repository given it and returns its name; it is fed the plugin's data."""
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    models = build_repo(repo, [], device=device, time_scale=time_scale)
    slas_ms = [s * (time_scale or 1.0) for s in SLA_CLASSES_MS]
    data = {SHIPPED: write_input_data(os.path.join(tmp, "sla.json"),
                                      mix_entries(slas_ms, DATA_ENTRIES)),
            NATIVE: write_input_data(os.path.join(tmp, "mix.json"),
                                     mix_entries(None, DATA_ENTRIES))}
    if also is not None:
        name = also(repo)
        models.append(name)
        data[name] = data[SHIPPED]
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for m in models:  # warm-up (a slowed device at as slowed a rate)
            measure(server, m, data[m], 200 / max(1.0, time_scale or 1.0), 0.0, 1500)
        yield server, models, data


def triton_stats(server: TritonServer, model: str) -> tuple[int, int, float]:
    """(successful requests, execute() calls, compute ns) from Triton's statistics."""
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats",
                                timeout=5) as resp:
        s = json.load(resp)["model_stats"][0]
    inf = s["inference_stats"]
    return (int(inf["success"]["count"]), int(s["execution_count"]),
            float(inf["compute_infer"]["ns"]))


@dataclass
class Row:
    model: str
    fraction: float | None  # None: closed loop
    rate: float
    throughput: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    kept: bool = True
    error: str = ""
    stub_us: float | None = None
    per_call: float | None = None
    call_ms: float | None = None
    answered: int = 0  # requests Triton answered successfully during the row


def first_error(text: str) -> str:
    for line in text.splitlines():
        if "had error" in line or "deadline infeasible" in line:
            return line.strip()[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else "failed"


def measure(server: TritonServer, model: str, data: str, rate: float, fraction, ms: int,
            concurrency: int = 0, extra: tuple[str, ...] = (), protocol: str = "http") -> Row:
    stub = find_stub(server.process.pid, model)
    cpu0, (n0, c0, t0) = cpu_s(stub), triton_stats(server, model)
    row = Row(model, fraction, rate)
    try:
        url = server.grpc_url if protocol == "grpc" else server.http_url
        r = run_request_rate(url, model, data, rate, ms, protocol=protocol,
                             concurrency=concurrency, timeout_s=120,
                             extra=(*(CLOSED_LOOP_FLAGS if concurrency else POISSON), *extra))
        row.throughput, row.p50_ms, row.p99_ms, row.kept = (r.throughput, r.p50_ms, r.p99_ms,
                                                          r.kept_schedule)
    except RuntimeError as exc:
        row.error = first_error(str(exc))
    except subprocess.TimeoutExpired:
        row.error = "perf_analyzer did not finish (no stable measurement)"
    cpu1, (n1, c1, t1) = cpu_s(stub), triton_stats(server, model)
    n, calls = n1 - n0, c1 - c0
    row.answered = n
    if n and cpu0 is not None and cpu1 is not None:
        row.stub_us = 1e6 * (cpu1 - cpu0) / n
    if calls:
        row.per_call, row.call_ms = n / calls, (t1 - t0) / n / 1e6  # Triton sums it per request
    return row


def table(rows: list[Row], peak: float) -> list[str]:
    lines = ["| model | load (x native peak) | offered (req/s) | served (req/s) | P50 (ms) | "
             "P99 (ms) | stub CPU (us/req) | requests per call | ms per call | note |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        load = "closed loop (c=64)" if r.fraction is None else f"{r.fraction:g}"
        offered = "-" if r.fraction is None else f"{r.rate:.0f}"
        note = r.error or ("" if r.kept else "perf_analyzer fell behind")
        lines.append(f"| {r.model} | {load} | {offered} | {fmt_num(r.throughput, '.0f')} | "
                     f"{fmt_num(r.p50_ms, '.1f')} | {fmt_num(r.p99_ms, '.1f')} | "
                     f"{fmt_num(r.stub_us, '.0f')} | {fmt_num(r.per_call, '.1f')} | "
                     f"{fmt_num(r.call_ms, '.1f')} | {note} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", nargs="*", type=float,
                        default=[0.2, 0.5, 0.8, 0.94, 1.1])
    parser.add_argument("--hand-over", nargs="*", type=int, default=[],
                        help="hold variants without a queue policy, by hand-over size")
    parser.add_argument("--native-policy", action="store_true",
                        help=f"add {NATIVE_POLICY}: native behind default_queue_policy "
                             "{ max_queue_size: 128, allow_timeout_override: true }")
    parser.add_argument("--variant", nargs="*", default=[], metavar="KEY=VALUE",
                        help=f"add {VARIANT}: the shipped plugin with these parameters")
    parser.add_argument("--profile", choices=sorted(DEVICES), default="flat",
                        help="the EMULATED device of every model (default: flat)")
    parser.add_argument("--sla-parameter", action="store_true",
                        help="the plugins' SLA as the sla_ms request parameter (100 ms for "
                             "every request: perf_analyzer sends one value), not the SLA_MS "
                             "input; every model over gRPC (results/sla_carriage.md)")
    parser.add_argument("--measurement-ms", type=int, default=4000)
    parser.add_argument("--timeline", default="", help="folder for the per-call timelines")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    if args.timeline:
        os.environ[TIMELINE_ENV] = os.path.abspath(args.timeline)
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(repo)
        variant = dict(item.split("=", 1) for item in args.variant)
        models = build_repo(repo, args.hand_over, args.native_policy, variant, args.profile)
        data_e = write_input_data(os.path.join(tmp, "mix_sla.json"),
                                  mix_entries(SLA_CLASSES_MS, DATA_ENTRIES))
        data_n = write_input_data(os.path.join(tmp, "mix.json"),
                                  mix_entries(None, DATA_ENTRIES))
        natives = (NATIVE, NATIVE_POLICY)
        data = {m: data_n if m in natives or args.sla_parameter else data_e for m in models}
        protocol = "grpc" if args.sla_parameter else "http"
        extra = {m: SLA_PARAMETER if args.sla_parameter and m not in natives else ()
                 for m in models}

        def row(m: str, rate: float, fraction, concurrency: int = 0) -> Row:
            return measure(server, m, data[m], rate, fraction, args.measurement_ms,
                           concurrency=concurrency, extra=extra[m], protocol=protocol)

        rows: list[Row] = []
        with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
            for m in models:  # warm-up
                measure(server, m, data[m], 200, 0.0, 1500, extra=extra[m], protocol=protocol)
            native_peak = row(NATIVE, 0, None, concurrency=64)
            peak = native_peak.throughput or 1000.0
            print(table([native_peak], peak)[-1], flush=True)
            for k, f in enumerate(args.fractions):
                order = models[k % len(models):] + models[:k % len(models)]
                for m in order:
                    rows.append(row(m, f * peak, f))
                    print(table(rows[-1:], peak)[-1], flush=True)
            closed = [native_peak]
            for m in models[:-1]:
                closed.append(row(m, 0, None, concurrency=64))
                print(table(closed[-1:], peak)[-1], flush=True)
        with open(os.path.join(tmp, "server.log"), errors="replace") as fh:
            unload = [line.split("] ", 1)[-1].strip().strip('"') for line in fh
                      if "unloading; thread CPU" in line]
    rows.sort(key=lambda r: (r.fraction, models.index(r.model)))
    command = " ".join(["scripts/hold_speed.py",
                        *(["--profile", args.profile] if args.profile != "flat" else []),
                        "--fractions",
                        *(f"{f:g}" for f in args.fractions),
                        *(["--hand-over", *map(str, args.hand_over)] if args.hand_over else []),
                        *(["--native-policy"] if args.native_policy else []),
                        *(["--variant", *args.variant] if args.variant else []),
                        *(["--sla-parameter"] if args.sla_parameter else [])])
    text = "\n".join([
        "# The shipped default at device speed (perf_analyzer, Poisson; EMULATED "
        + ("flat t4" if args.profile == "flat" else args.profile) + ")", "",
        f"Generated by `.venv/bin/python {command}` on this machine (2 shared cores: "
        "tritonserver, the stubs and perf_analyzer share them; the EMULATED device sleeps "
        "for each batch's modelled cost, it is not a GPU). One server; "
        f"native's closed-loop peak (concurrency 64) is {peak:.0f} req/s and sets the loads. "
        f"`{SHIPPED}` is the shipped config; `hold_handoverN` is intake hold with a "
        "hand-over of N requests and no queue policy"
        + (f"; `{VARIANT}` is the shipped config with {', '.join(args.variant)}"
           if args.variant else "") + "."
        + (" The plugins' SLA is the `sla_ms` request parameter, 100 ms for every request "
           "(no `SLA_MS` input); perf_analyzer over gRPC for every model."
           if args.sla_parameter else ""), "",
        *table(rows, peak), "", "Closed loop (concurrency 64):", "",
        *table(closed, peak), "", "The plugins' own account at unload:", "",
        *[f"- `{line}`" for line in unload], ""])
    write_page(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
