"""The stub-kill cases: ``kill -9`` of an explicit model's stub mid-load, under intake
hold (``kill_hold``: Triton fails its requests) and release (``kill_release``).
"""

from __future__ import annotations

import os
import signal
import threading
import time

from benchmarks.loadgen import Arrival, LoadGenerator
from server_ops.launcher import TritonServer
from server_ops.supervisor import StubSupervisor, stub_pids
from .fixtures import (CRASH_ANSWER_BOUND_S, CRASH_KILL_AT_S, CRASH_MIN_QUEUED, CRASH_REQUESTS,
                       CRASH_SEQ_LEN, CRASH_SLA_MS, CaseResult, Context, HOLD, RELEASE,
                       RELEASE_CLIENT_TIMEOUT_S, RELOAD_BOUND_S, SEED, Tally)
from .servers import (SERVER_ABORT_DOCUMENTED, http_ready, infer_error, on_own_server,
                      server_abort_notes)


def run_stub_kill(ctx: Context, server: TritonServer, model: str, name: str,
                  comparison: bool) -> CaseResult:
    """kill -9 of ``model``'s stub with CRASH_REQUESTS requests queued; the stub supervisor
    reloads it. ``comparison`` (intake release): clients give up after
    RELEASE_CLIENT_TIMEOUT_S, since the backend keeps nothing for released requests."""
    case = CaseResult(name, None, comparison=comparison)
    notes, fails = case.notes, case.failures
    why = infer_error(server, model)
    stubs = stub_pids(server.process.pid, model)
    if why or len(stubs) != 1:
        fails.append(f"{model} not serving before the kill ({why}; stubs {sorted(stubs)})")
        case.tally = Tally()
        return case
    (stub,) = stubs
    log: list[str] = []
    supervisor = StubSupervisor(server.process.pid, server.http_url, [model],
                                period_s=0.25, log=log.append).start()
    try:
        time.sleep(0.6)  # the supervisor has seen the stub
        kill: dict = {}

        def kill_later(t0: float) -> None:
            def fire() -> None:
                kill["at_s"] = time.monotonic() - t0
                kill["mono"] = time.monotonic()
                os.kill(stub, signal.SIGKILL)  # ours: a child of the server we started
            kill["timer"] = threading.Timer(
                max(0.0, t0 + CRASH_KILL_AT_S - time.monotonic()), fire)
            kill["timer"].start()

        arrivals = [Arrival(i * 0.002, CRASH_SEQ_LEN, CRASH_SLA_MS)
                    for i in range(CRASH_REQUESTS)]
        timeout = RELEASE_CLIENT_TIMEOUT_S if comparison else None
        # The drain ends CRASH_ANSWER_BOUND_S after the kill (a request unanswered by
        # then is LOST) or, with a client timeout, after it.
        drain = (CRASH_KILL_AT_S - arrivals[-1].time_s
                 + (timeout + 5.0 if timeout else CRASH_ANSWER_BOUND_S))
        gen = LoadGenerator(server.grpc_url, model, clients=4, client_timeout_s=timeout,
                            seed=SEED)
        result = gen.run(arrivals, drain_timeout_s=drain, on_start=kill_later)
        kill["timer"].join()
        case.result = result
        kill_at = kill["at_s"]
        queued = sum(1 for r in result.records if r.sent_s is not None
                     and r.sent_s <= kill_at and (r.response_s is None
                                                  or r.response_s > kill_at))
        answers = [r.response_s - kill_at for r in result.records
                   if r.response_s is not None and r.outcome != "DEADLINE_EXCEEDED"
                   and r.response_s > kill_at]
        last_s = max(answers) if answers else None
        notes.append(f"{CRASH_REQUESTS} requests x {CRASH_SEQ_LEN} tokens sent in "
                     f"{arrivals[-1].time_s:.1f} s; kill -9 of stub {stub} at "
                     f"{kill_at:.1f} s with {queued} unanswered (bound >= "
                     f"{CRASH_MIN_QUEUED}); on a server of its own")
        notes.append(f"last server answer {last_s:.1f} s after the kill" if last_s
                     is not None else "no server answer after the kill")
        codes = [c for c in result.errors_by_code if c != "DEADLINE_EXCEEDED"]
        for code in codes:
            notes.append(f"{code} e.g. {result.messages(code, 1)[0][:120]!r}")
        if result.client_timeouts:
            notes.append(f"{result.client_timeouts} clients timed out after "
                         f"{timeout:g} s: no answer from the server (intake release "
                         f"keeps nothing for them)")
        if queued < CRASH_MIN_QUEUED:
            fails.append(f"only {queued} requests unanswered at the kill "
                         f"(< {CRASH_MIN_QUEUED}): the kill tested too little")
        if result.duplicates:
            fails.append(f"{result.duplicates} requests answered twice")
        if not comparison and last_s is not None and last_s > CRASH_ANSWER_BOUND_S:
            fails.append(f"last answer {last_s:.1f} s after the kill > "
                         f"{CRASH_ANSWER_BOUND_S:g} s")
        deadline = kill["mono"] + RELOAD_BOUND_S
        while supervisor.reloads[model] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        reloaded = supervisor.reloads[model] > 0
    finally:
        supervisor.stop()
    if server.process.poll() is not None:
        # A kill that lands while the stub holds the shared-memory lock aborts the whole
        # server (Triton 2.51; the same corrupted mutex as a stall): nothing to reload.
        case.healthy = "no: tritonserver aborted after the kill"
        case.documented = SERVER_ABORT_DOCUMENTED
        notes.extend(server_abort_notes(server))
        notes.append("; ".join(log))
        return case
    why = infer_error(server, model)
    if reloaded and why is None:
        case.healthy = "yes (reloaded by the supervisor, answers)"
        notes.append("; ".join(log))
    elif not http_ready(server, model):
        case.healthy = "no: model reports not ready"
        fails.append(f"not reloaded and answering within {RELOAD_BOUND_S:g} s of the kill "
                     f"(supervisor: {log})")
    else:
        case.healthy = f"no: model READY but fails ({why})"
        fails.append(f"model reports ready but does not serve after the kill ({why}; "
                     f"supervisor: {log})")
    if stub in stub_pids(server.process.pid, model):
        fails.append(f"killed stub {stub} still listed")
    return case


# Triton 2.51 keeps a model version counted as live until it exits when its stub died with
# an execute() call in flight (reproduced with a ten-line Python model; unloading or
# reloading it does not help): that server waits its whole exit timeout at shutdown. So
# the kill cases run on servers of their own, and their stop rows say so.
KILLED_STUB_STOP = ("Triton 2.51 counts a version whose stub died inside execute() as live "
                    "until exit, so this server waits its exit timeout (docs/reliability.md, Stub "
                    "crashes and stalls)")


def case_kill_hold(ctx: Context) -> CaseResult:
    return on_own_server(ctx, HOLD, "stub kill -9, intake hold", KILLED_STUB_STOP,
                         lambda server: run_stub_kill(ctx, server, HOLD,
                                                      "stub kill -9 (intake hold)",
                                                      comparison=False))


def case_kill_release(ctx: Context) -> CaseResult:
    name = "stub kill -9 (intake release, comparison)"
    if ctx.quick:
        return CaseResult(name, None, skipped="skipped in --quick")
    return on_own_server(ctx, RELEASE, "stub kill -9, intake release", KILLED_STUB_STOP,
                         lambda server: run_stub_kill(ctx, server, RELEASE, name,
                                                      comparison=True), release=True)
