"""The scheduler step function, driven by a fake clock (plain floats; nothing sleeps)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from scheduler_core.cost_model import CostEstimator, batch_shape, formula_ms
from scheduler_core.profile import ControlConfig, CostModelConfig, SchedulerConfig
from scheduler_core.request import QueuedRequest, Served
from scheduler_core.entry_queue import take_fifo
from scheduler_core.contract import QueueFull
from scheduler_core.scheduler import Scheduler

# These tests pin down default dynamic batching (FIFO, elastic window, SLA guard): the
# explicit-control layer is off; tests/unit/scheduler_core/test_explicit_control.py covers it.
DEFAULT_BATCHING_ONLY = ControlConfig(enabled=False, safe_zone_batching="fifo")

# A flat 1 ms per batch, whatever its shape.
FLAT_COST = replace(CostModelConfig(), fixed_ms=1.0, per_sequence_ms=0.0, per_token_ms=0.0,
                    per_token_squared_ms=0.0)


# Waiting always pays (the largest weight the profile allows): these tests pin the window
# and the SLA guard; test_wait_payoff.py pins the worth-its-wait rule.
ALWAYS_WAIT = 1_000_000.0


def make(cost: CostModelConfig = FLAT_COST, **overrides) -> Scheduler:
    # alpha = beta = 0 keeps the window at exactly base_window_ms unless a test sets them.
    base = dict(base_window_ms=10.0, alpha=0.0, beta=0.0, min_window_ms=0.0,
                max_window_ms=50.0, wait_ms_per_saved_device_ms=ALWAYS_WAIT)
    base.update(overrides)
    cfg = replace(SchedulerConfig(), **base)
    return Scheduler(cfg, CostEstimator(cost), DEFAULT_BATCHING_ONLY)


def req(rid: int, arrival_s: float, seq_len: int = 16, sla_ms: float = 10_000.0) -> QueuedRequest:
    return QueuedRequest(request_id=rid, seq_len=seq_len, arrival_s=arrival_s, sla_ms=sla_ms)


def ids(decision) -> list[int]:
    return [r.request_id for r in decision.batch]


# -- QueuedRequest --------------------------------------------------------------------------

def test_queued_request_deadline():
    r = QueuedRequest(1, 8, arrival_s=2.0, sla_ms=250.0)
    assert r.deadline_s == 2.25
    assert r.remaining_sla_ms(2.0) == 250.0
    assert r.remaining_sla_ms(2.5) == -250.0


def test_queued_request_handle_not_compared():
    assert QueuedRequest(1, 8, 0.0, 5.0, handle="a") == QueuedRequest(1, 8, 0.0, 5.0, handle="b")


# -- basic decisions ------------------------------------------------------------------------

def test_empty_queue_is_idle():
    s = make()
    d = s.schedule(0.0)
    assert d.batch == ()
    assert d.reason == "idle"
    assert d.wake_at_s is None
    assert d.estimated_ms == 0.0


def test_partial_batch_waits_for_window_then_dispatches():
    s = make(max_batch_size=8)
    s.submit(req(0, 0.0), 0.0)
    s.submit(req(1, 0.002), 0.002)
    d = s.schedule(0.003)
    assert d.batch == ()
    assert d.reason == "wait"
    assert d.window_ms == 10.0
    assert d.wake_at_s == 0.010  # oldest arrival + window
    assert s.queue_depth == 2

    assert s.schedule(0.0099).batch == ()
    d = s.schedule(0.010)
    assert ids(d) == [0, 1]
    assert d.reason == "window"
    assert d.wake_at_s is None
    assert d.estimated_ms == 1.0
    assert s.queue_depth == 0


def test_wake_at_follows_oldest_not_newest():
    s = make(max_batch_size=8)
    s.submit(req(0, 1.000), 1.000)
    s.submit(req(1, 1.008), 1.008)
    assert s.schedule(1.008).wake_at_s == pytest.approx(1.010, abs=1e-12)


def test_default_alpha_widens_window_when_idle():
    s = make(base_window_ms=5.0, alpha=0.2)
    s.submit(req(0, 0.0), 0.0)
    d = s.schedule(0.0)
    assert d.window_ms == pytest.approx(6.0, rel=1e-12)   # 5 * (1 + 0.2*(1-0)^2)
    assert d.utilization == 0.0
    assert d.wake_at_s == pytest.approx(0.006, rel=1e-12)


def test_fifo_order_within_and_across_batches():
    s = make(max_batch_size=3)
    for i in range(7):
        s.submit(req(i, 0.0), 0.0)
    assert ids(s.schedule(0.0)) == [0, 1, 2]
    assert ids(s.schedule(0.0)) == [3, 4, 5]
    assert s.schedule(0.0).batch == ()          # one left, window not closed
    assert ids(s.schedule(0.010)) == [6]


def test_full_batch_dispatches_at_once():
    s = make(max_batch_size=4)
    for i in range(3):
        s.submit(req(i, 0.0), 0.0)
        assert s.schedule(0.0).batch == ()
    s.submit(req(3, 0.0005), 0.0005)
    d = s.schedule(0.0005)
    assert ids(d) == [0, 1, 2, 3]
    assert d.reason == "full"


def test_more_than_a_full_batch_dispatches_first_batch_at_once():
    s = make(max_batch_size=4)
    for i in range(5):
        s.submit(req(i, 0.0), 0.0)
    d = s.schedule(0.0)
    assert ids(d) == [0, 1, 2, 3] and d.reason == "full"
    d = s.schedule(0.0)
    assert d.batch == () and d.wake_at_s == 0.010


# -- SLA guard ------------------------------------------------------------------------------

def test_sla_guard_dispatches_before_window_closes():
    cost = replace(FLAT_COST, fixed_ms=5.0)
    s = make(cost, base_window_ms=50.0)
    s.submit(req(0, 0.0, sla_ms=20.0), 0.0)
    d = s.schedule(0.0)
    assert d.batch == ()
    # deadline 0.020 - estimated 5 ms = 0.015, earlier than the window (0.050)
    assert d.wake_at_s == pytest.approx(0.015, abs=1e-12)
    assert s.schedule(0.0149).batch == ()
    d = s.schedule(0.015)
    assert ids(d) == [0]
    assert d.reason == "deadline"
    assert d.estimated_ms == 5.0


def test_sla_guard_uses_most_urgent_member():
    cost = replace(FLAT_COST, fixed_ms=2.0)
    s = make(cost, base_window_ms=50.0)
    s.submit(req(0, 0.0, sla_ms=1000.0), 0.0)
    assert s.schedule(0.0).wake_at_s == pytest.approx(0.050, abs=1e-12)
    s.submit(req(1, 0.004, sla_ms=10.0), 0.004)     # deadline 0.014, latest start 0.012
    d = s.schedule(0.004)
    assert d.wake_at_s == pytest.approx(0.012, abs=1e-12)
    d = s.schedule(0.012)
    assert ids(d) == [0, 1] and d.reason == "deadline"


def test_sla_guard_accounts_for_estimated_cost_of_bigger_batch():
    # cost grows with tokens: the guard must use the estimate of the whole candidate batch
    cost = replace(FLAT_COST, fixed_ms=1.0, per_token_ms=0.1)
    s = make(cost, base_window_ms=100.0, max_window_ms=200.0, max_batch_size=16)
    for i in range(4):
        s.submit(req(i, 0.0, seq_len=50, sla_ms=100.0), 0.0)
    # padded tokens 200 -> estimate 1 + 20 = 21 ms -> latest start 0.079
    d = s.schedule(0.0)
    assert d.wake_at_s == pytest.approx(0.079, abs=1e-12)


def test_missed_deadline_dispatches_immediately():
    s = make(base_window_ms=50.0)
    s.submit(req(0, 0.0, sla_ms=0.5), 0.0)      # deadline before even 1 ms of work
    d = s.schedule(0.0)
    assert ids(d) == [0] and d.reason == "deadline"


# -- falling behind ---------------------------------------------------------------------------

def test_behind_scheduler_drains_queue_into_one_batch():
    s = make(max_batch_size=32)
    for i in range(10):
        s.submit(req(i, i * 0.001), i * 0.001)
    d = s.schedule(0.5)
    assert ids(d) == list(range(10))
    assert d.reason == "window"
    assert s.queue_depth == 0


def test_behind_scheduler_forms_full_batches_not_singletons():
    s = make(max_batch_size=32)
    for i in range(40):
        s.submit(req(i, i * 0.0001), i * 0.0001)
    first = s.schedule(1.0)
    second = s.schedule(1.0)
    assert ids(first) == list(range(32)) and first.reason == "full"
    assert ids(second) == list(range(32, 40))
    assert s.queue_depth == 0


# -- token limit ------------------------------------------------------------------------------

def test_max_batch_tokens_counts_padded_tokens():
    s = make(max_batch_size=16, max_batch_tokens=100)
    for i, n in enumerate([30, 20, 40, 10]):
        s.submit(req(i, 0.0, seq_len=n), 0.0)
    # 30, 20 -> 2*30 = 60 fits; adding 40 -> 3*40 = 120 does not
    d = s.schedule(0.0)
    assert ids(d) == [0, 1] and d.reason == "full"
    d = s.schedule(0.010)
    assert ids(d) == [2, 3]          # 2*40 = 80
    assert len(d.batch) * max(r.seq_len for r in d.batch) <= 100


def test_max_batch_tokens_boundary_is_inclusive():
    s = make(max_batch_size=16, max_batch_tokens=100)
    for i in range(5):
        s.submit(req(i, 0.0, seq_len=25), 0.0)
    d = s.schedule(0.0)
    assert ids(d) == [0, 1, 2, 3]    # 4*25 = 100 exactly


def test_oversized_request_dispatches_alone_at_once_when_others_wait():
    s = make(max_batch_size=16, max_batch_tokens=100)
    s.submit(req(0, 0.0, seq_len=150), 0.0)
    s.submit(req(1, 0.0, seq_len=10), 0.0)
    d = s.schedule(0.0)
    assert ids(d) == [0] and d.reason == "full"
    assert [r.request_id for r in s.drain()] == [1]


def test_oversized_request_alone_still_dispatches():
    s = make(max_batch_size=16, max_batch_tokens=100)
    s.submit(req(0, 0.0, seq_len=150), 0.0)
    assert s.schedule(0.0).wake_at_s == 0.010
    d = s.schedule(0.010)
    assert ids(d) == [0]


@given(st.lists(st.integers(1, 512), min_size=1, max_size=40), st.integers(1, 16),
       st.integers(1, 4096))
def test_take_fifo_is_longest_prefix_within_limits(lengths, max_size, max_tokens):
    queue = [req(i, 0.0, seq_len=n) for i, n in enumerate(lengths)]
    batch = take_fifo(queue, max_size, max_tokens)
    assert batch == queue[: len(batch)]
    assert 1 <= len(batch) <= max_size
    longest = max(r.seq_len for r in batch)
    if len(batch) > 1:
        assert len(batch) * longest <= max_tokens
    if len(batch) < min(max_size, len(queue)):
        nxt = queue[len(batch)]
        assert (len(batch) + 1) * max(longest, nxt.seq_len) > max_tokens


# -- queue management ---------------------------------------------------------------------------

def test_queue_full_at_max_queued_requests():
    s = make(max_queued_requests=3, max_batch_size=2)
    for i in range(3):
        s.submit(req(i, 0.0), 0.0)
    with pytest.raises(QueueFull):
        s.submit(req(3, 0.0), 0.0)
    assert s.queue_depth == 3
    assert ids(s.schedule(0.0)) == [0, 1]
    s.submit(req(4, 0.001), 0.001)      # room again
    assert s.queue_depth == 2


def test_flush_dispatches_at_once():
    s = make(max_batch_size=8)
    s.submit(req(0, 0.0), 0.0)
    s.submit(req(1, 0.0), 0.0)
    assert s.schedule(0.0).batch == ()
    d = s.schedule(0.0, flush=True)
    assert ids(d) == [0, 1] and d.reason == "flush"
    d = s.schedule(0.0, flush=True)
    assert d.batch == () and d.reason == "idle"


def test_flush_respects_batch_limits():
    s = make(max_batch_size=2)
    for i in range(3):
        s.submit(req(i, 0.0), 0.0)
    assert ids(s.schedule(0.0, flush=True)) == [0, 1]
    assert ids(s.schedule(0.0, flush=True)) == [2]


def test_drain_returns_everything_in_order():
    s = make(max_batch_size=2)
    for i in range(5):
        s.submit(req(i, 0.0), 0.0)
    assert [r.request_id for r in s.drain()] == [0, 1, 2, 3, 4]
    assert s.queue_depth == 0
    assert s.schedule(1.0).reason == "idle"
    assert s.drain() == []


def test_queued_run_ms_is_the_queue_cut_into_batches_each_paying_its_launch():
    """What a hold call still has to run: the queue in order, cut at max_batch_size and at
    max_batch_tokens (padded), each batch estimated whole (a launch each)."""
    cost = replace(FLAT_COST, per_token_ms=0.01)  # 1 ms a batch + 0.01 ms a padded token
    s = make(cost, max_batch_size=2, max_batch_tokens=100)
    assert s.queued_run_ms() == 0.0
    for i, n in enumerate([10, 20, 30, 60]):
        s.submit(req(i, 0.0, seq_len=n), 0.0)
    # [10, 20] (2 x 20 tokens), then [30] (60 would pad 2 x 60 > 100), then [60]
    est = s.estimator.estimate_ms
    assert s.queued_run_ms() == pytest.approx(est([10, 20]) + est([30]) + est([60]))
    assert s.queued_run_ms() == pytest.approx((1 + 0.4) + (1 + 0.3) + (1 + 0.6))


def test_remove_takes_requests_out():
    s = make(max_batch_size=8)
    for i in range(5):
        s.submit(req(i, i * 0.001), i * 0.001)
    removed = s.remove([3, 1, 99])
    assert [r.request_id for r in removed] == [1, 3]
    assert s.queue_depth == 3
    d = s.schedule(1.0)
    assert ids(d) == [0, 2, 4]


def test_remove_oldest_moves_window_to_next_oldest():
    s = make(max_batch_size=8)
    s.submit(req(0, 0.0), 0.0)
    s.submit(req(1, 0.004), 0.004)
    s.remove([0])
    assert s.schedule(0.005).wake_at_s == pytest.approx(0.014, abs=1e-12)


# -- feedback ---------------------------------------------------------------------------------

def test_feedback_updates_utilization_window_and_stats():
    s = make(base_window_ms=10.0, alpha=0.4, perception_window_ms=1000.0, max_batch_size=4)
    for i in range(4):
        s.submit(req(i, 0.0), 0.0)
    d = s.schedule(0.0)
    s.batch_started(d.batch, 0.0)
    s.tick(0.25)                                      # a perception period (200 ms) later
    assert s.stats(0.25).utilization == 0.25         # open busy interval counts
    s.batch_finished(d.batch, 0.0, 0.5)
    s.tick(0.5)
    st_ = s.stats(0.5)
    assert st_.window_ms == pytest.approx(10.0 * (1 + 0.4 * 0.25), rel=1e-12)
    assert st_.batches == 1 and st_.requests == 4 and st_.queue_depth == 0
    assert st_.utilization == 0.5
    assert st_.delay_variation == 0.0                  # four equal latencies
    # the batch took 500 ms against a 1 ms estimate: ratio clamped to 20
    assert st_.cost_correction == pytest.approx(1.0 + 0.2 * 19.0, rel=1e-12)


def test_a_batch_ended_then_observed_leaves_the_state_a_finished_batch_leaves():
    """The server's split feedback (``batch_ended`` at once; ``batch_observed`` later,
    while the next batch runs) ends where ``batch_finished`` does; between the two, the
    device is already free for the next decision."""
    runs = []
    for split in (False, True):
        s = make(base_window_ms=10.0, alpha=0.4, perception_window_ms=1000.0, max_batch_size=4)
        for i in range(4):
            s.submit(req(i, 0.0), 0.0)
        d = s.schedule(0.0)
        s.batch_started(d.batch, 0.0)
        if split:
            s.batch_ended(0.5)
            assert s.controller.state.last_finish_s == 0.5
            assert s.stats(0.5).batches == 0  # the counts come with the observation
            s.batch_observed(Served.of(d.batch), 0.0, 0.5)
        else:
            s.batch_finished(d.batch, 0.0, 0.5)
        s.tick(0.5)
        runs.append((s.stats(0.5), s.controller.state))
    assert runs[0] == runs[1]


def test_failed_batch_does_not_refit_cost():
    s = make(max_batch_size=1)
    s.submit(req(0, 0.0), 0.0)
    d = s.schedule(0.0)
    s.batch_started(d.batch, 0.0)
    s.batch_finished(d.batch, 0.0, 0.1, succeeded=False)
    s.tick(0.2)
    st_ = s.stats(0.2)
    assert st_.cost_correction == 1.0
    assert st_.batches == 1 and st_.requests == 1
    assert st_.utilization == pytest.approx(0.1, rel=1e-12)


def test_delay_variation_shrinks_window():
    """The window reads the one delay variation the zones read too: the coefficient of
    variation of the P99 over the recent perception periods."""
    s = make(base_window_ms=10.0, beta=0.5, min_window_ms=1.0, max_batch_size=1,
             perception_window_ms=100.0)
    s.submit(req(0, 0.0), 0.0)
    s.batch_finished((req(0, 0.0),), 0.09, 0.1)  # latency 100 ms
    s.tick(0.1)  # P99 history [100]: no variation yet
    assert s.stats(0.1).window_ms == pytest.approx(10.0, rel=1e-9)
    s.submit(req(1, 0.33), 0.33)
    s.batch_finished((req(1, 0.33),), 0.34, 0.35)  # latency 20 ms; the 100 ms one aged out
    s.tick(0.35)  # P99 history [100, 20] -> CV = sqrt(3200)/60
    cv = (3200 ** 0.5) / 60
    window_ms = s.stats(0.35).window_ms
    assert s.stats(0.35).delay_variation == pytest.approx(cv, rel=1e-9)
    assert window_ms == pytest.approx(max(10.0 * (1 - 0.5 * cv), 1.0), rel=1e-9)
    assert window_ms < 10.0


# -- property tests: an event loop with a fake clock -------------------------------------------

arrival = st.tuples(
    st.floats(0.0, 30.0, allow_nan=False),        # gap to previous arrival, ms
    st.integers(1, 512),                           # sequence length
    st.floats(10.0, 500.0, allow_nan=False),      # SLA, ms
)


def run_event_loop(sched: Scheduler, arrivals, device_cost: CostModelConfig, slowdown: float):
    """Drive ``sched`` with a fake clock: schedule whenever the device is free, advance to
    the next arrival, wake-up or batch finish. Returns the dispatched batches with times."""
    times, t = [], 0.0
    for gap_ms, _, _ in arrivals:
        t += gap_ms / 1000.0
        times.append(t)
    reqs = [req(i, times[i], seq_len=n, sla_ms=sla) for i, (_, n, sla) in enumerate(arrivals)]
    max_window_s = sched.cfg.max_window_ms / 1000.0

    now, nxt_arrival = 0.0, 0
    pending: list[QueuedRequest] = []      # submitted, not yet dispatched (FIFO)
    inflight, started, busy_until = None, 0.0, 0.0
    batches = []
    for _ in range(20 * len(reqs) + 100):
        while nxt_arrival < len(reqs) and reqs[nxt_arrival].arrival_s <= now:
            sched.submit(reqs[nxt_arrival], now)
            pending.append(reqs[nxt_arrival])
            nxt_arrival += 1
        if inflight is not None and busy_until <= now:
            sched.batch_finished(inflight, started, now)
            inflight = None
        wake = None
        if inflight is None:
            d = sched.schedule(now)
            if d.batch:
                batches.append((now, d.batch))
                assert list(d.batch) == pending[: len(d.batch)], "not FIFO"
                del pending[: len(d.batch)]
                lengths = [r.seq_len for r in d.batch]
                duration_s = formula_ms(device_cost, batch_shape(lengths)) * slowdown / 1000.0
                sched.batch_started(d.batch, now)
                inflight, started, busy_until = d.batch, now, now + duration_s
                continue  # device now busy: re-evaluate at the same time
            if pending:
                assert d.reason == "wait"
                assert d.wake_at_s is not None and d.wake_at_s > now
                # liveness: an idle device never lets the oldest request wait past max window
                assert d.wake_at_s <= pending[0].arrival_s + max_window_s + 1e-9
                wake = d.wake_at_s
            else:
                assert d.reason == "idle" and d.wake_at_s is None
        candidates = [c for c in (
            reqs[nxt_arrival].arrival_s if nxt_arrival < len(reqs) else None,
            wake,
            busy_until if inflight is not None else None) if c is not None]
        if not candidates:
            break
        new_now = min(candidates)
        assert new_now >= now
        now = new_now
    else:
        pytest.fail("event loop did not terminate: something waits forever")
    return reqs, batches, sched


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrivals=st.lists(arrival, min_size=1, max_size=60),
       max_batch_size=st.integers(1, 32),
       max_batch_tokens=st.integers(256, 8192),
       base_window_ms=st.floats(0.0, 20.0),
       alpha=st.floats(0.0, 1.0),
       beta=st.floats(0.0, 1.0),
       slowdown=st.sampled_from([0.5, 1.0, 2.0]))
def test_event_loop_dispatches_every_request_exactly_once(
        arrivals, max_batch_size, max_batch_tokens, base_window_ms, alpha, beta, slowdown):
    # T4-like device cost (ms-scale batches) with a scheduler estimate that may be off by 2x
    device_cost = replace(CostModelConfig(), fixed_ms=1.2, per_sequence_ms=0.02,
                          per_token_ms=0.0065, per_token_squared_ms=0.0000014)
    cfg = replace(SchedulerConfig(), max_batch_size=max_batch_size,
                  max_batch_tokens=max_batch_tokens, base_window_ms=base_window_ms,
                  min_window_ms=0.0, max_window_ms=20.0, alpha=alpha, beta=beta)
    sched = Scheduler(cfg, CostEstimator(device_cost), DEFAULT_BATCHING_ONLY)
    reqs, batches, sched = run_event_loop(sched, arrivals, device_cost, slowdown)

    dispatched = [r.request_id for _, batch in batches for r in batch]
    assert sorted(dispatched) == list(range(len(reqs)))          # exactly once each
    assert dispatched == list(range(len(reqs)))                   # in FIFO order
    assert sched.queue_depth == 0
    for when, batch in batches:
        assert 1 <= len(batch) <= max_batch_size
        if len(batch) > 1:
            assert len(batch) * max(r.seq_len for r in batch) <= max_batch_tokens
        assert all(r.arrival_s <= when for r in batch)
    stats = sched.stats(max(when for when, _ in batches) + 10.0)
    assert stats.requests == len(reqs)
    assert stats.batches == len(batches)


@settings(max_examples=60, deadline=None)
@given(arrivals=st.lists(arrival, min_size=1, max_size=60))
def test_event_loop_with_default_config(arrivals):
    sched = Scheduler(SchedulerConfig(), CostEstimator(CostModelConfig()), DEFAULT_BATCHING_ONLY)
    reqs, batches, sched = run_event_loop(sched, arrivals, CostModelConfig(), 1.0)
    dispatched = [r.request_id for _, batch in batches for r in batch]
    assert dispatched == list(range(len(reqs)))
    for _, batch in batches:
        assert len(batch) <= SchedulerConfig().max_batch_size
        if len(batch) > 1:
            assert len(batch) * max(r.seq_len for r in batch) <= SchedulerConfig().max_batch_tokens


def test_event_loop_burst_forms_full_batches():
    # 64 requests arrive together while the device is slow: batches are full, not size 1
    device_cost = replace(FLAT_COST, fixed_ms=20.0)
    sched = make(device_cost, max_batch_size=16)
    arrivals = [(0.0, 32, 10_000.0)] * 64
    _, batches, _ = run_event_loop(sched, arrivals, device_cost, 1.0)
    assert [len(b) for _, b in batches] == [16, 16, 16, 16]
    assert [when for when, _ in batches] == pytest.approx([0.0, 0.02, 0.04, 0.06])


# -- a hand-over taken as handed (intake hold, outside explicit control) ------------------

from scheduler_core.contract import Mode, decide  # noqa: E402
from scheduler_core.profile_parse import with_emulation, with_overrides  # noqa: E402
from scheduler_core.profile_files import load_profile, profile_path  # noqa: E402

_PROFILES = "model_repository/emulated_explicit/profiles"
_FLAT = {"cost_model": {"fixed_ms": 3.9, "per_sequence_ms": 0.0, "per_token_ms": 0.0006,
                        "per_token_squared_ms": 0.0},
         "scheduler": {"max_batch_size": 64, "max_batch_tokens": 32768}}
_CONTROLS = {"shipped": {}, "refuse_late": {"refusal_late_share": 0.2},
             "margin": {"infeasible_margin_ms": 2.0},
             "explicit": {"prewarm_utilization": 0.0, "priority_slots": 3},
             "emergency": {"nml_score": 0.005, "danger_zone_threshold": 0.01},
             "fifo": {"safe_zone_batching": "fifo", "explicit_former": "fifo"}}


def _twin_profile(name: str, cost_mode: str, control: str):
    base = "t4" if name == "flat" else name
    profile = with_emulation(load_profile(profile_path(_PROFILES, base)),
                             {"cost_mode": cost_mode}, "test")
    return with_overrides(profile, {**(_FLAT if name == "flat" else {}),
                                    "control": _CONTROLS[control]}, "test")


def _played(profile, history, slowdown: float) -> tuple[Scheduler, float]:
    """A scheduler that ran ``history`` (hand-overs of (lengths, SLAs, waited ms), one
    every 20 ms, each submitted, decided with flush and run at ``slowdown`` times the
    estimate): the same state for every call."""
    s = Scheduler.from_profile(profile)
    now = 10.0
    for lengths, slas, waited_ms in history:
        for k, (n, sla) in enumerate(zip(lengths, slas)):
            s.submit(QueuedRequest(k, n, now - waited_ms / 1000.0, sla), now)
        while s.queue_depth:
            d = decide(s, now, flush=True)
            if d.batch:
                s.batch_started(d.batch, now)
                now += slowdown * d.estimated_ms / 1000.0
                s.batch_finished(d.batch, now - slowdown * d.estimated_ms / 1000.0, now)
        now += 0.02
    return s, now


# (lengths, SLAs, waited ms): small quiet hand-overs (most are taken) and any at all.
hand_over = st.tuples(
    st.one_of(st.lists(st.integers(1, 64), min_size=1, max_size=8),
              st.lists(st.integers(1, 512), min_size=1, max_size=70)),
    st.one_of(st.just([10_000.0] * 70),
              st.lists(st.sampled_from([5.0, 50.0, 100.0, 200.0, 10_000.0]), min_size=70,
                       max_size=70)),
    st.one_of(st.floats(0.0, 5.0), st.floats(0.0, 120.0)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["t4", "a100", "h200_minilm", "flat"]),
       cost_mode=st.sampled_from(["padded", "ragged"]), control=st.sampled_from(list(_CONTROLS)),
       history=st.lists(hand_over, max_size=6), call=hand_over,
       slowdown=st.sampled_from([0.5, 1.0, 3.0]))
# A fresh scheduler: the decision's first perception sees the hand-over's 5 ms SLA, whose
# reserved-capacity cap (2.0 ms) leaves the second request out; the taker must too.
@example(name="t4", cost_mode="padded", control="shipped", history=[],
         call=([1, 58], [5.0] * 70, 0.0), slowdown=0.5)
# h200_minilm's table refit by batches that ran at 3x their estimate: seven 1-token
# requests split from one of 497 saves more than the fitted line's padding says; the
# taker asks the table's own split (it took the batch whole at 47fcb2a).
@example(name="h200_minilm", cost_mode="padded", control="shipped",
         history=[([1] * 7 + [434], [10_000.0] * 70, 0.0),
                  ([1] * 7 + [512], [10_000.0] * 70, 0.0)],
         call=([1] * 7 + [497], [10_000.0] * 70, 0.0), slowdown=3.0)
def test_a_hand_over_is_taken_as_handed_only_where_schedule_forms_it_whole(
        name, cost_mode, control, history, call, slowdown):
    """Twins in the same state: one takes the hand-over as handed, the other submits it
    and decides with flush (intake hold's explicit path). Wherever the first takes it, the
    second forms that very batch, whole, refusing none, with the same estimate, and both
    measure the same late share; where it declines, it queued nothing and counted no
    arrival."""
    _taken_only_where_formed_whole(name, cost_mode, control, history, call, slowdown)


# Hand-overs the danger zone's emergency policy may keep whole: lengths short and long
# (small batches pay past about 20 tokens on the flat profile), SLAs from urgent to loose.
danger_hand_over = st.tuples(
    st.one_of(st.lists(st.integers(1, 32), min_size=1, max_size=16),
              st.lists(st.integers(1, 512), min_size=1, max_size=70)),
    st.one_of(st.just([10_000.0] * 70),
              st.lists(st.sampled_from([50.0, 100.0, 200.0]), min_size=70, max_size=70),
              st.lists(st.sampled_from([8.0, 15.0, 50.0, 200.0]), min_size=70, max_size=70)),
    st.floats(0.0, 20.0))


def in_the_danger_zone(test):
    """The property tests' twins in the danger zone (control ``emergency``): any profile
    and cost mode, a short history, one call."""
    return settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])(given(
        name=st.sampled_from(["t4", "a100", "h200_minilm", "flat"]),
        cost_mode=st.sampled_from(["padded", "ragged"]),
        history=st.lists(danger_hand_over, max_size=4), call=danger_hand_over,
        slowdown=st.sampled_from([0.5, 1.0, 3.0]))(test))


# h200_minilm's padded table: the emergency scan alone would leave fifteen 1-token
# requests out of a 27-token seed's batch (past the table's launch-bound region); the
# emergency former prices the call whole first, and the taker takes what it forms.
@example(name="h200_minilm", cost_mode="padded",
         history=[([1] * 6, [10_000.0] * 70, 0.0), ([1], [10_000.0] * 70, 0.0)],
         call=([1] * 15 + [27], [10_000.0] * 70, 0.0), slowdown=0.5)
@in_the_danger_zone
def test_in_the_danger_zone_a_hand_over_is_taken_only_where_the_emergency_policy_keeps_it(
        name, cost_mode, history, call, slowdown):
    """``test_a_hand_over_is_taken_as_handed_only_where_schedule_forms_it_whole`` with
    the danger zone's emergency policy deciding every call: where the taker takes a
    hand-over whole, the emergency former forms that very batch (no urgent lane of small
    batches)."""
    _taken_only_where_formed_whole(name, cost_mode, "emergency", history, call, slowdown)


def _twins(profile, history, call, slowdown):
    """Two schedulers that ran ``history`` (``_played``), the hand-over ``call`` as
    requests, and the first's arrival rate before it."""
    history = [(lengths, slas[:len(lengths)], waited) for lengths, slas, waited in history]
    taker, now = _played(profile, history, slowdown)
    decider, _ = _played(profile, history, slowdown)
    lengths, slas, waited_ms = call
    batch = [QueuedRequest(1000 + k, n, now - waited_ms / 1000.0, sla)
             for k, (n, sla) in enumerate(zip(lengths, slas))]
    arrivals = taker.controller.arrivals.rate_rps(now)
    return taker, decider, now, batch, arrivals


def _taken_only_where_formed_whole(name, cost_mode, control, history, call, slowdown):
    taker, decider, now, batch, arrivals = _twins(_twin_profile(name, cost_mode, control),
                                                  history, call, slowdown)

    estimate = taker.takes_as_handed(now, batch)
    if estimate is not None:
        taker.batch_started(batch, now)  # the caller runs what was taken: then it counts

    for r in batch:
        decider.submit(r, now)
    decision = decide(decider, now, flush=True)
    if estimate is None:
        assert taker.queue_depth == 0 and taker.controller.arrivals.rate_rps(now) == arrivals
        return
    assert not decision.rejected
    assert sorted(r.request_id for r in decision.batch) == [r.request_id for r in batch]
    assert estimate == pytest.approx(decision.estimated_ms)
    assert taker.controller.arrivals.rate_rps(now) == arrivals + len(batch) / taker.controller.arrivals.window_s
    assert taker.late_share == decider.late_share


# Hand-overs a split may pay for: mostly short, some long, up to a full batch.
split_hand_over = st.tuples(
    st.lists(st.one_of(st.integers(1, 64), st.integers(1, 64), st.integers(65, 512)),
             min_size=2, max_size=64),
    st.one_of(st.just([10_000.0] * 70),
              st.lists(st.sampled_from([20.0, 50.0, 100.0, 200.0, 10_000.0]), min_size=70,
                       max_size=70)),
    st.one_of(st.floats(0.0, 5.0), st.floats(0.0, 60.0)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["t4", "a100", "h200_minilm", "flat"]),
       control=st.sampled_from(list(_CONTROLS)), history=st.lists(hand_over, max_size=4),
       call=st.one_of(split_hand_over, hand_over), slowdown=st.sampled_from([0.5, 1.0, 3.0]))
def test_a_hand_over_is_planned_at_hand_over_only_as_schedule_runs_it(
        name, control, history, call, slowdown):
    """Twins in the same state: one plans the hand-over at hand-over
    (``takes_planned``), the other submits it and decides with flush, then decides again
    at its first batch's estimated end (intake hold's decide-ahead). Where the first plans
    it, the second forms those very batches, in that order, with the same estimates,
    refusing none and leaving nothing queued, and both count the same arrivals and late
    share; where it declines, it queued nothing and counted no arrival."""
    taker, decider, now, batch, arrivals = _twins(_twin_profile(name, "padded", control),
                                                  history, call, slowdown)

    planned = taker.takes_planned(now, batch)
    if planned is None:
        assert taker.queue_depth == 0 and taker.controller.arrivals.rate_rps(now) == arrivals
        return
    first, first_ms, rest, rest_ms = planned
    taker.batch_started(first, now)  # the caller runs what was taken: then it counts

    for r in batch:
        decider.submit(r, now)
    decisions = [decide(decider, now, flush=True)]
    if rest:
        decider.batch_started(decisions[0].batch, now)
        decisions.append(decide(decider, now + decisions[0].estimated_ms / 1000.0, flush=True))
    for decision, (members, estimate) in zip(decisions, ((first, first_ms), (rest, rest_ms))):
        assert not decision.rejected
        assert sorted(r.request_id for r in decision.batch) == sorted(
            r.request_id for r in members)
        assert estimate == pytest.approx(decision.estimated_ms)
    assert decider.queue_depth == 0 and len(first) + len(rest) == len(batch)
    assert taker.controller.arrivals.rate_rps(now) == decider.controller.arrivals.rate_rps(now)
    assert taker.late_share == decider.late_share


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["t4", "a100", "h200_minilm", "flat"]),
       cost_mode=st.sampled_from(["padded", "ragged"]), control=st.sampled_from(list(_CONTROLS)),
       history=st.lists(hand_over, max_size=6), call=hand_over,
       slowdown=st.sampled_from([0.5, 1.0, 3.0]))
