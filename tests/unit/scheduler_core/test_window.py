"""The elastic window: adjusted = base * (1 + alpha*(1-util)^2 - beta*delay_variance),
clamped to [min_window_ms, max_window_ms]."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from scheduler_core.profile import SchedulerConfig
from scheduler_core.window import ElasticWindow


def _window(base=8.0, alpha=0.5, beta=0.25, lo=0.0, hi=1000.0) -> ElasticWindow:
    return ElasticWindow(base_window_ms=base, alpha=alpha, beta=beta,
                         min_window_ms=lo, max_window_ms=hi)


@pytest.mark.parametrize("util,variance,expected", [
    # 8 * (1 + 0.5*(1-u)^2 - 0.25*v), all terms exact in binary floating point
    (1.0, 0.0, 8.0),           # busy, stable: the base window
    (0.0, 0.0, 12.0),          # idle: 8 * 1.5
    (0.5, 0.0, 9.0),           # 8 * (1 + 0.5*0.25)
    (0.75, 0.0, 8.25),         # 8 * (1 + 0.5*0.0625)
    (1.0, 1.0, 6.0),           # 8 * (1 - 0.25)
    (0.5, 2.0, 5.0),           # 8 * (1 + 0.125 - 0.5)
    (0.0, 4.0, 4.0),           # 8 * (1 + 0.5 - 1.0)
])
def test_formula_exact(util, variance, expected):
    assert _window().adjusted_ms(util, variance) == expected


def test_formula_with_inexact_terms():
    w = _window(base=10.0, alpha=0.2, beta=0.1)
    # 10 * (1 + 0.2*0.7^2 - 0.1*0.4) = 10 * 1.058
    assert w.adjusted_ms(0.3, 0.4) == pytest.approx(10.58, rel=1e-12)


def test_clamped_to_max():
    w = _window(base=8.0, alpha=0.5, hi=10.0)
    assert w.adjusted_ms(0.0, 0.0) == 10.0  # raw 12 -> 10
    assert w.adjusted_ms(0.5, 0.0) == 9.0   # raw 9 within bounds


def test_clamped_to_min():
    w = _window(base=8.0, beta=0.25, lo=3.0)
    assert w.adjusted_ms(1.0, 2.0) == 4.0   # raw 4 within bounds
    assert w.adjusted_ms(1.0, 3.0) == 3.0   # raw 2 -> 3
    assert w.adjusted_ms(1.0, 100.0) == 3.0  # raw negative -> 3


def test_never_negative_with_zero_minimum():
    assert _window(lo=0.0).adjusted_ms(1.0, 100.0) == 0.0


@pytest.mark.parametrize("util,clamped", [(-0.5, 0.0), (-100.0, 0.0), (1.5, 1.0), (7.0, 1.0)])
def test_utilization_clamped_to_unit_interval(util, clamped):
    w = _window()
    assert w.adjusted_ms(util, 0.0) == w.adjusted_ms(clamped, 0.0)
    assert w.adjusted_ms(util, 0.0) == (12.0 if clamped == 0.0 else 8.0)


def test_negative_delay_variance_treated_as_zero():
    w = _window()
    assert w.adjusted_ms(1.0, -3.0) == 8.0


def test_from_config_copies_fields():
    cfg = replace(SchedulerConfig(), base_window_ms=4.0, alpha=0.5, beta=0.25,
                  min_window_ms=1.0, max_window_ms=5.0)
    w = ElasticWindow.from_config(cfg)
    assert w == ElasticWindow(4.0, 0.5, 0.25, 1.0, 5.0)
    assert w.adjusted_ms(0.0, 0.0) == 5.0   # raw 6 -> max 5
    assert w.adjusted_ms(1.0, 0.0) == 4.0


def test_default_config_window():
    # defaults: base 5, alpha 0.2, beta 0.1, [0, 50]
    w = ElasticWindow.from_config(SchedulerConfig())
    assert w.adjusted_ms(0.0, 0.0) == pytest.approx(6.0, rel=1e-12)
    assert w.adjusted_ms(1.0, 0.0) == 5.0
    assert w.adjusted_ms(1.0, 1.0) == pytest.approx(4.5, rel=1e-12)


def test_lower_utilization_widens_higher_variance_shrinks():
    w = _window()
    assert w.adjusted_ms(0.2, 0.0) > w.adjusted_ms(0.6, 0.0) > w.adjusted_ms(0.9, 0.0)
    assert w.adjusted_ms(0.5, 0.1) > w.adjusted_ms(0.5, 0.5) > w.adjusted_ms(0.5, 1.5)


finite = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False)


@given(util=finite, variance=finite,
       base=st.floats(0.0, 100.0), lo=st.floats(0.0, 50.0), span=st.floats(0.0, 50.0),
       alpha=st.floats(0.0, 5.0), beta=st.floats(0.0, 5.0))
def test_always_within_bounds(util, variance, base, lo, span, alpha, beta):
    w = ElasticWindow(base, alpha, beta, lo, lo + span)
    got = w.adjusted_ms(util, variance)
    assert lo <= got <= lo + span
    u = min(max(util, 0.0), 1.0)
    raw = base * (1 + alpha * (1 - u) ** 2 - beta * max(variance, 0.0))
    assert got == min(max(raw, lo), lo + span)
