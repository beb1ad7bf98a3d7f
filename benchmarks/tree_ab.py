"""This working tree's plugin against a git revision's, and native, in one server.

A host-path change is smaller than this 2-core machine's noise between runs; in one server,
alternated round by round, the ratios to native are comparable. ``--baseline REV`` is
checked out in a temporary git worktree; its model copy imports the plugin from there (each
model is a stub process of its own). The plugin runs as ``scripts/intake_check.py``'s hold
variant (``serve_late``), on the EMULATED device; perf_analyzer closed loop, 64 in flight.

    .venv/bin/python scripts/tree_ab.py --baseline HEAD [--time-scale 0.01]
        [--profile h200_minilm | flat] [--rounds 5] [--measurement-ms 5000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile

from benchmarks import intake_check as ic
from benchmarks.repository import copy_model, edit_model, set_max_batch_size
from server_ops.launcher import TritonServer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BASELINE = "explicit_hold_baseline"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD")
    parser.add_argument("--time-scale", type=float, default=0.01)
    parser.add_argument("--profile", default="h200_minilm",
                        help="a hardware profile, or 'flat' (the bench's GPU-like t4)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--measurement-ms", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tree-ab-") as tmp:
        tree = os.path.join(tmp, "baseline")
        subprocess.run(["git", "-C", REPO_ROOT, "worktree", "add", "--detach", "-q", tree,
                        args.baseline], check=True)
        try:
            return run(args, tmp, tree)
        finally:
            subprocess.run(["git", "-C", REPO_ROOT, "worktree", "remove", "--force", tree],
                           check=False)


def run(args, tmp: str, tree: str) -> int:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    flat = args.profile == "flat"
    hold = ic._variant(repo, "hold", args.time_scale, flat)
    ic._native(repo, hold, args.time_scale, flat)
    copy_model(hold, repo, BASELINE, source=repo)
    with open(os.path.join(repo, BASELINE, "1", "model.py"), "w") as fh:
        fh.write(f"import sys\nsys.path.insert(0, {tree!r})\n"
                 "from triton_backend.triton_models import ExplicitModel as TritonPythonModel"
                 "  # noqa\n")
    models = [hold, BASELINE, ic.NATIVE]
    for name in models:
        edit = set_max_batch_size(64) if name == ic.NATIVE else None
        edit_model(os.path.join(repo, name), edit=edit,
                   params={} if flat else {"hardware_profile": args.profile})
    rows: dict[str, list[tuple[float, float]]] = {m: [] for m in models}
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log"), extra_args=(
            "--model-control-mode=explicit", "--load-model=*")) as server:
        for r in range(args.rounds):
            for model in models[r % 3:] + models[:r % 3]:
                row = ic._measure(server, model, 0, args.measurement_ms, concurrency=64)
                rows[model].append((row.result.throughput if row.result else 0.0,
                                    row.stub_us_per_request or 0.0))
                print(f"round {r} {model}: {rows[model][-1][0]:.0f} req/s, stub "
                      f"{rows[model][-1][1]:.0f} us/request", flush=True)
    native = [x for x, _ in rows[ic.NATIVE]]
    print(f"\n{args.profile} EMULATED, time scale {args.time_scale:g}; {hold} = this tree, "
          f"{BASELINE} = {args.baseline}\n")
    print("| model | req/s per round | median | ratio to native per round | median ratio "
          "| stub us/request, median |")
    print("|---|---|---:|---|---:|---:|")
    for model in models:
        ratios = [x / n for (x, _), n in zip(rows[model], native) if n]
        print(f"| {model} | {', '.join(f'{x:.0f}' for x, _ in rows[model])} | "
              f"{statistics.median(x for x, _ in rows[model]):.0f} | "
              f"{', '.join(f'{q:.2f}' for q in ratios)} | {statistics.median(ratios):.2f} | "
              f"{statistics.median(y for _, y in rows[model]):.0f} |")
    return 0