def test_a_hand_over_launched_first_is_one_takes_as_handed_takes_whole(
        name, cost_mode, control, history, call, slowdown):
    """Twins in the same state, with no period due (both just ticked): wherever one
    launches a hand-over from its lengths alone (``launches_as_handed``, the SLAs not
    read), the other takes it as handed with its SLAs, for any SLAs at or above the floor,
    with the same estimate; once told the SLAs (``took_as_handed``) and started, the
    first has counted what the second counted. Where it declines, nothing changed."""
    _launched_only_where_taken(name, cost_mode, control, history, call, slowdown)


@in_the_danger_zone
def test_in_the_danger_zone_a_hand_over_launched_first_is_one_takes_as_handed_takes_whole(
        name, cost_mode, history, call, slowdown):
    """``test_a_hand_over_launched_first_is_one_takes_as_handed_takes_whole`` with the
    danger zone's emergency policy deciding every call."""
    _launched_only_where_taken(name, cost_mode, "emergency", history, call, slowdown)


def _launched_only_where_taken(name, cost_mode, control, history, call, slowdown):
    profile = _twin_profile(name, cost_mode, control)
    history = [(lengths, slas[:len(lengths)], waited) for lengths, slas, waited in history]
    launcher, now = _played(profile, history, slowdown)
    taker, _ = _played(profile, history, slowdown)
    for s in (launcher, taker):
        s.tick(now)
    floor = launcher.controller.sla_floor_ms
    lengths, slas, waited_ms = call
    arrival = now - waited_ms / 1000.0
    batch = [QueuedRequest(1000 + k, n, arrival, max(sla, floor))
             for k, (n, sla) in enumerate(zip(lengths, slas))]
    arrivals = launcher.controller.arrivals.rate_rps(now)

    estimate = launcher.launches_as_handed(now, lengths, arrival)
    if estimate is None:
        assert launcher.queue_depth == 0 and launcher.controller.arrivals.rate_rps(now) == arrivals
        return
    assert floor < math.inf
    assert taker.takes_as_handed(now, batch) == pytest.approx(estimate)
    launcher.took_as_handed(now, batch, estimate, launcher.mode())
    for s in (launcher, taker):
        s.batch_started(batch, now)
    assert launcher.controller.arrivals.rate_rps(now) == taker.controller.arrivals.rate_rps(now)
    assert launcher.late_share == taker.late_share
    assert launcher.counts == taker.counts


