"""The offline parts of ``explicit-batching compare``: metrics parsing, busy fractions,
matching exported requests to the trace, and the live table (no server here; the
integration test runs the whole command against one)."""

from __future__ import annotations

import math

import pytest

from operator_tools import compare_cmd as C
from operator_tools import perf_analyzer as pa
from operator_tools import report

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


def test_parse_metrics_reads_counters_gauge_and_histogram():
    out = C.parse_metrics(METRICS, ["m_explicit", "m_native"])
    assert set(out) == {"m_explicit", "m_native"}
    x, n = out["m_explicit"], out["m_native"]
    assert (x.compute_us, x.inferences, x.executions) == (20000, 40, 40)
    assert (n.compute_us, n.inferences, n.executions) == (800000, 40, 10)
    assert x.gauge == 0.42 and n.gauge is None
    assert (x.padding_sum, x.padding_count) == (1.2, 8)


def _sample(t_s: float, gauge: float, batch_ns: float, compute_us: float) -> C.Sample:
    return C.Sample(int(t_s * 1e9), {
        "x": C.ModelSample(gauge=gauge, compute_us=compute_us),
        "n": C.ModelSample(batch_compute_ns=batch_ns, compute_us=compute_us)})


def test_busy_series_gauge_vs_batch_time_and_the_raw_counter():
    samples = [_sample(0, 0.0, 0, 0), _sample(1, 0.3, 0.5e9, 2e6), _sample(2, 0.6, 1.7e9, 4e6)]
    assert C.busy_series(samples, "x", from_gauge=True) == [
        (0, 1_000_000_000, 0.3), (1_000_000_000, 2_000_000_000, 0.6)]
    # Batch compute time per second of wall time, clipped to 1.
    assert C.busy_series(samples, "n", from_gauge=False) == [
        (0, 1_000_000_000, 0.5), (1_000_000_000, 2_000_000_000, 1.0)]
    # The raw counter would claim 2 s of work per second (one batch time per request).
    assert C.counter_busy(samples, "n", [(0, 2_000_000_000)]) == pytest.approx(2.0)
    assert C.counter_busy(samples, "n", [(5_000_000_000, 6_000_000_000)]) is None


def test_match_requests_by_content_and_send_order():
    entries = {(101, 5, 102): (3, 250.0), (101, 6, 7, 102): (4, 500.0)}
    run = pa.TraceRun("m", ("pa",), 0, "", 1_000_000_000, (
        pa.ExportedRequest(1_010_000_000, 1_030_000_000, (101, 5, 102), 250.0),
        pa.ExportedRequest(1_021_000_000, None, (101, 6, 7, 102), None),
        pa.ExportedRequest(1_040_000_000, 1_050_000_000, (101, 9, 102), None)))
    seg = C.Segment(0, "m", "native", planned=3, run=run)
    C.match_requests(seg, [10.0, 20.0, 30.0], entries)
    assert seg.unmatched == 1
    assert [(r.scheduled_ms, r.sla_ms, r.seq_len, r.latency_ms) for r in seg.requests] == [
        (10.0, 250.0, 3, 20.0), (20.0, 500.0, 4, None)]
    assert (seg.start_ns, seg.end_ns) == (1_000_000_000, 1_050_000_000)
    assert seg.lost == 1  # planned 3, two answered (one of them matched no entry)


def test_live_table_has_lost_and_send_lag_columns():
    row = report.summarise_requests("explicit", [250.0, 250.0, 500.0], [100.0, 300.0, None],
                                    2.0, [0.2, 0.4], lost=1, send_lag_ms=[0.1, 0.3, 0.2])
    assert (row.requests, row.completed, row.met, row.lost) == (3, 2, 1, 1)
    assert row.goodput_rps == 0.5 and row.sla_attainment == pytest.approx(1 / 3)
    assert row.utilization_fluctuation == pytest.approx(0.1)
    table = report.summary_table([row])
    assert "| lost | send lag mean / P99 (ms) |" in table
    assert table.splitlines()[-1].endswith("| 0 | 1 | 0.20 / 0.30 |")


def test_default_metrics_url_and_bad_url():
    assert C.default_metrics_url("localhost:8000") == "http://localhost:8002/metrics"
    assert C.default_metrics_url("http://127.0.0.1:9000") == "http://127.0.0.1:9002/metrics"
    with pytest.raises(Exception, match="host:port"):
        C.default_metrics_url("localhost")


def test_padding_waste_from_the_histogram_growth():
    def s(t, total, count):
        return C.Sample(t, {"x": C.ModelSample(padding_sum=total, padding_count=count)})
    samples = [s(0, 1.0, 10), s(10, 3.0, 20), s(20, 3.0, 20)]
    assert C.padding_waste(samples, "x", [(0, 10)]) == pytest.approx(0.2)
    assert C.padding_waste(samples, "x", [(10, 20)]) is None  # no batches
    assert math.isnan(report.summarise_requests("n", [], [], 0.0, []).mean_busy_fraction)
