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

    Times and values sit in two preallocated numpy rings of ``max_samples`` (the oldest
    overwritten first), so a batch's latencies are one slice written, and nothing is
    allocated, kept or freed a sample: a deque of floats frees each sample, long after,
    from memory the caches no longer hold (results/batched_feedback/). The perception and
    decision layers read the statistics every period. Samples leave the window oldest
    first, up to the first one still in it (they are kept in the order they were added)."""

    def __init__(self, window_s: float, max_samples: int = 4096):
        self.window_s = window_s
        self._cap = max_samples
        self._times = np.empty(max_samples)
        self._values = np.empty(max_samples)
        self._start = 0  # the oldest kept sample, counted from the first ever added
        self._end = 0  # samples ever added; the ring holds [max(start, end - cap), end)

    def add(self, now_s: float, latency_ms: float) -> None:
        i = self._end % self._cap
        self._times[i] = now_s
        self._values[i] = latency_ms
        self._end += 1

    def add_many(self, now_s: float, latencies_ms: Sequence[float]) -> None:
        """``add`` for each of ``latencies_ms``, all finished at ``now_s``."""
        n, cap = len(latencies_ms), self._cap
        if n > cap:  # only the last ``cap`` stay, as ``add`` one by one would leave
            self._end += n - cap
            latencies_ms, n = latencies_ms[n - cap:], cap
        i = self._end % cap
        first = min(n, cap - i)  # up to the ring's end, the rest from its start
        self._times[i:i + first] = now_s
        self._values[i:i + first] = latencies_ms[:first]
        if first < n:
            self._times[:n - first] = now_s
            self._values[:n - first] = latencies_ms[first:]
        self._end += n

    def _oldest(self) -> int:
        """The oldest kept sample, counted from the first ever added."""
        return max(self._start, self._end - self._cap)

    def _kept(self, ring: np.ndarray) -> np.ndarray:
        """The kept samples of ``ring``, oldest first (a copy where they wrap)."""
        start = self._oldest()
        i, j = start % self._cap, self._end % self._cap
        if self._end == start:
            return ring[:0]
        if i < j:
            return ring[i:j]
        return np.concatenate((ring[i:], ring[:j]))

    def _prune(self, now_s: float) -> None:
        horizon = now_s - self.window_s
        oldest = self._oldest()
        if oldest == self._end or self._times[oldest % self._cap] > horizon:
            return  # nothing leaves (a perception reads ``count``, then ``percentile``)
        times = self._kept(self._times)
        late = times > horizon
        # Oldest first, up to the first sample still in the window.
        kept_from = int(late.argmax()) if late.size and late.any() else late.size
        self._start = self._end - times.size + kept_from

    def _array(self, now_s: float) -> np.ndarray:
        self._prune(now_s)
        return self._kept(self._values)

    def count(self, now_s: float) -> int:
        self._prune(now_s)
        return self._end - self._oldest()

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
