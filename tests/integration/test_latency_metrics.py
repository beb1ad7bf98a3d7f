"""The plugin's latency histograms on Triton's metrics port agree with what clients see.

A server of its own runs a copy of emulated_explicit with the EMULATED device slowed 10x,
so latencies are tens of ms and the client's own fixed overhead (gRPC in Python, ~1 ms)
stays a small share of them. An open-loop load of three SLA classes runs; P50 and P99 per
class are computed client-side and estimated from the histogram buckets the way
Prometheus's ``histogram_quantile`` does.

The server's figure may not exceed the client's by more than 10 % (bucket interpolation):
it cannot see latency the client did not. It may fall short by the transport time the
server does not see, but never by half (a histogram that lost latency). How close they are
is printed, a measurement, not a bound a busy machine can miss: at 80 req/s the shortfall
was ~5 % idle and at most 31 % (one P99) with the whole test on a quarter of one core.

The load stays well inside the device's capacity (0.38). A CI run at 160 req/s (0.75)
failed: server 78 ms, client 244 ms at the le200ms P50. On a slow host the plugin dated large
hand-overs from Triton's queue "arrived now" (intake.hand_over_arrival allowed 5 ms
after the previous return, whatever the call's size) and missed their wait there. With
the per-request allowance 160 req/s on a third of one core passed (that P50: server 130.7
ms, client 119.3 ms, the server 9.5 % above); 80 req/s keeps the margin. Triton's own mean queue wait is printed
beside the figures.
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
from triton_backend.intake_config import hold_config
from triton_backend.metric_catalog import (LATENCY_BUCKETS, LATENCY_PUBLISH_PERIOD_S, PREFIX,
                                          sla_class)

pytestmark = pytest.mark.integration
MODEL = "latency_explicit"
SLA_MS = (150.0, 400.0, 2000.0)  # classes le200ms, le1000ms, gt1000ms
# Requests per second, open loop. The EMULATED t4 at time scale 10 batches this mix (8-64
# tokens, FIFO, padded to the longest, 32 a batch) at ~210 req/s: (1.2 + 32 * (0.02 +
# 0.0065 * 64)) ms * 10 a batch of 32. 80 is 0.38 of that, with room for a slow host.
RATE = 80.0
DURATION_S = 15.0  # ~400 a class, so each P99 has ~4 beyond it
TOLERANCE = 0.10  # the server above the client: bucket interpolation only
TRANSPORT_SHARE_MAX = 0.5  # the server below the client: transport, never half of it


@pytest.fixture(scope="module")
def latency_server(tmp_path_factory):
    from triton_backend.launcher import TritonServer

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
    assert len(errors) < count // 2, f"{len(errors)} of {count} refused: too few to compare"
    return latencies


def histograms(metrics_url: str, name: str) -> dict[str, dict[float, float]]:
    """{sla_class: {upper bound: cumulative count}} of ``name`` for MODEL."""
    out: dict[str, dict[float, float]] = {}
    for s in read_samples(fetch_url(metrics_url, 5)):
        if s.name == PREFIX + name + "_bucket" and s.labels.get("model") == MODEL:
            out.setdefault(s.labels["sla_class"], {})[float(s.labels["le"])] = s.value
    return out


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


def test_latency_histograms_agree_with_client_percentiles(latency_server):
    url = latency_server.metrics_url
    client = grpcclient.InferenceServerClient(latency_server.grpc_url)
    for _ in range(20):  # warm-up: connections, the cost model's first corrections
        client.infer(MODEL, _inputs([101, 2000, 3000, 102], 2000.0))
    client.close()
    # One publish period and a control period more: the warm-up's observations are out.
    time.sleep(LATENCY_PUBLISH_PERIOD_S + 0.3)
    before = {n: histograms(url, n) for n in ("request_duration_seconds",
                                              "queue_duration_seconds")}
    triton_before = parse_metrics(fetch_url(url, 5))
    client_latency = run_open_loop(latency_server.grpc_url)
    time.sleep(LATENCY_PUBLISH_PERIOD_S + 0.3)
    after = {n: histograms(url, n) for n in before}
    # Triton's own mean wait in its queue, which the plugin cannot see: when the plugin's
    # figures fall short, this says whether the load outran this machine.
    unseen_ms = rates(triton_before, parse_metrics(fetch_url(url, 5)), 1.0)[MODEL].avg_queue_ms
    request = delta(after["request_duration_seconds"], before["request_duration_seconds"])
    queued = delta(after["queue_duration_seconds"], before["queue_duration_seconds"])

    assert {sla_class(s) for s in SLA_MS} <= set(request), "a class's histogram is missing"
    assert set(len(b) for b in request.values()) == {len(LATENCY_BUCKETS) + 1}
    rows, failures = [], []
    for cls, seen in sorted(client_latency.items()):
        buckets = request[cls]
        assert buckets[float("inf")] == len(seen), cls  # every success observed once
        assert queued[cls][float("inf")] >= len(seen)
        for q in (0.5, 0.99):
            server_s = histogram_quantile(q, buckets)
            client_s = float(np.percentile(seen, q * 100))
            queue_s = histogram_quantile(q, queued[cls])
            assert queue_s <= server_s * (1 + TOLERANCE)
            rows.append(f"{cls} p{int(q * 100)}: server {server_s * 1000:.1f} ms, client "
                        f"{client_s * 1000:.1f} ms, queue {queue_s * 1000:.1f} ms "
                        f"(n={len(seen)})")
            if not (1 - TRANSPORT_SHARE_MAX) * client_s <= server_s <= (1 + TOLERANCE) * client_s:
                failures.append(rows[-1])
    rows.append(f"Triton's queue (unseen by the plugin): {unseen_ms:.1f} ms a request on average")
    print("\n".join(rows))
    assert not failures, "\n".join(rows)
