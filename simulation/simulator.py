"""Deterministic discrete-event simulator: one device, any batching policy.

The device is ONE model instance that runs one batch at a time and takes exactly what the
emulated device sleeps (``triton_backend.executors.EmulatedDevice``)::

    device_ms = cost_ms(cost_model, batch_shape(lengths, cost_mode)) * time_scale

The policy is driven through the same ``Engine`` as the server's drivers (``engine.py``):
``submit`` on each arrival, ``step`` whenever the device is free, ``started`` / ``finished``
around each batch, and ``tick(now_s)`` every ``control_period_s``.

The core is SimPy's: a heap of ``(time, priority, seq, event)`` where ``seq`` comes from an
``itertools.count()``, so simultaneous events always run in the same order and a run is a
pure function of its inputs. At equal times arrivals run before completions, completions
before ticks, ticks before wake-ups, and the policy is asked once, after the last event of
that instant (so simultaneous arrivals, and an arrival at the very moment the device frees
up, join the next batch: it keeps growing until it starts). Only the next arrival and the
next tick sit in the heap, so it stays a handful of entries long. After the last arrival
``schedule`` is called with ``flush=True`` until the queue is empty; a wake-up asked for at
or before ``now`` is moved to ``now + 1 us`` so every step makes progress.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any, Sequence

from scheduler_core.cost_model import batch_shape, cost_ms
from scheduler_core.engine import Engine
from scheduler_core.contract import BatchingPolicy, RejectReason
from scheduler_core.profile import CostModelConfig
from scheduler_core.request import QueuedRequest

from .sim_result import MET, MISSED, PENDING, REJECTED, SimResult, summarise

# Event priorities at equal times (lower first).
ARRIVAL, COMPLETION, TICK, WAKE = 0, 1, 2, 3
# Latency within SLA up to float noise counts as met.
_SLA_EPS_MS = 1e-9


def device_ms(cost_model: CostModelConfig, lengths: Sequence[int], cost_mode: str = "padded",
              time_scale: float = 1.0) -> float:
    """What the emulated device takes for a batch with these lengths (ms)."""
    return cost_ms(cost_model, batch_shape(lengths, cost_mode)) * time_scale


def simulate(policy: BatchingPolicy, arrivals: Sequence[Any], cost_model: CostModelConfig,
             cost_mode: str = "padded", time_scale: float = 1.0, *,
             control_period_s: float = 0.05, drain_timeout_s: float = 600.0,
             name: str | None = None, wall_clock=None) -> SimResult:
    """Run ``arrivals`` (objects with ``time_s``, ``seq_len``, ``sla_ms``, sorted by time)
    through ``policy`` on one emulated device.

    ``drain_timeout_s``: no tick or wake-up is scheduled later than this after the last
    arrival, so a policy that never releases its queue cannot hang the run; requests still
    unanswered then count as rejected (reason ``"unfinished"``). ``wall_clock`` (e.g.
    ``time.perf_counter``) only fills ``SimResult.wall_s``.
    """
    if control_period_s <= 0:
        raise ValueError(f"control_period_s must be > 0 (got {control_period_s!r})")
    started_wall = wall_clock() if wall_clock is not None else 0.0
    run = _Run(arrivals, cost_model, cost_mode, time_scale)
    run.events(Engine(policy), control_period_s, drain_timeout_s)
    run.give_up_unfinished()
    wall = (wall_clock() - started_wall) if wall_clock is not None else 0.0
    return run.result(name if name is not None else type(policy).__name__, wall)


class _Run:
    """One simulation's per-request columns and device tallies (request ids are indices)."""

    def __init__(self, arrivals: Sequence[Any], cost_model: CostModelConfig, cost_mode: str,
                 time_scale: float):
        n = self.n = len(arrivals)
        times = self.times = [a.time_s for a in arrivals]
        if n and not times[0] >= 0.0:
            raise ValueError(f"arrival times must be >= 0 s (got {times[0]!r})")
        for i in range(1, n):
            if times[i] < times[i - 1]:
                raise ValueError(f"arrivals must be sorted by time_s (index {i}: "
                                 f"{times[i]!r} < {times[i - 1]!r})")
        self.lengths = [a.seq_len for a in arrivals]
        self.slas = [a.sla_ms for a in arrivals]
        self.cost_model, self.cost_mode, self.time_scale = cost_model, cost_mode, time_scale
        self.dispatch = [math.nan] * n
        self.finish = [math.nan] * n
        self.outcome = [PENDING] * n
        self.rejected_reasons: dict[str, int] = {}
        self.reasons: dict[str, int] = {}
        self.zones: dict[int, int] = {}
        self.busy_bins: list[float] = []
        self.n_batches = self.batched_requests = self.padded_tokens = self.real_tokens = 0
        self.busy_total = 0.0
        self.last_finish_s = times[-1] if n else 0.0

    def events(self, engine: Engine, control_period_s: float,
               drain_timeout_s: float) -> None:
        """The event loop (see the module docstring for its order of events)."""
        n, times = self.n, self.times
        horizon_s = (times[-1] if n else 0.0) + drain_timeout_s
        heap: list = []
        seq = itertools.count()
        push, pop = heapq.heappush, heapq.heappop
        if n:
            push(heap, (times[0], ARRIVAL, next(seq), 0))
            push(heap, (0.0, TICK, next(seq), 1))
        arrivals_done = n == 0
        busy = False
        wake_gen = 0
        pending_wake_s = None
        while heap:
            now, kind, _, payload = pop(heap)
            if kind == ARRIVAL:
                if payload + 1 < n:
                    push(heap, (times[payload + 1], ARRIVAL, next(seq), payload + 1))
                else:
                    arrivals_done = True
                self.arrive(engine, payload, now)
            elif kind == COMPLETION:
                busy = False
                self.complete(engine, payload[0], payload[1], now)
            elif kind == TICK:
                engine.tick(now)
                nxt = payload * control_period_s
                if nxt <= horizon_s and not (arrivals_done and not busy and not engine.queue_depth):
                    push(heap, (nxt, TICK, next(seq), payload + 1))
            elif payload != wake_gen:  # WAKE
                continue  # stale: superseded by a later decision
            else:
                pending_wake_s = None
            # Decide once per instant, after every event at this time (simultaneous arrivals
            # batch together), and only while the device is free and work is queued.
            if busy or (heap and heap[0][0] <= now) or not engine.queue_depth:
                continue
            # The device is free: step (the engine re-asks while a flush only sheds).
            step = engine.step(now, arrivals_done)
            for req, reason in step.refused:
                self.reject(req.request_id, reason, now)
            if step.batch:
                busy = True
                wake_gen += 1
                pending_wake_s = None
                push(heap, (self.start(engine, step.decision, now), COMPLETION, next(seq),
                            (step.batch, now)))
                continue
            wake_at = step.wake_at_s
            if wake_at is not None and wake_at != pending_wake_s and wake_at <= horizon_s:
                wake_gen += 1
                pending_wake_s = wake_at
                push(heap, (wake_at, WAKE, next(seq), wake_gen))

    def arrive(self, engine: Engine, i: int, now: float) -> None:
        if engine.submit([QueuedRequest(i, self.lengths[i], self.times[i], self.slas[i])], now):
            self.reject(i, RejectReason.QUEUE_FULL, now)

    def reject(self, rid: int, reason: str, now_s: float) -> None:
        if self.outcome[rid] == PENDING:
            self.outcome[rid] = REJECTED
            self.finish[rid] = now_s
            reason = str(reason)  # plain keys in the result
            self.rejected_reasons[reason] = self.rejected_reasons.get(reason, 0) + 1

    def start(self, engine: Engine, decision, now: float) -> float:
        """Run ``decision.batch`` on the device from ``now``; returns its end time."""
        batch = decision.batch
        shape = batch_shape([r.seq_len for r in batch], self.cost_mode)
        duration = cost_ms(self.cost_model, shape) * self.time_scale / 1000.0
        for req in batch:
            self.dispatch[req.request_id] = now
        engine.started(batch, now)
        end = now + duration
        self.n_batches += 1
        self.batched_requests += shape.batch_size
        self.padded_tokens += shape.padded_tokens
        self.real_tokens += shape.real_tokens
        self.busy_total += duration
        r, z = str(decision.reason), int(decision.zone)  # plain keys in the result
        self.reasons[r] = self.reasons.get(r, 0) + 1
        self.zones[z] = self.zones.get(z, 0) + 1
        _add_busy(self.busy_bins, now, end, duration)
        return end

    def complete(self, engine: Engine, batch, started: float, now: float) -> None:
        self.last_finish_s = now
        finish, outcome = self.finish, self.outcome
        for req in batch:
            rid = req.request_id
            finish[rid] = now
            outcome[rid] = MET if (now - req.arrival_s) * 1000.0 <= req.sla_ms + _SLA_EPS_MS \
                else MISSED
        engine.finished(batch, started, now)

    def give_up_unfinished(self) -> None:
        """Requests still unanswered when the run ends count as rejected."""
        for rid in range(self.n):
            if self.outcome[rid] == PENDING:
                self.outcome[rid] = REJECTED
                reason = str(RejectReason.UNFINISHED)
                self.rejected_reasons[reason] = self.rejected_reasons.get(reason, 0) + 1

    def result(self, name: str, wall_s: float) -> SimResult:
        return summarise(
            name, self.times, self.lengths, self.slas, self.dispatch, self.finish, self.outcome,
            self.rejected_reasons, self.reasons, self.zones, self.busy_bins, self.last_finish_s,
            self.n_batches, self.batched_requests, self.padded_tokens, self.real_tokens,
            self.busy_total, wall_s)


