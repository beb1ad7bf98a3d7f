"""Does a perf_analyzer 2.51 replay hang, and with how many requests unsent? The replay that
``explicit-batching compare`` makes and its test runs (tests/integration/test_compare_cmd.py),
again and again: the shipped repository's ``emulated_native`` model (Triton's own batcher in
front of the EMULATED t4, time scale 5), 65 requests of the compare workload at 20 req/s
(``--async --request-intervals --request-count 65``), over HTTP and over gRPC, while
``--hogs`` busy processes keep the two cores as busy as a test run does.

    .venv/bin/python scripts/pa_lost_sends.py [--runs 150] [--out FILE]

A replay of N requests waits until N answers are in (count windows). A run that has not
finished after ``3 x`` its trace plus 20 s is killed and counted as hung, with the number of
requests the server answered during it (Triton's own statistics, read after the run
settles).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from benchmarks.pages import write_page
from benchmarks.repository import copy_model
from operator_tools import perf_analyzer as pa
from operator_tools.compare.cli import build_workload
from operator_tools.compare.segments import write_inputs
from operator_tools.measure import ended_count
from server_ops.launcher import TritonServer

MODEL = "emulated_native"
PROFILES_OF = "emulated_explicit"
TIME_SCALE = 5.0
RATE_RPS, DURATION_S = 20.0, 3.0  # the compare test's workload
SETTLE_S = 2.0  # after a killed run, before the server's count is read


def _hog() -> None:
    while True:
        sum(range(10_000))


def one_replay(server: TritonServer, protocol: str, files: tuple[str, str], count: int,
               timeout_s: float, export: str) -> tuple[bool, int]:
    """(finished, requests the server ended during the run): ``--request-count`` with
    perf_analyzer's default workers (``replay_trace`` runs one)."""
    intervals, data = files
    url = server.grpc_url if protocol == "grpc" else server.http_url
    http = f"http://{server.http_url}"
    before = ended_count(http, MODEL)
    run = pa.run_exported(url, MODEL, data, ("--request-intervals", intervals,
                                             "--request-count", str(count)),
                          export, protocol, timeout_s)
    if run.error and run.error.startswith(pa.REPLAY_HUNG):
        time.sleep(SETTLE_S)
    return run.error is None, ended_count(http, MODEL) - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=150, help="replays per protocol")
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the run")
    parser.add_argument("--protocols", nargs="+", default=["http", "grpc"])
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "results", "pa_lost_sends.md"))
    args = parser.parse_args()
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        offsets_ms, entries, _ = build_workload(
            None, None, None, TIME_SCALE, 200.0, arrival=None, rate=RATE_RPS, lengths=None,
            sla_classes=None, duration_s=DURATION_S, seed=None)
        intervals, _, data, _ = write_inputs(tmp, offsets_ms, entries)
        count, timeout_s = len(offsets_ms), 3 * offsets_ms[-1] / 1000.0 + 20
        repo = os.path.join(tmp, "model_repository")
        copy_model(PROFILES_OF, repo)  # its profiles folder: the native model's profile_dir
        copy_model(MODEL, repo, params={"time_scale": f"{TIME_SCALE:g}"})
        for h in hogs:
            h.start()
        try:
            with TritonServer(repo, log_path=os.path.join(tmp, "server.log"), exit_timeout_s=10,
                              extra_args=("--model-control-mode=explicit",
                                          f"--load-model={MODEL}")) as server:
                for protocol in args.protocols:
                    hung = []
                    for k in range(args.runs):
                        ok, seen = one_replay(server, protocol, (intervals, data), count,
                                              timeout_s, os.path.join(tmp, "export.json"))
                        if not ok:
                            hung.append(seen)
                            print(f"{protocol} run {k + 1}: hung, the server ended {seen} of "
                                  f"{count}", flush=True)
                    rows.append(f"| {protocol} | {args.runs} | {len(hung)} | "
                                f"{', '.join(f'{s} of {count}' for s in hung) or '-'} |")
                    print(rows[-1], flush=True)
        finally:
            for h in hogs:
                h.terminate()
    text = "\n".join([
        "# perf_analyzer 2.51: replays that never finish "
        "(a worker that sleeps through its start)", "",
        f"Generated by `.venv/bin/python scripts/pa_lost_sends.py --runs {args.runs} --hogs "
        f"{args.hogs}` on this machine (2 shared cores, CPU only). One tritonserver 2.51 with "
        f"the shipped `{MODEL}` (Triton's dynamic batcher in front of the EMULATED t4 device, "
        f"time scale {TIME_SCALE:g}); perf_analyzer 2.51 replays the compare test's trace, "
        f"{count} requests of the compare workload at {RATE_RPS:g} req/s (`--async "
        "--request-intervals --request-count`), again and again, first over one protocol, "
        f"then the other, with {args.hogs} busy processes beside it. A run is hung when it "
        f"has not finished after {timeout_s:.0f} s; the server's own count of the requests "
        "it ended during that run follows.", "",
        "| protocol | runs | hung | requests the server ended in each hung run |",
        "|---|---:|---:|---|", *rows, ""])
    write_page(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
