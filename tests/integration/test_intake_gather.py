"""``intake: gather`` against a real server: Triton's batcher in front, execute() parked
while a batch runs so arrivals come over in one call. Every request gets exactly one
response with the right output (byte-identical to ``intake: release``), 200 concurrent
requests lose nothing and really share calls, an unload with requests queued answers all,
and a bad input gets an error naming the problem while the rest are served."""

from __future__ import annotations

import json
import os
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.models import emulated_copy
from triton_backend.executors import deterministic_embedding
from triton_backend.intake_config import gather_config, release_config
from tests.integration.collector import Collector

pytestmark = pytest.mark.integration
GATHER = "gather_explicit"
RELEASE = "release_explicit"
SLOW = "slow_gather_explicit"  # time scale 10: requests really queue in Triton
RNG = np.random.default_rng(11)


def _model(repo: str, name: str, to_intake, time_scale: float) -> None:
    emulated_copy(repo, name, to_intake, time_scale,
                  'parameters { key: "control.infeasible_policy" value: '
                  '{ string_value: "serve_late" } }\n')


@pytest.fixture(scope="module")
def gather_server(tmp_path_factory):
    from triton_backend.launcher import TritonServer

    base = tmp_path_factory.mktemp("gather")
    repo = str(base / "repo")
    os.makedirs(repo)
    _model(repo, GATHER, gather_config, 1)
    _model(repo, RELEASE, release_config, 1)
    _model(repo, SLOW, gather_config, 10)
    srv = TritonServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=15,
                       extra_args=("--model-control-mode=explicit", f"--load-model={GATHER}",
                                   f"--load-model={RELEASE}", f"--load-model={SLOW}"))
    with srv:
        yield srv


def _ids(n: int) -> np.ndarray:
    return np.array([101, *RNG.integers(1000, 29000, n - 2), 102], dtype=np.int64)


def _inputs(ids: np.ndarray, sla_ms: float = 60000.0):
    ids_in = grpcclient.InferInput("INPUT_IDS", [1, len(ids)], "INT64")
    ids_in.set_data_from_numpy(ids.reshape(1, -1))
    sla = grpcclient.InferInput("SLA_MS", [1, 1], "FP32")
    sla.set_data_from_numpy(np.array([[sla_ms]], dtype=np.float32))
    return [ids_in, sla]


def _send_all(client, model: str, sequences, **kw) -> Collector:
    results = Collector()
    for i, ids in enumerate(sequences):
        client.async_infer(model, _inputs(ids, **kw), results.callback(i))
    results.wait(len(sequences))
    return results


def _executions(server, model: str) -> tuple[int, int]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats",
                                timeout=5) as resp:
        stats = json.load(resp)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"]), int(stats["execution_count"])


def test_gather_answers_each_request_once_byte_identical_to_release(gather_server):
    sequences = [_ids(int(n)) for n in RNG.integers(8, 200, 24)]
    client = grpcclient.InferenceServerClient(gather_server.grpc_url)
    try:
        outputs = {}
        for model in (GATHER, RELEASE):
            results = _send_all(client, model, sequences)
            assert all(err is None for [(_, err)] in results.calls.values())
            outputs[model] = [results.calls[i][0][0].as_numpy("EMBEDDING").tobytes()
                              for i in range(len(sequences))]
    finally:
        client.close()
    assert outputs[GATHER] == outputs[RELEASE]
    for ids, got in zip(sequences, outputs[GATHER]):
        assert got == deterministic_embedding(ids).reshape(1, -1).astype(np.float32).tobytes()


def test_gather_200_concurrent_requests_lose_nothing_and_share_calls(gather_server):
    sequences = [_ids(int(n)) for n in RNG.integers(8, 300, 200)]
    answered0, calls0 = _executions(gather_server, SLOW)
    client = grpcclient.InferenceServerClient(gather_server.grpc_url)
    try:
        results = _send_all(client, SLOW, sequences)
    finally:
        client.close()
    for i, ids in enumerate(sequences):
        [(result, err)] = results.calls[i]
        assert err is None, err
        assert np.array_equal(result.as_numpy("EMBEDDING")[0], deterministic_embedding(ids))
    answered, calls = _executions(gather_server, SLOW)
    assert answered - answered0 == 200
    # Arrivals queued in Triton while a batch ran came over together.
    assert calls - calls0 < 100, f"{calls - calls0} execute() calls for 200 requests"


def test_gather_bad_input_gets_an_error_naming_it_and_the_rest_are_served(gather_server):
    good = [_ids(64) for _ in range(30)]
    sequences = [*good[:15], np.array([101, 99999, 102], dtype=np.int64), *good[15:]]
    client = grpcclient.InferenceServerClient(gather_server.grpc_url)
    try:
        results = _send_all(client, SLOW, sequences)
    finally:
        client.close()
    [(_, err)] = results.calls[15]
    assert err is not None and "StatusCode.INVALID_ARGUMENT" in str(err.status())
    assert "token ids" in err.message() and "99999" in err.message()
    for i, ids in enumerate(sequences):
        if i != 15:
            [(result, err)] = results.calls[i]
            assert err is None, err
            assert np.array_equal(result.as_numpy("EMBEDDING")[0], deterministic_embedding(ids))


def test_gather_unload_with_requests_queued_answers_every_request(gather_server):
    client = grpcclient.InferenceServerClient(gather_server.grpc_url)
    try:
        results = Collector()
        for i in range(40):
            client.async_infer(SLOW, _inputs(_ids(512)), results.callback(i))
        time.sleep(0.2)
        started = time.monotonic()
        client.unload_model(SLOW)
        results.wait(40)
        # A hang guard, not a speed target (the answers themselves are the behaviour).
        took_s = time.monotonic() - started
        assert took_s < 60, f"the unload took {took_s:.0f} s to answer the queued requests"
        codes = {str(err.status()) if err else "OK" for [(_, err)] in results.calls.values()}
        assert codes <= {"OK", "StatusCode.UNAVAILABLE"}, codes
        client.load_model(SLOW)
        assert client.is_model_ready(SLOW)
    finally:
        client.close()
