"""Faults against a real server: a failing batch, a failing scheduler step, client
cancellation, unloading with requests queued, and a model with a bad profile.

A second server (explicit model control) runs a copy of emulated_explicit with the test
hooks switched on and the EMULATED device slowed 10x, so requests really queue.
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sidecar.triton_metrics import fetch_url, model_sample_sum, read_samples
from tests.conftest import SHIPPED_REPOSITORY
from tests.integration.collector import Collector

pytestmark = pytest.mark.integration
MODEL = "faulty_explicit"
DEVICE_FAULT = 29998
LOOP_FAULT = 29997
RNG = np.random.default_rng(9)


def _model(repo: str, name: str, extra: str, profile_dir: str = "faulty_explicit/profiles"):
    os.makedirs(os.path.join(repo, name, "1"))
    shutil.copy(os.path.join(SHIPPED_REPOSITORY, "emulated_explicit", "1", "model.py"),
                os.path.join(repo, name, "1"))
    with open(os.path.join(SHIPPED_REPOSITORY, "emulated_explicit", "config.pbtxt")) as fh:
        config = fh.read().replace('name: "emulated_explicit"', f'name: "{name}"')
    config = config.replace('parameters { key: "hardware_profile" value: { string_value: "t4" } }',
                            "")
    config += (f'parameters {{ key: "profile_dir" value: {{ string_value: "{profile_dir}" }} }}\n'
               + extra)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as fh:
        fh.write(config)


def _param(key: str, value) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory):
    from triton_backend.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("faults") / "repo")
    os.makedirs(repo)
    _model(repo, MODEL, _param("hardware_profile", "t4") + _param("time_scale", 10)
           + _param("fault_injection_token", DEVICE_FAULT) + _param("loop_fault_token", LOOP_FAULT))
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, "emulated_explicit", "profiles"),
                    os.path.join(repo, MODEL, "profiles"))
    _model(repo, "unknown_profile_explicit", _param("hardware_profile", "v100"))
    bad_dir = os.path.join(repo, "bad_profile_explicit", "profiles")
    _model(repo, "bad_profile_explicit", _param("hardware_profile", "t4"),
           profile_dir="bad_profile_explicit/profiles")
    os.makedirs(bad_dir)
    with open(os.path.join(bad_dir, "t4.yaml"), "w") as fh:
        fh.write("name: t4\nscheduler:\n  max_batch_size: -3\n")
    _model(repo, "escaping_profile_explicit", _param("hardware_profile", "t4"),
           profile_dir="../../../etc")
    log = str(tmp_path_factory.mktemp("faultlogs") / "tritonserver.log")
    srv = TritonServer(repo, log_path=log, exit_timeout_s=15, extra_args=(
        "--model-control-mode=explicit", f"--load-model={MODEL}"))
    with srv:
        yield srv
    srv.log = log


def _inputs(ids, sla_ms=60000.0):
    ids_in = grpcclient.InferInput("INPUT_IDS", [1, len(ids)], "INT64")
    ids_in.set_data_from_numpy(np.asarray(ids, dtype=np.int64).reshape(1, -1))
    sla = grpcclient.InferInput("SLA_MS", [1, 1], "FP32")
    sla.set_data_from_numpy(np.array([[sla_ms]], dtype=np.float32))
    return [ids_in, sla]


def _ids(n=16, token=None):
    ids = [101, *RNG.integers(1000, 29000, size=n - 2), 102]
    if token is not None:
        ids[1] = token
    return ids


def _metric(server, name: str) -> float:
    """The model's counter ``name`` (summed over its instances: one here)."""
    return model_sample_sum(fetch_url(server.metrics_url, 5.0), name, MODEL)


def _cancellations(server) -> float:
    """Cancelled requests answered without being computed: by the plugin (its counter) or,
    for those still waiting in Triton's queue in front of intake hold, by Triton itself
    (its failure counter, reason CANCELED)."""
    triton = sum(s.value for s in read_samples(fetch_url(server.metrics_url, 5))
                 if s.name.startswith("nv_inference_request_failure")
                 and s.labels.get("model") == MODEL and s.labels.get("reason") == "CANCELED")
    return _metric(server, "explicit_batching_cancelled_requests_total") + triton


def _log(server) -> str:
    with open(server.log_path, errors="replace") as fh:
        return fh.read()


