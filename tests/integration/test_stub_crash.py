"""A stub crash loses no request: ``kill -9`` of the plugin's Python stub with requests
queued (intake: hold) - every client gets exactly one answer - and the stub supervisor
reloads the model, which then serves again. States are facts, not sleeps: the supervisor's
own view of the stubs, Triton's pending count, a held device (tests/integration/gates.py)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.eventually import eventually
from tests.integration.collector import Collector
from tests.integration.gates import DeviceGate, wait_pending
from tests.integration.models import emulated_copy, grpc_inputs
from server_ops.supervisor import StubSupervisor, stub_pids
from server_ops.intake_config import hold_config

pytestmark = pytest.mark.integration
MODEL = "held_explicit"
PRIORITY_MODEL = "prio_explicit"  # hold, hand-over 4, two priority levels
RNG = np.random.default_rng(13)


def held_model(repo: str, name: str, time_scale: float, gate: str, **hold) -> None:
    """A copy of emulated_explicit with intake: hold behind Triton's dynamic batcher, and
    a device gate at the file ``gate``."""
    emulated_copy(repo, name, lambda config: hold_config(config, **hold), time_scale,
                  extra=f'parameters {{ key: "device_gate_file" value: {{ string_value: '
                        f'"{gate}" }} }}\n')


@pytest.fixture(scope="module")
def crash_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    base = tmp_path_factory.mktemp("crash")
    repo = str(base / "repo")
    os.makedirs(repo)
    gates = {m: str(base / f"{m}.gate") for m in (MODEL, PRIORITY_MODEL)}
    held_model(repo, MODEL, time_scale=10, gate=gates[MODEL])
    held_model(repo, PRIORITY_MODEL, time_scale=10, gate=gates[PRIORITY_MODEL],
               max_hand_over=4, priority_levels=2)
    # (exit timeout 5 s: after the kill test Triton 2.51 holds the stop that long, see
    # test_server_stop.py)
    srv = TritonServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=5,
                       extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}",
                                   f"--load-model={PRIORITY_MODEL}"))
    srv.gates = {m: DeviceGate(path) for m, path in gates.items()}
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
    """With intake: hold, Triton's request priority orders its queue's hand-over: with the
    device held by a blocker, 24 priority-2 requests queue, then 4 priority-1 ones (Triton's
    pending count says when each group is in); released, the 4 come over first (hand-over 4
    a call) and are answered before any priority-2 one."""
    server, _, _ = crash_server
    gate, url = server.gates[PRIORITY_MODEL], server.metrics_url
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results = Collector()
    order: list[int] = []  # request indices in the order their answers came

    def callback(i):
        inner = results.callback(i)

        def cb(result, error):
            with results.lock:
                order.append(i)
            inner(result, error)
        return cb

    try:
        held = gate.held()
        with gate.closed():
            client.async_infer(PRIORITY_MODEL, _inputs(16), callback(0))
            gate.wait_held(held + 1)
            for i in range(1, 25):
                client.async_infer(PRIORITY_MODEL, _inputs(64), callback(i), priority=2)
            wait_pending(url, PRIORITY_MODEL, 24)
            for i in range(25, 29):
                client.async_infer(PRIORITY_MODEL, _inputs(64), callback(i), priority=1)
            wait_pending(url, PRIORITY_MODEL, 28)
        results.wait(29)
        errors = {i: err for i, [(_, err)] in results.calls.items() if err is not None}
        assert not errors, errors
        print(f"completion order: {order}")
        assert order[0] == 0 and sorted(order[1:5]) == [25, 26, 27, 28], order
    finally:
        gate.open()
        client.close()


def test_kill_9_of_the_stub_with_requests_queued_loses_none(crash_server):
    """kill -9 of the stub while a call is under way (its device held by the gate) and 100
    requests wait in Triton's queue behind it (Triton's pending count): every request gets
    exactly one answer, the call's own requests an error."""
    server, supervisor, log = crash_server
    gate = server.gates[MODEL]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results = Collector()
    try:
        assert client.infer(MODEL, _inputs(16)).as_numpy("EMBEDDING").shape == (1, 384)
        (stub,) = stub_pids(server.process.pid, MODEL)
        eventually(lambda: stub in supervisor.seen(MODEL), what="the supervisor saw the stub")
        queued = 100  # within Triton's queue bound (hold_config's max_queue_size)
        held = gate.held()
        with gate.closed():
            client.async_infer(MODEL, _inputs(512), results.callback(0))
            gate.wait_held(held + 1)
            for i in range(1, queued + 1):
                client.async_infer(MODEL, _inputs(512), results.callback(i))
            wait_pending(server.metrics_url, MODEL, queued)
            killed_at = time.monotonic()
            os.kill(stub, signal.SIGKILL)
        results.wait(queued + 1)  # exactly one answer each (a hang guard of 60 s each)
        codes: dict[str, int] = {}
        for [(_, err)] in results.calls.values():
            code = "OK" if err is None else str(err.status())
            codes[code] = codes.get(code, 0) + 1
        print(f"sent={queued + 1} codes={codes} answered by "
              f"{time.monotonic() - killed_at:.1f} s after the kill")
        [(_, err)] = results.calls[0]
        assert err is not None, "the call under way at the kill was answered as if computed"

        # The supervisor reloads the model; it serves again.
        eventually(lambda: supervisor.reloads[MODEL] > 0, what=f"a reload after the crash: {log}")
        print(f"reloaded {time.monotonic() - killed_at:.1f} s after the kill: {log}")
        assert client.infer(MODEL, _inputs(16)).as_numpy("EMBEDDING").shape == (1, 384)
        assert stub_pids(server.process.pid, MODEL) and stub not in stub_pids(
            server.process.pid, MODEL)
    finally:
        client.close()
