"""The design's two clocks.

The *physical* clock is the caller's monotonic time (seconds); deadlines live on it.
The *logical* clock runs at ``rate`` times the physical one, where

    rate = base_window / adjusted_window

so a batching window of a fixed ``base_window`` of *logical* time lasts exactly the
elastic window of physical time, and when load changes while a request waits, the part
of its window still to come stretches or shrinks at once.
"""

from __future__ import annotations

MAX_RATE = 1e6  # a zero-length window: logical time all but jumps


class LogicalClock:
    def __init__(self, now_s: float = 0.0):
        self._physical_s = now_s
        self._logical_s = now_s
        self.rate = 1.0

    def now(self, now_s: float) -> float:
        """Logical time at physical ``now_s`` (never goes backwards)."""
        if now_s > self._physical_s:
            self._logical_s += (now_s - self._physical_s) * self.rate
            self._physical_s = now_s
        return self._logical_s

    def set_rate(self, now_s: float, rate: float) -> None:
        self.now(now_s)
        self.rate = min(max(rate, 1e-6), MAX_RATE)

    def physical_at(self, logical_s: float, now_s: float) -> float:
        """Physical time at which the logical clock reaches ``logical_s`` at the current rate."""
        ahead = logical_s - self.now(now_s)
        return now_s if ahead <= 0 else now_s + ahead / self.rate
