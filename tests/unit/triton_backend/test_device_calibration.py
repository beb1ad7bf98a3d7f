"""Cost-table calibration on a fake executor and a fake clock (no sleeps, no torch)."""

from __future__ import annotations

import numpy as np
import pytest

from triton_backend.device_calibration import (CalibrationError, calibration_grid,
                                               measure_cost_table, measurement_order,
                                               random_sequences)


class FakeDevice:
    """``run`` advances a fake clock by a cost per batch shape (s) and records each call."""

    def __init__(self, cost_s=lambda b, n: 0.001 + 1e-6 * b * n):
        self.now = 0.0
        self.cost_s = cost_s
        self.calls: list[tuple[int, int]] = []

    def clock(self) -> float:
        return self.now

    def run(self, sequences):
        b, n = len(sequences), len(sequences[0])
        assert all(len(s) == n for s in sequences), "no padding inside a calibration batch"
        self.calls.append((b, n))
        self.now += self.cost_s(b, n)
        return np.zeros((b, 384), dtype=np.float32)


# -- the grid -------------------------------------------------------------------------------

def test_grid_defaults_within_limits():
    batches, lengths = calibration_grid(64, 512, 64 * 512)
    assert batches == [1, 2, 4, 8, 16, 32, 64]
    assert lengths == [16, 32, 64, 128, 256, 512]


def test_grid_always_includes_the_maxima():
    batches, lengths = calibration_grid(24, 300, 10**6)
    assert batches == [1, 2, 4, 8, 16, 24]
    assert lengths == [16, 32, 64, 128, 256, 300]
    assert calibration_grid(1, 8, 100) == ([1], [8])


def test_grid_drops_axis_values_no_cell_fits():
    # cpu profile: max_batch_size 16, max_batch_tokens 2048, lengths up to 512
    batches, lengths = calibration_grid(16, 512, 2048)
    assert batches == [1, 2, 4, 8, 16]
    assert lengths == [16, 32, 64, 128, 256, 512]
    batches, lengths = calibration_grid(64, 512, 512)
    assert max(batches) == 32 and batches[-1] * 16 <= 512  # 64 x 16 = 1024 fits no cell
    assert lengths[-1] == 512


@pytest.mark.parametrize("args", [(0, 512, 100), (8, 0, 100), (8, 512, 0), (8, 512, 8),
                                  (True, 512, 100), (8.5, 512, 100)])
def test_grid_rejects_bad_limits(args):
    with pytest.raises(ValueError):
        calibration_grid(*args)


def test_token_limit_cells_are_excluded_not_measured():
    dev = FakeDevice()
    batches, lengths = calibration_grid(64, 512, 16384)
    res = measure_cost_table(dev.run, batches, lengths, budget_s=100.0, clock=dev.clock,
                             max_batch_tokens=16384)
    assert res.complete and not res.skipped
    assert all(b * n <= 16384 for b, n in dev.calls)
    assert {"batch": 64, "length": 512} in res.excluded
    assert res.ms(64, 512) is None and res.ms(64, 256) is not None
    assert len(res.rows) + len(res.excluded) == len(batches) * len(lengths)


# -- measuring --------------------------------------------------------------------------------

def test_complete_table_with_warmups_repeats_and_row_form():
    dev = FakeDevice()
    res = measure_cost_table(dev.run, [1, 8], [16, 64], budget_s=10.0, warmups=2, repeats=5,
                             clock=dev.clock)
    assert res.complete and res.skipped == [] and not res.cut_short
    assert len(dev.calls) == 4 * (2 + 5)
    # rows as in shared/gpu/h200_minilm_costs.json, sorted by length then batch
    assert [(r["batch"], r["length"]) for r in res.rows] == [(1, 16), (8, 16), (1, 64), (8, 64)]
    assert set(res.rows[0]) == {"batch", "length", "ms"}
    assert res.ms(8, 64) == pytest.approx(1.0 + 8 * 64 * 1e-3)
    assert res.elapsed_s == pytest.approx(dev.now)
    d = res.to_dict()
    assert d["complete"] is True and d["rows"] == res.rows and d["skipped"] == []


