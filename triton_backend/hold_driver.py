"""Intake hold's driver: one ``execute()`` call, top to bottom.

    estimate arrival -> decode -> admit -> decide -> run -> answer -> return

A call that is one batch the scheduler would form whole anyway runs as Triton handed it
over, with no decision (``Scheduler.takes_as_handed``; outside explicit control that is the
design's flow chart: batch conventionally); any other is submitted and decided as above.
Where the engine can tell that from the call's lengths alone (``launches_as_handed``: its
SLAs taken as the smallest any request has had, the control state as the last tick left
it), the batch is launched first, once its token sequences are read and checked, and the
rest of the call is decoded, admitted and counted beside the device (``Runner.launch_first``):
the device does not wait for the call's bookkeeping.

``HoldDriver.execute(requests)`` is the whole call. It keeps every request Triton's until
answered (a stub crash leaves them to Triton, which fails them INTERNAL), and returns the
call's answers as one list: python_backend r24.10 sends a returned list back in one message,
while each ``response_sender.send`` is a blocking round trip to the server. While the
call's next batch runs on the device (``Runner.step``'s ``while_running``), the step after
it is decided at the running batch's estimated end (``_decide_ahead``: nothing arrives
during the call, so only the clock differs from a step at its end) and launched when the
running batch returns, so no decision sits in the device's gap; before that, the answers
made so far go early, through their requests' response senders, where the sends fit in
what is left of that batch, or where waiting for the call's end costs their clients more
than the sends cost the rest of the call (``SendCost``, measured on this host: on a
device with long batches the first batch's answers would otherwise wait a whole batch);
otherwise only those the call's estimated end would make late go early (counted:
``early_sends``). The call's end is estimated from the scheduler's cost model for what is
still queued (``Scheduler.queued_run_ms``: on a padded device every batch pays its
launch) and from the call's own batches so far.

Invariants:

* every request of the call ends with exactly one answer: in the returned list, or sent
  early (its slot then ``None``);
* arrivals are dated conservatively: a call that starts right after the previous one
  returned carries requests that queued in Triton during that call (Triton 24.10 tells a
  Python model nothing of when); for admission they count from the previous call's start,
  so the refusal rule never thinks a request younger than it is;
* a call launched first ends each request as a decoded call would (an invalid SLA, a
  passed timeout: refused, the batch's result for it dropped); one whose SLA is below
  every earlier one (the first of its kind) is served by the batch it is in, and
  lowers the floor for the next calls;
* a request whose client ``timeout`` has already passed at hand-over is refused at once,
  naming it (Triton's queue enforces timeouts only under a queue policy, which would turn
  its prefetch off); one handed over in time has the shorter of its SLA and its
  timeout as its deadline (``request_decoding.decode_sla``), and is answered at that
  deadline if its batch has not answered it by then (``timeout_guard.TimeoutGuard``).

The driver holds no scheduling logic: ``runner.Runner`` carries out the engine's steps
(``scheduler_core/engine.py``), ``decode.decode_call`` decodes, and the call's answers
are its ``answers.CallList``. Every call leaves one ``CallRecord`` on the ``Timeline``
(what it did, how long each part took, its CPU) for ``scripts/host_ledger.py``.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from typing import Callable, Sequence

from scheduler_core.engine import AS_HANDED
from scheduler_core.request import QueuedRequest

from .answers import CallList, Ticket
from .decode import DecodedCall, decode_call, read_launchable
from .executors import Launched
from .intake import HoldIntake
from .model_settings import CANCEL_CHECK_MIN_WAIT_S
from .runner import Ran, Runner
from .timeline import CallRecord, Timeline
from .waker import is_wake_request

# What one early answer costs the rest of its call: a send is a blocking round trip to the
# server, and the stub holds the GIL through it (python_backend r24.10 binds
# ``InferenceResponseSender.send`` without releasing it), so the sends go from the call's
# own thread while its next batch is on the device, not from another thread (tried: on
# the flat profile at 0.8 of native's peak a sending thread starved the call's own thread
# of the GIL; calls grew from 15 to 43 requests and the plugin refused). A send that does
# not fit in that batch delays the call. The round trip depends on the host (its cores,
# the server's load): ``SendCost`` measures it from the driver's own sends, starting from
# SEND_COST_S, the round trip the per-call timelines showed on 2 shared cores
# (docs/how-it-works.md).
SEND_COST_S = 0.0003
SEND_COST_SMOOTHING = 0.2


class SendCost:
    """The measured cost of one early send (seconds): a running mean over the driver's
    own rounds of sends (``observe``), starting from ``initial_s``."""

    def __init__(self, initial_s: float = SEND_COST_S,
                 smoothing: float = SEND_COST_SMOOTHING):
        self.estimate_s = initial_s
        self._smoothing = smoothing

    def observe(self, seconds: float, sends: int) -> None:
        """``sends`` early sends took ``seconds`` together."""
        if sends > 0 and seconds >= 0.0:
            self.estimate_s += self._smoothing * (seconds / sends - self.estimate_s)


class HoldDriver:
    """Drives one model's ``execute()`` calls under intake hold (see the module doc).
    With a ``waker``, its own wake requests are answered empty (``waker.is_wake_request``)."""

    def __init__(self, runner: Runner, intake: HoldIntake, default_sla_ms: float,
                 timeline: Timeline, waker=None,
                 clock: Callable[[], float] = time.monotonic, decode_fault_token: int = 0):
        self.runner = runner
        self.waker = waker  # waker.Waker, told of every call (None: no wake requests)
        self.intake = intake
        self._default_sla_ms = default_sla_ms
        self._is_wake = is_wake_request if waker is not None else None
        self._decode_fault_token = decode_fault_token  # a test hook, 0 = off
        # Launch first (``Runner.launch_first``): the INPUT_IDS -> EMBEDDING contract on an
        # executor whose launch returns while the device runs (else nothing runs beside
        # it), with no wake requests to sort out and no test hook to fire while decoding.
        self._launches_first = (runner.contract is None and waker is None
                                and not decode_fault_token
                                and getattr(runner.executor, "launch", None) is not None)
        self._clock = clock
        self.timeline = timeline
        self._ids = itertools.count(1)
        self.early_sends = 0
        self.send_cost = SendCost()
        self.last_wakes = 0  # wake requests in the last call (the waker asks)

    # -- the call -----------------------------------------------------------------------
    def execute(self, requests: Sequence) -> list:
        """One ``execute()`` call: its answers, one per request (``None`` where an answer
        was sent early)."""
        cpu_s, runner = time.thread_time(), self.runner  # the record's cpu_s
        if self.waker is not None:
            self.waker.call_started()
        now = self._clock()
        arrival, handed_over = self.intake.admission_arrival(now, len(requests))
        earliest = self.intake.earliest_arrival(now)
        # Launch first: the call's token sequences read and checked, and nothing else,
        # before the device starts (``Runner.launch_first``); the rest runs beside it. Not
        # a call old enough to ask whether its clients cancelled (asked before it runs).
        young = now - min(arrival, earliest) < CANCEL_CHECK_MIN_WAIT_S * runner.wait_scale
        read = read_launchable(requests) if self._launches_first else None
        read_s = self._clock()
        launched = (runner.launch_first(read[1], now, arrival) if read is not None and young
                    else None)
        record = self.timeline.begin(now, len(requests))
        record.arrival_s, record.handed_over = arrival, handed_over
        answers = CallList(requests)
        tickets = [Ticket(r, answers, slot=i, earliest_s=earliest)
                   for i, r in enumerate(requests)]
        whole = call = None
        planned = False  # run by ``_take_planned``, its batches recorded
        if launched is not None:
            record.decoded_s, record.launched_first = read_s, True
            whole, call = self._run_launched(requests, tickets, read[0], arrival, now, launched)
        else:
            call = decode_call(requests, runner.contract, tickets, arrival, self._clock(),
                               self._default_sla_ms, self._ids, self._is_wake,
                               self._decode_fault_token, read[0] if read else None)
            record.decoded_s = self._clock()
            self._end_at_once(call)
            if call.queued:
                planned = self._take_planned(answers, call.queued, record)
        call = call or DecodedCall()  # None: its step failed before it decoded
        queued = call.queued
        if whole is not None:  # launched first: one batch, as Triton handed it over
            record.batch(len(queued), 0, whole.started_s, self._clock(),
                         whole.step.estimated_ms, AS_HANDED, whole.executor_s)
        elif queued and not planned:
            runner.submit(queued, now)
            self._run(answers, queued, record, self._budget_sla_ms(queued))
        # Built before the call's end is taken: building the responses is the call's work
        # (native's model builds them inside its call too), not the gap after it.
        returned = answers.returned()
        done = self._clock()
        self.intake.call_returned(now, done, len(requests))
        record.wakes = self.last_wakes = call.wakes
        self.early_sends += answers.early_sends
        record.cpu_s = time.thread_time() - cpu_s
        self.timeline.end(record, done)
        runner.log.maybe_stats(done)
        if self.waker is not None:
            self.waker.call_returned(self._clock(), answered_real=call.wakes < len(requests))
        return returned

    def _run_launched(self, requests: Sequence, tickets: list[Ticket], read: list[dict],
                      arrival: float, now: float, launched: Launched):
        """The call launched first (``launched``: the sequences ``read``), beside the device:
        the rest decoded (``decode_call`` with ``read``) and ended as a decoded call's would
        (``_end_at_once``; the batch's answers to those are dropped), the rest served by
        the batch (``Runner.run_launched``). Returns what ran and the decoded call (None
        where the step failed before the engine heard it: every request answered)."""
        decoded: list[DecodedCall] = []

        def complete() -> list[QueuedRequest]:
            call = decode_call(requests, None, tickets, arrival, self._clock(),
                               self._default_sla_ms, self._ids, read=read)
            decoded.append(call)
            self._end_at_once(call)
            return call.queued

        ran = self.runner.run_launched(tickets, now, launched, complete)
        return ran, (decoded[0] if decoded and ran is not None else None)

    def _take_planned(self, answers: CallList, queued: list[QueuedRequest],
                      record: CallRecord) -> bool:
        """Run the call as handed over, or as the decision's two batches known at
        hand-over (``Runner.take_planned``), the first's answers sent early while the
        second runs where that pays (``_send_early``), and record its batches; False:
        neither ran (``submit`` and ``_run``)."""
        deadlines = {q.handle.slot: q.deadline_s for q in queued}
        ran = self.runner.take_planned(queued, functools.partial(
            self._send_early, answers, deadlines, record))
        if ran is None:
            return False
        for this, after in zip(ran, (*ran[1:], None)):
            step = this.step
            record.batch(len(step.batch), 0, this.started_s,
                         after.now_s if after is not None else self._clock(),
                         step.estimated_ms, step.former, this.executor_s)
        return True

    def _end_at_once(self, call: DecodedCall) -> None:
        """Answer what the decoded ``call`` ends at once, and watch its client timeouts."""
        if not (call.invalid or call.failed or call.expired or call.timed):
            return  # the usual call: nothing to end or watch
        runner = self.runner
        runner.answers.refuse_each(call.invalid, "invalid_input")
        runner.answers.refuse_each(call.failed, "decode_failed")
        if call.expired:
            runner.answers.refuse_each(call.expired, "timed_out")
            with runner.cond:  # late, for the scheduler's late share
                runner.scheduler.hand_over_expired(self._clock(), len(call.expired),
                                                   len(call.queued), call.expired_sla_ms)
        runner.timeouts.watch(call.timed)

    def stop(self, timeout_s: float) -> None:
        """Unload: nothing to wait for (every call answered its own requests)."""

    def close(self, timeout_s: float) -> None:
        self.timeline.flush()

    def summary(self) -> str:
        return self.timeline.summary()

    def _run(self, answers: CallList, queued: list[QueuedRequest], record: CallRecord,
             min_sla_ms: float) -> None:
        """Step until the call's requests are all answered; between batches, send early
        only what the call's end would make late. Under a sustained overload the call
        keeps a budget of a share of ``min_sla_ms`` (the smallest SLA it carries); a call
        past it that refuses enough is one (``Scheduler.call_overran``)."""
        runner = self.runner
        scheduler = runner.scheduler
        deadlines = {q.handle.slot: q.deadline_s for q in queued}
        budget_s = scheduler.control.overload_call_budget_sla_fraction * min_sla_ms / 1000.0
        sends = None  # the early answers, sent while the call's next batch runs
        ahead = None  # the next step, decided while the running batch runs

        def beside(started_s: float, estimated_ms: float) -> None:
            nonlocal ahead
            if sends is not None:
                sends(started_s, estimated_ms)
            ahead = self._decide_ahead(record, budget_s, started_s, estimated_ms)

        while runner.engine.queue_depth or ahead is not None:
            decided, ahead = ahead, None
            depth = runner.engine.queue_depth
            started = self._clock()
            # A step decided ahead kept the budget at the running batch's estimated end.
            if decided is None and self._over_budget(record, started, budget_s):
                self._refuse_rest(record, started, budget_s, len(answers.requests))
                break
            try:
                ran = runner.step(flush=True, while_running=beside, decided=decided)
            except Exception:  # its requests were answered (INTERNAL); serve the rest
                runner.step_failed()
                if runner.engine.queue_depth >= depth:  # nothing left the queue: stop
                    runner.refuse_queued("step_failed",
                                         "scheduler failed before this request ran")
                continue
            ended, step = self._clock(), ran.step
            record.batch(len(step.batch), len(step.refused), started, ended,
                         step.estimated_ms, step.former, ran.executor_s)
            sends = functools.partial(self._send_early, answers, deadlines, record)

    def _decide_ahead(self, record: CallRecord, budget_s: float, started_s: float,
                      estimated_ms: float) -> Ran | None:
        """The call's next step, decided while its running batch (started at
        ``started_s``, ``estimated_ms`` long) is on the device, at that batch's estimated
        end (``Runner.decide_ahead``), so the next batch launches as soon as it returns.
        None (decide at the batch's end, as heard): nothing is queued; the batch is past
        its estimate already (its end is near or gone: an early decision would count
        the device busy after it went free); or the call's budget would be spent by
        then, counting the running batch (the budget is kept at the batch's end)."""
        end_s = started_s + estimated_ms / 1000.0
        if not self.runner.engine.queue_depth or self._clock() >= end_s:
            return None
        running = self.runner.running
        if self._over_budget(record, end_s, budget_s,
                             (len(running.batch), len(running.refused), estimated_ms / 1000.0)):
            return None
        return self.runner.decide_ahead(end_s)

    def _over_budget(self, record: CallRecord, now_s: float, budget_s: float,
                     running: tuple[int, int, float] = (0, 0, 0.0)) -> bool:
        """Whether the call stops at ``now_s``, its rest refused: past its budget under a
        sustained overload. From the call's second batch on: its first decision measures
        the late share with this hand-over, so a share left by an earlier load (a quiet
        spell measures nothing) never refuses a call before it was looked at. A call past
        its budget that refuses enough is one (``Scheduler.call_overran``), asked once at
        each of the call's batch boundaries past it, by whichever asks first.
        ``running``: the batch on the device (its size, its refusals, its estimate in s),
        counted as one of the call's (a step decided ahead)."""
        size, refused, estimate_s = running
        batches = record.batches
        if not batches and not size:
            return False
        mean_s = self._mean_batch_s(record)
        if size:
            ran = sum(1 for b in batches if b[0])
            mean_s = (mean_s * ran + estimate_s) / (ran + 1)
        if now_s - record.start_s + mean_s <= budget_s:
            return False
        scheduler = self.runner.scheduler
        if not scheduler.overloaded:  # an overload's onset, maybe: its refusals say
            with self.runner.cond:
                scheduler.call_overran(sum(b[1] for b in batches) + refused,
                                       sum(b[0] + b[1] for b in batches) + size + refused)
        return scheduler.overloaded

    def _budget_sla_ms(self, queued: list[QueuedRequest]) -> float:
        """The smallest SLA the call carries that one of its requests can meet (the call's
        requests are the scheduler's queue, just submitted): one whose SLA is below its
        own run time alone is refused at once whatever the load, so it sets no budget
        (else a call carrying one would overrun at its second batch and refuse everyone
        else as overloaded). None meetable: the smallest SLA."""
        meetable = self.runner.scheduler.min_meetable_sla_ms()
        return meetable if meetable < math.inf else min(
            (q.sla_ms for q in queued), default=math.inf)

    def _refuse_rest(self, record: CallRecord, now: float, budget_s: float,
                     call_size: int) -> None:
        """Under a sustained overload the call has used its budget: refuse what is left,
        now, in the returned list (see ControlConfig.overload_call_budget_sla_fraction)."""
        left = self.runner.refuse_queued(
            "deadline_infeasible",
            f"overloaded: this execute() call used its budget of {budget_s * 1000.0:.1f} ms "
            "(a share of the smallest SLA it carried) while the queue is mostly late; "
            "refused at hand-over, before its deadline", call_size=call_size)
        record.batch(0, left, now, now, 0.0, "budget")

    @staticmethod
    def _mean_batch_s(record: CallRecord) -> float:
        """The call's batches so far, their mean time (0 before the first): what the next
        one is expected to take, so the budget is kept, not overshot by a batch."""
        spans = [b[3] - b[2] for b in record.batches if b[0]]
        return sum(spans) / len(spans) if spans else 0.0

    def _remaining_s(self, record: CallRecord, left: int) -> float:
        """How long the call still runs (``left`` requests queued): the larger of the
        scheduler's estimate for what is queued (``Scheduler.queued_run_ms``, which counts
        every batch's launch) and the call's own batches so far (their mean time per
        request, times what is left: host time the estimate leaves out)."""
        done = sum(b[0] + b[1] for b in record.batches) or 1
        spent = sum(b[3] - b[2] for b in record.batches)
        with self.runner.cond:
            queued_ms = self.runner.scheduler.queued_run_ms()
        return max(spent / done * left, queued_ms / 1000.0)

    def _send_early(self, answers: CallList, deadlines: dict, record: CallRecord,
                    started_s: float, estimated_ms: float) -> None:
        """While a batch of the call runs (started at ``started_s``, ``estimated_ms``
        long): send the answers made so far early, through their response senders, where
        that costs nothing or pays. Free: the sends fit in what is left of the running
        batch. Else all of them where holding them to the call's end (about
        ``remaining_s`` each) costs more than the sends delay everyone still waiting
        (``SendCost`` each, for the rest and for themselves); else only those in time now
        that the call's estimated end would make late (one already late gains its client
        nothing worth a round trip). The rest go back with the call."""
        ready = [slot for slot in deadlines if answers.answered(slot)]
        if not ready:
            return
        now = self._clock()
        hidden_s = started_s + estimated_ms / 1000.0 - now  # the running batch's time left
        cost_s = self.send_cost.estimate_s
        if cost_s * len(ready) > hidden_s:  # the sends outlast the running batch
            left = self.runner.engine.queue_depth  # queued behind the running batch
            remaining_s = max(hidden_s, 0.0) + self._remaining_s(record, left)
            waiting = sum(1 for slot in deadlines if answers.pending(slot))
            if remaining_s < cost_s * (waiting + len(ready)):
                end = now + remaining_s
                ready = [slot for slot in ready if now < deadlines[slot] < end]
                if not ready:
                    return
        for slot in ready:
            answers.send_now(slot)
        self.send_cost.observe(self._clock() - now, len(ready))
        record.early_sends += len(ready)
