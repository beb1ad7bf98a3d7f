"""The shipped default (intake hold behind Triton's bounded queue) near and past capacity:
does the plugin's own latency figure agree with the clients', and what goodput does it
keep?

    .venv/bin/python scripts/hand_over.py [--out results/hand_over.md]

Under intake hold, requests wait in Triton's queue while the previous ``execute()`` call
runs; the plugin is not told when they arrived and estimates it
(``triton_backend.intake.hand_over_arrival``). Its deadlines, its refusals of requests
that can no longer make them, and its latency histograms all count from that estimate.
This run measures how close it is: per rate, the clients' mean latency beside the mean of
the plugin's ``request_duration_seconds`` and Triton's own mean queue wait
(``nv_inference_queue_duration_us``), and per SLA class what was met, refused and late.

One server, the shipped ``emulated_explicit`` with only the time scale changed: the
EMULATED t4 slowed 10x (SLA classes 150, 400 and 2,000 ms are not scaled: they are the
tests' classes at this scale). Lengths 8-64 tokens, evenly spaced arrivals at each rate
for 7.5 s, one rate after another on the same server after a warm-up. The device carries
about 210 req/s of this mix in arrival-order batches of 32 (padded to the longest) and
330 req/s in batches of like lengths. One run, one 2-core machine shared with the load
generator.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from benchmarks import segment_stats as B
from benchmarks.loadgen import OK, Arrival, run_load
from benchmarks.pages import write_page
from benchmarks.repository import copy_model
from sidecar.triton_metrics import fetch_url, parse_metrics, rates as triton_rates, read_samples
from server_ops.launcher import TritonServer
from triton_backend.metric_catalog import HISTOGRAM_PUBLISH_PERIOD_S, PREFIX

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "hand_over.md")
MODEL = "emulated_explicit"
TIME_SCALE = 10.0
SLA_MS = (150.0, 400.0, 2000.0)
RATES = (150.0, 200.0, 250.0, 300.0)
DURATION_S = 7.5
SEED = 12


def arrivals(rate: float) -> list[Arrival]:
    rng = np.random.default_rng(SEED)
    count = int(rate * DURATION_S)
    return [Arrival(i / rate, int(n) + 2, float(sla))
            for i, (n, sla) in enumerate(zip(rng.integers(8, 64, size=count),
                                             rng.choice(SLA_MS, size=count)))]


def plugin_mean_s(text: str) -> tuple[float, float]:
    """(sum, count) of the plugin's request_duration_seconds for MODEL, over classes."""
    total = count = 0.0
    for s in read_samples(text):
        if s.labels.get("model") != MODEL:
            continue
        if s.name == PREFIX + "request_duration_seconds_sum":
            total += s.value
        elif s.name == PREFIX + "request_duration_seconds_count":
            count += s.value
    return total, count


def measure(server: TritonServer, rate: float) -> dict:
    time.sleep(HISTOGRAM_PUBLISH_PERIOD_S + 1.0)  # the last rate's observations are out
    before = fetch_url(server.metrics_url, 5)
    result = run_load(server.grpc_url, MODEL, arrivals(rate), clients=4, drain_timeout_s=60.0)
    time.sleep(HISTOGRAM_PUBLISH_PERIOD_S + 0.5)
    after = fetch_url(server.metrics_url, 5)
    (s0, c0), (s1, c1) = plugin_mean_s(before), plugin_mean_s(after)
    queue_ms = triton_rates(parse_metrics(before), parse_metrics(after), 1.0)[MODEL].avg_queue_ms
    ok_ms = [r.latency_ms for r in result.records if r.outcome == OK]
    per_class = {}
    for sla in SLA_MS:
        recs = [r for r in result.records if r.sla_ms == sla]
        met = sum(1 for r in recs if r.outcome == OK and r.latency_ms <= sla)
        refused = sum(1 for r in recs if r.outcome != OK)
        per_class[sla] = (len(recs), met, refused, len(recs) - met - refused)
    stats = B.measured_stats("explicit", result)
    return {"rate": rate, "client_ms": float(np.mean(ok_ms)) if ok_ms else float("nan"),
            "plugin_ms": 1000.0 * (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan"),
            "queue_ms": queue_ms, "goodput": stats.goodput_rps, "lag_p99_ms": stats.send_lag_p99_ms,
            "lost": result.lost, "per_class": per_class, "summary": result.summary()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        os.makedirs(repo)
        copy_model(MODEL, repo, params={"time_scale": f"{TIME_SCALE:g}"})
        with TritonServer(repo, log_path=os.path.join(tmp, "server.log"), exit_timeout_s=10,
                          extra_args=("--model-control-mode=explicit", f"--load-model={MODEL}")
                          ) as server:
            run_load(server.grpc_url, MODEL, [Arrival(i * 0.05, 4, 2000.0) for i in range(20)],
                     clients=1, drain_timeout_s=30.0)  # warm-up: connections, first batches
            for rate in RATES:
                rows.append(measure(server, rate))
                print(rows[-1]["summary"], flush=True)
    command = ".venv/bin/python scripts/hand_over.py" + (
        "" if args.out == DEFAULT_OUT else f" --out {os.path.relpath(args.out, REPO_ROOT)}")
    write_page(args.out, _page(rows, command))
    return 0


def _page(rows: list[dict], command: str) -> list[str]:
    lines = ["# The shipped default near and past capacity: the plugin's view of latency, "
             "and goodput", "",
             f"Generated by `{command}`. " + " ".join(
                 line.strip() for line in __doc__.split("\n\n")[2:4]), "",
             "| rate (req/s) | clients' mean (ms) | plugin's mean (ms) | plugin / clients "
             "| Triton's queue wait, mean (ms) | met | goodput (req/s) | send lag P99 (ms) "
             "| lost |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['rate']:.0f} | {r['client_ms']:.1f} | {r['plugin_ms']:.1f} | "
                     f"{r['plugin_ms'] / r['client_ms']:.2f} | {r['queue_ms']:.1f} | "
                     f"{sum(c[1] for c in r['per_class'].values())} | {r['goodput']:.1f} | {r['lag_p99_ms']:.1f} | {r['lost']} |")
    lines += ["", "Goodput is the met requests over the schedule or until the last answer, "
              "whichever is later (`benchmarks.segment_stats.measured_stats`).",
              "", "Per SLA class: requests, met, refused, answered late.", "",
              "| rate (req/s) | " + " | ".join(f"{s:.0f} ms" for s in SLA_MS) + " |",
              "|---:|" + "---|" * len(SLA_MS)]
    for r in rows:
        lines.append(f"| {r['rate']:.0f} | " + " | ".join(
            "{} / {} / {} / {}".format(*r["per_class"][s]) for s in SLA_MS) + " |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
