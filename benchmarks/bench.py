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
idle         ``benchmarks/bench_idle.py``: device idle while requests wait, from each
             model's per-call timeline, on a server of its own per profile (h200_minilm and
             flat, time scale 1): perf_analyzer at 0.2/0.5/0.8/0.94 of native's closed-loop
             peak, the shipped default and native alternating. About 6 min.

One block alone, e.g. ``python scripts/bench.py --quick --blocks h200 --out-dir /tmp/b``
(``--out-dir`` keeps a trial run out of results/bench/).

The EMULATED device sleeps for each batch's modelled cost times the time scale. A time
scale puts each profile's capacity near ``TARGET_CAPACITY_RPS`` (what 2 cores can drive);
SLA classes are multiplied by the same factor. Capacity (100 % load) is
``simulation.simulator.capacity_rps``: the length mix sorted and cut into full batches
(no padding waste), requests / device time. Every emulated segment is also simulated
(``simulation.simulator``) on the same arrivals; the report puts the prediction beside
the measurement.

Writes results/bench/report.md, bench.json and plots. Exit status 0 when the run completed
(missed targets are reported, not failed); 1 when a segment lost a request.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import shlex
import subprocess
import sys
import time

from benchmarks.bench_blocks import (run_decision_bench, run_emulated_block, run_minilm_block,
                                     run_ts1_block)
from benchmarks.bench_h200 import run_h200_block
from benchmarks.bench_idle import run_idle_block
from benchmarks.bench_report_h200 import compact_emulated
from benchmarks.bench_server import Bench
from benchmarks.bench_setup import (CAPACITY_SAMPLE, COST_MODES, EXPLICIT, EXPLICIT_INTAKE,
                                    MINI_EXPLICIT, MINI_NATIVE, NATIVE, OUT_DIR, PROFILES,
                                    REPO_ROOT, TARGET_CAPACITY_RPS, log)
from server_ops.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer


BLOCKS = ("ts1", "emulated", "minilm", "decision", "h200", "idle")
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
    return {"source": f"git show HEAD:{path}", "commit": commit,
            "started": data.get("started"), "quick": data.get("quick", False),
            "emulated": compact_emulated(data.get("emulated", []))}


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
    parser.add_argument("--hand-over", type=int, default=0, metavar="N",
                        help="intake hold's hand-over (Triton's max_batch_size in front of "
                             "the plugin) in every block (default: the shipped one; another "
                             "is a variant, named so in the report)")
    parser.add_argument("--render", metavar="PICKLE",
                        help="only rewrite the report from a previous run's bench.pickle")
    argv = sys.argv[1:] if argv is None else argv  # the command the report names
    args = parser.parse_args(argv)
    if args.hand_over and args.intake != EXPLICIT_INTAKE:
        parser.error(f"--hand-over is intake {EXPLICIT_INTAKE}'s; --intake {args.intake} "
                     "has its own")
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
                     "baseline": baseline, "explicit_intake": args.intake,
                     "explicit_hand_over": args.hand_over or None}
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
            bench = Bench(server, models, args.intake, args.hand_over or None)
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
    if "idle" in args.blocks:  # servers of its own, with the per-call timelines on
        results["idle"] = run_idle_block(args.quick)
    if "decision" in args.blocks:
        results["decision"] = run_decision_bench(args.quick, args.out_dir)
    results["wall_s"] = time.monotonic() - started
    with open(os.path.join(args.out_dir, "bench.pickle"), "wb") as fh:
        pickle.dump(results, fh)  # for --render after a change to the report only
    bench_report.write(results, args.out_dir)
    log(f"wrote {args.out_dir}/report.md in {results['wall_s']:.0f} s")
    return 1 if results.get("lost") else 0
