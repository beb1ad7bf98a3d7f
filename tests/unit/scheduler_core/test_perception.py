"""BusyTracker utilisation and LatencyWindow statistics, with injected times."""

from __future__ import annotations

import math
from collections import deque

import pytest
from hypothesis import given, settings, strategies as st

from scheduler_core.perception import ArrivalRate, BusyTracker, LatencyWindow
from scheduler_core.stats import nearest_rank_index


# -- BusyTracker ------------------------------------------------------------------------

def test_idle_tracker_reports_zero():
    assert BusyTracker(1.0).utilization(5.0) == 0.0


@pytest.mark.parametrize("window", [0.0, -1.0])
def test_window_must_be_positive(window):
    with pytest.raises(ValueError):
        BusyTracker(window)


def test_interval_fully_inside_window():
    t = BusyTracker(1.0)
    t.record(1.25, 1.5)
    assert t.utilization(2.0) == 0.25


def test_interval_partially_overlapping_window_start():
    t = BusyTracker(1.0)
    t.record(0.0, 1.0)
    # window (0.5, 1.5]: only 0.5..1.0 counts
    assert t.utilization(1.5) == 0.5


def test_interval_ending_after_now_counts_only_up_to_now():
    t = BusyTracker(2.0)
    t.record(1.0, 3.0)
    # at now=2.0, window (0, 2]: 1.0..2.0 counts, not the future part
    assert t.utilization(2.0) == 0.5


def test_several_intervals_summed():
    t = BusyTracker(1.0)
    t.record(0.0, 0.25)    # outside window at now=1.5 -> expired
    t.record(0.25, 0.75)   # overlaps (0.5, 1.5] by 0.25
    t.record(1.0, 1.25)    # fully inside, 0.25
    assert t.utilization(1.5) == 0.5


def test_open_busy_interval_counts_up_to_now():
    t = BusyTracker(1.0)
    t.start(2.0)
    assert t.utilization(2.25) == 0.25
    assert t.utilization(2.75) == 0.75
    # open for longer than the window: only the window counts
    assert t.utilization(4.0) == 1.0


def test_open_interval_plus_finished_interval():
    t = BusyTracker(1.0)
    t.record(1.0, 1.25)
    t.start(1.5)
    assert t.utilization(1.75) == 0.5


def test_start_stop_records_interval():
    t = BusyTracker(1.0)
    t.start(1.0)
    t.stop(1.5)
    assert t.utilization(1.5) == 0.5
    assert t.utilization(1.75) == 0.5
    assert t.utilization(2.25) == 0.25   # window (1.25, 2.25]
    assert t.utilization(2.5) == 0.0


def test_stop_without_start_is_harmless():
    t = BusyTracker(1.0)
    t.stop(3.0)
    assert t.utilization(3.0) == 0.0


def test_expiry_drops_old_intervals():
    t = BusyTracker(1.0)
    t.record(0.0, 0.5)
    t.record(0.5, 1.0)
    assert t.utilization(1.0) == 1.0
    assert t.utilization(1.5) == 0.5
    assert t.utilization(2.0) == 0.0
    assert len(t._intervals) == 0
    # a fresh interval after expiry is measured on its own
    t.record(2.5, 2.75)
    assert t.utilization(3.0) == 0.25


def test_utilization_capped_at_one():
    t = BusyTracker(1.0)
    t.record(0.0, 1.0)
    t.record(0.0, 1.0)  # overlapping reports must not exceed 100 %
    assert t.utilization(1.0) == 1.0


# -- LatencyWindow ----------------------------------------------------------------------

def _filled(values, now=0.0, window=10.0) -> LatencyWindow:
    w = LatencyWindow(window)
    for v in values:
        w.add(now, v)
    return w


def test_empty_window_statistics():
    w = LatencyWindow(1.0)
    assert w.count(0.0) == 0
    assert w.percentile(0.0, 99) == 0.0
    assert w.coefficient_of_variation(0.0) == 0.0


@pytest.mark.parametrize("q,expected", [(0, 1.0), (1, 1.0), (50, 50.0), (90, 90.0),
                                         (95, 95.0), (99, 99.0), (100, 100.0)])
def test_percentile_nearest_rank(q, expected):
    # insertion order shuffled: percentile must sort
    values = [float(v) for v in range(100, 0, -1)]
    w = _filled(values)
    assert w.percentile(0.0, q) == expected


def test_percentile_small_sample():
    w = _filled([30.0, 10.0, 20.0])
    assert w.percentile(0.0, 50) == 20.0
    assert w.percentile(0.0, 34) == 20.0
    assert w.percentile(0.0, 33) == 10.0
    assert w.percentile(0.0, 99) == 30.0