def test_median_of_repeats_not_mean_nor_warmups():
    dev = FakeDevice()
    # per call of the only cell: 2 warm-ups (slow), then repeats 5, 1, 2, 100, 3 ms
    times = iter([0.5, 0.4, 0.005, 0.001, 0.002, 0.100, 0.003])
    dev.cost_s = lambda b, n: next(times)
    res = measure_cost_table(dev.run, [4], [32], budget_s=10.0, warmups=2, repeats=5,
                             clock=dev.clock)
    assert res.ms(4, 32) == pytest.approx(3.0)


def test_no_warmups_uses_the_first_run_as_a_repeat():
    dev = FakeDevice(lambda b, n: 0.002)
    res = measure_cost_table(dev.run, [1], [16], budget_s=1.0, warmups=0, repeats=3,
                             clock=dev.clock)
    assert len(dev.calls) == 3 and res.ms(1, 16) == pytest.approx(2.0)


def test_order_smallest_then_largest_then_corners_then_fill_in():
    batches, lengths = [1, 2, 4, 8, 16, 32, 64], [16, 32, 64, 128, 256, 512]
    cells = [(b, n) for b in batches for n in lengths]
    order = measurement_order(cells, batches, lengths)
    assert order[:2] == [(1, 16), (64, 512)]
    assert set(order[2:4]) == {(64, 16), (1, 512)}
    assert sorted(order) == sorted(cells)
    # the middle of both axes comes before any finer subdivision
    assert order.index((8, 64)) < order.index((2, 32))
    # with the largest corner excluded, the largest feasible cell comes second
    feasible = [c for c in cells if c[0] * c[1] <= 16384]
    assert measurement_order(feasible, batches, lengths)[1] in {(32, 512), (64, 256)}


def test_budget_respected_and_cut_short_reported():
    dev = FakeDevice(lambda b, n: 0.01 + 1e-5 * b * n)  # 64 x 512: ~0.34 s per run
    batches, lengths = calibration_grid(64, 512, 64 * 512)
    budget = 3.0
    res = measure_cost_table(dev.run, batches, lengths, budget_s=budget, clock=dev.clock)
    assert res.elapsed_s <= budget
    assert dev.now <= budget
    assert not res.complete and res.cut_short and res.skipped
    measured = {(r["batch"], r["length"]) for r in res.rows}
    skipped = {(s["batch"], s["length"]) for s in res.skipped}
    assert measured.isdisjoint(skipped)
    assert measured | skipped == {(b, n) for b in batches for n in lengths}
    # the usable-early order: both ends of the cost range are in the table
    assert (1, 16) in measured and (64, 512) in measured
    assert res.to_dict()["complete"] is False


def test_a_cell_whose_first_run_shows_it_will_not_fit_is_given_up():
    dev = FakeDevice(lambda b, n: 1.0)
    res = measure_cost_table(dev.run, [8], [64], budget_s=2.5, warmups=1, repeats=3,
                             clock=dev.clock)
    assert dev.calls == [(8, 64)]  # the probe only: 3 more runs of 1 s do not fit
    assert res.skipped == [{"batch": 8, "length": 64}] and res.rows == []
    assert not res.complete


def test_a_cell_dearer_than_its_bound_stops_at_the_first_run_that_would_overrun():
    # other cells bound 8 x 64 at 4 ms a run; it really takes 1 s: given up once a run shows it
    dev = FakeDevice(lambda b, n: 1.0 if (b, n) == (8, 64) else 0.001)
    res = measure_cost_table(dev.run, [8], [16, 64], budget_s=2.5, warmups=1, repeats=3,
                             clock=dev.clock)
    assert dev.calls.count((8, 64)) == 2
    assert res.skipped == [{"batch": 8, "length": 64}]
    assert res.ms(8, 16) is not None
    assert dev.now <= 2.5 and not res.complete