def _decisions(s: Scheduler, now: float) -> list[tuple]:
    """Flush decisions until the queue is empty, each run at its estimate."""
    out = []
    while s.queue_depth:
        d = decide(s, now, flush=True)
        out.append((sorted(r.request_id for r in d.batch),
                     sorted(r.request_id for r, _ in d.rejected), d.estimated_ms, d.mode))
        if d.batch:
            s.batch_started(d.batch, now)
            now += d.estimated_ms / 1000.0
            s.batch_finished(d.batch, now - d.estimated_ms / 1000.0, now)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["t4", "flat"]), control=st.sampled_from(list(_CONTROLS)),
       history=st.lists(hand_over, max_size=4), call=hand_over,
       max_queue=st.sampled_from([8, 4096]))
def test_submit_all_queues_a_call_as_submit_does_each_request(name, control, history, call,
                                                             max_queue):
    """Twins in the same state: one submits a call's requests one by one (stopping at the
    first QueueFull), the other with ``submit_all``. They leave out the same requests,
    and every decision after is the same (batches, refusals, estimates, mode)."""
    profile = _twin_profile(name, "padded", control)
    history = [(lengths, slas[:len(lengths)], waited) for lengths, slas, waited in history]
    each, now = _played(profile, history, 1.0)
    all_at_once, _ = _played(profile, history, 1.0)
    for s in (each, all_at_once):  # the bound from here on (the history is played out)
        s.cfg = replace(s.cfg, max_queued_requests=max_queue)
    lengths, slas, waited_ms = call
    batch = [QueuedRequest(1000 + k, n, now - waited_ms / 1000.0, sla)
             for k, (n, sla) in enumerate(zip(lengths, slas))]

    left_each = []
    for r in batch:
        try:
            each.submit(r, now)
        except QueueFull:
            left_each.append(r)
    left = all_at_once.submit_all(batch, now)

    assert [r.request_id for r in left] == [r.request_id for r in left_each]
    assert all_at_once.controller.arrivals.rate_rps(now) == each.controller.arrivals.rate_rps(now)
    assert _decisions(all_at_once, now) == _decisions(each, now)


