"""``make bench``: the figures of one benchmark segment, and the choices made from them.

Pure functions over what a segment measured (``benchmarks.loadgen.LoadResult``
records, per-second busy fractions, CPU seconds) or what the simulator predicted, so the
report's arithmetic is unit-tested without a server. ``scripts/bench.py`` runs the
segments and writes the report.

Definitions used throughout the report
    goodput       requests answered OK within their own SLA, per second of the schedule
    attainment    those requests / requests sent (a refusal, a client timeout or a late
                  answer is a miss)
    knee          the highest load of a ladder at which attainment is >= 99 %, with every
                  lower rung also >= 99 % (a ladder is only as fine as its rungs)
    fluctuation   standard deviation of the per-second busy fraction inside the segment
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Iterable, Sequence

from scheduler_core.stats import percentile

from operator_tools.records import OK

KNEE_ATTAINMENT = 0.99


@dataclass(frozen=True)
class NativeSetting:
    """One configuration of Triton's dynamic batcher."""

    max_queue_delay_us: int
    preferred_batch_sizes: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        pbs = ",".join(map(str, self.preferred_batch_sizes)) or "none"
        return f"delay {self.max_queue_delay_us} us, preferred [{pbs}]"

    def dynamic_batching(self) -> dict:
        """The ``dynamic_batching`` section of a model config (Triton's JSON form)."""
        out: dict[str, Any] = {"max_queue_delay_microseconds": int(self.max_queue_delay_us)}
        if self.preferred_batch_sizes:
            out["preferred_batch_size"] = list(self.preferred_batch_sizes)
        return out


def native_sweep(delays_us: Sequence[int], preferred: Sequence[tuple[int, ...]]
                 ) -> list[NativeSetting]:
    """Every delay x preferred-size option, without the duplicates Triton treats alike: with
    no queue delay a batch goes as soon as the instance is free, whatever the preferred
    sizes, so delay 0 appears once."""
    out = []
    for delay in delays_us:
        for pbs in preferred:
            if delay == 0 and pbs:
                continue
            out.append(NativeSetting(int(delay), tuple(pbs)))
    return out


@dataclass
class SegmentStats:
    """What one model did under one schedule (measured or simulated)."""

    role: str  # "explicit" or "native"
    source: str  # "measured" or "simulated"
    duration_s: float  # the schedule, or until the last answer if later (s)
    sent: int
    ok: int
    met: int
    errors: dict[str, int]
    lost: int
    goodput_rps: float
    attainment: float
    p50_ms: float  # over OK answers
    p99_ms: float
    per_class: dict[float, tuple[float, float, float]]  # SLA -> (p50, p99, attainment)
    send_lag_p99_ms: float = math.nan
    busy: list[float] = field(default_factory=list)  # per-second busy fractions
    padding_waste: float | None = None
    stub_cpu_us_per_request: float | None = None
    server_cpu_us_per_request: float | None = None

    @property
    def fluctuation(self) -> float:
        return statistics.pstdev(self.busy) if len(self.busy) >= 2 else math.nan

    @property
    def mean_busy(self) -> float:
        return statistics.fmean(self.busy) if self.busy else math.nan

    def class_p99(self, sla_ms: float) -> float:
        return self.per_class.get(sla_ms, (math.nan, math.nan, math.nan))[1]

    def to_dict(self) -> dict:
        out = asdict(self)
        out["per_class"] = {str(k): v for k, v in self.per_class.items()}
        out["fluctuation"] = self.fluctuation
        return out


def _class_table(slas: Sequence[float], latencies: Sequence[float | None],
                 met: Sequence[bool]) -> dict[float, tuple[float, float, float]]:
    out = {}
    for sla in sorted(set(slas)):
        idx = [i for i, s in enumerate(slas) if s == sla]
        lat = [latencies[i] for i in idx if latencies[i] is not None]
        out[sla] = (percentile(lat, 50), percentile(lat, 99),
                    sum(1 for i in idx if met[i]) / len(idx))
    return out


def measured_stats(role: str, result, busy: Sequence[float] = (),
                   padding_waste: float | None = None, stub_cpu_us: float | None = None,
                   server_cpu_us: float | None = None) -> SegmentStats:
    """Figures of a ``LoadResult`` (e.g. the measured window of one, after a warm-up).
    Each record's ``sla_ms`` is the SLA of its arrival (also for a model that was not sent
    it, so native requests are judged alike). CPU figures are per request, in us."""
    recs = result.records
    slas = [float(r.sla_ms) if r.sla_ms is not None else math.inf for r in recs]
    ok_lat = [r.latency_ms if r.outcome == OK else None for r in recs]
    met = [lat is not None and lat <= sla for lat, sla in zip(ok_lat, slas)]
    errors: dict[str, int] = {}
    for r in recs:
        if r.outcome != OK:
            errors[r.outcome] = errors.get(r.outcome, 0) + 1
    n_ok = sum(1 for r in recs if r.outcome == OK)
    oks = [x for x in ok_lat if x is not None]
    # Goodput over the schedule or until the last server answer, whichever is later: work
    # a model finishes after the last send took that long (a client timeout is no answer).
    answers = [r.response_s for r in recs if r.response_s is not None
               and r.outcome not in ("DEADLINE_EXCEEDED", "LOST")]
    span = max([result.duration_s, *answers])
    duration = max(span, 1e-9)
    lags = [(r.sent_s - r.scheduled_s) * 1000.0 for r in recs if r.sent_s is not None]
    return SegmentStats(
        role=role, source="measured", duration_s=span, sent=len(recs),
        ok=n_ok, met=sum(met), errors=errors, lost=errors.get("LOST", 0),
        goodput_rps=sum(met) / duration, attainment=sum(met) / max(len(recs), 1),
        p50_ms=percentile(oks, 50), p99_ms=percentile(oks, 99),
        per_class=_class_table(slas, ok_lat, met),
        send_lag_p99_ms=percentile(lags, 99), busy=list(busy), padding_waste=padding_waste,
        stub_cpu_us_per_request=stub_cpu_us, server_cpu_us_per_request=server_cpu_us)


