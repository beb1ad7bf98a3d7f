"""Batch shapes, the cost formula and the online-corrected estimator."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from scheduler_core.cost_model import BatchShape, CostEstimator, batch_shape, formula_ms
from scheduler_core.profile import CostModelConfig

# All coefficients are powers of two so the expected values are exact.
CFG = replace(CostModelConfig(), fixed_ms=1.0, per_sequence_ms=0.5, per_token_ms=0.25,
              per_token_squared_ms=0.125)


def test_batch_shape_padded():
    s = batch_shape([2, 5, 3], "padded")
    assert s == BatchShape(batch_size=3, tokens=15, squared_tokens=75, padded_tokens=15,
                           real_tokens=10)


def test_batch_shape_ragged():
    s = batch_shape([2, 5, 3], "ragged")
    assert s == BatchShape(batch_size=3, tokens=10, squared_tokens=4 + 25 + 9, padded_tokens=15,
                           real_tokens=10)


def test_batch_shape_default_mode_is_padded():
    assert batch_shape([2, 5, 3]) == batch_shape([2, 5, 3], "padded")


def test_batch_shape_single_sequence_same_in_both_modes():
    assert batch_shape([7], "padded") == batch_shape([7], "ragged") == BatchShape(1, 7, 49, 7, 7)


def test_batch_shape_empty():
    for mode in ("padded", "ragged"):
        s = batch_shape([], mode)
        assert s == BatchShape(0, 0, 0, 0, 0)
        assert s.padding_waste == 0.0


def test_padding_waste():
    assert batch_shape([1, 3, 4, 4]).padding_waste == 0.25   # 12 real of 16 padded
    assert batch_shape([2, 5, 3]).padding_waste == pytest.approx(1 / 3, rel=1e-12)
    assert batch_shape([4, 4, 4]).padding_waste == 0.0
    # padding waste is a property of the batch, not of the cost mode
    assert batch_shape([1, 3, 4, 4], "ragged").padding_waste == 0.25


@given(st.lists(st.integers(1, 512), min_size=1, max_size=64))
def test_batch_shape_invariants(lengths):
    p = batch_shape(lengths, "padded")
    r = batch_shape(lengths, "ragged")
    assert p.batch_size == r.batch_size == len(lengths)
    assert p.padded_tokens == r.padded_tokens == len(lengths) * max(lengths)
    assert p.real_tokens == r.real_tokens == sum(lengths)
    assert p.tokens == p.padded_tokens and r.tokens == r.real_tokens
    assert r.tokens <= p.tokens and r.squared_tokens <= p.squared_tokens
    assert 0.0 <= p.padding_waste < 1.0


def test_formula_padded():
    # 1 + 0.5*3 + 0.25*15 + 0.125*75
    assert formula_ms(CFG, batch_shape([2, 5, 3], "padded")) == 15.625


def test_formula_ragged():
    # 1 + 0.5*3 + 0.25*10 + 0.125*38
    assert formula_ms(CFG, batch_shape([2, 5, 3], "ragged")) == 9.75


def test_formula_empty_batch_costs_nothing():
    assert formula_ms(CFG, batch_shape([])) == 0.0


def test_formula_each_term_separately():
    shape = BatchShape(batch_size=4, tokens=100, squared_tokens=1000, padded_tokens=100,
                       real_tokens=90)
    zero = CostModelConfig(0.0, 0.0, 0.0, 0.0)
    assert formula_ms(replace(zero, fixed_ms=2.0), shape) == 2.0
    assert formula_ms(replace(zero, per_sequence_ms=2.0), shape) == 8.0
    assert formula_ms(replace(zero, per_token_ms=2.0), shape) == 200.0
    assert formula_ms(replace(zero, per_token_squared_ms=2.0), shape) == 2000.0


def test_estimator_seed_is_formula_times_time_scale():
    est = CostEstimator(CFG, cost_mode="ragged", time_scale=2.0)
    assert est.correction == 1.0
    assert est.observed_batches == 0
    assert est.estimate_ms([2, 5, 3]) == 19.5
    assert est.estimate_shape_ms(batch_shape([2, 5, 3], "padded")) == 31.25


def test_estimator_converges_to_observed_ratio():
    est = CostEstimator(CFG, cost_mode="padded", time_scale=1.0, smoothing=0.2)
    lengths = [2, 5, 3]
    truth = 2.0 * formula_ms(CFG, batch_shape(lengths))  # device is twice as slow
    est.observe(lengths, truth)
    assert est.correction == pytest.approx(1.2, rel=1e-12)
    assert est.observed_batches == 1
    for _ in range(29):
        est.observe(lengths, truth)
    assert est.observed_batches == 30
    # correction after n batches = 2 - 0.8**n
    assert est.correction == pytest.approx(2.0 - 0.8 ** 30, rel=1e-9)
    assert abs(est.correction - 2.0) < 0.002
    assert est.estimate_ms(lengths) == pytest.approx(2 * 15.625, rel=1e-3)
    # and it applies to other batch shapes as well (a constant-factor error)
    assert est.estimate_ms([7]) == pytest.approx(2 * formula_ms(CFG, batch_shape([7])), rel=1e-3)


def test_estimator_correction_is_relative_to_time_scale():
    est = CostEstimator(CFG, cost_mode="padded", time_scale=3.0)
    lengths = [4]
    # observed exactly what the scaled formula predicts: no correction
    for _ in range(5):
        est.observe(lengths, 3.0 * formula_ms(CFG, batch_shape(lengths)))
    assert est.correction == pytest.approx(1.0, rel=1e-12)


def test_estimator_ratio_is_clamped():
    est = CostEstimator(CFG, smoothing=0.2)
    est.observe([2], 1e9)          # ratio clamped to 20
    assert est.correction == pytest.approx(1.0 + 0.2 * 19.0, rel=1e-12)
    est2 = CostEstimator(CFG, smoothing=1.0)
    est2.observe([2], 1e-9)        # ratio clamped to 0.05
    assert est2.correction == pytest.approx(0.05, rel=1e-12)


@pytest.mark.parametrize("lengths,duration", [([2], 0.0), ([2], -5.0), ([], 10.0)])
def test_estimator_ignores_useless_observations(lengths, duration):
    est = CostEstimator(CFG)
    est.observe(lengths, duration)
    assert est.correction == 1.0
    assert est.observed_batches == 0


def test_estimator_repr_mentions_state():
    est = CostEstimator(CFG, cost_mode="ragged", time_scale=2.0)
    text = repr(est)
    assert "mode=ragged" in text and "correction=1.000" in text and "batches=0" in text
