"""Per-request host-cost ledger: where the Python stub's CPU goes, per request, for Triton's
own batcher (native) and each intake of the plugin, at the closed-loop peak.

For each setting (the EMULATED device at time scale 1 on the flat GPU-like profile and on
``h200_minilm``, and host-bound at time scale 0.01) one server holds native and every
intake (``scripts/intake_check.py``'s variants: serve_late, their own profiles).
perf_analyzer drives each model in turn, closed loop (64 in flight), twice:

1. plain: throughput, and the stub's whole CPU (/proc) per answered request; after the
   run the models are unloaded and their own account is read from the server log (CPU
   seconds of the execute() thread, the scheduler thread and the responders);
2. profiled (``EXPLICIT_BATCHING_CPROFILE_DIR``; cProfile on each thread's CPU clock, so
   slower): the same threads' CPU split into stages by the functions they ran.

Writes results/host_ledger.md (``--out``). The device is EMULATED on this 2-core machine
(server, stubs and perf_analyzer share the cores): the figures compare host paths, they
are not a GPU's.

    .venv/bin/python scripts/host_ledger.py [--measurement-ms 4000] [--settings flat h200 host]
    .venv/bin/python scripts/host_ledger.py --timeline DIR   # per-call timelines of a run

``--timeline`` summarises the per-call timelines a run left (``EXPLICIT_BATCHING_TIMELINE_DIR``,
written by the explicit models and, for comparison, by native): calls, their host time,
and the device idle while requests wait (``timeline_figures``).
"""

from __future__ import annotations

import argparse
import os
import pstats
import sys
import tempfile
from dataclasses import dataclass, field

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from benchmarks import intake_check as ic
from benchmarks.pages import write_page
from benchmarks.timeline_figures import timeline_table
from operator_tools.report import fmt_num
from benchmarks.repository import edit_model, set_max_batch_size
from triton_backend.intake import DEFAULT_INTAKE
from server_ops.launcher import TritonServer

DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "host_ledger.md")
SETTINGS = {  # name: (time scale, flat profile, hardware profile or "")
    "flat": (1.0, True, ""),
    "h200": (1.0, False, "h200_minilm"),
    "host": (0.01, False, ""),
}
# The plugin's cProfile hook (triton_backend/triton_models.py CPROFILE_ENV; that module
# imports pb_utils, so it cannot be imported here).
CPROFILE_ENV = "EXPLICIT_BATCHING_CPROFILE_DIR"
SHIPPED_DEFAULT = DEFAULT_INTAKE  # the shipped models' intake
# The host-path CPU target is read at this open-loop rate (time scale 1): the stub CPU per
# request there, explicit against native, at a load both carry.
OPEN_LOOP_RPS = 600.0
# Stages by the functions that enter them: cumulative CPU of their calls made from outside
# every stage's entry functions (a stage entered straight from another's entry counts for
# the outer one; one entered through a helper of another stage may count twice).
STAGES = {
    "execute() and decode": ("decode_call", "decode_request", "decode_generic"),
    "enqueue": ("submit_locked", "submit"),
    "decide": ("decide", "schedule", "tick"),
    "batch assembly and executor": ("_launch_executor", "result"),
    "build the response": ("_embedding_response", "_outputs_response"),
    "send": ("_send",),
    "metrics": ("on_batch", "on_dispatch", "on_response", "on_rejected", "flush",
                "on_event"),
    "cancellation checks": ("_drop_cancelled", "_sweep_cancelled", "is_cancelled"),
    "logging": ("zone_change", "maybe_stats"),
    "waits and wake-ups": ("wait", "notify", "notify_all", "get", "put", "after_queued",
                           "batch_finished_locked"),
}


def build_repository(repo: str, time_scale: float, flat: bool, profile: str) -> list[str]:
    """native and one model per intake in ``repo``; returns their names (native last)."""
    names = [ic._variant(repo, intake, time_scale, flat) for intake in ic.INTAKE_CONFIG]
    ic._native(repo, names[0], time_scale, flat)
    if profile:
        for name in (*names, ic.NATIVE):
            # h200_minilm's max_batch_size is 64: native batches as much
            edit = (set_max_batch_size(64) if name == ic.NATIVE and profile == "h200_minilm"
                    else None)
            edit_model(os.path.join(repo, name), params={"hardware_profile": profile}, edit=edit)
    return [*names, ic.NATIVE]


