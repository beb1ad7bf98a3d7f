"""The cheapest padded plan of a known queue (scheduler_core/batch_plan.py) and the
length-aware former's use of it for a hand-over larger than one batch; the cheapest split
in two of a queue that fits one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler_core.batch_plan import cheapest_plan, cheapest_split_ms, padded_costs_ms
from scheduler_core.contract import decide
from scheduler_core.cost_model import CostEstimator
from scheduler_core.cost_table import CostTable, RefitTable
from scheduler_core.profile import CostModelConfig
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.profile_parse import with_emulation, with_overrides
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler

H200_ROWS = ((1, 16, 2.324), (8, 16, 3.969), (64, 16, 3.908), (1, 128, 3.891), (64, 128, 6.64),
             (8, 512, 4.565), (32, 512, 14.29), (64, 512, 25.706))

# Every corner 1 ms but the largest batch of the longest: ten requests of 100 tokens and
# one of 512 cost 2.25 ms split, 2.43 ms whole: a split that pays below 3x the least cell.
STEEP_ROWS = ((1, 1, 1.0), (64, 1, 1.0), (1, 512, 1.0), (64, 512, 10.0))

lengths_st = st.lists(st.integers(1, 600), min_size=1, max_size=90)
observations = st.lists(st.tuples(st.integers(1, 80), st.integers(1, 700), st.floats(0.5, 40.0)),
                        max_size=12)


@settings(max_examples=150, deadline=None)
@given(obs=observations, ns=st.lists(st.integers(1, 2000), min_size=1, max_size=20),
       bs=st.lists(st.integers(1, 130), min_size=1, max_size=20))
def test_the_grid_lookup_is_the_lookup_everywhere(obs, ns, bs):
    """Inside, below and past the grid, after any refits: every cell of the vectorised
    lookup is the scalar lookup's float."""
    table = RefitTable(CostTable.from_rows(H200_ROWS))
    for b, n, ms in obs:
        table.observe(b, n, ms)
    grid = table.lookup_grid_ms(np.array(ns), np.array(bs))
    assert grid.tolist() == [[table.lookup_ms(float(b), float(n)) for b in bs] for n in ns]


def _estimators() -> list[CostEstimator]:
    flat = CostEstimator(CostModelConfig(fixed_ms=3.9, per_token_ms=0.0006), time_scale=1.0)
    flat.correction = 1.07
    token_bound = CostEstimator(CostModelConfig(fixed_ms=2.0, per_sequence_ms=0.05,
                                                per_token_ms=0.01, per_token_squared_ms=1e-5),
                                time_scale=2.0)
    table = CostEstimator(CostModelConfig(table=H200_ROWS), time_scale=1.0)
    return [flat, token_bound, table]


@pytest.mark.parametrize("which", range(3))
def test_the_cost_grid_is_the_estimate(which):
    est = _estimators()[which]
    lengths = np.array([1, 16, 17, 100, 512, 700])
    grid = padded_costs_ms(est, lengths, 64)
    for j, n in enumerate(lengths):
        for k in (1, 2, 31, 64):
            assert grid[j, k - 1] == pytest.approx(
                est.estimate_parts_ms(k, int(n), 0, 0), rel=1e-12)


def _exhaustive(lengths: list[int], est: CostEstimator, cap: int, max_tokens: int,
                host_ms: float) -> float:
    """The least plan cost over every cut of the sorted lengths (quadratic, scalar)."""
    x = sorted(lengths)
    best = [0.0] + [math.inf] * len(x)
    for j in range(1, len(x) + 1):
        for i in range(max(0, j - cap), j):
            if j - i == 1 or (j - i) * x[j - 1] <= max_tokens:
                best[j] = min(best[j], best[i] + est.estimate_parts_ms(j - i, x[j - 1], 0, 0)
                              + host_ms)
    return best[-1]


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_st, which=st.integers(0, 2), cap=st.sampled_from([1, 4, 16, 64]),
       max_tokens=st.sampled_from([512, 4096, 32768]), host_ms=st.sampled_from([0.0, 0.3]))
