"""Faults against a real server: a failing batch, a failing scheduler step, client
cancellation, unloading with requests queued, and a model with a bad profile.

A second server (explicit model control) runs a copy of emulated_explicit with the test
hooks switched on: fault tokens, and a device gate (tests/integration/gates.py) that holds
the EMULATED device so that what a test sends next queues for certain. Nothing here waits a
fixed time: counts are awaited (``eventually``) and then asserted exactly.
"""

from __future__ import annotations

import os
import re
import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sidecar.triton_metrics import fetch_url, model_sample_sum
from tests.conftest import SHIPPED_REPOSITORY
from tests.eventually import eventually, stays
from tests.integration.collector import Collector
from triton_backend.metric_catalog import HISTOGRAM_PUBLISH_PERIOD_S
from triton_backend.model_settings import CANCEL_CHECK_MIN_WAIT_S
from tests.integration.gates import DeviceGate, TritonCounts, triton_counts, wait_pending

pytestmark = pytest.mark.integration
MODEL = "faulty_explicit"
BOUNDED = "bounded_explicit"  # the plugin's queue bound 4, its own device gate
DEVICE_FAULT = 29998
LOOP_FAULT = 29997
DECODE_FAULT = 29996
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


FAULT_TIME_SCALE = 10  # MODEL's EMULATED device, slowed


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("faults") / "repo")
    os.makedirs(repo)
    gate = os.path.join(str(tmp_path_factory.mktemp("faultgate")), f"{MODEL}.gate")
    _model(repo, MODEL, _param("hardware_profile", "t4") + _param("time_scale", FAULT_TIME_SCALE)
           + _param("fault_injection_token", DEVICE_FAULT) + _param("loop_fault_token", LOOP_FAULT)
           + _param("decode_fault_token", DECODE_FAULT)
           + _param("device_gate_file", gate))
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, "emulated_explicit", "profiles"),
                    os.path.join(repo, MODEL, "profiles"))
    bounded_gate = os.path.join(os.path.dirname(gate), f"{BOUNDED}.gate")
    _model(repo, BOUNDED, _param("hardware_profile", "t4") + _param("time_scale", 10)
           + _param("scheduler.max_queued_requests", 4) + _param("device_gate_file", bounded_gate))
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
        "--model-control-mode=explicit", f"--load-model={MODEL}", f"--load-model={BOUNDED}"))
    srv.gate = DeviceGate(gate)
    srv.bounded_gate = DeviceGate(bounded_gate)
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


def _settled_metric(server, name: str) -> float:
    """The model's series ``name`` once it has stayed put for a histogram publish period:
    the plugin sends its histograms once per HISTOGRAM_PUBLISH_PERIOD_S, so a value read
    sooner can still lack batches an earlier test ran."""
    def steady() -> tuple[float]:
        value = _metric(server, name)
        stays(lambda: _metric(server, name) == value, HISTOGRAM_PUBLISH_PERIOD_S + 0.5,
              what=f"{name} unchanged")
        return (value,)  # truthy, 0 included
    return eventually(steady, what=f"{name} settled")[0]


def _await_metric(server, name: str, value: float) -> None:
    """The model's counter ``name`` reaches ``value`` (published once per control period,
    from a thread a loaded machine may run late) and stays there for a few periods."""
    eventually(lambda: _metric(server, name) == value, what=f"{name} == {value:g}")
    stays(lambda: _metric(server, name) == value, 0.5, what=f"{name} == {value:g}")


def _log(server, since: int = 0) -> str:
    with open(server.log_path, errors="replace") as fh:
        fh.seek(since)
        return fh.read()


def _log_size(server) -> int:
    return os.path.getsize(server.log_path)


def _verbose_log(server, level: int) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        client.update_log_settings({"log_verbose_level": level})
    finally:
        client.close()


def test_failed_batch_fails_its_requests_and_the_loop_goes_on(fault_server):
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    try:
        failures = _metric(fault_server, "explicit_batching_batch_failures_total")
        with pytest.raises(InferenceServerException, match="injected device fault") as err:
            client.infer(MODEL, _inputs(_ids(token=DEVICE_FAULT)))
        assert "INTERNAL" in str(err.value.status())
        ok = client.infer(MODEL, _inputs(_ids()))
        assert ok.as_numpy("EMBEDDING").shape == (1, 384)
        _await_metric(fault_server, "explicit_batching_batch_failures_total", failures + 1)
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
        _await_metric(fault_server, "explicit_batching_loop_errors_total", errors + 1)
    finally:
        client.close()


