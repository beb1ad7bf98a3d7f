"""The batching-policy contract: what every policy offers and how a caller drives it.

A policy is a synchronous step function with no I/O, no threads and no clock of its own
(the caller passes ``now_s``, seconds on its monotonic clock). The explicit-control
``Scheduler`` and the baselines (``baselines.py``) implement it; the simulator and the
Triton adapter drive any of them the same way:

    policy.submit(request, now_s)           # on arrival; may raise QueueFull
    policy.tick(now_s)                      # every control period (perception, decision)
    decision = decide(policy, now_s, flush) # whenever the device is free
    #   answer every request in decision.rejected (UNAVAILABLE, refusal_message(reason));
    #   if decision.batch: run it, bracketed by
    policy.batch_started(decision.batch, now_s)
    policy.batch_finished(decision.batch, started_s, now_s, succeeded)
    #   else ask again at wake_time(decision, now_s), or on the next arrival
    policy.drain()                          # shutdown: answer what it returns

``flush`` asks for whatever is queued without waiting (shutdown, or the simulator after
its last arrival). Rules the driver keeps, in ``decide`` and ``wake_time`` so that the
simulator and the adapter keep them identically:

* with ``flush``, a decision that only shed requests is asked again at once, until a batch
  comes or the queue is empty (a flush must make progress);
* a wake-up asked for at or before ``now_s`` is moved to ``now_s + MIN_WAKE_STEP_S``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Protocol, Sequence, runtime_checkable

from .request import QueuedRequest

# A wake-up is never scheduled closer than this to now (progress guarantee).
MIN_WAKE_STEP_S = 1e-6


class _StrEnum(str, Enum):
    """A str enum that hashes, prints, reprs and formats as its value (``enum.StrEnum`` is 3.11+;
    Triton containers ship older Pythons), so it can key a dict or label a metric as is."""

    __str__ = str.__str__
    __repr__ = str.__repr__
    __format__ = str.__format__
    __hash__ = str.__hash__


class Zone(IntEnum):
    """The design's three load zones (decision layer)."""

    SAFE = 0
    NO_MANS_LAND = 1
    DANGER = 2

    @property
    def label(self) -> str:
        """The name logs and metric labels use."""
        return ZONE_NAMES[self]


ZONE_NAMES = ("safe", "no-mans-land", "danger")


class Mode(_StrEnum):
    """scheduling_decision: which policy the zone calls for."""

    DEFAULT = "default"  # safe zone: default dynamic batching
    EXPLICIT = "explicit"  # no-man's land or pre-warmed: explicit control
    EMERGENCY = "emergency"  # danger: the emergency policy


class Reason(_StrEnum):
    """Why a decision dispatched a batch, or why it did not."""

    FULL = "full"  # the size (or padded-token) limit is reached
    PREFERRED = "preferred"  # a preferred batch size (Triton's batcher)
    WINDOW = "window"  # the (elastic) batching window closed
    DEADLINE = "deadline"  # waiting longer would make a member miss its SLA
    NO_GAIN = "no_gain"  # the worth-its-wait rule: waiting would not pay
    COST = "cost"  # waiting would not pay (the adaptive-cost baseline's rule)
    DELAY = "delay"  # max_queue_delay expired (Triton's batcher)
    FLUSH = "flush"  # the caller asked for everything queued
    COMPENSATION = "compensation"  # a compensation batch after a P99 breach
    EMERGENCY = "emergency"  # an emergency small batch for urgent work (danger)
    DRAIN = "drain"  # danger, behind: full efficient batches at once
    # No batch:
    WAIT = "wait"  # hold the partial batch until wake_at_s (or an arrival)
    DILUTION = "dilution"  # danger: a gap between batches before the next one
    IDLE = "idle"  # nothing queued


class RejectReason(_StrEnum):
    """Why a request was taken out of the queue to be failed (a fixed message, no
    per-request numbers, so it also serves as a metric label)."""

    INFEASIBLE = "deadline infeasible: the estimated finish already misses the request's SLA"
    QUEUE_FULL = "queue full"
    UNFINISHED = "unfinished"