def simulated_stats(role: str, sim, duration_s: float, start_s: float = 0.0) -> SegmentStats:
    """Figures of a ``simulation.simulator.SimResult`` on the same footing as a
    measured segment: the requests that arrived in [start_s, start_s + duration_s), goodput
    over that window or until their last completion, whichever is later."""
    from simulation.simulator import MET, MISSED

    end_s = start_s + duration_s
    idx = [i for i in range(sim.arrivals) if start_s <= sim.arrival_s[i] < end_s]
    n = len(idx)
    latencies = [(sim.finish_s[i] - sim.arrival_s[i]) * 1000.0
                 if sim.outcome[i] in (MET, MISSED) else None for i in idx]
    met = [sim.outcome[i] == MET for i in idx]
    done = [x for x in latencies if x is not None]
    rejected = n - len(done)
    errors = {"REJECTED": rejected} if rejected else {}
    finishes = [sim.finish_s[i] - start_s for i in idx if sim.outcome[i] in (MET, MISSED)]
    duration_s = max([duration_s, *finishes])
    return SegmentStats(
        role=role, source="simulated", duration_s=duration_s, sent=n, ok=len(done),
        met=sum(met), errors=errors, lost=0, goodput_rps=sum(met) / max(duration_s, 1e-9),
        attainment=sum(met) / max(n, 1), p50_ms=percentile(done, 50),
        p99_ms=percentile(done, 99),
        per_class=_class_table([sim.sla_ms[i] for i in idx], latencies, met),
        busy=[], padding_waste=sim.padding_waste)


# -- choices made from the numbers -----------------------------------------------------------

# metric -> (getter, True when higher is better)
METRICS = {
    "goodput": (lambda s: s.goodput_rps, True),
    "attainment": (lambda s: s.attainment, True),
    "p50": (lambda s: s.p50_ms, False),
    "p99": (lambda s: s.p99_ms, False),
    "fluctuation": (lambda s: s.fluctuation, False),
}


def best_by(candidates: Iterable[tuple[Any, SegmentStats]], metric: str,
            getter=None, higher_better: bool | None = None):
    """The (key, stats) with the best value of ``metric`` (a name in METRICS, or a custom
    ``getter``); NaN values never win. None when no candidate has a value."""
    if getter is None:
        getter, higher_better = METRICS[metric]
    best = None
    for key, stats in candidates:
        value = getter(stats)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if best is None or (value > best[2] if higher_better else value < best[2]):
            best = (key, stats, value)
    return None if best is None else (best[0], best[1])


def knee(ladder: Sequence[tuple[float, float]], threshold: float = KNEE_ATTAINMENT
         ) -> tuple[float | None, float | None]:
    """(knee, first failing load) of a ladder of (load, attainment): the highest load whose
    attainment and every lower load's is >= ``threshold``; None when the lowest fails (or
    when no rung fails, for the second value)."""
    ok_load = None
    for load, attainment in sorted(ladder):
        if attainment >= threshold:
            ok_load = load
        else:
            return ok_load, load
    return ok_load, None


def ratio(a: float | None, b: float | None) -> float:
    """a / b, NaN when either is missing or b is 0."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return math.nan
    return a / b


def sustainable(stats: SegmentStats, offered_rps: float, p99_bound_ms: float) -> bool:
    """Whether the server kept up with a fixed-rate, no-SLA schedule: every request answered
    OK (at most 0.1 % otherwise), answers at the offered rate, and a bounded P99 (a queue
    that grows shows as a P99 that grows with the segment)."""
    if stats.sent == 0:
        return False
    return (stats.ok >= 0.999 * stats.sent and stats.ok / stats.duration_s >= 0.97 * offered_rps
            and stats.p99_ms <= p99_bound_ms)


def plain(obj: Any) -> Any:
    """``results`` as JSON-ready data: stats and settings as dicts, non-finite floats as
    None, keys as strings."""
    if isinstance(obj, SegmentStats):
        return plain(obj.to_dict())
    if isinstance(obj, NativeSetting):
        return {"label": obj.label, **plain(asdict(obj))}
    if is_dataclass(obj) and not isinstance(obj, type):  # e.g. hold_speed's Row
        return plain(asdict(obj))
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