def test_an_expensive_first_run_does_not_condemn_a_cell_other_cells_bound():
    # first run of each shape pays a one-off 0.3 s; steady runs are cheap
    seen = set()

    def cost(b, n):
        first = (b, n) not in seen
        seen.add((b, n))
        return 0.001 * b + (0.3 if first else 0.0)

    dev = FakeDevice(cost)
    res = measure_cost_table(dev.run, [1, 8], [16, 64], budget_s=1.5, warmups=1, repeats=3,
                             clock=dev.clock)
    assert res.complete and len(res.rows) == 4
    assert res.ms(8, 64) == pytest.approx(8.0)
    assert dev.now <= 1.5


def test_a_passed_over_cell_is_measured_once_other_cells_bound_it():
    # flat, launch-bound device: scaled from 1 x 16 by tokens, 64 x 512 looks unaffordable,
    # but once 1 x 512 is measured it is bounded by 64x that, which fits
    dev = FakeDevice(lambda b, n: 0.004)
    res = measure_cost_table(dev.run, [1, 64], [16, 512], budget_s=2.0, warmups=1, repeats=3,
                             clock=dev.clock)
    assert res.complete
    assert res.order[:3] == [(1, 16), (1, 512), (64, 512)]


def test_zero_budget_measures_nothing():
    dev = FakeDevice()
    res = measure_cost_table(dev.run, [1, 2], [16], budget_s=0.0, clock=dev.clock)
    assert dev.calls == [] and res.rows == [] and not res.complete
    assert len(res.skipped) == 2


def test_exception_in_run_names_the_cell_and_chains_the_cause():
    dev = FakeDevice()

    def run(seqs):
        if len(seqs) == 8:
            raise MemoryError("CUDA out of memory")
        return dev.run(seqs)

    with pytest.raises(CalibrationError, match=r"batch 8 x length 64.*CUDA out of memory") as info:
        measure_cost_table(run, [1, 8], [16, 64], budget_s=10.0, clock=dev.clock)
    assert isinstance(info.value.__cause__, MemoryError)


def test_default_sequences_are_unpadded_token_ids_in_range():
    seqs = random_sequences(3, 20)
    assert len(seqs) == 3
    for s in seqs:
        assert s.dtype == np.int64 and s.shape == (20,)
        assert s.min() >= 1000 and s.max() < 30000
    assert all(np.array_equal(a, b) for a, b in zip(seqs, random_sequences(3, 20)))


def test_bad_arguments_rejected():
    dev = FakeDevice()
    with pytest.raises(ValueError):
        measure_cost_table(dev.run, [1], [16], budget_s=1.0, repeats=0, clock=dev.clock)
    with pytest.raises(ValueError):
        measure_cost_table(dev.run, [], [16], budget_s=1.0, clock=dev.clock)
    with pytest.raises(ValueError):
        measure_cost_table(dev.run, [1], [16], budget_s=float("nan"), clock=dev.clock)


def test_real_emulated_device_smoke():
    """The real EmulatedDevice's run (time scale tiny): rows in ms, near the formula."""
    from scheduler_core.profile import CostModelConfig, EmulationConfig
    from triton_backend.executors import EmulatedDevice

    dev = EmulatedDevice(CostModelConfig(fixed_ms=2.0, per_sequence_ms=0.0, per_token_ms=0.0,
                                         per_token_squared_ms=0.0),
                         EmulationConfig(cost_mode="padded", time_scale=1.0))
    res = measure_cost_table(dev.run, [1, 4], [16], budget_s=5.0, warmups=1, repeats=3)
    assert res.complete
    for row in res.rows:
        # never shorter than the 2 ms the device sleeps; the top only tells ms from us or
        # s (how much longer a busy machine takes is not this test's business)
        assert 1.9 <= row["ms"] < 1000.0
