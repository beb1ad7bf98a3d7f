"""Several controllers on one load: N instances behind a round-robin router, sharing one
emulated device, each with its own queue and controller (``instance_group`` count N on one
GPU). What they share is what couples them: the device (a batch waits for the batches of
the other instances) and the device's utilisation, which each reads as NVML reports it.

``simulate_fleet`` runs the arrivals through them and samples every instance's elastic
window and zone at a fixed period, so the coupling can be measured: the variance of the
aggregate window (the sum of the N windows) and the zone flips per minute.

Discrete-event and deterministic like ``simulator``: events at one instant are handled in
the order pushed, and every policy decides only when its own batch is not on the device.
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

from scheduler_core.cost_model import batch_shape, cost_ms
from scheduler_core.engine import Engine
from scheduler_core.profile import CostModelConfig
from scheduler_core.request import QueuedRequest

ARRIVAL, DONE, TICK, WAKE = 0, 1, 2, 3
UTILIZATION_WINDOW_S = 1.0  # the shared device's busy fraction over this much (NVML-like)
DRAIN_S = 5.0  # the run goes on this long after the last arrival, for the last answers


@dataclass(frozen=True)
class FleetResult:
    instances: int
    sent: int
    met: int  # met / missed: answered, of the requests that arrived after the warm-up
    missed: int
    warmup_answered: int  # answered, of those that arrived during the warm-up (not counted)
    rejected: int  # refused, the whole run
    duration_s: float
    aggregate_window_variance: float  # variance over time of the sum of the N windows (ms^2)
    coupling: float  # see ``oscillation``: 1 independent windows, N lockstep
    zone_flips_per_minute: float  # summed over the instances
    zone_flips_in_step: float  # share of the flips another instance made alike (oscillation)
    samples: int

    @property
    def goodput_rps(self) -> float:
        return self.met / self.duration_s if self.duration_s > 0 else 0.0


def simulate_fleet(policies: Sequence[Any], arrivals: Sequence[Any],
                   cost_model: CostModelConfig, cost_mode: str = "padded",
                   time_scale: float = 1.0, *, tick_s: float = 0.005,
                   sample_s: float = 0.1, warmup_s: float = 0.0) -> FleetResult:
    """Route ``arrivals`` (``time_s``, ``seq_len``, ``sla_ms``; sorted) round-robin over
    ``policies`` (one ``Scheduler`` each), ticking each every ``tick_s`` and sampling the
    windows and zones every ``sample_s`` after ``warmup_s``."""
    return _Fleet(policies, arrivals, cost_model, cost_mode, time_scale, warmup_s).run(
        tick_s, sample_s)


class _Fleet:
    def __init__(self, policies, arrivals, cost_model, cost_mode, time_scale, warmup_s):
        self.policies, self.arrivals = list(policies), list(arrivals)
        self.engines = [Engine(p) for p in self.policies]
        self.cost_model, self.cost_mode, self.time_scale = cost_model, cost_mode, time_scale
        n = len(self.policies)
        self.on_device = [False] * n  # instance i's batch is queued on or running on it
        self.device_queue: deque = deque()
        self.device_busy = False
        self.busy_intervals: deque = deque()  # (start, end) on the device, recent ones
        self.met = self.missed = self.rejected = self.warmup_answered = 0
        self.warmup_s = warmup_s
        self.wake_gen = [0] * n
        self.windows: list[list[float]] = [[] for _ in range(n)]
        self.zones: list[list[int]] = [[] for _ in range(n)]

    def run(self, tick_s: float, sample_s: float) -> FleetResult:
        warmup_s = self.warmup_s
        heap: list = []
        seq = itertools.count()
        push = heapq.heappush
        for k, a in enumerate(self.arrivals):
            push(heap, (a.time_s, ARRIVAL, next(seq), k))
        last_arrival_s = self.arrivals[-1].time_s if self.arrivals else 0.0
        end_s = last_arrival_s + DRAIN_S
        push(heap, (0.0, TICK, next(seq), 0))
        next_sample = warmup_s
        while heap:
            now, kind, _, payload = heapq.heappop(heap)
            if kind == ARRIVAL:
                self._arrive(payload, now)
            elif kind == DONE:
                self._done(payload, now, heap, seq)
            elif kind == TICK:
                self._tick(now)
                # Sampled while the load lasts: the drain after it is not oscillation.
                if next_sample - 1e-12 <= now <= last_arrival_s:
                    self._sample(now)
                    next_sample += sample_s
                if now + tick_s <= end_s:
                    push(heap, (now + tick_s, TICK, next(seq), 0))
            elif payload[1] != self.wake_gen[payload[0]]:  # WAKE, superseded
                continue
            if heap and heap[0][0] <= now:
                continue  # decide once per instant, after all its events
            for i in range(len(self.policies)):
                self._maybe_dispatch(i, now, heap, seq)
        for engine in self.engines:  # whatever is left counts as refused
            self.rejected += len(engine.drain())
        duration = max(last_arrival_s - warmup_s, 1e-9)
        osc = oscillation(self.windows, self.zones, sample_s)
        return FleetResult(len(self.policies), len(self.arrivals), self.met, self.missed,
                           self.warmup_answered, self.rejected, duration,
                           osc["aggregate_variance"], osc["coupling"], osc["flips_per_minute"],
                           osc["flips_in_step"], osc["samples"])

    def _arrive(self, k: int, now: float) -> None:
        a = self.arrivals[k]
        self.rejected += len(self.engines[k % len(self.engines)].submit(
            [QueuedRequest(k, a.seq_len, now, a.sla_ms)], now))

    def _utilization(self, now: float) -> float:
        start = now - UTILIZATION_WINDOW_S
        while self.busy_intervals and self.busy_intervals[0][1] < start:
            self.busy_intervals.popleft()
        busy = sum(min(e, now) - max(s, start) for s, e in self.busy_intervals if s < now)
        return min(1.0, max(0.0, busy / UTILIZATION_WINDOW_S))

    def _tick(self, now: float) -> None:
        util = self._utilization(now)
        for policy, engine in zip(self.policies, self.engines):
            policy.set_external_utilization(util, now, "nvml")
            engine.tick(now)

    def _sample(self, now: float) -> None:
        for i, policy in enumerate(self.policies):
            stats = policy.stats(now)
            self.windows[i].append(stats.window_ms)
            self.zones[i].append(int(stats.zone))

    def _maybe_dispatch(self, i: int, now: float, heap, seq) -> None:
        engine = self.engines[i]
        if self.on_device[i] or not engine.queue_depth:
            return
        step = engine.step(now)
        self.rejected += len(step.refused)
        if step.batch:
            shape = batch_shape([r.seq_len for r in step.batch], self.cost_mode)
            duration = cost_ms(self.cost_model, shape) * self.time_scale / 1000.0
            engine.started(step.batch, now)
            self.on_device[i] = True
            self.device_queue.append((i, step.batch, now, duration))
            self._start_device(now, heap, seq)
            return
        wake_at = step.wake_at_s
        if wake_at is not None:
            self.wake_gen[i] += 1
            heapq.heappush(heap, (wake_at, WAKE, next(seq), (i, self.wake_gen[i])))

    def _start_device(self, now: float, heap, seq) -> None:
        if self.device_busy or not self.device_queue:
            return
        i, batch, submitted, duration = self.device_queue.popleft()
        self.device_busy = True
        self.busy_intervals.append((now, now + duration))
        heapq.heappush(heap, (now + duration, DONE, next(seq), (i, batch, submitted)))

    def _done(self, payload, now: float, heap, seq) -> None:
        i, batch, submitted = payload
        self.device_busy = False
        self.on_device[i] = False
        for req in batch:
            if req.arrival_s < self.warmup_s:
                self.warmup_answered += 1  # goodput counts the sampled part, like the windows
                continue
            if (now - req.arrival_s) * 1000.0 <= req.sla_ms + 1e-9:
                self.met += 1
            else:
                self.missed += 1
        self.engines[i].finished(batch, submitted, now)
        self._start_device(now, heap, seq)


def oscillation(windows: Sequence[Sequence[float]], zones: Sequence[Sequence[int]],
                sample_s: float, duration_s: float | None = None) -> dict[str, float]:
    """How N controllers moved, from their windows (ms) and zones sampled every
    ``sample_s``: samples; aggregate_variance (of the sum of the windows over time, ms^2);
    coupling (that variance over N x the mean variance of one window: 1 when the windows
    move independently, N in lockstep); flips_per_minute (zone changes, all controllers);
    flips_in_step (the share of those changes that another controller made too, from the
    same zone to the same zone between the same two samples: 0 when no two switch
    together); time_out_of_safe (share of the samples outside the safe zone).
    ``duration_s``: the time the samples span, where it is not their count x ``sample_s``
    (a live sampler that fell behind)."""
    n = min((len(w) for w in windows), default=0)
    windows = [list(w[:n]) for w in windows]
    zones = [list(z[:n]) for z in zones]
    aggregate = statistics.pvariance([sum(x) for x in zip(*windows)]) if n > 1 else math.nan
    one = statistics.mean(statistics.pvariance(w) for w in windows) if n > 1 else 0.0
    changes = [{(k, z[k - 1], z[k]) for k in range(1, n) if z[k] != z[k - 1]} for z in zones]
    flips = sum(len(c) for c in changes)
    in_step = sum(1 for i, c in enumerate(changes) for change in c
                  if any(change in other for j, other in enumerate(changes) if j != i))
    minutes = (n * sample_s if duration_s is None else duration_s) / 60.0
    return {"samples": n, "aggregate_variance": aggregate,
            "coupling": aggregate / (len(windows) * one) if one else math.nan,
            "flips_per_minute": flips / minutes if minutes else 0.0,
            "flips_in_step": in_step / flips if flips else 0.0,
            "time_out_of_safe": sum(z > 0 for zs in zones for z in zs) / max(1, n * len(zones))}
