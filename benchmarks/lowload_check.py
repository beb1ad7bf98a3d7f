"""Low-load check: explicit P50 against Triton's native batcher, and that the
worth-its-wait rule costs nothing at higher load. Simulator only, deterministic.

For each profile, cost mode (padded, ragged) and arrival process (Poisson, bursty) it runs
the same trace through

* explicit, before: ``Scheduler.from_profile`` with ``wait_ms_per_saved_device_ms`` at its
  largest value, so a partial batch always waits for the elastic window (the behaviour
  before the worth-its-wait rule);
* explicit, after: the profile as shipped;
* native: ``TritonDynamicBatcher`` at ``max_queue_delay_us`` 0 / 500 / 1000 / 2000;

and prints P50 latency (all completed requests) at 10 % and 20 % of capacity, then goodput
and SLA attainment at 40-90 % and 2x overload (native: its best delay by goodput).
Capacity is ``capacity_rps`` for the profile in that cost mode (as in
``scripts/simulate_report.py``). Bursty: on-off arrivals, 8x the quiet rate for ~0.25 s
every ~1 s (as ``perf_analyzer_configs/workloads/bimodal_bursty.yaml``), same mean rate.

    .venv/bin/python scripts/lowload_check.py                 # everything, ~7 min on 2 cores
    .venv/bin/python scripts/lowload_check.py --profiles t4 --arrivals poisson
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace


from benchmarks.simulate_report import CAPACITY_SAMPLE, LENGTHS, PROFILE_DIR, SLA_CLASSES_MS
from simulation import baselines, workload as W
from scheduler_core.profile_parse import with_emulation
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.profile_limits import BOUNDS
from simulation.simulator import capacity_rps, simulate

NATIVE_DELAYS_US = (0, 500, 1000, 2000)
LOW_LOADS = (0.1, 0.2)
HIGH_LOADS = (0.4, 0.6, 0.7, 0.8, 0.9, 2.0)
BURST_FACTOR = 8.0  # burst rate / quiet rate
MEAN_QUIET_S, MEAN_BURST_S = 1.0, 0.25
# The largest weight the profile allows: waiting for the window always pays ("before").
ALWAYS_WAIT = BOUNDS["wait_ms_per_saved_device_ms"][1]
TARGET_MS = 1.0  # explicit P50 at most this far above the best native setting


def _profile(name: str, cost_mode: str):
    p = load_profile(profile_path(PROFILE_DIR, name))
    return with_emulation(p, {"cost_mode": cost_mode}, "lowload_check")


def _process(kind: str, rate_rps: float):
    if kind == "poisson":
        return W.Poisson(rate_rps)
    # Mean = (high * burst + low * quiet) / (burst + quiet) = rate_rps.
    low = rate_rps * (MEAN_QUIET_S + MEAN_BURST_S) / (MEAN_QUIET_S + BURST_FACTOR * MEAN_BURST_S)
    return W.Bursty(low, BURST_FACTOR * low, MEAN_QUIET_S, MEAN_BURST_S)


def run_one(task: tuple) -> tuple[tuple, tuple[float, float, float]]:
    """(task, (P50 ms, goodput req/s, SLA attainment)) of one simulation."""
    name, mode, arrivals_kind, load, policy, delay_us, duration_s, seed = task
    p = _profile(name, mode)
    lengths = W.sample_lengths(CAPACITY_SAMPLE, seed, LENGTHS)
    cap = capacity_rps(p.cost_model, mode, p.emulation.time_scale, lengths,
                       p.scheduler.max_batch_size, p.scheduler.max_batch_tokens)
    arrivals = W.generate(_process(arrivals_kind, load * cap), duration_s, seed, LENGTHS,
                          W.SlaMix(SLA_CLASSES_MS))
    if policy == "before":
        p = replace(p, scheduler=replace(p.scheduler, wait_ms_per_saved_device_ms=ALWAYS_WAIT))
    kind = "native" if policy == "native" else "explicit"
    r = simulate(baselines.make_policy(kind, p, native_delay_us=delay_us), arrivals,
                 p.cost_model, mode, p.emulation.time_scale)
    return task, (r.p50_ms, r.goodput_rps, r.sla_attainment)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", nargs="+", default=["t4", "a100"])
    parser.add_argument("--cost-modes", nargs="+", default=["padded", "ragged"],
                        choices=["padded", "ragged"])
    parser.add_argument("--arrivals", nargs="+", default=["poisson", "bursty"],
                        choices=["poisson", "bursty"])
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)

    combos = [(n, m, a) for n in args.profiles for m in args.cost_modes for a in args.arrivals]
    tasks = []
    for combo in combos:
        for load in LOW_LOADS + HIGH_LOADS:
            tasks += [(*combo, load, policy, 0, args.duration_s, args.seed)
                      for policy in ("before", "after")]
            tasks += [(*combo, load, "native", d, args.duration_s, args.seed)
                      for d in NATIVE_DELAYS_US]
    # Longest first keeps the workers evenly busy.
    tasks.sort(key=lambda t: -t[3])
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        res = dict(pool.map(run_one, tasks, chunksize=1))

    def get(combo, load, policy, delay=0):
        return res[(*combo, load, policy, delay, args.duration_s, args.seed)]

    print(f"Simulated {args.duration_s:g} s per run, seed {args.seed}; loads are fractions of "
          "capacity_rps in that cost mode.\n")
    print("P50 latency (ms), all completed requests; gap = after - best native "
          f"(target <= {TARGET_MS:g} ms)\n")
    head = ["profile", "cost", "arrivals", "load", "explicit before", "explicit after"]
    head += [f"native {d} us" for d in NATIVE_DELAYS_US] + ["gap", "target"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for combo in combos:
        for load in LOW_LOADS:
            natives = [get(combo, load, "native", d)[0] for d in NATIVE_DELAYS_US]
            after = get(combo, load, "after")[0]
            gap = after - min(natives)
            cells = [*combo, f"{load:.0%}", f"{get(combo, load, 'before')[0]:.2f}",
                     f"{after:.2f}", *(f"{v:.2f}" for v in natives), f"{gap:+.2f}",
                     "met" if gap <= TARGET_MS else "MISSED"]
            print("| " + " | ".join(cells) + " |")

    print("\nGoodput (req/s) / SLA attainment; native at its best delay by goodput\n")
    head = ["profile", "cost", "arrivals", "load", "explicit before", "explicit after",
            "native best"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for combo in combos:
        for load in HIGH_LOADS:
            best = max(NATIVE_DELAYS_US, key=lambda d: get(combo, load, "native", d)[1])
            cells = [*combo, f"{load:.0%}"]
            for policy, delay in (("before", 0), ("after", 0), ("native", best)):
                _, goodput, attainment = get(combo, load, policy, delay)
                cells.append(f"{goodput:,.0f} / {attainment:.1%}")
            cells[-1] += f" ({best} us)"
            print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
