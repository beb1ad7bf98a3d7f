"""An experiment's script, kept with its page (not a tool): the simulator's attainment on
``make bench``'s emulated padded cells (t4 at time scale 8, a100 at 30: the bench's
capacity, SLA classes, arrivals and seeds), the shipped policy, or with ControlConfig
(``KEY=VALUE``) and SchedulerConfig (``s.KEY=VALUE``) overrides. Each cell is the mean
attainment over NSEED seeds (the bench's own first) of the requests after the first
second. From the repository root:

    [NSEED=6] [PROFS="t4 a100"] [LOADS="0.6 0.7 0.8 0.9"] .venv/bin/python \
        results/padded_knee_sim/sim_grid.py [KEY=VALUE ...]
"""
import dataclasses
import os
import sys

sys.path.insert(0, os.getcwd())
from benchmarks.bench_setup import (SEED, SLA_CLASSES_MS, arrivals_for,  # noqa: E402
                                    bench_time_scale, capacity_at_device_speed)
from benchmarks.bench_setup import profile as P  # noqa: E402
from scheduler_core.scheduler import Scheduler  # noqa: E402
from simulation.simulator import simulate  # noqa: E402


def value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


control, scheduler = {}, {}
for arg in sys.argv[1:]:
    key, _, text = arg.partition("=")
    if key.startswith("s."):
        scheduler[key[2:]] = value(text)
    else:
        control[key] = value(text)
loads = [float(x) for x in os.environ.get("LOADS", "0.6 0.7 0.8 0.9").split()]
seeds_per_cell = int(os.environ.get("NSEED", "6"))
measure_s = 4.0  # after 1 s of warm-up, as the bench's 70 % cells
for name in os.environ.get("PROFS", "t4 a100").split():
    ts = bench_time_scale(name)
    prof = P(name, "padded", ts)
    prof = dataclasses.replace(prof, control=dataclasses.replace(prof.control, **control),
                               scheduler=dataclasses.replace(prof.scheduler, **scheduler))
    cap = capacity_at_device_speed(name, "padded") / ts
    slas = tuple(c * ts for c in SLA_CLASSES_MS)
    cells = []
    for kind in ("poisson", "bursty"):
        for load in loads:
            first = SEED + int(round(load * 100)) + (1000 if kind == "bursty" else 0)
            shares, busy, sizes = [], [], []
            for seed in [first] + [k * 7919 + first for k in range(1, seeds_per_cell)]:
                arrivals = arrivals_for(kind, load * cap, 1.0 + measure_s, seed, slas)
                policy = Scheduler.from_profile(prof, prof.emulation.time_scale)
                r = simulate(policy, arrivals, prof.cost_model, "padded", ts, name="explicit")
                late = [i for i in range(r.arrivals) if r.arrival_s[i] >= 1.0]
                shares.append(sum(r.outcome[i] == 1 for i in late) / len(late))
                busy.append(r.mean_busy_fraction)
                sizes.append(r.mean_batch_size)
            n = len(shares)
            cells.append(f"{kind} {load:.1f}: {sum(shares) / n:.3f} in SLA (busy "
                         f"{sum(busy) / n:.2f}, batch {sum(sizes) / n:.1f})")
    print(f"{name} (time scale {ts:g}, capacity {cap:.1f} req/s)", flush=True)
    for cell in cells:
        print("   " + cell)
