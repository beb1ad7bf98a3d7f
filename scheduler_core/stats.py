"""The one percentile definition the project uses: nearest rank.

The scheduler's perception layer, the simulator and every operator tool quote P50/P99
with it, so a figure means the same wherever it is printed.
"""

from __future__ import annotations

import math
from typing import Iterable


def nearest_rank_index(count: int, q: float) -> int:
    """0-based index of the nearest-rank ``q``-th percentile (``q`` in [0, 100]) among
    ``count`` sorted values. The small tolerance keeps 0.07 * 100 (= 7.000000000000001)
    at rank 7."""
    return min(count - 1, max(0, math.ceil(q * count / 100.0 - 1e-9) - 1))


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank ``q``-th percentile of ``values`` (any order); nan when empty."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return float(ordered[nearest_rank_index(len(ordered), q)])
