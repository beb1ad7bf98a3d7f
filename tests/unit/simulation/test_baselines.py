"""Baseline policies: Triton's dynamic batcher, a fixed window, BentoML-style adaptive."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest

from scheduler_core import contract
from scheduler_core.scheduler import Scheduler
from simulation.baselines import AdaptiveCostBatcher, FixedWindow, TritonDynamicBatcher
from simulation.native_batcher import fifo_prefix
from scheduler_core.cost_model import CostEstimator
from scheduler_core.contract import RejectReason
from scheduler_core.profile import CostModelConfig
from scheduler_core.request import QueuedRequest

# 1 ms per batch plus 0.5 ms per sequence, whatever the lengths.
COST = replace(CostModelConfig(), fixed_ms=1.0, per_sequence_ms=0.5, per_token_ms=0.0,
               per_token_squared_ms=0.0)


def req(rid: int, arrival_s: float, seq_len: int = 16, sla_ms: float = 10_000.0):
    return QueuedRequest(rid, seq_len, arrival_s, sla_ms)


def fill(policy, times, **kw):
    for i, t in enumerate(times):
        policy.submit(req(i, t, **kw), t)


def ids(decision) -> list[int]:
    return [r.request_id for r in decision.batch]


# -- interface ----------------------------------------------------------------------------

@pytest.mark.parametrize("policy", [
    TritonDynamicBatcher(8), FixedWindow(5.0, 8), AdaptiveCostBatcher(CostEstimator(COST), 8)])
def test_same_interface_as_the_scheduler(policy):
    # The parameters the simulator passes positionally are the scheduler's required ones.
    assert isinstance(policy, contract.BatchingPolicy)
    for method in ("submit", "schedule", "batch_started", "batch_finished", "tick", "drain"):
        theirs = [name for name, p in inspect.signature(
            getattr(Scheduler, method)).parameters.items() if p.default is p.empty]
        ours = list(inspect.signature(getattr(type(policy), method)).parameters)
        assert ours[:len(theirs)] == theirs, method
    assert policy.queue_depth == 0
    d = policy.schedule(0.0)
    assert isinstance(d, contract.BatchDecision)
    assert d.batch == () and d.wake_at_s is None and d.reason == "idle"


@pytest.mark.parametrize("policy", [
    TritonDynamicBatcher(8, max_queue_size=2), FixedWindow(5.0, 8, max_queue_size=2),
    AdaptiveCostBatcher(CostEstimator(COST), 8, max_queue_size=2)])
def test_queue_bound_raises_queue_full(policy):
    fill(policy, [0.0, 0.001])
    with pytest.raises(contract.QueueFull):
        policy.submit(req(9, 0.002), 0.002)
    assert policy.queue_depth == 2


# -- Triton's dynamic batcher ----------------------------------------------------------------

def test_triton_waits_max_queue_delay_counted_from_the_oldest():
    t = TritonDynamicBatcher(max_batch_size=8, max_queue_delay_us=5000)
    fill(t, [0.010, 0.012])
    d = t.schedule(0.012)
    assert d.batch == () and d.reason == "wait"
    assert d.wake_at_s == pytest.approx(0.015)  # oldest + 5 ms, not newest + 5 ms
    assert t.schedule(0.0149).batch == ()
    d = t.schedule(d.wake_at_s)
    assert ids(d) == [0, 1] and d.reason == "delay"
    assert t.queue_depth == 0


def test_triton_dispatches_at_once_on_max_batch_size_without_preferred_sizes():
    t = TritonDynamicBatcher(max_batch_size=4, max_queue_delay_us=100_000)
    assert t.preferred_batch_sizes == (4,)  # Triton's normalisation
    fill(t, [0.0, 0.001, 0.002])
    assert t.schedule(0.002).batch == ()
    t.submit(req(3, 0.003), 0.003)
    d = t.schedule(0.003)
    assert ids(d) == [0, 1, 2, 3] and d.reason == "full"


def test_triton_picks_the_largest_preferred_size_reached():
    t = TritonDynamicBatcher(max_batch_size=16, max_queue_delay_us=100_000,
                             preferred_batch_sizes=(8, 4))
    fill(t, [0.0, 0.001, 0.002])
    assert t.schedule(0.002).reason == "wait"
    t.submit(req(3, 0.003), 0.003)
    d = t.schedule(0.003)
    assert ids(d) == [0, 1, 2, 3] and d.reason == "preferred"
    # 7 pending: the largest preferred size it can form is 4; 9 pending: 8.
    fill(t, [0.004 + i * 1e-4 for i in range(7)])
    assert len(t.schedule(0.005).batch) == 4
    fill(t, [0.006 + i * 1e-4 for i in range(6)])
    assert t.queue_depth == 9
    assert len(t.schedule(0.007).batch) == 8
    assert t.queue_depth == 1


def test_triton_after_the_delay_sends_everything_up_to_max_batch_size():
    t = TritonDynamicBatcher(max_batch_size=12, max_queue_delay_us=1000,
                             preferred_batch_sizes=(4,))
    fill(t, [i * 1e-5 for i in range(15)])
    d = t.schedule(0.0005)
    assert len(d.batch) == 4  # delay not exceeded: the preferred size
    d = t.schedule(0.002)
    assert len(d.batch) == 11 and d.reason == "delay"  # delay exceeded: all, capped
    assert t.queue_depth == 0


def test_triton_zero_delay_sends_whatever_is_pending():
    t = TritonDynamicBatcher(max_batch_size=8, max_queue_delay_us=0)
    fill(t, [0.0, 0.0])
    d = t.schedule(0.0)
    assert ids(d) == [0, 1] and d.reason == "no-delay"


def test_triton_flush_and_validation():
    t = TritonDynamicBatcher(max_batch_size=8, max_queue_delay_us=10_000)
    fill(t, [0.0])
    assert t.schedule(0.0, flush=True).reason == "flush"
    with pytest.raises(ValueError, match=r"preferred_batch_sizes.*\(got 9\)"):
        TritonDynamicBatcher(8, preferred_batch_sizes=(4, 9))
    with pytest.raises(ValueError, match=r"max_batch_size.*\(got 0\)"):
        TritonDynamicBatcher(0)


# -- fixed window --------------------------------------------------------------------------

def test_fixed_window_full_window_and_token_limit():
    f = FixedWindow(window_ms=10.0, max_batch_size=3)
    fill(f, [0.0, 0.004])
    d = f.schedule(0.004)
    assert d.batch == () and d.wake_at_s == pytest.approx(0.010)
    assert ids(f.schedule(0.010)) == [0, 1]
    fill(f, [0.02, 0.021, 0.022, 0.023])
    d = f.schedule(0.023)
    assert len(d.batch) == 3 and d.reason == "full"

    limited = FixedWindow(window_ms=10.0, max_batch_size=8, max_batch_tokens=100)
    for i, length in enumerate([20, 30, 40]):
        limited.submit(req(i, 0.0, seq_len=length), 0.0)
    d = limited.schedule(0.0)  # 3 x 40 = 120 padded tokens > 100
    assert ids(d) == [0, 1] and d.reason == "full"


def test_fifo_prefix_always_takes_the_first_request():
    big = [req(0, 0.0, seq_len=500), req(1, 0.0, seq_len=16)]
    assert [r.request_id for r in fifo_prefix(big, 8, 100)] == [0]
    assert len(fifo_prefix(big, 1, None)) == 1


# -- adaptive -------------------------------------------------------------------------------

def test_adaptive_sheds_a_request_that_cannot_make_its_deadline_even_alone():
    a = AdaptiveCostBatcher(CostEstimator(COST), max_batch_size=8)
    a.submit(req(0, 0.0, sla_ms=1.0), 0.0)  # alone it takes 1.5 ms > 1 ms
    a.submit(req(1, 0.0, sla_ms=100.0), 0.0)
    d = a.schedule(0.0)
    assert [(r.request_id, why) for r, why in d.rejected] == [(0, RejectReason.INFEASIBLE)]
    assert 0 not in ids(d)
    assert a.queue_depth == (0 if d.batch else 1)
    assert a.shed == 1


def test_adaptive_waits_while_waiting_pays_then_releases():
    a = AdaptiveCostBatcher(CostEstimator(COST), max_batch_size=8)
    # Intercept before any fit: 2*est(1) - est(2) = 2*1.5 - 2.0 = 1.0 ms.
    assert a.fixed_cost_s([16]) == pytest.approx(0.001)
    # The very first request has no gap estimate yet: the time since it arrived (0) is
    # the gap, so it waits for company.
    a.submit(req(0, 0.0), 0.0)
    assert a.schedule(0.0).reason == "wait"
    fill_from = [0.0002, 0.0004]
    for i, t in enumerate(fill_from, start=1):
        a.submit(req(i, t), t)  # smoothed gap 0.2 ms, n = 3: 0.6 ms < 1 ms
    d = a.schedule(0.0004)
    assert d.batch == () and d.reason == "wait"
    # A stalled stream releases the batch at last_arrival + b/n.
    assert d.wake_at_s == pytest.approx(0.0004 + 0.001 / 3)
    d = a.schedule(d.wake_at_s)
    assert ids(d) == [0, 1, 2] and d.reason == "cost"


def test_adaptive_dispatches_for_the_deadline_and_when_full():
    a = AdaptiveCostBatcher(CostEstimator(COST), max_batch_size=2)
    fill(a, [0.0, 0.0001])
    assert a.schedule(0.0001).reason == "full"
    b = AdaptiveCostBatcher(CostEstimator(COST), max_batch_size=8)
    fill(b, [0.0, 0.0001], sla_ms=2.0)  # 2 requests take 2 ms: start now or miss
    d = b.schedule(0.0001)
    assert d.reason == "deadline" and ids(d) == [0, 1]


def test_adaptive_least_squares_fit():
    a = AdaptiveCostBatcher(CostEstimator(COST), max_batch_size=64, history=10,
                            min_fit_batches=3)
    for i, n in enumerate([1, 4, 2, 8, 16, 3, 5]):
        batch = [req(100 * i + k, 0.0) for k in range(n)]
        a.batch_finished(batch, 1.0, 1.0 + 0.0004 * n + 0.003)
    assert a.fit_a_s == pytest.approx(0.0004)
    assert a.fit_b_s == pytest.approx(0.003)
    assert a.fixed_cost_s([16]) == pytest.approx(0.003)
    # The window slides: 10 more batches on a new line replace the old samples.
    for i, n in enumerate([2, 3, 4, 5, 6, 7, 8, 9, 10, 11]):
        batch = [req(1000 + 100 * i + k, 0.0) for k in range(n)]
        a.batch_finished(batch, 2.0, 2.0 + 0.001 * n + 0.0005)
    assert a.fit_a_s == pytest.approx(0.001)
    assert a.fit_b_s == pytest.approx(0.0005, abs=1e-9)
