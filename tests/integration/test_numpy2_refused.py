"""numpy 2 makes Triton 24.10's Python backend serve garbage: in a throwaway venv with
numpy 2 the plugin refuses to load, naming numpy's version and the cause."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import REPO_ROOT, SHIPPED_REPOSITORY
from tests.integration import wheelhouse

pytestmark = pytest.mark.integration
MODEL = "emulated_explicit"


@pytest.fixture(scope="module")
def numpy2_venv(tmp_path_factory):
    """A venv on the same Python as the project's (the stub embeds Debian's libpython
    3.11) with numpy 2 and the other server dependencies; the checkout is made importable
    by a .pth file, as an installed project would be."""
    # Offline, from the pinned wheelhouse (`make setup`): skips if it lacks a wheel.
    pins = wheelhouse.pin_file("numpy2")
    venv = tmp_path_factory.mktemp("numpy2") / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True)
    pip = wheelhouse.install(str(venv / "bin" / "python"), pins, "numpy>=2,<3", "pyyaml",
                             "prometheus_client")
    if pip.returncode != 0:
        pytest.skip(f"numpy 2 could not be installed here: {pip.stderr[-500:]}")
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(purelib, "explicit_batching_checkout.pth"), "w") as fh:
        fh.write(REPO_ROOT + "\n")
    return str(venv)


def test_a_numpy2_python_makes_the_model_refuse_to_load(numpy2_venv, tmp_path, monkeypatch):
    from server_ops.launcher import TritonServer

    repo = tmp_path / "repo"
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, MODEL), repo / MODEL,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # The stub takes its interpreter (and so numpy) from the first python3 on PATH, which
    # the launcher makes the bin/ of the Python it runs under: here the numpy-2 venv's.
    monkeypatch.setattr(sys, "executable", os.path.join(numpy2_venv, "bin", "python"))
    srv = TritonServer(str(repo), log_path=str(tmp_path / "tritonserver.log"),
                       exit_timeout_s=10, extra_args=("--model-control-mode=explicit",))
    with srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        try:
            with pytest.raises(InferenceServerException) as err:
                client.load_model(MODEL)
            message = str(err.value)
            assert "numpy 2." in message and "install numpy<2" in message, message
            assert not client.is_model_ready(MODEL)
        finally:
            client.close()
