"""NVIDIA Model Analyzer (``triton-model-analyzer`` 1.58, not in requirements.txt: it pulls in
numba, optuna and SQLAlchemy) profiles ``emulated_explicit`` on a CPU-only server in remote
mode, with the config the README documents. Skipped unless ``model_analyzer`` imports.

Run it with the package installed anywhere, e.g.
``pip install --target /tmp/ma triton-model-analyzer==1.58.0`` then
``PYTHONPATH=/tmp/ma .venv/bin/python -m pytest -m slow tests/integration/test_model_analyzer.py``.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, SHIPPED_REPOSITORY

pytest.importorskip("model_analyzer")
pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL = "emulated_explicit"

# The README's config: remote mode against a running server (--model-control-mode=explicit:
# Model Analyzer reloads the model it profiles), perf_analyzer through the project's wrapper,
# the shipped input data (random INPUT_IDS are refused: valid token ids are 1..30521).
CONFIG = """\
model_repository: {repo}
triton_launch_mode: remote
triton_http_endpoint: {http}
triton_grpc_endpoint: {grpc}
triton_metrics_url: {metrics}
client_protocol: http
perf_analyzer_path: {root}/scripts/perf_analyzer
collect_cpu_metrics: true
export_path: {out}
checkpoint_directory: {out}/checkpoints
output_model_repository_path: {out}/output_model_repository
override_output_model_repository: true
run_config_search_disable: true
profile_models:
  emulated_explicit:
    cpu_only: true
    perf_analyzer_flags:
      input-data: {root}/perf_analyzer_configs/mixed_sla.json
    parameters:
      concurrency: [1, 4]
"""


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("ma") / "model_repository")
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, MODEL), os.path.join(repo, MODEL),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    log = str(tmp_path_factory.mktemp("ma_logs") / "tritonserver.log")
    with TritonServer(repo, log_path=log, exit_timeout_s=10, extra_args=(
            "--model-control-mode=explicit", f"--load-model={MODEL}")) as srv:
        srv.repo = repo
        yield srv


def test_model_analyzer_profiles_the_explicit_model_in_remote_mode(explicit_server, tmp_path):
    srv = explicit_server
    out = tmp_path / "ma"
    out.mkdir()
    config = tmp_path / "model_analyzer.yaml"
    config.write_text(CONFIG.format(repo=srv.repo, http=srv.http_url, grpc=srv.grpc_url,
                                    metrics=srv.metrics_url, root=REPO_ROOT, out=out))
    entry = ("import sys; from model_analyzer.entrypoint import main; "
             "sys.argv = ['model-analyzer', 'profile', '-f', sys.argv[1]]; main()")
    run = subprocess.run([sys.executable, "-c", entry, str(config)], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    with open(out / "results" / "metrics-model-inference.csv", newline="") as fh:
        rows = {int(r["Concurrency"]): r for r in csv.DictReader(fh)}
    assert set(rows) == {1, 4}
    for row in rows.values():
        assert float(row["Throughput (infer/sec)"]) > 0 and float(row["p99 Latency (ms)"]) > 0
    assert (out / "reports" / "summaries" / MODEL / "result_summary.html").exists()
