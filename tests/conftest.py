"""Shared fixtures. The integration tests start ONE real tritonserver per session."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import settings

# Property tests: the gating suite runs the "ci" profile, the same examples on every run (a
# failure reproduces; print_blob says how), with no per-example deadline (a loaded machine
# is slow, not wrong). `make fuzz` runs the "search" profile: random examples, more of them
# (a test's own @settings(max_examples=...) still wins). HYPOTHESIS_PROFILE picks one.
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("search", deadline=None, derandomize=False, print_blob=True,
                          max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED_REPOSITORY = os.path.join(REPO_ROOT, "model_repository")
SHIPPED_MODELS = ("minilm", "minilm_native", "minilm_explicit",
                  "emulated_device", "emulated_native", "emulated_explicit")

# Extra deployments the tests add to a copy of the shipped repository: the explicit
# models fronting the inner models through BLS instead of running them in process.
BLS_MODELS = {
    "emulated_explicit_bls": ("emulated_explicit", "emulated_device"),
    "minilm_explicit_bls": ("minilm_explicit", "minilm"),
}


def _add_bls_model(repo: str, name: str, template: str, inner: str) -> None:
    from benchmarks.repository import copy_model

    # Always wait for the elastic window (the largest weight the profile allows) and batch
    # FIFO in the safe zone: the worth-its-wait rule would send a 64-request burst on an
    # idle, fast device in many small batches, length-aware batching would split its mixed
    # lengths, and the BLS test checks that batches reach the inner model.
    copy_model(template, repo, name, source=repo,
               params={"inner_model": inner, "profile_dir": f"{template}/profiles",
                       "scheduler.wait_ms_per_saved_device_ms": "1000000",
                       "control.safe_zone_batching": "fifo"})


# The session server's models on the EMULATED device get a device gate (the test hook
# ``device_gate_file``, executors.DeviceGate): absent, it changes nothing; a test that
# creates it holds the device, so what it sends next queues for certain.
GATED_MODELS = ("emulated_device", "emulated_explicit")


@pytest.fixture(scope="session")
def gate_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("gates"))


def gate_path(gate_dir: str, model: str) -> str:
    """The gate file of ``model`` in the session server (see GATED_MODELS)."""
    return os.path.join(gate_dir, f"{model}.gate")


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory, gate_dir) -> str:
    repo = str(tmp_path_factory.mktemp("repo") / "model_repository")
    shutil.copytree(SHIPPED_REPOSITORY, repo,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in GATED_MODELS:
        # appended as text: the shipped config's layout stays as a user writes it (the
        # explicit models read an inner model's config.pbtxt themselves)
        with open(os.path.join(repo, name, "config.pbtxt"), "a", encoding="utf-8") as fh:
            fh.write(f'parameters {{ key: "device_gate_file" value: {{ string_value: '
                     f'"{gate_path(gate_dir, name)}" }} }}\n')
    for name, (template, inner) in BLS_MODELS.items():
        _add_bls_model(repo, name, template, inner)
    return repo


@pytest.fixture(scope="session")
def server(model_repository, tmp_path_factory):
    from server_ops.launcher import TritonServer

    log = str(tmp_path_factory.mktemp("logs") / "tritonserver.log")
    srv = TritonServer(model_repository, log_path=log, exit_timeout_s=15)
    with srv:
        yield srv
    with open(log, errors="replace") as fh:
        srv.final_log = fh.read()
