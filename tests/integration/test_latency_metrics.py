"""The plugin's latency histograms on Triton's metrics port: its own counts agree with
Triton's, and how close its percentiles come to what clients see is measured and printed.

A server of its own runs a copy of emulated_explicit with the EMULATED device slowed 10x,
so latencies are tens of ms. An open-loop load of three SLA classes runs.

What is asserted is what no busy machine can change: every successful request is observed
once in its class's histogram, the plugin's counts equal Triton's own
``nv_inference_request_success`` delta, and per class the time to dispatch never exceeds
the time to the answer (both count from the same estimated arrival). The client-side
percentiles beside the histograms' (computed the way Prometheus's ``histogram_quantile``
does) are a measurement, printed: a client on a starved 2-core machine adds its own
scheduling delays, and under intake hold the plugin estimates arrivals it is not told
(intake.hand_over_arrival), so their ratio is no law. Triton's own mean queue wait is
printed beside them.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sidecar.triton_metrics import fetch_url, parse_metrics, rates, read_samples
from tests.conftest import SHIPPED_REPOSITORY
from tests.eventually import eventually, stays
from tests.integration.gates import triton_counts
from server_ops.intake_config import hold_config
from triton_backend.metric_catalog import (LATENCY_BUCKETS, HISTOGRAM_PUBLISH_PERIOD_S, PREFIX,
                                          sla_class)

pytestmark = pytest.mark.integration
MODEL = "latency_explicit"
SLA_MS = (150.0, 400.0, 2000.0)  # classes le200ms, le1000ms, gt1000ms
# Requests per second, open loop. The EMULATED t4 at time scale 10 batches this mix (8-64
# tokens, FIFO, padded to the longest, 32 a batch) at ~210 req/s: (1.2 + 32 * (0.02 +
# 0.0065 * 64)) ms * 10 a batch of 32. 80 is 0.38 of that, with room for a slow host.
RATE = 80.0
DURATION_S = 15.0  # ~400 a class, so each P99 has ~4 beyond it


@pytest.fixture(scope="module")
def latency_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("latency") / "repo")
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, "emulated_explicit"),
                    os.path.join(repo, MODEL),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    path = os.path.join(repo, MODEL, "config.pbtxt")
    with open(path) as fh:
        config = fh.read().replace('name: "emulated_explicit"', f'name: "{MODEL}"')
    # Without Triton's queue bound: with any queue policy Triton 2.51's batcher may stall
    # ~500 ms before handing requests over (the plugin's wake requests end most such
    # stalls, not all: intake_config.HOLD_MAX_QUEUE_SIZE), time no model can see (the
    # plugin is not told when a request arrived). This test checks the plugin's own
    # accounting, where Triton does not hide time from it.
    config = hold_config(config, max_queue_size=0)
    config += ('parameters { key: "time_scale" value: { string_value: "10" } }\n'
               'parameters { key: "sidecar" value: { string_value: "off" } }\n')
    with open(path, "w") as fh:
        fh.write(config)
    log = str(tmp_path_factory.mktemp("latencylogs") / "tritonserver.log")
    srv = TritonServer(repo, log_path=log, exit_timeout_s=15, extra_args=(
        "--model-control-mode=explicit", f"--load-model={MODEL}"))
    with srv:
        yield srv


def _inputs(ids, sla_ms):
    ids_in = grpcclient.InferInput("INPUT_IDS", [1, len(ids)], "INT64")
    ids_in.set_data_from_numpy(np.asarray(ids, dtype=np.int64).reshape(1, -1))
    sla = grpcclient.InferInput("SLA_MS", [1, 1], "FP32")
    sla.set_data_from_numpy(np.array([[sla_ms]], dtype=np.float32))
    return [ids_in, sla]


def run_open_loop(url: str) -> dict[str, list[float]]:
    """Client-side latencies (s) of successful requests, per SLA class."""
    rng = np.random.default_rng(12)
    count = int(RATE * DURATION_S)
    work = [(_inputs([101, *rng.integers(1000, 30000, size=int(n)), 102], float(sla)),
             float(sla)) for n, sla in zip(rng.integers(8, 64, size=count),
                                            rng.choice(SLA_MS, size=count))]
    latencies: dict[str, list[float]] = {}
    errors: list[str] = []
    lock = threading.Lock()
    done = threading.Semaphore(0)
    client = grpcclient.InferenceServerClient(url)

    def callback(sla, sent, result, error):
        took = time.perf_counter() - sent
        with lock:
            if error is not None:
                errors.append(str(error))
            else:
                latencies.setdefault(sla_class(sla), []).append(took)
        done.release()

    try:
        start = time.perf_counter()
        for i, (inputs, sla) in enumerate(work):
            delay = start + i / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent = time.perf_counter()
            client.async_infer(MODEL, inputs,
                               lambda result, error, sla=sla, sent=sent:
                               callback(sla, sent, result, error))
        for _ in work:
            assert done.acquire(timeout=30), "a request never came back"
    finally:
        client.close()
    # Refusals of the tight class on a busy machine are the contract, not a failure; any
    # other error is (how many are refused is the bench's measurement).
    assert all("deadline infeasible" in e for e in errors), errors[:3]
    return latencies


def histograms(metrics_url: str, name: str, part: str = "bucket") -> dict:
    """``part`` "bucket": {sla_class: {upper bound: cumulative count}} of ``name`` for
    MODEL; "count" or "sum": {sla_class: value}."""
    out: dict = {}
    for s in read_samples(fetch_url(metrics_url, 5)):
        if s.name == f"{PREFIX}{name}_{part}" and s.labels.get("model") == MODEL:
            if part == "bucket":
                out.setdefault(s.labels["sla_class"], {})[float(s.labels["le"])] = s.value
            else:
                out[s.labels["sla_class"]] = s.value
    return out


def observed(metrics_url: str) -> float:
    """Successful requests in the plugin's request-duration histograms, all classes."""
    return sum(histograms(metrics_url, "request_duration_seconds", "count").values())