class Refusal(str):
    """A refusal's reason for one request: it compares, hashes and prints as its fixed
    ``RejectReason`` text (so it counts and labels as the reason), and ``detail`` carries
    this request's numbers - the estimate the refusal was made on - for its error message.
    """

    __slots__ = ("detail",)

    def __new__(cls, reason: str, detail: str = "") -> "Refusal":
        self = super().__new__(cls, str(reason))
        self.detail = detail
        return self

    def message(self) -> str:
        """What the client reads: the reason, then the numbers behind it."""
        return f"{self} ({self.detail})" if self.detail else str(self)


def refusal_message(reason: str) -> str:
    """The error message for a request refused with ``reason`` (a ``RejectReason``, or a
    ``Refusal`` with its numbers)."""
    return reason.message() if isinstance(reason, Refusal) else str(reason)


# The batch formers a profile can name (scheduler_core/formers.py registers each).
FORMER_NAMES = ("fifo", "length_aware", "length_aware_emergency", "shortest_first")

# The prefix every infeasibility refusal starts with (clients and tests match on it).
INFEASIBLE = "deadline infeasible"


class QueueFull(Exception):
    """The queue is at its bound already (the plugin's: ``scheduler.max_queued_requests``)."""


@dataclass(frozen=True)
class BatchDecision:
    """What one ``schedule`` call decided."""

    batch: tuple[QueuedRequest, ...]
    wake_at_s: float | None  # ask again at this time if nothing arrives; None = on arrival
    reason: str  # a ``Reason``
    window_ms: float
    utilization: float
    estimated_ms: float  # estimated run time of ``batch`` (0 when empty)
    # Requests taken out of the queue to be failed now (UNAVAILABLE), each with its reason:
    # the caller must answer every one of them.
    rejected: tuple[tuple[QueuedRequest, str], ...] = ()
    zone: int = Zone.SAFE
    mode: str = Mode.DEFAULT
    former: str = ""  # the batch former that formed (or declined to form) the batch


@runtime_checkable
class BatchingPolicy(Protocol):
    """What the simulator and the Triton adapter drive (see the module docstring)."""

    def submit(self, request: QueuedRequest, now_s: float) -> None:
        """Queue a request; raise ``QueueFull`` at the queue's bound."""

    def schedule(self, now_s: float, flush: bool = False) -> BatchDecision:
        """With the device free at ``now_s``: a batch to run now, or when to ask again."""

    def batch_started(self, batch: Sequence[QueuedRequest], now_s: float) -> None:
        """The caller dispatched ``batch`` at ``now_s``."""

    def batch_finished(self, batch: Sequence[QueuedRequest], started_s: float, now_s: float,
                       succeeded: bool = True) -> None:
        """``batch`` finished (its responses went out)."""

    def tick(self, now_s: float) -> None:
        """Run periodic layers (perception, decision) whose period has elapsed."""

    def drain(self) -> list[QueuedRequest]:
        """Empty the queue (shutdown): the caller must answer every returned request."""

    @property
    def queue_depth(self) -> int:
        """Requests queued now."""


def decide(policy: BatchingPolicy, now_s: float, flush: bool = False) -> BatchDecision:
    """Ask ``policy`` for a batch; with ``flush``, ask again while it only sheds requests.

    The returned decision carries every request shed on the way (``rejected``), which the
    caller must answer."""
    decision = policy.schedule(now_s, flush)
    shed = decision.rejected
    while flush and shed and not decision.batch and policy.queue_depth:
        decision = policy.schedule(now_s, flush)
        if not decision.rejected:
            break
        shed += decision.rejected
    if shed is not decision.rejected:
        decision = dataclasses.replace(decision, rejected=shed)
    return decision


def wake_time(decision: BatchDecision, now_s: float) -> float | None:
    """When to ask again if nothing arrives (None: only on an arrival); never earlier than
    ``now_s + MIN_WAKE_STEP_S``, so every step makes progress."""
    wake_at = decision.wake_at_s
    if wake_at is None:
        return None
    return max(wake_at, now_s + MIN_WAKE_STEP_S)
