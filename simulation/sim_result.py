"""What one simulation measured (``SimResult``) and how the per-request columns are
summarised into it. Pure: no clock, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scheduler_core.stats import percentile

# Per-request outcomes.
PENDING, MET, MISSED, REJECTED = 0, 1, 2, 3
OUTCOME_NAMES = {PENDING: "pending", MET: "met", MISSED: "missed", REJECTED: "rejected"}


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


def _per_class(times, slas, finish, outcome) -> tuple[dict[float, ClassStats], list[float]]:
    """Outcome counts and latency percentiles per SLA class, and every completed request's
    latency (ms, sorted)."""
    latencies_by_class: dict[float, list[float]] = {}
    counts: dict[float, list[int]] = {}
    all_latencies = []
    for i in range(len(times)):
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

    return per_class, all_latencies


def _fluctuation(busy_bins: list[float], duration: float) -> float:
    """Standard deviation of the per-second busy fraction over the whole seconds of the run
    (or the one partial second of a shorter run); nan for an empty run."""
    whole = int(duration)
    if whole >= 1:
        fractions = [min(b, 1.0) for b in busy_bins[:whole]]
        fractions += [0.0] * (whole - len(fractions))
    elif duration > 0:
        fractions = [min(sum(busy_bins) / duration, 1.0)]
    else:
        fractions = []
    if not fractions:
        return math.nan
    mean_f = sum(fractions) / len(fractions)
    return math.sqrt(sum((f - mean_f) ** 2 for f in fractions) / len(fractions))


def summarise(name, times, lengths, slas, dispatch, finish, outcome, rejected_reasons,
               reasons, zones, busy_bins, duration, n_batches, batched_requests,
               padded_tokens, real_tokens, busy_total, wall) -> SimResult:
    n = len(times)
    met = outcome.count(MET)
    missed = outcome.count(MISSED)
    rejected = outcome.count(REJECTED)
    per_class, all_latencies = _per_class(times, slas, finish, outcome)
    fluctuation = _fluctuation(busy_bins, duration)
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
