"""The fake pb_utils (conftest.py) refuses what the real one refuses, so the adapter tests
built on it cannot pass on behaviour a real server would reject."""

from __future__ import annotations

import numpy as np
import pytest


def test_sender_refuses_a_second_response_and_records_it(pb_utils):
    req = pb_utils.FakeRequest([1, 2])
    sender = req.get_response_sender()
    assert sender is req.get_response_sender()
    ok = pb_utils.InferenceResponse(output_tensors=[
        pb_utils.Tensor("EMBEDDING", np.zeros((1, 4), np.float32))])
    sender.send(ok, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException):
        sender.send(ok, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert len(pb_utils.answers(req)) == 2  # a double answer is visible to the tests


def test_answers_counts_the_sender_and_the_returned_list_together(pb_utils):
    sent, returned = pb_utils.FakeRequest([1]), pb_utils.FakeRequest([2])
    err = pb_utils.InferenceResponse(error=pb_utils.TritonError(
        "gone", pb_utils.TritonError.CANCELLED))
    sent.get_response_sender().send(err, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    call = [None, pb_utils.InferenceResponse()]
    assert pb_utils.answers(sent, call, 0) == [err]
    assert pb_utils.answers(returned, call, 1) == [call[1]]
    assert pb_utils.error_code(err) == pb_utils.TritonError.CANCELLED
    assert err.error().message() == "gone"


def test_request_accessors(pb_utils):
    req = pb_utils.FakeRequest([5, 6, 7], sla_ms=50.0, params={"sla_ms": 50}, timeout_us=9)
    ids = pb_utils.get_input_tensor_by_name(req, "INPUT_IDS").as_numpy()
    assert ids.dtype == np.int64 and ids.shape == (1, 3)
    assert pb_utils.get_input_tensor_by_name(req, "SLA_MS").as_numpy().shape == (1, 1)
    assert pb_utils.get_input_tensor_by_name(req, "MISSING") is None
    assert req.parameters() == '{"sla_ms": 50}' and req.timeout() == 9
    assert pb_utils.FakeRequest([1]).parameters() == "{}"
    assert req.is_cancelled() is False and req.cancel_checks == 1


def test_metrics_keep_their_kind(pb_utils):
    counter = pb_utils.MetricFamily("c", "", pb_utils.MetricFamily.COUNTER).Metric(
        labels={"model": "m"})
    counter.increment(2)
    with pytest.raises(pb_utils.TritonModelException):
        counter.increment(-1)
    with pytest.raises(pb_utils.TritonModelException):
        counter.set(0)
    hist = pb_utils.MetricFamily("h", "", pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(pb_utils.TritonModelException):
        hist.Metric(labels={})
    hist.Metric(labels={}, buckets=[1.0]).observe(0.5)
    assert pb_utils.metric_value("c", model="m") == 2
    assert pb_utils.metric_value("c", model="other") == 0
