"""The liveness probe (``server_ops.probe``) against a real server started the Kubernetes
way (no stub supervisor): it passes while the plugin's stub answers, and fails once the
stub is killed, although Triton still reports the model ready. How fast it fails is a
target (the manifests' probe period), not bounded here: eventually, with a hang guard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from server_ops.intake_config import hold_config
from server_ops.probe import probe
from server_ops.supervisor import stub_pids
from tests.conftest import REPO_ROOT
from tests.eventually import eventually
from tests.integration.models import emulated_copy

pytestmark = pytest.mark.integration
MODEL = "probed_explicit"


@pytest.fixture(scope="module")
def probe_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    base = tmp_path_factory.mktemp("probe")
    repo = str(base / "repo")
    os.makedirs(repo)
    emulated_copy(repo, MODEL, hold_config)
    srv = TritonServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=5,
                       extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}"))
    with srv:
        yield srv
    for pid in stub_pids(srv.process.pid, MODEL):  # none should be left
        os.kill(pid, signal.SIGKILL)


def _probe_command(server) -> int:
    return subprocess.run([sys.executable, "-m", "server_ops.probe", "--url", server.http_url,
                           "--model", MODEL, "--timeout-s", "5"], cwd=REPO_ROOT,
                          capture_output=True, text=True).returncode


def test_the_probe_passes_while_the_stub_answers_and_fails_once_it_is_killed(probe_server):
    assert probe(probe_server.http_url, MODEL) is None
    assert _probe_command(probe_server) == 0

    for pid in stub_pids(probe_server.process.pid, MODEL):
        os.kill(pid, signal.SIGKILL)

    reason = eventually(lambda: probe(probe_server.http_url, MODEL, timeout_s=5),
                        what="the probe fails after the stub was killed")
    assert "not healthy" in reason or "no answer" in reason
    assert _probe_command(probe_server) == 1
    # What the probe exists for: Triton itself still calls the model ready.
    import urllib.request  # noqa: PLC0415

    with urllib.request.urlopen(f"http://{probe_server.http_url}/v2/models/{MODEL}/ready",
                                timeout=5) as resp:
        assert resp.status == 200


def test_the_probe_fails_without_a_server():
    assert "no answer" in probe("127.0.0.1:9", MODEL, timeout_s=2)