def _add_busy(busy_bins: list[float], start_s: float, end_s: float, duration_s: float) -> None:
    """Add a busy interval (``duration_s`` long) to the per-second busy time."""
    first, last = int(start_s), int(end_s)
    if last >= len(busy_bins):
        busy_bins.extend([0.0] * (last + 1 - len(busy_bins)))
    if first == last:
        busy_bins[first] += duration_s
    else:
        busy_bins[first] += (first + 1) - start_s
        for k in range(first + 1, last):
            busy_bins[k] += 1.0
        busy_bins[last] += end_s - last


def capacity_rps(cost_model: CostModelConfig, cost_mode: str, time_scale: float,
                 lengths: Sequence[int], max_batch_size: int,
                 max_batch_tokens: int | None = None) -> float:
    """The device's throughput (requests/s) for a length mix served in full batches of
    similar lengths: sort the lengths, cut them into consecutive batches as large as the
    size and padded-token limits allow, and divide the number of requests by the total
    device time. Load levels are fractions of this figure."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1 (got {max_batch_size!r})")
    ordered = sorted(lengths)
    if not ordered:
        raise ValueError("capacity_rps needs at least one length")
    total_ms = 0.0
    batch: list[int] = []
    for length in ordered:
        # Sorted ascending, so the newcomer is the batch's longest member.
        if batch and (len(batch) >= max_batch_size or (
                max_batch_tokens is not None and length * (len(batch) + 1) > max_batch_tokens)):
            total_ms += device_ms(cost_model, batch, cost_mode, time_scale)
            batch = []
        batch.append(length)
    total_ms += device_ms(cost_model, batch, cost_mode, time_scale)
    return len(ordered) / (total_ms / 1000.0)


def fifo_capacity_rps(cost_model: CostModelConfig, cost_mode: str, time_scale: float,
                      lengths: Sequence[int], max_batch_size: int) -> float:
    """What a FIFO batcher reaches at best on ``lengths`` (requests/s): full batches of
    ``max_batch_size`` in arrival order, whatever their lengths (``capacity_rps`` sorts
    them first)."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1 (got {max_batch_size!r})")
    total_ms = sum(device_ms(cost_model, lengths[i:i + max_batch_size], cost_mode, time_scale)
                   for i in range(0, len(lengths), max_batch_size))
    return len(lengths) / (total_ms / 1000.0)
