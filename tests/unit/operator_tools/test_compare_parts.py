"""The offline parts of ``explicit-batching compare``: matching exported requests to the
trace, and the live table (no server here; the
integration test runs the whole command against one)."""

from __future__ import annotations

import math

import pytest

from operator_tools.compare import cli as C, outcome, segments
from operator_tools import perf_analyzer as pa
from operator_tools import report
from operator_tools.records import exported_record

def test_match_requests_by_content_and_send_order():
    entries = {(101, 5, 102): (3, 250.0), (101, 6, 7, 102): (4, 500.0)}
    run = pa.TraceRun("m", ("pa",), 0, "", 1_000_000_000, (
        exported_record(1_010_000_000, 1_030_000_000, (101, 5, 102), 250.0),
        exported_record(1_021_000_000, None, (101, 6, 7, 102), None),
        exported_record(1_040_000_000, 1_050_000_000, (101, 9, 102), None)))
    seg = segments.Segment(0, "m", "native", planned=3, run=run)
    segments.match_requests(seg, [10.0, 20.0, 30.0], entries)
    assert seg.unmatched == 1
    assert [(r.scheduled_s * 1e3, r.sla_ms, r.seq_len, r.latency_ms) for r in seg.requests] == [
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


def test_a_summary_of_no_requests_has_no_busy_fraction():
    assert math.isnan(report.summarise_requests("n", [], [], 0.0, []).mean_busy_fraction)


def test_explicit_model_runs_in_benchmark_mode_and_the_report_says_so(monkeypatch):
    from tests.unit.operator_tools.test_benchmark_mode import CONFIG, FakeControl

    control = FakeControl()
    monkeypatch.setattr(C.live, "ModelControl", lambda url, model: control)
    with C._explicit_policy("http://localhost:8000", "emulated_explicit", "serve_late") as mode:
        assert control.loads[-1]["parameters"]["control.infeasible_policy"] == {
            "string_value": "serve_late"}
    assert control.loads[-1] == CONFIG and control.closed
    line = C._policy_line(mode, "emulated_explicit")
    assert "serve_late" in line and "count as missed" in line and "loaded back" in line
    with C._explicit_policy("localhost:8000", "emulated_explicit", "as-configured") as mode:
        assert mode is None
    assert "as configured" in C._policy_line(None, "emulated_explicit")


class _Scraper:
    def __init__(self, failures: int = 0, last_error: str = ""):
        self.failures, self.last_error = failures, last_error


def _segment(index: int, model: str, output: str = "", error: str | None = None,
             hung: str = "", unmatched: int = 0, hung_ended: int | None = None
             ) -> segments.Segment:
    run = pa.TraceRun(model, ("pa",), 0 if error is None else 1, output, 0, (), error)
    return segments.Segment(index, model, "explicit", planned=1, run=run, hung=hung,
                            hung_ended=hung_ended, unmatched=unmatched)


def test_run_warnings_names_each_environmental_cause_and_each_failed_segment():
    """run_warnings is pure: what a busy machine causes (failed scrapes, perf_analyzer
    behind its schedule) and what a broken run causes (no data, a replay) each get one
    line naming the segment; a clean run gets none. (The integration test fails only on
    the second kind.)"""
    clean = [_segment(0, "x"), _segment(1, "n")]
    assert outcome.run_warnings(clean, _Scraper()) == []
    warnings = outcome.run_warnings(
        [_segment(0, "x", output=pa.FELL_BEHIND), _segment(1, "n", error="exit 99"),
         _segment(2, "x", hung="perf_analyzer hung after 3 s", unmatched=2)],
        _Scraper(failures=3, last_error="ScrapeTimeout"))
    assert warnings[0] == "3 metric scrapes failed (last: ScrapeTimeout)"
    assert "2 exported requests" in warnings[1]
    assert "could not keep up in segment(s) 1" in warnings[2]
    assert warnings[3].startswith("segment 2 (n) produced no data: exit 99")
    assert warnings[4].startswith("segment 3 (x) was replayed once: the first replay hung")
    assert len(warnings) == 5
    # what the server ended of the hung replay: none is perf_analyzer's sleeping worker
    slept, some = outcome.run_warnings(
        [_segment(0, "x", hung="perf_analyzer hung", hung_ended=0),
         _segment(1, "n", hung="perf_analyzer hung", hung_ended=1)], _Scraper())
    assert slept.endswith("the server ended 0 of its 1 requests (perf_analyzer sent none: "
                          "its worker slept, docs/platform.md)")
    assert some.endswith("the server ended 1 of its 1 requests")
