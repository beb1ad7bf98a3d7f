"""The queue the scheduler owns: entries in arrival order, numpy columns beside them,
and the scans over it (urgency ranking, infeasible requests, the FIFO prefix).

Pure: every function takes ``now_s``. The vectorised scans decide exactly as the scalar
ones (the same IEEE operations, or an exact re-check where they could differ); queues of
up to ``small_queue`` entries take the scalar path, which is cheaper there and is the
oracle the vectorised path is tested against (tests/unit/scheduler_core).
"""

from __future__ import annotations

import math
from itertools import islice
from typing import Iterable, Iterator

import numpy as np

from .profile import ControlConfig
from .request import QueuedRequest


class Entry:
    """A queued request plus what the scheduler keeps about it."""

    __slots__ = ("req", "seq_len", "logical_arrival_s", "alone_ms", "efficient_ms",
                 "deadline_s", "slot")

    def __init__(self, req: QueuedRequest, logical_arrival_s: float, alone_ms: float,
                 efficient_ms: float):
        self.req = req
        self.seq_len = req.seq_len
        self.logical_arrival_s = logical_arrival_s
        # Uncorrected estimates: running it alone, and in an efficient batch of its length.
        self.alone_ms = alone_ms
        self.efficient_ms = efficient_ms
        self.deadline_s = req.deadline_s  # the same float, computed once
        self.slot = -1  # index in EntryQueue.items while queued


# Urgency scores are first computed with numpy, decay ** x as exp(x * ln(decay)), which is
# within about 1e-15 (absolute) of the libm pow() that Python's ** uses; where that could
# change the order or the urgent flag, the score is recomputed exactly (exact_rank). The
# margin, relative to the scores' size, is many orders of magnitude above that error.
URGENCY_MARGIN = 1e-9
# Up to this many queued requests, scanning the queue in plain Python beats numpy's fixed
# cost per call (measured with scripts/bench_decision.py --depth).
SMALL_QUEUE = 64


def exact_rank(score: np.ndarray, exact_ok: np.ndarray, threshold: float, exact
                ) -> tuple[np.ndarray, np.ndarray]:
    """Rank candidates by an exact score known only approximately, without computing it
    for (nearly) all of them.

    ``score``: approximate scores, in arrival order, each within ``URGENCY_MARGIN * (1 +
    |score|)`` of the exact one - except where ``exact_ok`` is false, where the score is
    exact already. ``exact(i)`` computes candidate ``i``'s exact score. Returns the indices
    in the order of the exact scores (highest first, ties in arrival order) and, per
    candidate, ``exact_ok & (exact score >= threshold)``.

    Two candidates whose approximate scores are further apart than twice the margin are in
    the same order by the exact scores; so are a score and ``threshold``. The exact score is
    computed only for candidates in a run of nearly equal scores (after sorting) or nearly
    at the threshold - typically none.
    """
    order = np.argsort(-score, kind="stable")
    if not order.size:
        return order, exact_ok
    ranked = score[order]
    margin = 2.0 * URGENCY_MARGIN * (1.0 + max(abs(float(ranked[0])), abs(float(ranked[-1])),
                                                  abs(threshold)))
    close = ranked[:-1] - ranked[1:] <= margin
    near = np.abs(ranked - threshold) <= margin
    if close.any() or near.any():
        near[:-1] |= close
        near[1:] |= close
        redo = order[near & exact_ok[order]]
        if redo.size:
            score = score.copy()
            for i in redo.tolist():
                score[i] = exact(i)
            order = np.argsort(-score, kind="stable")
    return order, exact_ok & (score >= threshold)


