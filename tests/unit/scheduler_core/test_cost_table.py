"""The measured cost table: interpolation, extrapolation, per-region refit, and the
estimator and emulated device reading it."""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.cost_model import CostEstimator, batch_shape, cost_ms
from scheduler_core.cost_table import REFIT_STEP_SHARE, CostTable, CostTableError, RefitTable
from scheduler_core.profile import CostModelConfig, ProfileError
from scheduler_core.profile_parse import profile_from_mapping
from scheduler_core.profile_files import load_profile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
# The H200 measurement (a copy of ../shared/gpu/h200_minilm_costs.json, taken on the device).
H200_JSON = os.path.join(REPO, "results", "gpu", "h200_minilm_costs.json")
H200_MINILM = os.path.join(REPO, "model_repository", "emulated_explicit", "profiles",
                           "h200_minilm.yaml")

# Flat 4 ms up to 4096 tokens, then 1 ms per 1000 tokens: a launch-bound device.
FLAT_THEN_LINEAR = [(b, n, max(4.0, b * n / 1000.0)) for b in (1, 8, 32, 64)
                    for n in (16, 64, 128, 256, 512)]


def test_cells_are_returned_exactly():
    table = CostTable.from_rows(FLAT_THEN_LINEAR)
    for b, n, ms in FLAT_THEN_LINEAR:
        assert table.lookup_ms(b, n) == pytest.approx(ms)


def test_bilinear_between_cells():
    table = CostTable.from_rows([(1, 10, 1.0), (1, 20, 3.0), (3, 10, 5.0), (3, 20, 7.0)])
    assert table.lookup_ms(1, 15) == pytest.approx(2.0)
    assert table.lookup_ms(2, 10) == pytest.approx(3.0)
    assert table.lookup_ms(2, 15) == pytest.approx(4.0)


def test_flat_region_stays_flat_and_growth_region_grows():
    table = CostTable.from_rows(FLAT_THEN_LINEAR)
    assert table.lookup_ms(16, 100) == pytest.approx(4.0, rel=0.01)  # 1,600 tokens: flat
    assert table.lookup_ms(64, 384) > table.lookup_ms(64, 256) > 4.0


def test_extrapolates_past_the_grid_at_the_last_slope_and_clamps_below():
    table = CostTable.from_rows([(1, 10, 1.0), (1, 20, 2.0), (2, 10, 2.0), (2, 20, 4.0)])
    assert table.lookup_ms(1, 40) == pytest.approx(4.0)
    assert table.lookup_ms(4, 20) == pytest.approx(8.0)
    assert table.lookup_ms(1, 1) == pytest.approx(1.0)  # below: the edge cell


def test_extrapolation_never_falls():
    table = CostTable.from_rows([(1, 10, 3.0), (1, 20, 2.0)])
    assert table.lookup_ms(1, 100) == pytest.approx(2.0)


def test_missing_cells_are_filled_from_their_row():
    table = CostTable.from_rows([(1, 10, 1.0), (1, 20, 2.0), (2, 10, 2.0)])
    assert table.lookup_ms(2, 20) == pytest.approx(4.0)  # 2 x 20 tokens: proportional


def test_duplicate_cells_are_refused():
    with pytest.raises(CostTableError, match="twice"):
        CostTable.from_rows([(1, 10, 1.0), (1, 10, 2.0)])


@settings(max_examples=200, deadline=None)
@given(st.floats(1, 128), st.floats(1, 1024), st.floats(1, 128), st.floats(1, 1024))
def test_monotone_on_a_monotone_table(b1, n1, b2, n2):
    table = CostTable.from_rows(FLAT_THEN_LINEAR)
    if b1 <= b2 and n1 <= n2:
        assert table.lookup_ms(b1, n1) <= table.lookup_ms(b2, n2) + 1e-9


def test_refit_corrects_one_region_and_leaves_the_other():
    refit = RefitTable(CostTable.from_rows(FLAT_THEN_LINEAR), smoothing=0.3)
    for _ in range(60):  # the growth region is really twice as slow
        refit.observe(64, 512, 2 * 32.768)
    assert refit.lookup_ms(64, 512) == pytest.approx(2 * 32.768, rel=0.02)
    assert refit.lookup_ms(8, 64) == pytest.approx(4.0)  # the flat region untouched
    assert refit.table().lookup_ms(64, 512) == pytest.approx(refit.lookup_ms(64, 512))


_SHAPES = st.one_of(st.integers(0, 1200), st.floats(0, 1200, allow_nan=False))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.sampled_from([FLAT_THEN_LINEAR, [(1, 16, 2.0)], [(1, 16, 2.0), (1, 32, 3.0)],
                        [(1, 16, 2.0), (4, 16, 3.0)]]),
       st.lists(st.tuples(st.integers(1, 80), st.integers(1, 700),
                          st.floats(0.1, 40.0)), max_size=6),
       st.lists(st.tuples(_SHAPES, _SHAPES), min_size=1, max_size=40))
def test_a_refit_tables_lookups_are_its_cells_interpolated_exactly(rows, refits, shapes):
    """The refit table's scalar lookup (each axis's segments kept for whole positions, the
    memo) gives the very float its vectorised interpolation gives (``lookup_grid_ms``,
    numpy over the same cells), at whole and fractional shapes, inside and past the grid,
    between refits."""
    refit = RefitTable(CostTable.from_rows(rows))
    for refit_shape in [None, *refits]:
        if refit_shape is not None:
            refit.observe(*refit_shape)
        for batch_size, length in shapes:
            expected = refit.lookup_grid_ms([length], [batch_size])[0][0]
            assert refit.lookup_ms(batch_size, length) == expected


