"""The h200 block's verdicts (the real-device targets) and the comparison of the t4/a100 rows
with the last committed report: pure functions of what ``scripts/bench.py`` measured."""

import math

import pytest

from benchmarks import bench_report as R
from benchmarks import bench_report_h200 as H
from benchmarks import segment_stats as B

MEASURE_S = 2.0


def seg(met, sent=100, p50=10.0, p99=20.0, refused=0, cpu=None, role="explicit"):
    errors = {"UNAVAILABLE": refused} if refused else {}
    return B.SegmentStats(role=role, source="measured", duration_s=MEASURE_S, sent=sent,
                          ok=sent - refused, met=met, errors=errors, lost=0,
                          goodput_rps=met / MEASURE_S, attainment=met / sent, p50_ms=p50,
                          p99_ms=p99, per_class={}, send_lag_p99_ms=1.0,
                          stub_cpu_us_per_request=cpu)


def row(load, explicit, native):
    return {"load": load, "rate_rps": load * 100, "measured": {"explicit": explicit,
                                                               "native": native}}


def run(rows, ts=10.0, peaks=None):
    return {"time_scale": ts, "measure_s": MEASURE_S, "rows": rows, "sla_classes_ms": (500.0,),
            "peaks": peaks if peaks is not None else
            {"explicit": {"throughput_rps": 90.0, "concurrency": 64, "error": None},
             "native": {"throughput_rps": 100.0, "concurrency": 64, "error": None}}}


def verdicts(r):
    out = []
    H.h200_run_targets(r, lambda *a: out.append(
        dict(zip(("target", "scope", "measured", "value", "goal", "ok"), a))))
    return {t["target"].split(" (")[0].split(" at every")[0]: t for t in out}


def good_run():
    return run([
        row(0.3, seg(100, p50=30.0, cpu=500.0), seg(100, p50=25.0, cpu=400.0)),
        row(0.5, seg(100, p50=40.0, cpu=520.0), seg(99, p50=30.0, cpu=410.0)),
        row(0.8, seg(100, p50=50.0, cpu=480.0), seg(95, p50=60.0, cpu=390.0)),
        row(1.0, seg(98, p50=80.0, cpu=470.0), seg(60, p50=900.0, cpu=300.0)),
        row(1.3, seg(95, p50=90.0), seg(40, p50=900.0)),
        row(2.0, seg(92, sent=200, p50=90.0), seg(10, sent=200, p50=990.0)),
    ])


def test_knee_is_the_highest_load_with_99_percent_in_sla_all_lower_too():
    r = good_run()
    assert H.h200_knee(r, "native") == (0.5, 0.8)
    assert H.h200_knee(r, "explicit") == (0.8, 1.0)


def test_targets_of_a_run_that_meets_them():
    v = verdicts(good_run())
    assert v["goodput vs native"]["ok"] is True
    assert v["goodput vs native"]["value"] == pytest.approx(1.0)  # worst up to 0.5x: 100/100
    # P50 gap converted back by the time scale: worst (40 - 30) / 10 = 1.0 ms
    assert v["P50 above native"]["value"] == pytest.approx(1.0)
    assert v["P50 above native"]["ok"] is True
    assert v["refusals wherever native keeps >= 99 % in SLA"]["ok"] is True
    past = v["goodput vs native between 1x and 1.3x of native's peak"]
    assert past["value"] == pytest.approx(98 / 60) and past["ok"] is True  # worst: 1.0x
    over = v["goodput at 2x vs the plugin's own knee goodput"]
    assert over["value"] == pytest.approx(92 / 100) and over["ok"] is True
    peak = v["closed-loop peak"]
    assert peak["value"] == pytest.approx(0.9) and peak["ok"] is False
    cpu = v["explicit stub CPU per request vs native"]
    # medians over loads <= 1.0x of the per-row differences: 100, 110, 90, 170 -> 105
    assert cpu["value"] == pytest.approx(105.0) and cpu["ok"] is True


