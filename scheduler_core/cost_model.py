"""Batch cost model: how long a batch of sequences takes on the device.

The profile's cost model - the linear formula, or a measured table (``cost_table.py``)
when the profile has one - drives the emulated device (as its ground truth) and the
scheduler (as its seed estimate, refit online from observed batches).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

from .cost_table import CostTable, RefitTable
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


@functools.lru_cache(maxsize=64)
def cost_table(cfg: CostModelConfig) -> CostTable | None:
    """The profile's measured table (built once per cost model), or None."""
    return CostTable.from_rows(cfg.table) if cfg.table else None


def cost_ms(cfg: CostModelConfig, shape: BatchShape) -> float:
    """What a batch of this shape costs per the profile (ms, device speed): its measured
    table at the batch's effective length (tokens per sequence) when it has one, else the
    formula. The emulated device sleeps exactly this (times its time scale)."""
    if shape.batch_size == 0:
        return 0.0
    table = cost_table(cfg)
    if table is None:
        return formula_ms(cfg, shape)
    return table.lookup_ms(shape.batch_size, shape.tokens / shape.batch_size)


class CostEstimator:
    """The scheduler's estimate of batch latency (milliseconds).

    Seeded from the profile (scaled by ``time_scale`` for an emulated device) and refit
    online from observed batches:

    * formula profiles: one exponentially weighted ratio of observed to predicted time
      (``correction``), so a profile that is off by a constant factor (a slower CPU, a
      busy host) converges within a few batches;
    * table profiles: the table's own cells, region by region (``RefitTable``); the
      global ``correction`` stays 1.

    ``error_ratio`` is the smoothed |observed - predicted| / observed of the estimate
    each batch was dispatched on (0 = exact): the measured-vs-predicted error metric.
    """

    def __init__(self, cfg: CostModelConfig, cost_mode: str = "padded",
                 time_scale: float = 1.0, smoothing: float = 0.2):
        self.cfg = cfg
        self.cost_mode = cost_mode
        self.time_scale = time_scale
        self.smoothing = smoothing
        self.correction = 1.0
        self.observed_batches = 0
        self.error_ratio = 0.0
        seed = cost_table(cfg)
        self.table: RefitTable | None = RefitTable(seed, smoothing) if seed else None
        # ``batch_plan.cheapest_split_ms``'s last answer, keyed on its inputs and
        # ``state``: a hold call asks it of the same hand-over up to three times (the
        # launch-first check, the as-handed check, the former), each a scan of lookups.
        self.last_split: tuple | None = None

    @property
    def lookups_version(self) -> int:
        """Counts the refits that moved the uncorrected estimates (``base_*``): a table's
        ``version``; the formula's never move (0)."""
        return self.table.version if self.table is not None else 0

    @property
    def state(self) -> tuple:
        """What every estimate depends on besides its arguments: equal states give
        equal estimates."""
        return self.lookups_version, self.correction, self.time_scale, self.cost_mode

    @property
    def drift_ratio(self) -> float:
        """How far the online refit has moved the estimate from the profile's seed
        (1 = not at all): the global correction, or a table's mean cell factor."""
        return self.table.mean_factor() if self.table is not None else self.correction

    def estimate_ms(self, lengths: Sequence[int]) -> float:
        return self.estimate_shape_ms(batch_shape(lengths, self.cost_mode))

    def estimate_shape_ms(self, shape: BatchShape) -> float:
        if self.table is not None:
            if shape.batch_size == 0:
                return 0.0
            return self.table.lookup_ms(shape.batch_size,
                                        shape.tokens / shape.batch_size) * self.time_scale
        return formula_ms(self.cfg, shape) * self.time_scale * self.correction

    def estimate_parts_ms(self, batch_size: int, longest: int, real_tokens: int,
                          real_squared: int) -> float:
        """``estimate_ms`` from running totals (no list walk): the batch former's hot path."""
        return self.base_parts_ms(batch_size, longest, real_tokens, real_squared) * self.correction

    def scan_parts_ms(self, batch_size: int, longest: int) -> float:
        """``estimate_parts_ms(batch_size, longest, 0, 0)`` for a split scan
        (``batch_plan.cheapest_split_ms``), which prices each shape of a call once: on a
        padded table not memoised (``RefitTable.scan_ms``), time-scaled then corrected
        as ``estimate_parts_ms`` is, the same float operations."""
        if self.table is None or self.cost_mode == "ragged":
            return self.estimate_parts_ms(batch_size, longest, 0, 0)
        return self.table.scan_ms(batch_size, longest) * self.time_scale * self.correction

    def base_alone_max_ms(self, lengths) -> float:
        """The largest ``base_uniform_ms(1, n)`` of ``lengths`` (not empty): on a table
        in one loop, not memoised (``RefitTable.alone_max_ms``), time-scaled as
        ``base_parts_ms`` is."""
        if self.table is None:
            return max(self.base_uniform_ms(1, n) for n in lengths)
        return self.table.alone_max_ms(lengths) * self.time_scale

    def uniform_ms(self, batch_size: int, length: int) -> float:
        """``estimate_parts_ms`` of ``batch_size`` requests of ``length`` tokens each."""
        return self.base_uniform_ms(batch_size, length) * self.correction

    def base_uniform_ms(self, batch_size: int, length: int) -> float:
        """``base_parts_ms`` of ``batch_size`` requests of ``length`` tokens each."""
        tokens = batch_size * length
        return self.base_parts_ms(batch_size, length, tokens, tokens * length)

    def least_ms(self) -> float:
        """No batch's estimate (``estimate_parts_ms``) is less, to within rounding: a
        table's smallest cell (``RefitTable.least_ms``), or the formula's one sequence of
        no tokens (each term grows with the batch; a hand-built config with a negative
        coefficient has no floor)."""
        cfg = self.cfg
        if self.table is not None:
            base = self.table.least_ms()
        elif min(cfg.per_sequence_ms, cfg.per_token_ms, cfg.per_token_squared_ms) < 0:
            return -math.inf
        else:
            base = cfg.fixed_ms + cfg.per_sequence_ms
        return base * self.time_scale * self.correction

    def batch_overhead_ms(self) -> float:
        """The per-batch fixed cost (scaled and corrected): the device time a request saves
        by joining a batch instead of running in one of its own - ``fixed_ms``, or what a
        table says one sequence costs more alone than as the second of two."""
        if self.table is not None:
            return self.table.batch_overhead_ms() * self.time_scale
        return self.cfg.fixed_ms * self.time_scale * self.correction

    def base_parts_ms(self, batch_size: int, longest: int, real_tokens: int,
                      real_squared: int) -> float:
        """The seed (times ``time_scale``) without the global correction: the formula, or
        the refit table.

        ``LengthAwareFormer.form`` inlines the formula in its hot loop (the same float
        operations); a property test fails if the two drift apart."""
        if self.table is not None:
            length = longest if self.cost_mode != "ragged" else real_tokens / batch_size
            return self.table.lookup_ms(batch_size, length) * self.time_scale
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
        if duration_ms <= 0 or len(lengths) == 0:
            return
        table = self.table
        if table is None:
            self._observe_formula(batch_shape(lengths, self.cost_mode), duration_ms)
            return
        # A batch's end runs this: the table's length (``estimate_shape_ms``'s, tokens
        # per sequence) without a ``BatchShape``.
        n = len(lengths)
        length = float(max(lengths)) if self.cost_mode != "ragged" else sum(lengths) / n
        self._count_error(table.lookup_ms(n, length) * self.time_scale, duration_ms)
        table.observe(n, length, duration_ms / self.time_scale)

    def _count_error(self, estimate: float, duration_ms: float) -> None:
        if estimate > 0:
            error = min(abs(duration_ms - estimate) / duration_ms, 10.0)
            self.error_ratio += self.smoothing * (error - self.error_ratio)
        self.observed_batches += 1

    def _observe_formula(self, shape: BatchShape, duration_ms: float) -> None:
        self._count_error(self.estimate_shape_ms(shape), duration_ms)
        predicted = formula_ms(self.cfg, shape) * self.time_scale
        if predicted <= 0:
            return
        ratio = min(max(duration_ms / predicted, 0.05), 20.0)
        self.correction += self.smoothing * (ratio - self.correction)

    def __repr__(self) -> str:
        kind = "table" if self.table is not None else "formula"
        return (f"CostEstimator({kind}, mode={self.cost_mode}, scale={self.time_scale}, "
                f"correction={self.correction:.3f}, error={self.error_ratio:.3f}, "
                f"batches={self.observed_batches})")


ESTIMATES_MEMO_LIMIT = 4096  # lengths whose ``LengthEstimates`` are kept


class LengthEstimates:
    """A queued request's uncorrected estimates by its length (its ``Entry``'s): run
    alone, and in an efficient batch of its length; kept by length while the estimator's
    lookups stay as they are (the formula's never move; a table's move with
    ``RefitTable.version``)."""

    def __init__(self, estimator: CostEstimator, efficient_size: int, max_batch_tokens: int):
        self.estimator = estimator
        self.efficient_size, self.max_batch_tokens = efficient_size, max_batch_tokens
        self._memo: dict[int, tuple[float, float]] = {}
        self._version = 0

    def efficient_batch(self, n: int) -> int:
        """How many ``n``-token requests make an efficient batch."""
        return max(1, min(self.efficient_size, self.max_batch_tokens // n))

    def __call__(self, n: int) -> tuple[float, float]:
        version = self.estimator.lookups_version
        memo = self._memo
        if version != self._version or len(memo) >= ESTIMATES_MEMO_LIMIT:
            memo.clear()
            self._version = version
        both = memo.get(n)
        if both is None:
            base = self.estimator.base_uniform_ms
            both = memo[n] = (base(1, n), base(self.efficient_batch(n), n))
        return both
