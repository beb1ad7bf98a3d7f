"""``ControlMetrics`` counts answered batches as arrays: what it publishes must equal the
per-request definition (``metric_catalog.sla_class``, a bucket by ``bisect_left`` over
``LATENCY_BUCKETS``, met when the latency is within the SLA)."""

from __future__ import annotations

import bisect
import time
from collections import Counter

import numpy as np

from triton_backend.metric_catalog import LATENCY_BUCKETS, PREFIX, sla_class

SLAS_MS = (10.0, 50.0, 75.0, 100.0, 150.0, 200.0, 500.0, 1000.0, 5000.0)


class _Stats:
    """The scheduler figures flush() publishes as gauges (values do not matter here)."""

    zone = prewarmed = window_ms = queue_depth = utilization = 0
    observation_age_ms = control_period_ms = control_lag_ms = cost_error = 0.0
    cost_correction = 1.0
    emergency_batches = compensation_batches = 0


def test_batches_counted_as_arrays_publish_the_per_request_histograms(pb_utils):
    from triton_backend.control_metrics import ControlMetrics

    metrics = ControlMetrics("m", "t4", "test")
    rng = np.random.default_rng(3)
    expected_buckets: Counter = Counter()
    expected_sla: Counter = Counter()
    expected_sum: Counter = Counter()
    for _ in range(20):
        n = int(rng.integers(1, 40))
        sla = rng.choice(SLAS_MS, n)
        dispatched = 100.0 + rng.exponential(0.5)
        answered = dispatched + rng.exponential(0.05)
        arrivals = dispatched - rng.exponential(0.05, n)
        metrics.on_served(sla.tolist(), arrivals.tolist(), dispatched, answered)
        for s, a in zip(sla, arrivals):
            w, lat = dispatched - a, answered - a
            cls = sla_class(float(s))
            for name, seconds in (("queue_duration_seconds", w),
                                  ("request_duration_seconds", lat)):
                expected_buckets[(name, cls, bisect.bisect_left(LATENCY_BUCKETS, seconds))] += 1
                expected_sum[(name, cls)] += float(seconds)
            expected_sla[(cls, "met" if lat * 1000.0 <= s else "missed")] += 1
    metrics.flush(_Stats(), 1.0)

    for (cls, outcome), n in expected_sla.items():
        assert pb_utils.metric_value(PREFIX + "sla_requests_total", sla_class=cls,
                                     outcome=outcome) == n
    bounds = [*(repr(float(b)) for b in LATENCY_BUCKETS), "+Inf"]
    for name in ("queue_duration_seconds", "request_duration_seconds"):
        for cls in {c for (h, c, _) in expected_buckets if h == name}:
            cumulative = 0
            for k, le in enumerate(bounds):
                cumulative += expected_buckets[(name, cls, k)]
                got = pb_utils.metric_value(PREFIX + name + "_bucket", sla_class=cls, le=le)
                assert got == cumulative, (name, cls, le)
            assert pb_utils.metric_value(PREFIX + name + "_count", sla_class=cls) == cumulative
            assert abs(pb_utils.metric_value(PREFIX + name + "_sum", sla_class=cls)
                       - expected_sum[(name, cls)]) < 1e-9