@dataclass
class Entry:
    model: str
    throughput: float | None = None
    stub_us: float | None = None  # whole stub CPU per answered request (/proc)
    open_loop_stub_us: float | None = None  # the same at OPEN_LOOP_RPS (open loop)
    requests: int = 0  # the plugin's own count at unload
    threads_s: dict[str, float] = field(default_factory=dict)  # plugin's account
    stages_s: dict[str, dict[str, float]] = field(default_factory=dict)  # thread: stage


def _unload_all(server: TritonServer, models: list[str]) -> None:
    for model in models:
        server.unload_model(model)


def _thread_account(log: str, model: str) -> tuple[dict[str, float], int]:
    """The model's unload line: {thread: CPU s}, requests."""
    with open(log, errors="replace") as fh:
        lines = [x for x in fh if f"{model}: unloading; thread CPU s:" in x]
    if not lines:
        return {}, 0
    text = lines[-1].split("thread CPU s:", 1)[1]
    parts = dict(p.split("=", 1) for p in text.split(";")[0].split())
    requests = int(text.split("requests=", 1)[1].split(";")[0]) if "requests=" in text else 0
    return {k: float(v) for k, v in parts.items()}, requests


def stage_split(path: str) -> dict[str, float]:
    """CPU seconds per stage in one pstats file (plus "other": the rest of the thread, and
    "total"); {} for an empty profile."""
    try:
        stats = pstats.Stats(path)
    except TypeError:  # an empty profile (a thread this intake does not run)
        return {}
    entries = stats.stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    total = sum(tt for (_, _, tt, _, _) in entries.values())
    stage_of = {fn: stage for stage, fns in STAGES.items() for fn in fns}
    out = {stage: 0.0 for stage in STAGES}
    for key, (_, _, _, ct, callers) in entries.items():
        stage = stage_of.get(key[2])
        if stage is None:
            continue
        # Count the calls made from outside every stage's entry functions: one entered
        # straight from another stage's entry is that stage's (no double counting).
        # (Calls from outside the profiled frames have no caller entry: subtract instead.)
        out[stage] += ct - sum(edge[3] for caller, edge in callers.items()
                               if caller[2] in stage_of)
    out["other"] = max(0.0, total - sum(out.values()))
    out["total"] = total
    return out


def measure(setting: str, measurement_ms: int, concurrency: int, tmp: str) -> list[Entry]:
    time_scale, flat, profile = SETTINGS[setting]
    entries: dict[str, Entry] = {}
    for profiled in (False, True):
        repo = os.path.join(tmp, f"{setting}-{'profiled' if profiled else 'plain'}")
        os.makedirs(repo)
        models = build_repository(repo, time_scale, flat, profile)
        log = repo + ".log"
        prof_dir = os.path.join(tmp, f"{setting}-pstats")
        if profiled:
            os.environ[CPROFILE_ENV] = prof_dir
        try:
            with TritonServer(repo, log_path=log, extra_args=(
                    "--model-control-mode=explicit", "--load-model=*")) as server:
                for model in models:
                    row = ic._measure(server, model, 0, measurement_ms,
                                      concurrency=concurrency)
                    e = entries.setdefault(model, Entry(model))
                    if not profiled:
                        e.throughput = row.result.throughput if row.result else None
                        e.stub_us = row.stub_us_per_request
                        e.open_loop_stub_us = ic._measure(server, model, OPEN_LOOP_RPS,
                                                          measurement_ms).stub_us_per_request
                    print(f"{setting} {'profiled' if profiled else 'plain'} {model}: "
                          f"{row.result.throughput if row.result else row.error} req/s, "
                          f"stub {row.stub_us_per_request} us/request", flush=True)
                _unload_all(server, models)
        finally:
            os.environ.pop(CPROFILE_ENV, None)
        for model in models:
            threads, requests = _thread_account(log, model)
            e = entries[model]
            if not profiled:
                e.threads_s, e.requests = threads, requests
            else:
                for thread in ("execute", "loop", "respond"):
                    path = os.path.join(prof_dir, f"{model}.{thread}.pstats")
                    if os.path.exists(path):
                        split = stage_split(path)
                        if split and split["total"] > 0:
                            e.stages_s[thread] = {k: v / max(1, requests) * 1e6
                                                  for k, v in split.items()}
    return list(entries.values())