class EntryQueue:
    """The queue in arrival order with O(1) removal anywhere, and numpy columns beside it.

    Entries sit in slots ``lo .. hi-1`` of ``items`` (``None`` where one was taken out);
    ``deadline``, ``arrival``, ``alone``, ``efficient``, ``length`` and ``alive`` mirror them
    slot by slot, so a scan over the whole queue (infeasible requests, urgency scores, the tightest
    deadline) is a few vectorised operations instead of a Python loop. A removed slot's
    deadline is +inf, so it is never infeasible and never the tightest. Slot order is
    arrival order; the holes are squeezed out (``_compact``) when they outnumber the
    entries by more than 64 or the arrays are full.
    """

    def __init__(self, capacity: int = 256):
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: list[Entry | None] = [None] * capacity
        self.deadline = np.full(capacity, np.inf)
        self.arrival = np.zeros(capacity)
        self.alone = np.zeros(capacity)
        self.efficient = np.zeros(capacity)
        self.length = np.zeros(capacity, dtype=np.int64)
        self.alive = np.zeros(capacity, dtype=bool)
        self.lo = self.hi = self.n = 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Entry]:
        # C-level iteration (no generator frame): entries are always truthy, holes None.
        return filter(None, islice(self.items, self.lo, self.hi))

    def first(self) -> Entry:
        return self.items[self.lo]  # type: ignore[return-value]

    def append(self, e: Entry) -> None:
        if self.hi == self.capacity:
            self._compact(grow=2 * self.n > self.capacity)
        i = self.hi
        self.items[i] = e
        e.slot = i
        self.deadline[i] = e.deadline_s
        self.arrival[i] = e.req.arrival_s
        self.alone[i] = e.alone_ms
        self.efficient[i] = e.efficient_ms
        self.length[i] = e.seq_len
        self.alive[i] = True
        self.hi = i + 1
        self.n += 1

    def extend(self, entries: list[Entry]) -> None:
        """``append`` each of ``entries`` in turn: where they fit without a compaction,
        each column written once for them all (a hold call's hand-over)."""
        i, m = self.hi, len(entries)
        if i + m > self.capacity:
            for e in entries:
                self.append(e)
            return
        j = i + m
        self.items[i:j] = entries
        for slot, e in enumerate(entries, i):
            e.slot = slot
        self.deadline[i:j] = [e.deadline_s for e in entries]
        self.arrival[i:j] = [e.req.arrival_s for e in entries]
        self.alone[i:j] = [e.alone_ms for e in entries]
        self.efficient[i:j] = [e.efficient_ms for e in entries]
        self.length[i:j] = [e.seq_len for e in entries]
        self.alive[i:j] = True
        self.hi = j
        self.n += m

    def discard(self, entries: Iterable[Entry]) -> None:
        """Take queued entries out (each at most once)."""
        items = self.items
        slots = []
        for e in entries:
            slots.append(e.slot)
            items[e.slot] = None
            e.slot = -1
        if len(slots) > 8:
            self.deadline[slots] = math.inf
            self.alive[slots] = False
        else:  # cheaper one by one than as an index array
            deadline, alive = self.deadline, self.alive
            for i in slots:
                deadline[i] = math.inf
                alive[i] = False
        self.n -= len(slots)
        if not self.n:
            self.alive[self.lo:self.hi] = False
            self.lo = self.hi = 0
            return
        lo = self.lo
        while items[lo] is None:
            lo += 1
        self.lo = lo
        if self.hi - lo > 2 * self.n + 64:
            self._compact(grow=False)

    def clear(self) -> None:
        for e in self:
            e.slot = -1
        self._allocate(self.capacity)

    def _compact(self, grow: bool) -> None:
        """Squeeze the holes out (slot order kept); double the capacity if ``grow``."""
        lo, hi = self.lo, self.hi
        live = [e for e in self.items[lo:hi] if e is not None]
        idx = np.flatnonzero(self.alive[lo:hi]) + lo
        columns = (self.deadline, self.arrival, self.alone, self.efficient, self.length)
        if grow:
            old = columns
            self._allocate(2 * self.capacity)
            columns = (self.deadline, self.arrival, self.alone, self.efficient, self.length)
            for new, col in zip(columns, old):
                new[:len(live)] = col[idx]
        else:
            for col in columns:
                col[:len(live)] = col[idx]
            self.deadline[len(live):hi] = np.inf
            self.alive[len(live):hi] = False
        m = len(live)
        self.alive[:m] = True
        self.items[:hi] = live + [None] * (hi - m)
        for k, e in enumerate(live):
            e.slot = k
        self.lo, self.hi, self.n = 0, m, m

    def min_deadline(self) -> float:
        if not self.n:
            return math.inf
        return float(self.deadline[self.lo:self.hi].min())