def settled(metrics_url: str) -> float:
    """Wait until the plugin has published every success Triton counted (it publishes its
    histograms once per HISTOGRAM_PUBLISH_PERIOD_S), and that it stays so for a publish
    period more (no publish half done); returns that count."""
    def agree():
        n = observed(metrics_url)
        return n == triton_counts(metrics_url, MODEL).success and n
    eventually(agree, what="the plugin's histograms count every success Triton counted")
    stays(agree, HISTOGRAM_PUBLISH_PERIOD_S + 0.3, what="the histograms stay settled")
    return observed(metrics_url)


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus's ``histogram_quantile``: linear interpolation inside the bucket that
    holds the rank (from 0 for the first bucket; the +Inf bucket gives the last bound)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    rank = q * total
    below, lower = 0.0, 0.0
    for upper in bounds:
        count = buckets[upper]
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / (count - below)
        below, lower = count, upper
    return lower


def delta(after: dict, before: dict) -> dict:
    return {cls: {le: v - before.get(cls, {}).get(le, 0.0) for le, v in b.items()}
            for cls, b in after.items()}


def test_latency_histograms_count_what_triton_counts(latency_server):
    url = latency_server.metrics_url
    client = grpcclient.InferenceServerClient(latency_server.grpc_url)
    for _ in range(20):  # warm-up: connections, the cost model's first corrections
        client.infer(MODEL, _inputs([101, 2000, 3000, 102], 2000.0))
    client.close()
    settled(url)  # the warm-up's observations are out
    names = ("request_duration_seconds", "queue_duration_seconds")
    before = {(n, part): histograms(url, n, part) for n in names for part in ("bucket", "sum")}
    triton_before, counts_before = parse_metrics(fetch_url(url, 5)), triton_counts(url, MODEL)
    client_latency = run_open_loop(latency_server.grpc_url)
    served = sum(len(v) for v in client_latency.values())
    settled(url)
    after = {key: histograms(url, *key) for key in before}
    successes = (triton_counts(url, MODEL) - counts_before).success
    # Triton's own mean wait in its queue, which the plugin cannot see: when the plugin's
    # figures fall short of the clients', this says whether the load outran this machine.
    unseen_ms = rates(triton_before, parse_metrics(fetch_url(url, 5)), 1.0)[MODEL].avg_queue_ms
    request = delta(after[names[0], "bucket"], before[names[0], "bucket"])
    queued = delta(after[names[1], "bucket"], before[names[1], "bucket"])

    assert successes == served, f"Triton counted {successes} successes, clients got {served}"
    assert set(len(b) for b in request.values()) == {len(LATENCY_BUCKETS) + 1}
    rows = []
    for cls, seen in sorted(client_latency.items()):
        buckets = request[cls]
        assert buckets[float("inf")] == len(seen), cls  # every success observed once
        # Refusals are never dispatched and no batch fails here: each success was
        # dispatched once, and its dispatch came before its answer, from the same arrival.
        assert queued[cls][float("inf")] == len(seen), cls
        request_sum = after[names[0], "sum"][cls] - before[names[0], "sum"].get(cls, 0.0)
        queue_sum = after[names[1], "sum"][cls] - before[names[1], "sum"].get(cls, 0.0)
        assert queue_sum <= request_sum * (1 + 1e-9), (cls, queue_sum, request_sum)
        for q in (0.5, 0.99):
            rows.append(f"{cls} p{int(q * 100)}: server {histogram_quantile(q, buckets) * 1e3:.1f}"
                        f" ms, client {float(np.percentile(seen, q * 100)) * 1e3:.1f} ms, queue "
                        f"{histogram_quantile(q, queued[cls]) * 1e3:.1f} ms (n={len(seen)})")
    rows.append(f"Triton's queue (unseen by the plugin): {unseen_ms:.1f} ms a request on average")
    print("\n".join(rows))  # a measurement (pytest -s shows it), not a bound
