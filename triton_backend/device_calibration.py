"""Measure what a batch costs on the real executor: a small grid of batch sizes x sequence
lengths, timed under a hard wall-clock budget.

``measure_cost_table(run, batch_sizes, lengths, budget_s)`` calls ``run(sequences)`` (an
executor's ``run``: ``EmulatedDevice.run`` or ``MiniLMEncoder.run`` in
``triton_backend.executors``) with batches of ``b`` sequences of ``L`` random token ids
each (ids in [1000, 30000), no padding inside, so the batch is exactly ``b x L``), a few
warm-ups and then the median of a few timed repeats per cell, in milliseconds. The rows
have the form of ``shared/gpu/h200_minilm_costs.json``: ``{"batch": b, "length": L,
"ms": x}``.

The budget is a wall-clock limit on the whole measurement. Cells are measured in an order
that gives a usable table early: the smallest cell, then the largest (the two ends of the
cost range), then the other corners, then the grid filled in coarse to fine. A cell starts
only when an upper estimate of its first run (from the cells timed so far: cost grows with
batch and length, and at most in proportion to tokens) fits what is left; a cell passed
over is looked at again after each measurement, when the estimates are tighter. After its
first run the rest of the cell is estimated, and the cell is given up when it would not
finish inside the budget, as is a cell whose next run would overrun it. The result says
which cells were skipped and that the table is incomplete. Only a run that takes longer
than every estimate can overrun the budget, by at most that run.

This module imports neither Triton nor torch (numpy and the standard library only), so it
is unit-tested with a fake clock and a fake executor.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_LENGTHS = (16, 32, 64, 128, 256, 512)
TOKEN_LOW, TOKEN_HIGH = 1000, 30000  # word-piece ids from the common part of BERT's vocabulary

Cell = tuple[int, int]  # (batch size, sequence length)


class CalibrationError(RuntimeError):
    """The executor failed while a cell was measured; the message names the cell and the
    original exception is chained (``__cause__``)."""


@dataclass
class CalibrationResult:
    """A measured cost table.

    rows        ``[{"batch": b, "length": L, "ms": x}, ...]`` (median of the repeats),
                sorted by length, then batch
    elapsed_s   wall time of the whole measurement (by the given clock)
    complete    True when every planned cell was measured
    skipped     the planned cells the budget left unmeasured (``[{"batch", "length"}]``)
    excluded    grid cells never planned because ``batch * length`` exceeds
                ``max_batch_tokens`` (no batch of that shape is ever formed)
    order       the cells in the order they were measured
    """

    rows: list[dict]
    elapsed_s: float
    complete: bool
    skipped: list[dict]
    budget_s: float
    warmups: int
    repeats: int
    excluded: list[dict] = field(default_factory=list)
    order: list[Cell] = field(default_factory=list)

    @property
    def cut_short(self) -> bool:
        return not self.complete

    def ms(self, batch: int, length: int) -> float | None:
        """The measured cost of one cell, None when it was not measured."""
        for row in self.rows:
            if row["batch"] == batch and row["length"] == length:
                return row["ms"]
        return None

    def to_dict(self) -> dict:
        return {"rows": [dict(r) for r in self.rows], "elapsed_s": self.elapsed_s,
                "complete": self.complete, "skipped": [dict(s) for s in self.skipped],
                "excluded": [dict(e) for e in self.excluded], "budget_s": self.budget_s,
                "warmups": self.warmups, "repeats": self.repeats,
                "order": [list(c) for c in self.order]}


def _axis(defaults: Sequence[int], limit: int, name: str) -> list[int]:
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {limit!r}")
    return sorted({v for v in defaults if v <= limit} | {int(limit)})


def calibration_grid(max_batch_size: int, max_sequence_length: int,
                     max_batch_tokens: int) -> tuple[list[int], list[int]]:
    """(batch sizes, lengths) to calibrate: 1, 2, 4 ... 64 up to ``max_batch_size`` (which
    is always included) x 16, 32 ... 512 up to ``max_sequence_length`` (always included).
    A batch size or length is left out when no cell with it fits ``max_batch_tokens``
    (``batch * length``); the cells of the remaining grid that exceed it are left out by
    :func:`measure_cost_table` given the same ``max_batch_tokens``."""
    batches = _axis(DEFAULT_BATCH_SIZES, max_batch_size, "max_batch_size")
    lengths = _axis(DEFAULT_LENGTHS, max_sequence_length, "max_sequence_length")
    if isinstance(max_batch_tokens, bool) or not isinstance(
            max_batch_tokens, (int, np.integer)) or max_batch_tokens < 1:
        raise ValueError(f"max_batch_tokens must be an integer >= 1, got {max_batch_tokens!r}")
    batches = [b for b in batches if b * lengths[0] <= max_batch_tokens]
    lengths = [n for n in lengths if batches and batches[0] * n <= max_batch_tokens]
    if not batches or not lengths:
        raise ValueError(f"max_batch_tokens {max_batch_tokens} admits no cell: even batch 1 x "
                         f"length {min(16, max_sequence_length)} exceeds it")
    return batches, lengths


def _levels(n: int) -> list[int]:
    """Coarse-to-fine level of each of ``n`` axis positions: both ends 0, the middle 1, the
    middles of the halves 2, ... (recursive bisection)."""
    level = [0] * n
    if n <= 2:
        return level
    seen = {0, n - 1}
    spans, depth = [(0, n - 1)], 1
    while spans:
        nxt = []
        for lo, hi in spans:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            if mid not in seen:
                seen.add(mid)
                level[mid] = depth
            nxt += [(lo, mid), (mid, hi)]
        spans, depth = nxt, depth + 1
    return level


def measurement_order(cells: Sequence[Cell], batch_sizes: Sequence[int],
                      lengths: Sequence[int]) -> list[Cell]:
    """``cells`` in the order to measure them: the smallest (fewest tokens), the largest,
    then by the coarse-to-fine level of their batch size and length (the grid's corners
    first), cheaper before dearer within a level."""
    if not cells:
        return []
    bl = dict(zip(sorted(batch_sizes), _levels(len(batch_sizes))))
    ll = dict(zip(sorted(lengths), _levels(len(lengths))))
    smallest = min(cells, key=lambda c: (c[0] * c[1], c))
    largest = max(cells, key=lambda c: (c[0] * c[1], c))
    rest = [c for c in cells if c not in (smallest, largest)]
    rest.sort(key=lambda c: (max(bl[c[0]], ll[c[1]]), bl[c[0]] + ll[c[1]], c[0] * c[1], c))
    return [smallest] + ([largest] if largest != smallest else []) + rest


def random_sequences(batch: int, length: int, seed: int = 0) -> list[np.ndarray]:
    """``batch`` sequences of ``length`` token ids in [1000, 30000) (int64, no padding)."""
    rng = np.random.default_rng(seed + 1_000_003 * batch + length)
    return [rng.integers(TOKEN_LOW, TOKEN_HIGH, size=length, dtype=np.int64)
            for _ in range(batch)]


def _estimate_s(cell: Cell, known: dict[Cell, float]) -> float | None:
    """An upper estimate of one run of ``cell`` (s) from the runs timed so far, or None
    when nothing is timed yet. Two bounds, the lower one wins: a timed cell at least as
    large in both dimensions (cost grows with batch and length), and a timed cell at most
    as large scaled by tokens (cost grows at most in proportion to tokens: true of a
    launch-bound GPU's flat region and, at these sizes, of MiniLM on a CPU)."""
    if not known:
        return None
    b, n = cell
    bounds = [s for (kb, kn), s in known.items() if kb >= b and kn >= n]
    bounds += [s * (b * n) / (kb * kn) for (kb, kn), s in known.items() if kb <= b and kn <= n]
    if not bounds:  # neither above nor below in both dimensions: scale the nearest in tokens
        (kb, kn), s = min(known.items(), key=lambda kv: abs(kv[0][0] * kv[0][1] - b * n))
        bounds = [s * max(1.0, (b * n) / (kb * kn))]
    return min(bounds)


def measure_cost_table(run: Callable[[list[np.ndarray]], Any], batch_sizes: Sequence[int],
                       lengths: Sequence[int], budget_s: float, warmups: int = 2,
                       repeats: int = 5, clock: Callable[[], float] = time.perf_counter,
                       make_sequences: Callable[[int, int], list[np.ndarray]] = random_sequences,
                       max_batch_tokens: int | None = None) -> CalibrationResult:
    """Time ``run`` on every cell of ``batch_sizes x lengths`` (cells above
    ``max_batch_tokens`` tokens left out) within ``budget_s`` seconds of wall time by
    ``clock``. Per cell: ``warmups`` untimed runs, then the median of ``repeats`` timed runs,
    in ms. Raises :class:`CalibrationError` (chained to the original) when ``run`` raises."""
    if warmups < 0 or repeats < 1:
        raise ValueError(f"need warmups >= 0 and repeats >= 1, got {warmups}, {repeats}")
    if not (isinstance(budget_s, (int, float)) and not math.isnan(budget_s)):
        raise ValueError(f"budget_s must be a number of seconds, got {budget_s!r}")
    batch_sizes = sorted({int(b) for b in batch_sizes})
    lengths = sorted({int(n) for n in lengths})
    if not batch_sizes or not lengths or batch_sizes[0] < 1 or lengths[0] < 1:
        raise ValueError(f"batch sizes and lengths must be non-empty and >= 1, got "
                         f"{batch_sizes}, {lengths}")
    grid = [(b, n) for n in lengths for b in batch_sizes]
    limit = max_batch_tokens if max_batch_tokens is not None else math.inf
    planned = [c for c in grid if c[0] * c[1] <= limit]
    excluded = [{"batch": b, "length": n} for b, n in grid if b * n > limit]
    order = measurement_order(planned, batch_sizes, lengths)

    start = clock()
    deadline = start + float(budget_s)
    runs_per_cell = warmups + repeats
    measured: dict[Cell, float] = {}  # cell -> median (s)
    known: dict[Cell, float] = {}  # cell -> one run (s): medians, and probes of cells cut off
    done: list[Cell] = []

    def timed(cell: Cell, seqs: list[np.ndarray]) -> float:
        t0 = clock()
        try:
            run(seqs)
        except Exception as exc:
            raise CalibrationError(f"calibration run failed on batch {cell[0]} x length "
                                   f"{cell[1]}: {type(exc).__name__}: {exc}") from exc
        return clock() - t0

    pending = list(order)
    given_up: list[Cell] = []  # probed, and the rest of the cell would not fit
    while pending:
        # The first cell in measuring order whose first run fits what is left. Estimates
        # tighten as cells are measured, so a cell passed over is looked at again after
        # each measurement (e.g. the largest, once a cell below it bounds it).
        now = clock()
        cell = next((c for c in pending
                     if (e := _estimate_s(c, known)) is None or now + e <= deadline), None)
        if cell is None or now >= deadline:
            break
        pending.remove(cell)
        seqs = make_sequences(*cell)
        first = timed(cell, seqs)  # the first warm-up (or repeat): the cell's own estimate
        # A first run pays one-off costs (allocation, kernel selection): the rest of the
        # cell is estimated from it, or from the other cells where they bound it lower.
        others = _estimate_s(cell, known)
        latest = first if others is None else min(first, others)
        if clock() + latest * (runs_per_cell - 1) > deadline:
            known[cell] = min(first, known.get(cell, math.inf))
            given_up.append(cell)
            continue
        times = [] if warmups else [first]
        for i in range(1, runs_per_cell):
            if clock() + latest > deadline:
                break  # the next run would overrun the budget
            latest = timed(cell, seqs)
            if i >= warmups:
                times.append(latest)
        if len(times) < repeats:
            known[cell] = min(first, known.get(cell, math.inf))
            given_up.append(cell)
            continue
        measured[cell] = known[cell] = statistics.median(times)
        done.append(cell)
    skipped = given_up + pending

    rows = [{"batch": b, "length": n, "ms": round(measured[(b, n)] * 1000.0, 4)}
            for b, n in planned if (b, n) in measured]
    return CalibrationResult(
        rows=rows, elapsed_s=clock() - start, complete=not skipped,
        skipped=[{"batch": b, "length": n}
                 for b, n in sorted(skipped, key=lambda c: (c[1], c[0]))],
        budget_s=float(budget_s), warmups=warmups, repeats=repeats, excluded=excluded,
        order=done)
