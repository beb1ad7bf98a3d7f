"""Intake hold's driver: one ``execute()`` call, top to bottom.

    estimate arrival -> decode -> admit -> decide -> run -> answer -> return

A call that is one batch the scheduler would form whole anyway runs as Triton handed it
over, with no decision (``Scheduler.takes_as_handed``; outside explicit control that is the
design's flow chart: batch conventionally); any other is submitted and decided as above.

``HoldDriver.execute(requests)`` is the whole call. It keeps every request Triton's until
answered (a stub crash leaves them to Triton, which fails them INTERNAL), and returns the
call's answers as one list: python_backend r24.10 sends a returned list back in one message,
while each ``response_sender.send`` is a blocking round trip to the server. An answer goes
early, through its request's response sender, only when the call's estimated end would
miss that request's deadline (counted: ``early_sends``).

Invariants:

* every request of the call ends with exactly one answer: in the returned list, or sent
  early (its slot then ``None``);
* arrivals are dated conservatively: a call that starts right after the previous one
  returned carries requests that queued in Triton during that call (Triton 24.10 tells a
  Python model nothing of when); for admission they count from the previous call's start,
  so the refusal rule never thinks a request younger than it is;
* a request whose client ``timeout`` has already passed at hand-over is refused at once,
  naming it (Triton's queue enforces timeouts only under a queue policy, which would turn
  its prefetch off); one handed over in time has the shorter of its SLA and its
  timeout as its deadline (``request_decoding.decode_sla``).

Every call leaves one ``CallRecord`` on the ``Timeline`` (what the call did and how long
each part took); ``timeline.py`` writes it out for ``scripts/host_ledger.py``.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import triton_python_backend_utils as pb_utils

from scheduler_core.request import QueuedRequest

from .dispatcher import Dispatcher, Pending
from .intake import HoldIntake
from .metric_catalog import AS_HANDED
from .request_decoding import RequestError
from .responses import built, error, send
from .timeline import CallRecord, Timeline

_SENT = object()  # a slot of the call's list whose answer was already sent early


class HoldDriver:
    """Drives one model's ``execute()`` calls under intake hold (see the module doc).

    ``decode_all(requests)`` returns, for each, a decoded request or the ``RequestError``
    naming its problem; ``is_wake(request)`` tells the waker's own wake requests
    (answered empty)."""

    def __init__(self, model_name: str, dispatcher: Dispatcher, intake: HoldIntake,
                 decode_all: Callable, default_sla_ms: float, timeline: Timeline,
                 is_wake: Callable | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.model_name = model_name
        self.dispatcher = dispatcher
        self.intake = intake
        self._decode_all_of = decode_all
        self._default_sla_ms = default_sla_ms
        self._is_wake = is_wake
        self._clock = clock
        self.timeline = timeline
        self._next_id = 0
        self.early_sends = 0
        self.last_wakes = 0  # wake requests in the last call (the waker asks)

    # -- the call -----------------------------------------------------------------------
    def execute(self, requests: Sequence) -> list:
        """One ``execute()`` call: its answers, one per request (``None`` where an answer
        was sent early)."""
        now = self._clock()
        record = self.timeline.begin(now, len(requests))
        arrival, handed_over = self.intake.admission_arrival(now, len(requests))
        record.arrival_s, record.handed_over = arrival, handed_over
        responses: list = [None] * len(requests)
        deadlines = [math.inf] * len(requests)
        earliest = self.intake.earliest_arrival(now)
        queued, wakes, expired = self._decode_all(requests, arrival, responses, deadlines,
                                                  earliest)
        record.decoded_s = self._clock()
        if expired:
            self.dispatcher.hand_over_expired(expired, len(queued))
        as_handed = self.dispatcher.run_as_handed(queued) if queued else None
        if as_handed is not None:  # one batch, as Triton handed it over
            started, estimated_ms = as_handed
            record.batch(len(queued), 0, started, self._clock(), estimated_ms, AS_HANDED)
        else:
            self.dispatcher.submit(queued, now)
            self._run(requests, responses, deadlines, record, self._budget_sla_ms(queued))
        # Built before the call's end is taken: building the responses is the call's work
        # (native's model builds them inside its call too), not the gap after it.
        answers = [None if r is _SENT else built(r) for r in responses]
        done = self._clock()
        self.intake.call_returned(now, done, len(requests))
        record.wakes = self.last_wakes = wakes
        self.timeline.end(record, done)
        self.dispatcher.maybe_log_stats(done)
        return answers

    def _decode_all(self, requests, arrival: float, responses: list, deadlines: list,
                    earliest: float) -> tuple[list[QueuedRequest], int, int]:
        """The call's valid requests as queued requests, its wake requests and its expired
        ones: an invalid one is answered INVALID_ARG into its slot, and one whose client
        timeout has passed (expired) UNAVAILABLE. The call is decoded at once
        (``decode_all``: one token-range check for all of it)."""
        queued: list[QueuedRequest] = []
        wakes = expired = 0
        now = self._clock()
        slots = []  # the requests to decode: all but the waker's
        for i, request in enumerate(requests):
            if self._is_wake is not None and self._is_wake(request):
                wakes += 1
                responses[i] = pb_utils.InferenceResponse()
            else:
                slots.append(i)
        for i, decoded in zip(slots, self._decode_all_of([requests[i] for i in slots])):
            request = requests[i]
            if isinstance(decoded, RequestError):
                self.dispatcher.metrics.on_rejected("invalid_input")
                responses[i] = error(str(decoded), pb_utils.TritonError.INVALID_ARG)
                continue
            handle = Pending(request, None, None, responses=responses, slot=i,
                             earliest_s=earliest)
            sla_ms = decoded.sla_ms or self._default_sla_ms
            timeout_ms = decoded.timeout_ms
            if timeout_ms and now - arrival >= timeout_ms / 1000.0:
                self.dispatcher.metrics.on_rejected("timed_out")
                expired += 1
                responses[i] = error(
                    f"request timed out: its timeout of {timeout_ms:.1f} ms passed while it "
                    f"waited in Triton's queue (waited at least "
                    f"{(now - arrival) * 1000.0:.1f} ms)", pb_utils.TritonError.UNAVAILABLE)
                continue
            handle.input_ids = decoded.input_ids
            handle.decoded = decoded if self.dispatcher.contract else None
            deadlines[i] = arrival + sla_ms / 1000.0
            self._next_id += 1
            queued.append(QueuedRequest(self._next_id, int(decoded.input_ids.size),
                                        arrival, sla_ms, handle))
        return queued, wakes, expired

    def _run(self, requests, responses: list, deadlines: list, record: CallRecord,
             min_sla_ms: float) -> None:
        """Decide and run until the call's requests are all answered; between batches,
        send early only what the call's end would make late. Under a sustained overload
        the call keeps a budget of a share of ``min_sla_ms`` (the smallest SLA it
        carries); a call past it that refuses enough is one (``Scheduler.call_overran``)."""
        dispatcher = self.dispatcher
        scheduler = dispatcher.scheduler
        budget_s = scheduler.control.overload_call_budget_sla_fraction * min_sla_ms / 1000.0
        while scheduler.queue_depth:
            depth = scheduler.queue_depth
            started = self._clock()
            # From the call's second batch on: its first decision measures the late share
            # with this hand-over, so a share left by an earlier load (a quiet spell
            # measures nothing) never refuses a call before it was looked at.
            if record.batches and (
                    started - record.start_s + self._mean_batch_s(record)) > budget_s:
                if not scheduler.overloaded:  # an overload's onset, maybe: its refusals say
                    dispatcher.call_overran(sum(b[1] for b in record.batches),
                                            sum(b[0] + b[1] for b in record.batches))
                if scheduler.overloaded:
                    self._refuse_rest(record, started, budget_s, len(requests))
                    break
            try:
                _, decision, _ = dispatcher.dispatch_once(flush=True)
            except Exception:  # its requests were answered (INTERNAL); serve the rest
                dispatcher.step_failed()
                if scheduler.queue_depth >= depth:  # nothing left the queue: stop
                    dispatcher.answer_queued("scheduler failed before this request ran",
                                             pb_utils.TritonError.INTERNAL)
                continue
            ended = self._clock()
            record.batch(len(decision.batch), len(decision.rejected), started, ended,
                         decision.estimated_ms, decision.former)
            left = scheduler.queue_depth
            if left:
                self._send_late_ones(requests, responses, deadlines, record, ended,
                                     self._remaining_s(record, left))

    def _budget_sla_ms(self, queued: list[QueuedRequest]) -> float:
        """The smallest SLA the call carries that one of its requests can meet (the call's
        requests are the scheduler's queue, just submitted): one whose SLA is below its
        own run time alone is refused at once whatever the load, so it sets no budget
        (else a call carrying one would overrun at its second batch and refuse everyone
        else as overloaded). None meetable: the smallest SLA."""
        meetable = self.dispatcher.scheduler.min_meetable_sla_ms()
        return meetable if meetable < math.inf else min(
            (q.sla_ms for q in queued), default=math.inf)

    def _refuse_rest(self, record: CallRecord, now: float, budget_s: float,
                     call_size: int) -> None:
        """Under a sustained overload the call has used its budget: refuse what is left,
        now, in the returned list (see ControlConfig.overload_call_budget_sla_fraction)."""
        left = self.dispatcher.scheduler.queue_depth
        self.dispatcher.answer_queued(
            f"overloaded: this execute() call used its budget of {budget_s * 1000.0:.1f} ms "
            "(a share of the smallest SLA it carried) while the queue is mostly late; "
            "refused at hand-over, before its deadline", pb_utils.TritonError.UNAVAILABLE,
            refused=True, call_size=call_size)
        record.batch(0, left, now, now, 0.0, "budget")

    @staticmethod
    def _mean_batch_s(record: CallRecord) -> float:
        """The call's batches so far, their mean time (0 before the first): what the next
        one is expected to take, so the budget is kept, not overshot by a batch."""
        spans = [b[3] - b[2] for b in record.batches if b[0]]
        return sum(spans) / len(spans) if spans else 0.0

    @staticmethod
    def _remaining_s(record: CallRecord, left: int) -> float:
        """How long the call still runs, estimated from its own batches so far: their
        mean time per request, times what is left."""
        done = sum(b[0] + b[1] for b in record.batches) or 1
        spent = sum(b[3] - b[2] for b in record.batches)
        return spent / done * left

    def _send_late_ones(self, requests, responses: list, deadlines: list,
                        record: CallRecord, now: float, remaining_s: float) -> None:
        """Send the answers made so far that are in time now and would be late at the
        call's estimated end; the rest wait for the returned list (one already late gains
        its client nothing worth a round trip)."""
        end = now + remaining_s
        for i, response in enumerate(responses):
            if response is None or response is _SENT or not now < deadlines[i] < end:
                continue
            responses[i] = _SENT
            send(requests[i].get_response_sender(), built(response))
            record.early_sends += 1
            self.early_sends += 1
