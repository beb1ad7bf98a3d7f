"""Batch formers: chosen by name, named in every decision, and costed exactly as the
cost estimator costs a batch."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings, strategies as st

from scheduler_core.controller import Controller
from scheduler_core.cost_model import CostEstimator
from scheduler_core.entry_queue import Entry, EntryQueue
from scheduler_core.formers import FORMERS, make_former
from scheduler_core.contract import FORMER_NAMES, Mode
from scheduler_core.profile import ControlConfig, CostModelConfig, ProfileError, SchedulerConfig
from scheduler_core.profile_parse import profile_from_mapping
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler


def test_every_name_a_profile_may_give_is_a_registered_former():
    assert set(FORMERS) == set(FORMER_NAMES)
    cfg, ctl = SchedulerConfig(), ControlConfig()
    est = CostEstimator(CostModelConfig())
    for name in FORMER_NAMES:
        assert make_former(name, cfg, ctl, est).name == name


def test_an_unknown_former_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown batch former 'lifo'.*fifo"):
        make_former("lifo", SchedulerConfig(), ControlConfig(), CostEstimator(CostModelConfig()))
    with pytest.raises(ProfileError, match="control.explicit_former.*lifo"):
        profile_from_mapping({"name": "x", "control": {"explicit_former": "lifo"}}, "x.yaml")


@pytest.mark.parametrize("cost_mode, safe_former", [("padded", "length_aware"),
                                                     ("ragged", "fifo")])
def test_the_former_of_each_mode_goes_into_the_decision(cost_mode, safe_former):
    """``auto`` picks the length-aware former where padding costs, FIFO where it does not;
    the decision says which one ran even while the mode is ``default``."""
    est = CostEstimator(CostModelConfig(fixed_ms=1.0, per_token_ms=0.01), cost_mode)
    s = Scheduler(SchedulerConfig(max_batch_size=4), est, ControlConfig())
    assert {m: f.name for m, f in s.formers.items()} == {
        Mode.DEFAULT: safe_former, Mode.EXPLICIT: "length_aware",
        Mode.EMERGENCY: "length_aware_emergency"}
    for i in range(4):
        s.submit(QueuedRequest(i, 16, 0.0, 100.0), 0.0)
    d = s.schedule(0.0)
    assert d.mode == "default" and d.former == safe_former and len(d.batch) == 4
    assert s.stats(0.0).former == safe_former


cost_models = st.builds(
    CostModelConfig, fixed_ms=st.floats(0.0, 50.0), per_sequence_ms=st.floats(0.0, 2.0),
    per_token_ms=st.floats(0.0, 0.05), per_token_squared_ms=st.floats(0.0, 1e-4))


@settings(max_examples=150, deadline=None)
@given(cm=cost_models, cost_mode=st.sampled_from(["padded", "ragged"]),
       lengths=st.lists(st.integers(1, 512), min_size=1, max_size=80),
       correction=st.floats(0.05, 20.0), scale=st.floats(0.01, 50.0),
       emergency=st.booleans(), waste=st.floats(0.0, 1.0), slots=st.integers(0, 3))
def test_inlined_cost_arithmetic_equals_the_estimator(cm, cost_mode, lengths, correction,
                                                       scale, emergency, waste, slots):
    """The length-aware former costs each candidate batch inline (its hot loop); the
    batch it proposes must carry exactly the estimator's figure for those members."""
    est = CostEstimator(cm, cost_mode, scale)
    est.correction = correction
    cfg = SchedulerConfig(max_batch_size=16, max_batch_tokens=4096)
    ctl = replace(ControlConfig(), max_padding_waste=waste, priority_slots=slots)
    queue = EntryQueue()
    for i, n in enumerate(lengths):
        req = QueuedRequest(i, n, i * 1e-4, 1e6)  # deadlines far away: only costs decide
        queue.append(Entry(req, 0.0, est.base_parts_ms(1, n, n, n * n), 0.0))
    name = "length_aware_emergency" if emergency else "length_aware"
    former = make_former(name, cfg, ctl, est, small_queue=10 ** 9)
    state = Controller(cfg, ctl).state
    candidate = former.form(queue, state, 0.01, flush=False)
    members = [e.seq_len for e in candidate.entries]
    assert candidate.estimated_ms == est.estimate_ms(members)


