"""Real tritonserver, real clients: the request contract of the *_explicit models."""

from __future__ import annotations

import math
import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from scheduler_core.profile_files import load_profile_dir
from tests.conftest import BLS_MODELS, SHIPPED_MODELS, gate_path
from tests.integration.collector import Collector
from tests.integration.models import grpc_inputs
from tests.integration.refusals import refused_by_its_own_estimate
from tests.eventually import eventually, stays
from tests.integration.gates import DeviceGate, triton_counts, wait_pending
from triton_backend.executors import deterministic_embedding

pytestmark = pytest.mark.integration
RNG = np.random.default_rng(3)


def _ids(length: int) -> np.ndarray:
    return np.array([101, *RNG.integers(1000, 30000, size=length - 2), 102], dtype=np.int64)


# (case name, INPUT_IDS or None, dtype, SLA_MS or None, expected error substring or None)
def _cases() -> list[tuple]:
    cases = [(f"valid-{i}", _ids(int(n)), np.int64, sla, None)
             for i, (n, sla) in enumerate(zip(RNG.integers(3, 48, size=16),
                                              [None, 60000.0] * 8))]
    # (A minute: no loaded machine makes that infeasible. An absent SLA takes the
    # profile's default, which the model may refuse as infeasible by its own numbers;
    # test_infeasible_deadline_is_refused_at_once checks refusals on their own.)
    cases += [
        ("empty", np.zeros(0, dtype=np.int64), np.int64, None, "empty"),
        ("too-long", _ids(513), np.int64, None, "limit is 512"),
        ("out-of-vocab", np.array([101, 40000, 102], dtype=np.int64), np.int64, None, "valid ids"),
        ("padding-id", np.array([101, 0, 102], dtype=np.int64), np.int64, None, "valid ids"),
        ("sla-zero", _ids(8), np.int64, 0.0, "SLA_MS"),
        ("sla-negative", _ids(8), np.int64, -5.0, "SLA_MS"),
        ("sla-nan", _ids(8), np.int64, math.nan, "SLA_MS"),
        ("sla-inf", _ids(8), np.int64, math.inf, "SLA_MS"),
        ("wrong-dtype", _ids(8).astype(np.int32), np.int32, None, "INT"),
        ("missing-input-ids", None, np.int64, 100.0, "INPUT_IDS"),
        ("wrong-rank", _ids(8).reshape(1, 2, 4), np.int64, None, "shape"),
        ("sla-absurd", _ids(8), np.int64, 1e12, "exceeds the maximum"),
    ]
    return cases


def _inputs(module, ids, dtype, sla):
    inputs = []
    if ids is not None:
        shaped = ids if ids.ndim > 1 else ids.reshape(1, -1)
        t = module.InferInput("INPUT_IDS", list(shaped.shape),
                              "INT64" if dtype == np.int64 else "INT32")
        t.set_data_from_numpy(shaped.astype(dtype))
        inputs.append(t)
    if sla is not None:
        s = module.InferInput("SLA_MS", [1, 1], "FP32")
        s.set_data_from_numpy(np.array([[sla]], dtype=np.float32))
        inputs.append(s)
    return inputs


def _reference(server, model: str, ids: np.ndarray) -> np.ndarray:
    if model.startswith("emulated"):
        return deterministic_embedding(ids)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        return client.infer("minilm_native", _inputs(httpclient, ids, np.int64, None)).as_numpy(
            "EMBEDDING")[0]
    finally:
        client.close()


def _check_outcomes(server, model, cases, outcomes):
    assert len(outcomes) == len(cases)
    served = 0
    for (name, ids, _, sla, expected_error), (kind, value) in zip(cases, outcomes):
        if expected_error is None:
            if kind == "error" and refused_by_its_own_estimate(value, sla):
                print(f"{name}: refused by the model's own estimate: {value}")
                continue
            served += 1
            assert kind == "ok", f"{name}: expected an embedding, got error {value}"
            assert value.shape == (1, 384)
            np.testing.assert_allclose(value[0], _reference(server, model, ids), atol=1e-4,
                                       err_msg=name)
        else:
            assert kind == "error", f"{name}: expected an error, got an embedding"
            assert expected_error.lower() in value.lower(), f"{name}: {value}"
    assert served, "no valid request was served"


