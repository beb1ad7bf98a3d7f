"""N controllers behind one router and one device (the simulator's fleet form)."""

from __future__ import annotations

import os

from simulation import workload as W
from simulation.fleet import simulate_fleet
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.scheduler import Scheduler

PROFILES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "model_repository",
                        "emulated_explicit", "profiles")
LENGTHS = W.LogNormalLengths(median=64.0, sigma=0.8, lo=16, hi=512)


def _run(n: int, rate_rps: float, seed: int = 1):
    profile = load_profile(profile_path(PROFILES, "t4"))
    policies = [Scheduler.from_profile(profile, 1.0, seed=i) for i in range(n)]
    arrivals = W.generate(W.Poisson(rate_rps), 5.0, seed, LENGTHS, W.SlaMix((50.0, 200.0)))
    return policies, arrivals, simulate_fleet(policies, arrivals, profile.cost_model,
                                              warmup_s=1.0)


def test_every_request_is_answered_or_refused_once():
    _, arrivals, result = _run(2, 300.0)
    assert result.sent == len(arrivals)
    assert (result.met + result.missed + result.warmup_answered + result.rejected
            == len(arrivals))
    assert result.warmup_answered > 0  # the first second's, not in the goodput
    measured = sum(1 for a in arrivals if a.time_s >= 1.0)
    assert result.met > 0.9 * measured  # light load: nearly all in SLA


def test_the_router_gives_every_instance_its_share():
    policies, arrivals, _ = _run(3, 300.0)
    served = [p.counts["requests"] for p in policies]
    assert all(abs(s - len(arrivals) / 3) <= 2 for s in served)


def test_a_run_is_deterministic_and_samples_every_instance():
    _, _, first = _run(2, 600.0)
    _, _, again = _run(2, 600.0)
    assert first == again
    # 4 s sampled every 0.1 s: from the warm-up to the last arrival, not the drain after
    assert 39 <= first.samples <= 41


def test_the_coupling_index_is_n_in_lockstep_and_zero_when_windows_cancel():
    from simulation.fleet import oscillation

    rising = [1.0, 2.0, 3.0, 4.0]
    lockstep = oscillation([rising, rising, rising], [[0, 1, 1, 0]] * 3, 0.5)
    assert lockstep["coupling"] == 3.0 and lockstep["samples"] == 4
    assert lockstep["flips_per_minute"] == 6 / (4 * 0.5 / 60.0)
    assert lockstep["time_out_of_safe"] == 0.5
    assert lockstep["flips_in_step"] == 1.0  # every switch made by the others too
    cancel = oscillation([rising, [5.0 - w for w in rising]], [[0] * 4] * 2, 0.5)
    assert cancel["coupling"] == 0.0 and cancel["aggregate_variance"] == 0.0


def test_switches_in_step_count_the_same_change_between_the_same_samples():
    from simulation.fleet import oscillation

    flat = [5.0, 5.0, 5.0, 5.0, 5.0]
    # A and B enter zone 1 together; B leaves a sample before A; C switches elsewhere.
    zones = [[0, 1, 1, 1, 0], [0, 1, 1, 0, 0], [0, 0, 2, 2, 2]]
    out = oscillation([flat] * 3, zones, 0.5)
    assert out["flips_per_minute"] == 5 / (5 * 0.5 / 60.0)
    assert out["flips_in_step"] == 2 / 5  # the two entries of zone 1
    assert oscillation([flat] * 2, [[0] * 5] * 2, 0.5)["flips_in_step"] == 0.0
