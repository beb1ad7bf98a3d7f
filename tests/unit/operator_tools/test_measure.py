"""The operator tools' measurement layer without a server: the metrics page read into
per-model samples, busy fractions and padding waste from them, the metrics URL."""

from __future__ import annotations

import pytest

from operator_tools import measure as M

METRICS = """\
# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="m_explicit",version="1"} 40
nv_inference_count{model="m_native",version="1"} 40
nv_inference_count{model="other",version="1"} 7
# HELP nv_inference_exec_count Number of model executions performed
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="m_explicit",version="1"} 40
nv_inference_exec_count{model="m_native",version="1"} 10
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="m_explicit",version="1"} 20000
nv_inference_compute_infer_duration_us{model="m_native",version="1"} 800000
# HELP explicit_batching_utilization_ratio Device utilisation the controller acts on (0-1)
# TYPE explicit_batching_utilization_ratio gauge
explicit_batching_utilization_ratio{model="m_explicit"} 0.42
# HELP explicit_batching_padding_waste_ratio padding
# TYPE explicit_batching_padding_waste_ratio histogram
explicit_batching_padding_waste_ratio_bucket{model="m_explicit",le="+Inf"} 8
explicit_batching_padding_waste_ratio_count{model="m_explicit"} 8
explicit_batching_padding_waste_ratio_sum{model="m_explicit"} 1.2
"""


def test_parse_model_samples_reads_counters_gauge_and_histogram():
    out = M.parse_model_samples(METRICS, ["m_explicit", "m_native"])
    assert set(out) == {"m_explicit", "m_native"}
    x, n = out["m_explicit"], out["m_native"]
    assert (x.compute_us, x.inferences, x.executions) == (20000, 40, 40)
    assert (n.compute_us, n.inferences, n.executions) == (800000, 40, 10)
    assert x.gauge == 0.42 and n.gauge is None
    assert (x.padding_sum, x.padding_count) == (1.2, 8)


def _sample(t_s: float, gauge: float, batch_ns: float, compute_us: float) -> M.Sample:
    return M.Sample(int(t_s * 1e9), {
        "x": M.ModelSample(gauge=gauge, compute_us=compute_us),
        "n": M.ModelSample(batch_compute_ns=batch_ns, compute_us=compute_us)})


def test_busy_series_gauge_vs_batch_time_and_the_raw_counter():
    samples = [_sample(0, 0.0, 0, 0), _sample(1, 0.3, 0.5e9, 2e6), _sample(2, 0.6, 1.7e9, 4e6)]
    assert M.busy_series(samples, "x", from_gauge=True) == [
        (0, 1_000_000_000, 0.3), (1_000_000_000, 2_000_000_000, 0.6)]
    # Batch compute time per second of wall time, clipped to 1.
    assert M.busy_series(samples, "n", from_gauge=False) == [
        (0, 1_000_000_000, 0.5), (1_000_000_000, 2_000_000_000, 1.0)]
    # The raw counter would claim 2 s of work per second (one batch time per request).
    assert M.counter_busy(samples, "n", [(0, 2_000_000_000)]) == pytest.approx(2.0)
    assert M.counter_busy(samples, "n", [(5_000_000_000, 6_000_000_000)]) is None


def test_default_metrics_url_and_bad_url():
    assert M.default_metrics_url("localhost:8000") == "http://localhost:8002/metrics"
    assert M.default_metrics_url("http://127.0.0.1:9000") == "http://127.0.0.1:9002/metrics"
    with pytest.raises(Exception, match="host:port"):
        M.default_metrics_url("localhost")


def test_padding_waste_from_the_histogram_growth():
    def s(t, total, count):
        return M.Sample(t, {"x": M.ModelSample(padding_sum=total, padding_count=count)})
    samples = [s(0, 1.0, 10), s(10, 3.0, 20), s(20, 3.0, 20)]
    assert M.padding_waste(samples, "x", [(0, 10)]) == pytest.approx(0.2)
    assert M.padding_waste(samples, "x", [(10, 20)]) is None  # no batches


def test_queue_gauges_reads_queue_depth_and_pending_per_model(monkeypatch):
    page = METRICS + """\
# TYPE explicit_batching_queue_depth gauge
explicit_batching_queue_depth{model="m_explicit"} 3
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="m_native",version="1"} 5
"""
    monkeypatch.setattr(M, "scrape", lambda url, timeout_s: page)
    assert M.queue_gauges("http://m/metrics") == {
        ("explicit_batching_queue_depth", "m_explicit"): 3.0,
        ("nv_inference_pending_request_count", "m_native"): 5.0}


def test_a_model_with_two_instances_is_read_as_one_model(monkeypatch):
    # instance_group count 2: one series per instance (label model_instance).
    page = METRICS.replace(
        'explicit_batching_utilization_ratio{model="m_explicit"} 0.42',
        'explicit_batching_utilization_ratio{model="m_explicit",model_instance="m_explicit_0_0"} 0.4\n'
        'explicit_batching_utilization_ratio{model="m_explicit",model_instance="m_explicit_0_1"} 0.6'
    ) + """\
# TYPE explicit_batching_queue_depth gauge
explicit_batching_queue_depth{model="m_explicit",model_instance="m_explicit_0_0"} 3
explicit_batching_queue_depth{model="m_explicit",model_instance="m_explicit_0_1"} 4
"""
    assert M.parse_model_samples(page, ["m_explicit"])["m_explicit"].gauge == pytest.approx(0.5)
    monkeypatch.setattr(M, "scrape", lambda url, timeout_s: page)
    assert M.queue_gauges("http://m/metrics") == {("explicit_batching_queue_depth",
                                                   "m_explicit"): 7.0}


def test_ended_count_adds_answered_and_failed_over_versions(monkeypatch):
    seen = []

    def stats(url, timeout_s):
        seen.append(url)
        return {"model_stats": [
            {"inference_stats": {"success": {"count": 60}, "fail": {"count": 2}}},
            {"inference_stats": {"success": {"count": "3"}, "fail": {"count": "0"}}}]}

    monkeypatch.setattr(M, "get_json", stats)
    assert M.ended_count("http://h:1", "m") == 65
    assert seen == ["http://h:1/v2/models/m/stats"]


def test_inside_keeps_intervals_wholly_within_a_span():
    series = [(0, 10, 0.1), (10, 20, 0.2), (15, 25, 0.3)]
    assert M.inside(series, [(0, 20)]) == [0.1, 0.2]


def test_periodic_sampler_keeps_readings_and_counts_failures():
    readings = iter([1, None, OSError("connection refused"), 2])

    def read():
        value = next(readings)
        if isinstance(value, Exception):
            raise value
        return value

    sampler = M.PeriodicSampler(read, 1.0)
    for _ in range(4):
        sampler.sample_once()
    assert sampler.samples == [1, 2]
    assert sampler.failures == 1 and "connection refused" in sampler.last_error
    with pytest.raises(ValueError, match="period_s"):
        M.PeriodicSampler(read, 0.0)
