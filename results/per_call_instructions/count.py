"""An experiment's script, kept with its page (not a tool): how many machine instructions
one ``execute()`` call costs, counted by valgrind's callgrind (deterministic: no clock,
no other process, no cache state in the count), for the shipped plugin (intake hold) and
native's model class, in process on the fake ``triton_python_backend_utils``
(``benchmarks.call_path``'s models), h200_minilm at time scale 1 (the device's sleeps are
not instructions; its deterministic embeddings are, for both), calls of PER requests of
the bench mix, 1.5 ms apart. A count is the difference between a run of CALLS measured
calls and one of none, over the same 100 warm-up calls, so start-up and warm-up cancel.
The process runs on a virtual clock that moves only with the device's sleeps and the
calls' spacing, so every run takes the same decisions; the plugin's metrics thread (its
publishing, on the real clock) is stopped and not counted.

``--parts`` also counts the plugin's calls of one request with one of its parts replaced
by a no-op, each part's cost being the difference from the whole (a part's callees are
in its figure). From the repository root (valgrind on PATH; about 10 minutes):

    .venv/bin/python results/per_call_instructions/count.py [--parts]
"""
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

PYTHON = sys.executable
# The plugin's parts a no-op replaces (module, class, function), for --parts.
PARTS = {
    "a batch's deferred feedback (Runner._observe: the metrics' counts and "
    "Engine.observed)": [("triton_backend.runner", "Runner", "_observe")],
    "of it, the cost table's refit (CostEstimator.observe)":
        [("scheduler_core.cost_model", "CostEstimator", "observe")],
    "of it, the latency and SLA windows (Controller.batch_observed)":
        [("scheduler_core.controller", "Controller", "batch_observed")],
    "of it, the metrics' counts (ControlMetrics.on_batch, on_served)":
        [("triton_backend.control_metrics", "ControlMetrics", "on_batch"),
         ("triton_backend.control_metrics", "ControlMetrics", "on_served")],
    "the device's end for the engine (Engine.ended: busy time, ControlState)":
        [("scheduler_core.engine", "Engine", "ended")],
    "the control loop's periods (Controller.tick: perception, decision)":
        [("scheduler_core.controller", "Controller", "tick")],
    "the call's timeline record (Timeline.end)":
        [("triton_backend.timeline", "Timeline", "end")],
    "the engine's entries after the launch, all three (Engine.took_launched, Engine.ended, "
    "Runner._observe)": [("scheduler_core.engine", "Engine", "took_launched"),
                         ("scheduler_core.engine", "Engine", "ended"),
                         ("triton_backend.runner", "Runner", "_observe")],
}

# The measured process: the model, its warm-up, then CALLS calls (argv: which, per, calls,
# and the parts to replace by no-ops as module:Class.function).
CHILD = r'''
import importlib, os, sys, time
# A virtual clock, so every run takes the same decisions: it moves only where the device
# sleeps and by GAP_S between calls (the arrivals' spacing), never with the host's work.
NOW = [1000.0]
GAP_S = 0.0015
def _sleep(seconds):
    NOW[0] += max(seconds, 0.0)
time.monotonic = time.perf_counter = lambda: NOW[0]
time.sleep = _sleep
sys.path.insert(0, os.getcwd())
import benchmarks.call_path as cp
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm", "time_scale": "1",
             "control.refusal_late_share": "0.2", "control.infeasible_policy": "reject"}
which, per, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for spec in sys.argv[4:]:
    module, _, rest = spec.partition(":")
    owner, _, name = rest.partition(".")
    setattr(getattr(importlib.import_module(module), owner), name, lambda *a, **k: None)
model = cp.explicit_model() if which == "explicit" else cp.native_model()
if which == "explicit":  # its metrics thread runs on the real clock: stopped, not counted
    model._metrics_stop.set()
    model._metrics_thread.join()
work = cp.calls(100 + calls, per, which == "explicit")
for batch in work:
    model.execute(batch)
    NOW[0] += GAP_S
'''


def instructions(which: str, per: int, calls: int, noops: tuple = ()) -> int:
    """callgrind's instruction count of the whole child process."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", PYTHON, "-c", CHILD,
         which, str(per), str(calls), *noops],
        capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def per_call(which: str, per: int, calls: int, noops: tuple = ()) -> float:
    """Instructions one measured call costs (the run of ``calls`` less the run of none)."""
    with ThreadPoolExecutor(2) as pool:
        none, measured = pool.map(lambda n: instructions(which, per, n, noops), (0, calls))
    return (measured - none) / calls


def main() -> None:
    print("| model class | requests a call | instructions a call | a request |")
    print("|---|---:|---:|---:|")
    for per, calls in ((1, 600), (13, 200), (40, 80)):
        for which in ("explicit", "native"):
            ir = per_call(which, per, calls)
            print(f"| {which} | {per} | {ir:,.0f} | {ir / per:,.0f} |", flush=True)
    if "--parts" not in sys.argv:
        return
    whole = per_call("explicit", 1, 600)
    print(f"\nexplicit, calls of one request: {whole:,.0f} instructions a call\n")
    print("| part (a no-op in its place) | instructions a call | share of the call |")
    print("|---|---:|---:|")
    for label, specs in PARTS.items():
        noops = tuple(f"{m}:{c}.{f}" for m, c, f in specs)
        cost = whole - per_call("explicit", 1, 600, noops)
        print(f"| {label} | {cost:,.0f} | {cost / whole:.0%} |", flush=True)


if __name__ == "__main__":
    main()