def test_a_quiet_hand_over_is_taken_and_the_emergency_policy_decides():
    """A fresh scheduler (safe zone): twenty short requests with room to spare are one
    batch as handed. Where that queue depth alone means danger, they still are: none is
    urgent, so the emergency policy keeps them whole too. With a 7 ms SLA the most urgent
    is urgent and small batches pay at 16 tokens on t4: the emergency policy's urgent
    lane (a batch of ``emergency_batch_size``) is left to ``schedule``; so is a hand-over
    with one that the batch would make late."""
    batch = [QueuedRequest(k, 16, 9.999, 10_000.0) for k in range(20)]
    shipped = Scheduler.from_profile(_twin_profile("t4", "padded", "shipped"))
    assert shipped.takes_as_handed(10.0, batch) > 0
    danger = Scheduler.from_profile(_twin_profile("t4", "padded", "emergency"))
    assert danger.takes_as_handed(10.0, batch) > 0
    assert danger.mode() == Mode.EMERGENCY
    urgent = [QueuedRequest(k, 16, 10.0, 7.0) for k in range(20)]
    danger = Scheduler.from_profile(_twin_profile("t4", "padded", "emergency"))
    decider = Scheduler.from_profile(_twin_profile("t4", "padded", "emergency"))
    assert danger.takes_as_handed(10.0, urgent) is None
    for r in urgent:
        decider.submit(r, 10.0)
    lane = decide(decider, 10.0, flush=True)
    assert lane.mode == Mode.EMERGENCY
    assert len(lane.batch) == decider.control.emergency_batch_size
    late = [*batch, QueuedRequest(9, 16, 9.0, 100.0)]  # waited 1 s of its 100 ms
    assert Scheduler.from_profile(_twin_profile("t4", "padded", "shipped")).takes_as_handed(
        10.0, late) is None


