"""The adapter's answer contract, on the fake pb_utils (conftest.py): every request ends with
exactly one final answer - an invalid one INVALID_ARG alone while its call is served, a
failed batch INTERNAL for its own members only, and at unload whatever is still queued."""

from __future__ import annotations

import threading

import numpy as np

from tests.eventually import eventually
from triton_backend.executors import deterministic_embedding

SLA_MS = 60_000.0  # no deadline refusal, however slow the machine
FAULT_TOKEN = 999


def the_answer(pb_utils, req, returned=None, index=-1):
    got = pb_utils.answers(req, returned, index)
    assert len(got) == 1, f"{req}: expected exactly one final answer, got {got}"
    assert isinstance(got[0], pb_utils.InferenceResponse), f"{req}: {got[0]!r}"
    return got[0]


def assert_embedding(pb_utils, req, response) -> None:
    assert not response.has_error(), f"{req}: {response!r}"
    tensor = pb_utils.get_output_tensor_by_name(response, "EMBEDDING")
    expected = deterministic_embedding(np.asarray(req.ids, dtype=np.int64))
    np.testing.assert_array_equal(tensor.as_numpy(), expected.reshape(1, -1))


def test_hold_invalid_requests_answered_invalid_arg_alone(adapter, pb_utils):
    """Each malformed request of a call is answered INVALID_ARG (counted as rejected,
    reason invalid_input) and never reaches the device; the call's valid requests are
    served with their embeddings."""
    model = adapter.model("hold")
    spy = adapter.spy(model)
    fake = pb_utils.FakeRequest
    invalid = {
        1: fake(None, sla_ms=SLA_MS),  # no INPUT_IDS
        3: fake([0, 5, 6], sla_ms=SLA_MS),  # token 0 is padding
        4: fake(np.array([[1.5, 2.0]], dtype=np.float32), sla_ms=SLA_MS),  # not INT64
        5: fake([7, 8], sla_ms=100.0, params={"sla_ms": 250}),  # SLA_MS and sla_ms disagree
        6: fake([7, 8], sla_ms=-1.0),  # not a positive SLA
    }
    valid = {0: fake([11, 12], sla_ms=SLA_MS), 2: fake([13], sla_ms=SLA_MS),
             7: fake([14, 15, 16], params={"sla_ms": SLA_MS})}
    requests = [{**invalid, **valid}[i] for i in range(8)]

    returned = model.execute(requests)

    for i, req in enumerate(requests):
        response = the_answer(pb_utils, req, returned, i)
        if i in invalid:
            assert pb_utils.error_code(response) == pb_utils.TritonError.INVALID_ARG, response
            assert response.error().message()
        else:
            assert_embedding(pb_utils, req, response)
    assert sorted(spy.computed) == sorted(r.ids for r in valid.values())
    eventually(lambda: pb_utils.metric_value("explicit_batching_rejected_requests_total",
                                             reason="invalid_input") == len(invalid),
               what="rejected_requests_total{reason=invalid_input} counts the invalid ones")


def test_hold_failing_batch_fails_only_its_members(adapter, pb_utils):
    """A batch the device fails (fault_injection_token) answers each of its members
    INTERNAL, once; every request of another batch - in the same call or the next - is
    served; the failure is counted and logged, and the model keeps serving."""
    model = adapter.model("hold", fault_injection_token=str(FAULT_TOKEN))
    spy = adapter.spy(model)
    fake = pb_utils.FakeRequest
    first_call = [fake([21, 22], sla_ms=SLA_MS), fake([FAULT_TOKEN, 23], sla_ms=SLA_MS),
                  fake([24] * 40, sla_ms=SLA_MS)]
    second_call = [fake([31, 32], sla_ms=SLA_MS), fake([33], sla_ms=SLA_MS)]

    returned = [model.execute(first_call), model.execute(second_call)]

    failed_batches = [b for b in spy.batches if any(FAULT_TOKEN in seq for seq in b)]
    assert len(failed_batches) == 1
    in_failed = set(failed_batches[0])
    for call, answers in zip((first_call, second_call), returned):
        for i, req in enumerate(call):
            response = the_answer(pb_utils, req, answers, i)
            if req.ids in in_failed:
                assert pb_utils.error_code(response) == pb_utils.TritonError.INTERNAL, response
                assert "injected device fault" in response.error().message()
            else:
                assert_embedding(pb_utils, req, response)
    eventually(lambda: pb_utils.metric_value("explicit_batching_batch_failures_total") == 1,
               what="batch_failures_total == 1")
    assert any("failed" in m for m in pb_utils.logged("error"))


def test_release_failing_batch_fails_only_its_members(adapter, pb_utils):
    """intake release: the failing request's batch is held at the device's door while the
    others queue behind it, so the batches are known: only its own batch fails (INTERNAL),
    the next one is served, each request answered once through its sender."""
    model = adapter.model("release", gated=True, fault_injection_token=str(FAULT_TOKEN))
    spy = adapter.spy(model)
    fake = pb_utils.FakeRequest
    failing = fake([FAULT_TOKEN, 41], sla_ms=SLA_MS)
    adapter.gate.close()
    assert model.execute([failing]) is None
    eventually(lambda: adapter.gate.held() == 1, what="the failing batch held at the door")
    behind = [fake([42, 43], sla_ms=SLA_MS), fake([44], sla_ms=SLA_MS)]
    for req in behind:
        assert model.execute([req]) is None
    adapter.gate.open()

    eventually(lambda: pb_utils.answered([failing, *behind]), what="every request answered")
    eventually(lambda: pb_utils.metric_value("explicit_batching_batch_failures_total") == 1,
               what="batch_failures_total == 1")
    adapter.finalize(model)
    assert spy.batches[0] == [failing.ids]
    assert pb_utils.error_code(the_answer(pb_utils, failing)) == pb_utils.TritonError.INTERNAL
    for req in behind:
        assert_embedding(pb_utils, req, the_answer(pb_utils, req))


def test_release_finalize_answers_every_queued_request_once(adapter, pb_utils):
    """finalize() while a batch runs and requests wait behind it: it serves what is queued
    (the scheduler thread flushes the queue), then stops the threads; when it returns
    every request has exactly one final answer. A request arriving meanwhile is refused
    UNAVAILABLE (the model is shutting down)."""
    model = adapter.model("release", gated=True)
    spy = adapter.spy(model)
    fake = pb_utils.FakeRequest
    running = fake([51, 52], sla_ms=SLA_MS)
    adapter.gate.close()
    model.execute([running])
    eventually(lambda: adapter.gate.held() == 1, what="the first batch held at the door")
    queued = [fake([53 + k, 60], sla_ms=SLA_MS) for k in range(3)]
    for req in queued:
        model.execute([req])
    assert model.scheduler.queue_depth == len(queued)
    unload = threading.Thread(target=adapter.finalize, args=(model,), daemon=True)
    unload.start()
    eventually(lambda: model.runner.stopping, what="finalize() began")
    late = fake([70], sla_ms=SLA_MS)
    model.execute([late])

    adapter.gate.open()
    eventually(lambda: not unload.is_alive(), what="finalize() returned")

    for req in [running, *queued]:
        assert_embedding(pb_utils, req, the_answer(pb_utils, req))
    refused = the_answer(pb_utils, late)
    assert pb_utils.error_code(refused) == pb_utils.TritonError.UNAVAILABLE, refused
    assert "shutting down" in refused.error().message()
    assert refused.error().message().endswith("; retry on another instance")
    assert sorted(spy.computed) == sorted(r.ids for r in [running, *queued])
    assert not model.driver._thread.is_alive()
