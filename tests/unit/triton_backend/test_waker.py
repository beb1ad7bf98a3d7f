"""intake hold's Waker, without a server: arming, repeating, the idle bound, the in-flight
cap, refusals, its thread and its stop, driven as ExplicitModel drives it."""

from __future__ import annotations

import threading
import time

import pytest

from triton_backend.waker import WAKE_IDLE_CALLS, WAKE_MAX_IN_FLIGHT, Waker

HANG_GUARD_S = 30.0  # a wake request that never comes fails the test, it does not hang it


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
    # The request is answered inside its send, before the waker counts it done: stop()
    # returning with it unanswered is the bug, whichever thread runs first.
    waker = Waker(0.002, lambda: answered.set() or True, start_thread=started.append)
    waker.call_returned(time.monotonic(), answered_real=True)
    waker.tick(time.monotonic() + 1.0)
    assert waker.in_flight == 1
    threading.Timer(0.05, started[0]).start()
    waker.stop(timeout_s=HANG_GUARD_S)
    assert answered.is_set() and waker.in_flight == 0