def test_all_models_ready(server):
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        for model in (*SHIPPED_MODELS, *BLS_MODELS):
            assert client.is_model_ready(model), model
    finally:
        client.close()


def test_each_model_logs_where_its_cost_estimate_comes_from(server):
    """Each model says at load where its cost estimate comes from: minilm_explicit (real
    MiniLM, here on the CPU, whose budget is 0 by default) keeps its profile's seed, the
    emulated device (it sleeps its profile) is not measured. The measuring itself is
    unit-tested in tests/unit/triton_backend; on a GPU gpu_bench.py shows it."""
    with open(server.log_path, errors="replace") as fh:
        log = fh.read()
    assert ("minilm_explicit: cost table: not measured (budget 0: calibration.cpu_budget_ms)"
            in log), log[-3000:]
    assert "emulated_explicit: cost table: not measured (EmulatedDevice" in log


@pytest.mark.parametrize("model", ["emulated_explicit", "minilm_explicit", *BLS_MODELS])
def test_http_concurrent_mix_of_valid_and_invalid(server, model):
    cases = _cases()

    def one(case):
        _, ids, dtype, sla, _ = case
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            result = client.infer(model, _inputs(httpclient, ids, dtype, sla))
            return ("ok", result.as_numpy("EMBEDDING"))
        except InferenceServerException as exc:
            return ("error", str(exc))
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        outcomes = list(pool.map(one, cases))
    _check_outcomes(server, model, cases, outcomes)


@pytest.mark.parametrize("model", ["emulated_explicit", "minilm_explicit"])
def test_grpc_concurrent_mix_each_request_answered_exactly_once(server, model):
    cases = _cases()
    results = Collector()
    before = triton_counts(server.metrics_url, model)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for i, (_, ids, dtype, sla, _) in enumerate(cases):
            client.async_infer(model, _inputs(grpcclient, ids, dtype, sla), results.callback(i),
                               client_timeout=60)
        results.wait(len(cases))  # one callback each (and no second within 0.5 s)
    finally:
        client.close()
    # The server's side of "exactly one answer each": Triton counts every request that
    # reached the model once, when it is released (an error the model answered counts as
    # a success there); a duplicate would show as one more. Triton refuses a wrong
    # datatype and a wrong rank itself, before the model: those it does not count.
    reached = len(cases) - sum(1 for name, *_ in cases if name in ("wrong-dtype", "wrong-rank"))

    def counted() -> float:
        delta = triton_counts(server.metrics_url, model) - before
        return delta.success + delta.failure
    eventually(lambda: counted() >= reached, what=f"Triton counted {reached} answers")
    stays(lambda: counted() == reached, 0.5, what="no request of the mix answered twice")
    outcomes = []
    for i in range(len(cases)):
        [(result, error)] = results.calls[i]
        outcomes.append(("error", str(error)) if error else ("ok", result.as_numpy("EMBEDDING")))
    _check_outcomes(server, model, cases, outcomes)


