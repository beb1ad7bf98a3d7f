"""The engine: the one driver sequence over a batching policy, for every caller.

The server's drivers (``triton_backend.hold_driver``, ``triton_backend.threaded_driver``),
the simulator (``simulator.py``) and the fleet (``fleet.py``) all drive a policy through
this class, so the rules of ``contract.py`` are kept in one place::

    refused = engine.submit(requests, now_s)      # arrivals; answer each refused one
    step = engine.step(now_s, flush, sample)      # whenever the device is free, or at
    #   the running batch's estimated end where nothing can arrive before it (intake
    #   hold's call: Runner.decide_ahead), launched when that batch returns
    #   answer every request in step.refused (UNAVAILABLE, refusal_message(reason))
    #   if step.batch:
    engine.started(step.batch, start_s)           #   the caller runs it, then
    engine.finished(step.batch, start_s, end_s, ok)
    #   (or engine.ended(end_s) at once, engine.observed(...) later: the server feeds a
    #   batch's latencies and cost while the next batch runs)
    #   else ask again at step.wake_at_s, or on the next arrival

It never runs a batch (vLLM's rule: the scheduler returns data and never calls back), reads
no clock and holds no lock: the caller passes ``now_s`` and serialises the calls.

Rules it keeps for every caller:

* with ``flush``, a step that only shed requests is asked again at once, until a batch
  comes or the queue is empty (a flush must make progress);
* a wake-up asked for at or before ``now_s`` is moved to ``now_s + MIN_WAKE_STEP_S``;
* a perception ``sample`` (the sidecar's reading) is applied before the decision, where
  the policy perceives at all (the explicit-control ``Scheduler``; baselines do not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .contract import BatchDecision, BatchingPolicy, QueueFull, Reason, decide, wake_time
from .request import QueuedRequest, Served

# The reason a step names when a hand-over runs whole, as Triton's batcher handed it over
# (``Engine.take_planned``), and its former; a former's name elsewhere (a planned split's
# batches too).
AS_HANDED = "as_handed"


@dataclass(frozen=True)
class Perceived:
    """One perception sample for ``Engine.step``: whether the sidecar is healthy and
    fresh (``ok``; False falls back to default batching), and its device utilisation
    (None: unknown) measured at ``measured_at_s`` on the caller's clock."""

    ok: bool
    utilization: float | None = None
    measured_at_s: float = 0.0
    source: str = "nvml"


@dataclass(frozen=True)
class Step:
    """What one step decided: ``batch`` to run now (empty: none), ``refused`` (each
    request with its reason; the caller answers every one), and ``wake_at_s``, when to
    step again if nothing arrives (None: on an arrival). ``decision`` keeps the policy's
    whole answer (reason, zone, mode, former, estimate) for logs and metrics."""

    batch: tuple[QueuedRequest, ...]
    refused: tuple[tuple[QueuedRequest, str], ...]
    wake_at_s: float | None
    decision: BatchDecision

    @property
    def former(self) -> str:
        return self.decision.former

    @property
    def estimated_ms(self) -> float:
        return self.decision.estimated_ms


