"""The stall case: a stub that stops answering, on a server of its own.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time

from benchmarks.loadgen import LoadGenerator, fixed_rate
from benchmarks.procinfo import is_stub
from server_ops.launcher import TritonServer
from server_ops.supervisor import StubSupervisor, stub_pids
from .fixtures import (CaseResult, Context, SEED, SLA_CLASSES_MS, STALL, STALL_AT_S,
                       STALL_CLIENT_TIMEOUT_S, STALL_FOR_S, STALL_RATE_RPS, STALL_RUN_S, Tally,
                       copy_explicit)
from .servers import SERVER_ABORT_DOCUMENTED, health_after, server_abort_notes

STALL_RELOAD_WAIT_S = 60.0  # a supervisor's reload under way, waited for before the check


def case_stall(ctx: Context) -> CaseResult:
    """SIGSTOP of a stub for STALL_FOR_S under light load, on a server of its own, the stub
    supervisor running. Triton 2.51 fails the calls in flight when a stub with work stalls
    > ~1 s, and at SIGCONT the stub exits; the server then aborts, or survives with the
    model failing every request until it is reloaded, which the supervisor does
    (docs/reliability.md, "Stub crashes and stalls")."""
    name = f"stub SIGSTOP {STALL_FOR_S:g} s"
    if ctx.quick:
        return CaseResult(name, None, skipped="skipped in --quick (a server of its own)")
    case = CaseResult(name, None)
    notes, fails = case.notes, case.failures
    repo = os.path.join(ctx.tmp, "stall_repository")
    os.makedirs(repo)
    copy_explicit(repo, STALL)
    log = os.path.join(ctx.tmp, "stall-tritonserver.log")
    server = TritonServer(repo, log_path=log, exit_timeout_s=10, extra_args=(
        "--model-control-mode=explicit", f"--load-model={STALL}"))
    stubs: set[int] = set()
    timers: list[threading.Timer] = []
    sup_log: list[str] = []
    supervisor = None
    events: dict[str, float] = {}
    server.start()
    try:
        server.wait_ready()
        stubs = stub_pids(server.process.pid, STALL)  # found now: after an abort they are orphans
        if len(stubs) != 1:
            fails.append(f"expected one stub of {STALL}, found {sorted(stubs)}")
            case.tally = Tally()
            return case
        (stub,) = stubs
        supervisor = StubSupervisor(server.process.pid, server.http_url, [STALL],
                                    period_s=0.25, log=sup_log.append).start()

        def signal_at(t0: float, at_s: float, sig: int, key: str) -> None:
            def fire() -> None:
                events[key] = time.monotonic() - t0
                try:
                    os.kill(stub, sig)
                except ProcessLookupError:
                    pass
            timers.append(threading.Timer(max(0.0, t0 + at_s - time.monotonic()), fire))
            timers[-1].start()

        def stall_later(t0: float) -> None:
            signal_at(t0, STALL_AT_S, signal.SIGSTOP, "stop")
            signal_at(t0, STALL_AT_S + STALL_FOR_S, signal.SIGCONT, "cont")

        gen = LoadGenerator(server.grpc_url, STALL, clients=2,
                            client_timeout_s=STALL_CLIENT_TIMEOUT_S, seed=SEED)
        result = gen.run(fixed_rate(STALL_RATE_RPS, STALL_RUN_S, 64, SLA_CLASSES_MS[-1]),
                         drain_timeout_s=STALL_CLIENT_TIMEOUT_S + 5.0, on_start=stall_later)
        for t in timers:
            t.join()
        case.result = result
        died = server.process.poll() is not None
        notes.append(f"own server; {STALL_RATE_RPS:g} req/s for {STALL_RUN_S:g} s; SIGSTOP of "
                     f"stub {stub} at {events.get('stop', math.nan):.1f} s, SIGCONT at "
                     f"{events.get('cont', math.nan):.1f} s; default settings (no setting "
                     f"prevents the abort: docs/reliability.md)")
        if result.errors_by_code:
            for code in result.errors_by_code:
                notes.append(f"{code} e.g. {(result.messages(code, 1) or [''])[0][:100]!r}")
        if result.client_timeouts:
            notes.append(f"{result.client_timeouts} clients gave up after "
                         f"{STALL_CLIENT_TIMEOUT_S:g} s (no server answer)")
        if result.duplicates:
            fails.append(f"{result.duplicates} requests answered twice")
        supervisor.stop(timeout_s=STALL_RELOAD_WAIT_S)  # a reload under way ends first
        case.healthy = health_after(server, STALL)
        notes.extend(sup_log)
        if died:
            case.documented = SERVER_ABORT_DOCUMENTED
            notes.extend(server_abort_notes(server))
        else:
            notes.append("tritonserver survived")
    finally:
        if supervisor is not None:
            supervisor.stop()
        for t in timers:
            t.cancel()
        for pid in stubs:  # a stopped stub would hold the server's shutdown
            if is_stub(pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        server.stop()  # reaps the server, whether it aborted or not
        left = [pid for pid in stubs if is_stub(pid)]
        for pid in left:  # orphans of an aborted server ignore SIGTERM
            os.kill(pid, signal.SIGKILL)
        if left:
            notes.append(f"killed {len(left)} leftover stub(s) by PID {left}")
        deadline = time.monotonic() + 5.0
        while any(is_stub(pid) for pid in left) and time.monotonic() < deadline:
            time.sleep(0.1)
        if any(is_stub(pid) for pid in left):
            fails.append(f"stub(s) {left} still running after SIGKILL")
    return case
