"""The intakes as named parts, without a server: the registry, the hand-over arrival
estimate, gather's park and release, and hold's Waker, driven as ExplicitModel drives
them."""

from __future__ import annotations

import threading
import time

import pytest

from triton_backend.intake import (DEFAULT_INTAKE, HAND_OVER_S, INTAKES, WAKE_IDLE_CALLS,
                                   WAKE_MAX_IN_FLIGHT, GatherIntake, HoldIntake, ReleaseIntake,
                                   Waker, hand_over_arrival, make_intake)

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


def test_hold_estimates_from_its_own_previous_call():
    hold = HoldIntake()
    assert hold.call_arrival(5.0) == 5.0
    hold.call_returned(5.0, 5.02)
    assert hold.call_arrival(5.021) == pytest.approx(5.01)
    assert hold.call_arrival(6.0) == 6.0


def test_release_never_parks_and_takes_arrivals_as_they_come():
    release = ReleaseIntake(*_driver())
    assert release.call_arrival(3.0) == 3.0
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
    assert gather.call_arrival(start) == start
    thread = _park_in_thread(gather)
    _wait_parked(gather, cond)
    with cond:
        gather.idle_locked()
    thread.join(HANG_GUARD_S)
    returned = gather._prev_parked[1]  # noqa: SLF001 - when the park ended
    assert gather.call_arrival(returned) == pytest.approx((start + returned) / 2)


# -- the Waker (intake hold's wake requests) ---------------------------------------------
def _waker(send=lambda: True, run_inline=True, after_s=0.002):
    started = []
    start = (lambda target: target()) if run_inline else started.append
    return Waker(after_s, send, clock=lambda: 0.0, start_thread=start), started


def test_waker_sends_only_after_a_call_returned_and_none_started():
    waker, _ = _waker()
    assert waker.tick(5.0) is None and waker.sent == 0  # never armed
    waker.call_returned(10.0, answered_real=True)
    assert waker.tick(10.001) == pytest.approx(0.001)  # not due yet
    assert waker.sent == 0
    waker.tick(10.0025)
    assert waker.sent == 1
    waker.call_started()  # the next call came: disarmed
    assert waker.tick(20.0) is None and waker.sent == 1


def test_waker_keeps_sending_while_no_call_comes():
    waker, _ = _waker()
    waker.call_returned(10.0, answered_real=True)
    waker.tick(10.0025)
    assert waker.tick(10.003) == pytest.approx(0.001)  # the next look: after_s later
    waker.tick(10.0045)
    assert waker.sent == 2


def test_waker_stops_after_calls_of_wake_requests_only():
    waker, _ = _waker()
    now = 0.0
    for _ in range(WAKE_IDLE_CALLS):  # each wake-only call still re-arms ...
        now += 1.0
        waker.call_returned(now, answered_real=False)
        waker.tick(now + 0.01)
        waker.call_started()
    now += 1.0
    waker.call_returned(now, answered_real=False)  # ... up to the bound
    assert waker.tick(now + 0.01) is None
    assert waker.sent == WAKE_IDLE_CALLS
    waker.call_returned(now + 1.0, answered_real=True)  # a real request re-arms it
    waker.tick(now + 1.01)
    assert waker.sent == WAKE_IDLE_CALLS + 1


def test_waker_bounds_unanswered_wake_requests_and_counts_refusals():
    waker, started = _waker(run_inline=False)
    waker.call_returned(0.0, answered_real=True)
    for k in range(WAKE_MAX_IN_FLIGHT + 3):
        waker.tick(0.002 * (k + 1))
    assert waker.sent == WAKE_MAX_IN_FLIGHT and len(started) == WAKE_MAX_IN_FLIGHT
    started[0]()  # one answered: a slot frees
    assert waker.in_flight == WAKE_MAX_IN_FLIGHT - 1 and waker.refused == 0
    refusing, _ = _waker(send=lambda: False)
    refusing.call_returned(0.0, answered_real=True)
    refusing.tick(1.0)
    assert refusing.sent == 1 and refusing.refused == 1 and refusing.in_flight == 0


def test_waker_thread_sends_when_no_call_follows():
    sent = threading.Event()
    waker = Waker(0.001, lambda: sent.set() or True).start()
    try:
        waker.call_returned(time.monotonic(), answered_real=True)
        assert sent.wait(30), "no wake request within 30 s of an unanswered return"
    finally:
        waker.stop()


def test_waker_thread_sends_nothing_when_the_next_call_comes():
    sent = threading.Event()
    waker = Waker(60.0, lambda: sent.set() or True).start()
    waker.call_returned(time.monotonic(), answered_real=True)
    waker.call_started()
    waker.stop()
    assert not sent.is_set() and waker.sent == 0


def test_a_refused_wake_request_disarms_until_the_next_call():
    waker, _ = _waker(send=lambda: False)
    waker.call_returned(0.0, answered_real=True)
    waker.tick(1.0)
    assert waker.tick(2.0) is None and waker.sent == 1  # no storm against a full queue
    waker.call_returned(3.0, answered_real=True)
    waker.tick(4.0)
    assert waker.sent == 2


def test_stop_waits_for_wake_requests_in_flight():
    answered, started = threading.Event(), []
    waker = Waker(0.002, lambda: True, start_thread=started.append)
    waker.call_returned(time.monotonic(), answered_real=True)
    waker.tick(time.monotonic() + 1.0)
    assert waker.in_flight == 1
    threading.Timer(0.05, lambda: (started[0](), answered.set())).start()
    waker.stop(timeout_s=HANG_GUARD_S)
    assert answered.is_set() and waker.in_flight == 0
