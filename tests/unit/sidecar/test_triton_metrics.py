"""parse_metrics on the captured Triton 2.51 page and on pages it must refuse; rates()
between two scrapes with hand-computed numbers."""

from __future__ import annotations

import dataclasses

import pytest

from sidecar.triton_metrics import (MetricsParseError, ModelCounters, ModelRates, TritonMetrics,
                                    parse_metrics, rates)

SHIPPED_MODELS = {"minilm", "minilm_native", "minilm_explicit",
                  "emulated_device", "emulated_native", "emulated_explicit"}


# -- parse_metrics: the real page ----------------------------------------------------------

def test_real_page_has_exactly_the_six_shipped_models(real_page):
    assert set(parse_metrics(real_page).models) == SHIPPED_MODELS


def test_real_page_emulated_native_counters(real_page):
    assert parse_metrics(real_page).models["emulated_native"] == ModelCounters(
        success=240, failure=0, inferences=240, executions=239, request_us=1217974,
        queue_us=540226, compute_infer_us=612036, pending=0)


def test_real_page_emulated_explicit_counters(real_page):
    assert parse_metrics(real_page).models["emulated_explicit"] == ModelCounters(
        success=240, failure=0, inferences=240, executions=240, request_us=217010,
        queue_us=25708, compute_infer_us=172455, pending=0)


@pytest.mark.parametrize("model", ["minilm", "minilm_native", "minilm_explicit", "emulated_device"])
def test_real_page_idle_models_are_all_zero(real_page, model):
    assert parse_metrics(real_page).models[model] == ModelCounters()


def test_real_page_cpu_utilization_and_no_gpu(real_page):
    m = parse_metrics(real_page)
    assert m.cpu_utilization == pytest.approx(0.5591397849462365, abs=1e-15)
    assert m.gpu == {}  # captured on a CPU machine: no nv_gpu_* families


def test_compute_input_and_output_durations_are_not_mistaken_for_compute_infer(real_page):
    # compute_input (12123) and compute_output (51812) sit next to compute_infer on the page
    assert parse_metrics(real_page).models["emulated_native"].compute_infer_us == 612036


def test_failure_is_summed_over_reasons(real_page, set_value):
    page = real_page
    for reason, n in (("REJECTED", 3), ("BACKEND", 4), ("OTHER", 5), ("CANCELED", 1)):
        page = set_value(page, "nv_inference_request_failure", "emulated_native", n, reason=reason)
    page = set_value(page, "nv_inference_request_failure", "minilm", 2, reason="BACKEND")
    m = parse_metrics(page)
    assert m.models["emulated_native"].failure == 13
    assert m.models["emulated_native"].canceled == 1  # the cancels among them, on their own
    assert m.models["minilm"].failure == 2
    assert m.models["minilm"].canceled == 0
    assert m.models["emulated_explicit"].failure == 0
    assert m.models["emulated_native"].success == 240  # other counters untouched


def test_pending_gauge_is_read(real_page, set_value):
    page = set_value(real_page, "nv_inference_pending_request_count", "emulated_explicit", 17)
    assert parse_metrics(page).models["emulated_explicit"].pending == 17


def test_counter_samples_with_total_suffix_are_recognised():
    page = ("# TYPE nv_inference_request_success counter\n"
            'nv_inference_request_success_total{model="m",version="1"} 7\n'
            "# TYPE nv_inference_count counter\n"
            'nv_inference_count_total{model="m",version="1"} 21\n')
    m = parse_metrics(page)
    assert m.models["m"].success == 7
    assert m.models["m"].inferences == 21


