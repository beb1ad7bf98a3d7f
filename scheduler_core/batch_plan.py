"""The cheapest padded plan for a known queue larger than one batch: the partition of its
requests, sorted by length, into consecutive batches that costs the device least.

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

Pure and vectorised: one numpy row per request, one short loop over the sorted lengths.
"""

from __future__ import annotations

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
