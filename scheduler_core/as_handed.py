"""The as-handed rule: when intake hold's hand-over runs whole, as Triton's batcher
handed it over, because it is the batch ``Scheduler.schedule`` would form from it anyway
(known from a few sums instead of a decision's scans). ``Scheduler`` has it as a base:
it reads the scheduler's own configuration, estimator, control loop and queue.
"""

from __future__ import annotations

import math
import operator
from typing import Sequence

from .batch_plan import cheapest_split_ms
from .contract import Reason
from .request import QueuedRequest


class _HandedOver:
    """A hand-over the caller holds, as perception reads a queue (``takes_as_handed``)."""

    __slots__ = ("n", "deadline_s")

    def __init__(self, n: int, deadline_s: float):
        self.n, self.deadline_s = n, deadline_s

    def __len__(self) -> int:
        return self.n

    def min_deadline(self) -> float:
        return self.deadline_s


def _seq_len(request: QueuedRequest) -> int:
    return request.seq_len


def _extremes(batch: Sequence[QueuedRequest]) -> tuple[QueuedRequest, float, float]:
    """A hand-over's tightest member (the first with the smallest SLA), its first
    deadline and its oldest arrival (``batch`` not empty). One loop, no generator: it
    runs once per call on the server's path."""
    tightest = batch[0]
    first_deadline_s, oldest_arrival_s = tightest.deadline_s, tightest.arrival_s
    for r in batch:
        if r.sla_ms < tightest.sla_ms:
            tightest = r
        deadline_s = r.deadline_s  # a property: read once
        if deadline_s < first_deadline_s:
            first_deadline_s = deadline_s
        if r.arrival_s < oldest_arrival_s:
            oldest_arrival_s = r.arrival_s
    return tightest, first_deadline_s, oldest_arrival_s


