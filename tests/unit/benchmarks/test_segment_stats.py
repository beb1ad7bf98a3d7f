"""The arithmetic behind ``make bench``: segment figures, knee, best native, verdicts."""

import math

import pytest

from benchmarks import bench_report as R
from benchmarks import segment_stats as B
from benchmarks.load_result import LoadResult
from operator_tools.records import timed_record
from simulation import baselines
from simulation import workload as W
from scheduler_core.profile_files import load_profile, profile_path
from simulation.simulator import simulate

PROFILES = "model_repository/emulated_explicit/profiles"


def rec(t, latency_ms, outcome="ok", sla=100.0, seq_len=64):
    sent = t
    resp = None if latency_ms is None else t + latency_ms / 1000.0
    return timed_record(t, sent, resp, outcome, "", seq_len, sla)


def result(records, duration_s=1.0):
    return LoadResult("m", "localhost:1", len(records), duration_s, records)


def test_native_sweep_has_delay_zero_once():
    settings = B.native_sweep((0, 500, 1000), ((), (8, 16, 32)))
    assert [s.max_queue_delay_us for s in settings] == [0, 500, 500, 1000, 1000]
    assert settings[2].dynamic_batching() == {"max_queue_delay_microseconds": 500,
                                              "preferred_batch_size": [8, 16, 32]}
    assert "preferred_batch_size" not in settings[0].dynamic_batching()


def test_measured_stats_counts_late_refused_and_timed_out_as_misses():
    recs = [rec(0.0, 50.0), rec(0.1, 150.0),  # met, late
            rec(0.2, 5.0, "UNAVAILABLE"), rec(0.3, None, "DEADLINE_EXCEEDED"),
            rec(0.4, 20.0, sla=50.0)]  # met, tighter class
    s = B.measured_stats("explicit", result(recs))
    assert s.sent == 5 and s.ok == 3 and s.met == 2
    assert s.attainment == pytest.approx(0.4)
    assert s.goodput_rps == pytest.approx(2.0)  # 2 met over the 1 s schedule
    assert s.errors == {"UNAVAILABLE": 1, "DEADLINE_EXCEEDED": 1}
    assert s.per_class[50.0][2] == 1.0 and s.per_class[100.0][2] == pytest.approx(0.25)


def test_goodput_span_extends_to_the_last_answer():
    recs = [rec(0.0, 10.0), rec(0.5, 1500.0, sla=5000.0)]  # answered at 2.0 s
    s = B.measured_stats("native", result(recs, duration_s=1.0))
    assert s.duration_s == pytest.approx(2.0)
    assert s.goodput_rps == pytest.approx(1.0)


def test_knee_needs_every_lower_rung():
    assert B.knee([(0.2, 1.0), (0.4, 0.995), (0.6, 0.9), (0.7, 1.0)]) == (0.4, 0.6)
    assert B.knee([(0.2, 0.5), (0.4, 1.0)]) == (None, 0.2)
    assert B.knee([(0.2, 1.0), (0.4, 1.0)]) == (0.4, None)


def test_best_by_skips_nan_and_respects_direction():
    a = B.SegmentStats("native", "measured", 1, 1, 1, 1, {}, 0, 5.0, 1.0, 3.0, math.nan, {})
    b = B.SegmentStats("native", "measured", 1, 1, 1, 1, {}, 0, 7.0, 1.0, 9.0, 4.0, {})
    assert B.best_by([("a", a), ("b", b)], "goodput")[0] == "b"
    assert B.best_by([("a", a), ("b", b)], "p50")[0] == "a"
    assert B.best_by([("a", a), ("b", b)], "p99")[0] == "b"  # a's is NaN
    assert B.best_by([("a", a)], "fluctuation") is None


