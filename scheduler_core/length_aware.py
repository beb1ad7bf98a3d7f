"""The length-aware formers: the design's explicit control (``length_aware``) and its
danger-zone variant (``length_aware_emergency``). ``formers.py`` says what each does and
registers them by name.

Pure: every call takes ``now_s``.
"""

from __future__ import annotations

import math
from itertools import islice, repeat

import numpy as np

from .batch_plan import cheapest_plan, cheapest_split_ms, padded_costs_ms
from .candidate import Candidate
from .controller import ControlState
from .cost_model import CostEstimator
from .entry_queue import SMALL_QUEUE, EntryQueue, urgency_order
from .contract import Reason
from .profile import ControlConfig, SchedulerConfig


# Share of max_batch_size queued from which a measured-table batch compares a candidate's
# cost with an efficient batch of its own length instead of with running it alone
# (docs/defaults.md).
EFFICIENT_ALTERNATIVE_QUEUED = 0.25


class LengthAwareFormer:
    """Explicit control: urgency order, priority slots, compute-aware splitting by length,
    reserved capacity."""

    name = "length_aware"
    emergency = False

    def __init__(self, cfg: SchedulerConfig, control: ControlConfig, estimator: CostEstimator,
                 small_queue: int = SMALL_QUEUE):
        self.cfg = cfg
        self.control = control
        self.estimator = estimator
        self.small_queue = small_queue
        # The size of an efficient batch (as Scheduler.submit costs Entry.efficient_ms).
        self.efficient_size = max(1, math.ceil(control.min_batch_fill * cfg.max_batch_size))
        self._pays: dict[int, bool] = {}  # _small_batches_pay by length, at _pays_version
        self._pays_version = -1

    def _small_batches_pay(self, seed_len: int) -> bool:
        """Is an emergency batch shorter than a full one, at the seed's length, by more
        than ``max_padding_waste``? Not where the device is launch-bound at that length (a
        flat measured region, or a formula whose launch dwarfs the tokens, as the flat
        profile's 3.9 ms against 0.0006 ms a token): there a batch of
        ``emergency_batch_size`` takes about as long as a full one, wasting the device."""
        est = self.estimator
        # Kept by length while the lookups stay as they are (the danger zone's as-handed
        # check asks it of every distinct length of every hand-over).
        version = est.lookups_version
        if version != self._pays_version:
            self._pays, self._pays_version = {}, version
        pays = self._pays.get(seed_len)
        if pays is None:
            small = est.base_uniform_ms(self.control.emergency_batch_size, seed_len)
            full = est.base_uniform_ms(self.cfg.max_batch_size, seed_len)
            pays = self._pays[seed_len] = full > (1.0 + self.control.max_padding_waste) * small
        return pays

    def _limits(self, queue: EntryQueue, state: ControlState, now_s: float,
                urgent_first: bool, seed_len: int) -> tuple[int, float, bool, Candidate | None]:
        """(size cap, duration cap in ms, urgent lane?, or a hold) for this batch."""
        ctl = self.control
        compensation = state.compensation_size > 0
        size_cap = state.compensation_size if compensation else self.cfg.max_batch_size
        duration_cap_ms = math.inf
        if not self.emergency and not compensation and state.tightest_sla_ms:
            duration_cap_ms = (1.0 - ctl.reserved_capacity) * 0.5 * state.tightest_sla_ms
        urgent_lane = False
        if self.emergency and not compensation:
            # A burst (not yet a full batch behind): small batches for the most urgent.
            # Once behind, only full, efficient batches keep the device ahead of the queue.
            if (len(queue) < self.cfg.max_batch_size and urgent_first
                    and self._small_batches_pay(seed_len)):
                size_cap = min(size_cap, ctl.emergency_batch_size)
                urgent_lane = True
            gap_end_s = state.last_finish_s + ctl.dilution_gap_ms / 1000.0
            if ctl.dilution and now_s < gap_end_s:
                return size_cap, duration_cap_ms, urgent_lane, Candidate.hold(
                    Reason.DILUTION, gap_end_s)
        return size_cap, duration_cap_ms, urgent_lane, None

    def _lengths_ms(self, lengths: list[int]) -> float:
        """The estimate for sequences of ``lengths`` as one batch (0: none)."""
        if not lengths:
            return 0.0
        return self.estimator.estimate_parts_ms(len(lengths), max(lengths), sum(lengths),
                                                sum(n * n for n in lengths))

    def _rest_ms(self, items, taken: list[int], others: list[int]) -> float:
        """What ``others``' slots not in ``taken`` cost as one more batch: its estimate and
        the host time of a batch (``batch_host_ms``); 0: none."""
        chosen = set(taken)
        rest = self._lengths_ms([items[slot].seq_len for slot in others if slot not in chosen])
        return rest + self.cfg.batch_host_ms if rest else 0.0

    def _plan_in_time(self, items, first: list[int], first_ms: float, pool: list[int],
                      now_s: float, size_cap: int) -> tuple[int, float]:
        """(how many of ``pool``'s requests end in time, when the plan ends): run
        ``first`` now, then the rest of ``pool``, in its order, in batches of
        ``size_cap`` back to back."""
        chosen = set(first)
        end_s = now_s + first_ms / 1000.0
        met = sum(1 for slot in first if items[slot].deadline_s >= end_s)
        rest = [slot for slot in pool if slot not in chosen]
        for i in range(0, len(rest), size_cap):
            chunk = rest[i:i + size_cap]
            end_s += self._lengths_ms([items[slot].seq_len for slot in chunk]) / 1000.0
            met += sum(1 for slot in chunk if items[slot].deadline_s >= end_s)
        return met, end_s

    def _whole(self, items, pool: list[int], now_s: float,
               duration_cap_ms: float) -> tuple[list[int], float, float] | None:
        """``pool``'s slots as one batch where every member ends in time in it (within
        ``max_batch_tokens`` and ``duration_cap_ms``): (the slots, the estimate, the
        tightest deadline), or None."""
        lengths = [items[slot].seq_len for slot in pool]
        if len(lengths) < 2 or len(lengths) * max(lengths) > self.cfg.max_batch_tokens:
            return None
        whole_ms = self._lengths_ms(lengths)
        deadline = min(items[slot].deadline_s for slot in pool)
        if whole_ms > duration_cap_ms or deadline < now_s + whole_ms / 1000.0:
            return None
        return list(pool), whole_ms, deadline

    def _cheapest_prefix(self, items, pool: list[int], plan_ms: float, now_s: float,
                         duration_cap_ms: float) -> tuple[list[int], float, float] | None:
        """The cheapest split in two of ``pool``'s slots (a queue that fits one batch)
        on a padded device (formula or measured table): the ``k`` shortest first, then
        the rest (each within ``max_batch_tokens``, the first within ``duration_cap_ms``),
        where that costs less than ``plan_ms`` (the queue as one batch, where it ends
        everyone in time) and every member ends in time in it; (the first batch's slots,
        its estimate, its tightest deadline), or None. The split is
        ``batch_plan.cheapest_split_ms`` (on the formula no plan of more batches is
        cheaper unless one of two is: see ``Scheduler._no_split_pays``; on a table,
        launch-bound up to thousands of tokens, the former's own split of a hand-over cost
        more than one batch, and this two-batch plan less). Shortest first: the cheaper
        batch ends sooner, so more requests are answered earlier."""
        order = sorted(pool, key=lambda slot: items[slot].seq_len)
        best = cheapest_split_ms(self.estimator, [items[slot].seq_len for slot in order],
                                 plan_ms, self.cfg.batch_host_ms, self.cfg.max_batch_tokens,
                                 duration_cap_ms)
        if best is None:
            return None
        k, first_ms, rest_ms = best
        first_end = now_s + first_ms / 1000.0
        deadline = min(items[slot].deadline_s for slot in order[:k])
        if deadline < first_end or min(items[slot].deadline_s for slot in order[k:]) < (
                first_end + rest_ms / 1000.0):
            return None  # someone would end late in it: the scan decides
        return order[:k], first_ms, deadline

    def _planned(self, queue: EntryQueue, pool: list[int], feasible: list[bool],
                 lengths: list[int], now_s: float, size_cap: int,
                 duration_cap_ms: float) -> tuple[list[int], float, float] | None:
        """The first batch of the cheapest padded plan for ``pool`` (a known queue larger
        than one batch; ``batch_plan``), batches within ``size_cap`` and, but for one
        request alone, within ``duration_cap_ms``; run tightest deadline first, where every
        feasible request in it ends in time: (the batch's slots, its estimate, its tightest
        feasible deadline), else None (the scan decides).

        Why: the scan forms one batch from the most urgent request and leaves out
        candidates for their padding, so on a launch-bound device a hand-over of two to
        four batches' worth ran as five to eight, each paying a launch."""
        host_ms = self.cfg.batch_host_ms
        all_lengths = np.asarray(lengths)
        by_length = np.argsort(all_lengths, kind="stable")
        slots, sorted_lengths = np.asarray(pool)[by_length], all_lengths[by_length]
        costs = padded_costs_ms(self.estimator, sorted_lengths, size_cap)
        if math.isfinite(duration_cap_ms):
            costs[:, 1:][costs[:, 1:] > duration_cap_ms] = math.inf
        ends, _ = cheapest_plan(sorted_lengths, costs, self.cfg.max_batch_tokens, host_ms)
        due = np.where(np.asarray(feasible)[by_length], queue.deadline[slots], math.inf)
        batches = sorted((float(due[start:end].min()), start, end)
                         for start, end in zip([0, *ends[:-1]], ends))
        end_s = now_s
        for tightest, start, end in batches:  # tightest deadline first
            end_s += costs[end - 1, end - start - 1] / 1000.0
            if end_s > tightest:
                return None
            end_s += host_ms / 1000.0
        tightest, start, end = batches[0]
        return ([int(slot) for slot in slots[start:end]],
                float(costs[end - 1, end - start - 1]), tightest)

    def form(self, queue: EntryQueue, state: ControlState, now_s: float,
             flush: bool) -> Candidate:
        # One function on purpose: the candidate loop below runs up to 8 * size_cap times
        # per decision, so its limits, the cost formula and its state stay in locals
        # (splitting it costs a call and attribute reads per candidate; measured with
        # scripts/bench_decision.py).
        cfg, ctl, est = self.cfg, self.control, self.estimator
        padded = est.cost_mode == "padded"
        compensation = state.compensation_size > 0
        cap = state.compensation_size if compensation else cfg.max_batch_size
        # Looking far down the urgency order buys little: the scan is bounded to the
        # 8 * size_cap most urgent (seed included).
        urgent_flags, feasible, top, lengths = urgency_order(
            queue, now_s, ctl, est.correction, len(queue) >= cfg.max_batch_size, 8 * cap,
            self.small_queue)
        size_cap, duration_cap_ms, urgent_lane, hold = self._limits(
            queue, state, now_s, urgent_flags[0], lengths[0])
        if hold is not None:
            return hold
        items = queue.items
        stop = 8 * size_cap if size_cap > 1 else 1
        stop_noncritical = self.emergency and ctl.emergency_stop_noncritical
        # A hold call's hand-over is planned whole, but for a compensation batch or a lane.
        plans = padded and flush and not (compensation or urgent_lane or stop_noncritical)
        planned = None
        if plans and len(queue) > size_cap:
            # The whole queue is known (a hold call's hand-over) and needs more than one
            # batch: the cheapest plan by length, where it keeps everyone in time.
            planned = self._planned(queue, top[:stop], feasible[:stop], lengths[:stop], now_s,
                                    size_cap, duration_cap_ms)
        elif plans:
            # The whole queue is known and fits one batch: the cheapest plan of one batch or
            # two (shortest first) where every member ends in time; on a padded cost no plan
            # of two is cheaper, so the scan below decides only where it makes someone late
            # (the emergency former too, outside its lane: results/emergency_plan/).
            pool = top[:stop]  # the whole queue
            whole = self._whole(items, pool, now_s, duration_cap_ms)
            planned = self._cheapest_prefix(items, pool, whole[1] if whole else math.inf,
                                            now_s, duration_cap_ms) or whole
        if planned is not None:
            slots, est_ms, deadline = planned
            return Candidate([items[slot] for slot in slots], est_ms, len(slots) >= size_cap,
                             Reason.FLUSH, deadline)

        seed_ok, seed = feasible[0], items[top[0]]
        seed_deadline = seed.deadline_s if seed_ok else math.inf
        longest = seed.seq_len
        priority_slots = ctl.priority_slots
        noncritical_ms = ctl.noncritical_sla_ms
        seed_noncritical = seed.req.sla_ms >= noncritical_ms
        max_waste = ctl.max_padding_waste
        check_waste = padded and not compensation
        max_tokens = cfg.max_batch_tokens
        est_ms = est.uniform_ms(1, longest)
        # est.estimate_parts_ms inlined (the same float operations, in the same order):
        # this loop runs up to 8 * size_cap times per decision.
        cm = est.cfg
        fixed, per_seq, per_tok, per_sq = (cm.fixed_ms, cm.per_sequence_ms, cm.per_token_ms,
                                           cm.per_token_squared_ms)
        scale, corr = est.time_scale, est.correction
        # The seed and the candidates after it, most urgent first (none for a batch of one):
        # ``stop`` above.
        # Urgency matters only for priority slots and the urgent lane.
        with_urgency = priority_slots > 0 or urgent_lane
        filtering = urgent_lane or stop_noncritical
        # A measured table (est.table) says what padding really costs (see the check in the
        # loop); without one, the padded-token share stands in for the cost.
        table = est.table
        efficient_size = self.efficient_size
        flat_factor = (1.0 + max_waste) * scale
        host_ms = cfg.batch_host_ms  # what one more batch costs the host
        # An efficient batch of a candidate's own length is a real alternative once a
        # quarter of a full batch is queued; with fewer, its alternative is running alone.
        behind = len(queue) >= cfg.max_batch_size * EFFICIENT_ALTERNATIVE_QUEUED
        shortest = table.seed.lengths[0] if table else 0
        seed_ms = est_ms

        def scan(check_waste: bool, guard_deadlines: bool = True):
            """The candidates that join the seed: (slots, estimate ms, deadline, how many
            were left out for their padding alone, how many for a member's deadline)."""
            members = [top[0]]
            longest, real, squared, deadline, est_ms = (seed.seq_len, seed.seq_len,
                                                        seed.seq_len ** 2, seed_deadline,
                                                        seed_ms)
            slots_left = priority_slots
            waste_skipped = deadline_skipped = 0
            size = 2  # the batch's size if the next candidate joins
            span = longest * size  # its padded tokens if the candidate is not longer
            # Every check below only skips a candidate, so their order is free: the
            # cheapest and most selective first (padding waste rejects most candidates).
            flags = islice(urgent_flags, 1, stop) if with_urgency else repeat(False)
            for urgent, ok, n, slot in zip(flags, islice(feasible, 1, stop),
                                           islice(lengths, 1, stop), islice(top, 1, stop)):
                if n <= longest:
                    new_longest, new_span = longest, span
                else:
                    new_longest, new_span = n, n * size
                if new_span > max_tokens:
                    continue
                if table is None:
                    # Compute-aware splitting (padded): too much padding, unless on a
                    # priority slot.
                    if check_waste and 1.0 - (real + n) / new_span > max_waste and not (
                            urgent and slots_left > 0):
                        waste_skipped += 1
                        continue
                    if padded:
                        candidate_ms = (fixed + per_seq * size + per_tok * new_span
                                        + per_sq * (new_span * new_longest)) * scale * corr
                    else:
                        candidate_ms = (fixed + per_seq * size + per_tok * (real + n)
                                        + per_sq * (squared + n * n)) * scale * corr
                else:
                    candidate_ms = table.lookup_ms(
                        size, new_longest if padded else (real + n) / size) * scale
                    # Inside the flat (launch-bound) region - the padded batch costs no
                    # more than as many of the shortest sequences - the batch just fills.
                    # Past it, a candidate joins only if what it adds to the batch's cost
                    # is at most what it would cost otherwise: its share of an efficient
                    # batch of its own length when the queue holds one (behind), else
                    # running alone, either with its batch's host time.
                    if check_waste and candidate_ms > flat_factor * table.lookup_ms(
                            size, shortest):
                        share = max(1, min(efficient_size, max_tokens // n)) if behind else 1
                        own_ms = items[slot].efficient_ms if behind else items[slot].alone_ms
                        if candidate_ms - est_ms > ((1.0 + max_waste) * own_ms / share
                                                    + host_ms / share) and not (
                                urgent and slots_left > 0):
                            continue
                if filtering and ((urgent_lane and not urgent) or (stop_noncritical and (
                        seed_noncritical or items[slot].req.sla_ms >= noncritical_ms))):
                    continue
                if candidate_ms > duration_cap_ms:
                    continue
                if ok:
                    due = items[slot].deadline_s
                    bound = deadline if deadline <= due else due
                else:
                    bound = deadline
                if guard_deadlines and now_s + candidate_ms / 1000.0 > bound:
                    deadline_skipped += 1
                    continue  # adding it would make a member miss: leave it for another batch
                members.append(slot)
                longest, real, squared, deadline, est_ms = (
                    new_longest, real + n, squared + n * n, bound, candidate_ms)
                if urgent and slots_left > 0:
                    slots_left -= 1
                size += 1
                if size > size_cap:
                    break
                span = longest * size
            return members, est_ms, deadline, waste_skipped, deadline_skipped

        members, est_ms, deadline, waste_skipped, deadline_skipped = scan(check_waste)
        if waste_skipped and padded and table is None:
            # Split only where the split pays: the same scan without the padding check,
            # and whichever leaves less device time for the two batches the queue's
            # candidates make (this one, and the rest of the other's as one batch). On a
            # flat, launch-bound cost (GPU-like: a fixed 3.9 ms a batch) splitting by
            # padding alone ran ~4 batches where one would do.
            merged, merged_ms, merged_deadline, _, merged_skipped = scan(False)
            if merged_ms + self._rest_ms(items, merged, members) <= (
                    est_ms + self._rest_ms(items, members, merged)):
                members, est_ms, deadline = merged, merged_ms, merged_deadline
                deadline_skipped, check_waste = merged_skipped, False
        if deadline_skipped:
            # Guard only where the guard pays: leaving candidates out for a member's
            # deadline costs another batch's launch, which delays everyone after it: the
            # rest of this queue, and what arrives meanwhile. Both plans run the rest of
            # the scanned queue after their first batch, in urgency order; the guarded one
            # wins only if it keeps more of them in time than the arrivals its extra
            # device time delays (as the worth-its-wait rule weighs a wait). Without this
            # a hand-over of requests that waited splits into several small batches, each
            # adding a launch, and a load the device carries in full batches collapses.
            pool = top[:stop]
            free, free_ms, free_deadline, _, _ = scan(check_waste, guard_deadlines=False)
            free_met, free_end_s = self._plan_in_time(items, free, free_ms, pool, now_s,
                                                      size_cap)
            met, end_s = self._plan_in_time(items, members, est_ms, pool, now_s, size_cap)
            delayed = state.observation.arrival_rate_rps * max(0.0, end_s - free_end_s)
            if free_met + delayed >= met:
                members, est_ms, deadline = free, free_ms, free_deadline
        members = [items[slot] for slot in members]

        immediate = (Reason.FLUSH if flush else Reason.COMPENSATION if compensation
                     else Reason.EMERGENCY if urgent_lane
                     else Reason.DRAIN if self.emergency else None)
        full = len(members) >= size_cap and not compensation and not urgent_lane
        return Candidate(members, est_ms, full, immediate, deadline)


class EmergencyLengthAwareFormer(LengthAwareFormer):
    """The danger zone's emergency policy on the length-aware former."""

    name = "length_aware_emergency"
    emergency = True
