"""Request features the scheduler decides on."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Sequence


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


# Served's lists, read without a comprehension (a code object more on the path of every batch).
_SEQ_LEN, _ARRIVAL_S, _SLA_MS = attrgetter("seq_len"), attrgetter("arrival_s"), attrgetter("sla_ms")


@dataclass(frozen=True, slots=True)
class Served:
    """A batch as its feedback reads it (``Scheduler.batch_observed``): its members'
    lengths, arrivals and SLAs, in parallel lists, without the members. The server feeds
    it back while the next batch runs, maybe in the next call: the members' handles hold
    their Triton requests, which it must not keep alive that long."""

    seq_lens: list[int]
    arrivals_s: list[float]
    slas_ms: list[float]

    @classmethod
    def of(cls, batch: Sequence[QueuedRequest]) -> "Served":
        return cls(list(map(_SEQ_LEN, batch)), list(map(_ARRIVAL_S, batch)),
                   list(map(_SLA_MS, batch)))

    def requests(self) -> list[QueuedRequest]:
        """The members again, without their handles (for a policy that takes a batch)."""
        return [QueuedRequest(i, n, a, s) for i, (n, a, s)
                in enumerate(zip(self.seq_lens, self.arrivals_s, self.slas_ms))]