def test_the_plan_is_the_cheapest_cut_and_keeps_the_limits(lengths, which, cap, max_tokens,
                                                          host_ms):
    est = _estimators()[which]
    x = np.sort(np.array(lengths))
    ends, total = cheapest_plan(x, padded_costs_ms(est, x, cap), max_tokens, host_ms)
    assert total == pytest.approx(_exhaustive(lengths, est, cap, max_tokens, host_ms))
    assert ends[-1] == len(x) and ends == sorted(set(ends))
    for start, end in zip([0, *ends[:-1]], ends):
        assert 1 <= end - start <= cap
        assert end - start == 1 or (end - start) * x[end - 1] <= max_tokens


def _flat():
    """The shipped t4 profile re-costed GPU-like (3.9 ms a launch, 0.0006 ms a padded
    token), padded, batch 64: the bench's flat profile."""
    t4 = with_emulation(load_profile(profile_path("model_repository/emulated_explicit/profiles",
                                                  "t4")), {"cost_mode": "padded"}, "test")
    return with_overrides(t4, {
        "cost_model": {"fixed_ms": 3.9, "per_sequence_ms": 0.0, "per_token_ms": 0.0006,
                       "per_token_squared_ms": 0.0},
        "scheduler": {"max_batch_size": 64, "max_batch_tokens": 32768}}, "test")


def _run(profile, requests, now=10.0):
    """Flush decisions until the queue is empty, each run at its estimate: the batches
    (request ids), the refused, and each batch's end beside its tightest deadline."""
    s = Scheduler.from_profile(profile)
    for r in requests:
        s.submit(r, now)
    batches, refused, late = [], [], 0
    deadlines = {r.request_id: r.arrival_s + r.sla_ms / 1000.0 for r in requests}
    while s.queue_depth:
        d = decide(s, now, flush=True)
        refused += [r.request_id for r, _ in d.rejected]
        if d.batch:
            s.batch_started(d.batch, now)
            now += d.estimated_ms / 1000.0
            s.batch_finished(d.batch, now - d.estimated_ms / 1000.0, now)
            batches.append(sorted(r.request_id for r in d.batch))
            late += sum(deadlines[r.request_id] < now for r in d.batch)
    return batches, refused, late


def test_a_hand_over_of_several_batches_runs_as_the_cheapest_plan():
    """207 requests of a long-tailed mix on the flat launch-bound profile: four batches
    (the scan alone ran eight, each paying a launch), every request once, none late."""
    rng = np.random.default_rng(7)
    lengths = np.where(rng.random(207) < 0.8, rng.integers(8, 65, 207),
                       rng.integers(65, 513, 207))
    requests = [QueuedRequest(k, int(n), 9.995, 200.0) for k, n in enumerate(lengths)]
    batches, refused, late = _run(_flat(), requests)
    assert len(batches) == 4 and not refused and late == 0
    assert sorted(i for b in batches for i in b) == list(range(207))


def test_the_batch_holding_the_tightest_deadline_runs_first():
    """100 loose short requests and one long with 25 ms left (its efficient batch, the
    admission's measure when the queue is behind, takes 11.6 ms): its batch runs first
    and ends in time."""
    loose = [QueuedRequest(k, 16 + k % 48, 9.995, 200.0) for k in range(100)]
    tight = QueuedRequest(100, 400, 9.995, 30.0)
    batches, refused, late = _run(_flat(), [*loose, tight])
    assert 100 in batches[0] and not refused and late == 0


def test_a_plan_that_would_make_someone_late_is_left_to_the_scan():
    """64 short and 40 long requests, all with 12 ms left: no order of the plan's batches
    keeps everyone in time (a batch may run at most about half the tightest SLA), so
    the former's scan decides; every request is run or refused, once, and no batch run
    ends late."""
    requests = [QueuedRequest(k, 16 if k < 64 else 300, 9.995, 17.0) for k in range(104)]
    batches, refused, late = _run(_flat(), requests)
    assert sorted([*(i for b in batches for i in b), *refused]) == list(range(104))
    assert late == 0


@settings(max_examples=150, deadline=None, derandomize=True)
@given(obs=observations, ns=st.lists(st.integers(1, 2000), min_size=1, max_size=20),
       bs=st.lists(st.integers(1, 130), min_size=1, max_size=20))
