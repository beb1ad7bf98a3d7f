"""Batch formers: which queued requests make the next batch (the execution layer).

A former looks at the queue and the control state and proposes a ``Candidate``; the
scheduler's dispatch rule then decides whether it goes now or waits. Formers are chosen by
name from the profile (``control.safe_zone_batching``, ``control.explicit_former``,
``control.emergency_former``) through ``make_former``, and the name travels with every
decision into the logs and the metrics.

* ``fifo``: Triton's default dynamic batching - the queue's prefix within the size and
  padded-token limits.
* ``length_aware``: the design's explicit control - urgency order, priority slots,
  compute-aware splitting by length (padding waste), reserved capacity for urgent arrivals.
  On a profile with a measured cost table the splitting reads the table: inside the
  device's flat, launch-bound region padding is free and the batch fills; past it a
  candidate joins only if what it adds to the batch's cost is at most what it would cost
  otherwise (its share of an efficient batch of its own length, or running alone).
  A candidate that would make a member miss its deadline is left out only where that pays:
  the guarded plan must keep more requests in time than the arrivals its extra launch
  delays (``_plan_in_time``). A padded queue known whole (a hold call's hand-over, with
  flush) that needs more than one batch runs as the cheapest cut of its sorted lengths
  (``batch_plan``), tightest deadline first, wherever that keeps everyone in time.
* ``length_aware_emergency``: the same in the danger zone - small emergency batches for
  urgent work while a burst is young, full efficient batches once behind, optional
  dilution and stopping non-critical work.
* ``shortest_first``: a sustained overload (``control.overload_former``) - of the
  feasible requests, shortest first, the batch that keeps the most in time.

Pure: every call takes ``now_s``.
"""

from __future__ import annotations

import bisect
import math

from .candidate import BatchFormer, Candidate
from .controller import ControlState
from .cost_model import CostEstimator
from .entry_queue import SMALL_QUEUE, EntryQueue, take_fifo, urgency_order
from .length_aware import EmergencyLengthAwareFormer, LengthAwareFormer
from .contract import Reason
from .profile import ControlConfig, SchedulerConfig

__all__ = ["BatchFormer", "Candidate", "FORMERS", "make_former"]


class FifoFormer:
    """Default dynamic batching: the FIFO prefix."""

    name = "fifo"

    def __init__(self, cfg: SchedulerConfig, control: ControlConfig, estimator: CostEstimator,
                 small_queue: int = SMALL_QUEUE):
        self.cfg = cfg
        self.estimator = estimator

    def form(self, queue: EntryQueue, state: ControlState, now_s: float,
             flush: bool) -> Candidate:
        compensation = state.compensation_size > 0
        cap = state.compensation_size if compensation else self.cfg.max_batch_size
        entries = take_fifo(queue, cap, self.cfg.max_batch_tokens)
        est_ms = self.estimator.estimate_ms([e.seq_len for e in entries])
        full = len(entries) < len(queue) or len(entries) >= cap
        immediate = Reason.FLUSH if flush else (Reason.COMPENSATION if compensation else None)
        deadline = min(e.deadline_s for e in entries)
        return Candidate(entries, est_ms, full and not compensation, immediate, deadline)