@pytest.mark.parametrize("q,n,expected", [(7, 100, 7.0), (99.9, 1000, 999.0)])
def test_percentile_exact_nearest_rank_float_rounding(q, n, expected):
    w = _filled([float(v) for v in range(1, n + 1)])
    assert w.percentile(0.0, q) == expected


def test_coefficient_of_variation_sample_std_over_mean():
    w = _filled([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    # mean 5, sum of squared deviations 32, sample variance 32/7
    assert w.coefficient_of_variation(0.0) == pytest.approx(math.sqrt(32 / 7) / 5, rel=1e-12)


def test_coefficient_of_variation_constant_and_single():
    assert _filled([5.0, 5.0, 5.0]).coefficient_of_variation(0.0) == 0.0
    assert _filled([5.0]).coefficient_of_variation(0.0) == 0.0


def test_coefficient_of_variation_two_values():
    # [1, 3]: mean 2, sample std sqrt(2)
    assert _filled([1.0, 3.0]).coefficient_of_variation(0.0) == pytest.approx(
        math.sqrt(2) / 2, rel=1e-12)


def test_coefficient_of_variation_non_positive_mean():
    assert _filled([0.0, 0.0]).coefficient_of_variation(0.0) == 0.0
    assert _filled([-1.0, 1.0]).coefficient_of_variation(0.0) == 0.0


def test_latency_samples_expire():
    w = LatencyWindow(1.0)
    w.add(0.0, 100.0)
    w.add(0.5, 1.0)
    w.add(0.75, 3.0)
    assert w.count(0.9) == 3
    assert w.percentile(0.9, 100) == 100.0
    # at now=1.0 the horizon is 0.0: the sample at 0.0 is out
    assert w.count(1.0) == 2
    assert w.percentile(1.0, 100) == 3.0
    assert w.coefficient_of_variation(1.0) == pytest.approx(math.sqrt(2) / 2, rel=1e-12)
    assert w.count(1.75) == 0


def test_latency_max_samples_bound():
    w = LatencyWindow(100.0, max_samples=3)
    for i, v in enumerate([1.0, 2.0, 3.0, 4.0, 5.0]):
        w.add(float(i), v)
    assert w.count(5.0) == 3
    assert w.percentile(5.0, 0) == 3.0


class _DequeWindow:
    """The window's contract as bounded deques: the reference the rings must match."""

    def __init__(self, window_s: float, max_samples: int):
        self.window_s = window_s
        self.times, self.values = deque(maxlen=max_samples), deque(maxlen=max_samples)

    def add_many(self, now_s: float, values) -> None:
        self.times.extend([now_s] * len(values))
        self.values.extend(values)

    def kept(self, now_s: float) -> list[float]:
        while self.times and self.times[0] <= now_s - self.window_s:
            self.times.popleft()
            self.values.popleft()
        return list(self.values)


_OPS = st.lists(st.tuples(st.floats(0.0, 0.4), st.lists(st.floats(0.0, 500.0), max_size=9),
                          st.booleans()), max_size=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_OPS, st.integers(1, 7))
def test_latency_window_keeps_what_bounded_deques_keep(ops, max_samples):
    """Batches added (``add_many``, or ``add`` one by one) at times that mostly rise, the
    statistics read between them: the same samples, in the same order, as the deques."""
    window, ref, now = LatencyWindow(1.0, max_samples), _DequeWindow(1.0, max_samples), 0.0
    for step, values, one_by_one in ops:
        now += step - 0.05  # a batch's feedback may come a little out of order
        if one_by_one:
            for v in values:
                window.add(now, v)
        else:
            window.add_many(now, values)
        ref.add_many(now, values)
        kept = ref.kept(now)
        assert list(window._array(now)) == kept and window.count(now) == len(kept)
        assert window.percentile(now, 99) == (
            sorted(kept)[nearest_rank_index(len(kept), 99)] if kept else 0.0)


# -- ArrivalRate --------------------------------------------------------------------------

def test_arrival_rate_counts_the_window_per_second():
    a = ArrivalRate(0.5)
    assert a.rate_rps(1.0) == 0.0
    for t in (0.6, 0.7, 0.9, 1.0):
        a.add(t)
    assert a.rate_rps(1.0) == 8.0      # 4 in (0.5, 1.0]
    assert a.rate_rps(1.15) == 6.0     # 0.6 has left: (0.65, 1.15]
    assert a.rate_rps(1.5) == 0.0      # (1.0, 1.5]: the window's start is excluded


@pytest.mark.parametrize("window", [0.0, -1.0])
def test_arrival_rate_window_must_be_positive(window):
    with pytest.raises(ValueError):
        ArrivalRate(window)