def ratio(x: float | None, base: float | None) -> float | None:
    return x / base if x and base else None


def report(setting: str, entries: list[Entry]) -> list[str]:
    time_scale, flat, profile = SETTINGS[setting]
    what = ("flat GPU-like t4 (fixed 3.9 ms, 0.0006 ms/token)" if flat else
            profile or "t4") + f", time scale {time_scale:g}"
    native = next((e for e in entries if e.model == ic.NATIVE), None)
    lines = [f"### {setting}: EMULATED {what}", "",
             "| model | closed-loop req/s | x native | stub CPU (us/request) | x native | "
             "execute() thread | scheduler thread | responders | "
             f"stub CPU at {OPEN_LOOP_RPS:g} req/s (us/request) | x native |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in entries:
        per = {k: 1e6 * v / e.requests for k, v in e.threads_s.items()} if e.requests else {}
        name = e.model + (" (shipped default)" if e.model.endswith(SHIPPED_DEFAULT) else "")
        peak_x = ratio(e.throughput, native.throughput if native else None)
        cpu_x = ratio(e.stub_us, native.stub_us if native else None)
        threads = " | ".join(fmt_num(per.get(t), ".0f") for t in ("execute", "loop", "respond"))
        open_x = ratio(e.open_loop_stub_us, native.open_loop_stub_us if native else None)
        lines.append(f"| {name} | {fmt_num(e.throughput, '.0f')} | {fmt_num(peak_x, '.2f')} | "
                     f"{fmt_num(e.stub_us, '.0f')} | {fmt_num(cpu_x, '.2f')} | {threads} | "
                     f"{fmt_num(e.open_loop_stub_us, '.0f')} | {fmt_num(open_x, '.2f')} |")
    lines += ["", "Stages, us of CPU per request under cProfile (each thread's CPU clock; "
              "cProfile slows the stub, so compare stages, not totals with the table above):",
              "", "| model | thread | " + " | ".join(STAGES) + " | other | total |",
              "|---|---|" + "---:|" * (len(STAGES) + 2)]
    for e in entries:
        for thread, split in e.stages_s.items():
            lines.append(f"| {e.model} | {thread} | "
                         + " | ".join(fmt_num(split.get(s), '.0f') for s in STAGES)
                         + f" | {fmt_num(split.get('other'), '.0f')} | {fmt_num(split.get('total'), '.0f')} |")
    return lines + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeline", default="",
                        help="only summarise the per-call timelines in this folder "
                             "(EXPLICIT_BATCHING_TIMELINE_DIR of a run) and print the table")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--measurement-ms", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    if args.timeline:
        print("\n".join(timeline_table(args.timeline)))
        return 0
    blocks = []
    with tempfile.TemporaryDirectory(prefix="ledger-") as tmp:
        for setting in args.settings:
            blocks += report(setting, measure(setting, args.measurement_ms,
                                              args.concurrency, tmp))
    command = ("scripts/host_ledger.py --settings " + " ".join(args.settings)
               + f" --measurement-ms {args.measurement_ms}")
    text = "\n".join([
        f"# Host-cost ledger{': ' + args.title if args.title else ''}", "",
        f"Generated by `.venv/bin/python {command}` on this machine (2 shared cores, no "
        "GPU: the device is EMULATED). Closed loop, perf_analyzer concurrency "
        f"{args.concurrency}, then open loop at {OPEN_LOOP_RPS:g} req/s (Poisson). Stub CPU: the model's whole Python-stub process over the run "
        "(/proc), per request Triton answered. The thread columns are the plugin's own "
        "account at unload (CPU s of each thread over the run, per request it counted): "
        "execute() is Triton's calling thread, the scheduler thread decides and runs "
        "batches (release, gather), the responders build and send responses. Intake hold "
        "runs everything on the execute() thread. Native has no such account.", "",
        *blocks])
    write_page(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
