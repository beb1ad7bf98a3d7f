"""``scripts/reliability.py``: runs the chosen cases and writes the report (the package's
docstring says what each case does).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time

from benchmarks.procinfo import find_stub
from server_ops.launcher import TritonServer
from . import __doc__ as _PACKAGE_DOC
from .drip import DripServer, case_drip
from .fixtures import (CaseResult, Context, DEFAULT_OUT, EXPLICIT, NATIVE, REPO_ROOT, TIME_SCALE,
                       capacity, prepare_repository)
from .hostile import case_hostile
from .overload import case_burst, case_native_overload, case_overload, case_timeout
from .report import bounds_legend, machine_notes, previous_report, report_case, table
from .servers import ServerStop
from .soak import case_soak
from .stall import case_stall
from .stub_kill import case_kill_hold, case_kill_release


CASES = {"overload": case_overload, "timeout": case_timeout, "burst": case_burst, "soak": case_soak,
         "native": case_native_overload,
         "kill-hold": case_kill_hold, "kill-release": case_kill_release,
         "hostile": case_hostile, "drip": case_drip, "stall": case_stall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_PACKAGE_DOC.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short cases (make test)")
    parser.add_argument("--case", action="append", choices=sorted(CASES),
                        help="run only these cases (default: all)")
    parser.add_argument("--out", default=None,
                        help="report path (full run default: results/reliability.md; "
                             "--quick prints only)")
    parser.add_argument("--strict", action="store_true",
                        help="warnings fail the run too")
    parser.add_argument("--details", action="store_true",
                        help="print the per-second buckets too")
    args = parser.parse_args(argv)
    exe = sys.executable
    if os.path.abspath(exe).startswith(REPO_ROOT + os.sep):
        exe = os.path.relpath(exe, REPO_ROOT)
    command = " ".join(shlex.quote(a) for a in [
        exe, "scripts/reliability.py", *(argv if argv is not None else sys.argv[1:])])
    cap, t4 = capacity()
    max_queue = t4.scheduler.max_queued_requests
    print(f"capacity of {EXPLICIT} (t4, padded, time scale {TIME_SCALE:g}): {cap:.1f} req/s",
          flush=True)
    names = args.case or list(CASES)
    out = args.out or (None if args.quick else DEFAULT_OUT)
    # A run of some cases keeps the other cases' rows of the last report (marked so).
    previous_rows, previous_blocks = (previous_report(out) if out and args.case
                                      else ({}, {}))
    results: list[CaseResult] = []
    drip = DripServer()
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        repo = prepare_repository(tmp, drip.url)
        log = os.path.join(tmp, "tritonserver.log")
        server = TritonServer(repo, log_path=log, exit_timeout_s=15, extra_args=(
            "--model-control-mode=explicit", f"--load-model={EXPLICIT}",
            f"--load-model={NATIVE}"))
        started = time.monotonic()
        try:
            with ServerStop(server, "server stop (after the cases)", results):
                print(f"server ready in {time.monotonic() - started:.1f} s "
                      f"(gRPC {server.grpc_url})", flush=True)
                ctx = Context(server, repo, cap, max_queue, args.quick, drip=drip, tmp=tmp)
                for model in (EXPLICIT, NATIVE):
                    ctx.stubs[model] = find_stub(server.process.pid, model)
                for name in names:
                    t = time.monotonic()
                    case = CASES[name](ctx)
                    for row in (case, *ctx.extra_rows):
                        results.append(row)
                        report_case(row, time.monotonic() - t, args.strict)
                    ctx.extra_rows.clear()
            report_case(results[-1], time.monotonic() - started, args.strict)  # the stop
        finally:
            drip.close()
            failed = any(not c.passed for c in results)
            if failed and os.path.exists(log):
                with open(log, errors="replace") as fh:
                    tail = fh.read().splitlines()[-30:]
                print("--- tritonserver log (tail) ---\n" + "\n".join(tail), file=sys.stderr)
    ran = {c.name for c in results if c.ran}
    kept = {n: row for n, row in previous_rows.items() if n not in ran}
    kept_note = ([f"Rows marked *(previous run)* ({', '.join(kept)}) were not rerun by this "
                  f"command: they are copied from the report it replaced.", ""]
                 if kept else [])
    report = "\n".join([
        "# Reliability suite", "", "```bash", command, "```", "", machine_notes(), "",
        table(results, kept), "", *kept_note, bounds_legend(), ""])
    print("\n" + report)
    if args.details:
        for c in results:
            if c.details:
                print("\n".join(c.details))
    if out:
        with open(out, "w") as fh:
            fh.write(report)
            details = [line for c in results for line in c.details]
            details += [line for n, block in previous_blocks.items() if n not in ran
                        for line in block]
            if details:
                fh.write("\n## Per-second latency (recovery analysis)\n\n" + "\n".join(details))
        print(f"wrote {out}")
    ok = bool(results) and all(c.passed for c in results)
    return 0 if ok else 1
