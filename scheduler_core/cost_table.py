"""A measured batch cost table: milliseconds per (batch size, padded length), interpolated.

Real devices are not a line. Eager MiniLM on an H200 costs about 3.9 ms for any batch up
to ~4k tokens (launch-bound), then grows with the tokens (``../shared/gpu``): a
``fixed + per_token`` formula is wrong on one side or the other. A grid of measured cells
represents both regions:

* inside the grid, bilinear interpolation in (batch size, length);
* below the smallest batch size or length, the edge cell's cost (costs do not fall);
* past the largest, linear extrapolation from the last two cells (never falling), so a
  flat-then-linear device keeps growing at its measured slope.

``CostTable`` is immutable; ``RefitTable`` carries one multiplicative factor per cell,
fitted online from observed batches: a batch corrects the four cells around its shape in
proportion to their interpolation weights, so the flat region and the growth region are
corrected separately (one global ratio cannot fit both).

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

Row = tuple[int, int, float]  # (batch size, length in tokens, milliseconds)

MAX_AXIS_POINTS = 64  # per axis: a profile's table stays small
MEMO_LIMIT = 65536  # memoised lookups kept between refits
SEGMENTS_LIMIT = 16384  # whole positions per axis whose segment is kept
# A cell's lookups move once its fit has moved this share from what they use. A refit
# runs at every batch's end and no batch runs exactly its estimate, so applying every
# move would clear the memoised lookups, which the former's decisions then recompute,
# for moves inside the device's own spread. The factors themselves follow every batch
# (docs/defaults.md has the measurement).
REFIT_STEP_SHARE = 0.05


class CostTableError(ValueError):
    """A table's rows do not form a usable grid."""


def _segment(axis: Sequence[float], x: float) -> tuple[int, float]:
    """(i, t): ``x`` lies between axis[i] and axis[i + 1] at fraction t (t > 1 past the
    end: extrapolation; clamped to 0 before the start)."""
    if len(axis) == 1:
        return 0, 0.0
    i = bisect_right(axis, x) - 1
    if i < 0:
        return 0, 0.0
    i = min(i, len(axis) - 2)
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


def _along(v0: float, v1: float, t: float) -> float:
    """Linear between two cells; past the second, never below it (costs do not fall)."""
    value = v0 + (v1 - v0) * t
    return max(value, v1) if t > 1.0 else value


@dataclass(frozen=True)
class CostTable:
    """Milliseconds per batch of ``batch`` sequences ``length`` tokens long (padded)."""

    batch_sizes: tuple[int, ...]
    lengths: tuple[int, ...]
    ms: tuple[tuple[float, ...], ...]  # ms[i][j]: batch_sizes[i] x lengths[j]

    @classmethod
    def from_rows(cls, rows: Iterable[Row]) -> "CostTable":
        """A full grid from measured cells; a missing cell is extrapolated from its row
        (along the length) or, for a row with no cell, from its column."""
        cells: dict[tuple[int, int], float] = {}
        for b, n, ms in rows:
            if (b, n) in cells:
                raise CostTableError(f"cell batch={b} length={n} given twice")
            cells[(b, n)] = float(ms)
        if not cells:
            raise CostTableError("a cost table needs at least one measured cell")
        batch_sizes = tuple(sorted({b for b, _ in cells}))
        lengths = tuple(sorted({n for _, n in cells}))
        for name, axis in (("batch sizes", batch_sizes), ("lengths", lengths)):
            if len(axis) > MAX_AXIS_POINTS:
                raise CostTableError(f"at most {MAX_AXIS_POINTS} {name}, got {len(axis)}")
        grid = [[cells.get((b, n)) for n in lengths] for b in batch_sizes]
        for i, b in enumerate(batch_sizes):
            known = [(n, grid[i][j]) for j, n in enumerate(lengths) if grid[i][j] is not None]
            if known:
                grid[i] = [_fill(known, n) if v is None else v for n, v in zip(lengths, grid[i])]
        for j, n in enumerate(lengths):
            known = [(b, grid[i][j]) for i, b in enumerate(batch_sizes) if grid[i][j] is not None]
            for i, b in enumerate(batch_sizes):
                if grid[i][j] is None:
                    grid[i][j] = _fill(known, b)
        return cls(batch_sizes, lengths, tuple(tuple(r) for r in grid))

    def lookup_ms(self, batch_size: float, length: float) -> float:
        """Interpolated cost of ``batch_size`` sequences padded to ``length`` tokens."""
        return _interpolate(self.batch_sizes, self.lengths, self.ms, batch_size, length)


def _fill(known: list[tuple[int, float]], x: int) -> float:
    """A missing cell from the known ones on its line: interpolated between neighbours,
    extrapolated from the last two past the end, proportional to x with one point."""
    if len(known) == 1:
        x0, v0 = known[0]
        return v0 * max(1.0, x / x0)
    xs = [k for k, _ in known]
    i, t = _segment(xs, x)
    return max(0.0, _along(known[i][1], known[i + 1][1], t))


