"""``make bench`` survives a tritonserver crash: ``Bench.restart`` starts the server again
with every model as the run had it (a reloaded config, a model loaded later, one unloaded),
so the crashed segment can run again instead of every later segment failing to connect.

Its own server (explicit model control), killed with SIGKILL as the gRPC front end's crash
under client cancellations ends it (results/tritonserver_sigsegv.md)."""

from __future__ import annotations

import os
import signal

import pytest

from benchmarks.bench_server import Bench
from tests.eventually import eventually
from tests.integration.models import emulated_copy

pytestmark = pytest.mark.integration
STARTED = ("bench_a", "bench_c")  # loaded by the server's own --load-model arguments


@pytest.fixture()
def server(tmp_path):
    from server_ops.launcher import TritonServer

    repo = str(tmp_path / "repo")
    for name in ("bench_a", "bench_b", "bench_c"):
        emulated_copy(repo, name)
    srv = TritonServer(repo, log_path=str(tmp_path / "tritonserver.log"), exit_timeout_s=10,
                       extra_args=("--model-control-mode=explicit",
                                   *(f"--load-model={m}" for m in STARTED)))
    with srv:
        yield srv


def test_a_restart_brings_back_every_model_as_the_run_had_it(server):
    from server_ops.admin import loaded_models

    bench = Bench(server, STARTED)
    bench.configure("bench_a", {"time_scale": "3"})
    bench.load("bench_b")
    bench.unload("bench_c")
    eventually(lambda: "bench_c" not in loaded_models(server.http_url),
               what="bench_c unloaded before the crash")

    os.kill(server.process.pid, signal.SIGKILL)
    eventually(bench.server_died, what="the killed server seen as dead")
    bench.restart()

    assert not bench.server_died()
    assert sorted(loaded_models(server.http_url)) == ["bench_a", "bench_b"]
    params = bench.control("bench_a").config().get("parameters", {})
    assert params["time_scale"]["string_value"] == "3"