def test_in_the_danger_zone_a_measured_padded_table_takes_what_the_emergency_plan_forms():
    """On h200_minilm's padded measured table, the danger zone's emergency former plans a
    hold call's whole queue (outside its urgent lane) as the length-aware former does: a
    quiet hand-over that it forms as one batch is taken as handed, with the estimate the
    decision makes, instead of being decoded and decided in full for that same batch."""
    profile = _twin_profile("h200_minilm", "padded", "emergency")
    history = [([1] * 6, [10_000.0] * 6, 0.0), ([1], [10_000.0], 0.0)]
    taker, now = _played(profile, history, 0.5)
    decider, _ = _played(profile, history, 0.5)
    batch = [QueuedRequest(1000 + k, n, now, 10_000.0) for k, n in enumerate([1] * 15 + [27])]
    estimate = taker.takes_as_handed(now, batch)
    assert taker.mode() == Mode.EMERGENCY and estimate is not None
    for r in batch:
        decider.submit(r, now)
    decision = decide(decider, now, flush=True)
    assert decision.mode == Mode.EMERGENCY and len(decision.batch) == len(batch)
    assert estimate == pytest.approx(decision.estimated_ms)


def test_on_a_measured_padded_table_the_split_check_asks_the_table_past_the_line():
    """Thirty 16-token requests and one of 256 on h200_minilm's padded table: by the
    table's line the padding (about 4.7 ms) is more than a launch (about 3.2 ms), but the
    table prices the whole batch at about 6.8 ms and the cheapest split at about 8.3: the
    decision forms it whole, and the as-handed rule, asking the table as the former does,
    takes it with that estimate. With a 512-token member the split pays (8.1 ms against
    13.9), and the rule leaves it to the decision."""
    profile = _twin_profile("h200_minilm", "padded", "shipped")
    for longest, whole in ((256, True), (512, False)):
        batch = [QueuedRequest(k, 16, 10.0, 10_000.0) for k in range(30)]
        batch.append(QueuedRequest(30, longest, 10.0, 10_000.0))
        taker, decider = Scheduler.from_profile(profile), Scheduler.from_profile(profile)
        estimate = taker.takes_as_handed(10.0, batch)
        for r in batch:
            decider.submit(r, 10.0)
        decision = decide(decider, 10.0, flush=True)
        assert (len(decision.batch) == len(batch)) is whole
        assert (estimate is not None) is whole
        if whole:
            assert estimate == pytest.approx(decision.estimated_ms)