def _interpolate(batch_sizes: Sequence[int], lengths: Sequence[int],
                 ms: Sequence[Sequence[float]], b: float, n: float) -> float:
    """Bilinear in (b, n) over the grid (a one-point axis is constant along it)."""
    return _bilinear(ms, _segment(batch_sizes, b), _segment(lengths, n))


def _bilinear(ms: Sequence[Sequence[float]], along_b: tuple[int, float],
              along_n: tuple[int, float]) -> float:
    """``_interpolate`` from the two axes' ``_segment``s (``RefitTable`` keeps them for
    whole positions, so its lookups search no axis): ``_along`` along each of the two
    rows, then between them, written out in one function (the same float operations; a
    refit table's lookups run it after every refit that moves the cells)."""
    i, tb = along_b
    j, tn = along_n
    ends = []
    for row in (ms[i], ms[i + 1]) if len(ms) > 1 else (ms[i],):
        if len(row) == 1:
            ends.append(row[0])  # a one-cell row is constant
            continue
        v0, v1 = row[j], row[j + 1]
        value = v0 + (v1 - v0) * tn
        ends.append(v1 if tn > 1.0 and value < v1 else value)
    if len(ends) == 1:
        return ends[0]
    lo, hi = ends
    value = lo + (hi - lo) * tb
    return hi if tb > 1.0 and value < hi else value


