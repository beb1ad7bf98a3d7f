"""The documented load-test recipe past capacity (perf_analyzer_configs/README.md, "Past
capacity: benchmark mode"): perf_analyzer at 2x the EMULATED device's capacity against
``emulated_explicit`` exits 0 once the model is in benchmark mode
(``control.infeasible_policy=serve_late``, set through the model-load API), where as
configured it stops at the first refused request.

Its own server (explicit model control): a copy of ``emulated_explicit`` slowed 10x by the
``time_scale`` parameter, so that 2x its capacity is a rate this 2-core machine can drive.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from operator_tools import benchmark_mode, live, measure, perf_analyzer
from scheduler_core.profile_files import load_profile, profile_path
from simulation.simulator import capacity_rps
from tests.conftest import REPO_ROOT, SHIPPED_REPOSITORY

pytestmark = pytest.mark.integration
MODEL = "emulated_explicit"
TIME_SCALE = 10.0
INPUT = os.path.join(REPO_ROOT, "perf_analyzer_configs", "mixed_sla.json")
PERF_ANALYZER = os.path.join(REPO_ROOT, "scripts", "perf_analyzer")


def capacity() -> float:
    """The slowed t4 device's throughput for the input's length mix in full batches of
    similar lengths (req/s), as scripts/reliability.py computes it."""
    profile = load_profile(profile_path(os.path.join(SHIPPED_REPOSITORY, MODEL, "profiles"),
                                        "t4"))
    with open(INPUT, encoding="utf-8") as fh:
        lengths = [len(e["INPUT_IDS"]["content"]) for e in json.load(fh)["data"]]
    return capacity_rps(profile.cost_model, profile.emulation.cost_mode, TIME_SCALE, lengths,
                        profile.scheduler.max_batch_size, profile.scheduler.max_batch_tokens)


# The run is bounded by a request count, not by time windows: an overloaded rate never
# stabilises, and on a loaded machine windows stretch; 600 requests are ~2 s of sending.
REQUESTS = 600
RUN_TIMEOUT_S = 180  # a hang guard for perf_analyzer's subprocess, not a speed target


def recipe(url: str, rate: float, input_data: str) -> list[str]:
    """The README's perf_analyzer command line, bounded by a request count, with one
    worker thread (run_recipe says why)."""
    return [PERF_ANALYZER, "-m", MODEL, "-u", url, "--async", "--request-rate-range", f"{rate:g}",
            "--request-distribution", "poisson", "--request-count", str(REQUESTS),
            "--max-threads", "1", "--input-data", input_data]


def run_recipe(url: str, rate: float, input_data: str) -> subprocess.CompletedProcess:
    """``recipe`` run to its end, once more where perf_analyzer's own worker slept through
    its start (docs/platform.md: a count-bounded run then waits forever for requests it
    never sent). With one worker such a run sent nothing: the model ended none of it. A
    run that hangs after the model ended some of it is a lost answer, and raises."""
    http = f"http://{url}"

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(recipe(url, rate, input_data), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)

    before = measure.ended_count(http, MODEL)
    try:
        return run()
    except subprocess.TimeoutExpired:
        if measure.ended_count(http, MODEL) != before:
            raise
    return run()


@pytest.fixture(scope="module")
def slowed_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("recipe") / "model_repository")
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, MODEL), os.path.join(repo, MODEL),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    with open(os.path.join(repo, MODEL, "config.pbtxt"), "a") as fh:
        fh.write(f'\nparameters {{ key: "time_scale" value: {{ string_value: '
                 f'"{TIME_SCALE:g}" }} }}\n')
    log = str(tmp_path_factory.mktemp("recipe_logs") / "tritonserver.log")
    with TritonServer(repo, log_path=log, exit_timeout_s=10, extra_args=(
            "--model-control-mode=explicit", f"--load-model={MODEL}")) as srv:
        yield srv


def test_perf_analyzer_at_twice_capacity_exits_0_in_benchmark_mode(slowed_server, tmp_path):
    url = slowed_server.http_url
    rate = round(2 * capacity())  # ~286 req/s at time scale 10
    # SLAs slowed like the device, as compare and calibrate do.
    data = perf_analyzer.scaled_input_data(INPUT, TIME_SCALE, str(tmp_path))

    # As configured (infeasible_policy: reject) the overload is refused and perf_analyzer
    # stops at the first refusal: the run is past the knee.
    refused = run_recipe(url, rate, data)
    assert refused.returncode != 0, refused.stdout
    # Refused by the plugin (deadline infeasible; or, once the overload is sustained, a
    # call's tail past its budget: "overloaded") or by a bounded Triton queue in front of
    # it (a default_queue_policy): each is a refusal.
    output = refused.stdout + refused.stderr
    assert any(why in output for why in ("deadline infeasible", "overloaded:",
                                         "Exceeds maximum queue size")), output

    assert benchmark_mode.main(["--url", url, "--model", MODEL, "on"]) == 0
    started = time.monotonic()
    run = run_recipe(url, rate, data)
    took = time.monotonic() - started
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Throughput:" in output, output
    print(f"recipe at {rate} req/s (2x capacity {capacity():.1f} req/s): exit "
          f"{run.returncode} in {took:.1f} s")

    assert benchmark_mode.main(["--url", url, "--model", MODEL, "off"]) == 0
    control = live.ModelControl(url, MODEL)
    try:
        assert live.parameter(control.config(), benchmark_mode.POLICY_KEY) is None
    finally:
        control.close()
