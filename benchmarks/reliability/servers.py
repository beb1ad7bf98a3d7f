"""Talking to the suite's servers: a model's health, load and unload, a server's abort
notes, a case on a server of its own, and how a server stops.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable

from server_ops.launcher import TritonServer
from server_ops.supervisor import stub_pids
from .fixtures import CaseResult, Context, Tally, copy_explicit, load_average


def http_client(server: TritonServer, timeout_s: float = 30.0):
    import tritonclient.http as httpclient
    return httpclient.InferenceServerClient(server.http_url, connection_timeout=timeout_s,
                                            network_timeout=timeout_s)


def infer_error(server: TritonServer, model: str, timeout_s: float = 10.0) -> str | None:
    """None when ``model`` answers one short inference (HTTP), else why not."""
    import numpy as np
    import tritonclient.http as httpclient
    try:
        client = http_client(server, timeout_s)
        try:
            ids = httpclient.InferInput("INPUT_IDS", [1, 6], "INT64")
            ids.set_data_from_numpy(np.array([[101, 2023, 2003, 1037, 3231, 102]],
                                             dtype=np.int64))
            out = client.infer(model, [ids]).as_numpy("EMBEDDING")
        finally:
            client.close()
    except Exception as exc:  # refused, down, timed out: all "not serving"
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    return None if out is not None and out.shape == (1, 384) else "wrong output shape"


SERVER_ABORT_DOCUMENTED = "documented (docs/reliability.md: Stub crashes and stalls)"


def server_abort_notes(server: TritonServer) -> list[str]:
    """What an aborted tritonserver left: its exit code and the log's first abort line."""
    rc = server.process.returncode
    notes = [f"tritonserver aborted (exit {rc}" + (f", signal {-rc}" if rc < 0 else "") + ")"]
    with open(server.log_path, errors="replace") as fh:
        cause = [line.strip() for line in fh if "lock_exception" in line
                 or "terminate called" in line]
    if cause:
        notes.append(f"log: {cause[0][:120]!r}")
    return notes


def health_after(server: TritonServer, model: str) -> str:
    """'yes' when the server is up and ready and ``model`` answers an inference."""
    if server.process is None or server.process.poll() is not None:
        return f"no: server exited ({server.process.returncode if server.process else '-'})"
    if not server.is_ready():
        return "no: server not ready"
    why = infer_error(server, model)
    return "yes" if why is None else f"no: {model} fails ({why})"


def load(server: TritonServer, model: str) -> float:
    """Load ``model`` (explicit model control); seconds it took."""
    return server.load_model(model, timeout_s=120.0)


def unload(server: TritonServer, model: str, case: CaseResult) -> None:
    """Unload ``model`` and wait for its stubs to go; a stub still there after 30 s is
    killed by PID and counts as a failure of the case."""
    try:
        server.unload_model(model)
    except Exception as exc:
        case.failures.append(f"unload of {model} failed: {exc}")
    deadline = time.monotonic() + 30.0
    while stub_pids(server.process.pid, model) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = stub_pids(server.process.pid, model)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    if left:
        case.failures.append(f"stub(s) {sorted(left)} still running 30 s after the unload "
                             f"(killed by PID)")


def http_ready(server: TritonServer, model: str) -> bool:
    try:
        client = http_client(server, 5.0)
        try:
            return bool(client.is_model_ready(model))
        finally:
            client.close()
    except Exception:
        return False


OWN_SERVER_EXIT_TIMEOUT_S = 5


def on_own_server(ctx: Context, model: str, label: str, expected_stop: str,
                  run: Callable[[TritonServer], CaseResult], **copy_args) -> CaseResult:
    """Run ``run(server)`` on a server of its own holding a copy of emulated_explicit named
    ``model``; its stop becomes a row of its own (``expected_stop``: documented when the
    stop runs into the exit timeout)."""
    repo = os.path.join(ctx.tmp, f"{model}_repository")
    os.makedirs(repo)
    copy_explicit(repo, model, **copy_args)
    server = TritonServer(repo, log_path=os.path.join(ctx.tmp, f"{model}-tritonserver.log"),
                          exit_timeout_s=OWN_SERVER_EXIT_TIMEOUT_S,
                          extra_args=("--model-control-mode=explicit", f"--load-model={model}"))
    stops: list[CaseResult] = []
    with ServerStop(server, f"server stop ({label})", stops, expected=expected_stop):
        case = run(server)
    ctx.extra_rows.extend(stops)
    return case


EXIT_TIMEOUT_EXPIRED = "Exit timeout expired"  # tritonserver's log line when it gives up


class ServerStop:
    """Runs a server (context manager) and, when it stops, adds a row for the stop: PASS
    when tritonserver exited by itself within its exit timeout (exit code 0, no "Exit
    timeout expired" in its log), with what it still waited for when it did not."""

    def __init__(self, server: TritonServer, name: str, results: list,
                 expected: str = ""):
        self.server, self.name, self.results = server, name, results
        self.expected = expected  # a documented reason the stop runs into the timeout

    def __enter__(self) -> TritonServer:
        self.server.start()
        try:
            self.server.wait_ready()
        except BaseException:
            self.server.stop()
            raise
        return self.server

    def __exit__(self, *exc) -> None:
        self.results.append(stop_case(self.server, self.name, self.expected))


def stop_case(server: TritonServer, name: str, expected: str = "") -> CaseResult:
    """Stop ``server`` (SIGINT, the launcher's wait) and judge the stop."""
    case = CaseResult(name, None, tally=Tally())
    started = time.monotonic()
    rc = server.stop()
    took = time.monotonic() - started
    with open(server.log_path, errors="replace") as fh:
        lines = fh.read().splitlines()
    shutdown = lines[next((i for i, line in enumerate(lines) if "Signal (2)" in line), 0):]
    expired = any(EXIT_TIMEOUT_EXPIRED in line for line in shutdown)
    waiting = sorted({line.split('"')[1].split(": ", 1)[-1] for line in shutdown
                      if "Timeout " in line and '"' in line and "Found 0 " not in line})
    case.notes.append(f"stopped in {took:.1f} s (exit timeout {server.exit_timeout_s} s), "
                      f"exit code {rc}; load average {load_average()}")
    if waiting:
        case.notes.append("waited for: " + "; ".join(waiting[:3]))
    if expired or rc != 0:
        why = (f"tritonserver gave up at its {server.exit_timeout_s} s exit timeout "
               f"({EXIT_TIMEOUT_EXPIRED!r} in its log)" if expired else f"exit code {rc}")
        if expected:
            case.documented = f"documented: {expected}"
            case.notes.append(why)
        else:
            case.failures.append(why)
    case.healthy = "n/a (stopped)"
    return case
