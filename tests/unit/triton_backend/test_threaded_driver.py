"""``threaded_driver.ThreadedDriver``: the threaded intakes' execute() and scheduler thread,
on the fake pb_utils (conftest.py). execute() returns None; every request ends with
exactly one final answer through its own response sender, a malformed one at once."""

from __future__ import annotations

import numpy as np
import pytest

from tests.eventually import eventually
from tests.unit.triton_backend.test_adapter_contract import SLA_MS, assert_embedding

INTAKES = ("release", "gather")


def sent(pb_utils, req):
    """The request's one final answer, once the responders have sent it."""
    eventually(lambda: len(pb_utils.answers(req)) == 1,
               what=f"{req} answered through its sender")
    (response,) = pb_utils.answers(req)
    return response


@pytest.mark.parametrize("intake", INTAKES)
def test_a_call_returns_none_and_each_request_is_answered_once_through_its_sender(
        adapter, pb_utils, intake):
    model = adapter.model(intake)
    fake = pb_utils.FakeRequest
    valid = [fake([21, 22], sla_ms=SLA_MS), fake([23], sla_ms=SLA_MS)]
    invalid = fake(np.array([[1.5]], dtype=np.float32), sla_ms=SLA_MS)  # not INT64

    assert model.execute([valid[0], invalid, valid[1]]) is None

    error = sent(pb_utils, invalid)
    assert pb_utils.error_code(error) == pb_utils.TritonError.INVALID_ARG, error
    for req in valid:
        assert_embedding(pb_utils, req, sent(pb_utils, req))
    adapter.finalize(model)
    assert all(len(req.sender.sends) == 1 for req in [*valid, invalid])
    assert not model.driver._thread.is_alive()


def test_the_engine_counts_what_the_threaded_driver_submitted(adapter, pb_utils):
    """The runner counts arrivals as the engine took them: a malformed request never
    reaches the engine."""
    model = adapter.model("release")
    fake = pb_utils.FakeRequest
    requests = [fake([31 + k], sla_ms=SLA_MS) for k in range(3)]
    model.execute(requests[:2])
    model.execute([fake(None, sla_ms=SLA_MS), requests[2]])  # no INPUT_IDS
    for req in requests:
        sent(pb_utils, req)
    assert model.runner.arrivals == len(requests)


def test_a_queue_full_refusal_says_when_to_come_back(adapter, pb_utils):
    """The plugin's queue bound (scheduler.max_queued_requests 2) with the device held: the
    request past it is refused UNAVAILABLE, naming the bound and a retry-after hint in ms
    (the device time the queue still needs by the estimate)."""
    import re  # noqa: PLC0415

    model = adapter.model("release", gated=True, **{"scheduler.max_queued_requests": "2"})
    fake = pb_utils.FakeRequest
    adapter.gate.close()
    running = fake([51, 52], sla_ms=SLA_MS)
    model.execute([running])
    eventually(lambda: adapter.gate.held() == 1, what="the first batch held at the door")
    queued = [fake([53 + k], sla_ms=SLA_MS) for k in range(2)]
    for req in queued:
        model.execute([req])
    eventually(lambda: model.scheduler.queue_depth == 2, what="two requests queued")
    late = fake([60], sla_ms=SLA_MS)
    model.execute([late])

    refusal = sent(pb_utils, late)
    adapter.gate.open()
    assert pb_utils.error_code(refusal) == pb_utils.TritonError.UNAVAILABLE
    message = refusal.error().message()
    assert "queue full" in message and "max_queued_requests=2" in message
    assert int(re.search(r"retry after (\d+) ms", message).group(1)) >= 1
    for req in [running, *queued]:
        assert_embedding(pb_utils, req, sent(pb_utils, req))
