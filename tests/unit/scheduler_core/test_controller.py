"""The decision layer's period jitter and window smoothing (several controllers on one load
must not decide in step), on a fake clock."""

from __future__ import annotations

import math

import pytest

from scheduler_core.controller import Controller
from scheduler_core.profile import ControlConfig, SchedulerConfig


class _Queue:
    def __len__(self) -> int:
        return 0

    def min_deadline(self) -> float:
        return float("inf")


def _decision_times(loop: Controller, until_s: float, step_s: float = 0.001) -> list[float]:
    times, now = [], 0.0
    while now <= until_s:
        before = loop.control_period_ms, loop._last_decision_s
        loop.tick(now, _Queue())
        if loop._last_decision_s != before[1]:
            times.append(now)
        now = round(now + step_s, 6)
    return times


def test_without_jitter_decisions_come_every_control_period():
    loop = Controller(SchedulerConfig(), ControlConfig(control_period_ms=100.0))
    times = _decision_times(loop, 1.0)
    assert [round(b - a, 3) for a, b in zip(times, times[1:])] == [0.1] * (len(times) - 1)


def test_jittered_periods_stay_within_the_band_and_differ_between_seeds():
    ctl = ControlConfig(control_period_ms=100.0, period_jitter=0.2)
    gaps = {}
    for seed in (0, 1):
        times = _decision_times(Controller(SchedulerConfig(), ctl, seed=seed), 5.0)
        gaps[seed] = [round(b - a, 3) for a, b in zip(times, times[1:])]
        assert all(0.08 - 0.0011 <= g <= 0.12 + 0.0011 for g in gaps[seed])
        assert len(set(gaps[seed])) > 5  # not one fixed period
    assert gaps[0] != gaps[1]
    # The same seed draws the same periods: a simulation stays deterministic.
    again = _decision_times(Controller(SchedulerConfig(), ctl, seed=0), 5.0)
    assert [round(b - a, 3) for a, b in zip(again, again[1:])] == gaps[0]


STEP_S = 1.5  # the load has come for 1.5 s (more than the 1 s perception window)


def _windows(tau_ms: float, until_s: float, period_ms: float = 100.0,
             util=lambda now: 0.0 if now < STEP_S else 1.0, arriving=lambda now: True):
    """(time, window) after each decision, a request arriving at each while ``arriving``."""
    cfg = SchedulerConfig(base_window_ms=10.0, alpha=0.5, beta=0.0, min_window_ms=0.0,
                          max_window_ms=100.0)
    ctl = ControlConfig(control_period_ms=period_ms, perception_period_ms=period_ms,
                        window_time_constant_ms=tau_ms)
    loop = Controller(cfg, ctl)
    out, k = [], 0
    while (now := round(k * period_ms / 1000.0, 6)) <= until_s:
        if arriving(now):
            loop.on_arrival(now, 1000.0, 1.0)
        loop.set_external_utilization(util(now), measured_at_s=now)
        loop.tick(now, _Queue())
        out.append((now, loop.state.window_ms))
        k += 1
    return out


def _after_step(tau_ms: float, period_ms: float = 100.0, until_s: float = 4.5) -> list[float]:
    return [w for t, w in _windows(tau_ms, until_s, period_ms) if t >= STEP_S]


def test_a_smoothed_window_moves_part_of_the_way_each_decision():
    # util 0: 10 * (1 + 0.5) = 15 ms; util 1: 10 ms. The step comes at STEP_S.
    undamped = _after_step(0.0)
    damped = _after_step(200.0)
    assert undamped[0] == pytest.approx(10.0)  # at once
    assert damped[0] == pytest.approx(10.0 + 5.0 * math.exp(-100.0 / 200.0))
    assert all(abs(d - 10.0) >= abs(u - 10.0) for d, u in zip(damped, undamped))
    assert abs(damped[2] - 10.0) > 0.5  # still on its way 200 ms after the step
    assert damped[-1] == pytest.approx(10.0, abs=0.01)  # it gets there


def test_the_time_constant_holds_whatever_the_decision_period():
    # 1 s after the step the window is within exp(-1100 / tau) of its target (the decision
    # at the step already moved it one period's worth), at 50 ms decisions as at 100 ms
    # ones; a per-decision factor would move twice as far at 50 ms.
    tau_ms = 500.0
    at_100 = dict(_windows(tau_ms, STEP_S + 1.0, 100.0))
    at_50 = dict(_windows(tau_ms, STEP_S + 1.0, 50.0))
    assert at_100[STEP_S + 1.0] - 10.0 == pytest.approx(5.0 * math.exp(-1100.0 / tau_ms),
                                                         rel=0.01)
    assert at_50[STEP_S + 1.0] - 10.0 == pytest.approx(5.0 * math.exp(-1050.0 / tau_ms),
                                                        rel=0.01)


def test_a_cold_start_and_the_end_of_a_long_lull_are_not_smoothed():
    # An idle device (util 0: 15 ms) meets a load (util 1: 10 ms) at 2 s: for the first
    # perception window of that load the window follows at once.
    cold = _windows(3000.0, 4.0, util=lambda now: 0.0 if now < 2.0 else 1.0,
                    arriving=lambda now: now >= 2.0)
    assert dict(cold)[2.0] == pytest.approx(10.0)
    # Under a settled load it is smoothed; after a lull longer than the perception window
    # (1.5 s, at util 0) it follows at once again.
    lull = _windows(3000.0, 7.0,
                    util=lambda now: 1.0 if 2.0 <= now < 3.5 or now >= 5.0 else 0.0,
                    arriving=lambda now: not 3.5 <= now < 5.0)
    at = dict(lull)
    assert at[2.0] > 14.5  # smoothed: the step from 15 ms has barely begun
    assert at[5.0] == pytest.approx(10.0)  # the load after the lull: at once
