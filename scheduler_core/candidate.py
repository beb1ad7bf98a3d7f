"""What a batch former proposes (``Candidate``) and the interface every former offers
(``BatchFormer``); the formers themselves are registered in ``formers.py``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from .controller import ControlState
from .entry_queue import Entry, EntryQueue


@dataclass(frozen=True)
class Candidate:
    """A proposed batch, or a reason to hold everything (``hold_reason``)."""

    entries: list[Entry]
    estimated_ms: float  # corrected estimate of the batch's run time
    full: bool  # no larger batch can be formed now: send it
    immediate: str | None  # a Reason that sends it at once (flush, compensation, ...)
    deadline_s: float  # the tightest feasible deadline among its members
    hold_reason: str | None = None  # no batch now (e.g. dilution) ...
    hold_until_s: float | None = None  # ... until then

    @classmethod
    def hold(cls, reason: str, until_s: float) -> "Candidate":
        return cls([], 0.0, False, None, math.inf, reason, until_s)


class BatchFormer(Protocol):
    name: str

    def form(self, queue: EntryQueue, state: ControlState, now_s: float,
             flush: bool) -> Candidate:
        """Propose the next batch from a non-empty ``queue``."""