# A launch-bound device: 4 ms for any batch up to 4,096 tokens, then 1 ms per 1,000.
FLAT_TABLE = tuple((b, n, max(4.0, b * n / 1000.0)) for b in (1, 8, 32, 64)
                   for n in (16, 64, 128, 256, 512))


def _equal_queue(est: CostEstimator, count: int, length: int, sla_ms: float,
                 efficient: int | None = None) -> EntryQueue:
    """``count`` requests of ``length`` tokens and ``sla_ms``, all arrived at 0, each with
    its lone cost and that of an efficient batch of ``efficient`` (default ``count``)."""
    k = efficient or count
    queue = EntryQueue()
    for i in range(count):
        queue.append(Entry(QueuedRequest(i, length, 0.0, sla_ms), 0.0,
                           est.base_parts_ms(1, length, length, length * length),
                           est.base_parts_ms(k, length, k * length, k * length * length)))
    return queue


def _table_scheduler(control: ControlConfig = ControlConfig()) -> Scheduler:
    est = CostEstimator(CostModelConfig(table=FLAT_TABLE), "padded")
    return Scheduler(SchedulerConfig(max_batch_size=64, max_batch_tokens=16384), est, control)


def test_inside_the_flat_region_padding_is_free_and_the_batch_fills():
    """Lengths 16..256 would pad far past max_padding_waste, but the table says a batch of
    them costs what one alone costs: one batch, not a batch per length."""
    s = _table_scheduler()
    lengths = [16, 256, 32, 128, 64, 200, 16, 100, 48, 250]
    for i, n in enumerate(lengths):
        s.submit(QueuedRequest(i, n, 0.0, 100.0), 0.0)
    d = s.schedule(0.0, flush=True)
    assert sorted(r.seq_len for r in d.batch) == sorted(lengths)
    assert d.estimated_ms == pytest.approx(4.0, rel=0.1)


def test_past_the_flat_region_lengths_are_grouped_where_padding_costs():
    """64 short requests fill a flat batch; the long ones, which would pad it to 64 x 512
    (33 ms instead of 4), are left for a batch of their own length."""
    s = _table_scheduler()
    for i in range(64):
        s.submit(QueuedRequest(i, 32, 0.0, 1000.0), 0.0)
    for i in range(64, 80):
        s.submit(QueuedRequest(i, 512, 0.0, 1000.0), 0.0)
    first = s.schedule(0.0, flush=True)
    assert {r.seq_len for r in first.batch} in ({32}, {512})
    formula = Scheduler(SchedulerConfig(max_batch_size=64, max_batch_tokens=16384),
                        CostEstimator(CostModelConfig(fixed_ms=4.0, per_token_ms=0.001)),
                        ControlConfig())
    assert formula.formers[Mode.DEFAULT].name == "length_aware"


MIXED_LENGTHS = [317, 120, 75, 54, 29, 55, 41, 20, 16, 202, 124, 84, 31, 386, 109, 49, 35, 26,
                 174, 73, 139, 44, 28, 19, 63, 215, 71, 21]


def _formula_flush(cost: CostModelConfig, lengths: list[int] = MIXED_LENGTHS,
                   max_tokens: int = 16384, batch_host_ms: float = 0.0
                   ) -> tuple[list[list[int]], float]:
    """Flush ``lengths`` on the formula ``cost`` (padded): the batches' lengths and the
    sum of their estimates."""
    s = Scheduler(SchedulerConfig(max_batch_size=64, max_batch_tokens=max_tokens,
                                  batch_host_ms=batch_host_ms),
                  CostEstimator(cost, "padded"), ControlConfig())
    for i, n in enumerate(lengths):
        s.submit(QueuedRequest(i, n, 0.0, 1000.0), 0.0)
    batches, total_ms = [], 0.0
    while s.queue_depth:
        d = s.schedule(0.0, flush=True)
        batches.append([r.seq_len for r in d.batch])
        total_ms += d.estimated_ms
        s.batch_started(d.batch, 0.0)
        s.batch_finished(d.batch, 0.0, 0.0, True)
    return batches, total_ms


