"""The manifests' ``readOnlyRootFilesystem: true``, on a real server: tritonserver and the
plugin's stub started in a mount namespace whose root is read-only, with only what the
Deployment mounts writable (``/tmp``, where the model repository lives here as in the pod's
emptyDir, and ``/dev/shm``). The shipped default loads, serves, and publishes its metrics.

Needs unprivileged user and mount namespaces (``unshare -rm``); skipped, saying so, where the
kernel refuses them."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from server_ops.launcher import TritonServer
from tests.eventually import eventually
from tests.integration.models import emulated_copy, grpc_inputs

pytestmark = pytest.mark.integration
MODEL = "read_only_explicit"
REQUESTS = 32

# Remount the root read-only in a private mount namespace (what readOnlyRootFilesystem does
# to the container's root), keep /tmp (the pod's emptyDir) writable, prove the root refuses a
# write, then become the server.
READ_ONLY_ROOT = ("mount --bind /tmp /tmp && mount -o remount,bind,ro / && "
                  "if touch /.read_only_probe 2>/dev/null; then exit 97; fi && exec \"$@\"")


def _namespaces_allowed() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "sh", "-c", "mount --bind /tmp /tmp"],
                          capture_output=True).returncode == 0


class ReadOnlyRootServer(TritonServer):
    def command(self) -> list[str]:
        return ["unshare", "-rm", "sh", "-c", READ_ONLY_ROOT, "sh", *super().command()]


@pytest.fixture(scope="module")
def read_only_server(tmp_path_factory):
    if not _namespaces_allowed():
        pytest.skip("this kernel refuses unprivileged user and mount namespaces (unshare -rm)")
    base = tmp_path_factory.mktemp("read_only_root")
    repo = str(base / "repo")
    os.makedirs(repo)
    emulated_copy(repo, MODEL)  # the shipped default, renamed
    srv = ReadOnlyRootServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=5)
    with srv:
        yield srv


def test_the_shipped_default_serves_with_a_read_only_root(read_only_server):
    client = grpcclient.InferenceServerClient(read_only_server.grpc_url)
    rng = np.random.default_rng(0)

    results = [client.infer(MODEL, grpc_inputs(rng, 16)) for _ in range(REQUESTS)]

    assert all(r.as_numpy("EMBEDDING").shape == (1, 384) for r in results)
    stats = client.get_inference_statistics(MODEL).model_stats[0].inference_stats
    assert (stats.success.count, stats.fail.count) == (REQUESTS, 0)

    def metrics() -> str:
        import urllib.request  # noqa: PLC0415

        with urllib.request.urlopen(read_only_server.metrics_url, timeout=5) as resp:
            return resp.read().decode()

    def batches_formed() -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in metrics().splitlines()
                   if line.startswith("explicit_batching_formed_batches_total{")
                   and f'model="{MODEL}"' in line)

    eventually(batches_formed, what="the plugin's formed-batch counter is published")
