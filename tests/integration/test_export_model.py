"""A folder from ``explicit-batching export-model`` loads and serves on a fresh server
whose Python has ONLY the ``server`` extra (read from pyproject.toml): a throwaway venv on
Debian's python3.11, no project checkout on its path, tritonserver started from outside
the checkout with that venv's ``bin/`` first on PATH (the stub imports its packages)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import numpy as np
import pytest
import tritonclient.http as httpclient
from packaging.requirements import Requirement

from operator_tools.export_cmd import VENDOR_DIR, export_model
from tests.conftest import REPO_ROOT
from tests.integration import wheelhouse
from server_ops.launcher import TritonServer

pytestmark = pytest.mark.integration
SERVER_PYTHON = os.environ.get("PYTHON", "/usr/bin/python3.11")
INNER = "toy_encoder"
EXPLICIT = "toy_encoder_explicit"

# A self-contained inner model (numpy only), the shape BLSExecutor sends: INPUT_IDS
# [B, L] padded with 0 -> EMBEDDING [B, 384]; column 0 = real tokens, column 1 = their sum.
INNER_CONFIG = f"""name: "{INNER}"
backend: "python"
max_batch_size: 64
input [ {{ name: "INPUT_IDS" data_type: TYPE_INT64 dims: [ -1 ] }} ]
output [ {{ name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 384 ] }} ]
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
"""
INNER_MODEL_PY = """import importlib.util
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Proof that the stub runs the throwaway venv: the project is not importable here.
        for name in ("triton_backend", "scheduler_core", "torch"):
            if importlib.util.find_spec(name) is not None:
                raise pb_utils.TritonModelException(
                    f"{name} importable from {sys.executable}: not a server-extra-only Python")

    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS").as_numpy()
            out = np.zeros((ids.shape[0], 384), dtype=np.float32)
            out[:, 0] = (ids != 0).sum(axis=1)
            out[:, 1] = ids.sum(axis=1)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", out)]))
        return responses
"""


def server_requirements() -> list[str]:
    with open(os.path.join(REPO_ROOT, "pyproject.toml"), "rb") as fh:
        return tomllib.load(fh)["project"]["optional-dependencies"]["server"]


@pytest.fixture(scope="session")
def server_venv(tmp_path_factory) -> str:
    """A venv with the server extra's packages only (built once per test session)."""
    if not os.access(SERVER_PYTHON, os.X_OK):
        pytest.skip(f"{SERVER_PYTHON} missing (the stub embeds Debian's libpython3.11)")
    requirements = server_requirements()
    # Offline, from the pinned wheelhouse (`make setup`): skips if it lacks a wheel.
    pins = wheelhouse.pin_file("server", covers=tuple(Requirement(r).name for r in requirements))
    venv = str(tmp_path_factory.mktemp("server_venv") / "venv")
    subprocess.run([SERVER_PYTHON, "-m", "venv", venv], check=True, timeout=120)
    pip = wheelhouse.install(os.path.join(venv, "bin", "python"), pins, *requirements)
    assert pip.returncode == 0, f"pip install of the server extra failed:\n{pip.stderr}"
    return venv


def test_exported_model_serves_on_a_server_with_only_the_server_extra(server_venv, tmp_path):
    python = os.path.join(server_venv, "bin", "python")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # The server's Python cannot import the project (nor torch): only the vendored copy.
    probe = subprocess.run([python, "-c", "import triton_backend"], cwd=outside,
                           capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert "No module named 'triton_backend'" in probe.stderr
    probe = subprocess.run([python, "-c", "import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True, check=True)
    assert int(probe.stdout.split(".")[0]) < 2

    repo = tmp_path / "models"
    (repo / INNER / "1").mkdir(parents=True)
    (repo / INNER / "config.pbtxt").write_text(INNER_CONFIG)
    (repo / INNER / "1" / "model.py").write_text(INNER_MODEL_PY)
    exported = export_model(INNER, EXPLICIT, str(repo), template="emulated",
                            hardware_profile="t4")
    assert sorted(os.listdir(repo)) == [INNER, EXPLICIT]  # Triton polls every folder
    for root, dirs, _ in os.walk(exported.path):
        assert "__pycache__" not in dirs, root
    assert os.path.isfile(os.path.join(exported.path, "1", VENDOR_DIR, "triton_backend",
                                       "triton_models.py"))

    srv = TritonServer(str(repo), exit_timeout_s=10)
    env = {"PATH": os.path.join(server_venv, "bin") + os.pathsep + "/usr/bin:/bin",
           "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
           "EXPLICIT_BATCHING_METRICS_URL": srv.metrics_url}
    log_path = tmp_path / "tritonserver.log"
    with open(log_path, "wb") as log:
        srv.process = subprocess.Popen(srv.command(), env=env, cwd=outside, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        try:
            srv.wait_ready(timeout_s=120)
            client = httpclient.InferenceServerClient(srv.http_url)
            ids = np.array([[101, 7, 3, 102]], dtype=np.int64)
            inp = httpclient.InferInput("INPUT_IDS", list(ids.shape), "INT64")
            inp.set_data_from_numpy(ids)
            embedding = client.infer(EXPLICIT, [inp]).as_numpy("EMBEDDING")
        except BaseException:
            srv.stop()
            sys.stderr.write(log_path.read_text(errors="replace")[-6000:])
            raise
        srv.stop()
    assert embedding.shape == (1, 384) and embedding.dtype == np.float32
    # The batch went through the inner model (BLS), unpadded: 4 real tokens, sum 213.
    assert embedding[0, 0] == 4 and embedding[0, 1] == 213
    assert sorted(os.listdir(repo)) == [INNER, EXPLICIT]