def test_sustainable_rejects_errors_and_growing_latency():
    ok = [rec(i / 100, 5.0, sla=None) for i in range(100)]
    assert B.sustainable(B.measured_stats("x", result(ok)), 100, 50.0)
    slow = [rec(i / 100, 5.0 + i, sla=None) for i in range(100)]
    assert not B.sustainable(B.measured_stats("x", result(slow)), 100, 50.0)
    failed = ok[:-1] + [rec(0.99, 1.0, "UNAVAILABLE", sla=None)]
    assert not B.sustainable(B.measured_stats("x", result(failed)), 100, 50.0)


def test_simulated_stats_window_matches_the_simulator():
    prof = load_profile(profile_path(PROFILES, "t4"))
    arrivals = W.generate(W.Poisson(300.0), 2.0, 7, W.LogNormalLengths(), W.SlaMix())
    sim = simulate(baselines.TritonDynamicBatcher(32, 0), arrivals, prof.cost_model,
                   "padded", 1.0)
    whole = B.simulated_stats("native", sim, 2.0)
    assert whole.sent == sim.arrivals and whole.met == sim.met
    late = B.simulated_stats("native", sim, 1.0, start_s=1.0)
    assert late.sent == sum(1 for a in arrivals if a.time_s >= 1.0)
    assert 0 < late.sent < whole.sent


def stats(goodput, attainment, p99_tight=10.0, busy=(0.5, 0.5)):
    return B.SegmentStats("r", "measured", 1.0, 100, 100, int(attainment * 100), {}, 0,
                          goodput, attainment, 1.0, 1.0, {50.0: (1.0, p99_tight, attainment)},
                          busy=list(busy))


def block(cells, sweep):
    return {"profile": "t4", "cost_mode": "padded", "time_scale": 1.0, "capacity_rps": 100.0,
            "capacity_device_rps": 100.0, "sla_classes_ms": (50.0,), "sweep": sweep,
            "cells": cells, "native_setting": B.NativeSetting(0)}


def cell(load, explicit, native, arrival="poisson"):
    return {"load": load, "arrival": arrival, "rate_rps": load * 100,
            "measured": {"explicit": explicit, "native": native},
            "sim": {"explicit": explicit, "native": native}, "sim_best_native": {}}


def test_targets_compute_ratios_against_the_best_native():
    cells = [cell(0.2, stats(20, 1.0), stats(20, 1.0)),
             cell(0.3, stats(30, 1.0), stats(25, 0.9)),
             cell(0.6, stats(60, 1.0), stats(20, 0.3)),
             cell(0.7, stats(70, 0.995, p99_tight=20.0, busy=(0.7, 0.7, 0.7)),
                  stats(10, 0.1)),
             cell(0.8, stats(75, 0.95), stats(50, 0.5)),
             cell(2.0, stats(65, 0.3), stats(5, 0.02))]
    sweep = [{"setting": B.NativeSetting(0), "measured": stats(10, 0.1, 100.0, (0.2, 0.8)),
              "sim": stats(10, 0.1)},
             {"setting": B.NativeSetting(500), "measured": stats(9, 0.1, 40.0, (0.5, 0.6)),
              "sim": stats(9, 0.1)}]
    rows = {r["target"]: r for r in R.targets({"emulated": [block(cells, sweep)]})}
    goodput = rows["goodput at 60-80 % load vs best native"]
    assert goodput["value"] == pytest.approx(1.5)  # worst cell: 75 / 50 at 80 %
    assert goodput["verdict"] == "**MISSED**"
    knee = rows["knee (>= 99 % attainment) vs native"]
    assert knee["value"] == pytest.approx(0.7 / 0.2) and knee["verdict"] == "met"
    over = rows["2x overload goodput vs explicit's knee goodput"]
    assert over["value"] == pytest.approx(65 / 70) and over["verdict"] == "met"
    p99 = rows["P99 of the 50 ms class at 70 % vs best native"]
    assert p99["value"] == pytest.approx(20.0 / 40.0)  # the 500 us setting has the best P99
    fluct = rows["utilisation fluctuation at 70 % vs best native"]
    assert fluct["value"] == pytest.approx(0.0)
    assert B.plain({"x": math.nan, "s": B.NativeSetting(5)})["x"] is None

