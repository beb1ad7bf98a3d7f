"""Zone detection (decision layer): safe / no-man's land / danger, with hysteresis.

Each indicator (utilisation, queue depth, P99 coefficient of variation) becomes a
*pressure* in [0, 1]: 0 at or below its safe bound, 1 at or above its danger bound,
linear in between. The weighted mean of the pressures is the *score*.

* danger          score >= danger_zone_threshold
* no-man's land   "all" mode: every indicator past its safe bound (the design's rule:
                  the three enter together); "weighted" mode: score >= nml_score
* safe            otherwise

Entering a worse zone is immediate; leaving it needs the condition to be false by the
hysteresis margin for ``min_dwell_ms``, so the zone does not flap at a boundary. With
``period_jitter`` and a seeded ``rng``, each exit's dwell is drawn from ``min_dwell_ms x
(1 +/- period_jitter)``: controllers that entered a zone together (one load step) leave
it at different times.
Pre-warm: explicit control starts once utilisation reaches ``prewarm_utilization``
(the design: by the time the indicators are in the no-man's land it is too late), and
stops when it falls ``hysteresis`` below it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .contract import Zone
from .profile import ControlConfig

__all__ = ["Zone", "ZoneDetector", "ZoneReading", "pressure"]


@dataclass(frozen=True)
class ZoneReading:
    zone: Zone
    prewarmed: bool
    score: float
    pressures: tuple[float, float, float]  # utilisation, queue depth, P99 CV
    changed_at_s: float


def pressure(value: float, safe: float, danger: float) -> float:
    """Position of ``value`` between its safe (0) and danger (1) bounds, clamped."""
    return min(max((value - safe) / (danger - safe), 0.0), 1.0)


class ZoneDetector:
    def __init__(self, cfg: ControlConfig, rng: random.Random | None = None):
        """``rng``: this controller's draw of jittered exit dwells (none: every dwell is
        ``min_dwell_ms``)."""
        self.cfg = cfg
        self._rng = rng
        self._dwell_ms = cfg.min_dwell_ms
        weights = (cfg.weight_utilization, cfg.weight_queue_depth, cfg.weight_p99_cv)
        total = sum(weights)
        self._weights = tuple(w / total for w in weights)
        self.zone = Zone.SAFE
        self.prewarmed = False
        self.changed_at_s = float("-inf")
        self._calm_since_s: float | None = None  # when leaving the current zone became possible
        self.score = 0.0
        self.pressures = (0.0, 0.0, 0.0)

    def _raw_zone(self, positions: tuple[float, ...], score: float, margin: float) -> Zone:
        """The zone the indicators call for; ``margin`` > 0 relaxes every bound (used to
        decide whether the current zone still holds)."""
        cfg = self.cfg
        if score >= cfg.danger_zone_threshold - margin:
            return Zone.DANGER
        if cfg.entry_mode == "all":
            # ``positions`` are unclamped: > 0 means past the safe bound.
            past_safe = all(p > -margin for p in positions) if margin else all(p > 0 for p in positions)
            return Zone.NO_MANS_LAND if past_safe else Zone.SAFE
        return Zone.NO_MANS_LAND if score >= cfg.nml_score - margin else Zone.SAFE

    def update(self, now_s: float, utilization: float, queue_depth: float,
               p99_cv: float) -> ZoneReading:
        cfg = self.cfg
        values = (utilization, queue_depth, p99_cv)
        bounds = ((cfg.utilization_safe, cfg.utilization_danger),
                  (cfg.queue_depth_safe, cfg.queue_depth_danger),
                  (cfg.p99_cv_safe, cfg.p99_cv_danger))
        positions = tuple((v - s) / (d - s) for v, (s, d) in zip(values, bounds))
        pressures = tuple(min(max(p, 0.0), 1.0) for p in positions)
        score = sum(w * p for w, p in zip(self._weights, pressures))
        self.score, self.pressures = score, pressures

        entered = self._raw_zone(positions, score, 0.0)
        if entered > self.zone:
            self._set(entered, now_s)
        elif entered < self.zone:
            # Leave only when the worse zone no longer holds even with the margin,
            # and that has lasted min_dwell_ms.
            held = self._raw_zone(positions, score, cfg.hysteresis)
            if held >= self.zone:
                self._calm_since_s = None
            else:
                if self._calm_since_s is None:
                    self._calm_since_s = now_s
                    self._dwell_ms = self._next_dwell_ms()
                if (now_s - self._calm_since_s) * 1000.0 >= self._dwell_ms:
                    self._set(held, now_s)
        else:
            self._calm_since_s = None

        if utilization >= cfg.prewarm_utilization:
            self.prewarmed = True
        elif utilization < cfg.prewarm_utilization - cfg.hysteresis:
            self.prewarmed = False
        return self.reading()

    def _next_dwell_ms(self) -> float:
        jitter = self.cfg.period_jitter
        if not jitter or self._rng is None:
            return self.cfg.min_dwell_ms
        return self.cfg.min_dwell_ms * (1.0 + jitter * self._rng.uniform(-1.0, 1.0))

    def _set(self, zone: Zone, now_s: float) -> None:
        self.zone = zone
        self.changed_at_s = now_s
        self._calm_since_s = None

    def reading(self) -> ZoneReading:
        return ZoneReading(self.zone, self.prewarmed, self.score, self.pressures,
                           self.changed_at_s)