GPU_LINES = (
    "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n"
    "# TYPE nv_gpu_utilization gauge\n"
    'nv_gpu_utilization{gpu_uuid="GPU-aaaa"} 0.25\n'
    'nv_gpu_utilization{gpu_uuid="GPU-bbbb"} 0.5\n'
    "# TYPE nv_gpu_memory_used_bytes gauge\n"
    'nv_gpu_memory_used_bytes{gpu_uuid="GPU-aaaa"} 1000000000\n'
    'nv_gpu_memory_used_bytes{gpu_uuid="GPU-bbbb"} 2000000000\n'
    "# TYPE nv_gpu_memory_total_bytes gauge\n"
    'nv_gpu_memory_total_bytes{gpu_uuid="GPU-aaaa"} 80000000000\n'
    'nv_gpu_memory_total_bytes{gpu_uuid="GPU-bbbb"} 80000000000\n'
    "# TYPE nv_gpu_power_usage gauge\n"
    'nv_gpu_power_usage{gpu_uuid="GPU-aaaa"} 100.5\n'
    'nv_gpu_power_usage{gpu_uuid="GPU-bbbb"} 200.25\n'
)


def test_gpu_gauges_of_two_gpus_are_summed(real_page):
    m = parse_metrics(real_page + GPU_LINES)
    assert m.gpu == {"gpu_utilization": 0.75, "gpu_memory_used_bytes": 3e9,
                     "gpu_memory_total_bytes": 160e9, "gpu_power_w": 300.75}
    assert m.models["emulated_native"].success == 240  # the models are still there


# -- parse_metrics: pages it must refuse ----------------------------------------------------

NOT_METRICS = {
    "garbage": "hello world, this is not prometheus\n!!! 12 ??\n",
    "html": ("<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n"
             "<body><h1>Not Found</h1></body></html>\n"),
    "empty": "",
    "whitespace": "\n\n   \n",
    "json": '{"models": {"emulated_native": {"success": 240}}}\n',
}


@pytest.mark.parametrize("text", NOT_METRICS.values(), ids=NOT_METRICS.keys())
def test_non_metrics_text_raises(text):
    with pytest.raises(MetricsParseError):
        parse_metrics(text)


def test_page_without_nv_inference_raises(real_page):
    page = "".join(line + "\n" for line in real_page.splitlines() if "nv_inference_" not in line)
    assert "nv_cpu_utilization" in page  # a valid Prometheus page, just not Triton's models
    with pytest.raises(MetricsParseError, match="nv_inference"):
        parse_metrics(page + GPU_LINES)


def test_metrics_parse_error_is_a_value_error():
    assert issubclass(MetricsParseError, ValueError)


# -- rates --------------------------------------------------------------------------------

def _asdict(r: ModelRates) -> dict:
    return dataclasses.asdict(r)


def test_rates_hand_computed():
    before = TritonMetrics(models={"m": ModelCounters(
        success=100, failure=2, inferences=300, executions=50, request_us=500_000,
        queue_us=200_000, compute_infer_us=1_000_000, pending=1)})
    after = TritonMetrics(models={"m": ModelCounters(
        success=180, failure=6, inferences=660, executions=110, request_us=1_340_000,
        queue_us=410_000, compute_infer_us=2_500_000, pending=7)})
    r = rates(before, after, 2.0)
    # 84 requests (80 ok + 4 failed) in 2 s; 360 inferences in 60 executions; 840 ms of
    # request time and 210 ms of queueing over 84 requests; 1.5 s of compute in 2 s.
    assert _asdict(r["m"]) == pytest.approx(_asdict(ModelRates(
        interval_s=2.0, requests_per_s=42.0, failures_per_s=2.0, inferences_per_s=180.0,
        executions_per_s=30.0, avg_batch_size=6.0, avg_request_ms=10.0, avg_queue_ms=2.5,
        compute_busy_fraction=0.75, pending=7)))


