"""``bls``: a batch run on an inner model through BLS carries a Triton timeout derived from
its members' deadlines (``call_timeout_s``), driven through the model on the fake
``triton_python_backend_utils``."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.triton_backend.test_adapter_cancellation import the_answer
from triton_backend.bls import call_timeout_s


@pytest.mark.parametrize("latest_deadline_s, estimated_ms, bound_s, expected_s", [
    (10.080, 4.0, 5.0, 0.080),  # until the latest deadline
    (10.001, 4.0, 5.0, 0.004),  # never below the batch's estimate
    (9.500, 4.0, 5.0, 0.004),  # every member late (serve_late): the estimate
    (30.000, 4.0, 5.0, 5.000),  # never past the watchdog's bound
])
def test_the_call_timeout(latest_deadline_s, estimated_ms, bound_s, expected_s):
    assert call_timeout_s(latest_deadline_s, 10.0, estimated_ms, bound_s) == pytest.approx(
        expected_s)


def inner_answers(pb_utils, calls: list):
    """A BLS handler that records each inner request and answers its rows."""
    def handle(request):
        calls.append(request)
        ids = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor(
            "EMBEDDING", np.zeros((ids.shape[0], 384), dtype=np.float32))])
    return handle


def test_an_inner_call_carries_the_batchs_latest_deadline(adapter, pb_utils):
    """Two members, SLAs 200 and 900 ms: the inner call's timeout is the later deadline
    from the batch's start (at most 900 ms, and more than the tighter member's 200)."""
    calls: list = []
    pb_utils.bls_handler = inner_answers(pb_utils, calls)
    model = adapter.model("hold", inner_model="emulated_device", inner_model_check="off")
    requests = [pb_utils.FakeRequest([100, 7, 8], sla_ms=200.0),
                pb_utils.FakeRequest([101, 7, 8], sla_ms=900.0)]

    returned = model.execute(requests)

    for i, req in enumerate(requests):
        assert pb_utils.error_code(the_answer(pb_utils, req, returned, i)) is None
    assert [c.model_name for c in calls] == ["emulated_device"]
    assert 200_000 < calls[0].timeout() <= 900_000


def test_an_inner_call_that_fails_fails_its_batch_naming_the_inner_model(adapter, pb_utils):
    """The inner model answers an error (its queue's timeout, say): each member is
    answered INTERNAL naming the inner model and its message; the model goes on."""
    def timed_out(request):
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(
            "Request timeout expired", pb_utils.TritonError.UNAVAILABLE))

    pb_utils.bls_handler = timed_out
    model = adapter.model("hold", inner_model="emulated_device", inner_model_check="off")
    req = pb_utils.FakeRequest([100, 7, 8], sla_ms=200.0)

    failed = the_answer(pb_utils, req, model.execute([req]), 0)

    assert pb_utils.error_code(failed) == pb_utils.TritonError.INTERNAL
    assert "'emulated_device' failed: Request timeout expired" in failed.error().message()
    calls: list = []
    pb_utils.bls_handler = inner_answers(pb_utils, calls)
    nxt = pb_utils.FakeRequest([101, 7, 8], sla_ms=200.0)
    assert pb_utils.error_code(the_answer(pb_utils, nxt, model.execute([nxt]), 0)) is None