def test_failed_batch_fails_its_requests_and_the_loop_goes_on(fault_server):
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    try:
        failures = _metric(fault_server, "explicit_batching_batch_failures_total")
        with pytest.raises(InferenceServerException, match="injected device fault") as err:
            client.infer(MODEL, _inputs(_ids(token=DEVICE_FAULT)))
        assert "INTERNAL" in str(err.value.status())
        ok = client.infer(MODEL, _inputs(_ids()))
        assert ok.as_numpy("EMBEDDING").shape == (1, 384)
        time.sleep(0.3)  # metrics flush once per control period
        assert _metric(fault_server, "explicit_batching_batch_failures_total") == failures + 1
    finally:
        client.close()


def test_scheduler_step_failure_strands_nothing(fault_server):
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    try:
        errors = _metric(fault_server, "explicit_batching_loop_errors_total")
        with pytest.raises(InferenceServerException, match="scheduler loop failed") as err:
            client.infer(MODEL, _inputs(_ids(token=LOOP_FAULT)))
        assert "INTERNAL" in str(err.value.status())
        # the supervised loop restarted: the queue is served again
        results = Collector()
        for i in range(8):
            client.async_infer(MODEL, _inputs(_ids()), results.callback(i))
        results.wait(8)
        assert all(err is None for [(_, err)] in results.calls.values())
        time.sleep(0.3)
        assert _metric(fault_server, "explicit_batching_loop_errors_total") == errors + 1
    finally:
        client.close()


def test_cancelled_requests_leave_the_queue_uncomputed(fault_server):
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    try:
        before = _cancellations(fault_server)
        # 48 x 512 tokens: 3 batches of 16 at ~0.5 s each on the slowed device.
        results = Collector()
        contexts = [client.async_infer(MODEL, _inputs(_ids(512)), results.callback(i))
                    for i in range(48)]
        time.sleep(0.2)
        for ctx in contexts[32:]:  # the third batch is still queued
            ctx.cancel()
        results.wait(48)
        cancelled = [i for i, [(_, err)] in results.calls.items() if err is not None]
        assert set(cancelled) == set(range(32, 48))
        deadline = time.monotonic() + 30  # a hang guard: the counter is set once per sweep
        while _cancellations(fault_server) < before + 16:
            assert time.monotonic() < deadline, ("30 s without the 16 cancellations counted: "
                                                 "computed, or not counted")
            time.sleep(0.2)
    finally:
        client.close()


def test_bad_profiles_fail_the_load_with_file_key_and_value(fault_server):
    client = httpclient.InferenceServerClient(fault_server.http_url)
    try:
        with pytest.raises(InferenceServerException) as err:
            client.load_model("bad_profile_explicit")
        message = str(err.value)
        assert "t4.yaml" in message and "scheduler.max_batch_size" in message and "-3" in message
        assert not client.is_model_ready("bad_profile_explicit")
        with pytest.raises(InferenceServerException, match="hardware_profile names profile 'v100'"):
            client.load_model("unknown_profile_explicit")
        assert not client.is_model_ready("unknown_profile_explicit")
        # nothing in a config can make the model read outside the model repository
        with pytest.raises(InferenceServerException, match="leaves the model repository"):
            client.load_model("escaping_profile_explicit")
        assert client.is_model_ready(MODEL)  # the rest keeps serving
    finally:
        client.close()


def test_unload_with_requests_queued_answers_every_request(fault_server):
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    try:
        results = Collector()
        for i in range(40):
            client.async_infer(MODEL, _inputs(_ids(512)), results.callback(i))
        time.sleep(0.2)
        started = time.monotonic()
        client.unload_model(MODEL)
        results.wait(40)
        # A hang guard, not a speed target (the answers themselves are the behaviour).
        took_s = time.monotonic() - started
        assert took_s < 60, f"the unload took {took_s:.0f} s to answer the queued requests"
        codes = {str(err.status()) if err else "OK" for [(_, err)] in results.calls.values()}
        assert codes <= {"OK", "StatusCode.UNAVAILABLE"}, codes
        # finalize() ran to its end: its last act is the per-thread CPU account
        # (scripts/host_ledger.py reads it).
        deadline = time.monotonic() + 30
        while f"{MODEL}: unloading; thread CPU s: execute=" not in _log(fault_server):
            assert time.monotonic() < deadline, "30 s without the unload account in the log"
            time.sleep(0.2)
        client.load_model(MODEL)
        assert client.is_model_ready(MODEL)
    finally:
        client.close()


def test_reload_model_loads_a_fresh_model_that_serves(fault_server):
    # The benchmarks' way to start a run from fresh controllers (TritonServer.reload_model).
    fault_server.reload_model(MODEL)
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    try:
        assert client.is_model_ready(MODEL)
        assert client.infer(MODEL, _inputs(_ids())).as_numpy("EMBEDDING").shape == (1, 384)
    finally:
        client.close()
