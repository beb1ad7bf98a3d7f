"""A request its client cancelled while it waited, under each intake (hold, release,
gather): answered exactly once, CANCELLED, and never computed; its neighbours are served
exactly once; the plugin counts it (``explicit_batching_cancelled_requests_total``).

A real ``ExplicitModel`` on the emulated device runs on the fake pb_utils (conftest.py).
Nothing is timed: the threaded intakes' device is held at its door (the ``device_gate_file``
test hook) while requests queue behind it and are cancelled, and "it will happen" is
``eventually``. ``runner.CANCEL_CHECK_MIN_WAIT_S`` (members are asked only after that
long a wait) is set to 0 by the ``cancel_check_now`` fixture, or the arrival is backdated.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from tests.eventually import eventually
from triton_backend import runner, threaded_driver
from triton_backend.executors import deterministic_embedding

CANCELLED_TOTAL = "explicit_batching_cancelled_requests_total"
# A long SLA: no request is refused for its deadline, however long the gate holds the
# device or the machine stalls the test.
SLA_MS = 60_000.0


def request(pb_utils, first_token: int):
    """A request whose first token names it (the executor spy sees the tokens)."""
    return pb_utils.FakeRequest([first_token, 7, 8, 9], sla_ms=SLA_MS)


def the_answer(pb_utils, req, returned=None, index=-1):
    """The one answer ``req`` got (sender and execute()'s list together), asserted final
    and single."""
    got = pb_utils.answers(req, returned, index)
    assert len(got) == 1, f"{req}: expected exactly one final answer, got {got}"
    assert isinstance(got[0], pb_utils.InferenceResponse), f"{req}: {got[0]!r}"
    return got[0]


def check_outcome(pb_utils, spy, requests, cancelled, returned=None):
    """Each cancelled request answered once CANCELLED and never computed, every other one
    answered once with its embedding and computed once; computed + cancelled == sent."""
    for i, req in enumerate(requests):
        response = the_answer(pb_utils, req, returned, i)
        if i in cancelled:
            assert pb_utils.error_code(response) == pb_utils.TritonError.CANCELLED, response
            assert "cancel" in response.error().message()
        else:
            assert not response.has_error(), response
            tensor = pb_utils.get_output_tensor_by_name(response, "EMBEDDING")
            expected = deterministic_embedding(np.asarray(req.ids, dtype=np.int64))
            assert tensor.as_numpy().shape == (1, expected.size)
            np.testing.assert_array_equal(tensor.as_numpy()[0], expected)
    computed = spy.computed
    assert sorted(computed) == sorted(r.ids for i, r in enumerate(requests) if i not in cancelled)
    assert len(computed) + len(cancelled) == len(requests)


def counted_cancelled(pb_utils, expected: int) -> None:
    """The plugin's counter reaches ``expected`` (published every control period)."""
    eventually(lambda: pb_utils.metric_value(CANCELLED_TOTAL) == expected,
               what=f"{CANCELLED_TOTAL} == {expected}")
    assert pb_utils.metric_value(CANCELLED_TOTAL) == expected


# -- intake: hold -----------------------------------------------------------------------
def test_hold_drops_cancelled_requests_and_serves_the_rest(adapter, pb_utils,
                                                           cancel_check_now):
    """execute() decides, runs and answers its call itself: the requests whose clients
    gave up while they waited in Triton's queue come back CANCELLED in the call's list (or
    through their sender), never reaching the device."""
    model = adapter.model("hold")
    spy = adapter.spy(model)
    requests = [request(pb_utils, 100 + k) for k in range(6)]
    cancelled = {1, 4}
    for i in cancelled:
        requests[i].cancelled = True

    returned = model.execute(requests)

    assert len(returned) == len(requests)
    check_outcome(pb_utils, spy, requests, cancelled, returned)
    assert all(requests[i].cancel_checks >= 1 for i in cancelled)
    counted_cancelled(pb_utils, len(cancelled))
    assert not pb_utils.logged("error")


@pytest.mark.parametrize("waited", ["at least the minimum", "less than the minimum"])
def test_hold_asks_only_members_that_waited_the_minimum(adapter, pb_utils, monkeypatch,
                                                        waited):
    """CANCEL_CHECK_MIN_WAIT_S as shipped: a member that waited that long is asked and, cancelled,
    dropped; one that waited less is not asked (a round trip saved) and is computed even if
    cancelled (documented in runner.py). The wait is set, not slept: the call's
    arrival is backdated, or the minimum made unreachable."""
    model = adapter.model("hold")
    spy = adapter.spy(model)
    if waited == "at least the minimum":
        backdate_s = 10 * runner.CANCEL_CHECK_MIN_WAIT_S
        arrival = model.intake.admission_arrival

        def backdated(now_s, n):
            date, handed_over = arrival(now_s, n)
            return date - backdate_s, handed_over

        monkeypatch.setattr(model.intake, "admission_arrival", backdated)
    else:
        monkeypatch.setattr(runner, "CANCEL_CHECK_MIN_WAIT_S", math.inf)
    requests = [request(pb_utils, 200 + k) for k in range(3)]
    requests[1].cancelled = True

    returned = model.execute(requests)

    if waited == "at least the minimum":
        check_outcome(pb_utils, spy, requests, {1}, returned)
        assert all(r.cancel_checks >= 1 for r in requests)
        counted_cancelled(pb_utils, 1)
    else:
        check_outcome(pb_utils, spy, requests, set(), returned)
        assert [r.cancel_checks for r in requests] == [0, 0, 0]


@pytest.mark.parametrize("waited_x", [5, 20])
def test_a_slowed_emulated_device_stretches_the_minimum_wait_alike(adapter, pb_utils,
                                                                   monkeypatch, waited_x):
    """An EMULATED device slowed 10 times (time_scale 10) slows its clients' waits alike:
    a member is asked only once it waited 10 x CANCEL_CHECK_MIN_WAIT_S. A sped-up device
    (the suite's time scale 0.01) keeps the minimum as it is."""
    assert adapter.model("hold").runner.wait_scale == 1.0
    model = adapter.model("hold", time_scale="10")
    assert model.runner.wait_scale == 10.0
    spy = adapter.spy(model)
    arrival = model.intake.admission_arrival

    def backdated(now_s, n):
        date, handed_over = arrival(now_s, n)
        return date - waited_x * runner.CANCEL_CHECK_MIN_WAIT_S, handed_over

    monkeypatch.setattr(model.intake, "admission_arrival", backdated)
    requests = [request(pb_utils, 220 + k) for k in range(3)]
    requests[1].cancelled = True

    returned = model.execute(requests)

    if waited_x >= 10:
        check_outcome(pb_utils, spy, requests, {1}, returned)
        assert all(r.cancel_checks >= 1 for r in requests)
    else:
        check_outcome(pb_utils, spy, requests, set(), returned)
        assert [r.cancel_checks for r in requests] == [0, 0, 0]


# -- the threaded intakes: release, gather ------------------------------------------------
def hold_first_batch(pb_utils, adapter, model, send):
    """Close the gate, send one request (``send``) and wait until its batch is held at the
    device's door: the scheduler thread is busy for certain, so what is sent next queues."""
    first = request(pb_utils, 300)
    adapter.gate.close()
    send([first])
    eventually(lambda: adapter.gate.held() == 1, what="the first batch held at the device's door")
    return first


def cancel_and_release(adapter, pb_utils, requests, cancelled: set[int]) -> None:
    """With the device holding the first batch: the clients of ``requests[i]`` for ``i`` in
    ``cancelled`` give up; then the gate opens, and every request is answered."""
    for i in cancelled:
        requests[i].cancelled = True
    adapter.gate.open()
    eventually(lambda: pb_utils.answered(requests), what="every request answered")


def finish(adapter, pb_utils, model, spy, requests, cancelled: set[int]) -> None:
    """The cancellations counted, the model finalized (no thread left that could send a
    second answer), then the outcome checked: once each, nothing cancelled computed."""
    counted_cancelled(pb_utils, len(cancelled))
    adapter.finalize(model)
    check_outcome(pb_utils, spy, requests, cancelled)
    assert not pb_utils.logged("error")


def test_release_drops_requests_cancelled_while_queued(adapter, pb_utils, cancel_check_now):
    """execute() queues and returns; the scheduler thread answers through the senders. Requests
    cancelled while they waited behind a running batch are answered CANCELLED, once."""
    model = adapter.model("release", gated=True)
    spy = adapter.spy(model)
    first = hold_first_batch(pb_utils, adapter, model,
                             lambda reqs: assert_released(model.execute(reqs)))
    queued = [request(pb_utils, 301 + k) for k in range(4)]
    for req in queued:  # release: one request per call
        assert model.execute([req]) is None
    assert model.scheduler.queue_depth == len(queued)  # the scheduler thread is at the gate
    requests, cancelled = [first, *queued], {2, 4}
    cancel_and_release(adapter, pb_utils, requests, cancelled)
    finish(adapter, pb_utils, model, spy, requests, cancelled)


def assert_released(result) -> None:
    assert result is None, "a threaded intake's execute() returns None"


def test_gather_drops_requests_cancelled_while_queued(adapter, pb_utils, cancel_check_now):
    """execute() queues its call's requests and parks while the batch in flight runs: the
    requests of a call parked behind the held batch, cancelled meanwhile, are answered
    CANCELLED once; the call returns None."""
    model = adapter.model("gather", gated=True)
    spy = adapter.spy(model)
    returned, calls = [], []

    def call(reqs):  # a gather call may park: each runs on its own thread, as in Triton
        thread = threading.Thread(target=lambda: returned.append(model.execute(reqs)),
                                  daemon=True)
        thread.start()
        calls.append(thread)

    first = hold_first_batch(pb_utils, adapter, model, call)
    queued = [request(pb_utils, 401 + k) for k in range(4)]
    call(queued)  # gather: what queued in Triton meanwhile comes over in one call
    eventually(lambda: model.runner.arrivals == 1 + len(queued),
               what="the second call's requests queued with the plugin")
    requests, cancelled = [first, *queued], {1, 3}
    cancel_and_release(adapter, pb_utils, requests, cancelled)
    eventually(lambda: not any(t.is_alive() for t in calls), what="both execute() calls returned")
    assert returned == [None, None]
    finish(adapter, pb_utils, model, spy, requests, cancelled)


def test_release_sweep_takes_cancelled_requests_out_of_the_queue(adapter, pb_utils,
                                                                 monkeypatch):
    """The scheduler thread's sweep (``_sweep_cancelled``, run while it waits) answers the
    queued requests whose clients cancelled, once each, and leaves the rest queued - also
    when asking fails the second time (is_cancelled() raising counts as "no"): a request
    taken out of the queue must still be answered. The sweep is called from the test while
    the scheduler thread is held at the gate (it runs only when that thread idles, a moment
    no test can pick); members are never asked at dispatch here, so only it can drop them."""
    monkeypatch.setattr(runner, "CANCEL_CHECK_MIN_WAIT_S", math.inf)
    monkeypatch.setattr(threaded_driver, "CANCEL_SWEEP_PERIOD_S", 0.0)
    model = adapter.model("release", gated=True)
    spy = adapter.spy(model)
    first = hold_first_batch(pb_utils, adapter, model, model.execute)
    queued = [request(pb_utils, 501 + k) for k in range(3)]
    for req in queued:
        model.execute([req])
    cancelled_plain, cancelled_flaky = queued[0], queued[2]
    cancelled_plain.cancelled = True
    asked = []

    def cancelled_then_unreachable():  # the server answers once, then the question fails
        asked.append(1)
        if len(asked) > 1:
            raise RuntimeError("is_cancelled: message to the server failed")
        return True

    cancelled_flaky.is_cancelled = cancelled_then_unreachable

    model.driver._sweep_cancelled(model.driver._last_cancel_sweep + 1.0)

    eventually(lambda: pb_utils.answered([cancelled_plain, cancelled_flaky]),
               what="the swept requests answered")
    assert model.scheduler.queue_depth == 1
    adapter.gate.open()
    requests = [first, *queued]
    eventually(lambda: pb_utils.answered(requests), what="every request answered")
    counted_cancelled(pb_utils, 2)
    adapter.finalize(model)
    check_outcome(pb_utils, spy, requests, {1, 3})
