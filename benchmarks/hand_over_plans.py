"""What a hold call's batches cost the device, in process: the scheduler's plan for a
hand-over beside one batch of all of it (Triton's batcher at delay 0) and the cheapest
plan there is.

    .venv/bin/python scripts/hand_over_plans.py [--calls 300] [--out results/hand_over_plans.md]

Each call is a hand-over of the bench's long-tailed length mix (``benchmarks.bench.LENGTHS``)
with SLA classes 50/100/200 ms in turn, handed over 5 ms old to a fresh scheduler, and run
as intake hold runs it: taken as handed (``Scheduler.takes_as_handed``) or submitted and
decided with flush until the queue is empty. Device time is the cost model's estimate of
each batch; the cheapest plan is the exact minimum over every partition of the sorted
lengths into consecutive batches (a padded batch costs its size times its longest, so an
optimal plan groups by length). Nothing runs on a device: this is the batch plan only.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from benchmarks.bench_setup import FLAT_PARAMS, LENGTHS, SEED, SLA_CLASSES_MS
from benchmarks.pages import write_page
from scheduler_core.contract import decide
from scheduler_core.profile_parse import with_dotted_overrides, with_emulation
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(REPO_ROOT, "model_repository", "emulated_explicit", "profiles")
# Up to one batch (64 on flat and h200_minilm), and past it: a hand-over larger than one
# batch runs as the cheapest cut of its sorted lengths (scheduler_core/batch_plan.py).
SIZES = (13, 20, 32, 38, 45, 64, 96, 128, 207, 256)
WAITED_S = 0.005


def profiles() -> dict[str, object]:
    t4 = with_emulation(load_profile(profile_path(PROFILES, "t4")),
                        {"cost_mode": "padded", "time_scale": 1.0}, "plans")
    h200 = with_emulation(load_profile(profile_path(PROFILES, "h200_minilm")),
                          {"cost_mode": "padded", "time_scale": 1.0}, "plans")
    return {"flat (the bench's GPU-like t4)": with_dotted_overrides(t4, FLAT_PARAMS, "plans"),
            "t4 padded": t4, "h200_minilm (a measured table)": h200}


def cheapest_ms(estimator, lengths: np.ndarray, max_size: int, max_tokens: int) -> float:
    """The least total estimate of any plan of consecutive batches of sorted ``lengths``."""
    x = np.sort(lengths)
    best = [0.0] + [float("inf")] * len(x)
    for j in range(1, len(x) + 1):
        for i in range(max(0, j - max_size), j):
            if (j - i) * int(x[j - 1]) <= max_tokens:
                ms = estimator.estimate_parts_ms(j - i, int(x[j - 1]), 0, 0)
                best[j] = min(best[j], best[i] + ms)
    return best[-1]


def plan(profile, lengths: np.ndarray) -> tuple[float, int, bool, int]:
    """(device ms, batches, taken as handed, requests refused) for one call, as intake
    hold runs it."""
    s = Scheduler.from_profile(profile)
    now = 10.0
    batch = [QueuedRequest(k, int(n), now - WAITED_S, SLA_CLASSES_MS[k % len(SLA_CLASSES_MS)])
             for k, n in enumerate(lengths)]
    taken = s.takes_as_handed(now, batch)
    if taken is not None:
        return taken, 1, True, 0
    for r in batch:
        s.submit(r, now)
    total, batches, refused = 0.0, 0, 0
    while s.queue_depth:
        d = decide(s, now, flush=True)
        refused += len(d.rejected)
        if d.batch:
            s.batch_started(d.batch, now)
            total += d.estimated_ms
            batches += 1
            now += d.estimated_ms / 1000.0
            s.batch_finished(d.batch, now - d.estimated_ms / 1000.0, now)
    return total, batches, False, refused


def rows(calls: int) -> list[str]:
    out = []
    for name, profile in profiles().items():
        cfg = profile.scheduler
        rng = np.random.default_rng(SEED)
        s = Scheduler.from_profile(profile)
        for size in SIZES:
            whole = ours = best = 0.0
            batches = handed = refused = 0
            for _ in range(calls):
                lengths = LENGTHS.draw(rng, size)
                longest = int(lengths.max())
                whole += s.estimator.estimate_parts_ms(size, longest, 0, 0)
                ms, n, as_handed, left_out = plan(profile, lengths)
                ours, batches, handed = ours + ms, batches + n, handed + as_handed
                refused += left_out
                best += cheapest_ms(s.estimator, lengths, cfg.max_batch_size,
                                    cfg.max_batch_tokens)
            one = f"{whole / calls:.2f}" if size <= cfg.max_batch_size else "-"
            out.append(f"| {name} | {size} | {one} | {ours / calls:.2f} | "
                       f"{best / calls:.2f} | {batches / calls:.2f} | {100 * handed / calls:.0f} % | "
                       f"{refused / calls:.1f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    lines = ["| profile | requests a call | one batch (ms) | the plugin's plan (ms) | "
             "cheapest plan (ms) | batches a call | taken as handed | refused a call |",
             "|---|---:|---:|---:|---:|---:|---:|---:|", *rows(args.calls)]
    print("\n".join(lines))
    if args.out:
        write_page(args.out, "\n".join([
            "# A hold call's batch plan: device time per call (in process, estimates)", "",
            f"Generated by `.venv/bin/python scripts/hand_over_plans.py --calls {args.calls} "
            "--out ...` (benchmarks/hand_over_plans.py says how). Device time is the cost "
            "model's estimate of each batch (EMULATED costs, no device runs); mean per "
            "call. One batch: - where the hand-over is larger than the profile's "
            "max_batch_size. The cheapest plan runs every request and counts no host time; "
            "the plugin's plan charges each batch `scheduler.batch_host_ms` when it cuts a "
            "hand-over larger than one batch, and runs none it refused (its deadline "
            "infeasible: t4 at time scale 1 cannot serve hundreds of requests in a 50 ms "
            "class), so on t4 it can cost less than the cheapest plan of all of them.",
            "", *lines, ""]))
    return 0