def _segments(axis: Sequence[float], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_segment`` for every element of ``x``."""
    if len(axis) == 1:
        return np.zeros(len(x), dtype=np.int64), np.zeros(len(x))
    points = np.asarray(axis, dtype=np.float64)
    i = np.searchsorted(points, x, side="right") - 1
    before = i < 0
    i = np.clip(i, 0, len(axis) - 2)
    t = (x - points[i]) / (points[i + 1] - points[i])
    return i, np.where(before, 0.0, t)


def _along_all(v0: np.ndarray, v1: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``_along``, elementwise (the same float operations)."""
    value = v0 + (v1 - v0) * t
    return np.where(t > 1.0, np.maximum(value, v1), value)


def _interpolate_grid(batch_sizes: Sequence[int], lengths: Sequence[int],
                      ms: Sequence[Sequence[float]], ns: np.ndarray,
                      bs: np.ndarray) -> np.ndarray:
    """``_interpolate(.., b, n)`` for every n in ``ns`` (rows) and b in ``bs`` (columns)."""
    grid = np.asarray(ms, dtype=np.float64)
    i, tb = _segments(batch_sizes, bs)
    j, tn = _segments(lengths, ns)
    i, tb = i[None, :], tb[None, :]
    j, tn = j[:, None], tn[:, None]
    wide = len(lengths) > 1
    lo = _along_all(grid[i, j], grid[i, j + 1], tn) if wide else grid[i, 0] + 0.0 * tn
    if len(batch_sizes) == 1:
        return lo
    hi = _along_all(grid[i + 1, j], grid[i + 1, j + 1], tn) if wide else grid[i + 1, 0] + 0.0 * tn
    return _along_all(lo, hi, tb)


def _segments_of(axis: Sequence[int]) -> dict[int, tuple[int, float]]:
    """``_segment(axis, x)`` by ``x``, for every whole ``x`` from 0 to twice the axis's
    last point (at most ``SEGMENTS_LIMIT`` of them)."""
    return {x: _segment(axis, x) for x in range(min(2 * int(axis[-1]), SEGMENTS_LIMIT) + 1)}


class RefitTable:
    """A ``CostTable`` (the seed) times one factor per cell, refit from observed batches.

    ``observe`` moves the factors of the (up to) four cells around the batch's shape
    toward observed/predicted, each by ``smoothing`` times its interpolation weight; cells
    far from any observed batch keep their seed."""

    def __init__(self, seed: CostTable, smoothing: float = 0.2):
        self.seed = seed
        self.smoothing = smoothing
        self.factors = [[1.0] * len(seed.lengths) for _ in seed.batch_sizes]
        self._ms = [list(r) for r in seed.ms]
        self._memo: dict[tuple[float, float], float] = {}
        self.version = 0  # counts the refits that moved the lookups
        self._least: tuple[int, float] | None = None  # (version, ``least_ms``)
        # Each axis's ``_segment`` of every whole number up to twice its last point: a
        # lookup there searches no axis (the refit moves the cells, never the axes).
        self._on_b = _segments_of(seed.batch_sizes)
        self._on_n = _segments_of(seed.lengths)

    def lookup_ms(self, batch_size: float, length: float) -> float:
        # Memoised until a refit moves the cells (``REFIT_STEP_SHARE``): the batch former
        # asks for the same few shapes hundreds of times per decision.
        key = (batch_size, length)
        value = self._memo.get(key)
        if value is None:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            value = _bilinear(self._ms, *self._segments_at(batch_size, length))
            self._memo[key] = value
        return value

    def scan_ms(self, batch_size: int, length: int) -> float:
        """``lookup_ms``, not memoised: a split scan (``batch_plan.cheapest_split_ms``)
        prices a call's shapes once each, and most of them miss the memo (a call's
        lengths are its own). ``_bilinear`` on the segments kept for whole positions; any
        other shape is looked up."""
        along_b, along_n = self._on_b.get(batch_size), self._on_n.get(length)
        if along_b is None or along_n is None:
            return self.lookup_ms(batch_size, length)
        return _bilinear(self._ms, along_b, along_n)

    def alone_max_ms(self, lengths) -> float:
        """The largest ``lookup_ms(1, n)`` of ``lengths`` (whole, not empty), not
        memoised: a batch of one is the first row (the batch sizes' segment of 1 is the
        row's own at fraction 0), so each is that row's ``_along`` step along the length,
        the same float operations as ``_bilinear``'s; lengths the segments do not keep
        are looked up."""
        row, on_n = self._ms[0], self._on_n
        if len(row) < 2:
            return max(self.lookup_ms(1, n) for n in lengths)
        best = -math.inf
        for n in lengths:
            along = on_n.get(n)
            value = (self.lookup_ms(1, n) if along is None
                     else _along(row[along[0]], row[along[0] + 1], along[1]))
            if value > best:
                best = value
        return best

    def _segments_at(self, batch_size: float, length: float
                     ) -> tuple[tuple[int, float], tuple[int, float]]:
        """Both axes' ``_segment`` of a shape: kept for whole positions, searched
        otherwise."""
        seed = self.seed
        return (self._on_b.get(batch_size) or _segment(seed.batch_sizes, batch_size),
                self._on_n.get(length) or _segment(seed.lengths, length))

    def least_ms(self) -> float:
        """No lookup answers less, to within rounding: the smallest cell the lookups use.
        Inside the grid a lookup is a weighted mean of cells, below it an edge cell, past
        it never below the last cell on each axis (``_bilinear``). Kept per ``version``."""
        least = self._least
        if least is None or least[0] != self.version:
            least = self._least = (self.version, min(map(min, self._ms)))
        return least[1]

    def lookup_grid_ms(self, lengths: np.ndarray, batch_sizes: np.ndarray) -> np.ndarray:
        """``lookup_ms`` for every (length, batch size) pair: rows are ``lengths``,
        columns ``batch_sizes`` (the batch planner's cost grid, in one pass)."""
        return _interpolate_grid(self.seed.batch_sizes, self.seed.lengths, self._ms,
                                 np.asarray(lengths, dtype=np.float64),
                                 np.asarray(batch_sizes, dtype=np.float64))

    def observe(self, batch_size: float, length: float, duration_ms: float) -> None:
        predicted = self.lookup_ms(batch_size, length)
        if predicted <= 0 or duration_ms <= 0 or not math.isfinite(duration_ms):
            return
        ratio = min(max(duration_ms / predicted, 0.05), 20.0)
        seed = self.seed
        # A batch's end runs this: the four cells written out.
        (i, tb), (j, tn) = self._segments_at(batch_size, length)
        tb, tn = min(max(tb, 0.0), 1.0), min(max(tn, 0.0), 1.0)
        rows, columns = len(seed.batch_sizes), len(seed.lengths)
        smoothing, moved = self.smoothing, ratio - 1.0
        for ci, wb in ((i, 1.0 - tb), (i + 1, tb)):
            if wb <= 0 or ci >= rows:
                continue
            factors, used_ms, seed_ms = self.factors[ci], self._ms[ci], seed.ms[ci]
            for cj, wn in ((j, 1.0 - tn), (j + 1, tn)):
                weight = wb * wn
                if weight <= 0 or cj >= columns:
                    continue
                f = factors[cj]
                f += smoothing * weight * moved * f
                factors[cj] = f
                fitted, used = seed_ms[cj] * f, used_ms[cj]
                if abs(fitted - used) > REFIT_STEP_SHARE * used:
                    used_ms[cj] = fitted
                    self._memo.clear()
                    self.version += 1

    def batch_overhead_ms(self) -> float:
        """The device time one more sequence saves by joining a batch instead of running
        alone: a batch of one minus what a second one adds (shortest length). About the
        launch cost on a launch-bound device; small where cost grows with every sequence."""
        n = self.seed.lengths[0]
        one = self.lookup_ms(1, n)
        return max(0.0, 2.0 * one - self.lookup_ms(2, n))

    def mean_factor(self) -> float:
        flat = [f for row in self.factors for f in row]
        return sum(flat) / len(flat)

    def table(self) -> CostTable:
        """The refit cells as a ``CostTable``."""
        return CostTable(self.seed.batch_sizes, self.seed.lengths,
                         tuple(tuple(r) for r in self._ms))
