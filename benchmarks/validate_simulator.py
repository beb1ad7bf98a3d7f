"""Validate the simulator's model of Triton's dynamic batcher against a real tritonserver.

The same Poisson trace is replayed by perf_analyzer (``--request-intervals``, per-request
timestamps from ``--profile-export-file``) against ``emulated_native`` (Triton's own
dynamic batcher over the EMULATED t4 device, slowed by one uniform time scale so that the
device, not this 2-core machine's HTTP path, dominates), and simulated with
``TritonDynamicBatcher`` on the very send times and lengths perf_analyzer recorded.
Writes a markdown table: real vs simulated P50/P99 at each load, and the load
generator's send lag (how far perf_analyzer's sends fell behind the trace).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from simulation import workload as W
from simulation.baselines import TritonDynamicBatcher
from scheduler_core.profile_files import load_profile
from simulation.simulator import fifo_capacity_rps, simulate
from scheduler_core.stats import percentile
from operator_tools.perf_analyzer import WRAPPER, read_profile_export
from operator_tools.records import RequestRecord
from server_ops.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer

PROFILE = os.path.join(DEFAULT_MODEL_REPOSITORY, "emulated_explicit", "profiles", "t4.yaml")
MAX_QUEUE_DELAY_US = 2000  # as shipped in model_repository/emulated_native/config.pbtxt
MAX_BATCH_SIZE = 32


def fifo_capacity_of_profile(time_scale: float, seed: int) -> float:
    """What a FIFO batcher reaches at best: lengths in arrival order, full batches."""
    p = load_profile(PROFILE)
    lengths = W.sample_lengths(50_000, seed)
    return fifo_capacity_rps(p.cost_model, "padded", time_scale, lengths, MAX_BATCH_SIZE)


def prepare_repository(workdir: str, time_scale: float) -> str:
    repo = os.path.join(workdir, "model_repository")
    shutil.copytree(DEFAULT_MODEL_REPOSITORY, repo,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    with open(os.path.join(repo, "emulated_native", "config.pbtxt"), "a") as fh:
        fh.write(f'parameters {{ key: "time_scale" value: {{ string_value: "{time_scale:g}" }} }}\n')
    return repo


def replay(url: str, arrivals, workdir: str, tag: str, measurement_ms: int
           ) -> list[RequestRecord]:
    """Replay ``arrivals`` with perf_analyzer; returns the exported per-request records
    (sorted by send time)."""
    intervals = os.path.join(workdir, f"{tag}.intervals")
    data = os.path.join(workdir, f"{tag}.json")
    export = os.path.join(workdir, f"{tag}.export.json")
    W.write_request_intervals(arrivals, intervals)
    W.write_input_data(arrivals, data, include_sla=False)
    cmd = [WRAPPER, "-m", "emulated_native", "-u", url, "--async",
           "--request-intervals", intervals, "--input-data", data,
           "--measurement-interval", str(measurement_ms), "--max-trials", "1",
           "--profile-export-file", export]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if not os.path.exists(export):
        raise RuntimeError(f"perf_analyzer failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return read_profile_export(export)[1]


def compare(records: list[RequestRecord], arrivals, time_scale: float) -> dict:
    records = [r for r in records if r.response_ns is not None]
    t0 = records[0].sent_ns
    sent = [(r.sent_ns - t0) / 1e9 for r in records]
    lengths = [len(r.input_ids) for r in records]
    real = sorted(r.latency_ms for r in records)
    # Send lag: actual send offsets against the trace's own offsets from the first send.
    trace = [a.time_s for a in arrivals]
    lag_ms = [max(0.0, (s - (trace[i % len(trace)] - trace[0])) * 1000.0)
              for i, s in enumerate(sent[:len(trace)])]
    p = load_profile(PROFILE)
    sim_arrivals = [W.Arrival(t, n, 1e9) for t, n in zip(sent, lengths)]
    result = simulate(TritonDynamicBatcher(MAX_BATCH_SIZE, MAX_QUEUE_DELAY_US), sim_arrivals,
                      p.cost_model, "padded", time_scale)
    sim = sorted((f - a) * 1000.0 for a, f in zip(result.arrival_s, result.finish_s))
    return {"requests": len(records),
            "real_p50": percentile(real, 50), "real_p99": percentile(real, 99),
            "sim_p50": percentile(sim, 50), "sim_p99": percentile(sim, 99),
            "lag_mean": sum(lag_ms) / len(lag_ms), "lag_p99": percentile(lag_ms, 99)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=5.0)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.35, 0.7],
                        help="fractions of the FIFO capacity")
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "results", "simulator_validation.md"))
    args = parser.parse_args()

    capacity = fifo_capacity_of_profile(args.time_scale, args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        repo = prepare_repository(workdir, args.time_scale)
        log = os.path.join(workdir, "server.log")
        with TritonServer(repo, log_path=log, extra_args=(
                "--model-control-mode=explicit", "--load-model=emulated_native")) as server:
            for i, load in enumerate(args.loads):
                rate = load * capacity
                arrivals = W.generate(W.Poisson(rate), args.duration_s, args.seed + i)
                records = replay(server.http_url, arrivals, workdir, f"load{i}",
                                 int(args.duration_s * 1000 * 0.8))
                row = compare(records, arrivals, args.time_scale)
                row.update(load=load, rate=rate)
                rows.append(row)
                print(row, flush=True)

    lines = [
        "# Simulator validation: Triton's dynamic batcher, simulated vs real",
        "",
        f"Regenerate with: `.venv/bin/python scripts/validate_simulator.py` "
        f"(time scale {args.time_scale:g}, {args.duration_s:g} s per load, seed {args.seed}).",
        "",
        f"Real: `emulated_native` (Triton 2.51 dynamic batcher, `max_queue_delay_microseconds` "
        f"{MAX_QUEUE_DELAY_US}, max batch {MAX_BATCH_SIZE}, ragged) on the **EMULATED** t4 "
        f"device slowed {args.time_scale:g}x (one uniform time scale), Poisson arrivals replayed "
        f"by perf_analyzer `--request-intervals`, latencies from its `--profile-export-file` "
        f"(client side: includes HTTP and Python-backend overhead). Simulated: "
        f"`TritonDynamicBatcher` on the send times and lengths perf_analyzer recorded. "
        f"Load = fraction of the FIFO capacity ({capacity:.1f} req/s at this time scale: "
        f"lengths in arrival order, full batches).",
        "",
        "| load | rate (req/s) | requests | real P50 (ms) | sim P50 (ms) | P50 sim/real | "
        "real P99 (ms) | sim P99 (ms) | P99 sim/real | within 20% | send lag mean / P99 (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        q50, q99 = r["sim_p50"] / r["real_p50"], r["sim_p99"] / r["real_p99"]
        ok = abs(q50 - 1) <= 0.2 and abs(q99 - 1) <= 0.2
        lines.append(
            f"| {r['load']:.0%} | {r['rate']:.1f} | {r['requests']} | {r['real_p50']:.1f} | "
            f"{r['sim_p50']:.1f} | {q50:.2f} | {r['real_p99']:.1f} | {r['sim_p99']:.1f} | "
            f"{q99:.2f} | {'yes' if ok else 'NO'} | {r['lag_mean']:.2f} / {r['lag_p99']:.2f} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
