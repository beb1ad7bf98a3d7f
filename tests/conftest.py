"""Shared fixtures. The integration tests start ONE real tritonserver per session."""

from __future__ import annotations

import os
import shutil

import pytest

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


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory) -> str:
    repo = str(tmp_path_factory.mktemp("repo") / "model_repository")
    shutil.copytree(SHIPPED_REPOSITORY, repo,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, (template, inner) in BLS_MODELS.items():
        _add_bls_model(repo, name, template, inner)
    return repo


@pytest.fixture(scope="session")
def server(model_repository, tmp_path_factory):
    from triton_backend.launcher import TritonServer

    log = str(tmp_path_factory.mktemp("logs") / "tritonserver.log")
    srv = TritonServer(model_repository, log_path=log, exit_timeout_s=15)
    with srv:
        yield srv
    with open(log, errors="replace") as fh:
        srv.final_log = fh.read()