def _one_batch_ms(cost: CostModelConfig) -> float:
    n, longest = len(MIXED_LENGTHS), max(MIXED_LENGTHS)
    return cost.fixed_ms + cost.per_token_ms * n * longest + cost.per_token_squared_ms * (
        n * longest * longest)


def test_on_a_launch_bound_formula_padding_alone_does_not_split_the_batch():
    """A GPU-like flat cost (3.9 ms a batch, 0.0006 ms a padded token): these lengths pad
    far past max_padding_waste, yet a batch per length would pay 3.9 ms each. The flush
    runs them together (we measured ~4 batches a call, and a closed-loop peak at
    0.6 of native's, before the split had to pay)."""
    flat = CostModelConfig(fixed_ms=3.9, per_sequence_ms=0.0, per_token_ms=0.0006,
                           per_token_squared_ms=0.0)
    batches, total_ms = _formula_flush(flat)
    assert len(batches) <= 2
    assert total_ms <= _one_batch_ms(flat) * 1.001


def test_where_padding_costs_more_than_a_launch_the_formula_still_splits_by_length():
    """A steep per-token cost: one padded batch of every length costs far more than
    batches grouped by length, and the former groups them."""
    steep = CostModelConfig(fixed_ms=1.0, per_sequence_ms=0.0, per_token_ms=0.01,
                            per_token_squared_ms=0.0)
    batches, total_ms = _formula_flush(steep)
    assert len(batches) >= 3
    assert total_ms < 0.8 * _one_batch_ms(steep)
    assert sorted(n for b in batches for n in b) == sorted(MIXED_LENGTHS)


def _padded_ms(cost: CostModelConfig, lengths) -> float:
    n, longest = len(lengths), max(lengths)
    return (cost.fixed_ms + cost.per_sequence_ms * n + cost.per_token_ms * n * longest
            + cost.per_token_squared_ms * n * longest * longest)


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(1, 512), min_size=1, max_size=10),
       fixed_ms=st.floats(0.1, 8.0), per_token_ms=st.floats(0.0001, 0.02),
       per_token_squared_ms=st.sampled_from([0.0, 1.4e-6]),
       batch_host_ms=st.sampled_from([0.0, 0.3, 2.0]))
def test_a_flushed_queue_costs_no_more_than_its_cheapest_plan_of_two_batches(
        lengths, fixed_ms, per_token_ms, per_token_squared_ms, batch_host_ms):
    """A queue that fits one batch, flushed with time to spare (a hold call's hand-over)
    on a padded formula: the batches formed cost, by the estimate plus each batch's host
    time (``batch_host_ms``), no more than the cheapest way to run it as one batch or two,
    found by trying every split."""
    cost = CostModelConfig(fixed_ms=fixed_ms, per_sequence_ms=0.0, per_token_ms=per_token_ms,
                           per_token_squared_ms=per_token_squared_ms)
    batches, total_ms = _formula_flush(cost, lengths, max_tokens=64 * 512,
                                       batch_host_ms=batch_host_ms)
    total_ms += batch_host_ms * len(batches)
    cheapest = _padded_ms(cost, lengths) + batch_host_ms
    for mask in range(1, 2 ** len(lengths) - 1):
        first = [n for i, n in enumerate(lengths) if mask >> i & 1]
        rest = [n for i, n in enumerate(lengths) if not mask >> i & 1]
        cheapest = min(cheapest, _padded_ms(cost, first) + _padded_ms(cost, rest)
                       + 2 * batch_host_ms)
    assert total_ms <= cheapest * (1 + 1e-6)
    assert sorted(n for b in batches for n in b) == sorted(lengths)