class AsHandedRule:
    """``takes_as_handed`` for ``Scheduler`` (see the module docstring)."""

    # The hand-over taken and not counted yet (``count_taken``): (now, its smallest SLA,
    # its estimate whole, its batches' sizes, the mode).
    _taken: tuple | None = None

    def takes_as_handed(self, now_s: float, batch: Sequence[QueuedRequest]) -> float | None:
        """A hand-over the caller holds (intake hold's call) as one batch, as Triton's
        batcher handed it over, where that is the batch ``schedule`` would form from it
        anyway, known from a few sums instead of a decision's scans. A number (the batch's
        estimate, ms): ``batch`` is taken (the caller runs it, then ``batch_started`` /
        ``batch_finished`` as for any batch), its arrivals and its dispatch counted as
        ``submit`` and ``schedule`` count theirs once the caller reports it started
        (``count_taken``: the server launches it first, and counts while it runs) or at
        the scheduler's next entry, whichever comes first; None: nothing changed but the
        control loop's tick, and the caller submits the requests and asks ``schedule``.

        The conditions, each one a reason ``schedule`` could form something else:

        * nothing is queued; no compensation batch is due; no sustained overload; the
          mode's former is FIFO or length-aware (default batching, or explicit control:
          not the emergency policy's small batches);
        * the batch fits one batch (``max_batch_size``, ``max_batch_tokens``);
        * every member ends in time in it, by the estimate (less the infeasibility
          margin): none is refused, and no deadline guard or urgency order has anything
          to change; with a length-aware former, the batch is also within the reserved
          capacity's duration cap;
        * on a padded device, no split into two batches saves a launch
          (``_no_split_pays``): the former splits only where its split costs less than
          the whole batch, and no split of more batches pays where none of two does.

        Outside explicit control this is the design's flow chart (batch conventionally, no
        per-request decision); inside it, the decision it would take. The tick sees the
        hand-over as the queue (depth, tightest deadline), as it would once submitted, and
        the late share is measured (none late), so the control loop follows the load
        whichever path the call takes."""
        taken = self._take(now_s, batch, False)
        return taken[1] if taken is not None else None

    def takes_planned(self, now_s: float, batch: Sequence[QueuedRequest]
                      ) -> tuple[list[QueuedRequest], float, list[QueuedRequest], float] | None:
        """``takes_as_handed``, and where its one condition that fails is the split check
        (a split of the hand-over in two costs the device less), the two batches
        ``schedule`` forms from it: (the first batch, its estimate, the rest, its
        estimate; no rest where taken whole), counted as ``takes_as_handed`` counts one
        (both dispatches); None: nothing changed but the tick.

        The split is the length-aware former's (``LengthAwareFormer._cheapest_prefix``:
        ``batch_plan.cheapest_split_ms``, the ``k`` shortest first, within the duration
        cap), taken where every member ends in time in its batch by the estimate (less
        the infeasibility margin), and where at the first batch's estimated end the
        former would form the rest whole (no split of the rest pays): so nothing stays
        queued for ``schedule`` to shed, and no second decision runs. The control state
        is the one this tick left (a zone change is acted on from the next call, as for
        a launch first)."""
        taken = self._take(now_s, batch, True)
        if taken is None:
            return None
        order, first_ms, k, rest_ms = taken
        return order[:k], first_ms, order[k:], rest_ms

    def _take(self, now_s: float, batch: Sequence[QueuedRequest], split: bool):
        """``takes_as_handed`` (``split`` False) or ``takes_planned``: None, or (the
        hand-over in its batches' order, the first's estimate, its size, the rest's)."""
        self.count_taken()
        n = len(batch)
        if not n or self._queue or n > self.cfg.max_batch_size:
            return None
        lengths = [r.seq_len for r in batch]
        if n * max(lengths) > self.cfg.max_batch_tokens:
            return None
        # ``schedule`` ticks after ``submit`` registered the SLAs, so a perception on that
        # tick sees the hand-over's tightest SLA (the reserved-capacity cap follows it):
        # registered before this tick too. Only the smallest can set it; one infeasible
        # even alone is declined below anyway.
        tightest, first_deadline, oldest_arrival = _extremes(batch)
        self.controller.note_sla(tightest.sla_ms, self._alone_ms(tightest.seq_len))
        self.controller.tick(now_s, _HandedOver(n, first_deadline))
        state = self.controller.state
        whole = self._whole(now_s, lengths, first_deadline, state.tightest_sla_ms,
                            oldest_arrival)
        if whole is None:
            return None
        batch_ms, split_pays = whole
        if not split_pays:  # every member ends in time: the smallest SLA a feasible one
            self._taken = (now_s, tightest.sla_ms, batch_ms, (n,), state.mode)
            return batch, batch_ms, n, 0.0
        planned = self._split(now_s, batch, batch_ms, state) if split else None
        if planned is not None:
            order, k, first_ms, rest_ms = planned
            self._taken = (now_s, tightest.sla_ms, batch_ms, (k, n - k), state.mode)
            return order, first_ms, k, rest_ms
        return None

    def _split(self, now_s: float, batch: Sequence[QueuedRequest], whole_ms: float, state
               ) -> tuple[list[QueuedRequest], int, float, float] | None:
        """``takes_planned``'s split of ``batch`` (``whole_ms`` whole, a split cheaper):
        (the hand-over shortest first, the first batch's size, its estimate, the rest's),
        or None where the former would not run it as two batches in time."""
        cfg, former = self.cfg, self.formers[state.mode]
        if former.name == "fifo":
            return None
        cap_ms = math.inf
        if not former.emergency and state.tightest_sla_ms:
            cap_ms = (1.0 - self.control.reserved_capacity) * 0.5 * state.tightest_sla_ms
        order = sorted(batch, key=_seq_len)
        lengths = [r.seq_len for r in order]
        best = cheapest_split_ms(self.estimator, lengths, whole_ms, cfg.batch_host_ms,
                                 cfg.max_batch_tokens, cap_ms)
        if best is None:
            return None
        k, first_ms, rest_ms = best
        margin_s = self.control.infeasible_margin_ms * self.estimator.time_scale / 1000.0
        first_end_s = now_s + first_ms / 1000.0
        if (min(r.deadline_s for r in order[:k]) - margin_s < first_end_s
                or min(r.deadline_s for r in order[k:]) - margin_s
                < first_end_s + rest_ms / 1000.0):
            return None
        rest = lengths[k:]
        if rest_ms > cap_ms or cheapest_split_ms(
                self.estimator, rest, rest_ms, cfg.batch_host_ms, cfg.max_batch_tokens,
                cap_ms) is not None:
            return None  # the rest is decided at the first batch's end, as it comes
        return order, k, first_ms, rest_ms

    def launches_as_handed(self, now_s: float, lengths: Sequence[int],
                           arrival_s: float) -> float | None:
        """``takes_as_handed`` before the hand-over's SLAs are read (intake hold's launch
        first: the batch starts before its bookkeeping, which runs beside the device): the
        hand-over's lengths, all arrived at ``arrival_s``. A number (the batch's estimate,
        ms): launch it, then report it with its SLAs (``took_as_handed``); None: nothing
        changed, the caller decodes the call whole and asks ``takes_as_handed``.

        Its members' SLAs are taken as the floor (``Controller.sla_floor_ms``, the
        smallest any request noted so far had; none yet: it declines), its tightest as
        the smaller of the floor and the last perception's, and the control state as the
        last tick left it: the tick runs in ``took_as_handed``, so a zone change is acted
        on from the next call. So wherever it takes, ``takes_as_handed`` on the same state
        with no period due takes the same batch, with the same estimate, for any SLAs at
        or above the floor. A member whose SLA is below it (the first of its kind) has
        run: ``took_as_handed`` notes it, and the floor follows."""
        self.count_taken()
        n, floor = len(lengths), self.controller.sla_floor_ms
        if not n or floor == math.inf or self._queue or n > self.cfg.max_batch_size:
            return None
        tightest = self.controller.state.tightest_sla_ms
        whole = self._whole(now_s, lengths, arrival_s + floor / 1000.0,
                            min(tightest, floor) if tightest else floor, arrival_s)
        return whole[0] if whole is not None and not whole[1] else None

    def took_as_handed(self, now_s: float, batch: Sequence[QueuedRequest], batch_ms: float,
                       mode) -> None:
        """The hand-over ``launches_as_handed`` took at ``now_s`` (``batch_ms``, in
        ``mode``), its SLAs read: ``batch``, the members the caller serves (those it
        refused at once have left; one refused for its passed timeout noted its SLA in
        ``hand_over_expired``). Noted and ticked as ``takes_as_handed`` notes and ticks a
        hand-over before it decides, and counted as it counts one once it starts
        (``count_taken``)."""
        loop = self.controller
        if not batch:
            return
        tightest, first_deadline_s, _ = _extremes(batch)
        loop.note_sla(tightest.sla_ms, self._alone_ms(tightest.seq_len))
        loop.tick(now_s, _HandedOver(len(batch), first_deadline_s))
        self._taken = (now_s, tightest.sla_ms, batch_ms, (len(batch),), mode)

    def _alone_ms(self, length: int) -> float:
        """``CostEstimator.uniform_ms(1, length)``, from the memo ``submit`` reads."""
        return self._estimates(length)[0] * self.estimator.correction

    def _whole(self, now_s: float, lengths: Sequence[int], first_deadline_s: float,
               tightest_sla_ms: float | None, oldest_arrival_s: float
               ) -> tuple[float, bool] | None:
        """(the hand-over's estimate in ms, whether a split of it pays) where the control
        state as it is forms it whole but for the split check, every member in time by
        ``first_deadline_s`` (none arrived before ``oldest_arrival_s``;
        ``takes_as_handed``'s conditions after the first); None where not."""
        cfg, est, state = self.cfg, self.estimator, self.controller.state
        n, longest, real = len(lengths), max(lengths), sum(lengths)
        if n * longest > cfg.max_batch_tokens:
            return None
        former = self.formers[state.mode]
        if state.compensation_size > 0 or self.overloaded:
            return None
        if former.name == "length_aware_emergency":
            if not self._emergency_forms_whole(former, now_s, lengths, first_deadline_s,
                                               oldest_arrival_s):
                return None
        elif former.name not in ("fifo", "length_aware"):
            return None
        squared = sum(map(operator.mul, lengths, lengths))
        batch_ms = est.estimate_parts_ms(n, longest, real, squared)
        margin_s = self.control.infeasible_margin_ms * est.time_scale / 1000.0
        if now_s + batch_ms / 1000.0 > first_deadline_s - margin_s:
            return None
        if former.name != "fifo":
            if tightest_sla_ms and not former.emergency and batch_ms > (
                    (1.0 - self.control.reserved_capacity) * 0.5 * tightest_sla_ms):
                return None
            if est.cost_mode == "padded" and not self._no_split_pays(
                    lengths, n, longest, real, squared, batch_ms):
                return batch_ms, True
        return batch_ms, False

    def _emergency_forms_whole(self, former, now_s: float, lengths: Sequence[int],
                               first_deadline_s: float, oldest_arrival_s: float) -> bool:
        """Whether the danger zone's emergency former (``length_aware_emergency``) keeps a
        hand-over whole where ``_whole_ms``'s other conditions hold, as the length-aware
        former does: neither dilution nor stopping non-critical work is on, and it opens
        no urgent lane of small batches (``LengthAwareFormer._limits``). The lane opens
        only for a queue short of a full batch whose most urgent member is urgent and
        where small batches pay at that member's length; its SLAs may not be read yet (a
        launch first), so neither is asked of one member: of the lengths, small batches
        pay at none; of the urgency, an upper bound (the first deadline, the longest
        lone run, the oldest arrival) stays below ``urgent_threshold``. Outside its lane
        the emergency former prices a hold call's whole queue as the length-aware former
        does (``LengthAwareFormer.form``'s plans), so on a padded measured table too the
        split check after this (``_no_split_pays``) answers for both. In steady load
        near the danger zone's bound that is most hand-overs: the emergency policy would
        change no batch, and the call takes the path a safe one takes."""
        ctl, cfg, est = self.control, self.cfg, self.estimator
        if ctl.dilution or ctl.emergency_stop_noncritical:
            return False
        n, longest = len(lengths), max(lengths)
        if n >= cfg.max_batch_size:
            return True
        # On the formula, a full batch's cost over a small one's, and a lone run's cost,
        # grow with the length: the longest answers for all. A (ragged) table is asked
        # each length.
        distinct = (longest,) if est.table is None else set(lengths)
        if not any(map(former._small_batches_pay, distinct)):
            return True
        decay, unit = ctl.urgency_decay_rate, ctl.urgency_slack_unit_ms
        if not (0.0 < decay < 1.0 and unit > 0.0):
            return False
        alone_ms = est.base_alone_max_ms(distinct)
        slack_ms = (first_deadline_s - now_s) * 1000.0 - alone_ms * est.correction
        if slack_ms < 0.0:
            return False
        urgency = decay ** (slack_ms / unit) + ctl.aging_per_s * (now_s - oldest_arrival_s)
        return urgency < ctl.urgent_threshold * (1.0 - 1e-9)

    def count_taken(self) -> None:
        """Count the hand-over ``takes_as_handed`` (or ``takes_planned``) took last, once:
        its arrivals (the smallest SLA a feasible one), the late share's hand-over (none
        late) and its batches' dispatches."""
        taken, self._taken = self._taken, None
        if taken is None:
            return
        now_s, sla_ms, batch_ms, sizes, mode = taken
        n = sum(sizes)
        self.controller.on_arrival(now_s, sla_ms, batch_ms, n)
        self.overload.arrived()
        self.overload.measure(now_s, 0, n)
        for size in sizes:  # one dispatch a batch (``takes_planned``: two)
            self._count_dispatch(size, mode, Reason.FLUSH, False)

    def _no_split_pays(self, lengths: list[int], n: int, longest: int, real: int,
                       squared: int, whole_ms: float) -> bool:
        """Whether a padded batch (``whole_ms`` by the estimate) costs less whole than
        split in two, time-scaled, where a split costs one more launch and one more
        batch's host time (``batch_host_ms``).

        On a measured table the former's own pricing answers
        (``batch_plan.cheapest_split_ms``, as ``LengthAwareFormer._cheapest_prefix``
        prices a hold call's queue, with no duration cap: a split it would leave out for
        the cap declines here, and the decision runs). Not the line the table was fitted
        with: once the online refit has moved the table's cells unevenly, a split can save
        more than the line's padding (a hand-over of seven 1-token requests and one of
        497 after batches ran at 3x their estimate). On the formula (no table) the
        exact rule follows: the cheapest split of two puts a shortest-first prefix of
        ``k`` requests, longest ``L``, beside the rest, and saves
        ``k * (per_token * (longest - L) + per_token_squared * (longest^2 - L^2))``
        against one more launch (``per_sequence`` is paid either way): its padding
        costing less than a launch is enough, and cheap. Where no such
        split saves a launch, none of more batches does either: each further cut saves
        at most what a prefix split of two saves, and costs a launch more. So this is
        exactly when ``LengthAwareFormer`` keeps the batch whole: it splits only where
        its split (one batch, then the rest as one) costs less than the whole."""
        est = self.estimator
        if est.table is not None:
            return cheapest_split_ms(est, sorted(lengths), whole_ms, self.cfg.batch_host_ms,
                                     self.cfg.max_batch_tokens) is None
        cm, scale = est.cfg, est.time_scale * est.correction
        per_tok, per_sq = cm.per_token_ms * scale, cm.per_token_squared_ms * scale
        # What a split adds: a launch, and one more batch's host time (not time-scaled).
        launch = cm.fixed_ms * scale + self.cfg.batch_host_ms
        padding_ms = (per_tok * (n * longest - real)
                      + per_sq * (n * longest * longest - squared))
        if padding_ms < launch:
            return True
        bound = launch * (1.0 - 1e-9)  # a tie splits or not by rounding: count it a split
        k = 0
        for length in sorted(lengths):
            if length == longest:
                break  # the rest are the longest: a split there saves nothing
            k += 1
            if k * (per_tok * (longest - length)
                    + per_sq * (longest * longest - length * length)) >= bound:
                return False
        return True