def test_cancelled_requests_leave_the_queue_uncomputed(fault_server):
    """A request its client cancels while it queues is never computed; its neighbours are.

    The device is held (gate) by one blocker request, 16 requests queue behind it in
    Triton's queue (Triton's pending count says so), the client cancels every other one,
    and the server's own log shows it received the 8 cancellations, all before the gate
    opens. Then the counts are exact: the device computed the blocker and the 8 kept
    requests and nothing else (the plugin's batch sizes); the 8 cancelled ones were
    answered without compute, by Triton's queue (failure reason CANCELED) or by the plugin
    (its cancelled counter); Triton counted each of the 17 once."""
    gate, url = fault_server.gate, fault_server.metrics_url
    cancelled_counter = "explicit_batching_cancelled_requests_total"
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    results = Collector()
    try:
        before, plugin_before = triton_counts(url, MODEL), _metric(fault_server, cancelled_counter)
        computed_before = _settled_metric(fault_server, "explicit_batching_batch_size_sum")
        held = gate.held()
        with gate.closed():
            client.async_infer(MODEL, _inputs(_ids()), results.callback(0))
            gate.wait_held(held + 1)  # the blocker is on the device: the rest must queue
            sent_at = time.monotonic()
            contexts = {i: client.async_infer(MODEL, _inputs(_ids()), results.callback(i))
                        for i in range(1, 17)}
            wait_pending(url, MODEL, 16)
            _verbose_log(fault_server, 1)  # the gRPC frontend logs each cancellation it gets
            try:
                log_from = _log_size(fault_server)
                cancelled = [i for i in contexts if i % 2 == 0]
                for i in cancelled:
                    contexts[i].cancel()
                eventually(lambda: _log(fault_server, log_from).count("Issuing cancellation for")
                           >= len(cancelled),
                           what=f"the server received the {len(cancelled)} cancellations")
            finally:
                _verbose_log(fault_server, 0)
            # The plugin asks only requests that waited CANCEL_CHECK_MIN_WAIT_S, times the
            # emulated device's time scale (a round trip each; runner.py): they wait that
            # long before the device frees.
            time.sleep(max(0.0, sent_at + CANCEL_CHECK_MIN_WAIT_S * FAULT_TIME_SCALE
                           - time.monotonic()))
        results.wait(17)
        errors = {i: err for i, [(_, err)] in results.calls.items() if err is not None}
        assert sorted(errors) == cancelled, errors  # the client sees exactly what it cancelled
        kept = 17 - len(cancelled)  # with the blocker
        # Triton counts each request once when it is released: an answer the model made,
        # an error included, as a success; one its queue cancelled as a failure (CANCELED).

        def all_counted() -> TritonCounts | None:
            delta = triton_counts(url, MODEL) - before
            return delta if delta.success + delta.failure >= 17 else None
        delta = eventually(all_counted, what="Triton counted all 17 requests")
        # What the device computed: every sequence of the batches the plugin ran (its
        # histograms go once per HISTOGRAM_PUBLISH_PERIOD_S), and what was answered
        # without compute.
        computed = "explicit_batching_batch_size_sum"

        def outcome() -> tuple[float, float]:
            return (_metric(fault_server, computed) - computed_before,
                    (triton_counts(url, MODEL) - before).canceled
                    + _metric(fault_server, cancelled_counter) - plugin_before)
        eventually(lambda: outcome() == (kept, len(cancelled)),
                   what=f"{kept} computed and {len(cancelled)} answered uncomputed")
        stays(lambda: outcome() == (kept, len(cancelled)), 0.5,
              what="nothing computed or counted twice")
        assert delta.success + delta.failure == 17, delta
        assert delta.pending == 0, delta
    finally:
        gate.open()
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
    """Unloading while requests queue answers each of them exactly once, none INTERNAL.
    The gate makes "queued" certain: a blocker on the held device and 39 requests pending in
    Triton when the unload begins (Triton's unload returns at once; the gate then opens)."""
    gate = fault_server.gate
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    try:
        results = Collector()
        held = gate.held()
        with gate.closed():
            client.async_infer(MODEL, _inputs(_ids(512)), results.callback(0))
            gate.wait_held(held + 1)
            for i in range(1, 40):
                client.async_infer(MODEL, _inputs(_ids(512)), results.callback(i))
            wait_pending(fault_server.metrics_url, MODEL, 39)
            log_from = _log_size(fault_server)
            client.unload_model(MODEL)
        results.wait(40)
        codes = {str(err.status()) if err else "OK" for [(_, err)] in results.calls.values()}
        assert codes <= {"OK", "StatusCode.UNAVAILABLE"}, codes
        # finalize() ran to its end: its last act is the per-thread CPU account
        # (scripts/host_ledger.py reads it).
        eventually(lambda: f"{MODEL}: unloading; thread CPU s: execute="
                   in _log(fault_server, log_from), what="the unload account in the log")
        client.load_model(MODEL)
        assert client.is_model_ready(MODEL)
    finally:
        gate.open()
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


