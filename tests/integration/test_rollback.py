"""Rollback (docs/rollback.md) on a real server: the plugin taken out of the path.

A client that sends its SLA as the ``sla_ms`` request parameter, or as Triton's per-request
``timeout``, is served by a native model unchanged: Triton passes request parameters to a
backend that ignores them and applies the timeout in its own queue. A client that sends the
``SLA_MS`` input tensor is refused by a model that does not declare it: that client must
change. Both ways out of the doc are run: pointing clients at the native model's name, and
keeping the public name while its folder holds the native config (a reload through the
key-restricted model-repository API), then back again. The EMULATED executor's embedding is
a function of the sequence, so "served the same" is an equality, not a shape check.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import SHIPPED_REPOSITORY

pytestmark = pytest.mark.integration
PUBLIC = "emulated_explicit"  # the name clients call: the plugin, until rolled back
NATIVE = "emulated_native"  # the same executor behind Triton's own dynamic batcher
KEY = "rollback-test-key-not-a-secret"
SLA_MS = 200.0
TIMEOUT_US = 10_000_000  # a deadline that a served request meets with room to spare
LENGTH = 12


@pytest.fixture(scope="module")
def rollback_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    root = tmp_path_factory.mktemp("rollback")
    repo = str(root / "model_repository")
    for name in (PUBLIC, NATIVE):
        shutil.copytree(os.path.join(SHIPPED_REPOSITORY, name), os.path.join(repo, name),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    srv = TritonServer(repo, log_path=str(root / "tritonserver.log"), exit_timeout_s=5,
                       admin_key=KEY, extra_args=("--model-control-mode=explicit",
                                                  f"--load-model={PUBLIC}",
                                                  f"--load-model={NATIVE}"))
    with srv:
        srv.repository = repo
        yield srv


@pytest.fixture(scope="module")
def client(rollback_server):
    c = grpcclient.InferenceServerClient(rollback_server.grpc_url)
    yield c
    c.close()


def _ids_array() -> np.ndarray:
    """One valid sequence, the same on every call."""
    rng = np.random.default_rng(7)
    return np.array([[101, *rng.integers(1000, 29000, LENGTH - 2), 102]], dtype=np.int64)


def _ids_only() -> list:
    ids = grpcclient.InferInput("INPUT_IDS", [1, LENGTH], "INT64")
    ids.set_data_from_numpy(_ids_array())
    return [ids]


def _ids_and_sla_tensor() -> list:
    sla = grpcclient.InferInput("SLA_MS", [1, 1], "FP32")
    sla.set_data_from_numpy(np.array([[SLA_MS]], dtype=np.float32))
    return [*_ids_only(), sla]


def _embedding(client, model: str, **channel) -> np.ndarray:
    return client.infer(model, _ids_only(), **channel).as_numpy("EMBEDDING")


def _sla_channels() -> dict[str, dict]:
    """The SLA channels a native model serves: the parameter, Triton's timeout, both."""
    return {"parameter": {"parameters": {"sla_ms": SLA_MS}},
            "timeout": {"timeout": TIMEOUT_US},
            "both": {"parameters": {"sla_ms": SLA_MS}, "timeout": TIMEOUT_US}}


def test_the_native_model_serves_sla_parameter_and_timeout_clients_as_the_plugin_does(client):
    reference = _embedding(client, PUBLIC, parameters={"sla_ms": SLA_MS})
    assert reference.shape == (1, 384)
    for channel, kwargs in _sla_channels().items():
        np.testing.assert_array_equal(_embedding(client, NATIVE, **kwargs), reference,
                                      err_msg=f"SLA as {channel}")


def test_the_sla_parameter_reaches_a_native_model_over_http_too(rollback_server, client):
    reference = _embedding(client, PUBLIC, parameters={"sla_ms": SLA_MS})
    http = httpclient.InferenceServerClient(rollback_server.http_url)
    try:
        ids = httpclient.InferInput("INPUT_IDS", [1, LENGTH], "INT64")
        ids.set_data_from_numpy(_ids_array())
        got = http.infer(NATIVE, [ids], parameters={"sla_ms": SLA_MS}, timeout=TIMEOUT_US)
        np.testing.assert_array_equal(got.as_numpy("EMBEDDING"), reference)
    finally:
        http.close()


def test_an_sla_tensor_client_is_refused_by_a_native_model_naming_the_input(client):
    with pytest.raises(InferenceServerException, match="SLA_MS"):
        client.infer(NATIVE, _ids_and_sla_tensor())


# The public name as an ensemble of one step over the native model: no model files copied.
ENSEMBLE_CONFIG = f"""name: "{PUBLIC}"
platform: "ensemble"
max_batch_size: 32
input [ {{ name: "INPUT_IDS" data_type: TYPE_INT64 dims: [ -1 ] }} ]
output [ {{ name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 384 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "{NATIVE}" model_version: -1
  input_map {{ key: "INPUT_IDS" value: "INPUT_IDS" }}
  output_map {{ key: "EMBEDDING" value: "EMBEDDING" }} }} ] }}
"""


def _native_config() -> str:
    with open(os.path.join(SHIPPED_REPOSITORY, NATIVE, "config.pbtxt")) as fh:
        return fh.read().replace(f'name: "{NATIVE}"', f'name: "{PUBLIC}"')


def _write_public(server, config: str, model_py_from: str) -> None:
    """The public folder's config and model.py (its profiles stay)."""
    folder = os.path.join(server.repository, PUBLIC)
    with open(os.path.join(folder, "config.pbtxt"), "w") as fh:
        fh.write(config)
    shutil.copy(os.path.join(SHIPPED_REPOSITORY, model_py_from, "1", "model.py"),
                os.path.join(folder, "1", "model.py"))


def _declares_sla_input(client) -> bool:
    config = client.get_model_config(PUBLIC).config
    return any(tensor.name == "SLA_MS" for tensor in config.input)


@pytest.mark.parametrize("replacement", ["native config", "ensemble"])
def test_the_public_name_rolls_back_and_forward_through_a_keyed_reload(
        rollback_server, client, replacement):
    reference = _embedding(client, PUBLIC, parameters={"sla_ms": SLA_MS})
    assert _declares_sla_input(client)
    with open(os.path.join(SHIPPED_REPOSITORY, PUBLIC, "config.pbtxt")) as fh:
        plugin_config = fh.read()
    config = _native_config() if replacement == "native config" else ENSEMBLE_CONFIG
    _write_public(rollback_server, config, NATIVE)
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            client.load_model(PUBLIC)  # a load runs code: it needs the key
        rollback_server.load_model(PUBLIC)  # the launcher sends its key
        assert not _declares_sla_input(client), "the public name still runs the plugin"
        for channel, kwargs in _sla_channels().items():
            np.testing.assert_array_equal(
                _embedding(client, PUBLIC, **kwargs), reference,
                err_msg=f"SLA as {channel}, {replacement} under {PUBLIC}")
    finally:
        _write_public(rollback_server, plugin_config, PUBLIC)
        rollback_server.load_model(PUBLIC)
    assert _declares_sla_input(client), "rolled forward: the plugin is back"
    np.testing.assert_array_equal(
        client.infer(PUBLIC, _ids_and_sla_tensor()).as_numpy("EMBEDDING"), reference)
