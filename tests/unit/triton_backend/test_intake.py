"""The intakes as named parts, without a server: the registry, the hand-over arrival
estimate, gather's park and release, driven as ExplicitModel drives them."""

from __future__ import annotations

import threading
import time

import pytest

from triton_backend.intake import (DEFAULT_INTAKE, HAND_OVER_PER_REQUEST_S, HAND_OVER_S,
                                   INTAKES, GatherIntake, HoldIntake, ReleaseIntake,
                                   hand_over_arrival, make_intake)

HANG_GUARD_S = 30.0  # a parked call that never returns fails the test, it does not hang it


def _driver():
    lock = threading.RLock()
    return lock, threading.Condition(lock)


def test_the_registry_names_every_intake_and_refuses_others_naming_them():
    assert set(INTAKES) == {"hold", "release", "gather"} and DEFAULT_INTAKE in INTAKES
    for name in INTAKES:
        assert make_intake(name, *_driver()).name == name
    with pytest.raises(ValueError, match="unknown intake 'batch'; known: gather, release, hold"):
        make_intake("batch", *_driver())


def test_only_hold_answers_inside_execute():
    assert {name: make_intake(name, *_driver()).threaded for name in INTAKES} == {
        "hold": False, "release": True, "gather": True}


def test_a_call_right_after_the_previous_one_arrived_during_it():
    assert hand_over_arrival(10.0, None) == 10.0
    assert hand_over_arrival(10.0 + HAND_OVER_S / 2, (9.0, 10.0)) == 9.5
    assert hand_over_arrival(10.0 + 2 * HAND_OVER_S, (9.0, 10.0)) == 10.0 + 2 * HAND_OVER_S


def test_a_larger_hand_over_may_come_later():
    """Triton copies each request's inputs before the call starts: 100 requests 25 ms
    after the return are a hand-over of what queued during the previous call (29.75 ms
    allowed), one request then is an arrival after it."""
    late = 10.0 + HAND_OVER_S + 80 * HAND_OVER_PER_REQUEST_S
    assert hand_over_arrival(late, (9.0, 10.0), requests=100) == 9.5
    assert hand_over_arrival(late, (9.0, 10.0), requests=1) == late
    assert hand_over_arrival(late, (9.0, 10.0), requests=50) == late  # 17.25 ms allowed
    assert hand_over_arrival(10.0 + HAND_OVER_S / 2, (9.0, 10.0), requests=0) == 9.5


def test_hold_estimates_from_its_own_previous_call():
    hold = HoldIntake()
    assert hold.call_arrival(5.0, 3) == 5.0
    hold.call_returned(5.0, 5.02)
    assert hold.call_arrival(5.021, 3) == pytest.approx(5.01)
    assert hold.call_arrival(5.035, 3) == 5.035  # too late for 3 requests
    assert hold.call_arrival(5.035, 128) == pytest.approx(5.01)  # not for 128
    assert hold.call_arrival(6.0, 128) == 6.0


def test_a_call_after_one_that_returned_many_answers_may_come_later():
    """Triton takes the previous call's returned answers before it hands over again: 86
    requests 27 ms after a call that returned 187 answers queued during that call (and
    are dated from its start for admission), while after a call of 1 they came after it."""
    after_big, after_small = HoldIntake(), HoldIntake()
    after_big.call_returned(5.0, 5.2, answers=187)
    after_small.call_returned(5.0, 5.2, answers=1)
    assert after_big.admission_arrival(5.227, 86) == (5.0, True)
    assert after_small.admission_arrival(5.227, 86) == (5.227, False)
    assert after_big.call_arrival(5.227, 86) == pytest.approx(5.1)


def test_release_never_parks_and_takes_arrivals_as_they_come():
    release = ReleaseIntake(*_driver())
    assert release.call_arrival(3.0, 1) == 3.0
    release.after_queued(1, 50.0, release.generation())  # returns at once
    assert release.summary() == ""


def _park_in_thread(gather: GatherIntake, sla_ms: float = 10_000.0) -> threading.Thread:
    generation = gather.generation()
    thread = threading.Thread(target=gather.after_queued, args=(3, sla_ms, generation))
    thread.start()
    return thread


def _wait_parked(gather: GatherIntake, cond: threading.Condition, n: int = 1) -> None:
    with cond:
        assert cond.wait_for(lambda: gather.parked == n, timeout=HANG_GUARD_S)


@pytest.mark.parametrize("let_go", ["batch finished", "idle"])
def test_gather_parks_a_call_until_the_scheduler_lets_it_go(let_go):
    lock, cond = _driver()
    gather = GatherIntake(lock, cond)
    thread = _park_in_thread(gather)
    _wait_parked(gather, cond)
    with cond:
        if let_go == "idle":
            gather.idle_locked()
        else:
            gather.batch_finished_locked(started_s=0.0)
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    assert gather.stats["parked"] == 1 and gather.stats["park_timeouts"] == 0
    assert gather.parked == 0


def test_a_gather_call_let_go_before_it_parks_returns_at_once():
    lock, cond = _driver()
    gather = GatherIntake(lock, cond)
    generation = gather.generation()
    thread = _park_in_thread(gather)  # parks: nothing let it go yet
    _wait_parked(gather, cond)
    with cond:
        gather.idle_locked()
    thread.join(HANG_GUARD_S)
    gather.after_queued(1, 10_000.0, generation)  # its generation was let go: no park
    assert gather.stats == {**gather.stats, "calls": 2, "parked": 1}


def test_a_gather_park_is_bounded_by_a_quarter_of_the_smallest_recent_sla():
    """A 4 ms SLA bounds the park to 1 ms: it times out, counted, with nobody letting it go."""
    lock, cond = _driver()
    gather = GatherIntake(lock, cond)
    thread = _park_in_thread(gather, sla_ms=4.0)
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    assert gather.stats["park_timeouts"] == 1


def test_stopping_lets_parked_calls_go_and_parks_no_more():
    lock, cond = _driver()
    gather = GatherIntake(lock, cond)
    thread = _park_in_thread(gather)
    _wait_parked(gather, cond)
    with cond:
        gather.stop_locked()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    gather.after_queued(1, 10_000.0, gather.generation())
    assert gather.stats["parked"] == 1


def test_requests_of_a_call_after_a_park_arrived_during_the_park():
    """The next call's requests queued in Triton while this one was parked: their arrival
    is the middle of the park (from the call's start to its return), not the next call's
    start."""
    lock, cond = _driver()
    gather = GatherIntake(lock, cond)
    start = time.monotonic()
    assert gather.call_arrival(start, 1) == start
    thread = _park_in_thread(gather)
    _wait_parked(gather, cond)
    with cond:
        gather.idle_locked()
    thread.join(HANG_GUARD_S)
    returned = gather._prev_parked[1]  # noqa: SLF001 - when the park ended
    assert gather.call_arrival(returned, 1) == pytest.approx((start + returned) / 2)