def _h200_minilm_scheduler() -> Scheduler:
    """The shipped h200_minilm profile (a measured table, launch-bound to ~4k tokens),
    padded, at device speed."""
    import os  # noqa: PLC0415

    from scheduler_core.profile_parse import with_emulation  # noqa: PLC0415
    from scheduler_core.profile_files import load_profile, profile_path  # noqa: PLC0415
    from tests.conftest import SHIPPED_REPOSITORY  # noqa: PLC0415

    folder = os.path.join(SHIPPED_REPOSITORY, "emulated_explicit", "profiles")
    profile = with_emulation(load_profile(profile_path(folder, "h200_minilm")),
                             {"cost_mode": "padded", "time_scale": 1.0}, "test")
    return Scheduler.from_profile(profile)


def _emergency_only(s: Scheduler) -> Scheduler:
    """``s`` with the danger zone's former in every mode (the zone it reads aside)."""
    s.formers = {mode: s.formers[Mode.EMERGENCY] for mode in s.formers}
    return s


@pytest.mark.parametrize("emergency", [False, True])
@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.one_of(st.integers(8, 64), st.integers(65, 512)), min_size=2,
                        max_size=64))
def test_on_a_measured_table_a_flushed_queue_costs_no_more_than_its_cheapest_split_in_two(
        emergency, lengths):
    """The same on a measured cost table (h200_minilm, launch-bound to ~4k tokens): a
    hand-over that fits one batch, flushed with time to spare, costs by the estimate plus
    each batch's host time (``batch_host_ms``) no more than one batch, or its cheapest
    split into two batches, the shortest first (on a padded cost the cheapest split in two
    is such a prefix). Before the split was priced on tables, the former's own split of 32
    requests of the bench mix cost 10.25 ms against 7.59; before the whole queue was a
    plan too, 15 requests of 8 tokens and one of 31 ran as two batches (6.73 ms) where
    one cost 3.92. ``emergency``: the danger zone's former in every mode, no request
    urgent (SLAs of 10 s), so it opens no urgent lane and drains the queue: the same
    holds (its scan alone ran 16 requests of 64 tokens, then one of 256 alone, 1.8 times
    the device time of one batch of the 17)."""
    s = _h200_minilm_scheduler()
    if emergency:
        _emergency_only(s)
    host_ms = s.cfg.batch_host_ms
    now = 10.0
    for i, n in enumerate(lengths):  # the bench's SLA classes, 5 ms spent in Triton's queue
        sla_ms = 10_000.0 if emergency else (50.0, 100.0, 200.0)[i % 3]
        s.submit(QueuedRequest(i, n, now - 0.005, sla_ms), now)
    total_ms = 0.0
    while s.queue_depth:
        d = s.schedule(now, flush=True)
        assert not d.rejected
        total_ms += d.estimated_ms + host_ms
        s.batch_started(d.batch, now)
        now += d.estimated_ms / 1000.0
        s.batch_finished(d.batch, now - d.estimated_ms / 1000.0, now, True)
    est, x = s.estimator, sorted(lengths)
    cheapest = min(est.estimate_parts_ms(len(x), x[-1], 0, 0) + host_ms, *(
        est.estimate_parts_ms(k, x[k - 1], 0, 0) + est.estimate_parts_ms(len(x) - k, x[-1], 0, 0)
        + 2 * host_ms for k in range(1, len(x))))
    assert total_ms <= cheapest * (1 + 1e-6)


def test_the_emergency_former_runs_a_long_request_with_the_short_ones_where_that_is_cheaper():
    """The case the property above found first on the live timelines (h200_minilm at time
    scale 57, the danger zone): a hand-over of 16 requests of 64 tokens and one of 256,
    nothing urgent, flushed. One batch of the 17 costs less than the 16, then the long one
    alone, so it runs as one."""
    s = _emergency_only(_h200_minilm_scheduler())
    now = 10.0
    for i, n in enumerate([64] * 16 + [256]):
        s.submit(QueuedRequest(i, n, now - 0.005, 10_000.0), now)
    est = s.estimator
    assert est.uniform_ms(17, 256) < est.uniform_ms(16, 64) + est.uniform_ms(1, 256)

    decision = s.schedule(now, flush=True)

    assert decision.former == "length_aware_emergency" and len(decision.batch) == 17


