"""Perception primitives: measured device busy fraction, arrival rate and latency variation.

Pure and clock-injected: every method takes ``now_s`` (seconds on the caller's monotonic
clock) instead of reading a clock.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Sequence

import numpy as np

from .stats import nearest_rank_index


def coefficient_of_variation(values) -> float:
    """Sample standard deviation over mean (0 for fewer than two values or a mean <= 0)."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(var) / mean


class BusyTracker:
    """Fraction of the last ``window_s`` seconds during which the executor was busy.

    Where there is no NVML this *is* the utilisation signal: the share of wall time the
    device (or the in-process executor) spent running batches.
    """

    def __init__(self, window_s: float):
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self.window_s = window_s
        self._intervals: deque[tuple[float, float]] = deque()
        self._busy_since: float | None = None

    def start(self, now_s: float) -> None:
        self._busy_since = now_s

    def stop(self, now_s: float) -> None:
        if self._busy_since is not None:
            self._intervals.append((self._busy_since, now_s))
            self._busy_since = None
        self._expire(now_s)

    def record(self, start_s: float, end_s: float) -> None:
        """Add one finished busy interval."""
        self._intervals.append((start_s, end_s))
        self._expire(end_s)

    def _expire(self, now_s: float) -> None:
        horizon = now_s - self.window_s
        while self._intervals and self._intervals[0][1] <= horizon:
            self._intervals.popleft()

    def utilization(self, now_s: float) -> float:
        """Busy fraction in [0, 1] over (now - window, now]."""
        self._expire(now_s)
        horizon = now_s - self.window_s
        busy = sum(min(end, now_s) - max(start, horizon) for start, end in self._intervals
                   if end > horizon)
        if self._busy_since is not None:
            busy += now_s - max(self._busy_since, horizon)
        return min(max(busy / self.window_s, 0.0), 1.0)


class ArrivalRate:
    """Requests per second that arrived within the last ``window_s`` seconds.

    A plain count over a sliding window: exact, and cheap (one append per arrival, each
    time dropped once). Over the first ``window_s`` of a run it under-reads the rate, which
    errs towards dispatching at once (see ``Scheduler._waiting_pays``).
    """

    def __init__(self, window_s: float):
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self.window_s = window_s
        self._times: deque[float] = deque()

    def add(self, now_s: float, count: int = 1) -> None:
        if count == 1:
            self._times.append(now_s)
        else:
            self._times.extend([now_s] * count)

    def rate_rps(self, now_s: float) -> float:
        """Arrivals in (now - window, now], per second."""
        horizon = now_s - self.window_s
        times = self._times
        while times and times[0] <= horizon:
            times.popleft()
        return len(times) / self.window_s


class LatencyWindow:
    """Recent request latencies (ms) within a time window; gives P99 and the coefficient
    of variation (std / mean), the design's measure of delay variation.

    Times and values sit in two bounded deques, so the statistics read the values straight
    into numpy (one pass, no per-sample tuples): the perception and decision layers ask
    for them every period, with up to ``max_samples`` values in the window."""

    def __init__(self, window_s: float, max_samples: int = 4096):
        self.window_s = window_s
        self._times: deque[float] = deque(maxlen=max_samples)
        self._values: deque[float] = deque(maxlen=max_samples)

    def add(self, now_s: float, latency_ms: float) -> None:
        self._times.append(now_s)
        self._values.append(latency_ms)

    def add_many(self, now_s: float, latencies_ms: Sequence[float]) -> None:
        """``add`` for each of ``latencies_ms``, all finished at ``now_s``."""
        self._times.extend([now_s] * len(latencies_ms))
        self._values.extend(latencies_ms)

    def _prune(self, now_s: float) -> None:
        horizon = now_s - self.window_s
        times, values = self._times, self._values
        while times and times[0] <= horizon:
            times.popleft()
            values.popleft()

    def _array(self, now_s: float) -> np.ndarray:
        self._prune(now_s)
        return np.fromiter(self._values, dtype=float, count=len(self._values))

    def count(self, now_s: float) -> int:
        self._prune(now_s)
        return len(self._values)

    def coefficient_of_variation(self, now_s: float) -> float:
        """Sample standard deviation over mean (0 for fewer than two values or a mean <= 0)."""
        values = self._array(now_s)
        if values.size < 2:
            return 0.0
        mean = float(values.mean())
        if mean <= 0:
            return 0.0
        return math.sqrt(float(values.var(ddof=1))) / mean

    def percentile(self, now_s: float, q: float) -> float:
        values = self._array(now_s)
        if not values.size:
            return 0.0
        rank = nearest_rank_index(values.size, q)
        return float(np.partition(values, rank)[rank])
