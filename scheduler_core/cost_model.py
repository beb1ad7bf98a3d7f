"""Batch cost model: how long a batch of sequences takes on the device.

The same formula drives the emulated device (as its ground truth) and the scheduler
(as its seed estimate, corrected online from observed batches).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .profile import CostModelConfig


@dataclass(frozen=True)
class BatchShape:
    """What the device sees of a batch: its size and the tokens it processes."""

    batch_size: int
    tokens: int  # tokens processed (padded or ragged, per the cost mode)
    squared_tokens: int  # sum of squared sequence lengths (attention term)
    padded_tokens: int  # batch_size * longest member
    real_tokens: int  # sum of the members' own lengths

    @property
    def padding_waste(self) -> float:
        """Fraction of padded tokens that are padding (0 = none)."""
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0


def batch_shape(lengths: Sequence[int], cost_mode: str = "padded") -> BatchShape:
    """Shape of a batch whose members have ``lengths`` tokens each."""
    b = len(lengths)
    if b == 0:
        return BatchShape(0, 0, 0, 0, 0)
    longest = max(lengths)
    real = sum(lengths)
    if cost_mode == "ragged":
        tokens, squared = real, sum(n * n for n in lengths)
    else:
        tokens, squared = b * longest, b * longest * longest
    return BatchShape(b, tokens, squared, b * longest, real)


def formula_ms(cfg: CostModelConfig, shape: BatchShape) -> float:
    """The profile's cost formula, in milliseconds, for a non-empty batch."""
    if shape.batch_size == 0:
        return 0.0
    return (cfg.fixed_ms + cfg.per_sequence_ms * shape.batch_size
            + cfg.per_token_ms * shape.tokens
            + cfg.per_token_squared_ms * shape.squared_tokens)


class CostEstimator:
    """The scheduler's estimate of batch latency (milliseconds).

    Seeded from the profile formula (scaled by ``time_scale`` for an emulated device) and
    corrected online by an exponentially weighted ratio of observed to predicted time, so
    a profile that is off by a constant factor (a slower CPU, a busy host) converges within
    a few batches.
    """

    def __init__(self, cfg: CostModelConfig, cost_mode: str = "padded",
                 time_scale: float = 1.0, smoothing: float = 0.2):
        self.cfg = cfg
        self.cost_mode = cost_mode
        self.time_scale = time_scale
        self.smoothing = smoothing
        self.correction = 1.0
        self.observed_batches = 0

    def estimate_ms(self, lengths: Sequence[int]) -> float:
        return self.estimate_shape_ms(batch_shape(lengths, self.cost_mode))

    def estimate_shape_ms(self, shape: BatchShape) -> float:
        return formula_ms(self.cfg, shape) * self.time_scale * self.correction

    def estimate_parts_ms(self, batch_size: int, longest: int, real_tokens: int,
                          real_squared: int) -> float:
        """``estimate_ms`` from running totals (no list walk): the batch former's hot path."""
        return self.base_parts_ms(batch_size, longest, real_tokens, real_squared) * self.correction

    def batch_overhead_ms(self) -> float:
        """The per-batch fixed cost (``fixed_ms``, scaled and corrected): the device time a
        request saves by joining a batch instead of running in one of its own."""
        return self.cfg.fixed_ms * self.time_scale * self.correction

    def base_parts_ms(self, batch_size: int, longest: int, real_tokens: int,
                      real_squared: int) -> float:
        """The seed formula (times ``time_scale``) without the online correction.

        ``Scheduler._explicit_batch`` inlines this formula in its hot loop (the same float
        operations); test_scheduler_equivalence fails if the two drift apart."""
        cfg = self.cfg
        if self.cost_mode == "ragged":
            tokens, squared = real_tokens, real_squared
        else:
            tokens, squared = batch_size * longest, batch_size * longest * longest
        raw = (cfg.fixed_ms + cfg.per_sequence_ms * batch_size + cfg.per_token_ms * tokens
               + cfg.per_token_squared_ms * squared)
        return raw * self.time_scale

    def observe(self, lengths: Sequence[int], duration_ms: float) -> None:
        """Feed back one finished batch's measured duration."""
        predicted = formula_ms(self.cfg, batch_shape(lengths, self.cost_mode)) * self.time_scale
        if predicted <= 0 or duration_ms <= 0:
            return
        ratio = min(max(duration_ms / predicted, 0.05), 20.0)
        self.correction += self.smoothing * (ratio - self.correction)
        self.observed_batches += 1

    def __repr__(self) -> str:
        return (f"CostEstimator(mode={self.cost_mode}, scale={self.time_scale}, "
                f"correction={self.correction:.3f}, batches={self.observed_batches})")
