"""``explicit-batching calibrate table --url``: the cost table of an inner model measured
through a real tritonserver, over HTTP and gRPC.

The target is a copy of the shipped emulated_device (the EMULATED inner model: it sleeps
its profile's cost of the padded [batch, length] batch it gets, slowed 10x here so the
cost dwarfs the transport). The table must hold the cells asked for and grow with batch
size and with length, as that cost does; no timing is asserted."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from operator_tools.cli import main
from scheduler_core.profile_files import load_profile
from tests.conftest import SHIPPED_REPOSITORY

pytestmark = pytest.mark.integration

INNER = "emulated_device"
TIME_SCALE = 10
PROFILES = os.path.join(SHIPPED_REPOSITORY, "emulated_explicit", "profiles")
BATCHES, LENGTHS = (1, 8, 32), (32, 256)


@pytest.fixture(scope="module")
def inner_server(tmp_path_factory):
    """A server that loads only a copy of emulated_device, slowed TIME_SCALE times."""
    from server_ops.launcher import TritonServer

    repo = tmp_path_factory.mktemp("calibrate_table") / "model_repository"
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, INNER), repo / INNER,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(PROFILES, repo / "emulated_explicit" / "profiles")
    with open(repo / INNER / "config.pbtxt", "a") as fh:
        fh.write(f'\nparameters {{ key: "time_scale" value: {{ string_value: "{TIME_SCALE}" }} }}\n')
    log = str(tmp_path_factory.mktemp("logs") / "tritonserver.log")
    with TritonServer(str(repo), log_path=log, exit_timeout_s=10,
                      extra_args=("--model-control-mode=explicit",
                                  f"--load-model={INNER}")) as srv:
        yield srv


def _measure(url: str, out, *extra: str):
    return CliRunner().invoke(main, [
        "calibrate", "table", "--url", url, "--model", INNER,
        "--base-profile", os.path.join(PROFILES, "t4.yaml"), "--out", str(out),
        "--batch-sizes", ",".join(map(str, BATCHES)), "--lengths", ",".join(map(str, LENGTHS)),
        "--budget-s", "120", "--json", *extra])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_table_of_a_live_inner_model_grows_with_batch_and_length(inner_server, tmp_path,
                                                                      protocol):
    url = inner_server.http_url if protocol == "http" else inner_server.grpc_url
    out = tmp_path / f"t4_{protocol}.yaml"
    result = _measure(url, out, "--protocol", protocol)
    assert result.exit_code == 0, result.output + repr(result.exception)

    doc = json.loads(result.stdout)  # the JSON alone on stdout
    cost = {(r["batch"], r["length"]): r["ms"] for r in doc["rows"]}
    assert set(cost) == {(b, n) for b in BATCHES for n in LENGTHS}
    for n in LENGTHS:
        assert [cost[b, n] for b in BATCHES] == sorted(cost[b, n] for b in BATCHES), (n, cost)
    for b in BATCHES:
        assert cost[b, LENGTHS[0]] < cost[b, LENGTHS[-1]], (b, cost)

    profile = load_profile(str(out))  # written, and valid
    assert {(b, n): ms for b, n, ms in profile.cost_model.table} == cost
    assert protocol in profile.cost_model.table_source and INNER in profile.cost_model.table_source


def test_a_model_the_server_does_not_have_is_an_error_and_a_wrong_input_a_usage_error(
        inner_server, tmp_path):
    result = CliRunner().invoke(main, [
        "calibrate", "table", "--url", inner_server.http_url, "--model", "no_such_model",
        "--base-profile", os.path.join(PROFILES, "t4.yaml"), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1 and "no_such_model" in result.output
    result = _measure(inner_server.http_url, tmp_path / "p.yaml", "--input-name", "SLA_MS")
    assert result.exit_code == 2 and "INPUT_IDS" in result.output
    assert not (tmp_path / "p.yaml").exists()
