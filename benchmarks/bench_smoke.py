"""Smoke load: perf_analyzer at one fixed request rate against emulated_explicit and
emulated_native (EMULATED device, t4 profile) in the same server, one table.

Starts its own tritonserver on free ports unless --url points at a running one.
The two models get the same sequences in the same order (mixed_sla.json carries SLA_MS
for the explicit model; mixed.json is the same data without it for the native one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from operator_tools.perf_analyzer import markdown_table, run_request_rate
from server_ops.launcher import TritonServer

CONFIGS = os.path.join(REPO_ROOT, "perf_analyzer_configs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="HTTP host:port of a running server (default: start one)")
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second")
    parser.add_argument("--measurement-ms", type=int, default=4000)
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        url = args.url
        if not url:
            server = stack.enter_context(TritonServer(log_path=os.devnull))
            url = server.http_url
        results = [
            run_request_rate(url, "emulated_explicit", os.path.join(CONFIGS, "mixed_sla.json"),
                             args.rate, args.measurement_ms),
            run_request_rate(url, "emulated_native", os.path.join(CONFIGS, "mixed.json"),
                             args.rate, args.measurement_ms),
        ]
    print(f"\nbench-smoke: perf_analyzer --async --request-rate-range {args.rate:g}, "
          f"EMULATED t4 device (time scale 1.0), mixed lengths 16-512\n")
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
