"""Measure the device's cost table when the model loads, and make it the estimator's seed.

``calibrate_at_load(profile, executor, on_gpu)`` times the executor on a grid of batch
sizes x lengths (``device_calibration.measure_cost_table``) within the profile's budget
(``calibration.budget_ms`` on a GPU, capped at ``calibration.cpu_budget_ms`` on a CPU) and
returns the profile with ``cost_model.table`` set to what was measured. Cells the budget
left out are filled from the profile's own cost model times the median measured/seed
ratio, so a partial measurement still corrects the whole table. The scheduler then refits
the table online, region by region.

Only real compute is measured (an executor whose ``measured_at_load`` is true: MiniLM). An
emulated device sleeps exactly its profile's cost, so measuring it would only add start-up
time; a model behind BLS cannot be run before the server is up.

No Triton import: the adapter logs the returned note.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from typing import Any, Callable

from scheduler_core.cost_model import batch_shape, cost_ms
from scheduler_core.profile import HardwareProfile

from .device_calibration import (CalibrationResult, calibration_grid, measure_cost_table,
                                 random_sequences)


def fill_rows(profile: HardwareProfile, measured: list[tuple[int, int, float]],
              batch_sizes: list[int], lengths: list[int],
              max_batch_tokens: int) -> list[tuple[int, int, float]]:
    """Every grid cell within the token limit: measured where it was, else the profile's
    seed cost times the median measured/seed ratio."""
    seed = profile.cost_model

    def seed_ms(b: int, n: int) -> float:
        return cost_ms(seed, batch_shape([n] * b, "padded"))

    have = {(b, n): ms for b, n, ms in measured}
    ratios = [ms / seed_ms(b, n) for (b, n), ms in have.items() if seed_ms(b, n) > 0]
    ratio = statistics.median(ratios) if ratios else 1.0
    rows = []
    for b in batch_sizes:
        for n in lengths:
            if b * n > max_batch_tokens and (b, n) not in have:
                continue
            ms = have.get((b, n))
            rows.append((b, n, ms if ms is not None else max(seed_ms(b, n) * ratio, 1e-6)))
    return rows


def measure_profile_grid(profile: HardwareProfile, run: Callable, budget_s: float,
                         clock: Callable[[], float] = time.perf_counter
                         ) -> tuple[CalibrationResult, list[int], list[int]]:
    """Time ``run`` over the profile's grid (its batch and token limits, and
    ``calibration.max_sequence_length``) within ``budget_s`` by ``clock``: (result, batch
    sizes, lengths). The model at load and ``explicit-batching calibrate table --measure``
    both measure through here."""
    sched = profile.scheduler
    batch_sizes, lengths = calibration_grid(sched.max_batch_size,
                                            profile.calibration.max_sequence_length,
                                            sched.max_batch_tokens)
    # One untimed call first, outside the budget: the first run pays one-off set-up (torch's
    # lazy initialisation, a CUDA context) that would make every cell look too dear to fit.
    run(random_sequences(batch_sizes[0], lengths[0]))
    result = measure_cost_table(run, batch_sizes, lengths, budget_s, clock=clock,
                                max_batch_tokens=sched.max_batch_tokens)
    return result, batch_sizes, lengths


def calibrate_at_load(profile: HardwareProfile, executor: Any, on_gpu: bool,
                      device_name: str = "", clock: Callable[[], float] = time.perf_counter
                      ) -> tuple[HardwareProfile, CalibrationResult | None, str]:
    """(profile to schedule with, the measurement or None, one line for the load log).
    ``clock`` times the runs and the budget (a test's fake device brings its own)."""
    cal = profile.calibration
    if not cal.at_load:
        return profile, None, "cost table: not measured (calibration.at_load is false)"
    if not getattr(executor, "measured_at_load", False):
        return profile, None, (f"cost table: not measured ({type(executor).__name__}: only "
                               "an in-process real executor is timed at load); the "
                               "profile's cost model is the seed")
    budget_s = (cal.budget_ms if on_gpu else min(cal.budget_ms, cal.cpu_budget_ms)) / 1000.0
    if budget_s <= 0:
        key = "budget_ms" if on_gpu else "cpu_budget_ms"
        return profile, None, (f"cost table: not measured (budget 0: calibration.{key}); the "
                               "profile's cost model is the seed")
    sched = profile.scheduler
    result, batch_sizes, lengths = measure_profile_grid(profile, executor.run, budget_s,
                                                        clock)
    if not result.rows:
        return profile, result, (f"cost table: no cell fit the {budget_s:g} s budget; the "
                                 "profile's cost model is the seed")
    measured = [(r["batch"], r["length"], r["ms"]) for r in result.rows]
    rows = fill_rows(profile, measured, batch_sizes, lengths, sched.max_batch_tokens)
    where = device_name or ("GPU" if on_gpu else "CPU")
    source = (f"measured at load on {where}: {len(measured)} of {len(rows)} cells in "
              f"{result.elapsed_s:.2f} s" + ("" if result.complete else
                                              ", the rest from the profile's cost model"))
    calibrated = replace(profile, cost_model=replace(profile.cost_model, table=tuple(rows),
                                                     table_source=source))
    return calibrated, result, "cost table: " + source