def take_fifo(queue: Iterable, max_batch_size: int, max_batch_tokens: int) -> list:
    """The longest queue prefix within the batch-size and padded-token limits.

    Items need a ``seq_len``. The first is always taken, even alone over the token limit,
    so an oversized request can never block the queue.
    """
    batch: list = []
    longest = 0
    for item in queue:
        if len(batch) >= max_batch_size:
            break
        new_longest = max(longest, item.seq_len)
        if batch and new_longest * (len(batch) + 1) > max_batch_tokens:
            break
        batch.append(item)
        longest = new_longest
    return batch


def urgency_order(queue: EntryQueue, now_s: float, ctl: ControlConfig, correction: float,
                  behind: bool, limit: int, small_queue: int = SMALL_QUEUE
                  ) -> tuple[list[bool], list[bool], list[int], list[int]]:
    """The ``limit`` most urgent queued requests, most urgent first, as parallel lists:
    whether each is urgent (feasible and urgency >= ``urgent_threshold``), whether its
    deadline is still feasible (alone, or efficiently when ``behind``), its slot in
    ``queue.items`` and its length.

    Urgency = urgency_decay_rate ** (slack_ms / urgency_slack_unit_ms) + aging_per_s *
    waited_s; a request that cannot make its deadline even alone scores -1 + aging
    instead (it goes last, but aging still lifts it, so nothing starves). The order is
    by urgency, most urgent first, equal urgency in arrival order. ``correction`` scales
    the entries' uncorrected cost estimates.
    """
    q = queue
    corr = correction
    decay, unit = ctl.urgency_decay_rate, ctl.urgency_slack_unit_ms
    # (The vectorised form needs 0 < decay < 1 and unit > 0, as profiles are validated
    # to have; anything else takes the scalar definition, errors included.)
    if q.n <= small_queue or not (0.0 < decay < 1.0 and unit > 0.0):
        return _urgency_order_scalar(q, now_s, ctl, corr, behind, limit)
    return _urgency_order_vectorised(q, now_s, ctl, corr, behind, limit)


def _urgency_order_scalar(q: EntryQueue, now_s: float, ctl: ControlConfig, corr: float,
                          behind: bool, limit: int
                          ) -> tuple[list[bool], list[bool], list[int], list[int]]:
    """``urgency_order`` by its definition, one entry at a time (the oracle)."""
    decay, unit, aging = ctl.urgency_decay_rate, ctl.urgency_slack_unit_ms, ctl.aging_per_s
    threshold = ctl.urgent_threshold
    scored = []
    for e in q:
        slack_ms = (e.deadline_s - now_s) * 1000.0 - (
            e.efficient_ms if behind else e.alone_ms) * corr
        waited_s = now_s - e.req.arrival_s
        if slack_ms >= 0:
            scored.append((decay ** (slack_ms / unit) + aging * waited_s, True, e))
        else:
            scored.append((-1.0 + aging * waited_s, False, e))
    scored.sort(key=lambda t: -t[0])  # stable: equal urgency keeps arrival order
    del scored[limit:]
    return ([ok and u >= threshold for u, ok, _ in scored], [ok for _, ok, _ in scored],
            [e.slot for _, _, e in scored], [e.seq_len for _, _, e in scored])