def test_a_hung_batch_is_answered_internal_and_the_model_serves_again(fault_server):
    """The device held past the watchdog's bound (the shipped floor, 5 s, or 10x the batch's
    estimate): its requests are answered INTERNAL naming the watchdog while the executor
    still has not returned, hung_batches_total counts it once, and once the device lets go
    the model serves again (docs/reliability.md)."""
    gate = fault_server.gate
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    results = Collector()
    try:
        hung = _metric(fault_server, "explicit_batching_hung_batches_total")
        held = gate.held()
        with gate.closed():
            client.async_infer(MODEL, _inputs(_ids()), results.callback(0))
            gate.wait_held(held + 1)
            results.wait(1, timeout=60)  # answered while the device is still held
        for [(_, error)] in results.calls.values():
            assert error is not None and "watchdog" in str(error), error
            assert "INTERNAL" in str(error.status())
        _await_metric(fault_server, "explicit_batching_hung_batches_total", hung + 1)
        ok = client.infer(MODEL, _inputs(_ids()))
        assert ok.as_numpy("EMBEDDING").shape == (1, 384)
    finally:
        gate.open()
        client.close()


def test_a_request_whose_decode_raises_fails_alone_on_a_real_server(fault_server):
    """31 valid requests and one whose decode raises (the test hook decode_fault_token),
    all in flight at once: 31 embeddings, one INTERNAL naming the error's type."""
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    results = Collector()
    bad = 11
    try:
        for i in range(32):
            token = DECODE_FAULT if i == bad else None
            client.async_infer(MODEL, _inputs(_ids(token=token)), results.callback(i))
        results.wait(32)
    finally:
        client.close()
    for i in range(32):
        [(result, error)] = results.calls[i]
        if i == bad:
            assert error is not None and "INTERNAL" in str(error.status()), error
            assert "RuntimeError" in str(error) and "could not decode" in str(error)
        else:
            assert error is None, (i, error)
            assert result.as_numpy("EMBEDDING").shape == (1, 384)


def test_a_queue_full_refusal_carries_its_code_and_hint_on_a_real_server(fault_server):
    """The plugin's queue bound (scheduler.max_queued_requests 4): with the device held by a
    first request, 40 more queue in Triton (its pending count says so); handed over at
    once, more than a batch, 4 are queued and 36 refused UNAVAILABLE 'queue full ...;
    retry after N ms' (docs/reliability.md). Every request has its one answer."""
    gate = fault_server.bounded_gate
    client = grpcclient.InferenceServerClient(fault_server.grpc_url)
    results = Collector()
    try:
        held = gate.held()
        with gate.closed():
            client.async_infer(BOUNDED, _inputs(_ids()), results.callback(0))
            gate.wait_held(held + 1)
            for i in range(1, 41):
                client.async_infer(BOUNDED, _inputs(_ids()), results.callback(i))
            wait_pending(fault_server.metrics_url, BOUNDED, 40)
        results.wait(41)
    finally:
        gate.open()
        client.close()
    errors = [error for [(_, error)] in results.calls.values() if error is not None]
    assert len(errors) == 36 and results.calls[0][0][1] is None
    for error in errors:
        assert "UNAVAILABLE" in str(error.status()) and "queue full" in str(error), error
        assert re.search(r"max_queued_requests=4 requests; retry after \d+ ms", str(error)), error
