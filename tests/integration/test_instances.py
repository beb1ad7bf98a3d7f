"""instance_group count 2 on a real server: every request answered once, the control
metrics published per instance (label model_instance), and how Triton spreads the work
over the two instances under intake hold (a call holds its instance until its requests
are answered, so the next batch goes to the other) and release (execute() returns at once)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient

from benchmarks.repository import copy_model
from sidecar.triton_metrics import fetch_url, read_samples
from tests.eventually import eventually
from tests.integration.gates import DeviceGate
from server_ops.intake_config import release_config
from triton_backend.metric_catalog import PREFIX

pytestmark = pytest.mark.integration
HOLD, RELEASE = "pair_hold", "pair_release"
REQUESTS = 96


def _two_instances(model) -> None:
    model.instance_group[0].count = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    base = tmp_path_factory.mktemp("instances")
    repo = str(base / "repo")
    os.makedirs(repo)
    gates = {}
    for name, writer in ((HOLD, None), (RELEASE, release_config)):
        # one gate file for both instances of a model: closed, it holds each one's device
        gates[name] = str(base / f"{name}.gate")
        copy_model("emulated_explicit", repo, name, text_writer=writer, edit=_two_instances,
                   params={"time_scale": "10", "profile_dir": f"{name}/profiles",
                           "hardware_profile": "t4", "device_gate_file": gates[name]})
    with TritonServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=10) as srv:
        srv.gates = {name: DeviceGate(path) for name, path in gates.items()}
        yield srv


def _infer(server, model: str, i: int) -> tuple[int, tuple]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120.0)
    try:
        ids = np.arange(1000 + i, 1000 + i + 8 + i % 24, dtype=np.int64).reshape(1, -1)
        inputs = [httpclient.InferInput("INPUT_IDS", list(ids.shape), "INT64"),
                  httpclient.InferInput("SLA_MS", [1, 1], "FP32")]
        inputs[0].set_data_from_numpy(ids)
        inputs[1].set_data_from_numpy(np.array([[60_000.0]], dtype=np.float32))
        return i, client.infer(model, inputs).as_numpy("EMBEDDING").shape
    finally:
        client.close()


def _batches_by_instance(server, model: str) -> dict[str, float]:
    return {s.labels["model_instance"]: s.value
            for s in read_samples(fetch_url(server.metrics_url, 10.0))
            if s.name == PREFIX + "batch_size_count" and s.labels.get("model") == model}


def test_a_held_call_sends_the_next_request_to_the_other_instance(server):
    """intake hold: a call holds its instance until its requests are answered, so Triton
    hands the next request to the other one. Both devices held (one gate file for the
    two): the first request holds one instance, and the second is held too - by the other
    instance, since the first is busy - before either is answered."""
    gate = server.gates[HOLD]
    held = gate.held()
    with ThreadPoolExecutor(max_workers=2) as pool, gate.closed():
        first = pool.submit(_infer, server, HOLD, 0)
        gate.wait_held(held + 1)
        second = pool.submit(_infer, server, HOLD, 1)
        gate.wait_held(held + 2)
        assert not first.done() and not second.done()
    assert first.result()[1] == second.result()[1] == (1, 384)

    def each_ran_a_batch() -> bool:  # published once per control period
        counts = _batches_by_instance(server, HOLD)
        return len(counts) == 2 and all(counts.values())
    eventually(each_ran_a_batch, what="a batch counted on each instance")


@pytest.mark.parametrize("model", [HOLD, RELEASE])
def test_two_instances_answer_every_request_once_and_publish_their_own_series(server, model):
    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(lambda i: _infer(server, model, i), range(REQUESTS)))
    assert sorted(i for i, _ in results) == list(range(REQUESTS))
    assert all(shape == (1, 384) for _, shape in results)
    eventually(lambda: set(_batches_by_instance(server, model)) == {
        f"{model}_0_0", f"{model}_0_1"}, what="one batch-size series for each instance")
    print(f"{model}: batches by instance {_batches_by_instance(server, model)}")