def test_on_a_launch_bound_formula_the_cheapest_split_is_found_whoever_is_first():
    """On the flat cost, with the long requests queued among the short ones: padding
    the short ones to the longest costs more than the 3.9 ms a second launch costs,
    and of the ways to split, the short ones (and only they) beside the long ones
    costs least: the former runs exactly those two batches, whichever request it
    starts from."""
    flat = CostModelConfig(fixed_ms=3.9, per_sequence_ms=0.0, per_token_ms=0.0006,
                           per_token_squared_ms=0.0)
    lengths = [40] * 12 + [500] + [16] * 12 + [480] + [24] * 10
    batches, total_ms = _formula_flush(flat, lengths)
    assert sorted(map(sorted, batches)) == [sorted(n for n in lengths if n < 100),
                                            [480, 500]]
    assert total_ms < _padded_ms(flat, lengths)


@pytest.mark.parametrize("margin_ms, refused", [(0.0, True), (2.0, False)])
def test_a_request_is_refused_only_when_it_misses_by_more_than_the_margin(margin_ms, refused):
    s = _table_scheduler(ControlConfig(infeasible_margin_ms=margin_ms, refusal_late_share=0.0))
    s.submit(QueuedRequest(0, 64, 0.0, 3.0), 0.0)  # alone it takes 4 ms: 1 ms late
    d = s.schedule(0.0)
    assert bool(d.rejected) is refused
    assert bool(d.batch) is not refused


@pytest.mark.parametrize("table, per_token_ms, length, cap", [
    (FLAT_TABLE, 0.0, 32, 20),  # a flat measured region: launch-bound
    ((), 0.01, 32, 4),  # 4 of 32 tokens: 5.3 ms, a full batch 24.5 ms
    ((), 0.0006, 16, 20),  # the flat GPU-like formula at 16 tokens: 4.04 vs 4.61 ms
    ((), 0.0006, 64, 4)])  # ... at 64 tokens: 4.15 vs 6.46 ms
def test_emergency_batches_stay_small_only_where_small_batches_are_faster(
        table, per_token_ms, length, cap):
    """Urgent requests in the danger zone: a batch of emergency_batch_size (4) where that
    makes it shorter than a full batch by more than max_padding_waste (0.15); where the
    launch dominates (a flat table, or a formula whose launch dwarfs the tokens) it would
    take about as long as a full batch, so the urgent batch takes every urgent request."""
    cm = CostModelConfig(table=table) if table else CostModelConfig(
        fixed_ms=4.0, per_token_ms=per_token_ms)
    est = CostEstimator(cm, "padded")
    cfg = SchedulerConfig(max_batch_size=64, max_batch_tokens=16384)
    ctl = ControlConfig()
    queue = _equal_queue(est, 20, length, 6.0, efficient=39)  # due in 6 ms: all urgent
    former = make_former("length_aware_emergency", cfg, ctl, est)
    candidate = former.form(queue, Controller(cfg, ctl).state, 0.0, flush=False)
    assert len(candidate.entries) == cap


@settings(max_examples=150, deadline=None)
@given(cm=cost_models, cost_mode=st.sampled_from(["padded", "ragged"]),
       queued=st.lists(st.tuples(st.integers(1, 512), st.floats(1.0, 2000.0)), min_size=1,
                       max_size=80),
       max_batch_size=st.integers(1, 32), max_batch_tokens=st.integers(512, 8192),
       now_ms=st.floats(0.0, 500.0))
