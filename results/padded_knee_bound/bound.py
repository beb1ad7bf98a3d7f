"""An experiment's script, kept with its page (not a tool): an upper bound on the load any
batching policy can carry on ``make bench``'s emulated padded cells (t4 at time scale 8,
a100 at 30), from the size of the pool it batches from.

The bench's capacity (100 % load) is the device serving the mix in full batches of similar
lengths, drawn from 200,000 requests. A policy batches from a pool of the requests that
wait at once. For a pool of N requests of the mix, the cheapest cut of its sorted lengths
into padded batches (``batch_plan.cheapest_plan``, exact, no host time) costs the device at
least N / capacity; their ratio is the pool's efficiency. A load of L needs a mean
efficiency of L at least (the device time per request at most 1 / rate), so it needs pools
of the size where the efficiency reaches L.

How large a pool can be:

* intake hold: a call batches only the requests it was handed, those that arrived during
  the previous call. A request of the tightest class that arrives as a call starts waits
  that whole call in Triton's queue, then at least one batch (the shortest request alone).
  With 99 % of all requests in SLA and the tightest class a third of them, at most 3 % of
  that class may miss, so a call lasts at most (tightest SLA - that batch) / 0.97, and
  its successor's pool holds at most rate x that.
* a pool kept across calls (intake gather, the simulator): by Little's law the mean pool
  is rate x the mean wait, and a request waits at most its SLA less one batch; the mean
  pool is at most rate x (mean SLA - that batch).

Both are generous: no host time, no arrival variance, and a plan that ignores deadlines
(running the tightest first costs efficiency). From the repository root:

    [SAMPLES=400] .venv/bin/python results/padded_knee_bound/bound.py
"""
import os
import sys

sys.path.insert(0, os.getcwd())
import numpy as np  # noqa: E402

import simulation.workload as W  # noqa: E402
from benchmarks.bench_setup import (CAPACITY_SAMPLE, LENGTHS, SEED,  # noqa: E402
                                    SLA_CLASSES_MS, bench_time_scale, capacity_at_device_speed)
from benchmarks.bench_setup import profile as P  # noqa: E402
from scheduler_core.batch_plan import cheapest_plan, padded_costs_ms  # noqa: E402
from scheduler_core.cost_model import CostEstimator  # noqa: E402

SAMPLES = int(os.environ.get("SAMPLES", "400"))
POOLS = (8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
LOADS = (0.6, 0.7, 0.8, 0.9, 1.0)
TIGHT_MISS_SHARE = 0.01 * len(SLA_CLASSES_MS)  # 1 % of all requests, all of the tightest


def efficiency(name: str, pool: int, mix: np.ndarray, rng: np.random.Generator) -> float:
    """The mean, over SAMPLES pools of ``pool`` requests of the mix, of (the pool's
    device time at capacity) / (its cheapest padded plan's), both at device speed."""
    prof = P(name, "padded", 1.0)
    estimator = CostEstimator(prof.cost_model, "padded", 1.0)
    per_request_ms = 1000.0 / capacity_at_device_speed(name, "padded")
    cfg = prof.scheduler
    ratios = []
    for _ in range(SAMPLES):
        lengths = np.sort(rng.choice(mix, pool))
        costs = padded_costs_ms(estimator, lengths, cfg.max_batch_size)
        _, plan_ms = cheapest_plan(lengths, costs, cfg.max_batch_tokens, 0.0)
        ratios.append(pool * per_request_ms / plan_ms)
    return float(np.mean(ratios))


def main() -> None:
    mix = np.asarray(W.sample_lengths(CAPACITY_SAMPLE, SEED, LENGTHS))
    for name in ("t4", "a100"):
        ts = bench_time_scale(name)
        cap = capacity_at_device_speed(name, "padded") / ts
        prof = P(name, "padded", ts)
        shortest_ms = CostEstimator(prof.cost_model, "padded", ts).estimate_ms([int(mix.min())])
        slas = [c * ts for c in SLA_CLASSES_MS]
        rng = np.random.default_rng(SEED)
        eff = {n: efficiency(name, n, mix, rng) for n in POOLS}
        print(f"{name}: time scale {ts:g}, capacity {cap:.1f} req/s, SLA classes "
              f"{'/'.join(f'{s:g}' for s in slas)} ms, the shortest request alone "
              f"{shortest_ms:.1f} ms")
        print("  pool   " + "  ".join(f"{n:5d}" for n in POOLS))
        print("  eff    " + "  ".join(f"{eff[n]:5.3f}" for n in POOLS))
        call_s = (min(slas) - shortest_ms) / (1.0 - TIGHT_MISS_SHARE) / 1000.0
        wait_s = (sum(slas) / len(slas) - shortest_ms) / 1000.0
        for load in LOADS:
            rate = load * cap
            need = next((n for n in POOLS if eff[n] >= load), None)
            hold_pool, kept_pool = rate * call_s, rate * wait_s
            at = [eff[n] for n in POOLS]
            print(f"  load {load:.1f} ({rate:6.1f} req/s): efficiency {load:.1f} needs a pool "
                  f"of {f'{need}' if need else f'more than {POOLS[-1]}'}; "
                  f"hold's largest {hold_pool:5.1f} (efficiency "
                  f"{np.interp(hold_pool, POOLS, at):.3f}), a kept pool's largest mean "
                  f"{kept_pool:5.1f} (efficiency {np.interp(kept_pool, POOLS, at):.3f})",
                  flush=True)


if __name__ == "__main__":
    main()
