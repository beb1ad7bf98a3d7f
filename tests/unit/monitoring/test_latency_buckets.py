"""The latency histograms' buckets: fine enough for P50/P99 from buckets, SLA bounds kept."""

from __future__ import annotations

from triton_backend.metric_catalog import LATENCY_BUCKETS, SLA_CLASSES, all_metric_names


def test_buckets_span_1ms_to_30s_in_steps_of_at_most_22_percent():
    assert LATENCY_BUCKETS[0] == 0.001 and LATENCY_BUCKETS[-1] == 30.0
    steps = [b / a for a, b in zip(LATENCY_BUCKETS, LATENCY_BUCKETS[1:])]
    assert all(1.0 < s <= 1.22 for s in steps), steps
    assert len(LATENCY_BUCKETS) <= 64  # x 5 classes x 2 histograms per model's page


def test_sla_bounds_are_bucket_edges():
    for bound_ms, _ in SLA_CLASSES[:-1]:
        assert bound_ms / 1000.0 in LATENCY_BUCKETS


def test_latency_histograms_are_exported_in_seconds():
    names = all_metric_names()
    for name in ("request_duration_seconds", "queue_duration_seconds", "window_seconds",
                 "observation_age_seconds", "control_period_seconds", "control_lag_seconds"):
        assert "explicit_batching_" + name in names
    assert not [n for n in names if n.endswith("_ms")]
