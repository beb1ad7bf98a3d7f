"""The explicit-control layers of the scheduler (perception, decision, execution), driven
by a fake clock: plain float times, nothing sleeps.

Zones are driven through the sidecar utilisation (``set_external_utilization``), the queue
depth and, where needed, fabricated finished requests (latency history for the P99
coefficient of variation and the latency/SLA ratio for compensation). Feedback batches
are reported with ``started == finished`` where the cost estimate must not be refitted
(a zero duration is ignored by the estimator).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from scheduler_core.cost_model import CostEstimator, batch_shape, formula_ms
from scheduler_core.profile import ControlConfig, CostModelConfig, ProfileError, SchedulerConfig
from scheduler_core.profile_parse import profile_from_mapping
from scheduler_core.request import QueuedRequest
from scheduler_core.contract import INFEASIBLE, RejectReason, Zone, refusal_message
from scheduler_core.scheduler import Scheduler

FLAT_COST = replace(CostModelConfig(), fixed_ms=1.0, per_sequence_ms=0.0, per_token_ms=0.0,
                    per_token_squared_ms=0.0)
LOOSE_SLA_MS = 10_000.0


def make(cost: CostModelConfig = FLAT_COST, control: ControlConfig | None = None,
         cost_mode: str = "padded", **overrides) -> Scheduler:
    # alpha = beta = 0: the window is exactly base_window_ms (5 ms) unless a test sets them;
    # waiting always pays (the largest weight the profile allows): these tests pin the
    # window, the SLA guard and explicit control, test_wait_payoff.py the worth-its-wait rule.
    base = dict(base_window_ms=5.0, alpha=0.0, beta=0.0, min_window_ms=0.0, max_window_ms=50.0,
                wait_ms_per_saved_device_ms=1_000_000.0)
    base.update(overrides)
    return Scheduler(replace(SchedulerConfig(), **base), CostEstimator(cost, cost_mode),
                     control if control is not None else ctl())


# The explicit-control knobs these tests reason about, pinned so that a change of profile
# defaults does not silently change what a test checks (ControlConfig() itself is
# exercised by the property tests at the end).
PINNED = dict(priority_slots=4, max_padding_waste=0.30, infeasible_policy="serve_late",
              urgent_threshold=0.5, min_batch_fill=1.0, safe_zone_batching="fifo")


def ctl(**overrides) -> ControlConfig:
    return replace(ControlConfig(), **{**PINNED, **overrides})


def req(rid: int, arrival_s: float, seq_len: int = 16, sla_ms: float = LOOSE_SLA_MS
        ) -> QueuedRequest:
    return QueuedRequest(request_id=rid, seq_len=seq_len, arrival_s=arrival_s, sla_ms=sla_ms)


def ids(decision) -> list[int]:
    return [r.request_id for r in decision.batch]


def submit(s: Scheduler, now: float, *requests: QueuedRequest) -> None:
    for r in requests:
        s.submit(r, now)


def loose(s: Scheduler, now: float, first_id: int, n: int, seq_len: int = 16) -> list[int]:
    submit(s, now, *(req(first_id + i, now, seq_len) for i in range(n)))
    return list(range(first_id, first_id + n))


def feed_finished(s: Scheduler, now: float, latency_ms: float, sla_ms: float = LOOSE_SLA_MS,
                  n: int = 1, first_id: int = 10_000) -> None:
    """Report ``n`` finished requests of the given latency (no cost refit)."""
    batch = [req(first_id + i, now - latency_ms / 1000.0, sla_ms=sla_ms) for i in range(n)]
    s.batch_finished(batch, now, now)


def prewarm(s: Scheduler, now: float, util: float = 0.7) -> None:
    """Explicit mode through pre-warm: utilisation >= 0.65, zone still safe."""
    s.set_external_utilization(util, now)
    s.tick(now)


# -- mode(): which policy the zone calls for ------------------------------------------------

def test_mode_default_when_control_disabled_even_under_load():
    s = make(control=ctl(enabled=False))
    loose(s, 0.0, 0, 20)
    s.set_external_utilization(1.0, 0.0)
    d = s.schedule(0.0)
    assert s.mode() == "default"
    assert d.mode == "default" and d.zone == 0
    assert s.stats(0.0).zone == 0 and s.stats(0.0).prewarmed is False
    assert d.reason == "wait" and d.wake_at_s == 0.005       # plain FIFO window


def test_mode_default_when_safe():
    s = make()
    loose(s, 0.0, 0, 3)
    s.set_external_utilization(0.3, 0.0)
    d = s.schedule(0.0)
    assert s.mode() == "default"
    assert d.mode == "default" and d.zone == int(Zone.SAFE)
    assert d.reason == "wait" and d.wake_at_s == 0.005


def test_mode_explicit_when_prewarmed():
    s = make()
    loose(s, 0.0, 0, 3)
    prewarm(s, 0.0, 0.7)
    assert s.mode() == "explicit"
    st_ = s.stats(0.0)
    assert st_.zone == int(Zone.SAFE) and st_.prewarmed is True
    assert st_.utilization == 0.7
    d = s.schedule(0.005)
    assert d.mode == "explicit" and d.reason == "window" and ids(d) == [0, 1, 2]
    assert s.stats(0.005).explicit_batches == 1


def _drive_p99_cv(s: Scheduler) -> None:
    """Two perception periods with very different P99s: P99 CV far above 0.3."""
    feed_finished(s, 0.0, 10.0)
    s.tick(0.0)                      # P99 history [10]
    feed_finished(s, 0.25, 100.0)   # window holds 10 and 100 -> P99 100


def test_mode_explicit_in_no_mans_land():
    s = make()
    _drive_p99_cv(s)
    loose(s, 0.25, 0, 6)                     # queue depth 6 > 5
    s.set_external_utilization(0.6, 0.25)    # past 0.5, below pre-warm 0.65
    s.tick(0.25)
    st_ = s.stats(0.25)
    assert st_.p99_cv > 0.3
    assert st_.prewarmed is False
    assert st_.zone == int(Zone.NO_MANS_LAND)
    assert s.mode() == "explicit"


def test_two_of_three_indicators_is_not_no_mans_land():
    s = make()
    _drive_p99_cv(s)
    loose(s, 0.25, 0, 5)                     # queue depth exactly at its safe bound
    s.set_external_utilization(0.6, 0.25)
    s.tick(0.25)
    assert s.stats(0.25).zone == int(Zone.SAFE)
    assert s.mode() == "default"


def test_mode_emergency_in_danger():
    s = make()
    loose(s, 0.0, 0, 15)
    s.set_external_utilization(1.0, 0.0)     # 0.5 (util) + 0.3 (queue depth 15) = 0.8
    d = s.schedule(0.0)
    assert s.mode() == "emergency"
    assert d.mode == "emergency" and d.zone == int(Zone.DANGER)
    assert s.stats(0.0).zone_score == pytest.approx(0.8)


def test_queue_depth_14_is_not_danger():
    s = make()
    loose(s, 0.0, 0, 14)                     # 0.5 + 0.27 = 0.77 < 0.78
    s.set_external_utilization(1.0, 0.0)
    s.tick(0.0)
    assert s.stats(0.0).zone == int(Zone.SAFE)
    assert s.mode() == "explicit"            # utilisation 1.0 pre-warms


def test_layers_run_lazily_on_their_periods():
    s = make()
    s.tick(0.0)                              # both layers run on the first call
    s.set_external_utilization(0.7, 0.0625)
    s.tick(0.125)                            # decision only: the observation is from 0.0
    assert s.stats(0.125).observation_age_ms == 125.0
    assert s.stats(0.125).prewarmed is False
    s.tick(0.1875)                           # neither period elapsed
    assert s.stats(0.1875).prewarmed is False
    s.tick(0.25)                             # perception (250 ms) and decision (125 ms)
    st_ = s.stats(0.25)
    assert st_.observation_age_ms == 0.0 and st_.prewarmed is True and st_.utilization == 0.7

    # Queue depth is read live by the decision layer, utilisation from the observation.
    loose(s, 0.28125, 0, 15)
    s.set_external_utilization(1.0, 0.28125)
    s.tick(0.3125)                           # 62.5 ms since the last decision: none
    assert s.stats(0.3125).zone == int(Zone.SAFE)
    s.tick(0.375)                            # decision: util 0.7 (stale obs), depth 15: 0.586
    assert s.stats(0.375).zone == int(Zone.SAFE)
    s.tick(0.5)                              # perception sees 1.0: 0.8 -> danger
    assert s.stats(0.5).zone == int(Zone.DANGER)


def test_decision_reads_queue_depth_live_between_perceptions():
    s = make()
    s.set_external_utilization(1.0, 0.0)
    s.tick(0.0)                              # observation: util 1.0, queue depth 0
    loose(s, 0.03125, 0, 15)
    s.tick(0.0625)                           # 62.5 ms: no decision yet
    assert s.stats(0.0625).zone == int(Zone.SAFE)
    s.tick(0.125)                            # decision only: depth 15 read live -> 0.8
    assert s.observation.queue_depth == 0
    assert s.stats(0.125).zone == int(Zone.DANGER)
    assert s.mode() == "emergency"


# -- urgency order -------------------------------------------------------------------------

def test_least_slack_goes_first_in_explicit_mode_even_if_it_arrived_last():
    s = make(max_batch_size=1)
    submit(s, 0.0, req(0, 0.0, sla_ms=LOOSE_SLA_MS))
    submit(s, 0.001, req(1, 0.001, sla_ms=1000.0))
    submit(s, 0.002, req(2, 0.002, sla_ms=20.0))
    prewarm(s, 0.002)
    d = s.schedule(0.002)
    assert d.mode == "explicit" and d.reason == "full"
    assert ids(d) == [2]


def test_default_mode_is_fifo_for_the_same_queue():
    s = make(max_batch_size=1)
    submit(s, 0.0, req(0, 0.0, sla_ms=LOOSE_SLA_MS))
    submit(s, 0.001, req(1, 0.001, sla_ms=1000.0))
    submit(s, 0.002, req(2, 0.002, sla_ms=20.0))
    s.set_external_utilization(0.3, 0.002)
    assert ids(s.schedule(0.002)) == [0]


def test_urgency_order_by_slack_then_aging():
    s = make(max_batch_size=1)
    submit(s, 0.0, req(0, 0.0, sla_ms=50.0))     # slack 49 ms
    submit(s, 0.0, req(1, 0.0, sla_ms=30.0))     # slack 29 ms
    submit(s, 0.0, req(2, 0.0, sla_ms=40.0))     # slack 39 ms
    prewarm(s, 0.0)
    assert [ids(s.schedule(0.0)) for _ in range(3)] == [[1], [2], [0]]


@pytest.mark.parametrize("when, first", [(1.0, "tight"), (2.5, "loose")])
def test_aging_lifts_a_loose_request_above_fresh_tight_ones(when, first):
    # loose: urgency ~0 + 0.5/s * waited; fresh tight (slack 4 ms): 0.85 ** 0.4 = 0.937
    s = make(max_batch_size=1)
    submit(s, 0.0, req(0, 0.0, sla_ms=100_000.0))
    submit(s, when, req(1, when, sla_ms=5.0))
    prewarm(s, when)
    d = s.schedule(when)
    assert d.mode == "explicit"
    assert ids(d) == ([1] if first == "tight" else [0])


def _stream(aging_per_s: float) -> float:
    """A loose request, then a tight one every ms for 3 s with a 1-slot device: when does
    the loose one go?"""
    s = make(control=ctl(aging_per_s=aging_per_s), max_batch_size=1)
    submit(s, 0.0, req(0, 0.0, sla_ms=60_000.0))
    for k in range(1, 3001):
        now = k / 1000.0
        submit(s, now, req(k, now, sla_ms=30.0))
        s.set_external_utilization(0.7, now)
        d = s.schedule(now)
        assert d.mode == "explicit" and len(d.batch) == 1
        if d.batch[0].request_id == 0:
            return now
    return math.inf


def test_aging_prevents_starvation():
    # fresh tight urgency 0.85 ** 2.9 = 0.624; loose one passes it after 1.248 s
    assert _stream(0.5) == pytest.approx(1.249, abs=0.0015)
    assert _stream(0.0) == math.inf           # without aging the stream starves it


# -- priority slots and compute-aware splitting ---------------------------------------------

def _mixed_lengths(s: Scheduler) -> None:
    submit(s, 0.0,
           req(0, 0.0, seq_len=16),                 # non-urgent short
           req(1, 0.0, seq_len=16),                 # non-urgent short
           req(2, 0.0, seq_len=200),                # non-urgent long
           req(3, 0.0, seq_len=200, sla_ms=20.0),   # urgent long (slack 18.8 ms)
           req(4, 0.0, seq_len=16, sla_ms=15.0))    # urgent short (slack 14 ms)
    prewarm(s, 0.0)


# Padding costs more than a launch here (0.01 ms a token against 1 ms a batch), so the
# split pays: one batch of all five would take 11 ms, the three below 9.3 ms. (At 0.001 ms
# a token one batch is cheaper, and the former keeps them together.)
TOKEN_COST = replace(FLAT_COST, per_token_ms=0.01)
LIGHT_TOKEN_COST = replace(FLAT_COST, per_token_ms=0.001)  # one batch of all five: 2 ms


def test_priority_slot_takes_urgent_request_of_very_different_length():
    s = make(TOKEN_COST)
    _mixed_lengths(s)
    assert s.schedule(0.0).reason == "wait"
    d = s.schedule(0.005)
    assert d.reason == "window" and d.mode == "explicit"
    # the urgent long one joins the urgent short seed through a slot (padding 46%); the
    # non-urgent ones are split off: short ones (61% padding) and even the long one (30.7%)
    assert ids(d) == [4, 3]
    assert d.estimated_ms == pytest.approx(1.0 + 0.01 * 400)
    assert ids(s.schedule(0.005)) == [0, 1]
    assert ids(s.schedule(0.005)) == [2]


def test_without_priority_slots_urgent_request_is_split_off_too():
    s = make(TOKEN_COST, control=ctl(priority_slots=0))
    _mixed_lengths(s)
    d = s.schedule(0.005)
    assert ids(d) == [4, 0, 1]


@pytest.mark.parametrize("slots, expected", [(0, [4, 0, 1]), (1, [4, 3])])
def test_priority_slots_are_beyond_the_urgent_seed(slots, expected):
    s = make(TOKEN_COST, control=ctl(priority_slots=slots))
    _mixed_lengths(s)
    assert ids(s.schedule(0.005)) == expected


def test_padding_waste_bound_is_configurable():
    s = make(LIGHT_TOKEN_COST, control=ctl(max_padding_waste=0.95))
    _mixed_lengths(s)
    assert ids(s.schedule(0.005)) == [4, 3, 0, 1, 2]


def test_ragged_cost_mode_does_not_split_by_padding():
    s = make(LIGHT_TOKEN_COST, cost_mode="ragged")
    _mixed_lengths(s)
    d = s.schedule(0.005)
    assert ids(d) == [4, 3, 0, 1, 2]
    assert d.estimated_ms == pytest.approx(1.0 + 0.001 * (16 * 3 + 200 * 2))


def test_token_limit_holds_in_explicit_mode():
    s = make(LIGHT_TOKEN_COST, cost_mode="ragged", max_batch_tokens=400)
    _mixed_lengths(s)
    d = s.schedule(0.005)
    assert ids(d) == [4, 3]                   # a third member would be 3 x 200 = 600 tokens
    assert len(d.batch) * max(r.seq_len for r in d.batch) <= 400


# -- deadlines of the members -----------------------------------------------------------------

def test_member_that_would_make_a_feasible_member_miss_is_left_out():
    # 1 + 2 ms per sequence. Request 0 (SLA 100 ms) has waited 90 ms: 10 ms left.
    cost = replace(FLAT_COST, per_sequence_ms=2.0)
    s = make(cost)
    submit(s, 0.0, req(0, 0.0, sla_ms=100.0))
    prewarm(s, 0.0)
    loose(s, 0.09, 1, 5)
    d = s.schedule(0.09, flush=True)
    # 4 members: 9 ms (finish 0.099 <= 0.100); a 5th: 11 ms (0.101) would miss
    assert ids(d) == [0, 1, 2, 3]
    assert d.estimated_ms == pytest.approx(9.0)
    assert 0.09 + d.estimated_ms / 1000.0 <= req(0, 0.0, sla_ms=100.0).deadline_s
    assert s.queue_depth == 2


def _urgent_and_waiting(others_left_ms: float, earlier_arrivals: int = 0) -> Scheduler:
    """A 4 ms launch + 0.1 ms a sequence; at t=1 s request 0 has 5 ms left, 39 others
    ``others_left_ms`` each (SLA 100 ms); ``earlier_arrivals`` arrived (and left) in the
    second before: the arrival rate perception sees."""
    s = make(replace(FLAT_COST, fixed_ms=4.0, per_sequence_ms=0.1), max_batch_size=64)
    for k in range(earlier_arrivals):
        s.submit(req(1000 + k, 0.0), 0.05 + 0.8 * k / earlier_arrivals)
    s.remove([1000 + k for k in range(earlier_arrivals)])
    submit(s, 0.905, req(0, 0.905, sla_ms=100.0))
    at = 0.9 + others_left_ms / 1000.0
    submit(s, at, *(req(i, at, sla_ms=100.0) for i in range(1, 40)))
    prewarm(s, 1.0)
    return s


def test_deadline_guard_splits_when_the_split_keeps_more_in_time():
    # Guarded: request 0 and 9 more in 5.0 ms, then 30 in 7.0 ms (ends 12 ms <= 14): all
    # 40 in time. One batch of 40 (8 ms) would make request 0 miss.
    s = _urgent_and_waiting(14.0)
    d = s.schedule(1.0, flush=True)
    assert ids(d)[0] == 0 and len(d.batch) == 10
    assert d.estimated_ms == pytest.approx(5.0)


def test_deadline_guard_yields_when_its_launch_delays_more_arrivals_than_it_saves():
    # As in the split above (guarded: 40 in time, ending at 12 ms; one batch: 39, ending at
    # 8 ms), but 1,000 requests a second arrive: the guard's extra 4 ms delay about 4 of
    # them, more than the one request it saves.
    s = _urgent_and_waiting(14.0, earlier_arrivals=1000)
    d = s.schedule(1.0, flush=True)
    assert s.observation.arrival_rate_rps > 1000
    assert len(d.batch) == 40


def test_deadline_guard_yields_when_one_batch_keeps_more_in_time():
    # Guarded as above, the 30 left would end at 12 ms, past their 10 ms: 10 in time.
    # One batch of 40 ends at 8 ms: 39 in time (all but request 0). The extra launch of
    # the split is what a loaded device cannot afford.
    s = _urgent_and_waiting(10.0)
    d = s.schedule(1.0, flush=True)
    assert len(d.batch) == 40
    assert d.estimated_ms == pytest.approx(8.0)


def test_joining_member_deadline_bounds_the_rest_of_the_batch():
    # 1 + 50 ms per sequence; emergency drain (no duration cap). The aged loose seed has
    # 9 s left; request 1 (SLA 110 ms, urgency 0.38) fits as a second member (101 ms) but
    # then bounds the batch: a third (151 ms) would make it miss.
    s = make(replace(FLAT_COST, per_sequence_ms=50.0))
    submit(s, 0.0, req(0, 0.0))
    submit(s, 0.9, req(1, 0.9, sla_ms=110.0))
    loose(s, 0.9, 2, 13)
    _danger(s, 0.9)
    d = s.schedule(0.9)
    assert d.mode == "emergency" and d.reason == "drain"
    assert ids(d) == [0, 1]
    assert d.estimated_ms == pytest.approx(101.0)


def test_sla_guard_dispatches_explicit_batch_before_its_deadline():
    cost = replace(FLAT_COST, fixed_ms=4.0)
    s = make(cost, base_window_ms=50.0)
    submit(s, 0.0, req(0, 0.0, sla_ms=20.0), req(1, 0.0))
    prewarm(s, 0.0)
    d = s.schedule(0.0)
    assert d.reason == "wait"
    assert d.wake_at_s == pytest.approx(0.016)    # deadline 0.020 - 4 ms, before the window
    d = s.schedule(0.016)
    assert d.reason == "deadline" and ids(d) == [0, 1]


# -- infeasible requests ------------------------------------------------------------------------

def test_reject_policy_returns_infeasible_requests():
    s = make(control=ctl(infeasible_policy="reject", refusal_late_share=0.0))
    submit(s, 0.0, req(0, 0.0, sla_ms=0.5), req(1, 0.0), req(2, 0.0, sla_ms=10.0))
    d = s.schedule(0.0)
    assert [r.request_id for r, _ in d.rejected] == [0]
    reason = d.rejected[0][1]
    assert INFEASIBLE == "deadline infeasible"
    assert reason == RejectReason.INFEASIBLE      # one fixed message: usable as a metric label
    assert d.batch == () and d.reason == "wait"
    assert s.queue_depth == 2
    assert s.stats(0.0).rejected_infeasible == 1
    # request 2 (deadline 0.010) becomes infeasible once less than its 1 ms run time is left
    d = s.schedule(0.0095)
    assert [r.request_id for r, _ in d.rejected] == [2]
    assert ids(d) == [1] and d.reason == "window"
    assert s.stats(0.0095).rejected_infeasible == 2
    assert s.schedule(0.0095).rejected == ()


def test_a_refusal_carries_the_estimate_it_was_made_on():
    """The client's message says why: the estimated finish against the SLA, the wait, the
    run time and the correction - numbers the test can check against the request."""
    s = make(control=ctl(infeasible_policy="reject", refusal_late_share=0.0))
    submit(s, 0.0, req(0, 0.0, sla_ms=0.8), req(1, 0.0))
    (r, reason), = s.schedule(0.0002).rejected
    assert reason == RejectReason.INFEASIBLE  # still the metric label
    message = refusal_message(reason)
    assert message.startswith(str(RejectReason.INFEASIBLE) + " (estimated finish ")
    finish_ms, sla_ms = map(float, re.search(
        r"estimated finish ([\d.]+) ms after arrival > SLA ([\d.]+) ms", message).groups())
    assert sla_ms == r.sla_ms and finish_ms > sla_ms
    assert "waited 0.2 ms, starts now, then runs 1.0 ms alone" in message
    assert "cost correction 1.00" in message
    assert refusal_message(RejectReason.QUEUE_FULL) == "queue full"


def test_late_requests_are_served_late_until_the_overload_is_sustained():
    """refusal_late_share: one request late from waiting among many on time is a stall, not
    an overload - it is served (late); once most of the queue is late for a window's worth
    of decisions, the late ones are refused."""
    s = make(control=ctl(infeasible_policy="reject", refusal_late_share=0.5,
                         refusal_window_ms=100.0))
    submit(s, 0.0, req(0, -1.0, sla_ms=50.0), *(req(k, 0.0) for k in range(1, 8)))
    d = s.schedule(0.0)
    assert d.rejected == () and 0 in {r.request_id for r in d.batch}
    s.drain()
    refused = []
    for step in range(1, 20):  # every queue mostly late (waited a second), 50 ms apart
        now = 0.05 * step
        submit(s, now, *(req(100 * step + k, now - 1.0, sla_ms=50.0) for k in range(3)),
               req(100 * step + 9, now))
        refused += [r.request_id for r, _ in s.schedule(now).rejected]
        s.drain()
    assert s.late_share >= 0.5
    assert refused and all(rid % 100 != 9 for rid in refused)  # never the one on time


def _mostly_late_step(s: Scheduler, now: float, first_id: int) -> None:
    """Three requests that waited a second (late for 50 ms) and one on time, decided."""
    submit(s, now, *(req(first_id + k, now - 1.0, sla_ms=50.0) for k in range(3)),
           req(first_id + 9, now))
    s.schedule(now)
    s.drain()


def _on_time_step(s: Scheduler, now: float, first_id: int) -> None:
    submit(s, now, *(req(first_id + k, now) for k in range(4)))
    s.schedule(now)
    s.drain()


def test_a_sustained_overload_is_left_only_below_the_exit_share():
    """overload_late_share enters the overload state, overload_exit_late_share leaves it:
    between the two the state holds, so a budgeted call's young next hand-over does not
    end it; while it holds, the overload former forms the batches."""
    s = make(control=ctl(infeasible_policy="reject", overload_late_share=0.5,
                         overload_exit_late_share=0.1, refusal_window_ms=100.0))
    now = 0.0
    while not s.overloaded:
        now += 0.05
        _mostly_late_step(s, now, int(now * 1000) * 100)
        assert now < 2.0, "three of four late never read as an overload"
    submit(s, now, req(1, now))
    assert s.schedule(now).former == "shortest_first"
    s.drain()
    seen_between = False
    while s.late_share >= 0.1:
        now += 0.05
        _on_time_step(s, now, int(now * 1000) * 100)
        seen_between |= 0.1 <= s.late_share < 0.5
        if s.late_share >= 0.1:
            assert s.overloaded
    assert seen_between and not s.overloaded
    submit(s, now + 0.05, req(2, now + 0.05))
    assert s.schedule(now + 0.05).former != "shortest_first"


def test_a_call_past_its_budget_that_refuses_enough_is_an_overload_at_once():
    """call_overran: refusals at overload_exit_late_share of what the call decided enter
    the overload state at once, held at that share, however little the smoothed share
    has moved; fewer leave the state to the smoothed share."""
    s = make(control=ctl(infeasible_policy="reject", overload_late_share=0.5,
                         overload_exit_late_share=0.2))
    s.call_overran(refused=1, handled=10)
    assert not s.overloaded and s.late_share == 0.0
    s.call_overran(refused=3, handled=10)
    assert s.overloaded and s.late_share == pytest.approx(0.3)
    s.call_overran(refused=0, handled=0)  # nothing decided: no change, and no error
    assert s.overloaded


def test_a_call_budget_refusal_counts_its_refused_share_as_late():
    """refuse_queued with the call's size moves the late share towards the share refused:
    a call that refused most of its hand-over keeps a steady overload on; one that refused
    a small tail moves it little; without a call size (not a budget) it does not move."""
    shares = {}
    for call_size in (4, 40, 0):
        s = make(control=ctl(infeasible_policy="reject", refusal_window_ms=100.0))
        submit(s, 0.0, *(req(k, 0.0) for k in range(3)))
        assert len(s.refuse_queued(0.1, call_size)) == 3
        shares[call_size] = s.late_share
    assert shares[4] > shares[40] > shares[0] == 0.0
    assert shares[4] == pytest.approx((1 - math.exp(-1.0)) * 0.75)


def test_a_hand_overs_expired_requests_count_as_late():
    """Requests refused at hand-over because their client timeout passed are late demand:
    with the rest of their hand-over, at its first decision; alone, at once. A timeout
    then moves the late share as the same wait under an SLA does."""
    shares = {}
    for expired in (0, 3):
        s = make(control=ctl(infeasible_policy="reject", refusal_window_ms=100.0))
        s.hand_over_expired(0.1, expired, queued=1)
        assert s.late_share == 0.0  # measured with the hand-over's decision, not before
        submit(s, 0.1, req(1, 0.1))
        s.schedule(0.1)
        shares[expired] = s.late_share
    assert shares[0] == 0.0
    assert shares[3] == pytest.approx((1 - math.exp(-1.0)) * 0.75)
    alone = make(control=ctl(infeasible_policy="reject", refusal_window_ms=100.0))
    alone.hand_over_expired(0.1, 2, queued=0)
    assert alone.late_share == pytest.approx(1 - math.exp(-1.0))
    submit(alone, 0.2, req(2, 0.2))
    alone.schedule(0.2)  # the expired ones were counted once, not again here
    assert alone.late_share < 1 - math.exp(-1.0)


def test_a_request_late_even_alone_is_refused_at_any_load():
    """An SLA below the request's own run time cannot be met by waiting less: it is refused
    at once, overload or not."""
    s = make(control=ctl(infeasible_policy="reject", refusal_late_share=0.5))
    submit(s, 0.0, req(0, 0.0, sla_ms=0.001), *(req(k, 0.0) for k in range(1, 8)))
    assert [r.request_id for r, _ in s.schedule(0.0).rejected] == [0]


def test_reject_policy_rejects_even_when_queue_then_empty():
    s = make(control=ctl(infeasible_policy="reject", refusal_late_share=0.0))
    submit(s, 0.0, req(0, 0.0, sla_ms=0.5))
    d = s.schedule(0.0)
    assert d.reason == "idle" and d.batch == ()
    assert [r.request_id for r, _ in d.rejected] == [0]


def test_serve_late_serves_infeasible_after_feasible_ones():
    s = make(max_batch_size=1)            # infeasible_policy="serve_late" (PINNED)
    submit(s, 0.0, req(0, 0.0, sla_ms=0.5), req(1, 0.0, sla_ms=0.5), req(2, 0.0))
    prewarm(s, 0.0)
    order = []
    for _ in range(3):
        d = s.schedule(0.0)
        assert d.rejected == ()
        order += ids(d)
    assert order == [2, 0, 1]
    assert s.stats(0.0).rejected_infeasible == 0


def test_serve_late_puts_infeasible_last_within_a_batch():
    s = make()
    submit(s, 0.0, req(0, 0.0, sla_ms=100.0))
    prewarm(s, 0.0)
    submit(s, 0.1, req(1, 0.1), req(2, 0.1))      # request 0 has no time left at 0.1
    assert ids(s.schedule(0.1, flush=True)) == [1, 2, 0]


def test_infeasible_tiny_sla_does_not_shrink_explicit_batches():
    # Reserved capacity keys on the tightest *feasible* SLA seen: a 0.5 ms SLA (below the
    # 1 ms any batch takes) must not cap everyone's batches at 0.2 ms.
    s = make()
    submit(s, 0.0, req(0, 0.0, sla_ms=0.5), req(1, 0.0), req(2, 0.0))
    prewarm(s, 0.0)
    # the infeasible request is served late, after the feasible ones, in the same batch
    assert ids(s.schedule(0.0, flush=True)) == [1, 2, 0]


def test_idle_decision_reports_the_current_mode():
    s = make(control=ctl(infeasible_policy="reject"))
    prewarm(s, 0.0)
    d = s.schedule(0.0)
    assert d.reason == "idle"
    assert d.mode == s.mode() == "explicit"
    # danger, then everything is rejected: the idle decision still says emergency
    submit(s, 0.125, *(req(i, 0.125, sla_ms=0.5) for i in range(15)))
    s.set_external_utilization(1.0, 0.125)
    s.tick(0.125)
    s.set_external_utilization(1.0, 0.25)
    d = s.schedule(0.25)
    assert d.reason == "idle" and len(d.rejected) == 15
    assert d.zone == int(Zone.DANGER) and d.mode == "emergency"


# -- emergency policy (danger zone) ------------------------------------------------------------

def _danger(s: Scheduler, now: float) -> None:
    s.set_external_utilization(1.0, now)


# A device where a small batch runs faster than a full one (1 ms + 0.5 ms a member): the
# emergency policy's small urgent batches pay there; on FLAT_COST they would take as long
# as a full batch, and the urgent batch takes every urgent request (test_formers.py).
EMERGENCY_COST = replace(FLAT_COST, per_sequence_ms=0.5)


def test_emergency_dispatches_urgent_requests_at_once():
    s = make(EMERGENCY_COST)
    normal = loose(s, 0.0, 0, 12)
    submit(s, 0.0, *(req(100 + i, 0.0, sla_ms=20.0) for i in range(3)))
    _danger(s, 0.0)
    d = s.schedule(0.0)                      # window (5 ms) not closed: still goes now
    assert d.mode == "emergency" and d.zone == int(Zone.DANGER)
    assert ids(d) == [100, 101, 102]
    assert d.reason == "emergency"
    assert s.stats(0.0).emergency_batches == 1
    # the non-urgent work drains at once too, without waiting for the window
    d = s.schedule(0.0)
    assert d.mode == "emergency" and d.reason == "drain"
    assert ids(d) == normal
    assert s.stats(0.0).emergency_batches == 1
    assert s.schedule(0.0).reason == "idle"


def test_emergency_batch_size_caps_urgent_batches():
    s = make(EMERGENCY_COST)
    loose(s, 0.0, 0, 10)
    urgent = [100 + i for i in range(6)]
    submit(s, 0.0, *(req(i, 0.0, sla_ms=20.0) for i in urgent))
    _danger(s, 0.0)
    d = s.schedule(0.0)
    assert ids(d) == urgent[:4]              # emergency_batch_size = 4, urgent only
    d = s.schedule(0.0)
    assert ids(d) == urgent[4:] and d.reason == "emergency"


def test_full_emergency_batch_is_reported_and_counted_as_emergency():
    s = make(EMERGENCY_COST)
    loose(s, 0.0, 0, 10)
    submit(s, 0.0, *(req(100 + i, 0.0, sla_ms=20.0) for i in range(6)))
    _danger(s, 0.0)
    d = s.schedule(0.0)
    assert len(d.batch) == 4
    assert d.reason == "emergency"
    assert s.stats(0.0).emergency_batches == 1


def test_emergency_batch_size_is_configurable():
    s = make(EMERGENCY_COST, control=ctl(emergency_batch_size=2))
    loose(s, 0.0, 0, 12)
    submit(s, 0.0, *(req(100 + i, 0.0, sla_ms=20.0) for i in range(3)))
    _danger(s, 0.0)
    assert ids(s.schedule(0.0)) == [100, 101]
    assert ids(s.schedule(0.0)) == [102]


@pytest.mark.parametrize("stop, expected", [
    (False, [[0, 1, 2, 3] + list(range(10, 22))]),
    (True, [[0, 1, 2, 3]] + [[i] for i in range(10, 22)]),
])
def test_emergency_stop_noncritical(stop, expected):
    s = make(control=ctl(emergency_stop_noncritical=stop))
    # critical (SLA 150 < 200 ms) but not urgent (slack 149 ms -> urgency 0.09)
    submit(s, 0.0, *(req(i, 0.0, sla_ms=150.0) for i in range(4)))
    loose(s, 0.0, 10, 12)                  # non-critical (SLA >= 200 ms)
    _danger(s, 0.0)
    batches = []
    while s.queue_depth:
        d = s.schedule(0.0)
        assert d.mode == "emergency" and d.reason in ("drain", "full")
        batches.append(ids(d))
    assert batches == expected


@pytest.mark.parametrize("stop, expected", [
    (False, [[0, 10, 11, 12, 13] + list(range(20, 30))]),
    (True, [[0], [10, 11, 12, 13]] + [[i] for i in range(20, 30)]),
])
def test_noncritical_seed_goes_alone_with_stop_noncritical(stop, expected):
    s = make(control=ctl(emergency_stop_noncritical=stop))
    submit(s, 0.0, req(0, 0.0))              # non-critical, aged: urgency 0.25 at 0.5 s
    submit(s, 0.5, *(req(i, 0.5, sla_ms=150.0) for i in range(10, 14)))   # 0.09
    loose(s, 0.5, 20, 10)                    # non-critical, fresh: ~0
    _danger(s, 0.5)
    batches = []
    while s.queue_depth:
        d = s.schedule(0.5)
        assert d.mode == "emergency"
        batches.append(ids(d))
    assert batches == expected


def _emergency_with_a_finished_batch(dilution: bool):
    cost = replace(FLAT_COST, fixed_ms=10.0)
    s = make(cost, control=ctl(dilution=dilution, dilution_gap_ms=1.0), max_batch_size=4)
    loose(s, 0.0, 0, 20)
    _danger(s, 0.0)
    d = s.schedule(0.0)
    assert d.mode == "emergency" and ids(d) == [0, 1, 2, 3]
    s.batch_started(d.batch, 0.0)
    s.batch_finished(d.batch, 0.0, 0.010)
    return s


def test_dilution_delays_next_emergency_dispatch():
    s = _emergency_with_a_finished_batch(True)
    d = s.schedule(0.0105)
    assert d.batch == () and d.reason == "dilution" and d.mode == "emergency"
    assert d.wake_at_s == pytest.approx(0.011)
    d = s.schedule(d.wake_at_s)
    assert ids(d) == [4, 5, 6, 7]


def test_dilution_is_off_by_default():
    assert ControlConfig().dilution is False
    s = _emergency_with_a_finished_batch(False)
    assert ids(s.schedule(0.010)) == [4, 5, 6, 7]


def test_dilution_does_not_delay_the_first_emergency_dispatch():
    s = make(control=ctl(dilution=True, dilution_gap_ms=5.0))
    loose(s, 0.0, 0, 15)
    _danger(s, 0.0)
    assert ids(s.schedule(0.0)) == list(range(15))


# -- compensation batches ---------------------------------------------------------------------

def _breach(s: Scheduler, now: float, ratio: float, n: int = 20) -> None:
    """``n`` finished requests whose latency is ``ratio`` times their 100 ms SLA."""
    feed_finished(s, now, 100.0 * ratio, sla_ms=100.0, n=n)


def test_compensation_batch_after_p99_breach():
    s = make()
    s.tick(0.0)
    _breach(s, 0.0625, 3.0)                  # P99 latency/SLA = 3 -> deviation 2
    loose(s, 0.125, 0, 6)
    d = s.schedule(0.125)                    # decision: 1.0 * (1 + 2) = 3
    assert d.reason == "compensation" and ids(d) == [0, 1, 2]
    assert d.mode == "default"
    assert s.stats(0.125).compensation_batches == 1
    d = s.schedule(0.125)                    # one compensation batch only
    assert d.reason == "wait" and d.batch == ()

    # not repeated within the 500 ms cooldown, though P99 still breaches
    assert ids(s.schedule(0.25)) == [3, 4, 5]           # window
    loose(s, 0.5, 10, 6)
    assert s.schedule(0.5).reason == "wait"              # decision ran: 375 ms < 500 ms
    assert s.stats(0.5).compensation_batches == 1
    # at 500 ms: average batch size 1 -> 1.2 -> 1.38; round(1.38 * 3) = 4
    avg = 1.0
    for size in (3, 3):
        avg += 0.1 * (size - avg)
    d = s.schedule(0.625)
    assert d.reason == "compensation"
    assert len(d.batch) == round(avg * 3) == 4
    assert s.stats(0.625).compensation_batches == 2


def test_compensation_dispatches_at_once_with_a_short_queue():
    s = make()
    s.tick(0.0)
    _breach(s, 0.0625, 3.0)
    loose(s, 0.125, 0, 1)
    d = s.schedule(0.125)                    # window not closed, batch not full
    assert d.reason == "compensation" and ids(d) == [0]
    assert s.stats(0.125).compensation_batches == 1


def test_a_flushed_compensation_batch_is_spent_once():
    # Intake hold sends every batch with flush (reason "flush"): the compensation batch
    # is still spent by being formed, and the next batch is full-size again.
    s = make()
    s.tick(0.0)
    _breach(s, 0.0625, 3.0)
    loose(s, 0.125, 0, 40)
    first = s.schedule(0.125, flush=True)
    assert first.reason == "flush" and len(first.batch) == 3
    assert s.stats(0.125).compensation_batches == 1
    assert len(s.schedule(0.125, flush=True).batch) == 32
    assert s.stats(0.125).compensation_batches == 1


@pytest.mark.parametrize("ratio, max_compensation, max_batch_size, expected", [
    (3.0, 2.0, 32, 3),        # deviation 2
    (5.0, 2.0, 32, 3),        # deviation 4 capped at 2
    (5.0, 3.0, 32, 4),        # deviation 4 capped at 3
    (3.0, 2.0, 2, 2),         # capped at max_batch_size
    (1.5, 2.0, 32, 2),        # round(1.5) = 2
])
def test_compensation_size(ratio, max_compensation, max_batch_size, expected):
    s = make(control=ctl(max_compensation=max_compensation), max_batch_size=max_batch_size)
    s.tick(0.0)
    _breach(s, 0.0625, ratio)
    loose(s, 0.125, 0, 10)
    d = s.schedule(0.125)
    assert d.reason == "compensation" and len(d.batch) == expected


def test_compensation_uses_average_batch_size():
    s = make()
    s.tick(0.0)
    for k in range(3):                        # three batches of 10: 1 -> 1.9 -> 2.71 -> 3.439
        loose(s, 0.0, 100 * k, 10)
        assert len(s.schedule(0.0, flush=True).batch) == 10
    _breach(s, 0.0625, 2.0)                   # deviation 1
    loose(s, 0.125, 0, 20)
    d = s.schedule(0.125)
    assert d.reason == "compensation" and len(d.batch) == round(3.439 * 2) == 7


@pytest.mark.parametrize("n, ratio", [(19, 3.0), (20, 1.0), (40, 0.5)])
def test_no_compensation_without_enough_samples_or_breach(n, ratio):
    s = make()
    s.tick(0.0)
    _breach(s, 0.0625, ratio, n=n)
    loose(s, 0.125, 0, 3)
    d = s.schedule(0.125)
    assert d.reason == "wait"
    assert s.stats(0.125).compensation_batches == 0


def test_no_compensation_when_control_disabled():
    s = make(control=ctl(enabled=False))
    s.tick(0.0)
    _breach(s, 0.0625, 3.0)
    loose(s, 0.125, 0, 3)
    assert s.schedule(0.125).reason == "wait"


@pytest.mark.parametrize("breach", [True, False])
def test_compensation_in_explicit_mode_ignores_padding_and_duration_cap(breach):
    s = make(TOKEN_COST)
    # request 9's 2.5 ms SLA caps explicit batches at 1 ms (reserved capacity)
    submit(s, 0.0, req(0, 0.0, seq_len=16, sla_ms=1000.0), req(9, 0.0, sla_ms=2.5))
    prewarm(s, 0.0)
    if breach:
        _breach(s, 0.0625, 3.0)
    submit(s, 0.125, req(1, 0.125, seq_len=400), req(2, 0.125, seq_len=16),
           req(3, 0.125, seq_len=16))
    s.set_external_utilization(0.7, 0.125)
    d = s.schedule(0.125, flush=not breach)
    assert d.mode == "explicit"
    if breach:
        assert d.reason == "compensation"
        assert ids(d) == [0, 1, 2]           # 400 next to 16, 1.8 ms: padding and cap ignored
    else:
        assert d.reason == "flush"
        assert ids(d) == [0]                 # any second member breaks the 1 ms cap


def test_compensation_checks_sla_window():
    # samples older than perception_window_ms (1 s) no longer count
    s = make()
    s.tick(0.0)
    _breach(s, 0.0625, 3.0)
    loose(s, 1.125, 0, 3)
    assert s.schedule(1.125).reason == "wait"


# -- reserved capacity ------------------------------------------------------------------------

SEQ_COST = replace(FLAT_COST, per_sequence_ms=10.0)      # 1 + 10 ms per member


@pytest.mark.parametrize("reserved, size", [(0.2, 3), (0.0, 4), (0.5, 2)])
def test_reserved_capacity_caps_explicit_batch_duration(reserved, size):
    s = make(SEQ_COST, control=ctl(reserved_capacity=reserved))
    submit(s, 0.0, req(0, 0.0, sla_ms=100.0))
    loose(s, 0.0, 1, 9)
    prewarm(s, 0.0)                          # perception sees the 100 ms SLA
    d = s.schedule(0.005)
    # cap (1 - reserved) * 0.5 * 100 ms: 40 ms -> 3 members (31 ms), 50 -> 4, 25 -> 2
    assert d.reason == "window"
    assert len(d.batch) == size
    assert d.estimated_ms == pytest.approx(1.0 + 10.0 * size)
    assert d.estimated_ms <= (1 - reserved) * 0.5 * 100.0


def test_reserved_capacity_follows_tightest_sla_of_last_perception_period():
    s = make(SEQ_COST)
    submit(s, 0.0, req(0, 0.0, sla_ms=100.0))
    loose(s, 0.0, 1, 9)
    prewarm(s, 0.0)
    assert len(s.schedule(0.005).batch) == 3
    # the next period sees only loose SLAs: cap 4 s
    loose(s, 0.25, 20, 2)
    prewarm(s, 0.25)
    d = s.schedule(0.25)
    assert len(d.batch) == 9


def test_reserved_capacity_not_applied_in_default_mode():
    s = make(SEQ_COST)
    submit(s, 0.0, req(0, 0.0, sla_ms=100.0))
    loose(s, 0.0, 1, 5)
    s.set_external_utilization(0.3, 0.0)
    s.tick(0.0)
    assert len(s.schedule(0.005).batch) == 6


def test_reserved_capacity_not_applied_in_emergency():
    s = make(SEQ_COST)
    submit(s, 0.0, req(0, 0.0, sla_ms=1000.0))
    loose(s, 0.0, 1, 14)
    _danger(s, 0.0)
    d = s.schedule(0.0)
    assert d.mode == "emergency" and len(d.batch) == 15


# -- perception: sidecar utilisation and observation age ---------------------------------------

def test_stale_external_utilization_falls_back_to_busy_fraction():
    s = make()
    s.set_external_utilization(0.9, 0.0, source="nvml")
    s.tick(0.0)
    assert s.observation.utilization == 0.9 and s.observation.utilization_source == "nvml"
    assert s.mode() == "explicit"
    # a busy interval of 250 ms inside the last second
    s.batch_started((req(1, 0.5),), 0.5)
    s.batch_finished((req(1, 0.5),), 0.5, 0.75)
    s.tick(1.0)                             # 1.0 s old: still used
    assert s.observation.utilization == 0.9
    assert s.observation.utilization_age_ms == 1000.0
    s.tick(1.25)                            # 1.25 s old: ignored
    obs = s.observation
    assert obs.utilization_source == "busy_fraction"
    assert obs.utilization == pytest.approx(0.25)
    assert obs.utilization_age_ms == 0.0
    assert s.stats(1.25).utilization == pytest.approx(0.25)
    assert s.mode() == "default"           # pre-warm off below 0.60


def test_observation_age_in_stats():
    s = make()
    s.tick(1.0)
    assert s.stats(1.0).observation_age_ms == 0.0
    assert s.stats(1.125).observation_age_ms == 125.0
    s.tick(1.125)                           # decision only
    assert s.stats(1.1875).observation_age_ms == 187.5
    s.tick(1.25)                            # perception again
    assert s.stats(1.25).observation_age_ms == 0.0


def test_external_utilization_is_clamped():
    s = make()
    s.set_external_utilization(1.7, 0.0)
    s.tick(0.0)
    assert s.observation.utilization == 1.0
    s.set_external_utilization(-0.5, 0.25)
    s.tick(0.25)
    assert s.observation.utilization == 0.0


# -- logical-clock window -----------------------------------------------------------------------

@pytest.mark.parametrize("enabled", [True, False])
def test_rate_change_while_waiting_moves_the_wake_time(enabled):
    # window = 100 * (1 + (1 - util)^2): 200 ms at util 0, 100 ms at util 1
    s = make(control=ctl(enabled=enabled, perception_period_ms=100.0), base_window_ms=100.0,
             alpha=1.0, max_window_ms=400.0)
    s.set_external_utilization(0.0, 0.0)
    submit(s, 0.0, req(0, 0.0))
    d = s.schedule(0.0)
    assert d.reason == "wait" and d.window_ms == 200.0
    assert s.stats(0.0).logical_rate == 0.5
    assert d.wake_at_s == pytest.approx(0.2)
    # at 0.1 the load rises: half the logical window (50 ms) is left, now at rate 1
    s.set_external_utilization(1.0, 0.1)
    d = s.schedule(0.1)
    assert d.reason == "wait" and d.window_ms == 100.0
    assert d.wake_at_s == pytest.approx(0.15)
    assert s.schedule(0.149).batch == ()
    d = s.schedule(d.wake_at_s)
    assert ids(d) == [0] and d.reason == "window"


def test_rate_drop_while_waiting_stretches_the_wake_time():
    s = make(control=ctl(perception_period_ms=100.0), base_window_ms=100.0, alpha=1.0,
             max_window_ms=400.0)
    s.set_external_utilization(1.0, 0.0)
    submit(s, 0.0, req(0, 0.0))
    assert s.schedule(0.0).wake_at_s == pytest.approx(0.1)
    s.set_external_utilization(0.0, 0.05)
    s.tick(0.05)                             # nothing: periods not elapsed
    assert s.schedule(0.05).wake_at_s == pytest.approx(0.1)
    s.set_external_utilization(0.0, 0.0625)
    s.tick(0.0625)
    assert s.schedule(0.0625).wake_at_s == pytest.approx(0.1)


# -- property tests: an event loop with a fake clock -------------------------------------------

arrival = st.tuples(
    st.floats(0.0, 30.0, allow_nan=False),        # gap to previous arrival, ms
    st.integers(1, 512),                           # sequence length
    st.floats(1.0, 500.0, allow_nan=False),       # SLA, ms (some infeasible)
)
heavy_arrival = st.tuples(
    st.floats(0.0, 2.0, allow_nan=False),
    st.integers(1, 512),
    st.floats(5.0, 500.0, allow_nan=False),
)
DEVICE_COST = replace(CostModelConfig(), fixed_ms=1.2, per_sequence_ms=0.02,
                      per_token_ms=0.0065, per_token_squared_ms=0.0000014)


def run_ms(est: CostEstimator, cfg: SchedulerConfig, n: int, behind: bool) -> float:
    """Uncorrected run time of a request of length ``n``: alone, or - when the scheduler
    is behind (a full batch or more queued) and may judge feasibility by an efficient
    batch - the upper bound of a full batch of its length within the token limit."""
    k = max(1, min(cfg.max_batch_size, cfg.max_batch_tokens // n)) if behind else 1
    return est.base_parts_ms(k, n, k * n, k * n * n)


def run_event_loop(sched: Scheduler, arrivals, device_cost: CostModelConfig, slowdown: float,
                   external_util: float | None = None):
    """Drive ``sched`` with a fake clock: schedule whenever the device is free, advance to
    the next arrival, wake-up or batch finish. Checks the per-decision invariants and
    returns (requests, batches [(time, decision)], rejected [(time, request, reason)])."""
    times, t = [], 0.0
    for gap_ms, _, _ in arrivals:
        t += gap_ms / 1000.0
        times.append(t)
    reqs = [req(i, times[i], seq_len=n, sla_ms=sla) for i, (_, n, sla) in enumerate(arrivals)]
    cfg, est = sched.cfg, sched.estimator
    max_window_s = cfg.max_window_ms / 1000.0

    # Each decision's plan comparisons (the former's deadline guard, see below).
    plans: list[tuple[int, float]] = []
    for former in sched.formers.values():
        if hasattr(former, "_plan_in_time"):
            def spy(*args, _plan=former._plan_in_time):
                plans.append(_plan(*args))
                return plans[-1]
            former._plan_in_time = spy

    now, nxt = 0.0, 0
    pending: list[QueuedRequest] = []      # submitted, not yet ended (arrival order)
    inflight, started, busy_until = None, 0.0, 0.0
    batches, rejected = [], []
    for _ in range(50 * len(reqs) + 500):
        while nxt < len(reqs) and reqs[nxt].arrival_s <= now:
            sched.submit(reqs[nxt], now)
            pending.append(reqs[nxt])
            nxt += 1
        if inflight is not None and busy_until <= now:
            sched.batch_finished(inflight, started, now)
            inflight = None
        wake = None
        if inflight is None:
            if external_util is not None:
                sched.set_external_utilization(external_util, now)
            corr = est.correction
            queued = sched.queue_depth
            plans.clear()
            d = sched.schedule(now)
            # A request refused beside a dispatched batch must also wait for that batch.
            start = now + (d.estimated_ms / 1000.0 if d.batch else 0.0)
            for r, why in d.rejected:
                assert INFEASIBLE in why
                # really infeasible: alone, or (with a full batch or more queued) at most a
                # full batch of its own length
                need_ms = run_ms(est, cfg, r.seq_len, queued >= cfg.max_batch_size) * corr
                assert start + need_ms / 1000.0 > r.deadline_s
                rejected.append((now, r, why))
            queued -= len(d.rejected)
            ended = {r.request_id for r, _ in d.rejected} | {r.request_id for r in d.batch}
            pending = [r for r in pending if r.request_id not in ended]
            if d.batch:
                batches.append((now, d))
                lengths = [r.seq_len for r in d.batch]
                assert len(d.batch) <= cfg.max_batch_size
                if len(d.batch) > 1:
                    assert len(d.batch) * max(lengths) <= cfg.max_batch_tokens
                if d.mode in ("explicit", "emergency"):
                    # no member's addition made a feasible member miss its deadline, unless
                    # the former weighed it: the batch without the guard, then the rest,
                    # keeps as many in time as the guarded one, less the arrivals its extra
                    # launch delays (plans: free, guarded; each (in time, end))
                    behind = queued >= cfg.max_batch_size
                    for r in d.batch:
                        need_ms = run_ms(est, cfg, r.seq_len, behind) * corr
                        if (r.deadline_s - now) * 1000.0 - need_ms >= 0 and (
                                now + d.estimated_ms / 1000.0 > r.deadline_s + 1e-9):
                            assert len(plans) == 2
                            (free_met, free_end), (met, end) = plans
                            rate = sched.observation.arrival_rate_rps
                            assert free_met + rate * max(0.0, end - free_end) >= met
                duration_s = (formula_ms(device_cost, batch_shape(lengths, est.cost_mode))
                              * slowdown / 1000.0)
                sched.batch_started(d.batch, now)
                inflight, started, busy_until = d.batch, now, now + duration_s
                continue
            if pending:
                assert d.reason in ("wait", "dilution")
                assert d.wake_at_s is not None and d.wake_at_s > now
                if d.reason == "wait":
                    # an idle device never lets the oldest request wait past the max window
                    assert d.wake_at_s <= pending[0].arrival_s + max_window_s + 1e-9
                else:
                    assert d.wake_at_s <= now + sched.control.dilution_gap_ms / 1000.0 + 1e-9
                wake = d.wake_at_s
            else:
                assert d.reason == "idle" and d.wake_at_s is None
        candidates = [c for c in (
            reqs[nxt].arrival_s if nxt < len(reqs) else None,
            wake,
            busy_until if inflight is not None else None) if c is not None]
        if not candidates:
            break
        new_now = min(candidates)
        assert new_now >= now
        now = new_now
    else:
        pytest.fail("event loop did not terminate: something waits forever")
    return reqs, batches, rejected


def check_every_request_ends_once(sched, reqs, batches, rejected, max_wait_s: float = 10.0):
    dispatched = [r.request_id for _, d in batches for r in d.batch]
    refused = [r.request_id for _, r, _ in rejected]
    assert len(dispatched) == len(set(dispatched)), "dispatched twice"
    assert len(refused) == len(set(refused)), "rejected twice"
    assert not set(dispatched) & set(refused), "dispatched and rejected"
    assert sorted(dispatched + refused) == list(range(len(reqs)))
    assert sched.queue_depth == 0
    ended_at = {r.request_id: when for when, d in batches for r in d.batch}
    ended_at.update({r.request_id: when for when, r, _ in rejected})
    last_arrival = reqs[-1].arrival_s
    for r in reqs:
        assert ended_at[r.request_id] >= r.arrival_s
        assert ended_at[r.request_id] - r.arrival_s <= max_wait_s      # nobody starves
    assert max(ended_at.values()) <= last_arrival + max_wait_s
    st_ = sched.stats(max(ended_at.values()) + 10.0)
    assert st_.requests == len(dispatched)
    assert st_.batches == len(batches)
    assert st_.rejected_infeasible == len(refused)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrivals=st.lists(arrival, min_size=1, max_size=60),
       policy=st.sampled_from(["serve_late", "reject"]),
       cost_mode=st.sampled_from(["padded", "ragged"]),
       slowdown=st.sampled_from([0.5, 1.0, 3.0]),
       util=st.sampled_from([None, None, 0.7, 0.9]))
def test_full_control_every_request_ends_exactly_once(arrivals, policy, cost_mode, slowdown,
                                                      util):
    # util None: the measured busy fraction (light load: default mode); else a sidecar
    # reading that pre-warms explicit control
    sched = Scheduler(SchedulerConfig(), CostEstimator(DEVICE_COST, cost_mode),
                      ControlConfig(infeasible_policy=policy))
    reqs, batches, rejected = run_event_loop(sched, arrivals, DEVICE_COST, slowdown,
                                             external_util=util)
    check_every_request_ends_once(sched, reqs, batches, rejected)
    if policy == "serve_late":
        assert rejected == []
    event("modes: " + ",".join(sorted({d.mode for _, d in batches})))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrivals=st.lists(heavy_arrival, min_size=20, max_size=100),
       policy=st.sampled_from(["serve_late", "reject"]),
       util=st.sampled_from([0.7, 0.9, 1.0]),
       max_batch_size=st.integers(1, 32),
       max_batch_tokens=st.integers(256, 8192),
       dilution=st.booleans(),
       stop_noncritical=st.booleans())
def test_full_control_under_heavy_load(arrivals, policy, util, max_batch_size,
                                       max_batch_tokens, dilution, stop_noncritical):
    cfg = replace(SchedulerConfig(), max_batch_size=max_batch_size,
                  max_batch_tokens=max_batch_tokens)
    control = ControlConfig(infeasible_policy=policy, dilution=dilution,
                            emergency_stop_noncritical=stop_noncritical)
    # the device is 5x slower than the estimate: the queue builds up, the estimate refits
    sched = Scheduler(cfg, CostEstimator(DEVICE_COST), control)
    reqs, batches, rejected = run_event_loop(sched, arrivals, DEVICE_COST, 5.0,
                                             external_util=util)
    check_every_request_ends_once(sched, reqs, batches, rejected)
    event("modes: " + ",".join(sorted({d.mode for _, d in batches})))


def test_heavy_burst_reaches_emergency_and_drains():
    arrivals = [(0.5, 64 + (i * 37) % 400, 20.0 + (i * 53) % 300) for i in range(150)]
    sched = Scheduler(SchedulerConfig(), CostEstimator(DEVICE_COST), ControlConfig())
    reqs, batches, rejected = run_event_loop(sched, arrivals, DEVICE_COST, 5.0,
                                             external_util=0.95)
    check_every_request_ends_once(sched, reqs, batches, rejected)
    modes = {d.mode for _, d in batches}
    assert "emergency" in modes
    assert any(d.zone == int(Zone.DANGER) for _, d in batches)
    reasons = {d.reason for _, d in batches if d.mode == "emergency"}
    # Every emergency batch went at once (no window wait): urgent lane, drain, full, or a
    # compensation batch after the P99 breach the burst causes.
    assert reasons and reasons <= {"emergency", "drain", "full", "compensation", "deadline"}


def test_heavy_burst_with_reject_policy_rejects_and_serves_the_rest():
    arrivals = [(0.2, 256, 5.0 + (i * 7) % 60) for i in range(120)]
    sched = Scheduler(SchedulerConfig(), CostEstimator(DEVICE_COST),
                      ControlConfig(infeasible_policy="reject"))
    reqs, batches, rejected = run_event_loop(sched, arrivals, DEVICE_COST, 5.0,
                                             external_util=0.95)
    check_every_request_ends_once(sched, reqs, batches, rejected)
    assert rejected and batches
    assert sched.stats(10.0).rejected_infeasible == len(rejected)


# -- safe-zone batching ------------------------------------------------------------------------

def _safe_zone(batching: str, cost_mode: str) -> Scheduler:
    # Explicit control never engages (prewarm and zones out of reach): only default mode runs.
    return make(cost=DEVICE_COST, cost_mode=cost_mode,
                control=ctl(safe_zone_batching=batching, prewarm_utilization=1.0,
                            max_padding_waste=0.15), max_batch_size=8)


@pytest.mark.parametrize("batching, cost_mode, expected", [
    ("auto", "padded", [0, 2, 3]),  # padded device: the long one is split off
    ("length_aware", "padded", [0, 2, 3]),
    ("auto", "ragged", [0, 1, 2, 3]),  # ragged device: FIFO, padding costs nothing
    ("fifo", "padded", [0, 1, 2, 3]),
])
def test_safe_zone_batching_splits_by_length_where_padding_costs(batching, cost_mode, expected):
    s = _safe_zone(batching, cost_mode)
    for i, n in enumerate([32, 400, 32, 32]):
        s.submit(req(i, 0.0, seq_len=n), 0.0)
    d = s.schedule(0.5, flush=True)
    assert d.mode == "default"
    assert sorted(ids(d)) == expected


def test_safe_zone_batching_rejects_unknown_values():
    with pytest.raises(ProfileError, match="safe_zone_batching"):
        profile_from_mapping({"name": "x", "cost_model": {}, "control": {
            "safe_zone_batching": "greedy"}}, "test")
