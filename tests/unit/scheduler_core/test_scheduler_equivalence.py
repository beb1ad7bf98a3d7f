"""The vectorised decision path decides exactly as the scalar one.

The oracle is the product's own scalar code: a ``Scheduler`` whose ``small_queue``
threshold is so high that every scan over the queue (urgency order, infeasible requests)
runs in plain Python, as it does for small queues in production. It is driven beside one
whose threshold is 0 (every scan vectorised) through the same simulated workloads - the
shipped profiles as shipped (every rule on), padded and ragged cost, light load to 2x
overload, every mode (default, explicit, emergency), both infeasible policies - and the
two must agree bit for bit:

* in lockstep (``Twin``): every ``schedule`` call returns an equal ``BatchDecision`` (the
  same batch in the same order, the same rejections, wake-up time, reason, estimate, zone
  and mode), every ``submit`` accepts or refuses alike, and the stats agree at the end;
* run separately: every request's dispatch time, finish time and outcome are equal.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulation import workload as W
from scheduler_core.entry_queue import Entry, EntryQueue, exact_rank, urgency_order
from scheduler_core.contract import QueueFull
from scheduler_core.profile_parse import with_emulation
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler
from simulation.simulator import capacity_rps, simulate

PROFILE_DIR = "model_repository/emulated_explicit/profiles"
SHIPPED = ("t4", "a100", "h100", "h200", "cpu", "cdna", "gaudi")
SCALAR = 10 ** 12  # small_queue: every scan in plain Python (the oracle)
VECTORISED = 0  # small_queue: every scan in numpy
LENGTHS = W.LogNormalLengths(median=64.0, sigma=0.8, lo=16, hi=512)

# Control variants: the shipped settings and ones that force or stress each mode.
CONTROLS = {
    "shipped": {},
    "serve_late": {"infeasible_policy": "serve_late"},  # nothing shed: deep queues
    # Pre-warm from any utilisation: explicit control at once; priority slots in use.
    "explicit": {"prewarm_utilization": 0.0, "priority_slots": 3, "max_padding_waste": 0.3},
    # Danger as soon as any indicator moves: the emergency policy, with its options.
    "emergency": {"nml_score": 0.005, "danger_zone_threshold": 0.01,
                  "emergency_stop_noncritical": True, "noncritical_sla_ms": 100.0,
                  "dilution": True, "dilution_gap_ms": 0.5, "emergency_batch_size": 3},
    # No aging: every infeasible request scores exactly -1 (large ties, arrival order).
    "no_aging": {"aging_per_s": 0.0, "prewarm_utilization": 0.0,
                 "infeasible_policy": "serve_late", "urgency_slack_unit_ms": 1.0},
    "disabled": {"enabled": False},  # default batching only
}


def _profile(name: str, cost_mode: str):
    p = load_profile(profile_path(PROFILE_DIR, name))
    return with_emulation(p, {"cost_mode": cost_mode}, "test")


def _control(profile, variant: str):
    return replace(profile.control, **CONTROLS[variant])


class Twin:
    """Drives the vectorised (``live``) and the scalar (``ref``) scheduler in lockstep; any
    difference fails.

    ``check_order``: before every third decision, also compare the urgency order itself
    (the vectorised first ``k`` against the scalar scan of the same queue, for a few ``k``)
    and which requests in it count as urgent.
    """

    def __init__(self, live: Scheduler, ref: Scheduler, check_order: bool = False):
        self.live, self.ref = live, ref
        self.check_order = check_order
        self.orders_checked = 0
        self.calls = 0
        self.modes: dict[str, int] = {}
        self.max_depth = 0

    def submit(self, request, now_s):
        refused = []
        for s in (self.live, self.ref):
            try:
                s.submit(request, now_s)
                refused.append(False)
            except QueueFull:
                refused.append(True)
        assert refused[0] == refused[1], (request, now_s)
        self.max_depth = max(self.max_depth, self.live.queue_depth)
        if refused[0]:
            raise QueueFull("both full")

    def schedule(self, now_s, flush=False):
        if self.check_order and self.live.queue_depth and self.calls % 3 == 0:
            self._compare_order(now_s)
        got = self.live.schedule(now_s, flush)
        want = self.ref.schedule(now_s, flush)
        self.calls += 1
        assert [r.request_id for r in got.batch] == [r.request_id for r in want.batch], \
            (now_s, got.reason, want.reason, got.mode)
        assert [(r.request_id, why) for r, why in got.rejected] == \
            [(r.request_id, why) for r, why in want.rejected], now_s
        assert got == want, (now_s, got, want)
        self.modes[got.mode] = self.modes.get(got.mode, 0) + 1
        return got

    def _compare_order(self, now_s):
        self.live.tick(now_s)  # as schedule() would first (no-op the second time)
        self.ref.tick(now_s)
        live = self.live
        queue = live._queue
        depth = len(queue)
        behind = depth >= live.cfg.max_batch_size
        corr = live.estimator.correction
        for k in {1, 7, 8 * live.cfg.max_batch_size, depth // 2 + 1, depth}:
            got = urgency_order(queue, now_s, live.control, corr, behind, k, VECTORISED)
            want = urgency_order(queue, now_s, live.control, corr, behind, k, SCALAR)
            assert got == want, (now_s, k)
            assert len(got[2]) == min(k, depth)
        self.orders_checked += 1

    def tick(self, now_s):
        self.live.tick(now_s)
        self.ref.tick(now_s)

    def batch_started(self, batch, now_s):
        self.live.batch_started(batch, now_s)
        self.ref.batch_started(batch, now_s)

    def batch_finished(self, batch, started_s, now_s, succeeded=True):
        self.live.batch_finished(batch, started_s, now_s, succeeded)
        self.ref.batch_finished(batch, started_s, now_s, succeeded)

    @property
    def queue_depth(self):
        depth = self.live.queue_depth
        assert depth == self.ref.queue_depth
        return depth


def _pair(profile, control, time_scale=None):
    return (Scheduler.from_profile(profile, time_scale, control, small_queue=VECTORISED),
            Scheduler.from_profile(profile, time_scale, control, small_queue=SCALAR))


def _assert_same_runs(profile, control, arrivals, time_scale=1.0, separately=True,
                      check_order=False) -> Twin:
    cm, mode = profile.cost_model, profile.emulation.cost_mode
    live, ref = _pair(profile, control, time_scale)
    twin = Twin(live, ref, check_order)
    simulate(twin, arrivals, cm, mode, time_scale)
    assert live.stats(1e9) == ref.stats(1e9)
    assert live.counts == ref.counts

    if not separately:
        return twin
    # Separately, each with its own simulation: per-request outcomes.
    got = simulate(Scheduler.from_profile(profile, time_scale, control, small_queue=VECTORISED),
                   arrivals, cm, mode, time_scale)
    want = simulate(Scheduler.from_profile(profile, time_scale, control, small_queue=SCALAR),
                    arrivals, cm, mode, time_scale)
    assert got.dispatch_s == want.dispatch_s  # nan == nan holds inside tuples (identity)
    assert got.finish_s == want.finish_s
    assert got.outcome == want.outcome
    assert got.rejected_reasons == want.rejected_reasons
    assert got.dispatch_reasons == want.dispatch_reasons
    return twin


def _workload(profile, load: float, duration_s: float, seed: int):
    lengths = W.sample_lengths(20_000, seed, LENGTHS)
    s = profile.scheduler
    cap = capacity_rps(profile.cost_model, profile.emulation.cost_mode,
                       profile.emulation.time_scale, lengths, s.max_batch_size,
                       s.max_batch_tokens)
    return W.generate(W.Poisson(load * cap), duration_s, seed, LENGTHS,
                      W.SlaMix((50.0, 100.0, 200.0)))


@pytest.mark.parametrize("cost_mode", ["padded", "ragged"])
@pytest.mark.parametrize("name", ["t4", "a100"])
@pytest.mark.parametrize("variant", sorted(CONTROLS))
@pytest.mark.parametrize("load", [0.5, 1.0, 2.0])
def test_same_decisions_on_poisson_workloads(name, cost_mode, variant, load):
    profile = _profile(name, cost_mode)
    control = _control(profile, variant)
    seed = zlib.crc32(f"{name} {cost_mode} {variant} {load}".encode()) % 10_000
    arrivals = _workload(profile, load, 0.5, seed)
    # Lockstep equality at every call implies equal per-request outcomes; the separate
    # runs are repeated for the shipped settings only (the test's time goes on breadth).
    twin = _assert_same_runs(profile, control, arrivals, separately=variant == "shipped")
    assert twin.calls > 10
    if variant == "disabled":
        assert set(twin.modes) == {"default"}
    elif variant in ("explicit", "no_aging") and load >= 1.0:
        assert twin.modes.get("explicit", 0) + twin.modes.get("emergency", 0) > 0
    elif variant == "emergency" and load >= 1.0:
        assert twin.modes.get("emergency", 0) > 0


@pytest.mark.parametrize("cost_mode", ["padded", "ragged"])
@pytest.mark.parametrize("name", SHIPPED)
def test_same_decisions_on_every_shipped_profile(name, cost_mode):
    """Every profile the project ships, as shipped, from light load to overload."""
    profile = _profile(name, cost_mode)
    for load in (0.3, 0.8, 1.5):
        seed = zlib.crc32(f"{name} {cost_mode} {load}".encode()) % 10_000
        _assert_same_runs(profile, profile.control, _workload(profile, load, 0.4, seed),
                          check_order=True)


@pytest.mark.parametrize("name", ["t4", "a100"])
@pytest.mark.parametrize("variant", ["serve_late", "no_aging", "emergency"])
def test_same_decisions_with_queues_deeper_than_the_urgency_scan(name, variant):
    """2.5x overload with nothing shed: the queue grows far past 8 * max_batch_size, so only
    part of it is re-scored exactly (the path that must still pick the same top)."""
    profile = _profile(name, "padded")
    control = replace(_control(profile, variant), infeasible_policy="serve_late",
                      dilution=False)
    arrivals = _workload(profile, 2.5, 0.25, 7)
    twin = _assert_same_runs(profile, control, arrivals, check_order=True)
    assert twin.max_depth > 8 * profile.scheduler.max_batch_size + 100
    assert twin.orders_checked > 10


@pytest.mark.parametrize("name", ["t4", "a100"])
@pytest.mark.parametrize("variant", ["shipped", "explicit", "no_aging", "emergency"])
def test_same_decisions_with_exact_ties(name, variant):
    """Arrivals in lumps on a 2 ms grid, three lengths, three SLAs: many requests with
    equal urgency, whose order must stay arrival order."""
    profile = _profile(name, "padded")
    control = _control(profile, variant)
    rng_arrivals = W.generate(W.Bursty(low_rps=2000.0, high_rps=20000.0, mean_low_s=0.05,
                                       mean_high_s=0.05), 0.5, 11,
                              W.BimodalLengths(16, 17, 128, 129, 0.3))
    arrivals = [W.Arrival(round(a.time_s * 500) / 500, 16 if a.seq_len < 100 else 128,
                          a.sla_ms) for a in rng_arrivals]
    _assert_same_runs(profile, control, arrivals, check_order=True)


@pytest.mark.parametrize("variant", ["shipped", "explicit", "no_aging"])
@pytest.mark.parametrize("cost_mode", ["padded", "ragged"])
def test_same_decisions_on_an_exact_binary_grid(variant, cost_mode):
    """Times, SLAs and costs all multiples of 1/1024 s, so the float sums are exact and
    comparisons such as ``now + cost > deadline`` hit equality: the boundaries must fall
    the same way."""
    q = 1000.0 / 1024  # 1/1024 s in ms
    profile = _profile("t4", cost_mode)
    profile = replace(profile, cost_model=replace(
        profile.cost_model, fixed_ms=2 * q, per_sequence_ms=q / 4, per_token_ms=q / 256,
        per_token_squared_ms=0.0))
    base = _workload(profile, 1.5, 0.5, 13)
    arrivals = [W.Arrival(round(a.time_s * 1024) / 1024, 16 * max(1, a.seq_len // 16),
                          q * {50.0: 16, 100.0: 48, 200.0: 128}[a.sla_ms]) for a in base]
    _assert_same_runs(profile, _control(profile, variant), arrivals, check_order=True)


def test_same_decisions_on_a_flash_crowd_with_a_small_queue_bound():
    """QueueFull refusals, a queue that fills and drains, an emulated slow-down."""
    profile = _profile("t4", "padded")
    profile = replace(profile, scheduler=replace(profile.scheduler, max_queued_requests=300))
    arrivals = W.generate(W.FlashCrowd(400.0, factor=8.0, spike_start_s=0.2,
                                       spike_length_s=0.3), 1.0, 5, LENGTHS)
    _assert_same_runs(profile, profile.control, arrivals, time_scale=1.5)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), load=st.floats(0.3, 3.0),
       decay=st.floats(0.5, 0.99), unit=st.floats(0.5, 50.0), aging=st.floats(0.0, 5.0),
       slots=st.integers(0, 4), fill=st.floats(0.0, 1.0),
       policy=st.sampled_from(["reject", "serve_late"]),
       cost_mode=st.sampled_from(["padded", "ragged"]))
def test_same_decisions_for_random_urgency_settings(seed, load, decay, unit, aging, slots, fill,
                                                     policy, cost_mode):
    profile = _profile("t4", cost_mode)
    control = replace(profile.control, urgency_decay_rate=decay, urgency_slack_unit_ms=unit,
                      aging_per_s=aging, priority_slots=slots, min_batch_fill=fill,
                      infeasible_policy=policy, prewarm_utilization=0.3)
    _assert_same_runs(profile, control, _workload(profile, load, 0.3, seed), separately=False,
                      check_order=True)


def test_same_decisions_after_remove_and_drain():
    profile = _profile("a100", "padded")
    live, ref = _pair(profile, replace(profile.control, prewarm_utilization=0.0))
    arrivals = _workload(profile, 3.0, 0.2, 3)
    now = 0.0
    for i, a in enumerate(arrivals):
        now = a.time_s
        req = QueuedRequest(i, a.seq_len, a.time_s, a.sla_ms)
        live.submit(req, now)
        ref.submit(req, now)
        if i % 97 == 0:
            wanted = list(range(max(0, i - 300), i, 7))
            assert live.remove(wanted) == ref.remove(wanted)
        if i % 5 == 0:
            got, want = live.schedule(now), ref.schedule(now)
            assert got == want
            assert live.peek(10) == ref.peek(10)
    assert live.queue_depth == ref.queue_depth > 0
    assert live.drain() == ref.drain()
    assert live.schedule(now + 1).reason == ref.schedule(now + 1).reason == "idle"


# -- the queue structure itself ------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "extend", "take_some", "take_first",
                                           "clear"]),
                          st.integers(0, 10_000)), max_size=400))
def test_entry_queue_matches_a_list(ops):
    """Appended one by one or a hand-over at once (``extend``), taken out anywhere: the
    queue iterates as a list would, its columns mirror its entries slot by slot."""
    q, model, counter = EntryQueue(capacity=4), [], 0
    for op, k in ops:
        if op in ("append", "extend"):
            added = []
            for _ in range(1 + k % 40):
                req = QueuedRequest(counter, 16 + k % 100, counter * 1e-3, 50.0 + k % 3)
                added.append(Entry(req, 0.0, 1.0 + k % 7, 2.0 + k % 5))
                counter += 1
            if op == "extend":
                q.extend(added)
            for e in added:
                if op == "append":
                    q.append(e)
                model.append(e)
        elif op == "take_some" and model:
            chosen = model[k % len(model)::1 + k % 5]
            q.discard(chosen)
            model = [e for e in model if e not in chosen]
        elif op == "take_first" and model:
            q.discard(model[:1 + k % 3])
            model = model[1 + k % 3:]
        elif op == "clear":
            q.clear()
            model = []
        assert list(q) == model and len(q) == len(model)
        if model:
            assert q.first() is model[0]
        assert q.min_deadline() == min((e.deadline_s for e in model), default=math.inf)
        live = q.alive[q.lo:q.hi]
        assert live.sum() == len(model)
        assert list(q.deadline[q.lo:q.hi][live]) == [e.deadline_s for e in model]
        assert list(q.efficient[q.lo:q.hi][live]) == [e.efficient_ms for e in model]
        assert list(q.alone[q.lo:q.hi][live]) == [e.alone_ms for e in model]
        assert list(q.arrival[q.lo:q.hi][live]) == [e.req.arrival_s for e in model]
        assert list(q.length[q.lo:q.hi][live]) == [e.seq_len for e in model]
        assert all(q.items[e.slot] is e for e in model)


# -- the exact ranking from approximate scores -------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([-1.0, 0.25, 0.5, 0.5 + 2 ** -52, 0.75, 3.0]),
                          st.integers(-3, 3), st.booleans(), st.integers(-40, 40)),
                min_size=0, max_size=60),
       st.sampled_from([0.5, 0.75, 0.0]))
def test_exact_rank_orders_by_the_exact_score(rows, threshold):
    """Near-ties (a few ulp apart) whose approximations are off by up to 1e-13 - more than
    the gaps, far less than the margin - and scores at the threshold: the ranking is that
    of the exact scores, ties in index order, and the urgent flags are exact."""
    exact_scores = [base + k * 2 ** -52 for base, k, _, _ in rows]
    feasible = np.array([f for _, _, f, _ in rows], dtype=bool)
    # Infeasible scores are exact already (no power in them): no noise there.
    approx = np.array([e + (noise * 2.5e-15 if f else 0.0)
                       for e, (_, _, f, noise) in zip(exact_scores, rows)], dtype=float)
    computed = []

    def exact(i):
        computed.append(i)
        return exact_scores[i]

    order, urgent = exact_rank(approx, feasible, threshold, exact)
    want = sorted(range(len(rows)), key=lambda i: -exact_scores[i])  # stable
    assert order.tolist() == want
    assert urgent.tolist() == [bool(f) and e >= threshold
                               for e, f in zip(exact_scores, feasible)]
    assert all(feasible[i] for i in computed)


def test_exact_rank_computes_nothing_exactly_when_scores_are_apart():
    approx = np.array([0.1, 0.9, 0.3, -1.0, 0.6])
    order, urgent = exact_rank(approx, np.array([True, True, True, False, True]), 0.5,
                                lambda i: pytest.fail("no exact score needed"))
    assert order.tolist() == [1, 4, 2, 0, 3]
    assert urgent.tolist() == [False, True, False, False, True]


@pytest.mark.parametrize("decay, unit", [(1.0, 10.0), (0.0, 10.0), (0.85, 0.0)])
def test_same_behaviour_outside_the_validated_urgency_settings(decay, unit):
    """Settings a profile file may not hold (but a ControlConfig built in code may) take the
    scalar path: the same decisions, or the same exception."""
    profile = _profile("t4", "padded")
    control = replace(profile.control, urgency_decay_rate=decay, urgency_slack_unit_ms=unit,
                      prewarm_utilization=0.0, infeasible_policy="serve_late")
    arrivals = _workload(profile, 2.0, 0.2, 21)
    if unit == 0.0:
        for policy in _pair(profile, control):
            with pytest.raises(ZeroDivisionError):
                simulate(policy, arrivals, profile.cost_model)
    else:
        _assert_same_runs(profile, control, arrivals, separately=False)
