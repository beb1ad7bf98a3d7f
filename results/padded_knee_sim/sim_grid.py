"""An experiment's script, kept with its page (not a tool): the simulator's attainment on
``make bench``'s emulated padded cells (t4 at time scale 8, a100 at 30: the bench's
capacity, SLA classes, arrivals and seeds), the shipped policy, or with profile overrides
given as model-config parameters give them (``control.emergency_batch_size=8``,
``scheduler.base_window_ms=20``: ``profile_parse.with_dotted_overrides``, typed and
checked). Each cell is the mean attainment over NSEED seeds (the bench's own first) of
the requests after the first second. From the repository root:

    [NSEED=6] [PROFS="t4 a100"] [LOADS="0.6 0.7 0.8 0.9"] .venv/bin/python \
        results/padded_knee_sim/sim_grid.py [SECTION.KEY=VALUE ...]
"""
import os
import sys

sys.path.insert(0, os.getcwd())
from benchmarks.bench_setup import (SEED, SLA_CLASSES_MS, arrivals_for,  # noqa: E402
                                    bench_time_scale, capacity_at_device_speed)
from benchmarks.bench_setup import profile as P  # noqa: E402
from scheduler_core.profile_parse import with_dotted_overrides  # noqa: E402
from scheduler_core.scheduler import Scheduler  # noqa: E402
from simulation.simulator import simulate  # noqa: E402


overrides = dict(arg.partition("=")[::2] for arg in sys.argv[1:])
loads = [float(x) for x in os.environ.get("LOADS", "0.6 0.7 0.8 0.9").split()]
seeds_per_cell = int(os.environ.get("NSEED", "6"))
measure_s = 4.0  # after 1 s of warm-up, as the bench's 70 % cells
for name in os.environ.get("PROFS", "t4 a100").split():
    ts = bench_time_scale(name)
    prof = with_dotted_overrides(P(name, "padded", ts), overrides, "sim_grid.py arguments")
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
