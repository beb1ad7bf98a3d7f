"""The engine: the one driver sequence (submit, step, started, finished) over any policy,
driven with plain floats for time (nothing sleeps)."""

from __future__ import annotations

from scheduler_core.engine import AS_HANDED, Engine, Perceived
from simulation.native_batcher import TritonDynamicBatcher as NativeBatcher
from scheduler_core.contract import (MIN_WAKE_STEP_S, BatchDecision, QueueFull, Reason,
                                   RejectReason)
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.request import QueuedRequest, Served
from scheduler_core.scheduler import Scheduler


PROFILES = "model_repository/emulated_explicit/profiles"


def t4():
    return load_profile(profile_path(PROFILES, "t4"))


def req(rid: int, arrival_s: float = 0.0, seq_len: int = 16,
        sla_ms: float = 10_000.0) -> QueuedRequest:
    return QueuedRequest(rid, seq_len, arrival_s, sla_ms)


class ScriptedPolicy:
    """A policy that answers ``schedule`` from a script and records every call."""

    def __init__(self, decisions: list[BatchDecision], bound: int = 100):
        self.decisions = list(decisions)
        self.bound = bound
        self.queue: list[QueuedRequest] = []
        self.calls: list[tuple] = []

    def submit(self, request, now_s):
        if len(self.queue) >= self.bound:
            raise QueueFull("full")
        self.queue.append(request)

    def schedule(self, now_s, flush=False):
        self.calls.append(("schedule", now_s, flush))
        decision = self.decisions.pop(0)
        for r in [*decision.batch, *(r for r, _ in decision.rejected)]:
            self.queue.remove(r)
        return decision

    def batch_started(self, batch, now_s):
        self.calls.append(("started", len(batch), now_s))

    def batch_finished(self, batch, started_s, now_s, succeeded=True):
        self.calls.append(("finished", len(batch), started_s, now_s, succeeded))

    def tick(self, now_s):
        self.calls.append(("tick", now_s))

    def drain(self):
        left, self.queue = self.queue, []
        return left

    @property
    def queue_depth(self):
        return len(self.queue)


def decision(batch=(), rejected=(), wake_at_s=None, reason=Reason.WAIT) -> BatchDecision:
    return BatchDecision(tuple(batch), wake_at_s, reason, 0.0, 0.0, 0.0, tuple(rejected))


def test_submit_returns_what_the_queue_bound_leaves_out_in_order():
    engine = Engine(NativeBatcher(max_batch_size=8, max_queue_size=2))
    requests = [req(k) for k in range(5)]
    assert engine.submit(requests, 0.0) == requests[2:]
    assert engine.queue_depth == 2
    one_by_one = Engine(ScriptedPolicy([], bound=1))  # no submit_all: each in turn
    first, second = req(0), req(1)
    assert one_by_one.submit([first, second], 0.0) == [second]
    assert one_by_one.policy.queue == [first]


def test_a_flush_that_only_sheds_is_asked_again_until_a_batch_comes():
    """With flush, a step whose decision only refused requests asks again at once; every
    refusal on the way reaches the caller in the one step."""
    a, b, c = req(1), req(2), req(3)
    policy = ScriptedPolicy([decision(rejected=[(a, RejectReason.INFEASIBLE)]),
                             decision(rejected=[(b, RejectReason.INFEASIBLE)]),
                             decision(batch=[c], reason=Reason.FLUSH)])
    engine = Engine(policy)
    engine.submit([a, b, c], 0.0)

    step = engine.step(1.0, flush=True)

    assert step.batch == (c,) and [r for r, _ in step.refused] == [a, b]
    assert [call[0] for call in policy.calls] == ["schedule"] * 3


def test_without_flush_a_step_is_asked_once_and_its_wake_up_never_lies_in_the_past():
    a = req(1)
    policy = ScriptedPolicy([decision(wake_at_s=0.5), decision(wake_at_s=3.0)])
    engine = Engine(policy)
    engine.submit([a], 0.0)

    past = engine.step(1.0)
    future = engine.step(1.0)

    assert past.batch == () and past.wake_at_s == 1.0 + MIN_WAKE_STEP_S
    assert future.wake_at_s == 3.0
    assert len(policy.calls) == 2


