"""Run perf_analyzer 2.51 (from the venv) and read its CSV result."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRAPPER = os.path.join(REPO_ROOT, "scripts", "perf_analyzer")
FELL_BEHIND = "not able to keep up with the desired request rate"


@dataclass(frozen=True)
class PerfResult:
    model: str
    request_rate: float
    throughput: float  # responses per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    server_queue_ms: float
    kept_schedule: bool  # False when perf_analyzer said it fell behind the request rate
    output: str


def run_request_rate(url: str, model: str, input_data: str, rate: float,
                     measurement_ms: int = 4000, protocol: str = "http",
                     extra: tuple[str, ...] = (), timeout_s: float = 300) -> PerfResult:
    """One open-loop perf_analyzer run (``--async --request-rate-range rate``)."""
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = os.path.join(tmp, "result.csv")
        cmd = [WRAPPER, "-m", model, "-u", url, "-i", protocol, "--async",
               "--input-data", input_data, "--request-rate-range", f"{rate:g}",
               "--measurement-interval", str(measurement_ms), "-f", csv_path, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        output = proc.stdout + proc.stderr
        if proc.returncode != 0 or not os.path.exists(csv_path):
            raise RuntimeError(f"perf_analyzer failed ({proc.returncode}) for {model}:\n{output}")
        with open(csv_path) as fh:
            row = next(csv.DictReader(fh))
    us = lambda key: float(row[key]) / 1000.0  # noqa: E731 - CSV latencies are in microseconds
    return PerfResult(model=model, request_rate=rate,
                      throughput=float(row["Inferences/Second"]),
                      p50_ms=us("p50 latency"), p90_ms=us("p90 latency"),
                      p99_ms=us("p99 latency"), server_queue_ms=us("Server Queue"),
                      kept_schedule=FELL_BEHIND not in output, output=output)


def markdown_table(results: list[PerfResult]) -> str:
    lines = ["| model | offered rate (req/s) | throughput (req/s) | p50 (ms) | p90 (ms) | "
             "p99 (ms) | load generator kept schedule |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r.model} | {r.request_rate:g} | {r.throughput:.1f} | {r.p50_ms:.2f} | "
                     f"{r.p90_ms:.2f} | {r.p99_ms:.2f} | {'yes' if r.kept_schedule else 'NO'} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - manual use
    print(run_request_rate(*sys.argv[1:5]))