def test_a_hand_over_taken_as_handed_counts_once_it_starts_and_once():
    """The server launches a taken hand-over before it reports it started: its arrivals
    (and the late share's hand-over, its dispatch) are counted then, beside the device,
    once. A take the caller never reported counts at the scheduler's next entry."""
    s = Scheduler.from_profile(_twin_profile("t4", "padded", "shipped"))
    batch = [QueuedRequest(k, 16, 9.999, 10_000.0) for k in range(20)]
    window_s = s.controller.arrivals.window_s

    assert s.takes_as_handed(10.0, batch) > 0
    assert s.controller.arrivals.rate_rps(10.0) == 0
    s.batch_started(batch, 10.0)
    assert s.controller.arrivals.rate_rps(10.0) == 20 / window_s
    s.batch_started(batch, 10.0)  # reported twice: counted once
    assert s.controller.arrivals.rate_rps(10.0) == 20 / window_s

    other = Scheduler.from_profile(_twin_profile("t4", "padded", "shipped"))
    assert other.takes_as_handed(10.0, batch) > 0
    other.submit_all([QueuedRequest(99, 16, 10.0, 10_000.0)], 10.0)  # its next entry
    assert other.controller.arrivals.rate_rps(10.0) == 21 / window_s


def _twins_on(batch):
    """A fresh flat padded scheduler's answer for ``batch``, and what its twin decides."""
    profile = _twin_profile("flat", "padded", "shipped")
    taker, decider = Scheduler.from_profile(profile), Scheduler.from_profile(profile)
    estimate = taker.takes_as_handed(10.0, batch)
    for r in batch:
        decider.submit(r, 10.0)
    return estimate, decide(decider, 10.0, flush=True)