def started_step():
    """A policy and its engine with one batch of one request started at 1.25."""
    a = req(1)
    policy = ScriptedPolicy([decision(batch=[a], reason=Reason.FULL)])
    engine = Engine(policy)
    engine.submit([a], 0.0)
    step = engine.step(1.0)
    engine.started(step.batch, 1.25)
    return policy, engine, step


def test_the_bracket_reaches_the_policy_as_given():
    policy, engine, step = started_step()
    engine.finished(step.batch, 1.25, 1.5, ok=False)
    assert policy.calls[1:] == [("started", 1, 1.25), ("finished", 1, 1.25, 1.5, False)]


def test_a_split_bracket_reaches_a_policy_without_the_split_whole_at_observed():
    """``ended`` now, ``observed`` later: a policy that only has ``batch_finished`` gets
    it once, at ``observed``, with the batch's own times; the Scheduler gets both halves."""
    policy, engine, step = started_step()
    engine.ended(1.5)
    assert policy.calls[-1] == ("started", 1, 1.25)
    engine.observed(Served.of(step.batch), 1.25, 1.5)
    assert policy.calls[-1] == ("finished", 1, 1.25, 1.5, True)


def test_a_perception_sample_reaches_a_policy_that_perceives_and_no_other():
    scheduler = Engine(Scheduler.from_profile(t4()))
    scheduler.perceive(Perceived(False))
    assert scheduler.policy.controller.perception_ok is False
    scheduler.perceive(Perceived(True, 0.75, 2.0))
    assert scheduler.policy.controller.perception_ok is True
    assert scheduler.policy.controller._external[:2] == (0.75, 2.0)

    native = Engine(NativeBatcher(max_batch_size=8))
    native.perceive(Perceived(False))  # a baseline has no perception: nothing happens
    waiting = req(1)
    native.submit([waiting], 0.0)
    assert native.step(0.0, flush=True, sample=Perceived(False)).batch == (waiting,)


def test_a_quiet_hand_over_is_taken_whole_as_one_step_and_a_baseline_takes_none():
    engine = Engine(Scheduler.from_profile(t4()))
    batch = [QueuedRequest(k, 16, 9.999, 10_000.0) for k in range(4)]

    [step] = engine.take_planned(batch, 10.0)

    assert step is not None and step.batch == tuple(batch) and not step.refused
    assert step.former == AS_HANDED and step.estimated_ms > 0 and step.wake_at_s is None
    assert Engine(NativeBatcher(max_batch_size=8)).take_planned(batch, 10.0) is None
    assert engine.take_planned([], 10.0) is None


def test_a_launched_hand_over_is_reported_in_one_entry_as_a_taken_one_is_in_two():
    """Twins: one launches a hand-over from its lengths (``launches``), then reports it
    with its SLAs, taken and started, in one entry (``launched_step``, ``took_launched``);
    the other takes it whole and hears it started. Same step, same counts and arrivals,
    the device busy from the same start; the SLA floor follows the members."""
    launcher, taker = Engine(Scheduler.from_profile(t4())), Engine(Scheduler.from_profile(t4()))
    first = [QueuedRequest(k, 16, 9.0, 10_000.0) for k in range(3)]
    for engine in (launcher, taker):  # the floor: an SLA heard before
        engine.started(engine.take_planned(first, 9.0)[0].batch, 9.0)
        engine.ended(9.01)
    batch = [QueuedRequest(10 + k, 16, 9.999, 5_000.0) for k in range(4)]

    estimate = launcher.launches(10.0, [r.seq_len for r in batch], 9.999)
    step = launcher.launched_step(batch, estimate)
    launcher.took_launched(step, 10.0, 10.002)
    [taken] = taker.take_planned(batch, 10.0)
    taker.started(taken.batch, 10.002)

    assert step.batch == taken.batch and step.former == taken.former == AS_HANDED
    assert step.estimated_ms == taken.estimated_ms
    one, other = launcher.policy, taker.policy
    assert one.counts == other.counts
    assert one.controller.arrivals.rate_rps(10.0) == other.controller.arrivals.rate_rps(10.0)
    assert one.controller.busy.utilization(10.01) == other.controller.busy.utilization(10.01)
    assert one.controller.sla_floor_ms == 5_000.0
