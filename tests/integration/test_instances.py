"""instance_group count 2 on a real server: every request answered once, the control
metrics published per instance (label model_instance), and how Triton spreads the work
over the two instances under intake hold (a call holds its instance until its requests
are answered, so the next batch goes to the other) and release (execute() returns at once)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient

from benchmarks.repository import copy_model
from sidecar.triton_metrics import fetch_url, read_samples
from triton_backend.intake_config import release_config
from triton_backend.metric_catalog import PREFIX

pytestmark = pytest.mark.integration
HOLD, RELEASE = "pair_hold", "pair_release"
REQUESTS = 96
HANG_GUARD_S = 30.0


def _two_instances(model) -> None:
    model.instance_group[0].count = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from triton_backend.launcher import TritonServer

    base = tmp_path_factory.mktemp("instances")
    repo = str(base / "repo")
    os.makedirs(repo)
    for name, writer in ((HOLD, None), (RELEASE, release_config)):
        # time scale 10: a batch runs long enough for the next one to meet a busy instance
        copy_model("emulated_explicit", repo, name, text_writer=writer, edit=_two_instances,
                   params={"time_scale": "10", "profile_dir": f"{name}/profiles",
                           "hardware_profile": "t4"})
    with TritonServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=10) as srv:
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


@pytest.mark.parametrize("model", [HOLD, RELEASE])
def test_two_instances_answer_every_request_once_and_publish_their_own_series(server, model):
    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(lambda i: _infer(server, model, i), range(REQUESTS)))
    assert sorted(i for i, _ in results) == list(range(REQUESTS))
    assert all(shape == (1, 384) for _, shape in results)
    by_instance = _batches_by_instance(server, model)
    assert set(by_instance) == {f"{model}_0_0", f"{model}_0_1"}  # one series each
    if model == HOLD:
        # Each call holds its instance: Triton hands the next batch to the other one. The
        # counts are published every control period: wait for them (hang guard 30 s).
        deadline = time.monotonic() + HANG_GUARD_S
        while not all(by_instance.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
            by_instance = _batches_by_instance(server, model)
        assert all(by_instance.values()), f"an instance ran no batch: {by_instance}"
    print(f"{model}: batches by instance {by_instance}")