def test_refusals_count_where_native_keeps_99_percent_even_past_its_knee():
    r = good_run()
    r["rows"][1] = row(0.5, seg(97, p50=40.0, refused=3), seg(99, p50=30.0))
    v = verdicts(r)
    refused = v["refusals wherever native keeps >= 99 % in SLA"]
    assert refused["value"] == 3.0 and refused["ok"] is False and "0.5x: 3" in refused["measured"]
    assert v["goodput vs native"]["value"] == pytest.approx(97 / 99)
    assert v["goodput vs native"]["ok"] is False


def test_p50_gap_is_judged_at_device_speed():
    r = good_run()
    r["rows"][0] = row(0.3, seg(100, p50=45.0), seg(100, p50=25.0))
    v = verdicts(r)
    assert v["P50 above native"]["value"] == pytest.approx(2.0)
    assert v["P50 above native"]["ok"] is False
    r1 = run(r["rows"], ts=1.0)
    assert verdicts(r1)["P50 above native"]["value"] == pytest.approx(20.0)


def test_no_native_knee_leaves_the_below_knee_targets_open():
    r = run([row(0.3, seg(100), seg(50)), row(2.0, seg(90), seg(10))])
    v = verdicts(r)
    assert v["goodput vs native"]["ok"] is None
    assert "P50 above native" not in v
    assert "refusals wherever native keeps >= 99 % in SLA" not in v


def test_overload_without_an_explicit_knee_is_missed():
    r = run([row(0.3, seg(90), seg(100)), row(2.0, seg(90), seg(10))])
    over = verdicts(r)["goodput at 2x vs the plugin's own knee goodput"]
    assert over["ok"] is False and over["value"] is None


def test_failed_peak_is_reported_not_judged():
    r = good_run()
    r["peaks"]["explicit"] = {"error": "perf_analyzer failed (1)"}
    peak = verdicts(r)["closed-loop peak"]
    assert peak["ok"] is None and "perf_analyzer failed" in peak["measured"]


def test_ts1_peak_takes_the_better_native_and_skips_failures():
    ts1 = {"closed_loop": {"explicit": {"throughput_rps": 900.0, "error": None}, "native": [
        {"setting": B.NativeSetting(0), "peak": {"throughput_rps": 1000.0, "error": None}},
        {"setting": B.NativeSetting(2000), "peak": {"error": "boom"}}]}}
    peak = H.ts1_peak(ts1)
    assert peak["peaks"]["native"]["throughput_rps"] == 1000.0
    assert peak["native_label"] == B.NativeSetting(0).label
    assert H.ts1_peak({"overhead": []}) is None


def compact(goodput, p99, load=0.2, arrival="poisson", role="explicit", profile="t4"):
    return {"profile": profile, "cost_mode": "padded", "load": load, "arrival": arrival,
            "role": role, "goodput_rps": goodput, "p99_ms": p99, "attainment": 1.0}


def test_worse_rows_allow_the_stated_noise():
    base = [compact(100.0, 50.0), compact(100.0, 50.0, load=0.4),
            compact(100.0, 50.0, load=0.6), compact(100.0, None, load=2.0),
            compact(1.0, 1.0, role="native")]
    cur = [compact(97.5, 54.0),  # inside 3 % / 10 %
           compact(96.0, 50.0, load=0.4),  # goodput 4 % lower
           compact(100.0, 56.0, load=0.6),  # P99 12 % higher
           compact(100.0, 80.0, load=2.0),  # no committed P99 to compare
           compact(0.0, 99.0, role="native"),  # native rows are not compared
           compact(5.0, 1.0, load=0.9)]  # no committed row
    compared, worse = H.worse_rows(cur, base)
    assert compared == 4
    assert worse == ["poisson 40%: goodput 96.0 vs 100.0", "poisson 60%: P99 56 vs 50 ms"]


def test_compact_emulated_reads_stats_and_their_json_form():
    s = seg(50)
    block = {"profile": "a100", "cost_mode": "ragged",
             "cells": [{"load": 0.7, "arrival": "bursty",
                        "measured": {"explicit": s, "native": s.to_dict()}}]}
    rows = H.compact_emulated([block])
    assert [r["role"] for r in rows] == ["explicit", "native"]
    assert rows[0]["goodput_rps"] == rows[1]["goodput_rps"] == pytest.approx(25.0)
    assert rows[0]["profile"] == "a100" and rows[1]["arrival"] == "bursty"