def test_batch_histograms_are_counted_here_and_published_as_prometheus_series(pb_utils):
    """Batch size and padding waste: one publish carries every batch since the last, as
    running totals (``_bucket{le}`` cumulative, ``_count``, ``_sum``), and the next adds."""
    from triton_backend.control_metrics import ControlMetrics
    from triton_backend.metric_catalog import BATCH_SIZE_BUCKETS

    metrics = ControlMetrics("m", "t4", "test")
    sizes = [1, 3, 3, 17, 64, 200]
    for round_ in (1, 2):
        for size in sizes:
            metrics.on_batch([4] * (size - 1) + [16], "fifo")  # padding 0.75 (size 1: 0)
        metrics.flush(_Stats(), 1.0)
        for bound in (*BATCH_SIZE_BUCKETS, "+Inf"):
            le = bound if isinstance(bound, str) else repr(float(bound))
            want = round_ * sum(1 for s in sizes if bound == "+Inf" or s <= bound)
            assert pb_utils.metric_value(PREFIX + "batch_size_bucket", le=le) == want, le
        assert pb_utils.metric_value(PREFIX + "batch_size_count") == round_ * len(sizes)
        assert pb_utils.metric_value(PREFIX + "batch_size_sum") == round_ * sum(sizes)
        # waste 1 - (4(s-1) + 16) / 16s: 0 for size 1, 0.5 for size 3, then 0.71 to 0.75
        assert pb_utils.metric_value(PREFIX + "padding_waste_ratio_bucket", le="0.05") \
            == round_ * 1
        assert pb_utils.metric_value(PREFIX + "padding_waste_ratio_bucket", le="0.5") \
            == round_ * 3
        assert pb_utils.metric_value(PREFIX + "padding_waste_ratio_bucket", le="+Inf") \
            == round_ * len(sizes)
        assert pb_utils.metric_value(PREFIX + "formed_batches_total", former="fifo") \
            == round_ * len(sizes)


def test_a_flush_without_histograms_keeps_their_counts_for_the_next_publish(pb_utils):
    """The gauges and counters go at every flush; the histograms' series only where the
    flush sends them, and then with everything counted since their last publish."""
    from triton_backend.control_metrics import ControlMetrics

    metrics = ControlMetrics("m", "t4", "test")
    metrics.on_batch([4, 4, 16], "fifo")
    metrics.on_served([50.0, 50.0, 50.0], [10.0, 10.0, 10.0], 10.001, 10.002)
    metrics.flush(_Stats(), 1.0, histograms=False)
    assert pb_utils.metric_value(PREFIX + "formed_batches_total", former="fifo") == 1
    assert pb_utils.metric_value(PREFIX + "sla_requests_total", outcome="met") == 3
    assert pb_utils.metric_value(PREFIX + "batch_size_count") == 0
    assert pb_utils.metric_value(PREFIX + "request_duration_seconds_count") == 0

    metrics.on_batch([8], "fifo")
    metrics.on_served([50.0], [10.0], 10.001, 10.002)
    metrics.flush(_Stats(), 1.0)
    assert pb_utils.metric_value(PREFIX + "batch_size_count") == 2
    assert pb_utils.metric_value(PREFIX + "batch_size_sum") == 4
    assert pb_utils.metric_value(PREFIX + "request_duration_seconds_count") == 4
    assert pb_utils.metric_value(PREFIX + "sla_requests_total", outcome="met") == 4


def test_the_runner_sends_the_histograms_once_per_their_period(adapter, pb_utils):
    """``Runner.flush_metrics_if_due``: a flush at most once per METRICS_PUBLISH_PERIOD_S,
    the histograms' series in one of them per HISTOGRAM_PUBLISH_PERIOD_S."""
    from triton_backend.metric_catalog import (HISTOGRAM_PUBLISH_PERIOD_S,
                                               METRICS_PUBLISH_PERIOD_S)

    model = adapter.model("hold")
    runner = model.runner
    model._metrics_stop.set()  # its metrics thread flushes too, on its own clock: stopped
    model._metrics_thread.join(timeout=30)
    assert not model._metrics_thread.is_alive()
    flushes: list[bool] = []
    runner.metrics.flush = lambda stats, health, histograms=True: flushes.append(histograms)
    start = time.monotonic() + 10 * HISTOGRAM_PUBLISH_PERIOD_S  # past its last flush
    steps = int(2 * HISTOGRAM_PUBLISH_PERIOD_S / METRICS_PUBLISH_PERIOD_S)
    for k in range(steps):
        now = start + k * METRICS_PUBLISH_PERIOD_S
        runner.flush_metrics_if_due(now, 1.0)
        runner.flush_metrics_if_due(now + METRICS_PUBLISH_PERIOD_S / 2, 1.0)  # not due
    assert len(flushes) == steps
    assert flushes[0] and flushes.count(True) == 2
    assert flushes.index(True, 1) == int(HISTOGRAM_PUBLISH_PERIOD_S / METRICS_PUBLISH_PERIOD_S)
