"""Request features the scheduler decides on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class QueuedRequest:
    """One queued inference request, as the scheduler sees it.

    Times are seconds on the caller's monotonic clock. ``handle`` is opaque to the core:
    the adapter keeps its response sender and tensor there.
    """

    request_id: int
    seq_len: int
    arrival_s: float
    sla_ms: float
    handle: Any = field(default=None, compare=False, repr=False)

    @property
    def deadline_s(self) -> float:
        return self.arrival_s + self.sla_ms / 1000.0

    def remaining_sla_ms(self, now_s: float) -> float:
        """Time left before the deadline, in ms (negative once missed)."""
        return (self.deadline_s - now_s) * 1000.0
