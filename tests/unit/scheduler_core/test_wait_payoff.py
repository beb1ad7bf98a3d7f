"""The worth-its-wait rule (``scheduler.wait_ms_per_saved_device_ms``), driven by a fake
clock: with the device free, a partial batch of n waits for the elastic window only while
n < weight * arrival_rate * batch_overhead; otherwise it goes at once (reason ``no_gain``).

A flat 1 ms per batch (all of it fixed overhead) and a 10 ms perception window keep the
numbers round: k arrivals within the last 10 ms (the queued ones included) are k * 100
req/s, and k * 0.1 of them are expected within one 1 ms overhead.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler_core.cost_model import CostEstimator
from scheduler_core.profile import ControlConfig, CostModelConfig, SchedulerConfig
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler

FLAT_COST = replace(CostModelConfig(), fixed_ms=1.0, per_sequence_ms=0.0, per_token_ms=0.0,
                    per_token_squared_ms=0.0)
WINDOW_MS = 5.0


def make(control: ControlConfig | None = None, **overrides) -> Scheduler:
    base = dict(base_window_ms=WINDOW_MS, alpha=0.0, beta=0.0, min_window_ms=0.0,
                max_window_ms=50.0, max_batch_size=64, perception_window_ms=10.0)
    base.update(overrides)
    return Scheduler(replace(SchedulerConfig(), **base), CostEstimator(FLAT_COST),
                     control if control is not None else ControlConfig(enabled=False))


def req(rid: int, arrival_s: float) -> QueuedRequest:
    return QueuedRequest(request_id=rid, seq_len=16, arrival_s=arrival_s, sla_ms=10_000.0)


def stream(s: Scheduler, count: int, end_s: float) -> int:
    """``count`` arrivals spread over the 10 ms before ``end_s``, then served (flush), so
    they set the arrival rate but leave the queue empty. Returns the next request id."""
    for i in range(count):
        t = end_s - 0.0095 + 0.0095 * i / max(count - 1, 1)
        s.submit(req(i, t), t)
    assert len(s.schedule(end_s, flush=True).batch) == count
    assert s.queue_depth == 0
    return count


# -- the safe zone at low load: the free device takes the request at once --------------------

def test_one_request_at_low_rate_dispatches_at_once():
    s = make()
    s.submit(req(0, 1.0), 1.0)
    d = s.schedule(1.0)
    assert [r.request_id for r in d.batch] == [0]
    assert d.reason == "no_gain"
    assert d.mode == "default"
    assert d.wake_at_s is None


def test_one_request_dispatches_at_once_in_the_safe_zone_with_control_on():
    s = make(ControlConfig())
    s.submit(req(0, 1.0), 1.0)
    d = s.schedule(1.0)
    assert d.mode == "default" and d.zone == 0
    assert len(d.batch) == 1 and d.reason == "no_gain"


def test_low_rate_dispatches_at_once_in_explicit_mode_too():
    # Pre-warm (utilisation >= 0.65, zone still safe) runs explicit control, whose batches
    # go through the same dispatch rule.
    s = make(ControlConfig())
    s.set_external_utilization(0.7, 1.0)
    s.tick(1.0)
    assert s.mode() == "explicit"
    s.submit(req(0, 1.0), 1.0)
    d = s.schedule(1.0)
    assert d.mode == "explicit"
    assert len(d.batch) == 1 and d.reason == "no_gain"


# -- a high rate: waiting for the batch to grow pays ----------------------------------------

def trickle(s: Scheduler, first_id: int, start_s: float = 1.0, gap_s: float = 0.0001) -> list:
    """One arrival every ``gap_s`` after ``start_s``, the scheduler asked after each, until
    a batch goes; returns the decisions."""
    decisions: list = []
    t, rid = start_s, first_id
    while not decisions or not decisions[-1].batch:
        t += gap_s
        s.submit(req(rid, t), t)
        rid += 1
        decisions.append(s.schedule(t))
    return decisions


def test_high_rate_waits_until_the_batch_holds_rate_times_overhead():
    s = make()
    # With n queued: 20 + n arrivals in 10 ms, (20 + n) * 0.1 expected within the overhead;
    # n < 2 + 0.1 n holds for n = 1, 2 and fails at n = 3.
    decisions = trickle(s, stream(s, 20, 1.0))
    assert [d.reason for d in decisions] == ["wait", "wait", "no_gain"]
    for d in decisions[:-1]:
        assert d.wake_at_s == pytest.approx(1.0001 + WINDOW_MS / 1000.0)  # the window bounds it
    assert len(decisions[-1].batch) == 3


def test_the_window_still_bounds_the_wait():
    s = make()
    rid = stream(s, 30, 1.0)
    s.submit(req(rid, 1.0), 1.0)
    d = s.schedule(1.0)
    assert d.reason == "wait"
    # No more arrivals: the window closes first (the 30 still count at 1.005).
    d = s.schedule(d.wake_at_s)
    assert len(d.batch) == 1 and d.reason == "window"


def test_rate_is_read_over_the_perception_window():
    s = make()
    rid = stream(s, 30, 1.0)
    # 20 ms later the stream has left the 10 ms window: one queued request goes at once.
    s.submit(req(rid, 1.02), 1.02)
    d = s.schedule(1.02)
    assert len(d.batch) == 1 and d.reason == "no_gain"


# -- the weight --------------------------------------------------------------------------

def test_weight_zero_never_holds_a_free_device():
    s = make(wait_ms_per_saved_device_ms=0.0)
    rid = stream(s, 30, 1.0)
    s.submit(req(rid, 1.0), 1.0)
    d = s.schedule(1.0)
    assert len(d.batch) == 1 and d.reason == "no_gain"


@pytest.mark.parametrize("weight,dispatched_at", [(1.0, 3), (2.0, 5), (0.5, 2)])
def test_weight_scales_the_threshold(weight, dispatched_at):
    # The batch waits while n < weight * (20 + n) * 0.1.
    s = make(wait_ms_per_saved_device_ms=weight)
    decisions = trickle(s, stream(s, 20, 1.0))
    assert len(decisions) == len(decisions[-1].batch) == dispatched_at
    assert decisions[-1].reason == "no_gain"


def test_overhead_follows_the_cost_correction():
    # The device runs twice as slow as the profile says: the overhead a newcomer saves is
    # 2 ms, so at 1000 req/s (10 in 10 ms) one queued request now waits (1 < 2).
    s = make()
    s.estimator.correction = 2.0
    assert s.estimator.batch_overhead_ms() == 2.0
    rid = stream(s, 10, 1.0)
    s.submit(req(rid, 1.0), 1.0)
    assert s.schedule(1.0).reason == "wait"
    s.estimator.correction = 0.5
    assert len(s.schedule(1.0).batch) == 1
