"""Simulated comparison of batching policies on the EMULATED device: writes
results/simulator_report.md.

For each hardware profile (default t4 and a100): Poisson arrivals at fractions of the
device's capacity, long-tailed lengths in 16..512, SLA classes 50/100/200 ms in equal
shares, one fixed seed. Policies:

explicit      scheduler_core.scheduler.Scheduler.from_profile(profile)
native        Triton's dynamic batcher (one instance, ragged), with the max_queue_delay_us
              from NATIVE_DELAYS_US that gives the best goodput at that load
fixed-window  FixedWindow(base_window_ms of the profile)
adaptive      AdaptiveCostBatcher (BentoML-style a*n+b fit, deadline shedding)

The simulation is deterministic: the same arguments give the same report. Simulated
requests per wall-clock second are printed (they depend on the machine, so they stay out
of the report).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from simulation import workload as W
from simulation import baselines
from scheduler_core.profile_files import load_profile, profile_path
from simulation.simulator import capacity_rps, device_ms, simulate

PROFILE_DIR = os.path.join(REPO_ROOT, "model_repository", "emulated_explicit", "profiles")
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "simulator_report.md")
NATIVE_DELAYS_US = (0, 500, 1000, 2000, 5000, 10000)
SLA_CLASSES_MS = (50.0, 100.0, 200.0)
LENGTHS = W.LogNormalLengths(median=64.0, sigma=0.8, lo=16, hi=512)
CAPACITY_SAMPLE = 200_000
POLICY_ORDER = ("explicit", "native", "fixed-window", "adaptive")


@functools.lru_cache(maxsize=4)
def _profile(name: str):
    return load_profile(profile_path(PROFILE_DIR, name))


def capacities(name: str, seed: int) -> tuple[float, float]:
    """(capacity, FIFO capacity) in requests/s. Capacity: sorted lengths cut into full
    batches (the reference for load levels); FIFO: the same lengths in arrival order cut
    into max_batch_size batches, which is what a FIFO batcher can reach at best."""
    p = _profile(name)
    lengths = W.sample_lengths(CAPACITY_SAMPLE, seed, LENGTHS)
    cm, mode, scale = p.cost_model, p.emulation.cost_mode, p.emulation.time_scale
    cap = capacity_rps(cm, mode, scale, lengths, p.scheduler.max_batch_size,
                       p.scheduler.max_batch_tokens)
    mb = p.scheduler.max_batch_size
    fifo_ms = sum(device_ms(cm, lengths[i:i + mb], mode, scale)
                  for i in range(0, len(lengths), mb))
    return cap, len(lengths) / (fifo_ms / 1000.0)


@functools.lru_cache(maxsize=2)
def _arrivals(name: str, rate_rps: float, duration_s: float, seed: int):
    return W.generate(W.Poisson(rate_rps), duration_s, seed, LENGTHS, W.SlaMix(SLA_CLASSES_MS))


def make_policy(name: str, policy: str, delay_us: int | None):
    return baselines.make_policy(policy, _profile(name), native_delay_us=delay_us or 0)


def run_one(task: tuple) -> dict:
    """One simulation; returns plain numbers (small to send back from a worker)."""
    name, load, rate_rps, duration_s, seed, policy, delay_us = task
    arrivals = _arrivals(name, rate_rps, duration_s, seed)
    p = _profile(name)
    r = simulate(make_policy(name, policy, delay_us), arrivals, p.cost_model,
                 p.emulation.cost_mode, p.emulation.time_scale, name=policy,
                 wall_clock=time.perf_counter)
    return {
        "profile": name, "load": load, "policy": policy, "delay_us": delay_us,
        "arrivals": r.arrivals, "goodput": r.goodput_rps, "attainment": r.sla_attainment,
        "throughput": r.throughput_rps, "rejected": r.rejected,
        "per_class": {sla: (c.p50_ms, c.p99_ms, c.attainment) for sla, c in r.per_class.items()},
        "fluctuation": r.utilization_fluctuation, "busy": r.mean_busy_fraction,
        "padding": r.padding_waste, "batch": r.mean_batch_size,
        "zones": r.zones, "wall_s": r.wall_s,
    }


def _ms(v: float) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def table(rows: list[dict]) -> list[str]:
    head = ["load", "policy", "goodput (req/s)", "SLA attainment"]
    head += [f"P50 / P99 {c:g} ms class (ms)" for c in SLA_CLASSES_MS]
    head += ["util. fluctuation", "padding waste", "mean batch", "rejected"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        policy = r["policy"] if r["policy"] != "native" else f"native ({r['delay_us']} us)"
        cells = [f"{r['load']:.0%}", policy, f"{r['goodput']:,.0f}", f"{r['attainment']:.1%}"]
        for c in SLA_CLASSES_MS:
            p50, p99, _ = r["per_class"].get(c, (math.nan, math.nan, math.nan))
            cells.append(f"{_ms(p50)} / {_ms(p99)}")
        cells += [f"{r['fluctuation']:.3f}", f"{r['padding']:.1%}", f"{r['batch']:.1f}",
                  f"{r['rejected']:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", nargs="+", default=["t4", "a100"])
    parser.add_argument("--loads", nargs="+", type=float, default=[0.1, 0.2, 0.4, 0.6, 0.7, 0.8, 0.9])  # 10-20%: below the FIFO knee
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (results do not depend on it)")
    parser.add_argument("--policies", nargs="+", default=list(POLICY_ORDER),
                        choices=POLICY_ORDER)
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    caps = {name: capacities(name, args.seed) for name in args.profiles}
    tasks = []
    for name in args.profiles:
        for load in args.loads:
            rate = load * caps[name][0]
            for policy in args.policies:
                delays = NATIVE_DELAYS_US if policy == "native" else (None,)
                for delay in delays:
                    tasks.append((name, load, rate, args.duration_s, args.seed, policy, delay))
    # Longest first (a100, high load) keeps the workers evenly busy.
    order = sorted(range(len(tasks)), key=lambda i: -tasks[i][2])
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            done = list(pool.map(run_one, [tasks[i] for i in order], chunksize=1))
    else:
        done = [run_one(tasks[i]) for i in order]
    results = [None] * len(tasks)
    for i, res in zip(order, done):
        results[i] = res

    # Speed: simulated requests per wall-clock second, per policy, summed over runs.
    speed: dict[str, list[float]] = {}
    for r in results:
        acc = speed.setdefault(r["policy"], [0, 0.0])
        acc[0] += r["arrivals"]
        acc[1] += r["wall_s"]
    print("simulated requests per wall-clock second (per worker process, summed over runs):")
    for policy, (reqs, wall) in speed.items():
        print(f"  {policy:13s} {reqs / wall:>12,.0f} req/s  ({reqs:,} requests in {wall:.1f} s)")

    command = ".venv/bin/python scripts/simulate_report.py"
    if argv is None:
        argv = sys.argv[1:]
    if argv:
        command += " " + " ".join(shlex.quote(a) for a in argv)
    out = [
        "# Simulator report: batching policies on the emulated device",
        "",
        f"Regenerate with: `{command}` (from the repository root).",
        "",
        "**The device is the EMULATED cost model** (each profile's `cost_model` formula "
        "times `emulation.time_scale`, exactly what `EmulatedDevice` sleeps), simulated by "
        "`simulation/simulator.py`: one model instance, one batch at a time. These are "
        "not measurements of real hardware.",
        "",
        f"Workload: Poisson arrivals, {args.duration_s:g} simulated seconds per run, "
        f"lengths log-normal around 64 tokens clipped to 16..512, SLA classes "
        f"{'/'.join(f'{c:g}' for c in SLA_CLASSES_MS)} ms in equal shares, seed "
        f"{args.seed}. Load levels are fractions of the capacity below.",
        "",
        "Capacity: `capacity_rps` — "
        f"{CAPACITY_SAMPLE:,} lengths from the same mix, sorted and cut into consecutive "
        "full batches within the profile's `max_batch_size` and `max_batch_tokens` (padded "
        "tokens); capacity = requests / total device time. Because the batches hold similar "
        "lengths this is an upper bound; the FIFO figure (the same lengths in arrival order, "
        "batches of `max_batch_size`, what a FIFO batcher reaches at best) is given for "
        "reference.",
        "",
        "Policies: **explicit** = `Scheduler.from_profile(profile)` (as it stands in this "
        "tree); **native** = Triton's dynamic batcher model (`TritonDynamicBatcher`, one "
        "instance, ragged, no preferred sizes, unbounded queue) with the "
        f"`max_queue_delay_us` from {{{', '.join(map(str, NATIVE_DELAYS_US))}}} that gives "
        "the best goodput at that load (shown in brackets); **fixed-window** = "
        "`FixedWindow(base_window_ms)`; **adaptive** = `AdaptiveCostBatcher` (BentoML-style "
        "`a*n+b` fit, sheds requests that cannot meet their deadline). All use the "
        "profile's `max_batch_size`; all but native also its `max_batch_tokens` and "
        "`max_queued_requests`.",
        "",
        "Columns: goodput = requests finished within their SLA per second; SLA attainment = "
        "met / all arrivals; P50 / P99 = latency of completed requests per SLA class "
        "(rejected ones have none); util. fluctuation = standard deviation of the "
        "per-second device busy fraction; padding waste = (padded - real tokens) / padded "
        "tokens over all batches; rejected = queue full, shed, or never served.",
        "",
    ]
    for name in args.profiles:
        p = _profile(name)
        cap, fifo = caps[name]
        s = p.scheduler
        out += [
            f"## {name}: {p.description}",
            "",
            f"- Capacity: **{cap:,.0f} req/s** (max_batch_size {s.max_batch_size}, "
            f"max_batch_tokens {s.max_batch_tokens}, cost mode {p.emulation.cost_mode}, "
            f"time_scale {p.emulation.time_scale:g}); FIFO full batches: {fifo:,.0f} req/s "
            f"({fifo / cap:.0%} of capacity).",
        ]
        above = [load for load in args.loads if load * cap > fifo]
        if above:
            out.append(f"- Offered load is above the FIFO figure at "
                       f"{', '.join(f'{x:.0%}' for x in above)}: there, a batcher that takes "
                       f"requests in arrival order (native, fixed-window, adaptive) is "
                       f"overloaded whatever its window.")
        out.append("")
        rows = []
        for load in args.loads:
            here = [r for r in results if r["profile"] == name and r["load"] == load]
            natives = [r for r in here if r["policy"] == "native"]
            for policy in args.policies:
                rows.append(max(natives, key=lambda r: (r["goodput"], -r["delay_us"]))
                            if policy == "native"
                            else next(r for r in here if r["policy"] == policy))
        out += table(rows)
        out += [""]
        if "native" not in args.policies:
            continue
        native_lines = []
        for load in args.loads:
            natives = sorted((r for r in results if r["profile"] == name and r["load"] == load
                              and r["policy"] == "native"), key=lambda r: r["delay_us"])
            native_lines.append(f"| {load:.0%} | " + " | ".join(
                f"{r['goodput']:,.0f}" for r in natives) + " |")
        out += [
            "Native goodput (req/s) by `max_queue_delay_us`:",
            "",
            "| load | " + " | ".join(f"{d} us" for d in NATIVE_DELAYS_US) + " |",
            "|" + "---|" * (len(NATIVE_DELAYS_US) + 1),
            *native_lines,
            "",
        ]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out))
    print(f"wrote {args.out} ({len(tasks)} runs, {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
