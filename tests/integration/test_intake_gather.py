"""``intake: gather`` against a real server: Triton's batcher in front, execute() parked
while a batch runs so arrivals come over in one call. Every request gets exactly one
response with the right output (byte-identical to ``intake: release``), 200 concurrent
requests lose nothing and really share calls, an unload with requests queued answers all,
and a bad input gets an error naming the problem while the rest are served."""

from __future__ import annotations

import json
import os
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.eventually import eventually
from tests.integration.collector import Collector
from tests.integration.gates import DeviceGate, triton_counts
from tests.integration.models import emulated_copy
from triton_backend.executors import deterministic_embedding
from server_ops.intake_config import GATHER_MAX_HAND_OVER, gather_config, release_config

pytestmark = pytest.mark.integration
GATHER = "gather_explicit"
RELEASE = "release_explicit"
SLOW = "slow_gather_explicit"  # time scale 10: requests really queue in Triton
RNG = np.random.default_rng(11)


def _model(repo: str, name: str, to_intake, time_scale: float, gate: str = "") -> None:
    emulated_copy(repo, name, to_intake, time_scale,
                  'parameters { key: "control.infeasible_policy" value: '
                  '{ string_value: "serve_late" } }\n'
                  + (f'parameters {{ key: "device_gate_file" value: {{ string_value: "{gate}" }} }}\n'
                     if gate else ""))


@pytest.fixture(scope="module")
def gather_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    base = tmp_path_factory.mktemp("gather")
    repo = str(base / "repo")
    os.makedirs(repo)
    _model(repo, GATHER, gather_config, 1)
    _model(repo, RELEASE, release_config, 1)
    gate = str(base / f"{SLOW}.gate")
    _model(repo, SLOW, gather_config, 10, gate)
    srv = TritonServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=15,
                       extra_args=("--model-control-mode=explicit", f"--load-model={GATHER}",
                                   f"--load-model={RELEASE}", f"--load-model={SLOW}"))
    srv.gate = DeviceGate(gate)
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


def _send_behind_a_held_device(server, client, sequences) -> Collector:
    """Send ``sequences`` to SLOW while its device holds a first one (the gate); return
    once every one of them is in the server - handed to execute() calls that returned, or
    pending in Triton (a parked call returns within GATHER_PARK_MAX_S even while the
    device is held) - with the gate still closed. The caller opens it."""
    results = Collector()
    gate, url = server.gate, server.metrics_url
    before, held = triton_counts(url, SLOW), gate.held()
    gate.close()
    client.async_infer(SLOW, _inputs(sequences[0]), results.callback(0))
    gate.wait_held(held + 1)
    for i, ids in enumerate(sequences[1:], start=1):
        client.async_infer(SLOW, _inputs(ids), results.callback(i))

    def all_in() -> bool:
        delta = triton_counts(url, SLOW) - before
        return delta.inferences + delta.pending >= len(sequences)
    eventually(all_in, what=f"all {len(sequences)} requests in the server")
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
    """200 requests queue behind a held device; released, each is answered once with its
    own embedding, and those that queued together came over together: a call per 512
    (the hand-over bound) and one per park that timed out while the device was held, far
    from one a request."""
    sequences = [_ids(int(n)) for n in RNG.integers(8, 300, 200)]
    answered0, calls0 = _executions(gather_server, SLOW)
    client = grpcclient.InferenceServerClient(gather_server.grpc_url)
    try:
        results = _send_behind_a_held_device(gather_server, client, sequences)
        gather_server.gate.open()
        results.wait(len(sequences))
    finally:
        gather_server.gate.open()
        client.close()
    for i, ids in enumerate(sequences):
        [(result, err)] = results.calls[i]
        assert err is None, err
        assert np.array_equal(result.as_numpy("EMBEDDING")[0], deterministic_embedding(ids))
    answered, calls = _executions(gather_server, SLOW)
    assert answered - answered0 == 200
    assert calls - calls0 <= len(sequences) // 2, (
        f"{calls - calls0} execute() calls for {len(sequences)} requests queued together "
        f"(hand-over bound {GATHER_MAX_HAND_OVER})")


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
    """Unloading while 40 requests are in the server behind a held device answers each
    exactly once, none INTERNAL (Triton's unload returns at once; the gate opens then)."""
    client = grpcclient.InferenceServerClient(gather_server.grpc_url)
    try:
        results = _send_behind_a_held_device(gather_server, client,
                                             [_ids(512) for _ in range(40)])
        client.unload_model(SLOW)
        gather_server.gate.open()
        results.wait(40)
        codes = {str(err.status()) if err else "OK" for [(_, err)] in results.calls.values()}
        assert codes <= {"OK", "StatusCode.UNAVAILABLE"}, codes
        client.load_model(SLOW)
        assert client.is_model_ready(SLOW)
    finally:
        gather_server.gate.open()
        client.close()