def test_a_padded_hand_over_is_taken_whole_where_no_split_saves_a_launch():
    """Thirty lengths spread evenly over 16-512 on the flat profile (3.9 ms a launch,
    0.0006 ms a padded token): their padding (4.5 ms) costs more than a launch, but the
    best split, the shorter half beside the rest, saves 2.2 ms: the former keeps them
    whole, and so does the taker. Two long requests among thirty short ones are the
    other way round: splitting the short ones off saves 8.9 ms, and both split."""
    spread = [QueuedRequest(k, 16 + round(k * 496 / 29), 9.999, 10_000.0) for k in range(30)]
    estimate, decision = _twins_on(spread)
    assert estimate == pytest.approx(decision.estimated_ms)
    assert len(decision.batch) == len(spread)

    bimodal = [QueuedRequest(k, 512 if k < 2 else 16, 9.999, 10_000.0) for k in range(32)]
    estimate, decision = _twins_on(bimodal)
    assert estimate is None
    assert 0 < len(decision.batch) < len(bimodal)


@pytest.mark.parametrize("name", ["h200_minilm", "t4"])
def test_a_requests_estimates_are_the_estimators_as_its_refit_moves(name):
    """Each queued request carries its estimates alone and in an efficient batch of its
    length (``Entry``), kept by length while the estimator's lookups stay as they are: as
    a measured table's refit moves them, the next requests carry the new ones."""
    s = Scheduler.from_profile(_twin_profile(name, "padded", "shipped"))
    est = s.estimator

    def queued_estimates(n: int, now: float) -> tuple[float, float]:
        s.submit_all([QueuedRequest(int(now * 1000), n, now, 100.0)], now)
        e = list(s._queue)[-1]
        return e.alone_ms, e.efficient_ms

    efficient_size = max(1, math.ceil(s.control.min_batch_fill * s.cfg.max_batch_size))

    def fresh(n: int) -> tuple[float, float]:
        return (est.base_uniform_ms(1, n),
                est.base_uniform_ms(max(1, min(efficient_size, s.cfg.max_batch_tokens // n)), n))

    before = queued_estimates(100, 1.0)
    assert before == fresh(100) == queued_estimates(100, 1.1)
    for k in range(20):  # batches of 100 tokens, twice as slow as estimated
        est.observe([100], 2.0 * est.estimate_ms([100]))
    after = queued_estimates(100, 2.0)
    assert after == fresh(100)
    assert (after[0] > before[0]) == (est.table is not None)
    # The as-handed rule notes a hand-over's tightest SLA with its estimate alone from the
    # same memo: the estimator's own, as it moved.
    assert s._alone_ms(100) == est.uniform_ms(1, 100)