def test_no_lookup_is_below_the_least_cell(obs, ns, bs):
    """Inside, below and past the grid, after any refits: no lookup answers less than
    ``least_ms`` (to within rounding), the floor ``cheapest_split_ms`` prices a split
    with before it scans."""
    est = CostEstimator(CostModelConfig(table=H200_ROWS), time_scale=0.5)
    for b, n, ms in obs:
        est.observe([n] * b, ms)
    least = est.least_ms()
    assert least == min(map(min, est.table.table().ms)) * 0.5
    assert min(est.estimate_parts_ms(b, n, 0, 0) for b in bs for n in ns) >= least * (1 - 1e-12)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(lengths=st.lists(st.integers(1, 600), min_size=1, max_size=40),
       host_ms=st.sampled_from([0.0, 0.3]), obs=observations,
       rows=st.sampled_from([None, H200_ROWS, STEEP_ROWS]))
@example(lengths=[100] * 10 + [512], host_ms=0.0, obs=[], rows=STEEP_ROWS)
def test_the_cheapest_split_in_two_is_the_cheapest_prefix_split_found_by_trying_each(
        lengths, host_ms, obs, rows):
    """``cheapest_split_ms`` against every prefix of the sorted lengths tried: it returns the
    cheapest two-batch split below the whole batch's estimate, or None where none is; on a
    formula and on measured tables after any refits (its floor, ``least_ms``, skips the
    scan only where no split can pay: on STEEP_ROWS a split pays just above the floor)."""
    formula = CostModelConfig(fixed_ms=1.2, per_sequence_ms=0.02, per_token_ms=0.0065,
                              per_token_squared_ms=0.0000014)
    est = (CostEstimator(formula, "padded", 8.0) if rows is None
           else CostEstimator(CostModelConfig(table=rows), "padded", 0.5))
    for b, n, ms in obs if rows else ():
        est.observe([n] * b, ms)
    lengths = sorted(lengths)
    n, longest, max_tokens = len(lengths), lengths[-1], 8192
    whole_ms = est.estimate_parts_ms(n, longest, sum(lengths), sum(x * x for x in lengths))
    first_ms = {k: est.estimate_parts_ms(k, lengths[k - 1], 0, 0) for k in range(1, n)}
    tried = [(first_ms[k] + est.estimate_parts_ms(n - k, longest, 0, 0) + host_ms, k)
             for k in range(1, n) if lengths[k - 1] < lengths[k]
             and k * lengths[k - 1] <= max_tokens and (n - k) * longest <= max_tokens]
    for cap_ms in (math.inf, est.estimate_parts_ms(1, longest, 0, 0)):
        cheaper = [t for t in tried
                   if t[0] < whole_ms * (1.0 - 1e-9) and first_ms[t[1]] <= cap_ms]
        split = cheapest_split_ms(est, lengths, whole_ms, host_ms, max_tokens, cap_ms)
        if not cheaper:
            assert split is None
            continue
        # The first of the cheapest, float for float, as the scan keeps it.
        k = next(k for total, k in cheaper if total == min(cheaper)[0])
        assert split == (k, first_ms[k], est.estimate_parts_ms(n - k, longest, 0, 0))
        assert lengths[k - 1] < lengths[k]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(obs=observations, lengths=st.lists(st.integers(1, 20000), min_size=1, max_size=60),
       rows=st.sampled_from([None, H200_ROWS, STEEP_ROWS, ((1, 64, 2.0), (8, 64, 3.0))]),
       mode=st.sampled_from(["padded", "ragged"]))
def test_the_dearest_lone_run_is_the_largest_lookup_of_one_float_for_float(obs, lengths,
                                                                          rows, mode):
    """``CostEstimator.base_alone_max_ms`` (the danger zone's as-handed check prices the
    dearest lone run of a hand-over with it; on a table ``RefitTable.alone_max_ms``):
    after any refits, inside, below and past the grid and past the kept segments, and on
    the formula, exactly the largest of the estimator's lone runs."""
    formula = CostModelConfig(fixed_ms=1.2, per_sequence_ms=0.02, per_token_ms=0.0065)
    est = CostEstimator(formula if rows is None else CostModelConfig(table=rows), mode, 0.5)
    for b, n, ms in obs:
        est.observe([n] * b, ms)
    assert (est.base_alone_max_ms(set(lengths))
            == max(est.base_uniform_ms(1, n) for n in lengths))
