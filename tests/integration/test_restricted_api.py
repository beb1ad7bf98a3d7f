"""The model-repository API of a launched server with a key (server_ops.admin): a load
without the key, or with a wrong one, is refused over HTTP and gRPC; with it, and through
the launcher's own calls, it goes through."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server_ops.admin import ADMIN_KEY_HEADER, GRPC_ADMIN_KEY_HEADER

pytestmark = pytest.mark.integration
MODEL = "emulated_native"
KEY = "test-key-not-a-secret"


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    from server_ops.launcher import DEFAULT_MODEL_REPOSITORY, TritonServer

    log = str(tmp_path_factory.mktemp("keyed") / "tritonserver.log")
    srv = TritonServer(DEFAULT_MODEL_REPOSITORY, log_path=log, exit_timeout_s=5, admin_key=KEY,
                       extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}"))
    with srv:
        yield srv


def _http_load(server, headers: dict) -> int:
    req = urllib.request.Request(f"http://{server.http_url}/v2/repository/models/{MODEL}/load",
                                 data=json.dumps({}).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_load_without_the_key_is_refused_and_with_it_goes_through(keyed_server):
    assert _http_load(keyed_server, {}) == 403
    assert _http_load(keyed_server, {ADMIN_KEY_HEADER: "wrong"}) == 403
    assert _http_load(keyed_server, {ADMIN_KEY_HEADER: KEY}) == 200
    keyed_server.load_model(MODEL)  # the launcher sends its key


def test_grpc_needs_the_key_too(keyed_server):
    client = grpcclient.InferenceServerClient(keyed_server.grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            client.load_model(MODEL)
        client.load_model(MODEL, headers={GRPC_ADMIN_KEY_HEADER: KEY})
    finally:
        client.close()


def test_inference_needs_no_key(keyed_server):
    with urllib.request.urlopen(f"http://{keyed_server.http_url}/v2/models/{MODEL}/ready",
                                timeout=10) as resp:
        assert resp.status == 200
