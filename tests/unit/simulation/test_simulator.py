"""The discrete-event simulator: exact timings on tiny scenarios, invariants on larger ones."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from simulation import workload as W
from simulation.baselines import AdaptiveCostBatcher, FixedWindow, TritonDynamicBatcher
from scheduler_core.cost_model import CostEstimator
from scheduler_core.profile import CostModelConfig, SchedulerConfig
from scheduler_core.contract import BatchDecision, BatchingPolicy, RejectReason
from scheduler_core.scheduler import Scheduler
from simulation.sim_result import OUTCOME_NAMES
from simulation.simulator import (MET, MISSED, REJECTED, capacity_rps, device_ms,
                                  fifo_capacity_rps, simulate)
from scheduler_core.stats import percentile

# fixed 1 ms + 0.5 ms per sequence + 0.01 ms per (padded) token.
COST = replace(CostModelConfig(), fixed_ms=1.0, per_sequence_ms=0.5, per_token_ms=0.01,
               per_token_squared_ms=0.0)
A = W.Arrival


def small_workload(seed: int, rate: float = 400.0, duration: float = 3.0):
    return W.generate(W.Poisson(rate), duration, seed=seed)


def scheduler(cost=COST) -> Scheduler:
    return Scheduler(replace(SchedulerConfig(), max_batch_size=8, max_batch_tokens=2048,
                             base_window_ms=2.0), CostEstimator(cost))


# -- exact timings ----------------------------------------------------------------------------

def test_hand_computed_fixed_window_scenario():
    arrivals = [A(0.000, 10, 100.0), A(0.004, 20, 100.0), A(0.020, 30, 10.0),
                A(0.100, 16, 100.0)]
    r = simulate(FixedWindow(window_ms=10.0, max_batch_size=2), arrivals, COST, "padded")
    # 0.004: [r0, r1] is full -> 1 + 2*0.5 + 0.01*2*20 = 2.4 ms.
    # 0.020: r2 waits its 10 ms window -> starts 0.030, 1 + 0.5 + 0.3 = 1.8 ms (misses 10 ms).
    # 0.100: the last arrival is flushed at once -> 1 + 0.5 + 0.16 = 1.66 ms.
    assert r.dispatch_s == pytest.approx((0.004, 0.004, 0.030, 0.100), abs=1e-12)
    assert r.finish_s == pytest.approx((0.0064, 0.0064, 0.0318, 0.10166), abs=1e-12)
    assert r.outcome == (MET, MET, MISSED, MET)
    assert (r.met, r.missed, r.rejected, r.batches) == (3, 1, 0, 3)
    assert r.mean_batch_size == pytest.approx(4 / 3)
    assert r.dispatch_reasons == {"flush": 1, "full": 1, "window": 1}
    # Padded tokens 40 + 30 + 16, real 30 + 30 + 16.
    assert r.padding_waste == pytest.approx(10 / 86)
    assert r.duration_s == pytest.approx(0.10166)
    assert r.goodput_rps == pytest.approx(3 / 0.10166)
    assert r.per_class[10.0].missed == 1 and r.per_class[10.0].p50_ms == pytest.approx(11.8)
    assert r.per_class[100.0].attainment == 1.0
    assert [OUTCOME_NAMES[o] for o in r.outcome] == ["met", "met", "missed", "met"]


def test_device_time_is_exactly_the_emulated_formula_times_time_scale():
    arrivals = [A(0.0, 100, 1000.0), A(0.0, 20, 1000.0)]
    for mode in ("padded", "ragged"):
        r = simulate(TritonDynamicBatcher(8, 0), arrivals, COST, mode, time_scale=3.0)
        expected = device_ms(COST, [100, 20], mode, 3.0) / 1000.0
        assert r.finish_s[0] - r.dispatch_s[0] == pytest.approx(expected, abs=1e-12)
    assert device_ms(COST, [100, 20], "padded") == pytest.approx(1 + 1 + 0.01 * 200)
    assert device_ms(COST, [100, 20], "ragged") == pytest.approx(1 + 1 + 0.01 * 120)


def test_triton_dispatches_at_max_queue_delay_after_the_oldest_in_simulation():
    arrivals = [A(0.001, 16, 100.0), A(0.002, 16, 100.0), A(0.050, 16, 100.0)]
    r = simulate(TritonDynamicBatcher(max_batch_size=8, max_queue_delay_us=3000),
                 arrivals, COST, "padded")
    assert r.dispatch_s[:2] == pytest.approx((0.004, 0.004), abs=1e-12)  # 1 ms + 3 ms
    assert r.dispatch_reasons["delay"] == 1


def test_triton_dispatches_on_reaching_a_preferred_size_in_simulation():
    arrivals = [A(0.001 * i, 16, 100.0) for i in range(1, 6)] + [A(1.0, 16, 100.0)]
    r = simulate(TritonDynamicBatcher(max_batch_size=8, max_queue_delay_us=100_000,
                                      preferred_batch_sizes=(4,)), arrivals, COST, "padded")
    assert r.dispatch_s[:4] == pytest.approx((0.004,) * 4, abs=1e-12)  # 4th arrival
    # The 5th arrives while the device is busy and alone waits the full delay.
    assert r.dispatch_s[4] == pytest.approx(0.005 + 0.1, abs=1e-12)


def test_arrivals_join_a_batch_that_has_not_started():
    # Arrivals at the very instant the device frees up still join the next batch, and
    # simultaneous arrivals are batched together.
    one = device_ms(COST, [16]) / 1000.0
    assert one == pytest.approx(0.00166)
    arrivals = [A(0.0, 16, 100.0), A(0.0, 16, 100.0), A(one * 2, 16, 100.0),
                A(one * 2, 16, 100.0), A(0.5, 16, 100.0)]
    two = device_ms(COST, [16, 16]) / 1000.0
    r = simulate(TritonDynamicBatcher(8, 0), arrivals, COST, "padded")
    assert r.dispatch_s[:2] == (0.0, 0.0) and r.finish_s[:2] == (two, two)
    # Device free at 2.32 ms < 3.32 ms: the next pair goes together on arrival.
    assert r.dispatch_s[2:4] == (one * 2, one * 2)
    assert r.batches == 3

    busy_till = [A(0.0, 16, 100.0), A(0.001, 16, 100.0), A(one, 16, 100.0),
                 A(0.5, 16, 100.0)]
    r = simulate(TritonDynamicBatcher(8, 0), busy_till, COST, "padded")
    assert r.dispatch_s[1] == r.dispatch_s[2] == one  # r1 waited; r2 joined at the instant


# -- invariants ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: TritonDynamicBatcher(8, 2000),
    lambda: FixedWindow(3.0, 8, 2048),
    lambda: AdaptiveCostBatcher(CostEstimator(COST), 8, 2048),
    scheduler,
])
def test_deterministic_and_every_arrival_ends_exactly_once(make):
    arrivals = small_workload(seed=21, rate=900.0)
    first = simulate(make(), arrivals, COST, "padded")
    second = simulate(make(), arrivals, COST, "padded")
    assert first == second
    assert first.met + first.missed + first.rejected == first.arrivals == len(arrivals)
    assert set(first.outcome) <= {MET, MISSED, REJECTED}
    for i in range(first.arrivals):
        if first.outcome[i] != REJECTED:
            assert first.arrival_s[i] <= first.dispatch_s[i] < first.finish_s[i]
    assert first.batches > 0 and sum(first.dispatch_reasons.values()) == first.batches
    other = simulate(make(), small_workload(seed=22, rate=900.0), COST, "padded")
    assert other != first


def test_overload_with_a_bounded_queue_counts_rejections():
    arrivals = small_workload(seed=3, rate=5000.0, duration=1.0)
    r = simulate(FixedWindow(1.0, 4, max_queue_size=8), arrivals, COST, "padded")
    assert r.rejected_reasons.get("queue full", 0) > 0
    assert r.met + r.missed + r.rejected == len(arrivals)
    adaptive = simulate(AdaptiveCostBatcher(CostEstimator(COST), 4), arrivals, COST, "padded")
    assert adaptive.rejected_reasons.get(RejectReason.INFEASIBLE, 0) > 0
    assert adaptive.met + adaptive.missed + adaptive.rejected == len(arrivals)


class _Stubborn:
    """Never dispatches and always asks to be woken in the past; counts its calls."""

    def __init__(self):
        self.q = []
        self.calls = 0
        self.ticks = []

    def submit(self, request, now_s):
        self.q.append(request)

    def schedule(self, now_s, flush=False):
        self.calls += 1
        return BatchDecision((), now_s - 1.0, "wait", 0.0, 0.0, 0.0)

    def batch_started(self, batch, now_s):
        pass

    def batch_finished(self, batch, started_s, now_s, succeeded=True):
        pass

    def tick(self, now_s):
        self.ticks.append(now_s)

    @property
    def queue_depth(self):
        return len(self.q)


def test_a_policy_that_never_dispatches_cannot_hang_the_run():
    policy = _Stubborn()
    r = simulate(policy, [A(0.0, 16, 50.0), A(0.01, 16, 50.0)], COST,
                 control_period_s=0.05, drain_timeout_s=0.2)
    assert r.rejected == 2 and r.rejected_reasons == {"unfinished": 2}
    # Wake-ups in the past become now + 1 us: about 0.21 s / 1 us of them, no more.
    assert policy.calls <= 0.25 / 1e-6
    assert policy.ticks[:3] == pytest.approx([0.0, 0.05, 0.1])
    assert policy.ticks[-1] <= 0.01 + 0.2


def test_tick_is_called_every_control_period_until_the_work_is_done():
    class Ticking(FixedWindow):
        def __init__(self):
            super().__init__(5.0, 8)
            self.ticks = []

        def tick(self, now_s):
            self.ticks.append(now_s)

    policy = Ticking()
    arrivals = [A(0.0, 16, 100.0), A(0.33, 16, 100.0)]
    r = simulate(policy, arrivals, COST, control_period_s=0.1)
    assert r.met == 2
    assert policy.ticks == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert r.duration_s == r.finish_s[1]  # trailing ticks do not stretch the run
    assert isinstance(FixedWindow(5.0, 8), BatchingPolicy)  # tick is part of the contract


def test_busy_fraction_and_its_fluctuation():
    slow = replace(CostModelConfig(), fixed_ms=500.0, per_sequence_ms=0.0, per_token_ms=0.0)
    arrivals = [A(0.0, 16, 1000.0), A(1.9, 16, 1000.0)]
    r = simulate(TritonDynamicBatcher(8, 0), arrivals, slow)
    # Busy [0, 0.5) and [1.9, 2.4): whole seconds 0 and 1 are 0.5 and 0.1 busy.
    assert r.duration_s == pytest.approx(2.4)
    assert r.mean_busy_fraction == pytest.approx(1.0 / 2.4)
    assert r.utilization_fluctuation == pytest.approx(0.2)


def test_empty_workload():
    r = simulate(TritonDynamicBatcher(8), [], COST)
    assert (r.arrivals, r.batches, r.goodput_rps) == (0, 0, 0.0)
    assert math.isnan(r.p99_ms)


def test_unsorted_or_negative_arrivals_are_refused():
    with pytest.raises(ValueError, match="sorted"):
        simulate(TritonDynamicBatcher(8), [A(0.2, 16, 50.0), A(0.1, 16, 50.0)], COST)
    with pytest.raises(ValueError, match=">= 0"):
        simulate(TritonDynamicBatcher(8), [A(-0.1, 16, 50.0)], COST)


# -- capacity and percentiles ----------------------------------------------------------------

def test_capacity_rps_matches_a_hand_computation():
    flat = replace(CostModelConfig(), fixed_ms=1.0, per_sequence_ms=0.0, per_token_ms=0.01,
                   per_token_squared_ms=0.0)
    lengths = [50, 10, 40, 20, 30]
    # Sorted, batches of 2: [10,20] 1.4 ms, [30,40] 1.8 ms, [50] 1.5 ms -> 4.7 ms.
    assert capacity_rps(flat, "padded", 1.0, lengths, 2) == pytest.approx(5 / 0.0047)
    # 70 padded tokens: [10,20] 1.4, [30] 1.3, [40] 1.4, [50] 1.5 -> 5.6 ms.
    assert capacity_rps(flat, "padded", 1.0, lengths, 2, 70) == pytest.approx(5 / 0.0056)
    # time_scale slows everything alike.
    assert capacity_rps(flat, "padded", 2.0, lengths, 2) == pytest.approx(5 / 0.0094)
    # Ragged: [10,20] 1.3, [30,40] 1.7, [50] 1.5 -> 4.5 ms.
    assert capacity_rps(flat, "ragged", 1.0, lengths, 2) == pytest.approx(5 / 0.0045)
    # FIFO, in arrival order: [50,10] 2.0, [40,20] 1.8, [30] 1.3 -> 5.1 ms (padding paid).
    assert fifo_capacity_rps(flat, "padded", 1.0, lengths, 2) == pytest.approx(5 / 0.0051)


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
