"""Zone detection (decision layer): pressures, entry rules, hysteresis, dwell, pre-warm.

Times are plain floats (seconds on a fake clock); nothing sleeps. Where a boundary is
tested exactly, the values are chosen to be exact in binary floating point.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from scheduler_core.profile import ControlConfig
from scheduler_core.zones import Zone, ZoneDetector, pressure

# Design table defaults: util 0.50/0.85, queue depth 5/15, P99 CV 0.10/0.30;
# weights 0.5/0.3/0.2; danger at score 0.78; hysteresis 0.05; dwell 500 ms; pre-warm 0.65.
DEFAULT = ControlConfig()

# All three indicators past their safe bound, nowhere near danger (score ~0.27).
NML = (0.6, 6, 0.2)
SAFE_VALUES = (0.3, 0, 0.0)


def detector(**overrides) -> ZoneDetector:
    return ZoneDetector(replace(DEFAULT, **overrides))


# -- pressure -------------------------------------------------------------------------------

def test_pressure_is_zero_at_or_below_safe_and_one_at_or_above_danger():
    assert pressure(0.5, 0.5, 0.85) == 0.0
    assert pressure(0.2, 0.5, 0.85) == 0.0
    assert pressure(0.85, 0.5, 0.85) == 1.0
    assert pressure(1.0, 0.5, 0.85) == 1.0
    assert pressure(10.0, 5.0, 15.0) == 0.5
    assert pressure(7.5, 5.0, 15.0) == 0.25
    assert pressure(0.675, 0.5, 0.85) == pytest.approx(0.5, rel=1e-12)


@given(st.floats(-10, 10, allow_nan=False), st.floats(-5, 5, allow_nan=False),
       st.floats(0.01, 5, allow_nan=False))
def test_pressure_is_clamped_and_monotone(value, safe, width):
    danger = safe + width
    p = pressure(value, safe, danger)
    assert 0.0 <= p <= 1.0
    assert pressure(value + 0.1, safe, danger) >= p


def test_reading_reports_score_and_pressures():
    z = detector()
    r = z.update(0.0, 0.675, 10, 0.2)
    assert r.pressures == pytest.approx((0.5, 0.5, 0.5), rel=1e-12)
    assert r.score == pytest.approx(0.5, rel=1e-12)
    assert r.zone == Zone.NO_MANS_LAND
    assert r.changed_at_s == 0.0
    assert z.score == r.score


def test_weights_are_normalised():
    # Weights 2/0/0 behave like utilisation alone.
    z = detector(weight_utilization=2.0, weight_queue_depth=0.0, weight_p99_cv=0.0)
    assert z.update(0.0, 0.675, 0, 0.0).score == pytest.approx(0.5, rel=1e-12)


# -- entry: "all" mode ----------------------------------------------------------------------

def test_starts_safe():
    z = detector()
    r = z.reading()
    assert r.zone == Zone.SAFE and r.prewarmed is False
    assert z.update(0.0, *SAFE_VALUES).zone == Zone.SAFE


def test_all_mode_enters_no_mans_land_when_all_three_pass_safe_bound():
    z = detector()
    r = z.update(1.0, *NML)
    assert r.zone == Zone.NO_MANS_LAND
    assert r.changed_at_s == 1.0
    assert r.score < DEFAULT.danger_zone_threshold


@pytest.mark.parametrize("values", [
    (0.6, 6, 0.05),    # P99 CV safe
    (0.6, 4, 0.2),     # queue depth safe
    (0.4, 6, 0.2),    # utilisation safe
    (0.6, 5, 0.2),     # queue depth exactly at its safe bound: not past it
    (0.5, 6, 0.2),     # utilisation exactly at its safe bound
    (0.6, 6, 0.1),     # P99 CV exactly at its safe bound
])
def test_all_mode_two_of_three_is_not_enough(values):
    z = detector()
    r = z.update(0.0, *values)
    assert r.zone == Zone.SAFE
    assert r.score > 0.0     # the others do exert pressure, it just does not count


def test_all_mode_ignores_nml_score():
    # Score 0.5 is far above nml_score, but the queue and P99 CV are safe.
    z = detector(nml_score=0.1)
    assert z.update(0.0, 0.85, 0, 0.0).zone == Zone.SAFE


# -- entry: "weighted" mode -----------------------------------------------------------------

def test_weighted_mode_uses_nml_score():
    z = detector(entry_mode="weighted", nml_score=0.30)
    # utilisation pressure 1 alone -> score 0.5 >= 0.30, though two indicators are safe
    assert z.update(0.0, 0.85, 0, 0.0).zone == Zone.NO_MANS_LAND


def test_weighted_mode_below_nml_score_is_safe_even_if_all_pass():
    z = detector(entry_mode="weighted", nml_score=0.30)
    # all three past safe, score ~0.27 < 0.30
    r = z.update(0.0, *NML)
    assert r.score == pytest.approx(0.5 * 0.1 / 0.35 + 0.3 * 0.1 + 0.2 * 0.5, rel=1e-12)
    assert r.zone == Zone.SAFE


def test_weighted_mode_boundary_is_inclusive():
    # utilisation-only weights; util 0.75 is pressure 0.5 exactly (bounds 0.5 / 1.0)
    z = detector(entry_mode="weighted", nml_score=0.5, utilization_safe=0.5,
                 utilization_danger=1.0, weight_queue_depth=0.0, weight_p99_cv=0.0,
                 danger_zone_threshold=0.75)
    assert z.update(0.0, 0.75, 0, 0.0).zone == Zone.NO_MANS_LAND
    z = detector(entry_mode="weighted", nml_score=0.5, utilization_safe=0.5,
                 utilization_danger=1.0, weight_queue_depth=0.0, weight_p99_cv=0.0,
                 danger_zone_threshold=0.75)
    assert z.update(0.0, 0.7499, 0, 0.0).zone == Zone.SAFE


# -- danger ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["all", "weighted"])
def test_danger_when_score_reaches_threshold(mode):
    z = detector(entry_mode=mode)
    # util and queue depth at danger, P99 CV safe: score 0.8 >= 0.78, in either mode
    r = z.update(0.0, 0.85, 15, 0.0)
    assert r.score == pytest.approx(0.8, rel=1e-12)
    assert r.zone == Zone.DANGER


@pytest.mark.parametrize("mode", ["all", "weighted"])
def test_just_below_danger_threshold_is_not_danger(mode):
    z = detector(entry_mode=mode)
    # util at danger (0.5), queue depth 14 (0.9 * 0.3 = 0.27), P99 CV just past safe: ~0.77
    r = z.update(0.0, 0.85, 14, 0.10001)
    assert r.score == pytest.approx(0.77, abs=1e-4)
    assert r.zone == Zone.NO_MANS_LAND


def test_danger_threshold_is_inclusive():
    # weights 0.5/0.3/0.2, util and queue at danger: score 0.8 exactly
    z = detector(danger_zone_threshold=0.8)
    r = z.update(0.0, 0.85, 15, 0.0)
    assert r.score == 0.8
    assert r.zone == Zone.DANGER


# -- entering is immediate -------------------------------------------------------------------

def test_entering_worse_zone_is_immediate():
    z = detector(min_dwell_ms=10_000.0)
    assert z.update(0.0, *SAFE_VALUES).zone == Zone.SAFE
    r = z.update(0.001, *NML)
    assert r.zone == Zone.NO_MANS_LAND and r.changed_at_s == 0.001
    r = z.update(0.002, 0.85, 15, 0.3)
    assert r.zone == Zone.DANGER and r.changed_at_s == 0.002


def test_safe_straight_to_danger():
    z = detector()
    r = z.update(3.0, 1.0, 100, 1.0)
    assert r.zone == Zone.DANGER and r.changed_at_s == 3.0
    assert r.pressures == (1.0, 1.0, 1.0)
    assert r.score == pytest.approx(1.0)


# -- leaving: hysteresis and dwell -----------------------------------------------------------

def test_flapping_at_the_boundary_does_not_leave_no_mans_land():
    z = detector()
    z.update(0.0, *NML)
    # Utilisation flaps between "in" (0.6) and just below its safe bound (0.49: position
    # -0.029, inside the 0.05 hysteresis margin); queue depth flaps at its bound (5).
    t = 0.0
    for i in range(40):
        t += 0.1
        values = (0.49, 6, 0.2) if i % 3 == 0 else (0.6, 5, 0.2) if i % 3 == 1 else NML
        r = z.update(t, *values)
        assert r.zone == Zone.NO_MANS_LAND, (t, values)
    assert z.changed_at_s == 0.0


def test_staying_just_inside_the_margin_never_leaves():
    z = detector()
    z.update(0.0, *NML)
    for i in range(1, 30):      # 0.49 is below the safe bound but within the margin
        assert z.update(i * 0.5, 0.49, 6, 0.2).zone == Zone.NO_MANS_LAND


def test_leaving_no_mans_land_needs_margin_for_exactly_min_dwell():
    z = detector(min_dwell_ms=500.0)
    z.update(0.0, *NML)
    # 0.4 is 0.29 below the safe bound in normalised units (0.1 absolute): past the margin
    assert z.update(1.0, 0.4, 6, 0.2).zone == Zone.NO_MANS_LAND     # calm starts
    assert z.update(1.25, 0.4, 6, 0.2).zone == Zone.NO_MANS_LAND
    assert z.update(1.4990234375, 0.4, 6, 0.2).zone == Zone.NO_MANS_LAND
    r = z.update(1.5, 0.4, 6, 0.2)                                    # 500 ms exactly
    assert r.zone == Zone.SAFE
    assert r.changed_at_s == 1.5


def test_leaving_via_queue_depth_margin():
    z = detector(min_dwell_ms=0.0)
    z.update(0.0, *NML)
    # queue depth 5 is at the bound (held by the margin); 4 is 0.1 below: leaves
    assert z.update(0.5, 0.6, 5, 0.2).zone == Zone.NO_MANS_LAND
    assert z.update(1.0, 0.6, 4, 0.2).zone == Zone.SAFE


def test_calm_interrupted_by_reentry_restarts_dwell():
    z = detector(min_dwell_ms=500.0)
    z.update(0.0, *NML)
    z.update(1.0, 0.4, 6, 0.2)                               # calm since 1.0
    assert z.update(1.25, *NML).zone == Zone.NO_MANS_LAND     # back in: calm resets
    assert z.update(1.375, 0.4, 6, 0.2).zone == Zone.NO_MANS_LAND   # calm since 1.375
    assert z.update(1.5, 0.4, 6, 0.2).zone == Zone.NO_MANS_LAND     # 1.0 + 500 ms: no
    assert z.update(1.75, 0.4, 6, 0.2).zone == Zone.NO_MANS_LAND
    assert z.update(1.875, 0.4, 6, 0.2).zone == Zone.SAFE           # 1.375 + 500 ms


def test_calm_interrupted_by_value_inside_margin_restarts_dwell():
    z = detector(min_dwell_ms=500.0)
    z.update(0.0, *NML)
    z.update(1.0, 0.4, 6, 0.2)                                # calm since 1.0
    assert z.update(1.25, 0.49, 6, 0.2).zone == Zone.NO_MANS_LAND   # held by the margin
    assert z.update(1.5, 0.4, 6, 0.2).zone == Zone.NO_MANS_LAND    # calm since 1.5
    assert z.update(1.75, 0.4, 6, 0.2).zone == Zone.NO_MANS_LAND
    assert z.update(2.0, 0.4, 6, 0.2).zone == Zone.SAFE


def test_leaving_danger_needs_score_below_threshold_minus_hysteresis():
    z = detector(min_dwell_ms=500.0)
    z.update(0.0, 0.85, 15, 0.2)                      # score 0.9
    assert z.zone == Zone.DANGER
    # score 0.5 + 0.8 * 0.3 = 0.74: below 0.78 but within the 0.05 margin -> stays
    for i in range(1, 10):
        r = z.update(float(i), 0.85, 13, 0.0)
        assert r.score == pytest.approx(0.74, rel=1e-12)
        assert r.zone == Zone.DANGER
    # score 0.5 + 0.15 = 0.65 < 0.73: leaves after 500 ms, to the zone that then holds
    assert z.update(10.0, 0.85, 10, 0.0).zone == Zone.DANGER
    assert z.update(10.25, 0.85, 10, 0.0).zone == Zone.DANGER
    r = z.update(10.5, 0.85, 10, 0.0)
    assert r.zone == Zone.SAFE         # P99 CV is safe: "all" mode says safe
    assert r.changed_at_s == 10.5


def test_leaving_danger_steps_down_to_no_mans_land():
    z = detector(min_dwell_ms=500.0)
    z.update(0.0, 0.85, 15, 0.2)
    z.update(1.0, *NML)
    assert z.zone == Zone.DANGER
    assert z.update(1.5, *NML).zone == Zone.NO_MANS_LAND


def test_leaving_weighted_no_mans_land_uses_score_margin():
    # utilisation-only score: pressure = (u - 0.5) / 0.5
    z = detector(entry_mode="weighted", nml_score=0.5, utilization_safe=0.5,
                 utilization_danger=1.0, weight_queue_depth=0.0, weight_p99_cv=0.0,
                 danger_zone_threshold=0.75, hysteresis=0.125, min_dwell_ms=250.0,
                 prewarm_utilization=0.99)
    assert z.update(0.0, 0.75, 0, 0.0).zone == Zone.NO_MANS_LAND        # score 0.5
    for t in (0.25, 0.5, 0.75, 1.0):
        # score 0.375 = nml_score - hysteresis: still held
        assert z.update(t, 0.6875, 0, 0.0).zone == Zone.NO_MANS_LAND
    assert z.update(2.0, 0.6, 0, 0.0).zone == Zone.NO_MANS_LAND          # score 0.2: calm
    assert z.update(2.125, 0.6, 0, 0.0).zone == Zone.NO_MANS_LAND
    assert z.update(2.25, 0.6, 0, 0.0).zone == Zone.SAFE


def test_zero_dwell_leaves_at_once_once_past_margin():
    z = detector(min_dwell_ms=0.0)
    z.update(0.0, *NML)
    assert z.update(0.001, 0.4, 6, 0.2).zone == Zone.SAFE


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 30), st.floats(0.0, 0.5)),
                min_size=1, max_size=30))
def test_zone_never_drops_sooner_than_min_dwell(readings):
    """Whatever the indicators do, the zone only gets better after min_dwell_ms of calm,
    and gets worse at once whenever the raw zone is worse."""
    z = detector(min_dwell_ms=300.0)
    t, last_change = 0.0, float("-inf")
    for i, values in enumerate(readings):
        t = i * 0.1
        before = z.zone
        r = z.update(t, *values)
        if r.zone < before:
            # at least 3 earlier updates (300 ms at 100 ms steps) were calm
            assert t - last_change >= 0.3 - 1e-9
            assert i >= 3
        if r.zone != before:
            last_change = t
            assert r.changed_at_s == t
        if r.score >= DEFAULT.danger_zone_threshold:
            assert r.zone == Zone.DANGER          # worse is immediate


# -- pre-warm ---------------------------------------------------------------------------------

def test_prewarm_turns_on_at_prewarm_utilization():
    z = detector()
    assert z.update(0.0, 0.64, 0, 0.0).prewarmed is False
    r = z.update(0.1, 0.65, 0, 0.0)
    assert r.prewarmed is True
    assert r.zone == Zone.SAFE          # pre-warm does not change the zone


def test_prewarm_turns_off_only_below_prewarm_minus_hysteresis():
    # exact binary values: on at 0.75, off below 0.5
    z = detector(prewarm_utilization=0.75, hysteresis=0.25)
    assert z.update(0.0, 0.75, 0, 0.0).prewarmed is True
    for t, u in ((0.1, 0.7), (0.2, 0.6), (0.3, 0.5), (0.4, 0.74)):
        assert z.update(t, u, 0, 0.0).prewarmed is True, u
    assert z.update(0.5, 0.4999, 0, 0.0).prewarmed is False
    assert z.update(0.6, 0.6, 0, 0.0).prewarmed is False        # needs 0.75 again
    assert z.update(0.7, 0.75, 0, 0.0).prewarmed is True


def test_prewarm_with_defaults():
    z = detector()
    z.update(0.0, 0.7, 0, 0.0)
    assert z.update(0.1, 0.61, 0, 0.0).prewarmed is True
    assert z.update(0.2, 0.59, 0, 0.0).prewarmed is False


def test_prewarm_has_no_dwell():
    z = detector(min_dwell_ms=10_000.0)
    z.update(0.0, 0.9, 0, 0.0)
    assert z.update(0.001, 0.1, 0, 0.0).prewarmed is False


# -- jittered exit dwell (several controllers on one load) ------------------------------

def _exit_after_s(seed: int | None, jitter: float, exits: int = 8) -> list[float]:
    """How long each of ``exits`` calm spells took to leave the no-man's land, stepping
    1 ms at a time."""
    import random

    cfg = replace(DEFAULT, min_dwell_ms=500.0, period_jitter=jitter)
    z = ZoneDetector(cfg, None if seed is None else random.Random(seed))
    took, now = [], 0.0
    for _ in range(exits):
        z.update(now, *NML)
        calm_from = now = round(now + 0.001, 3)
        while z.update(now, 0.4, 6, 0.2).zone != Zone.SAFE:
            now = round(now + 0.001, 3)
        took.append(round(now - calm_from, 3))
        now = round(now + 0.001, 3)
    return took


def test_without_jitter_or_rng_every_exit_dwells_min_dwell():
    # (to the 1 ms step, which rounding may overshoot by one)
    assert _exit_after_s(None, 0.5) == pytest.approx([0.5] * 8, abs=0.0015)
    assert _exit_after_s(3, 0.0) == pytest.approx([0.5] * 8, abs=0.0015)


def test_jittered_exit_dwells_stay_in_the_band_and_differ_between_controllers():
    first, second = _exit_after_s(0, 0.5), _exit_after_s(1, 0.5)
    for took in (first, second):
        assert all(0.25 <= t <= 0.752 for t in took)
        assert len(set(took)) > 4
    assert first != second
    assert _exit_after_s(0, 0.5) == first  # seeded: the same draw again
