"""A folder from ``explicit-batching export-model`` loads and serves on a fresh server
whose Python has ONLY the ``server`` extra (read from pyproject.toml): a throwaway venv on
Debian's python3.11, no project checkout on its path, tritonserver started from outside
the checkout with that venv's ``bin/`` first on PATH (the stub imports its packages).

And as on the stock NGC 24.10 image, whose Python backend runs Python 3.10: the same
server with the 3.10 backend stub (shipped beside the 3.11 one) embedding a Python 3.10
venv that holds only what the folder's ``requirements.txt`` pins, installed with the one
``pip install -r requirements.txt`` docs/deploy.md gives."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from packaging.requirements import Requirement

from operator_tools.export_cmd import (REQUIREMENTS_FILE, SERVER_DISTRIBUTIONS, VENDOR_DIR,
                                       export_model)
from tests.conftest import REPO_ROOT
from tests.integration import wheelhouse
from tests.python310 import libpython_dir, python310
from server_ops.launcher import BACKEND_DIR_ENV, TritonServer, tritonserver_paths

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

PYTHON = {python}

class TritonPythonModel:
    def initialize(self, args):
        if sys.version_info[:2] != PYTHON:
            raise pb_utils.TritonModelException(f"the stub runs {sys.version}, not {PYTHON}")
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


def make_repository(tmp_path: Path, python: tuple[int, int]) -> tuple[Path, str]:
    """The toy inner model (checking it runs on ``python``) and the folder exported in front
    of it; returns (repository, exported folder)."""
    repo = tmp_path / "models"
    (repo / INNER / "1").mkdir(parents=True)
    (repo / INNER / "config.pbtxt").write_text(INNER_CONFIG)
    (repo / INNER / "1" / "model.py").write_text(INNER_MODEL_PY.replace("{python}",
                                                                         repr(python)))
    exported = export_model(INNER, EXPLICIT, str(repo), template="emulated",
                            hardware_profile="t4")
    assert sorted(os.listdir(repo)) == [INNER, EXPLICIT]  # Triton polls every folder
    for root, dirs, _ in os.walk(exported.path):
        assert "__pycache__" not in dirs, root
    assert os.path.isfile(os.path.join(exported.path, "1", VENDOR_DIR, "triton_backend",
                                       "triton_models.py"))
    return repo, exported.path


def serve_one_request(repo: Path, venv: str, tmp_path: Path, **env: str) -> np.ndarray:
    """Start tritonserver on ``repo`` from outside the checkout, the stub on ``venv``;
    returns the explicit model's answer to one request."""
    outside = tmp_path / "elsewhere"
    outside.mkdir(exist_ok=True)
    srv = TritonServer(str(repo), exit_timeout_s=10)
    env = {"PATH": os.path.join(venv, "bin") + os.pathsep + "/usr/bin:/bin",
           "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
           "EXPLICIT_BATCHING_METRICS_URL": srv.metrics_url, **env}
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
    return embedding


def test_exported_model_serves_on_a_server_with_only_the_server_extra(server_venv, tmp_path):
    python = os.path.join(server_venv, "bin", "python")
    # The server's Python cannot import the project (nor torch): only the vendored copy.
    probe = subprocess.run([python, "-c", "import triton_backend"], cwd=tmp_path,
                           capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert "No module named 'triton_backend'" in probe.stderr
    probe = subprocess.run([python, "-c", "import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True, check=True)
    assert int(probe.stdout.split(".")[0]) < 2
    repo, _ = make_repository(tmp_path, sys.version_info[:2])
    serve_one_request(repo, server_venv, tmp_path)


# Under Python 3.10 with only requirements.txt installed, every vendored module imports
# (triton_python_backend_utils is the unit tests' fake: the real one needs the stub).
IMPORT_ALL = """
import importlib, importlib.util, pkgutil, sys
spec = importlib.util.spec_from_file_location("triton_python_backend_utils", sys.argv[1])
fake = sys.modules["triton_python_backend_utils"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fake)
done = []
for package in sys.argv[2:]:
    done.append(importlib.import_module(package).__name__)
    for info in pkgutil.walk_packages(sys.modules[package].__path__, package + "."):
        done.append(importlib.import_module(info.name).__name__)
print(len(done))
"""
FAKE_PB_UTILS = os.path.join(REPO_ROOT, "tests", "unit", "triton_backend", "fake_pb_utils.py")


def python310_backends(tmp_path: Path) -> str:
    """A backend directory like the NGC 24.10 image's: the Python backend with the stub
    for Python 3.10 (tritonserver_paths()'s own, beside python_backend_stubs/3.10/)."""
    binary, backends = tritonserver_paths()
    stub = os.path.join(os.path.dirname(os.path.dirname(binary)), "python_backend_stubs",
                        "3.10", "triton_python_backend_stub")
    if not os.path.isfile(stub):
        pytest.skip(f"this tritonserver ships no Python 3.10 backend stub ({stub})")
    folder = tmp_path / "backends" / "python"
    folder.mkdir(parents=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        (folder / name).symlink_to(os.path.join(backends, "python", name))
    # A link: the stub finds its bundled libcudart relative to where it really lies.
    (folder / "triton_python_backend_stub").symlink_to(stub)
    return str(folder.parent)


def test_exported_model_serves_on_python_310_with_its_requirements_only(tmp_path,
                                                                          monkeypatch):
    interpreter = python310()
    pins = wheelhouse.pin_file("server310", covers=SERVER_DISTRIBUTIONS)
    venv = str(tmp_path / "venv310")
    subprocess.run([interpreter, "-m", "venv", venv], check=True, timeout=120)
    python = os.path.join(venv, "bin", "python")
    repo, exported = make_repository(tmp_path, (3, 10))
    # The documented dependency path: one pip line, the folder's requirements.txt.
    pip = wheelhouse.install(python, pins, "-r", os.path.join(exported, REQUIREMENTS_FILE))
    assert pip.returncode == 0, f"pip install -r requirements.txt failed:\n{pip.stderr}"

    vendor = os.path.join(exported, "1", VENDOR_DIR)
    run = subprocess.run([python, "-c", IMPORT_ALL, FAKE_PB_UTILS, *sorted(os.listdir(vendor))],
                         cwd=vendor, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 0, run.stderr
    vendored = sum(1 for _, _, files in os.walk(vendor) for f in files if f.endswith(".py"))
    assert int(run.stdout) == vendored

    monkeypatch.setenv(BACKEND_DIR_ENV, python310_backends(tmp_path))
    serve_one_request(repo, venv, tmp_path, LD_LIBRARY_PATH=libpython_dir(interpreter))