class Engine:
    """Drives one ``BatchingPolicy`` (see the module docstring). ``policy`` stays
    reachable for what only one policy offers (the ``Scheduler``'s overload figures)."""

    def __init__(self, policy: BatchingPolicy):
        self.policy = policy

    @property
    def queue_depth(self) -> int:
        return self.policy.queue_depth

    def submit(self, requests: Sequence[QueuedRequest], now_s: float) -> list[QueuedRequest]:
        """Queue ``requests`` (arrived at ``now_s``); returns those the queue's bound
        left out, which the caller refuses (``RejectReason.QUEUE_FULL``)."""
        submit_all = getattr(self.policy, "submit_all", None)
        if submit_all is not None:  # one arrival count for a whole call
            return submit_all(requests, now_s)
        refused = []
        for request in requests:
            try:
                self.policy.submit(request, now_s)
            except QueueFull:
                refused.append(request)
        return refused

    def tick(self, now_s: float) -> None:
        """Run the policy's periodic layers (perception, decision) that are due."""
        self.policy.tick(now_s)

    def perceive(self, sample: Perceived | None) -> None:
        """Apply a perception sample, where the policy perceives (see the module doc)."""
        if sample is None or not hasattr(self.policy, "set_perception_health"):
            return
        self.policy.set_perception_health(sample.ok)
        if sample.ok and sample.utilization is not None:
            self.policy.set_external_utilization(sample.utilization, sample.measured_at_s,
                                                 sample.source)

    def step(self, now_s: float, flush: bool = False,
             sample: Perceived | None = None) -> Step:
        """With the device free at ``now_s``: a batch to run now, what is refused, and when
        to step again. ``flush``: whatever is queued, without waiting."""
        self.perceive(sample)
        decision = decide(self.policy, now_s, flush)
        return Step(decision.batch, decision.rejected, wake_time(decision, now_s), decision)

    def take_planned(self, batch: Sequence[QueuedRequest], now_s: float,
                     sample: Perceived | None = None) -> list[Step] | None:
        """A hand-over the caller holds, as one batch, where the policy says that is the
        batch it would form from it anyway, or as the two batches its decision would run
        one after the other, known at hand-over (``Scheduler.takes_planned``): steps to
        run in order and bracket like any other (``started`` / ``finished``); None:
        nothing was taken, ``submit`` and ``step`` instead. A policy without that rule
        takes none."""
        takes = getattr(self.policy, "takes_planned", None)
        if takes is None or not batch:
            return None
        self.perceive(sample)
        planned = takes(now_s, batch)
        if planned is None:
            return None
        first, first_ms, rest, rest_ms = planned
        if not rest:
            return [self._as_handed(first, first_ms)]
        name = self.policy.formers[self.policy.controller.state.mode].name
        return [self._as_handed(first, first_ms, name), self._as_handed(rest, rest_ms, name)]

    def launches(self, now_s: float, lengths: Sequence[int], arrival_s: float
                 ) -> float | None:
        """``take_planned``'s whole batch before the hand-over's SLAs are read, from its
        ``lengths`` (all arrived at ``arrival_s``; ``Scheduler.launches_as_handed``): the
        batch's estimate (ms) where the caller launches it at once, then reports it with
        the members' SLAs (``launched_step``, ``took_launched``); None: nothing changed. A
        policy without that rule launches none."""
        rule = getattr(self.policy, "launches_as_handed", None)
        return None if rule is None or not lengths else rule(now_s, lengths, arrival_s)

    def launched_step(self, batch: Sequence[QueuedRequest], estimated_ms: float) -> Step:
        """The step for what ``launches`` launched (``estimated_ms``): ``batch``, its
        members with their SLAs (those refused at once have left), to bracket like any
        other once ``took_launched`` reported it."""
        return self._as_handed(batch, estimated_ms)

    def took_launched(self, step: Step, now_s: float, started_s: float) -> None:
        """``launched_step``'s ``step``, decided at ``now_s`` and started on the device at
        ``started_s``: one entry for both reports, taken (with its members' SLAs) and
        ``started``."""
        self.policy.took_as_handed(now_s, step.batch, step.estimated_ms, step.decision.mode)
        self.policy.batch_started(step.batch, started_s)

    def _as_handed(self, batch: Sequence[QueuedRequest], estimated_ms: float | None,
                   former: str = AS_HANDED) -> Step | None:
        if estimated_ms is None:
            return None
        state = self.policy.controller.state
        # A planned split's batches are the former's, formed as a hold call's flush.
        reason = AS_HANDED if former == AS_HANDED else Reason.FLUSH
        decision = BatchDecision(tuple(batch), None, reason, state.window_ms,
                                 state.observation.utilization, estimated_ms, (), state.zone,
                                 state.mode, former)
        return Step(decision.batch, (), None, decision)

    def started(self, batch: Sequence[QueuedRequest], now_s: float) -> None:
        """The caller started ``batch`` on the device at ``now_s``."""
        self.policy.batch_started(batch, now_s)

    def finished(self, batch: Sequence[QueuedRequest], started_s: float, now_s: float,
                 ok: bool = True) -> None:
        """``batch``, started at ``started_s``, ended at ``now_s`` (``ok``: it succeeded
        and its answers went out)."""
        self.policy.batch_finished(batch, started_s, now_s, ok)

    def ended(self, now_s: float) -> None:
        """The device went free at ``now_s``; ``observed`` brings the rest of the batch's
        feedback, possibly after the next batch started. For a policy without that split
        (``batch_ended``), the whole feedback waits for ``observed``."""
        ended = getattr(self.policy, "batch_ended", None)
        if ended is not None:
            ended(now_s)

    def observed(self, served: Served, started_s: float, ended_s: float,
                 ok: bool = True) -> None:
        """The rest of ``finished`` for a batch whose end ``ended`` told (``served``: the
        batch as its feedback reads it)."""
        if getattr(self.policy, "batch_observed", None) is not None:
            self.policy.batch_observed(served, started_s, ended_s, ok)
        else:
            self.policy.batch_finished(served.requests(), started_s, ended_s, ok)

    def drain(self) -> list[QueuedRequest]:
        """Empty the queue (shutdown, or the end of a run): the caller answers each."""
        return self.policy.drain()