def test_rates_on_real_page_advanced(real_page, set_value):
    before = parse_metrics(real_page)
    page = real_page
    for metric, value in (("nv_inference_request_success", 340), ("nv_inference_count", 640),
                          ("nv_inference_exec_count", 339),
                          ("nv_inference_queue_duration_us", 540226 + 300_000),
                          ("nv_inference_compute_infer_duration_us", 612036 + 1_000_000)):
        page = set_value(page, metric, "emulated_native", value)
    r = rates(before, parse_metrics(page), 4.0)
    assert r["emulated_native"].requests_per_s == pytest.approx(25.0)  # 100 / 4 s
    assert r["emulated_native"].avg_batch_size == pytest.approx(4.0)  # 400 / 100
    assert r["emulated_native"].avg_queue_ms == pytest.approx(3.0)  # 300 ms / 100
    assert r["emulated_native"].compute_busy_fraction == pytest.approx(0.25)  # 1 s / 4 s
    # the other five did nothing in the interval
    assert set(r) == SHIPPED_MODELS
    assert r["emulated_explicit"].requests_per_s == 0.0
    assert r["emulated_explicit"].avg_batch_size == 0.0


def test_new_model_absent_from_previous_scrape_counts_from_zero():
    before = TritonMetrics(models={"old": ModelCounters(success=5, inferences=5, executions=5)})
    after = TritonMetrics(models={
        "old": ModelCounters(success=5, inferences=5, executions=5),
        "new": ModelCounters(success=10, inferences=40, executions=10, request_us=80_000,
                             queue_us=50_000, compute_infer_us=400_000, pending=3)})
    r = rates(before, after, 0.5)
    assert _asdict(r["new"]) == pytest.approx(_asdict(ModelRates(
        interval_s=0.5, requests_per_s=20.0, failures_per_s=0.0, inferences_per_s=80.0,
        executions_per_s=20.0, avg_batch_size=4.0, avg_request_ms=8.0, avg_queue_ms=5.0,
        compute_busy_fraction=0.8, pending=3)))
    assert r["old"].requests_per_s == 0.0


def test_model_gone_from_the_latest_scrape_has_no_rates():
    before = TritonMetrics(models={"a": ModelCounters(success=1), "b": ModelCounters(success=1)})
    after = TritonMetrics(models={"a": ModelCounters(success=3)})
    assert set(rates(before, after, 1.0)) == {"a"}


def test_idle_interval_gives_zero_averages_not_division_errors():
    same = TritonMetrics(models={"m": ModelCounters(success=10, inferences=10, executions=10)})
    r = rates(same, same, 1.0)["m"]
    assert (r.requests_per_s, r.avg_batch_size, r.avg_request_ms, r.avg_queue_ms) == (0, 0, 0, 0)


def test_counter_reset_restarts_from_zero_without_negative_rates(real_page):
    before = parse_metrics(real_page)  # emulated_native: 240 requests so far
    after = TritonMetrics(models={"emulated_native": ModelCounters(
        success=10, failure=0, inferences=20, executions=5, request_us=30_000, queue_us=1_000,
        compute_infer_us=200_000, pending=2)})  # server restarted, 10 requests since
    r = rates(before, after, 1.0)["emulated_native"]
    assert _asdict(r) == pytest.approx(_asdict(ModelRates(
        interval_s=1.0, requests_per_s=10.0, failures_per_s=0.0, inferences_per_s=20.0,
        executions_per_s=5.0, avg_batch_size=4.0, avg_request_ms=3.0, avg_queue_ms=0.1,
        compute_busy_fraction=0.2, pending=2)))
    assert all(v >= 0 for v in _asdict(r).values())


def test_single_counter_going_down_is_clamped_to_zero():
    before = TritonMetrics(models={"m": ModelCounters(success=10, inferences=10, executions=10,
                                                      queue_us=90_000)})
    after = TritonMetrics(models={"m": ModelCounters(success=20, inferences=20, executions=20,
                                                     queue_us=50_000)})
    r = rates(before, after, 1.0)["m"]
    assert r.requests_per_s == 10.0
    assert r.avg_queue_ms == 0.0


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_non_positive_interval_raises(interval):
    m = TritonMetrics(models={"m": ModelCounters(success=1)})
    with pytest.raises(ValueError, match="interval_s"):
        rates(m, m, interval)