class ShortestFirstFormer(LengthAwareFormer):
    """A sustained overload (``Scheduler.overloaded``): the batch that keeps the most
    requests in time, cheapest first.

    Demand exceeds the device, so some requests are refused whatever the order; which
    ones decides the goodput. The feasible requests are taken shortest first (ascending
    lengths pad least, so every prefix is the cheapest batch of its size); of the
    prefixes within the size and padded-token limits, and within
    ``overload_call_budget_sla_fraction`` of the tightest SLA seen (what arrives while a
    batch runs must still make its deadline after it), the one whose estimated end keeps
    the most members in time is formed, less the members it would make late. Two floors
    keep that budget from making an overload of its own (``_budget_ms``;
    results/gpu_h200_2026-12-04): it is never below the shortest request's lone run plus
    ``max_padding_waste`` (a call is never shorter than one batch, and members that ride
    free must not wait for calls of their own), and it goes where batches within it would
    serve fewer requests a second than arrive (the perception's arrival rate) while full
    batches would serve them all. In a true overload, where even full batches fall
    behind, the budget holds. What is left (the longest, and the hopeless) waits and is
    refused once its deadline is out of reach, before that deadline; intake hold refuses
    a call's tail at its budget."""

    name = "shortest_first"

    def form(self, queue: EntryQueue, state: ControlState, now_s: float,
             flush: bool) -> Candidate:
        cfg, est = self.cfg, self.estimator
        cap = cfg.max_batch_size
        _, feasible, top, lengths = urgency_order(queue, now_s, self.control, est.correction,
                                                  True, 8 * cap, self.small_queue)
        items = queue.items
        # (length, urgency rank): shortest first, equal lengths most urgent first.
        order = sorted((n, rank) for rank, (ok, n) in enumerate(zip(feasible, lengths)) if ok)
        if not order:  # nothing feasible (serve_late keeps such requests): cheapest anyway
            order = sorted((n, rank) for rank, n in enumerate(lengths))
        cap_ms = (self.control.overload_call_budget_sla_fraction * state.tightest_sla_ms
                   if state.tightest_sla_ms else math.inf)
        if cap_ms < math.inf:
            cap_ms = self._budget_ms(cap_ms, order, state.observation.arrival_rate_rps)
        best, best_met, best_end_s = 1, -1, math.inf
        real = squared = 0
        deadlines: list[float] = []  # the prefix's deadlines, sorted
        for k, (n, rank) in enumerate(order[:cap], 1):
            if n * k > cfg.max_batch_tokens and k > 1:
                break
            real, squared = real + n, squared + n * n
            bisect.insort(deadlines, items[top[rank]].deadline_s)
            batch_ms = est.estimate_parts_ms(k, n, real, squared)
            if batch_ms > cap_ms and k > 1:
                break
            end_s = now_s + batch_ms / 1000.0
            met = len(deadlines) - bisect.bisect_left(deadlines, end_s)
            if met > best_met:
                best, best_met, best_end_s = k, met, end_s
        chosen = [items[top[rank]] for _, rank in order[:best]]
        members = [e for e in chosen if e.deadline_s >= best_end_s] or chosen[:1]
        return Candidate(members, self._lengths_ms([e.seq_len for e in members]), True,
                         Reason.FLUSH if flush else Reason.DRAIN,
                         min(e.deadline_s for e in members))

    def _budget_ms(self, budget_ms: float, order: list[tuple[int, int]],
                   rate_rps: float) -> float:
        """The batch cost the overload call budget allows: ``budget_ms``, at least the
        shortest request's lone run plus ``max_padding_waste``, and no limit where batches
        within it would serve fewer requests a second than arrive while full batches would
        serve them all (capacities at the queue's median length)."""
        est = self.estimator
        n = order[0][0]
        budget_ms = max(budget_ms,
                        est.uniform_ms(1, n) * (1.0 + self.control.max_padding_waste))
        if rate_rps <= 0:
            return budget_ms
        median = order[len(order) // 2][0]
        if self._capacity_rps(median, budget_ms) < rate_rps <= self._capacity_rps(median,
                                                                                  math.inf):
            return math.inf
        return budget_ms

    def _capacity_rps(self, n: int, limit_ms: float) -> float:
        """Requests a second served by the largest batch of ``n``-token requests within
        the size and token limits whose estimate is within ``limit_ms`` (one request at
        least). Estimates grow with the batch, so a bisection finds it in a few of them:
        this runs at every overload decision."""
        cfg, est = self.cfg, self.estimator

        def batch_ms(m: int) -> float:
            return est.uniform_ms(m, n)

        lo = hi = max(1, min(cfg.max_batch_size, cfg.max_batch_tokens // max(n, 1)))
        if batch_ms(hi) > limit_ms:
            lo = 1
            while hi - lo > 1:  # batch_ms(lo) within the limit (or lo == 1), hi past it
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if batch_ms(mid) <= limit_ms else (lo, mid)
        ms = batch_ms(lo)
        return lo * 1000.0 / ms if ms > 0 else math.inf


FORMERS = {cls.name: cls for cls in (FifoFormer, LengthAwareFormer, EmergencyLengthAwareFormer,
                                     ShortestFirstFormer)}


def make_former(name: str, cfg: SchedulerConfig, control: ControlConfig,
                estimator: CostEstimator, small_queue: int = SMALL_QUEUE) -> BatchFormer:
    """The former called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        cls = FORMERS[name]
    except KeyError:
        raise ValueError(f"unknown batch former {name!r}; expected one of "
                         f"{sorted(FORMERS)}") from None
    return cls(cfg, control, estimator, small_queue)