def test_the_overload_former_keeps_the_most_in_time_of_any_cheapest_prefix(
        cm, cost_mode, queued, max_batch_size, max_batch_tokens, now_ms):
    """shortest_first: every member ends in time by the batch's own estimate (unless
    nothing can), the batch respects the size and padded-token limits, and no batch of
    the k shortest feasible requests keeps more of its members in time (of a queue within
    the former's scan: the 8 * max_batch_size most urgent)."""
    assume(len(queued) <= 8 * max_batch_size)
    est = CostEstimator(cm, cost_mode)
    cfg = SchedulerConfig(max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens)
    ctl = ControlConfig()
    queue = EntryQueue()
    for i, (n, sla_ms) in enumerate(queued):
        k = max(1, min(max_batch_size, max_batch_tokens // n))
        queue.append(Entry(QueuedRequest(i, n, 0.0, sla_ms), 0.0,
                           est.base_parts_ms(1, n, n, n * n),
                           est.base_parts_ms(k, n, k * n, k * n * n)))
    now = now_ms / 1000.0
    candidate = make_former("shortest_first", cfg, ctl, est).form(
        queue, Controller(cfg, ctl).state, now, flush=True)
    members = candidate.entries
    lengths = [e.seq_len for e in members]
    assert 1 <= len(members) <= max_batch_size
    assert len(members) == 1 or max(lengths) * len(members) <= max_batch_tokens
    assert candidate.estimated_ms == est.estimate_ms(lengths)
    end = now + candidate.estimated_ms / 1000.0
    in_time = sum(1 for e in members if e.deadline_s >= end)
    assert in_time == len(members) or in_time == 0

    feasible = sorted((e.seq_len, e.req.request_id) for e in queue
                      if (e.deadline_s - now) * 1000.0 >= e.efficient_ms)
    for k in range(1, min(max_batch_size, len(feasible)) + 1):
        prefix = [queue_by_id(queue, rid) for _, rid in feasible[:k]]
        if k > 1 and max(e.seq_len for e in prefix) * k > max_batch_tokens:
            break
        prefix_end = now + est.estimate_ms([e.seq_len for e in prefix]) / 1000.0
        assert in_time >= sum(1 for e in prefix if e.deadline_s >= prefix_end)


def queue_by_id(queue: EntryQueue, request_id: int) -> Entry:
    return next(e for e in queue if e.req.request_id == request_id)


def test_the_overload_former_takes_short_requests_before_an_urgent_long_one():
    """Under a sustained overload the cheapest batch wins: eight short requests go
    before the most urgent, long one, which keeps its own deadline in a later batch
    only if the estimate says so."""
    est = CostEstimator(CostModelConfig(fixed_ms=1.0, per_sequence_ms=0.0,
                                        per_token_ms=0.01, per_token_squared_ms=0.0),
                        "padded")
    cfg = SchedulerConfig(max_batch_size=8, max_batch_tokens=8192)
    s = Scheduler(cfg, est, ControlConfig(overload_late_share=0.0))
    s.submit(QueuedRequest(0, 512, 0.0, 60.0), 0.0)  # urgent and long
    for i in range(1, 9):
        s.submit(QueuedRequest(i, 16, 0.0, 1000.0), 0.0)
    d = s.schedule(0.001, flush=True)
    assert d.former == "shortest_first"
    assert sorted(r.request_id for r in d.batch) == list(range(1, 9))


def test_the_overload_former_keeps_a_batch_within_the_call_budget_of_the_tightest_sla():
    """What arrives while an overload batch runs must still make its deadline after it:
    the batch stops where its estimate passes overload_call_budget_sla_fraction of the
    tightest SLA seen (0.25 x 8 ms = 2 ms: six sequences of 16 tokens at 1 ms + 0.01 ms a
    token)."""
    est = CostEstimator(CostModelConfig(fixed_ms=1.0, per_sequence_ms=0.0,
                                        per_token_ms=0.01, per_token_squared_ms=0.0),
                        "padded")
    cfg, ctl = SchedulerConfig(max_batch_size=32), ControlConfig()
    queue = _equal_queue(est, 16, 16, 1000.0)
    state = replace(Controller(cfg, ctl).state, tightest_sla_ms=8.0)
    former = make_former("shortest_first", cfg, ctl, est)
    assert len(former.form(queue, state, 0.0, flush=True).entries) == 6
    assert len(former.form(queue, replace(state, tightest_sla_ms=None), 0.0,
                           flush=True).entries) == 16


def test_where_one_request_alone_passes_the_call_budget_the_overload_batch_still_fills():
    """A launch-bound device whose cheapest batch costs more than the budget (8 ms for any
    batch up to 4k tokens, the budget 0.25 x 20 ms = 5 ms): members that ride free join,
    up to max_padding_waste above the lone run, instead of one request a call (seen on an
    H200 with BERT-large: one request a call, the rest refused, an overload that never
    ended at 0.3x native's peak)."""
    est = CostEstimator(CostModelConfig(fixed_ms=8.0, per_sequence_ms=0.0,
                                        per_token_ms=0.0001, per_token_squared_ms=0.0),
                        "padded")
    cfg, ctl = SchedulerConfig(max_batch_size=64), ControlConfig()
    queue = _equal_queue(est, 40, 32, 1000.0)
    state = replace(Controller(cfg, ctl).state, tightest_sla_ms=20.0)
    former = make_former("shortest_first", cfg, ctl, est)
    assert len(former.form(queue, state, 0.0, flush=True).entries) == 40
    # ... and the floor is the lone run plus max_padding_waste, not unbounded: where each
    # member adds 1 ms to an 8 ms launch, 8 ms x 1.15 = 9.2 ms admits one more.
    steep = CostEstimator(CostModelConfig(fixed_ms=7.0, per_sequence_ms=1.0,
                                          per_token_ms=0.0, per_token_squared_ms=0.0),
                          "padded")
    former = make_former("shortest_first", cfg, ctl, steep)
    assert len(former.form(queue, state, 0.0, flush=True).entries) == 2


# What a BERT-large in fp16 cost on an H200 inside a server, where almost every batch of
# more than one request had a shape (batch x longest) the process had not run before: 6 ms
# for one request, about 40 ms for more (results/gpu_h200_c7ee9d4).
NEW_SHAPES_TABLE = tuple((b, n, 6.0 if b == 1 else 40.0) for b in (1, 2, 8, 32, 64)
                         for n in (16, 64, 128, 256, 512))


@pytest.mark.parametrize("rate_rps, size", [
    (234.0, 12),  # one a call serves 167/s, full batches 1,600/s: the whole queue goes
    (0.0, 1),  # no arrival rate yet: the budget (0.25 x 50 ms) holds
    (5000.0, 1),  # a true overload, even full batches fall behind: the budget holds
])
def test_a_budget_that_would_serve_slower_than_the_arrivals_gives_way(rate_rps, size):
    """One request a call (6 ms) serves 167/s: at 234/s arriving, the budget alone would
    make an overload that never ends (every call refusing its tail), while full batches
    (64 in 40 ms) serve every arrival. The budget goes: the whole queue is one batch."""
    est = CostEstimator(CostModelConfig(table=NEW_SHAPES_TABLE), "padded")
    cfg, ctl = SchedulerConfig(max_batch_size=64, max_batch_tokens=16384), ControlConfig()
    queue = _equal_queue(est, 12, 32, 100.0)
    state = Controller(cfg, ctl).state
    state = replace(state, tightest_sla_ms=50.0,
                    observation=replace(state.observation, arrival_rate_rps=rate_rps))
    former = make_former("shortest_first", cfg, ctl, est)
    assert len(former.form(queue, state, 0.0, flush=True).entries) == size


def test_the_capacity_within_a_budget_is_its_largest_batch():
    """One request in 6 ms within a 12.5 ms budget (167 a second); 64 in 40 ms without one
    (1,600); the token limit caps the batch (16,384 / 512 = 32 in 40 ms: 800)."""
    est = CostEstimator(CostModelConfig(table=NEW_SHAPES_TABLE), "padded")
    former = make_former("shortest_first", SchedulerConfig(max_batch_size=64,
                                                           max_batch_tokens=16384),
                         ControlConfig(), est)
    assert former._capacity_rps(32, 12.5) == pytest.approx(1000 / 6.0)
    assert former._capacity_rps(32, float("inf")) == pytest.approx(1600.0)
    assert former._capacity_rps(512, float("inf")) == pytest.approx(800.0)
