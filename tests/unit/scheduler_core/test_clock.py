"""The logical clock of the elastic window (fake physical clock: plain floats)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from scheduler_core.clock import MAX_RATE, LogicalClock


def test_starts_at_physical_time_with_rate_one():
    c = LogicalClock(5.0)
    assert c.rate == 1.0
    assert c.now(5.0) == 5.0
    assert c.now(6.5) == 6.5


def test_advances_at_rate():
    c = LogicalClock(0.0)
    c.set_rate(0.0, 2.0)
    assert c.now(1.0) == 2.0
    assert c.now(1.5) == 3.0
    c.set_rate(1.5, 0.25)
    assert c.now(3.5) == 3.5


def test_never_goes_backwards():
    c = LogicalClock(0.0)
    assert c.now(2.0) == 2.0
    assert c.now(1.0) == 2.0            # an earlier physical time: no step back
    assert c.now(2.0) == 2.0
    assert c.now(2.5) == 2.5            # and the earlier call did not disturb the origin


def test_set_rate_keeps_continuity():
    c = LogicalClock(0.0)
    assert c.now(1.0) == 1.0
    c.set_rate(2.0, 4.0)                # 1.0 -> 2.0 ran at rate 1
    assert c.now(2.0) == 2.0            # no jump at the change
    assert c.now(2.5) == 4.0            # then 4x
    c.set_rate(2.5, 0.5)
    assert c.now(2.5) == 4.0
    assert c.now(4.5) == 5.0


def test_set_rate_at_earlier_time_does_not_rewind():
    c = LogicalClock(0.0)
    c.now(2.0)
    c.set_rate(1.0, 10.0)               # stale timestamp: applies from 2.0 on
    assert c.now(2.0) == 2.0
    assert c.now(2.5) == 7.0


def test_rate_is_clamped():
    c = LogicalClock(0.0)
    c.set_rate(0.0, 0.0)
    assert c.rate == 1e-6
    c.set_rate(0.0, -5.0)
    assert c.rate == 1e-6
    c.set_rate(0.0, 1e12)
    assert c.rate == MAX_RATE


def test_physical_at_is_the_inverse():
    c = LogicalClock(0.0)
    c.set_rate(0.0, 2.0)
    assert c.physical_at(3.0, 1.0) == 1.5    # logical 2.0 at physical 1.0; 1.0 more at 2x
    assert c.now(1.5) == 3.0
    c.set_rate(1.5, 0.5)
    assert c.physical_at(4.0, 1.5) == 3.5
    assert c.now(3.5) == 4.0


def test_physical_at_in_the_past_is_now():
    c = LogicalClock(0.0)
    assert c.physical_at(0.5, 2.0) == 2.0
    assert c.physical_at(2.0, 2.0) == 2.0


def test_rate_change_moves_a_pending_wake_time():
    c = LogicalClock(0.0)
    target = 0.010                                   # 10 ms of logical time from 0
    assert c.physical_at(target, 0.0) == 0.010
    c.set_rate(0.004, 0.5)                           # 4 ms done, 6 ms left at half speed
    assert c.physical_at(target, 0.004) == pytest.approx(0.016, abs=1e-15)
    c.set_rate(0.008, 2.0)                           # 6 ms done, 4 ms left at 2x
    assert c.physical_at(target, 0.008) == pytest.approx(0.010, abs=1e-15)


steps = st.lists(st.tuples(st.floats(0.0, 2.0, allow_nan=False),
                           st.floats(1e-3, 1e3, allow_nan=False)), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_logical_time_is_integral_of_rate(seq):
    c = LogicalClock(0.0)
    t, expected, last = 0.0, 0.0, 0.0
    rate = 1.0
    for dt, new_rate in seq:
        t += dt
        expected += dt * rate
        now = c.now(t)
        assert now >= last                          # monotone
        assert now == pytest.approx(expected, rel=1e-9, abs=1e-12)
        c.set_rate(t, new_rate)
        assert c.now(t) == now                      # continuity across the change
        rate = new_rate
        last = now


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 100.0), st.floats(1e-3, 1e3), st.floats(0.0, 10.0))
def test_physical_at_round_trips(now_s, rate, ahead):
    c = LogicalClock(0.0)
    c.set_rate(now_s, rate)
    logical_now = c.now(now_s)
    when = c.physical_at(logical_now + ahead, now_s)
    assert when >= now_s
    assert c.now(when) == pytest.approx(logical_now + ahead, rel=1e-9, abs=1e-9)
