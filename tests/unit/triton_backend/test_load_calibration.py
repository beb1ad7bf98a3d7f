"""Load-time calibration: the measured table becomes the estimator's seed."""

from dataclasses import replace

import pytest

from scheduler_core.cost_table import CostTable
from scheduler_core.profile import CalibrationConfig
from scheduler_core.profile_parse import profile_from_mapping
from scheduler_core.scheduler import Scheduler
from triton_backend.executors import EmulatedDevice
from triton_backend.load_calibration import calibrate_at_load, fill_rows

PROFILE = profile_from_mapping({
    "name": "p", "cost_model": {"fixed_ms": 1.0, "per_token_ms": 0.001},
    "scheduler": {"max_batch_size": 8, "max_batch_tokens": 2048},
    "calibration": {"budget_ms": 2000.0, "cpu_budget_ms": 2000.0, "max_sequence_length": 64}}, "test")


class FlatDevice:
    """1 ms for any batch on its own clock (``clock``, which only its runs advance) - a
    launch-bound device in miniature, timed the same on any machine."""

    measured_at_load = True

    def __init__(self):
        self.shapes = []
        self.ticks = 0  # ms

    def clock(self) -> float:
        return self.ticks / 1000.0

    def run(self, sequences):
        self.shapes.append((len(sequences), len(sequences[0])))
        self.ticks += 1
        return None


def test_a_real_executor_is_measured_and_its_table_becomes_the_seed():
    device = FlatDevice()
    profile, result, note = calibrate_at_load(PROFILE, device, on_gpu=False, device_name="CPU x",
                                              clock=device.clock)
    assert result is not None and result.complete
    assert "measured at load on CPU x" in note
    assert {row["ms"] for row in result.rows} == {1.0}  # every cell, every run: 1 ms
    table = CostTable.from_rows(profile.cost_model.table)
    assert table.lookup_ms(8, 64) == 1.0  # flat, not the seed's 1 + 0.5 ms
    assert {(b, n) for b, n, _ in profile.cost_model.table} == {
        (b, n) for b in (1, 2, 4, 8) for n in (16, 32, 64)}
    scheduler = Scheduler.from_profile(profile)
    assert scheduler.estimator.table is not None


def test_the_cpu_budget_caps_the_measurement():
    profile = replace(PROFILE, calibration=CalibrationConfig(budget_ms=5000.0, cpu_budget_ms=0.0))
    device = FlatDevice()
    same, result, note = calibrate_at_load(profile, device, on_gpu=False, clock=device.clock)
    assert same is profile and result is None and "budget 0" in note


def test_switched_off_or_emulated_is_not_measured():
    off = replace(PROFILE, calibration=CalibrationConfig(at_load=False))
    assert calibrate_at_load(off, FlatDevice(), True)[1] is None
    emulated = EmulatedDevice(PROFILE.cost_model, PROFILE.emulation)
    same, result, note = calibrate_at_load(PROFILE, emulated, True)
    assert same is PROFILE and result is None and "EmulatedDevice" in note


def test_cells_left_out_come_from_the_seed_times_the_measured_ratio():
    # The seed says 1 + 0.001 * tokens; the device measured twice that where it was timed.
    measured = [(1, 16, 2 * 1.016), (8, 64, 2 * 1.512)]
    rows = fill_rows(PROFILE, measured, [1, 8], [16, 64], 2048)
    filled = {(b, n): ms for b, n, ms in rows}
    assert filled[(1, 16)] == 2 * 1.016
    assert filled[(8, 16)] == pytest.approx(2 * 1.128)
    assert filled[(1, 64)] == pytest.approx(2 * 1.064)