def test_grpc_sla_request_parameter(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    ids = _ids(12)
    try:
        ok = client.infer("emulated_explicit", _inputs(grpcclient, ids, np.int64, None),
                          parameters={"sla_ms": 60000})
        np.testing.assert_allclose(ok.as_numpy("EMBEDDING")[0], deterministic_embedding(ids),
                                   atol=1e-6)
        agreeing = client.infer("emulated_explicit", _inputs(grpcclient, ids, np.int64, 60000.0),
                                parameters={"sla_ms": 60000})
        assert agreeing.as_numpy("EMBEDDING").shape == (1, 384)
        for params, needle in (({"sla_ms": "fast"}, "sla_ms"), ({"sla_ms": -1}, "sla_ms")):
            with pytest.raises(InferenceServerException, match=needle) as err:
                client.infer("emulated_explicit", _inputs(grpcclient, ids, np.int64, None),
                             parameters=params)
            assert "INVALID_ARGUMENT" in str(err.value.status())
        with pytest.raises(InferenceServerException, match="disagree"):
            client.infer("emulated_explicit", _inputs(grpcclient, ids, np.int64, 50.0),
                         parameters={"sla_ms": 200})
    finally:
        client.close()


def _inner_counts(client, model: str) -> tuple[int, int]:
    """(inferences, executions) Triton has counted for ``model``: sequences and batches."""
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def test_batches_form_while_the_device_is_busy(server, gate_dir):
    """Requests that queue while the device is busy reach the inner model in batches:
    emulated_explicit_bls runs its batches on emulated_device through BLS, whose device is
    held (gate) by a first request while 63 more queue in Triton (its pending count says
    so). Released, they come over in one call and run in as few batches as the profile's
    batch size allows: Triton's own statistics of emulated_device count them."""
    model, inner = "emulated_explicit_bls", "emulated_device"
    gate = DeviceGate(gate_path(gate_dir, inner))
    ids = [_ids(int(n)) for n in RNG.integers(16, 64, size=64)]
    stats_client = httpclient.InferenceServerClient(server.http_url)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results = Collector()
    try:
        before = _inner_counts(stats_client, inner)
        held = gate.held()
        with gate.closed():
            client.async_infer(model, _inputs(grpcclient, ids[0], np.int64, 60000.0),
                               results.callback(0))
            gate.wait_held(held + 1)
            for i, seq in enumerate(ids[1:], start=1):
                client.async_infer(model, _inputs(grpcclient, seq, np.int64, 60000.0),
                                   results.callback(i))
            wait_pending(server.metrics_url, model, len(ids) - 1)
        results.wait(len(ids))
        after = _inner_counts(stats_client, inner)
    finally:
        gate.open()
        client.close()
        stats_client.close()
    for i, seq in enumerate(ids):
        result, error = results.calls[i][0]
        assert error is None, f"request {i}: {error}"
        np.testing.assert_allclose(result.as_numpy("EMBEDDING")[0], deterministic_embedding(seq),
                                   atol=1e-6)
    sequences, batches = after[0] - before[0], after[1] - before[1]
    assert sequences == len(ids)
    max_batch = load_profile_dir(os.path.join(server.model_repository, "emulated_explicit",
                                              "profiles"))["t4"].scheduler.max_batch_size
    # The blocker alone, then the 63 in full batches (FIFO in the safe zone: conftest)
    assert batches <= 1 + math.ceil((len(ids) - 1) / max_batch), (
        f"{batches} batches for {len(ids)} sequences queued together: the queue did not batch")


def test_infeasible_deadline_is_refused_at_once(server):
    """A 1 ms SLA cannot be met even alone on the emulated t4 (batch-1 cost >= 1.2 ms): the
    request is refused with UNAVAILABLE and the reason, while a feasible one is served."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="deadline infeasible") as err:
            client.infer("emulated_explicit", _inputs(grpcclient, _ids(8), np.int64, 1.0))
        assert "UNAVAILABLE" in str(err.value.status())
        # The documented hint (docs/reliability.md, what a client sees for each refusal).
        assert re.search(r"; retry after \d+ ms", str(err.value)), str(err.value)
        ok = client.infer("emulated_explicit", _inputs(grpcclient, _ids(8), np.int64, 60000.0))
        assert ok.as_numpy("EMBEDDING").shape == (1, 384)
    finally:
        client.close()


def test_http_sla_request_parameter(server):
    """The same parameter contract over HTTP: valid, wrong type, disagreeing with SLA_MS."""
    client = httpclient.InferenceServerClient(server.http_url)
    ids = _ids(12)
    try:
        ok = client.infer("emulated_explicit", _inputs(httpclient, ids, np.int64, None),
                          parameters={"sla_ms": 60000})
        np.testing.assert_allclose(ok.as_numpy("EMBEDDING")[0], deterministic_embedding(ids),
                                   atol=1e-6)
        for params, sla, needle in (({"sla_ms": "fast"}, None, "sla_ms"),
                                    ({"sla_ms": True}, None, "sla_ms"),
                                    ({"sla_ms": 200}, 50.0, "disagree")):
            with pytest.raises(InferenceServerException, match=needle) as err:
                client.infer("emulated_explicit", _inputs(httpclient, ids, np.int64, sla),
                             parameters=params)
            assert "400" in str(err.value.status())
    finally:
        client.close()


def test_the_request_timeout_is_the_sla_when_none_is_given(server):
    """Triton's own per-request ``timeout`` (microseconds) serves as the SLA when neither
    SLA_MS nor sla_ms is sent: 1 ms is refused as infeasible, as an SLA of 1 ms is; with
    an explicit SLA the shorter of the two is the deadline (``decode_sla``): a 1 ms timeout
    beside a minute's SLA is refused for the timeout, and a minute's timeout leaves the
    request served. (A request handed over later than 1 ms after its arrival, on a loaded
    machine, is refused at hand-over instead, "request timed out"; behind a queue policy
    Triton's queue refuses it first, "Request timeout expired". Every such refusal is
    UNAVAILABLE.)"""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="deadline infeasible|"
                           "Request timeout expired|request timed out") as err:
            client.infer("emulated_explicit", _inputs(grpcclient, _ids(8), np.int64, None),
                         timeout=1000)
        assert "UNAVAILABLE" in str(err.value.status())
        try:
            ok = client.infer("emulated_explicit",
                              _inputs(grpcclient, _ids(8), np.int64, 60000.0), timeout=1000)
        except InferenceServerException as exc:
            # refused for the timeout: passed before hand-over (named), or the 1 ms
            # deadline it sets is out of reach (the SLA it names is the timeout's)
            assert ("Request timeout expired" in str(exc) or "request timed out" in str(exc)
                    or "SLA 1.0 ms" in str(exc)), f"the timeout was not the deadline: {exc}"
            assert "UNAVAILABLE" in str(exc.status())
        else:
            assert ok.as_numpy("EMBEDDING").shape == (1, 384)
        ok = client.infer("emulated_explicit", _inputs(grpcclient, _ids(8), np.int64, None),
                          timeout=60_000_000)
        assert ok.as_numpy("EMBEDDING").shape == (1, 384)
    finally:
        client.close()


def _non_loopback_address() -> str | None:
    """This machine's address on its default route (no packet is sent), or None."""
    import socket  # noqa: PLC0415

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routing only
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_the_server_answers_on_the_loopback_interface_only(server):
    """A launched server binds HTTP, gRPC and metrics to 127.0.0.1 (server_ops.launcher
    LOCAL_ADDRESS): reachable here, refused on the machine's network address."""
    import socket  # noqa: PLC0415

    outside = _non_loopback_address()
    if outside is None:
        pytest.skip("this machine has no network address besides loopback")
    for port in server.ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) == 0, port
        with socket.socket() as s:
            s.settimeout(2.0)
            assert s.connect_ex((outside, port)) != 0, f"port {port} open on {outside}"