def test_a_refit_moves_lookups_once_its_fit_moved_a_step():
    """Batches slower than the estimate move the cell's fit every time, and its lookups
    only once the fit is more than ``REFIT_STEP_SHARE`` from what they use: then to the
    fit. A move that large at once moves them at once."""
    refit = RefitTable(CostTable.from_rows(FLAT_THEN_LINEAR), smoothing=0.2)
    seed_ms = refit.lookup_ms(64, 512)  # a cell: its factor is the whole fit
    fits = []
    while refit.lookup_ms(64, 512) == seed_ms:
        refit.observe(64, 512, 1.02 * seed_ms)
        fits.append(seed_ms * refit.factors[3][4])
        assert len(fits) < 1000, "the lookups never moved"
    assert len(fits) > 1 and fits[0] > seed_ms  # the first move stayed inside the step
    assert all(fit <= (1 + REFIT_STEP_SHARE) * seed_ms for fit in fits[:-1])
    assert fits[-1] > (1 + REFIT_STEP_SHARE) * seed_ms
    assert refit.lookup_ms(64, 512) == fits[-1] == refit.table().lookup_ms(64, 512)

    refit = RefitTable(CostTable.from_rows(FLAT_THEN_LINEAR), smoothing=0.2)
    refit.observe(64, 512, 2 * seed_ms)
    assert refit.lookup_ms(64, 512) == seed_ms * refit.factors[3][4] > seed_ms


def test_estimator_on_a_table_refits_cells_not_a_global_ratio():
    cfg = CostModelConfig(table=tuple(FLAT_THEN_LINEAR))
    est = CostEstimator(cfg, "padded", time_scale=2.0)
    assert est.estimate_ms([100] * 8) == pytest.approx(8.0)  # 4 ms flat x time scale 2
    for _ in range(40):
        est.observe([512] * 64, 2 * 2 * 32.768)
    assert est.correction == 1.0
    assert est.estimate_ms([512] * 64) == pytest.approx(4 * 32.768, rel=0.03)
    assert est.estimate_ms([64] * 8) == pytest.approx(8.0)
    assert est.batch_overhead_ms() == pytest.approx(8.0)


def test_estimator_error_ratio_tracks_measured_vs_predicted():
    est = CostEstimator(CostModelConfig(fixed_ms=1.0, per_token_ms=0.0))
    est.observe([10], 1.0)
    assert est.error_ratio == pytest.approx(0.0)
    est.observe([10], 2.0)  # predicted 1 ms, took 2: error 0.5 of the measurement
    assert est.error_ratio == pytest.approx(0.2 * 0.5)


def test_ragged_batches_are_looked_up_at_their_mean_length():
    cfg = CostModelConfig(table=tuple(FLAT_THEN_LINEAR))
    shape = batch_shape([512] * 32 + [16] * 32, "ragged")
    assert cost_ms(cfg, shape) == pytest.approx(CostTable.from_rows(FLAT_THEN_LINEAR)
                                                .lookup_ms(64, 264))


def _profile(table):
    return profile_from_mapping({"name": "x", "cost_model": {"table": table}}, "test")


def test_profile_accepts_triples_and_mappings():
    assert _profile([[1, 16, 2.0], [8, 16, 3.0]]).cost_model.table == ((1, 16, 2.0), (8, 16, 3.0))
    assert _profile([{"batch": 1, "length": 16, "ms": 2}]).cost_model.table == ((1, 16, 2.0),)


@pytest.mark.parametrize("table,why", [
    ("fast", "non-empty list"), ([[1, 16]], r"\[batch, length, ms\]"),
    ([[0, 16, 1.0]], "batch"), ([[1, 16, -1.0]], "ms"), ([[1, 16, float("nan")]], "ms"),
    ([[1, 16, 1.0], [1, 16, 2.0]], "twice"), ([{"batch": 1, "length": 2, "us": 3}], "keys"),
    ([[True, 16, 1.0]], "batch")])
def test_profile_refuses_bad_tables_naming_the_key(table, why):
    with pytest.raises(ProfileError, match=why) as info:
        _profile(table)
    assert "cost_model.table" in str(info.value)


def test_profile_refuses_a_table_source_over_the_limit_instead_of_cutting_it():
    raw = {"name": "t", "cost_model": {"table": [[1, 16, 1.0]], "table_source": "x" * 200}}
    assert profile_from_mapping(raw, "t.yaml").cost_model.table_source == "x" * 200
    raw["cost_model"]["table_source"] = "x" * 201
    with pytest.raises(ProfileError, match=r"cost_model.table_source': must be at most 200 "
                                           r"characters \(has 201\)"):
        profile_from_mapping(raw, "t.yaml")


def test_h200_minilm_profile_is_the_measured_table():
    with open(H200_JSON) as fh:
        measured = json.load(fh)["rows"]
    profile = load_profile(H200_MINILM)
    table = CostTable.from_rows(profile.cost_model.table)
    for row in measured:
        assert table.lookup_ms(row["batch"], row["length"]) == pytest.approx(row["ms"])
    assert "H200" in profile.cost_model.table_source
