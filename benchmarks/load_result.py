"""What a load run gives back (``LoadResult``): every request's record, and the figures
the benchmarks read from them (per-second buckets, latencies, lag, errors).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from operator_tools.records import (CLIENT_TIMEOUT, LOST, OK, SEND_FAILED, RequestRecord,
                                    timed_record)
from scheduler_core.stats import percentile


@dataclass
class Bucket:
    """Requests whose SCHEDULED time fell in [start_s, start_s + width)."""

    start_s: float
    sent: int = 0
    ok: int = 0
    errors: int = 0
    lost: int = 0
    p50_ms: float = math.nan  # of ok responses
    p99_ms: float = math.nan
    error_p99_ms: float = math.nan


@dataclass
class LoadResult:
    model: str
    url: str
    planned: int
    duration_s: float  # schedule length
    records: list[RequestRecord] = field(repr=False)
    bucket_s: float = 1.0
    drain_s: float = 0.0  # how long the wait for outstanding responses took
    duplicates: int = 0  # answers beyond the first to one request (must stay 0)
    client_timeout_s: float | None = None  # DEADLINE_EXCEEDED then means the client gave up

    # -- aggregates ------------------------------------------------------------------------
    @property
    def sent(self) -> int:
        return sum(1 for r in self.records if r.sent_s is not None and r.outcome != SEND_FAILED)

    @property
    def ok(self) -> int:
        return sum(1 for r in self.records if r.outcome == OK)

    @property
    def errors_by_code(self) -> dict[str, int]:
        return dict(sorted(Counter(r.outcome for r in self.records
                                   if r.outcome not in (OK, LOST)).items()))

    @property
    def client_timeouts(self) -> int:
        """Requests the client itself gave up on (``client_timeout_s``): no server answer."""
        if self.client_timeout_s is None:
            return 0
        return sum(1 for r in self.records if r.outcome == CLIENT_TIMEOUT)

    @property
    def errors(self) -> int:
        """Error answers from the server (client timeouts and send failures excluded)."""
        return (sum(n for code, n in self.errors_by_code.items() if code != SEND_FAILED)
                - self.client_timeouts)

    @property
    def responses(self) -> int:
        """ok + errors: every request that got an answer from the server."""
        return self.ok + self.errors

    @property
    def lost(self) -> int:
        return sum(1 for r in self.records if r.outcome == LOST)

    def ok_latencies_ms(self) -> list[float]:
        return [r.latency_ms for r in self.records if r.outcome == OK]

    def error_latencies_ms(self, code: str | None = None) -> list[float]:
        return [r.latency_ms for r in self.records
                if r.outcome not in (OK, LOST, SEND_FAILED) and r.latency_ms is not None
                and (code is None or r.outcome == code)]

    @property
    def p50_ms(self) -> float:
        return percentile(self.ok_latencies_ms(), 50)

    @property
    def p99_ms(self) -> float:
        return percentile(self.ok_latencies_ms(), 99)

    @property
    def error_p99_ms(self) -> float:
        return percentile(self.error_latencies_ms(), 99)

    def lags_ms(self) -> list[float]:
        return [(r.sent_s - r.scheduled_s) * 1000.0 for r in self.records
                if r.sent_s is not None]

    @property
    def send_lag_mean_ms(self) -> float:
        lags = self.lags_ms()
        return float(np.mean(lags)) if lags else math.nan

    @property
    def send_lag_p99_ms(self) -> float:
        return percentile(self.lags_ms(), 99)

    @property
    def send_lag_max_ms(self) -> float:
        lags = self.lags_ms()
        return max(lags) if lags else math.nan

    @property
    def offered_rps(self) -> float:
        return self.planned / self.duration_s if self.duration_s > 0 else math.nan

    def messages(self, code: str, limit: int = 3) -> list[str]:
        """Distinct error messages of one outcome (the first ``limit``)."""
        seen: list[str] = []
        for r in self.records:
            if r.outcome == code and r.message not in seen:
                seen.append(r.message)
                if len(seen) >= limit:
                    break
        return seen

    def window(self, start_s: float, end_s: float) -> "LoadResult":
        """The requests scheduled in [start_s, end_s) as a result of their own, with times
        measured from ``start_s``."""
        recs = [r for r in self.records if start_s <= r.scheduled_s < end_s]
        recs = [timed_record(r.scheduled_s - start_s,
                             None if r.sent_s is None else r.sent_s - start_s,
                             None if r.response_s is None else r.response_s - start_s,
                             r.outcome, r.message, r.seq_len, r.sla_ms) for r in recs]
        return LoadResult(self.model, self.url, len(recs), end_s - start_s, recs,
                          self.bucket_s, self.drain_s, 0, self.client_timeout_s)

    def buckets(self, width_s: float | None = None) -> list[Bucket]:
        """Per-time-bucket counts and latencies (by scheduled time), for recovery analysis."""
        width = width_s or self.bucket_s
        n = max(1, int(math.ceil(self.duration_s / width - 1e-9)))
        oks: list[list[float]] = [[] for _ in range(n)]
        errs: list[list[float]] = [[] for _ in range(n)]
        out = [Bucket(i * width) for i in range(n)]
        for r in self.records:
            i = min(n - 1, max(0, int(r.scheduled_s // width)))
            b = out[i]
            b.sent += r.sent_s is not None
            if r.outcome == OK:
                b.ok += 1
                oks[i].append(r.latency_ms)
            elif r.outcome == LOST:
                b.lost += 1
            elif r.outcome != SEND_FAILED:
                b.errors += 1
                if r.latency_ms is not None:
                    errs[i].append(r.latency_ms)
        for b, o, e in zip(out, oks, errs):
            b.p50_ms, b.p99_ms = percentile(o, 50), percentile(o, 99)
            b.error_p99_ms = percentile(e, 99)
        return out

    def summary(self) -> str:
        return (f"{self.model}: planned {self.planned} over {self.duration_s:.1f} s "
                f"({self.offered_rps:.1f} req/s), sent {self.sent}, ok {self.ok}, "
                f"errors {self.errors_by_code or '{}'}"
                + (f" (DEADLINE_EXCEEDED: client timeout {self.client_timeout_s:g} s)"
                   if self.client_timeouts else "")
                + f", lost {self.lost}; ok p50 "
                f"{self.p50_ms:.1f} ms p99 {self.p99_ms:.1f} ms; error p99 "
                f"{self.error_p99_ms:.1f} ms; send lag mean {self.send_lag_mean_ms:.2f} ms "
                f"p99 {self.send_lag_p99_ms:.2f} ms max {self.send_lag_max_ms:.1f} ms; "
                f"drain {self.drain_s:.1f} s")