def test_an_oversized_input_fails_alone(server):
    """A 64 MiB INPUT_IDS (8 Mi tokens) sent among 32 valid requests: INVALID_ARG for it,
    naming the limit, and the 32 served. Triton copies it into the stub's shared memory
    before the plugin sees it (docs/reliability.md says which front-end limit keeps it
    from getting that far)."""
    rng = np.random.default_rng(64)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results = Collector()
    huge_at = 16
    try:
        for i in range(33):
            if i == huge_at:
                ids = grpcclient.InferInput("INPUT_IDS", [1, 8 * 1024 * 1024], "INT64")
                ids.set_data_from_numpy(np.full((1, 8 * 1024 * 1024), 1000, dtype=np.int64))
                inputs = [ids]
            else:
                inputs = grpc_inputs(rng, 16)
            client.async_infer("emulated_explicit", inputs, results.callback(i),
                               client_timeout=120)
        results.wait(33, timeout=120)
    finally:
        client.close()
    for i in range(33):
        [(result, error)] = results.calls[i]
        if i == huge_at:
            assert error is not None and "512" in str(error), error
            assert "INVALID_ARGUMENT" in str(error.status()), error
        else:
            assert error is None, (i, error)
            assert result.as_numpy("EMBEDDING").shape == (1, 384)
