"""``bench_pa``: the perf_analyzer rows' statistics and targets, on made-up runs (no
perf_analyzer): a row is judged by the SLA its input data gave each request, a failed
explicit run where native keeps its SLAs is a refusal, and shares (not counts) are
compared."""

from __future__ import annotations

import json

from benchmarks import bench_pa
from operator_tools.perf_analyzer import TraceRun
from operator_tools.records import exported_record

MS = 1_000_000  # ns


def cell(in_sla, sent, p50=10.0, error=None):
    if error:
        return {"error": error}
    return {"error": None, "in_sla": in_sla, "sent": sent, "attainment": in_sla / sent,
            "p50_ms": p50, "p99_ms": 2 * p50, "answered_rps": sent, "kept_schedule": True}


def targets(rows):
    found = []
    bench_pa.pa_targets({"perf_analyzer": rows}, "flat", lambda *a: found.append(a))
    return {t[0]: t for t in found}


def test_a_failed_explicit_run_where_native_keeps_its_slas_is_a_refusal():
    rows = [{"load": 0.2, "rate_rps": 400, "explicit": cell(100, 100, 10.5),
             "native": cell(100, 100, 10.0)},
            {"load": 0.94, "rate_rps": 1900, "explicit": cell(0, 0, error="deadline infeasible"),
             "native": cell(995, 1000)}]
    found = targets(rows)
    refusals = found["refusals wherever native keeps >= 99 % in SLA"]
    assert refusals[3] == 1.0 and refusals[5] is False and "0.94x FAILED" in refusals[2]
    p50 = found["P50 at 0.2x above native"]
    assert abs(p50[3] - 0.5) < 1e-9 and p50[5] is True


def test_goodput_compares_shares_in_sla_not_counts():
    rows = [{"load": 0.5, "rate_rps": 1000, "explicit": cell(990, 1000),
             "native": cell(1188, 1200)}]
    goodput = targets(rows)["goodput vs native at every load native keeps >= 99 % in SLA"]
    assert abs(goodput[3] - 1.0) < 1e-9 and goodput[5] is True


def test_a_row_counts_what_was_sent_after_the_first_window_against_each_entrys_sla(
        tmp_path, monkeypatch):
    data = tmp_path / "mix.json"
    data.write_text(json.dumps({"data": [
        {"INPUT_IDS": {"content": [101, 5, 102], "shape": [3]},
         "SLA_MS": {"content": [50.0], "shape": [1]}},
        {"INPUT_IDS": {"content": [101, 6, 102], "shape": [3]},
         "SLA_MS": {"content": [200.0], "shape": [1]}}]}))
    start = 1_000 * MS
    requests = (exported_record(start - 5 * MS, start + 100 * MS, (101, 5, 102)),  # warm-up
                exported_record(start, start + 60 * MS, (101, 5, 102)),  # late for 50 ms
                exported_record(start + MS, start + 61 * MS, (101, 6, 102)),  # in 200 ms
                exported_record(start + 2 * MS, None, (101, 6, 102)))  # no answer
    monkeypatch.setattr(bench_pa, "run_poisson", lambda *a, **k: TraceRun(
        "m", ("pa",), 0, "", start, requests))

    row = bench_pa.pa_row("url", "m", str(data), 100.0, bench_pa.sla_by_ids(str(data)),
                          str(tmp_path / "export.json"))

    assert (row["sent"], row["answered"], row["in_sla"]) == (3, 2, 1)
