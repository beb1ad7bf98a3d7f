"""``benchmarks/hand_over_plans.py`` prices a hold call's batch plan against one batch and
the cheapest plan (a smoke at tiny sizes; the figures are results/, not here)."""

import numpy as np

from benchmarks.hand_over_plans import SIZES, cheapest_ms, plan, profiles, rows
from scheduler_core.scheduler import Scheduler


def test_the_cheapest_plan_is_never_dearer_than_one_batch_or_the_plugins():
    for profile in profiles().values():
        estimator = Scheduler.from_profile(profile).estimator
        cfg = profile.scheduler
        lengths = np.array([512, 16, 16, 24, 400, 16, 32, 16])
        ours, batches, _, refused = plan(profile, lengths)
        best = cheapest_ms(estimator, lengths, cfg.max_batch_size, cfg.max_batch_tokens)
        assert batches >= 1 and refused == 0  # loose enough: the plugin runs them all
        assert best <= estimator.estimate_parts_ms(len(lengths), 512, 0, 0) + 1e-9
        assert best <= ours + 1e-9


def test_a_row_per_profile_and_size_one_batch_only_where_it_fits():
    """Every size has its row; past max_batch_size the one-batch column is "-"."""
    out = rows(1)
    assert len(out) == len(profiles()) * len(SIZES)
    for (name, profile), chunk in zip(profiles().items(),
                                      (out[i:i + len(SIZES)] for i in range(0, len(out),
                                                                            len(SIZES)))):
        for n, row in zip(SIZES, chunk):
            one = row.split("|")[3].strip()
            assert (one == "-") == (n > profile.scheduler.max_batch_size), (name, n, row)
