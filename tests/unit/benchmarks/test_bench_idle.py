"""``benchmarks/bench_idle.py``: the records a row's window keeps, the target row and the
report section (the server run is ``make bench``'s idle block itself)."""

from __future__ import annotations

import json

from benchmarks.bench_idle import idle_markdown, idle_targets, in_windows
from benchmarks.hold_speed import Row
from benchmarks.segment_stats import plain


def record(start_s: float, requests: int = 4) -> dict:
    return {"start_s": start_s, "requests": requests, "return_s": start_s + 0.005,
            "batches": [[requests, 0, start_s + 0.001, start_s + 0.004, 3.0, "as_handed"]]}


def figures(share: float, host_ms: float = 0.5) -> dict:
    return {"calls": 10, "requests_per_call": 4.0, "call_ms": 5.0, "host_ms_per_call": host_ms,
            "handed_over_gap_ms": 3.0, "idle_while_waiting_share": share, "early_sends": 0}


def block(explicit: dict, native: dict) -> dict:
    return {"fractions": (0.2, 0.5), "measurement_ms": 4000, "explicit": "e", "native": "n",
            "profiles": [{"device": "flat", "label": "flat", "peak_rps": 2000.0,
                          "rows": [Row("e", 0.2, 400.0, 399.0, 8.0, 12.0, stub_us=150.0),
                                   Row("n", 0.2, 400.0, None, error="failed")],
                          "figures": {"e": explicit, "n": native}}]}


def targets(results: dict) -> list[tuple]:
    rows = []
    idle_targets(results, lambda *args: rows.append(args))
    return rows


def test_only_calls_that_started_inside_a_window_count():
    records = [record(t) for t in (0.5, 1.0, 1.5, 2.0, 3.5)]
    kept = in_windows(records, [(1.0, 1.5), (3.0, 4.0)])
    assert [r["start_s"] for r in kept] == [1.0, 1.5, 3.5]
    assert in_windows(records, []) == []


def test_explicit_idle_no_more_than_natives_is_met():
    (row,) = targets({"idle": block(figures(0.20), figures(0.25))})
    target, scope, measured, value, goal, ok = row
    assert ok is True and goal == "<= native's"
    assert abs(value - (0.20 - 0.25)) < 1e-12
    assert "0.200 vs native 0.250" in measured and "0.2x, 0.5x" in measured


def test_explicit_idle_above_natives_is_missed():
    (row,) = targets({"idle": block(figures(0.30, 0.8), figures(0.25, 0.4))})
    assert row[-1] is False
    assert "0.80 vs 0.40" in row[2]


def test_a_profile_without_records_has_no_verdict():
    (row,) = targets({"idle": block({}, figures(0.25))})
    assert row[3] is None and row[-1] is None
    assert targets({}) == []


def test_a_profile_that_failed_is_reported_without_a_verdict():
    results = {"idle": {**block(figures(0.2), figures(0.25)),
                        "profiles": [{"device": "flat", "label": "flat",
                                      "error": "URLError: refused"}]}}
    (row,) = targets(results)
    assert row[2] == "failed: URLError: refused" and row[-1] is None
    assert "Failed: URLError: refused" in "\n".join(idle_markdown(results["idle"]))


def test_the_section_lists_each_models_figures_and_rows():
    text = "\n".join(idle_markdown(block(figures(0.2), figures(0.25))))
    assert "| e | 10 | 4.0 | 5.00 | 0.50 | 3 | 0.200 | - | 0 | - |" in text
    assert "| 0.2x | e | 400 | 399 | 8.0 | 12.0 | 150 |  |" in text
    assert "| 0.2x | n | 400 | - | - | - | - | failed |" in text


def test_rows_reach_the_json_report_as_plain_data():
    data = plain(block(figures(0.2), figures(0.25)))
    row = data["profiles"][0]["rows"][0]
    assert row["model"] == "e" and row["throughput"] == 399.0
    json.dumps(data, allow_nan=False)