def regression(results):
    out = []
    H.regression_targets(results, lambda *a: out.append(
        dict(zip(("target", "scope", "measured", "value", "goal", "ok"), a))))
    return out


def test_regression_rows_per_block_and_missing_baseline():
    block = {"profile": "t4", "cost_mode": "padded",
             "cells": [{"load": 0.2, "arrival": "poisson",
                        "measured": {"explicit": seg(50, p99=20.0), "native": seg(50)}}]}
    base = {"source": "git show HEAD:results/bench/bench.json", "commit": "abc",
            "started": "then", "emulated": [compact(30.0, 20.0)]}
    assert regression({"emulated": [], "baseline": base})[0]["ok"] is None
    [reg] = regression({"emulated": [block], "baseline": base})
    assert reg["ok"] is False and "goodput 25.0 vs 30.0" in reg["measured"]
    assert reg["scope"] == "t4 padded" and reg["value"] == 1.0
    base["emulated"] = [compact(25.0, 20.0)]
    assert regression({"emulated": [block], "baseline": base})[0]["ok"] is True
    assert regression({"emulated": [block], "baseline": {"error": "no path"}})[0]["ok"] is None
    assert regression({"emulated": [block]}) == []  # an old pickle: no comparison


def test_h200_markdown_and_targets_render(tmp_path):
    r = good_run()
    r.update({"sla_classes_ms": (500.0, 1000.0), "capacity_rps": 200.0, "warmup_s": 1.0,
              "client_timeout_s": 1.1, "sweep_rate_rps": 70.0, "native_peak_rps": 100.0,
              "native_max_batch_size": 64, "native_setting": B.NativeSetting(500),
              "sweep_reference_peak": {"setting": B.NativeSetting(0),
                                       "peak": {"throughput_rps": 100.0, "error": None}},
              "sweep": [{"setting": B.NativeSetting(0), "measured": seg(50)}]})
    host = {"time_scale": 0.01, "native_setting": B.NativeSetting(0),
            "sla_classes_ms": (50.0,), "peaks": {
                "explicit": {"throughput_rps": 4000.0, "p50_ms": 10.0, "p99_ms": 20.0,
                             "stub_cpu_us_per_request": 300.0, "requests": 1000,
                             "error": None},
                "native": {"throughput_rps": 5000.0, "p50_ms": 8.0, "p99_ms": 15.0,
                           "stub_cpu_us_per_request": None, "requests": None,
                           "error": None}}}
    results = {"command": "x", "started": "now", "machine": "m", "wall_s": 60.0,
               "capacity_sample": 10, "target_capacity_rps": 200.0, "emulated": [],
               "h200": {"profile": "h200_minilm", "profile_description": "EMULATED",
                        "runs": [r], "host_bound": host}}
    flat = {**r, "label": "flat GPU-like t4 EMULATED", "intake": "hold",
            "cpu_rounds": [{"explicit": 130.0, "native": 100.0}] * 3,
            "peak_rounds": [r["peaks"]] * 3}
    host["peak_rounds"] = [host["peaks"]] * 3
    results["h200"]["runs"].append(flat)
    R.write(results, str(tmp_path))
    text = (tmp_path / "report.md").read_text()
    assert "h200_minilm EMULATED at time scale 10" in text  # a run without a label
    assert "flat GPU-like t4 EMULATED at time scale 10" in text
    assert "| flat GPU-like t4 EMULATED, time scale 10 |" in text  # its targets' scope
    assert "Host-bound: EMULATED h200_minilm at time scale 0.01" in text
    assert "closed-loop peak vs native, device nearly free (host-bound)" in text
    assert "| 0.80 | >= 0.9x | **MISSED** |" in text  # 4000 / 5000
    # the rounds: flat's CPU verdict at 0.8x (1.3x, missed), and each round a line
    assert "stub CPU per request vs native at 0.8x, open loop (median of rotated rounds)" in text
    assert "| 1.30 | <= 1.25x | **MISSED** |" in text
    assert text.count("- peak round 3: explicit 4000 vs native 5000 req/s") == 1  # host-bound
    assert text.count("- 0.8x round 2: stub CPU 130 vs 100 us a request") == 1
    assert math.isfinite(H.in_sla_rps(seg(10), 2.0))
