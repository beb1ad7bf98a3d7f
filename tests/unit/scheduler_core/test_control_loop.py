"""The decision layer's period jitter and window smoothing (several controllers on one load
must not decide in step), on a fake clock."""

from __future__ import annotations

import math

import pytest

from scheduler_core.control_loop import ControlLoop
from scheduler_core.profile import ControlConfig, SchedulerConfig


class _Queue:
    def __len__(self) -> int:
        return 0

    def min_deadline(self) -> float:
        return float("inf")


def _decision_times(loop: ControlLoop, until_s: float, step_s: float = 0.001) -> list[float]:
    times, now = [], 0.0
    while now <= until_s:
        before = loop.control_period_ms, loop._last_decision_s
        loop.tick(now, _Queue())
        if loop._last_decision_s != before[1]:
            times.append(now)
        now = round(now + step_s, 6)
    return times


def test_without_jitter_decisions_come_every_control_period():
    loop = ControlLoop(SchedulerConfig(), ControlConfig(control_period_ms=100.0))
    times = _decision_times(loop, 1.0)
    assert [round(b - a, 3) for a, b in zip(times, times[1:])] == [0.1] * (len(times) - 1)


def test_jittered_periods_stay_within_the_band_and_differ_between_seeds():
    ctl = ControlConfig(control_period_ms=100.0, period_jitter=0.2)
    gaps = {}
    for seed in (0, 1):
        times = _decision_times(ControlLoop(SchedulerConfig(), ctl, seed=seed), 5.0)
        gaps[seed] = [round(b - a, 3) for a, b in zip(times, times[1:])]
        assert all(0.08 - 0.0011 <= g <= 0.12 + 0.0011 for g in gaps[seed])
        assert len(set(gaps[seed])) > 5  # not one fixed period
    assert gaps[0] != gaps[1]
    # The same seed draws the same periods: a simulation stays deterministic.
    again = _decision_times(ControlLoop(SchedulerConfig(), ctl, seed=0), 5.0)
    assert [round(b - a, 3) for a, b in zip(again, again[1:])] == gaps[0]


def _window_after(tau_ms: float, decisions: int, period_ms: float = 100.0) -> list[float]:
    """The window after each decision: utilisation 0 at the first, 1 from then on."""
    cfg = SchedulerConfig(base_window_ms=10.0, alpha=0.5, beta=0.0, min_window_ms=0.0,
                          max_window_ms=100.0)
    ctl = ControlConfig(control_period_ms=period_ms, perception_period_ms=period_ms,
                        window_time_constant_ms=tau_ms)
    loop = ControlLoop(cfg, ctl)
    windows = []
    for k in range(decisions):
        now = k * period_ms / 1000.0
        loop.set_external_utilization(0.0 if k == 0 else 1.0, measured_at_s=now)
        loop.tick(now, _Queue())
        windows.append(loop.state.window_ms)
    return windows


def test_a_smoothed_window_moves_part_of_the_way_each_decision():
    # util 0: 10 * (1 + 0.5) = 15 ms; util 1: 10 ms.
    undamped = _window_after(0.0, 30)
    damped = _window_after(200.0, 30)
    assert undamped[0] == damped[0] == pytest.approx(15.0)  # the first decision: as is
    target = undamped[-1]
    assert target == pytest.approx(10.0)
    assert all(abs(d - target) >= abs(u - target) for d, u in zip(damped, undamped))
    assert abs(damped[3] - target) > 0.5  # still on its way after 200 ms
    assert damped[-1] == pytest.approx(target, abs=0.01)  # it gets there


def test_the_time_constant_holds_whatever_the_decision_period():
    # 1.1 s after the first decision the window is within exp(-1100 / tau) of its target,
    # at 50 ms decisions as at 100 ms ones (a per-decision factor would move twice as far
    # at 50 ms).
    tau_ms = 500.0
    at_100 = _window_after(tau_ms, 12, period_ms=100.0)  # decision 11: 1.1 s
    at_50 = _window_after(tau_ms, 23, period_ms=50.0)  # decision 22: 1.1 s
    assert at_100[11] == pytest.approx(at_50[22], abs=0.01)
    assert at_100[11] - 10.0 == pytest.approx(5.0 * math.exp(-1100.0 / tau_ms), rel=0.01)
