"""``python -m sidecar`` as its own process, scraping a real local HTTP server that serves the
captured Triton page, writing samples to a file; SIGTERM stops it cleanly."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from sidecar.sampler import SampleFile, usable

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))
STARTUP_DEADLINE_S = 30.0  # a hang guard: a loaded machine starts Python slowly


@pytest.fixture
def sidecar_process(tmp_path, local_server, real_page):
    local_server.state.body = real_page
    out = str(tmp_path / "sidecar.json")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "--out", out, "--period-ms", "50",
         "--metrics-url", local_server.url],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc, out, local_server
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=STARTUP_DEADLINE_S)


def wait_for_sample(proc, reader, accept):
    """Polls the sample file until ``accept(sample)``, bounded by a deadline."""
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"sidecar exited early: {proc.communicate()}"
        sample = reader.latest()
        if sample is not None and accept(sample):
            return sample
        time.sleep(0.02)  # waiting for another process to write a file, not for a decision
    pytest.fail(f"no accepted sample within {STARTUP_DEADLINE_S} s; last: {reader.latest()}")


def test_process_writes_healthy_samples_and_exits_on_sigterm(sidecar_process):
    proc, out, server = sidecar_process
    reader = SampleFile(out)

    first = wait_for_sample(proc, reader, lambda s: s.endpoint_ok is True and s.health == "ok")
    assert first.error == ""
    # taken_s is CLOCK_MONOTONIC in the sidecar process: comparable with ours
    # (an age guard, not a speed target: only a stale or future clock would fail it)
    assert usable(first, time.monotonic(), max_age_s=STARTUP_DEADLINE_S)

    # a later sample carries rates from two scrapes of the page
    later = wait_for_sample(proc, reader, lambda s: "emulated_native" in s.models)
    assert later.health == "ok"
    assert later.taken_s > first.taken_s
    assert len(later.models) == 6
    assert later.models["emulated_native"].requests_per_s == 0.0  # same page: no traffic
    assert server.state.hits >= 2

    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=STARTUP_DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"sidecar did not exit within {STARTUP_DEADLINE_S:g} s of SIGTERM")
    stdout, stderr = proc.communicate(timeout=STARTUP_DEADLINE_S)
    assert rc == 0, stderr
    assert f"writing samples to {out} every 50 ms" in stdout
    if not glob.glob("/dev/nvidia[0-9]*"):
        assert stderr.count("NVML unavailable") == 1, stderr  # said once, not every 50 ms
    assert not glob.glob(out + ".*.tmp")  # no temporary file left behind


def test_process_without_endpoint_reports_nvml_only(tmp_path):
    out = str(tmp_path / "sidecar.json")
    proc = subprocess.Popen([sys.executable, "-m", "sidecar", "--out", out, "--period-ms", "50"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        sample = wait_for_sample(proc, SampleFile(out), lambda s: True)
        assert sample.endpoint_ok is None
        if not glob.glob("/dev/nvidia[0-9]*"):
            assert (sample.health, sample.nvml_available, sample.utilization) == ("ok", False, None)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=STARTUP_DEADLINE_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=STARTUP_DEADLINE_S)
