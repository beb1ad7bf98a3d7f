"""The decision layer's period jitter and window damping (several controllers on one load
must not decide in step), on a fake clock."""

from __future__ import annotations

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


def _window_after(damping: float, decisions: int) -> list[float]:
    cfg = SchedulerConfig(base_window_ms=10.0, alpha=0.5, beta=0.0, min_window_ms=0.0,
                          max_window_ms=100.0)
    loop = ControlLoop(cfg, ControlConfig(control_period_ms=100.0, window_damping=damping))
    windows = []
    for k in range(decisions):
        loop.set_external_utilization(0.0 if k == 0 else 1.0, measured_at_s=k * 0.1)
        loop.tick(k * 0.1, _Queue())
        windows.append(loop.state.window_ms)
    return windows


def test_a_damped_window_moves_part_of_the_way_each_decision():
    # util 0: 10 * (1 + 0.5) = 15 ms; util 1: 10 ms. Perception runs every 200 ms.
    undamped = _window_after(0.0, 6)
    damped = _window_after(0.5, 6)
    assert undamped[0] == damped[0] == pytest.approx(15.0)  # the first decision: undamped
    target = undamped[-1]
    assert target == pytest.approx(10.0)
    assert all(abs(d - target) >= abs(u - target) for d, u in zip(damped, undamped))
    assert damped[-1] == pytest.approx(target, abs=1.0)  # it gets there
