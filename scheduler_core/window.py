"""The elastic time window of the design (docs/design.md, section 4.2).

    adjusted_window = base_window * (1 + alpha * (1 - util)^2 - beta * delay_variance)

clamped to [min_window_ms, max_window_ms]. Low utilisation widens the window (there is
spare device time, so waiting buys bigger batches); high delay variation shrinks it
(waiting is what makes latency unstable).
"""

from __future__ import annotations

from dataclasses import dataclass

from .profile import SchedulerConfig


@dataclass(frozen=True)
class ElasticWindow:
    base_window_ms: float
    alpha: float
    beta: float
    min_window_ms: float
    max_window_ms: float

    @classmethod
    def from_config(cls, cfg: SchedulerConfig) -> "ElasticWindow":
        return cls(cfg.base_window_ms, cfg.alpha, cfg.beta, cfg.min_window_ms, cfg.max_window_ms)

    def adjusted_ms(self, utilization: float, delay_variance: float) -> float:
        """Window length in ms for utilisation in [0, 1] and the dimensionless delay
        variation (``Controller.delay_variation``: the P99's coefficient of variation)."""
        util = min(max(utilization, 0.0), 1.0)
        variance = max(delay_variance, 0.0)
        raw = self.base_window_ms * (1.0 + self.alpha * (1.0 - util) ** 2 - self.beta * variance)
        return min(max(raw, self.min_window_ms), self.max_window_ms)
