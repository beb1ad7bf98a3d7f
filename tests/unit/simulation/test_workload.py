"""Seeded workload generation and the perf_analyzer trace files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulation import workload as W


def rate(arrivals, lo=None, hi=None) -> float:
    times = np.array([a.time_s for a in arrivals])
    lo = 0.0 if lo is None else lo
    hi = times.max() if hi is None else hi
    return np.count_nonzero((times >= lo) & (times < hi)) / (hi - lo)


# -- determinism and shape ------------------------------------------------------------------

def test_same_seed_same_workload_and_different_seed_differs():
    a = W.generate(W.Poisson(100.0), 5.0, seed=11)
    b = W.generate(W.Poisson(100.0), 5.0, seed=11)
    c = W.generate(W.Poisson(100.0), 5.0, seed=12)
    assert a == b
    assert a != c


def test_arrival_times_do_not_depend_on_the_length_or_sla_mix():
    a = W.generate(W.Poisson(100.0), 5.0, seed=3)
    b = W.generate(W.Poisson(100.0), 5.0, seed=3, lengths=W.BimodalLengths(),
                   slas=W.SlaMix((20.0,)))
    assert [x.time_s for x in a] == [x.time_s for x in b]


@pytest.mark.parametrize("process", [
    W.Poisson(300.0), W.Bursty(50.0, 800.0), W.Ramp(0.0, 400.0),
    W.FlashCrowd(100.0, factor=4.0, spike_start_s=2.0, spike_length_s=1.0)])
def test_arrivals_sorted_within_duration_with_valid_fields(process):
    arrivals = W.generate(process, 10.0, seed=5)
    times = [a.time_s for a in arrivals]
    assert times == sorted(times)
    assert all(0.0 <= t < 10.0 for t in times)
    assert all(W.MIN_SEQ_LEN <= a.seq_len <= W.MAX_SEQ_LEN for a in arrivals)
    assert all(isinstance(a.seq_len, int) for a in arrivals)
    assert {a.sla_ms for a in arrivals} <= set(W.DEFAULT_SLA_CLASSES_MS)


# -- mean rates ----------------------------------------------------------------------------------

def test_poisson_mean_rate():
    arrivals = W.generate(W.Poisson(500.0), 40.0, seed=1)
    assert len(arrivals) / 40.0 == pytest.approx(500.0, rel=0.03)


def test_poisson_inter_arrival_times_are_exponential():
    times = np.array([a.time_s for a in W.generate(W.Poisson(1000.0), 20.0, seed=2)])
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(1e-3, rel=0.03)
    assert gaps.std() == pytest.approx(1e-3, rel=0.05)  # exponential: std == mean


def test_bursty_mean_rate_matches_the_stationary_rate():
    process = W.Bursty(low_rps=100.0, high_rps=1000.0, mean_low_s=0.8, mean_high_s=0.2)
    assert process.mean_rate_rps(1.0) == pytest.approx(280.0)
    counts = [len(W.generate(process, 100.0, seed=s)) / 100.0 for s in range(5)]
    assert np.mean(counts) == pytest.approx(280.0, rel=0.05)


def test_bursty_is_burstier_than_poisson():
    def dispersion(arrivals, duration):
        counts = np.histogram([a.time_s for a in arrivals], bins=int(duration * 10),
                              range=(0, duration))[0]
        return counts.var() / counts.mean()

    bursty = W.generate(W.Bursty(100.0, 1000.0, 0.8, 0.2), 60.0, seed=4)
    poisson = W.generate(W.Poisson(280.0), 60.0, seed=4)
    assert dispersion(poisson, 60.0) == pytest.approx(1.0, abs=0.2)
    assert dispersion(bursty, 60.0) > 5.0


def test_ramp_rate_moves_linearly():
    arrivals = W.generate(W.Ramp(0.0, 400.0), 50.0, seed=6)
    assert len(arrivals) / 50.0 == pytest.approx(200.0, rel=0.03)
    # The rate is 8 t: a quarter of the arrivals fall in the first half.
    first_half = sum(a.time_s < 25.0 for a in arrivals)
    assert first_half / len(arrivals) == pytest.approx(0.25, abs=0.02)
    assert rate(arrivals, 45.0, 50.0) == pytest.approx(380.0, rel=0.08)


def test_flash_crowd_spike_and_mean():
    process = W.FlashCrowd(200.0, factor=5.0, spike_start_s=10.0, spike_length_s=5.0)
    assert process.mean_rate_rps(50.0) == pytest.approx(200.0 * (1 + 4 * 5 / 50))
    arrivals = W.generate(process, 50.0, seed=7)
    assert len(arrivals) / 50.0 == pytest.approx(280.0, rel=0.04)
    assert rate(arrivals, 10.0, 15.0) == pytest.approx(1000.0, rel=0.06)
    assert rate(arrivals, 20.0, 50.0) == pytest.approx(200.0, rel=0.06)


# -- lengths and SLAs ----------------------------------------------------------------------------

def test_lognormal_lengths_are_long_tailed_around_64():
    lengths = np.array(W.sample_lengths(50_000, seed=8))
    assert lengths.min() >= 16 and lengths.max() <= 512
    assert np.median(lengths) == pytest.approx(64, abs=2)
    assert lengths.mean() > np.median(lengths)  # right tail
    assert (lengths == 512).any() and (lengths == 16).any()  # both clips are reached


def test_bimodal_lengths():
    mix = W.BimodalLengths(short_lo=16, short_hi=64, long_lo=256, long_hi=512,
                           long_fraction=0.25)
    lengths = np.array(W.sample_lengths(40_000, seed=9, lengths=mix))
    is_long = lengths >= 256
    assert is_long.mean() == pytest.approx(0.25, abs=0.01)
    assert lengths[~is_long].max() <= 64 and lengths[~is_long].min() >= 16
    assert lengths[is_long].max() <= 512


def test_sla_mix_equal_and_weighted():
    arrivals = W.generate(W.Poisson(3000.0), 10.0, seed=10)
    slas = np.array([a.sla_ms for a in arrivals])
    for c in (50.0, 100.0, 200.0):
        assert (slas == c).mean() == pytest.approx(1 / 3, abs=0.02)
    weighted = W.generate(W.Poisson(3000.0), 10.0, seed=10,
                          slas=W.SlaMix((50.0, 200.0), (3.0, 1.0)))
    share = np.mean([a.sla_ms == 50.0 for a in weighted])
    assert share == pytest.approx(0.75, abs=0.02)


# -- validation ---------------------------------------------------------------------------------

def test_factory_and_validation_name_the_bad_value():
    assert W.arrival_process("poisson", rate_rps=5.0) == W.Poisson(5.0)
    with pytest.raises(ValueError, match="unknown arrival process 'zipf'"):
        W.arrival_process("zipf")
    with pytest.raises(ValueError, match=r"Poisson.rate_rps.*-1"):
        W.Poisson(-1.0)
    with pytest.raises(ValueError, match="FlashCrowd.factor"):
        W.FlashCrowd(10.0, factor=0.5)
    with pytest.raises(ValueError, match="SlaMix.weights"):
        W.SlaMix((50.0, 100.0), (1.0,))
    with pytest.raises(ValueError, match="duration_s"):
        W.generate(W.Poisson(1.0), 0.0, seed=1)


# -- perf_analyzer traces -------------------------------------------------------------------------

def test_trace_round_trip(tmp_path):
    arrivals = W.generate(W.Bursty(100.0, 2000.0), 3.0, seed=13)
    intervals, data = tmp_path / "intervals.txt", tmp_path / "data.json"
    W.write_trace(arrivals, str(intervals), str(data), seed=1)
    lines = intervals.read_text().splitlines()
    assert len(lines) == len(arrivals)
    assert all(line.isdigit() for line in lines)  # integer microseconds
    assert int(lines[0]) == round(arrivals[0].time_s * 1e6)  # first interval from 0
    back = W.read_trace(str(intervals), str(data))
    assert len(back) == len(arrivals)
    for a, b in zip(arrivals, back):
        assert abs(a.time_s - b.time_s) <= 0.5e-6 + 1e-12  # rounding never accumulates
        assert (a.seq_len, a.sla_ms) == (b.seq_len, b.sla_ms)


def test_input_data_format_and_native_variant(tmp_path):
    arrivals = [W.Arrival(0.001, 5, 50.0), W.Arrival(0.0025, 16, 200.0)]
    path = tmp_path / "with_sla.json"
    W.write_input_data(arrivals, str(path), seed=2)
    doc = json.loads(path.read_text())
    first = doc["data"][0]
    assert first["INPUT_IDS"]["shape"] == [5]
    ids = first["INPUT_IDS"]["content"]
    assert len(ids) == 5 and ids[0] == 101 and ids[-1] == 102
    assert all(1000 <= t <= 29999 for t in ids[1:-1])
    assert first["SLA_MS"] == {"content": [50.0], "shape": [1]}
    assert W.input_data(arrivals, seed=2) == doc  # deterministic

    native = tmp_path / "native.json"
    W.write_input_data(arrivals, str(native), seed=2, include_sla=False)
    ndoc = json.loads(native.read_text())
    assert all(set(e) == {"INPUT_IDS"} for e in ndoc["data"])
    assert ndoc["data"][1]["INPUT_IDS"] == doc["data"][1]["INPUT_IDS"]
    intervals = tmp_path / "i.txt"
    W.write_request_intervals(arrivals, str(intervals))
    assert intervals.read_text() == "1000\n1500\n"
    back = W.read_trace(str(intervals), str(native), default_sla_ms=75.0)
    assert [(a.seq_len, a.sla_ms) for a in back] == [(5, 75.0), (16, 75.0)]
    assert [a.time_s for a in back] == [0.001, 0.0025]


def test_trace_mismatch_and_bad_lines_are_reported(tmp_path):
    arrivals = [W.Arrival(0.0, 8, 50.0), W.Arrival(0.1, 8, 50.0)]
    intervals, data = tmp_path / "i.txt", tmp_path / "d.json"
    W.write_request_intervals(arrivals[:1], str(intervals))
    W.write_input_data(arrivals, str(data))
    with pytest.raises(ValueError, match="1 intervals but"):
        W.read_trace(str(intervals), str(data))
    intervals.write_text("10\nabc\n")
    with pytest.raises(ValueError, match=r"i.txt:2"):
        W.read_request_intervals(str(intervals))
    with pytest.raises(ValueError, match="sorted"):
        W.intervals_us([W.Arrival(0.2, 8, 50.0), W.Arrival(0.1, 8, 50.0)])
