"""A stub crash loses no request: ``kill -9`` of the plugin's Python stub with requests
queued (intake: hold) - every client gets exactly one answer, within 30 s - and the stub
supervisor reloads the model, which then serves again."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.models import emulated_copy, grpc_inputs
from triton_backend.supervisor import StubSupervisor, stub_pids
from triton_backend.intake_config import hold_config

pytestmark = pytest.mark.integration
MODEL = "held_explicit"
PRIORITY_MODEL = "prio_explicit"  # hold, hand-over 4, two priority levels
RNG = np.random.default_rng(13)


def held_model(repo: str, name: str, time_scale: float, **hold) -> None:
    """A copy of emulated_explicit with intake: hold behind Triton's dynamic batcher."""
    emulated_copy(repo, name, lambda config: hold_config(config, **hold), time_scale)


@pytest.fixture(scope="module")
def crash_server(tmp_path_factory):
    from triton_backend.launcher import TritonServer

    base = tmp_path_factory.mktemp("crash")
    repo = str(base / "repo")
    os.makedirs(repo)
    held_model(repo, MODEL, time_scale=10)
    held_model(repo, PRIORITY_MODEL, time_scale=10, max_hand_over=4, priority_levels=2)
    # (exit timeout 5 s: after the kill test Triton 2.51 holds the stop that long, see
    # test_server_stop.py)
    srv = TritonServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=5,
                       extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}",
                                   f"--load-model={PRIORITY_MODEL}"))
    with srv:
        log: list[str] = []
        sup = StubSupervisor(srv.process.pid, srv.http_url, [MODEL], period_s=0.25,
                             log=log.append).start()
        try:
            yield srv, sup, log
        finally:
            sup.stop()
    for pid in stub_pids(srv.process.pid, MODEL):  # a stub left behind is the test's bug
        os.kill(pid, signal.SIGKILL)


def _inputs(n: int):
    return grpc_inputs(RNG, n)


def test_held_intake_hands_higher_priority_over_first(crash_server):
    """With intake: hold, Triton's request priority orders its queue's hand-over: 4
    priority-1 requests sent after 24 priority-2 ones finish ahead of most of them."""
    server, _, _ = crash_server
    client = grpcclient.InferenceServerClient(server.grpc_url)
    finished: list[tuple[float, int]] = []
    lock = threading.Lock()

    def callback(priority):
        def cb(result, error):
            assert error is None, error
            with lock:
                finished.append((time.monotonic(), priority))
        return cb

    try:
        client.infer(PRIORITY_MODEL, _inputs(16))
        for _ in range(24):
            client.async_infer(PRIORITY_MODEL, _inputs(512), callback(2), priority=2)
        for _ in range(4):
            client.async_infer(PRIORITY_MODEL, _inputs(512), callback(1), priority=1)
        deadline = time.monotonic() + 60
        while len(finished) < 28:
            assert time.monotonic() < deadline, f"{len(finished)} of 28 answered"
            time.sleep(0.1)
        order = [p for _, p in sorted(finished)]
        last_high = max(i for i, p in enumerate(order) if p == 1)
        print(f"completion order: {order}")
        assert order[last_high + 1:].count(2) >= 12, order  # most low ones finish after
    finally:
        client.close()


def test_kill_9_of_the_stub_with_requests_queued_loses_none(crash_server):
    server, supervisor, log = crash_server
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: dict[int, list] = {}
    lock = threading.Lock()

    def callback(i):
        def cb(result, error):
            with lock:
                answers.setdefault(i, []).append((time.monotonic(), error))
        return cb

    try:
        assert client.infer(MODEL, _inputs(16)).as_numpy("EMBEDDING").shape == (1, 384)
        (stub,) = stub_pids(server.process.pid, MODEL)
        time.sleep(0.5)  # the supervisor has seen it
        sent = 150
        for i in range(sent):  # 512 tokens x 10x slow-down: ~0.3 s a batch, seconds of work
            client.async_infer(MODEL, _inputs(512), callback(i))
        time.sleep(1.0)
        killed_at = time.monotonic()
        os.kill(stub, signal.SIGKILL)
        deadline = killed_at + 30
        while time.monotonic() < deadline:
            with lock:
                if len(answers) == sent:
                    break
            time.sleep(0.2)
        time.sleep(0.5)  # a second answer would arrive now
        with lock:
            got = dict(answers)
        lost = sent - len(got)
        codes = {}
        for calls in got.values():
            err = calls[0][1]
            code = "OK" if err is None else str(err.status())
            codes[code] = codes.get(code, 0) + 1
        last_s = max(t for calls in got.values() for t, _ in calls) - killed_at
        print(f"sent={sent} answered={len(got)} lost={lost} codes={codes} "
              f"last answer {last_s:.1f} s after the kill")
        assert lost == 0
        assert all(len(calls) == 1 for calls in got.values()), "a request answered twice"
        assert codes.get("OK", 0) < sent, "the kill came too late to test anything"

        # The supervisor reloads the model; it serves again within seconds.
        deadline = time.monotonic() + 30
        while supervisor.reloads[MODEL] == 0:
            assert time.monotonic() < deadline, f"no reload after the crash: {log}"
            time.sleep(0.2)
        recovered_s = time.monotonic() - killed_at
        print(f"reloaded {recovered_s:.1f} s after the kill: {log}")
        assert client.infer(MODEL, _inputs(16)).as_numpy("EMBEDDING").shape == (1, 384)
        assert stub_pids(server.process.pid, MODEL) and stub not in stub_pids(
            server.process.pid, MODEL)
    finally:
        client.close()
