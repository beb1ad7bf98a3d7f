"""The cheapest padded plan for a known queue larger than one batch: the partition of its
requests, sorted by length, into consecutive batches that costs the device least; and, for
a queue that fits one batch, its cheapest split in two (``cheapest_split_ms``).

A padded batch costs what its size and its longest member say (``CostEstimator``), so
some cheapest plan groups requests by length: sorting them and cutting the sorted list
into consecutive runs of at most ``max_batch_size`` (and ``max_batch_tokens``) loses
nothing. ``cheapest_plan`` finds the cheapest such cut exactly (dynamic programming over
the sorted lengths, each batch charged its estimate plus the host time of a batch), so a
launch-bound device (GPU-like: a fixed 3.9 ms a batch) gets about as many batches as the
queue needs, and a token-bound one splits where padding costs more than a launch.

Why here and not in the former's scan: the scan grows one batch at a time from the most
urgent request and leaves out candidates whose padding looks wasteful, so a hand-over of
two or three batches' worth split into five to eight small batches, each paying a launch
(results/h200_perf_analyzer.md has the timeline). The plan's order of batches and its
deadline check are the former's (``LengthAwareFormer._planned``).

Pure. ``cheapest_plan`` is vectorised: one numpy row per request, one short loop over the
sorted lengths; ``cheapest_split_ms`` is one loop over a queue that fits one batch.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .cost_model import CostEstimator


def padded_costs_ms(estimator: CostEstimator, lengths: np.ndarray, max_size: int) -> np.ndarray:
    """``out[j, k - 1]``: the estimate (ms, corrected) of a padded batch of ``k``
    sequences whose longest is ``lengths[j]``, for k = 1..max_size; equal to
    ``estimator.estimate_parts_ms(k, lengths[j], ...)`` in padded mode."""
    sizes = np.arange(1, max_size + 1, dtype=np.float64)
    longest = lengths.astype(np.float64)
    if estimator.table is not None:
        return estimator.table.lookup_grid_ms(longest, sizes) * estimator.time_scale
    cfg = estimator.cfg
    tokens = sizes[None, :] * longest[:, None]
    raw = (cfg.fixed_ms + cfg.per_sequence_ms * sizes[None, :] + cfg.per_token_ms * tokens
           + cfg.per_token_squared_ms * (tokens * longest[:, None]))
    return raw * estimator.time_scale * estimator.correction


def cheapest_plan(lengths: np.ndarray, costs_ms: np.ndarray, max_tokens: int,
                  host_ms: float) -> tuple[list[int], float]:
    """The cheapest cut of sorted ``lengths`` into consecutive batches: (each batch's end
    index, ascending; the plan's total estimate including ``host_ms`` per batch).

    ``costs_ms`` is ``padded_costs_ms`` of the same lengths; its width is the largest batch.
    A batch's padded tokens stay within ``max_tokens`` (a single request longer than that
    is a batch of its own, as the former runs it)."""
    n, max_size = costs_ms.shape
    best = np.empty(n + 1)
    best[0] = 0.0
    size_of = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        k_max = min(max_size, j, max(1, max_tokens // int(lengths[j - 1])))
        # best[j - k] + the batch of the k requests ending at j, for k = 1..k_max
        options = best[j - k_max:j][::-1] + costs_ms[j - 1, :k_max]
        k = int(options.argmin())
        best[j] = options[k] + host_ms
        size_of[j] = k + 1
    ends = []
    j = n
    while j > 0:
        ends.append(j)
        j -= int(size_of[j])
    ends.reverse()
    return ends, float(best[n])


def cheapest_split_ms(estimator: CostEstimator, lengths: Sequence[int], whole_ms: float,
                      host_ms: float, max_tokens: int,
                      first_cap_ms: float = math.inf) -> tuple[int, float, float] | None:
    """The cheapest split in two of a queue that fits one batch, where it costs less than
    ``whole_ms`` (the queue as one batch): ``lengths`` sorted ascending, the ``k``
    shortest first, then the rest, each padded to its longest and within ``max_tokens``,
    the second charged ``host_ms`` more (one more batch's host time), the first within
    ``first_cap_ms``. Returns (k, the first batch's estimate, the rest's), or None where
    no split is cheaper.

    A padded batch costs its size times its longest, so the cheapest two-batch plan puts
    a shortest-first prefix beside the rest; a prefix ends where the lengths change, and
    none ending in the longest saves anything. ``LengthAwareFormer._cheapest_prefix``
    prices a hold call with it, and the as-handed rule asks it on a measured table
    (``AsHandedRule._no_split_pays``): one computation, so the two agree.

    The uncapped answer is kept on the estimator (``CostEstimator.last_split``) for the
    same inputs and estimator state: a hold call asks it of one hand-over up to three
    times. Where it meets the cap it is the capped answer too (the first cheapest of
    all is the first cheapest of those within the cap); else the capped scan runs.

    Where two of the cheapest batch there can be (``CostEstimator.least_ms``) and one
    batch's host time cost at least the whole, no split is cheaper and nothing is
    scanned: on a launch-bound device, most small hand-overs (results/split_floor/)."""
    if 2.0 * estimator.least_ms() * (1.0 - 1e-9) + host_ms >= whole_ms * (1.0 - 1e-9):
        return None
    key = (tuple(lengths), whole_ms, host_ms, max_tokens, estimator.state)
    last = estimator.last_split
    if last is not None and last[0] == key:
        best = last[1]
    else:
        best = _cheapest_split(estimator, lengths, whole_ms, host_ms, max_tokens, math.inf)
        estimator.last_split = (key, best)
    if best is None or best[1] <= first_cap_ms:
        return best
    return _cheapest_split(estimator, lengths, whole_ms, host_ms, max_tokens, first_cap_ms)


def _cheapest_split(estimator: CostEstimator, lengths: Sequence[int], whole_ms: float,
                    host_ms: float, max_tokens: int,
                    first_cap_ms: float) -> tuple[int, float, float] | None:
    """``cheapest_split_ms``, computed: one loop over the sorted lengths."""
    n = len(lengths)
    longest = lengths[-1]
    best_ms, best = whole_ms * (1.0 - 1e-9), None
    for k in range(1, n):
        length = lengths[k - 1]
        if length == longest:
            break  # the rest are the longest: no saving from here on
        if length == lengths[k]:
            continue  # a prefix ends where the lengths change
        if k * length > max_tokens or (n - k) * longest > max_tokens:
            continue  # not a plan of two batches
        first = estimator.scan_parts_ms(k, length)
        rest = estimator.scan_parts_ms(n - k, longest)
        if first + rest + host_ms < best_ms and first <= first_cap_ms:
            best_ms, best = first + rest + host_ms, (k, first, rest)
    return best