def _urgency_order_vectorised(q: EntryQueue, now_s: float, ctl: ControlConfig, corr: float,
                              behind: bool, limit: int
                              ) -> tuple[list[bool], list[bool], list[int], list[int]]:
    """``urgency_order`` over numpy columns: the same order, and every urgent flag the same
    (see exact_rank). Needs 0 < decay < 1 and unit > 0."""
    decay, unit, aging = ctl.urgency_decay_rate, ctl.urgency_slack_unit_ms, ctl.aging_per_s
    threshold = ctl.urgent_threshold
    lo, hi = q.lo, q.hi
    cost = (q.efficient if behind else q.alone)[lo:hi]
    # The scalar expressions above, elementwise: the same floats (IEEE).
    slack = (q.deadline[lo:hi] - now_s) * 1000.0 - cost * corr
    ok = slack >= 0
    aged = aging * (now_s - q.arrival[lo:hi])
    # Approximate scores (exp for **: see URGENCY_MARGIN); slack clipped at 0 so a
    # long-missed deadline cannot overflow (those score -1 + aging, exactly, anyway).
    approx = np.where(ok, np.exp(np.maximum(slack, 0.0) * (math.log(decay) / unit)),
                      -1.0) + aged
    alive = q.alive[lo:hi]
    approx[~alive] = -np.inf
    if limit < q.n:
        # Whatever could be among the first ``limit`` (by the exact score) is within the
        # margin of the limit-th largest approximate score, or above it.
        kth = np.partition(approx, approx.size - limit)[approx.size - limit]
        cand = np.flatnonzero(approx >= kth - 2.0 * URGENCY_MARGIN * (1.0 + abs(kth)))
    else:
        cand = np.flatnonzero(alive)
    ok_c = ok[cand]

    def exact(i: int) -> float:
        """The scalar formula for candidate ``i`` (feasible ones only)."""
        return decay ** (float(slack[cand[i]]) / unit) + float(aged[cand[i]])

    order, urgent = exact_rank(approx[cand], ok_c, threshold, exact)
    order = order[:limit]
    slots = cand[order] + lo
    return (urgent[order].tolist(), ok_c[order].tolist(), slots.tolist(),
            q.length[slots].tolist())


def infeasible_entries(queue: EntryQueue, now_s: float, correction: float, behind: bool,
                       small_queue: int = SMALL_QUEUE) -> list[Entry]:
    """Queued requests that miss their deadline even run at once, alone - or, when
    ``behind``, in an efficient batch; in queue order."""
    q = queue
    if not q.n:
        return []
    corr = correction
    lo, hi = q.lo, q.hi
    if q.n <= small_queue:
        return [e for e in q if now_s + (e.efficient_ms if behind else e.alone_ms)
                * corr / 1000.0 > e.deadline_s]
    # The same expression elementwise: the same IEEE operations, so the same
    # answers; taken-out slots have deadline +inf.
    cost = (q.efficient if behind else q.alone)[lo:hi]
    late = np.flatnonzero(now_s + cost * corr / 1000.0 > q.deadline[lo:hi])
    items = q.items
    return [items[lo + i] for i in late.tolist()]  # in queue order


def infeasible_detail(e: Entry, now_s: float, start_s: float, margin_s: float, behind: bool,
                      correction: float) -> str:
    """The numbers an infeasibility refusal was made on, as the client reads them: how long
    the request waited, when it could start, what running it costs by the estimate, against
    its SLA (the same expression as ``infeasible_entries``)."""
    seed_ms = e.efficient_ms if behind else e.alone_ms
    run_ms = seed_ms * correction
    finish_ms = (start_s - margin_s - e.req.arrival_s) * 1000.0 + run_ms
    start = (f"starts in {(start_s - now_s) * 1000.0:.1f} ms, after the batch just dispatched"
             if start_s > now_s else "starts now")
    margin = f" (less the {margin_s * 1000.0:.1f} ms margin)" if margin_s else ""
    how = "in an efficient batch (queue behind)" if behind else "alone"
    return (f"estimated finish {finish_ms:.1f} ms after arrival > SLA {e.req.sla_ms:.1f} ms: "
            f"waited {(now_s - e.req.arrival_s) * 1000.0:.1f} ms, {start}{margin}, then runs "
            f"{run_ms:.1f} ms {how}: {e.seq_len} tokens, estimate {seed_ms:.1f} ms x cost "
            f"correction {correction:.2f}")


def late_even_alone(e: Entry, correction: float) -> bool:
    """Whether ``e``'s SLA is below its own run time alone: hopeless at any load."""
    return e.alone_ms * correction > e.req.sla_ms
