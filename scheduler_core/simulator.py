"""Deterministic discrete-event simulator: one device, any batching policy.

The device is ONE model instance that runs one batch at a time and takes exactly what the
emulated device sleeps (``triton_backend.executors.EmulatedDevice``)::

    device_ms = formula_ms(cost_model, batch_shape(lengths, cost_mode)) * time_scale

The policy is driven exactly as the Triton adapter drives the scheduler: ``submit`` on each
arrival, ``schedule`` whenever the device is free, ``batch_started`` / ``batch_finished``
around each batch, and ``tick(now_s)`` every ``control_period_s`` (the rules of ``policy.py``,
through its ``decide`` and ``wake_time``).

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
from dataclasses import dataclass, field
from typing import Any, Sequence

from .cost_model import batch_shape, formula_ms
from .policy import BatchingPolicy, QueueFull, RejectReason, decide, wake_time
from .profile import CostModelConfig
from .request import QueuedRequest
from .stats import percentile

# Event priorities at equal times (lower first).
ARRIVAL, COMPLETION, TICK, WAKE = 0, 1, 2, 3
# Per-request outcomes.
PENDING, MET, MISSED, REJECTED = 0, 1, 2, 3
OUTCOME_NAMES = {PENDING: "pending", MET: "met", MISSED: "missed", REJECTED: "rejected"}

# Latency within SLA up to float noise counts as met.
_SLA_EPS_MS = 1e-9


@dataclass(frozen=True)
class ClassStats:
    """Outcome counts and latency percentiles (ms) of one SLA class."""

    sla_ms: float
    arrivals: int
    met: int
    missed: int
    rejected: int
    attainment: float  # met / arrivals
    p50_ms: float  # over completed requests (met + missed); nan if none
    p99_ms: float


@dataclass(frozen=True)
class RequestRecord:
    request_id: int
    arrival_s: float
    dispatch_s: float  # nan if never dispatched
    finish_s: float  # completion, or the rejection time; nan if unfinished
    seq_len: int
    sla_ms: float
    outcome: str  # "met", "missed" or "rejected"


@dataclass(frozen=True)
class SimResult:
    """What one run measured. Equal inputs give equal results (``wall_s`` aside)."""

    policy: str
    arrivals: int
    met: int
    missed: int
    rejected: int
    rejected_reasons: dict[str, int]
    duration_s: float  # from 0 to the last arrival or completion, whichever is later
    throughput_rps: float  # completed (met + missed) per second
    goodput_rps: float  # met per second
    sla_attainment: float  # met / arrivals
    p50_ms: float
    p99_ms: float
    per_class: dict[float, ClassStats]
    utilization_fluctuation: float  # std of the per-second device busy fraction
    mean_busy_fraction: float  # device busy time / duration
    padding_waste: float  # (padded - real tokens) / padded tokens, over all batches
    batches: int
    mean_batch_size: float
    dispatch_reasons: dict[str, int]
    zones: dict[int, int]  # decisions that dispatched a batch, per zone
    # Per request, indexed by request id (= position in the arrival list).
    arrival_s: tuple[float, ...] = field(repr=False)
    dispatch_s: tuple[float, ...] = field(repr=False)
    finish_s: tuple[float, ...] = field(repr=False)
    seq_len: tuple[int, ...] = field(repr=False)
    sla_ms: tuple[float, ...] = field(repr=False)
    outcome: tuple[int, ...] = field(repr=False)
    wall_s: float = field(default=0.0, compare=False)

    @property
    def completed(self) -> int:
        return self.met + self.missed

    def records(self) -> list[RequestRecord]:
        return [RequestRecord(i, self.arrival_s[i], self.dispatch_s[i], self.finish_s[i],
                              self.seq_len[i], self.sla_ms[i], OUTCOME_NAMES[self.outcome[i]])
                for i in range(self.arrivals)]


def device_ms(cost_model: CostModelConfig, lengths: Sequence[int], cost_mode: str = "padded",
              time_scale: float = 1.0) -> float:
    """What the emulated device takes for a batch with these lengths (ms)."""
    return formula_ms(cost_model, batch_shape(lengths, cost_mode)) * time_scale


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
    n = len(arrivals)
    times = [a.time_s for a in arrivals]
    if n and not times[0] >= 0.0:
        raise ValueError(f"arrival times must be >= 0 s (got {times[0]!r})")
    for i in range(1, n):
        if times[i] < times[i - 1]:
            raise ValueError(f"arrivals must be sorted by time_s (index {i}: "
                             f"{times[i]!r} < {times[i - 1]!r})")
    lengths = [a.seq_len for a in arrivals]
    slas = [a.sla_ms for a in arrivals]
    nan = math.nan
    dispatch = [nan] * n
    finish = [nan] * n
    outcome = [PENDING] * n
    rejected_reasons: dict[str, int] = {}
    reasons: dict[str, int] = {}
    zones: dict[int, int] = {}
    busy_bins: list[float] = []

    horizon_s = (times[-1] if n else 0.0) + drain_timeout_s
    heap: list = []
    seq = itertools.count()
    push, pop = heapq.heappush, heapq.heappop
    submit, tick = policy.submit, policy.tick
    batch_started, batch_finished = policy.batch_started, policy.batch_finished

    if n:
        push(heap, (times[0], ARRIVAL, next(seq), 0))
        push(heap, (0.0, TICK, next(seq), 1))
    arrivals_done = n == 0
    busy = False
    wake_gen = 0
    pending_wake_s = None
    n_batches = 0
    batched_requests = 0
    padded_tokens = 0
    real_tokens = 0
    busy_total = 0.0
    last_finish_s = times[-1] if n else 0.0

    def reject(req: QueuedRequest, reason: str, now_s: float) -> None:
        rid = req.request_id
        if outcome[rid] == PENDING:
            outcome[rid] = REJECTED
            finish[rid] = now_s
            rejected_reasons[str(reason)] = rejected_reasons.get(str(reason), 0) + 1

    while heap:
        now, kind, _, payload = pop(heap)
        if kind == ARRIVAL:
            i = payload
            if i + 1 < n:
                push(heap, (times[i + 1], ARRIVAL, next(seq), i + 1))
            else:
                arrivals_done = True
            try:
                submit(QueuedRequest(i, lengths[i], times[i], slas[i]), now)
            except QueueFull:
                outcome[i] = REJECTED
                finish[i] = now
                reason = RejectReason.QUEUE_FULL
                rejected_reasons[str(reason)] = rejected_reasons.get(str(reason), 0) + 1
        elif kind == COMPLETION:
            batch, started = payload
            busy = False
            last_finish_s = now
            for req in batch:
                rid = req.request_id
                finish[rid] = now
                outcome[rid] = MET if (now - req.arrival_s) * 1000.0 <= req.sla_ms + _SLA_EPS_MS \
                    else MISSED
            batch_finished(batch, started, now)
        elif kind == TICK:
            tick(now)
            nxt = payload * control_period_s
            if nxt <= horizon_s and not (arrivals_done and not busy and policy.queue_depth == 0):
                push(heap, (nxt, TICK, next(seq), payload + 1))
        else:  # WAKE
            if payload != wake_gen:
                continue  # stale: superseded by a later decision
            pending_wake_s = None
        # Decide once per instant, after every event at this time (simultaneous arrivals
        # batch together), and only while the device is free and work is queued.
        if busy or (heap and heap[0][0] <= now) or not policy.queue_depth:
            continue

        # The device is free: ask the policy (policy.decide re-asks while a flush only sheds).
        decision = decide(policy, now, arrivals_done)
        for req, reason in decision.rejected:
            reject(req, reason, now)
        batch = decision.batch
        if batch:
            busy = True
            wake_gen += 1
            pending_wake_s = None
            shape = batch_shape([r.seq_len for r in batch], cost_mode)
            duration = formula_ms(cost_model, shape) * time_scale / 1000.0
            for req in batch:
                dispatch[req.request_id] = now
            batch_started(batch, now)
            end = now + duration
            push(heap, (end, COMPLETION, next(seq), (batch, now)))
            n_batches += 1
            batched_requests += shape.batch_size
            padded_tokens += shape.padded_tokens
            real_tokens += shape.real_tokens
            busy_total += duration
            r, z = str(decision.reason), int(decision.zone)  # plain keys in the result
            reasons[r] = reasons.get(r, 0) + 1
            zones[z] = zones.get(z, 0) + 1
            _add_busy(busy_bins, now, end, duration)
            continue
        wake_at = wake_time(decision, now)
        if wake_at is not None and wake_at != pending_wake_s and wake_at <= horizon_s:
            wake_gen += 1
            pending_wake_s = wake_at
            push(heap, (wake_at, WAKE, next(seq), wake_gen))

    for rid in range(n):
        if outcome[rid] == PENDING:
            outcome[rid] = REJECTED
            reason = RejectReason.UNFINISHED
            rejected_reasons[str(reason)] = rejected_reasons.get(str(reason), 0) + 1

    wall = (wall_clock() - started_wall) if wall_clock is not None else 0.0
    return _summarise(
        name if name is not None else type(policy).__name__, times, lengths, slas, dispatch,
        finish, outcome, rejected_reasons, reasons, zones, busy_bins, last_finish_s,
        n_batches, batched_requests, padded_tokens, real_tokens, busy_total, wall)


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


def _summarise(name, times, lengths, slas, dispatch, finish, outcome, rejected_reasons,
               reasons, zones, busy_bins, duration, n_batches, batched_requests,
               padded_tokens, real_tokens, busy_total, wall) -> SimResult:
    n = len(times)
    met = outcome.count(MET)
    missed = outcome.count(MISSED)
    rejected = outcome.count(REJECTED)
    latencies_by_class: dict[float, list[float]] = {}
    counts: dict[float, list[int]] = {}
    all_latencies = []
    for i in range(n):
        sla = slas[i]
        c = counts.get(sla)
        if c is None:
            c = counts[sla] = [0, 0, 0, 0]
            latencies_by_class[sla] = []
        o = outcome[i]
        c[o] += 1
        if o == MET or o == MISSED:
            lat = (finish[i] - times[i]) * 1000.0
            all_latencies.append(lat)
            latencies_by_class[sla].append(lat)
    all_latencies.sort()
    per_class = {}
    for sla in sorted(counts):
        c = counts[sla]
        lat = sorted(latencies_by_class[sla])
        total = sum(c)
        per_class[sla] = ClassStats(sla, total, c[MET], c[MISSED], c[REJECTED],
                                    c[MET] / total if total else math.nan,
                                    percentile(lat, 50), percentile(lat, 99))

    # Per-second busy fraction over the whole seconds of the run (or the one partial
    # second of a shorter run).
    whole = int(duration)
    if whole >= 1:
        fractions = [min(b, 1.0) for b in busy_bins[:whole]]
        fractions += [0.0] * (whole - len(fractions))
    elif duration > 0:
        fractions = [min(sum(busy_bins) / duration, 1.0)]
    else:
        fractions = []
    if fractions:
        mean_f = sum(fractions) / len(fractions)
        fluctuation = math.sqrt(sum((f - mean_f) ** 2 for f in fractions) / len(fractions))
    else:
        fluctuation = math.nan

    return SimResult(
        policy=name,
        arrivals=n,
        met=met,
        missed=missed,
        rejected=rejected,
        rejected_reasons=dict(sorted(rejected_reasons.items())),
        duration_s=duration,
        throughput_rps=(met + missed) / duration if duration > 0 else 0.0,
        goodput_rps=met / duration if duration > 0 else 0.0,
        sla_attainment=met / n if n else math.nan,
        p50_ms=percentile(all_latencies, 50),
        p99_ms=percentile(all_latencies, 99),
        per_class=per_class,
        utilization_fluctuation=fluctuation,
        mean_busy_fraction=busy_total / duration if duration > 0 else 0.0,
        padding_waste=(padded_tokens - real_tokens) / padded_tokens if padded_tokens else 0.0,
        batches=n_batches,
        mean_batch_size=batched_requests / n_batches if n_batches else 0.0,
        dispatch_reasons=dict(sorted(reasons.items())),
        zones=dict(sorted(zones.items())),
        arrival_s=tuple(times),
        dispatch_s=tuple(dispatch),
        finish_s=tuple(finish),
        seq_len=tuple(lengths),
        sla_ms=tuple(slas),
        outcome=tuple(outcome),
        wall_s=wall,
    )


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
