"""The operator commands against a real tritonserver (explicit model-control mode, the
EMULATED device slowed 10x): calibrate sweeps with control off and writes a profile the
model then loads; monitor and analyze read the live metrics port under load; --step
reloads the model per setting. Sized to stay well under a minute and a half."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading

import pytest
import tritonclient.http as httpclient
from click.testing import CliRunner

from operator_tools import analyze_cmd, live, monitor_cmd, perf_analyzer
from operator_tools.calibrate.cli import command as calibrate_command
from operator_tools.calibrate.common import DEFAULT_INPUT
from scheduler_core.profile_files import load_profile

pytestmark = pytest.mark.integration

MODEL = "emulated_explicit"
TIME_SCALE = 10
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory):
    """A server on a copy of the repository that loads only emulated_explicit, slowed by
    time_scale 10, with the model-load API enabled."""
    from server_ops.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("operator") / "model_repository")
    shutil.copytree(os.path.join(REPO_ROOT, "model_repository"), repo,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    with open(os.path.join(repo, MODEL, "config.pbtxt"), "a") as fh:
        fh.write(f'\nparameters {{ key: "time_scale" value: {{ string_value: "{TIME_SCALE}" }} }}\n')
    log = str(tmp_path_factory.mktemp("logs") / "tritonserver.log")
    srv = TritonServer(repo, log_path=log, exit_timeout_s=10,
                       extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}"))
    with srv:
        yield srv, repo


def run(command, args):
    result = CliRunner().invoke(command, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def parameters(server) -> dict:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        return {k: v["string_value"] for k, v in
                client.get_model_config(MODEL)["parameters"].items()}
    finally:
        client.close()


def test_calibrate_writes_a_profile_the_model_loads_then_monitor_and_analyze(explicit_server,
                                                                              tmp_path):
    server, repo = explicit_server
    before = parameters(server)
    out = tmp_path / "calibration" / "t4_live.yaml"
    output = run(calibrate_command, [
        "cold-start", "--url", server.http_url, "--metrics-url", server.metrics_url,
        "--model", MODEL, "--model-repository", repo, "--out", str(out), "--rates", "10,40,75",
        "--measurement-ms", "1000"])

    # Control was off for the sweep and is back as it was.
    assert "explicit control OFF during the sweep" in output
    assert parameters(server) == before and "control.enabled" not in before
    report = (out.parent / "calibrate.md").read_text()
    assert report.startswith("```\n$ explicit-batching calibrate cold-start --url")
    assert "EMULATED device" in report and f"time scale {TIME_SCALE}" in report
    rows = [line for line in report.splitlines() if line.startswith(("| 10 |", "| 40 |", "| 75 |"))]
    assert len(rows) == 3 and not any("failed" in r for r in rows)
    assert (out.parent / "load_latency.png").read_bytes().startswith(b"\x89PNG")
    # Queue depth and utilisation came from the metrics port: a ratio each (which rate is
    # busier is a measurement over 1 s windows on a shared machine; the sweep's arithmetic
    # is unit-tested offline in tests/unit/operator_tools/test_calibrate.py).
    util = [float(r.split("|")[6]) for r in rows]
    assert all(0.0 <= u <= 1.0 for u in util), util

    # The profile is valid, changed only zone thresholds, and the model loads it.
    profile = load_profile(str(out))
    shipped = load_profile(os.path.join(repo, MODEL, "profiles", "t4.yaml"))
    assert profile.name == "t4_live"
    assert (profile.cost_model, profile.scheduler, profile.emulation) == (
        shipped.cost_model, shipped.scheduler, shipped.emulation)
    shutil.copy(out, os.path.join(repo, MODEL, "profiles", "t4_live.yaml"))
    control = live.ModelControl(server.http_url, MODEL)
    try:
        original = control.config()
        control.load(live.with_parameters(original, {"hardware_profile": "t4_live"}))
    finally:
        control.close()
    assert "t4_live" in live.snapshot(server.metrics_url, MODEL).profiles
    with open(server.log_path, errors="replace") as fh:
        assert f"{MODEL}: explicit batching on profile 't4_live'" in fh.read()

    baseline = out.parent / "baseline.json"
    assert json.loads(baseline.read_text())["effect"]["requests"] > 0

    # monitor and analyze while perf_analyzer drives the model.
    with tempfile.TemporaryDirectory() as tmp:
        data = perf_analyzer.scaled_input_data(DEFAULT_INPUT, TIME_SCALE, tmp)
        load_error = []

        def drive():
            try:
                live.run_load(server.http_url, MODEL, data, 40, 1500)
            except RuntimeError as exc:  # pragma: no cover - reported below
                load_error.append(str(exc))
        loader = threading.Thread(target=drive)
        loader.start()
        try:
            drift = run(monitor_cmd.command, [
                "--check-metric-drift", "--metrics-url", server.metrics_url, "--model", MODEL,
                "--baseline", str(baseline), "--window-s", "2", "--interval-s", "0.25"])
            trace = tmp_path / "lag.json"
            lag = run(analyze_cmd.command, [
                "--control-feedback-lag", "--metrics-url", server.metrics_url, "--model", MODEL,
                "--duration-s", "2", "--record-trace", str(trace)])
        finally:
            loader.join()
        assert not load_error, load_error
    assert "metric drift check: emulated_explicit" in drift and "verdict:" in drift
    assert "SLA attainment le1000ms" in drift  # 500/1000 ms classes after the 10x scaling
    assert "verdict: " in lag and "lag = observation age + control lag" in lag
    samples = json.loads(trace.read_text())["samples"]
    assert samples  # how many a 2 s trace gets depends on scrapes that may fail when busy
    assert all(s["observation_age_ms"] >= 0 and s["control_lag_ms"] >= 0 for s in samples)
    offline = run(analyze_cmd.command, ["--control-feedback-lag", "--trace", str(trace)])
    assert f"{len(samples)} samples" in offline


def test_step_reloads_each_setting_and_restores_the_config(explicit_server):
    server, _ = explicit_server
    before = parameters(server)
    output = run(calibrate_command, [
        "step", "--url", server.http_url, "--metrics-url", server.metrics_url, "--model", MODEL,
        "--step-rate", "30", "--max-steps", "2", "--measurement-ms", "700"])
    assert "| 0.2 | 0.1 |" in output and "| 0.3 | 0.1 |" in output
    assert "best: alpha=" in output
    assert parameters(server) == before
