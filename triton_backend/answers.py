"""One answer per request: the ``Ticket`` each request carries from decode to its answer,
where the answer goes, and every way a request can end without a result.

A request ends with exactly one answer, given by ``Ticket.answer`` (the one verb; a second
call is ignored). Where it goes is the ticket's outbox, chosen by the driver:

* ``CallList`` (intake hold): into the running ``execute()`` call's returned list, which
  python_backend r24.10 sends back in one message; ``CallList.send_now`` sends one early,
  through its request's response sender (a blocking round trip), when the call's end
  would make it late;
* ``responder.Responder`` (the threaded intakes): a responder thread builds and sends it.

``ENDINGS`` maps each way of ending without a result to the Triton error code its client
reads and the metric that counts it; ``Answers.refuse`` is the only place that turns one
into an error response.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# Answering is check-and-set: the watchdog answers a hung batch's requests from its own
# thread while the batch's thread may still answer them when the executor returns.
_ANSWER_LOCK = threading.Lock()


@dataclass(frozen=True)
class Ending:
    """A way to end without a result: the ``pb_utils.TritonError`` code's name, and the
    label of ``rejected_requests_total`` or the event counter that counts it (None: counted
    elsewhere, per batch or per step)."""

    code: str
    refusal_label: str | None = None
    event: str | None = None


ENDINGS = {
    "invalid_input": Ending("INVALID_ARG", refusal_label="invalid_input"),
    "decode_failed": Ending("INTERNAL", refusal_label="invalid_input"),
    "timed_out": Ending("UNAVAILABLE", refusal_label="timed_out"),
    "queue_full": Ending("UNAVAILABLE", refusal_label="queue_full"),
    "shutting_down": Ending("UNAVAILABLE", refusal_label="shutting_down"),
    "deadline_infeasible": Ending("UNAVAILABLE", refusal_label="deadline_infeasible"),
    "cancelled": Ending("CANCELLED", event="cancelled_requests_total"),
    "unloaded": Ending("UNAVAILABLE"),
    "step_failed": Ending("INTERNAL"),  # loop_errors_total counts the step
    "batch_hung": Ending("INTERNAL"),  # hung_batches_total counts the batch
    "batch_failed": Ending("INTERNAL"),  # batch_failures_total counts the batch
}


def retry_hint(backlog_ms: float) -> str:
    """What an overload refusal tells its client: when trying again can pay, the device
    time the plugin's queue still needs by its estimate (at least 1 ms)."""
    return f"retry after {max(1, math.ceil(backlog_ms))} ms"


class Ticket:
    """One request from decode to its answer (the core sees it as ``QueuedRequest.handle``):
    Triton's request object, kept alive until answered, what was decoded of it, and its
    outbox. ``earliest_s`` (intake hold): the earliest it can have arrived, the date by
    which to ask whether its client cancelled it."""

    __slots__ = ("request", "outbox", "slot", "sender", "input_ids", "decoded", "earliest_s",
                 "answered")

    def __init__(self, request: Any, outbox: Any, slot: int = -1, sender: Any = None,
                 earliest_s: float = math.inf):
        self.request = request
        self.outbox = outbox
        self.slot = slot  # its place in the call's list (CallList)
        self.sender = sender  # its response sender (Responder)
        self.input_ids: np.ndarray | None = None
        self.decoded = None  # any other tensor contract: the whole request
        self.earliest_s = earliest_s
        self.answered = False

    def answer(self, response) -> bool:
        """Give this request its answer: a response, or a function that builds one (built
        where it is sent). False, and nothing done, if it was answered already."""
        with _ANSWER_LOCK:
            return self._give(response)

    def _give(self, response) -> bool:
        """The answer's check-and-set, ``_ANSWER_LOCK`` held: False if answered already."""
        if self.answered:
            return False
        self.answered = True
        self.outbox.deliver(self, response)
        return True

    def answer_now(self, response) -> bool:
        """``answer``, sent at once even where the outbox would keep it for the call's
        return (``CallList.send_now``); one atomic step, so the call's return cannot take
        the same answer too."""
        with _ANSWER_LOCK:
            if not self._give(response):
                return False
            send_now = getattr(self.outbox, "send_now", None)
            if send_now is not None:
                send_now(self.slot)
        return True


def answer_all(tickets: Sequence[Ticket], responses: Sequence) -> None:
    """``Ticket.answer`` for each ticket with its response (a batch's answers), the lock
    taken once for them all: a ticket answered already keeps its answer."""
    with _ANSWER_LOCK:
        for ticket, response in zip(tickets, responses):
            ticket._give(response)


_SENT = object()  # a slot of the call's list whose answer went early


class CallList:
    """Intake hold's outbox: the running ``execute()`` call's answers, one slot a request."""

    def __init__(self, requests: Sequence):
        self.requests = requests
        self.responses: list = [None] * len(requests)
        self.early_sends = 0

    def deliver(self, ticket: Ticket, response) -> None:
        self.responses[ticket.slot] = response

    def answered(self, slot: int) -> bool:
        """Whether slot ``slot`` holds an answer that has not gone yet."""
        response = self.responses[slot]
        return response is not None and response is not _SENT

    def pending(self, slot: int) -> bool:
        """Whether slot ``slot`` has no answer yet."""
        return self.responses[slot] is None

    def send_now(self, slot: int) -> None:
        """Send slot ``slot``'s answer now, through its request's response sender, instead
        of in the returned list (its slot is then ``None`` there)."""
        response, self.responses[slot] = self.responses[slot], _SENT
        send(self.requests[slot].get_response_sender(), built(response))
        self.early_sends += 1

    def returned(self) -> list:
        """The call's returned list: every answer built, ``None`` for those sent early."""
        with _ANSWER_LOCK:
            responses = list(self.responses)
        ready = pb_utils.InferenceResponse  # most are built already: no call for those
        return [r if type(r) is ready else None if r is _SENT else built(r)
                for r in responses]


class Answers:
    """Ends requests without a result, counted (``ENDINGS``): the one place a refusal,
    a failure or a cancellation becomes its client's error."""

    def __init__(self, metrics):
        self.metrics = metrics

    def fail_now(self, tickets: Sequence[Ticket], kind: str, message: str) -> int:
        """``refuse`` the ``tickets`` still unanswered, each answer sent at once where it
        would otherwise wait for its call's return (a call that cannot return: the
        watchdog's hung batch). Returns how many it answered."""
        return self.refuse_each([(ticket, message) for ticket in tickets], kind, at_once=True)

    def refuse(self, tickets: Sequence[Ticket], kind: str, message: str) -> int:
        """Answer each of ``tickets`` with the error of ``kind`` (a key of ``ENDINGS``)
        and ``message``, counted once for them all."""
        return self.refuse_each([(ticket, message) for ticket in tickets], kind)

    def refuse_each(self, refused: Sequence[tuple[Ticket, str]], kind: str,
                    at_once: bool = False) -> int:
        """``refuse``, each ticket with its own message (its own numbers); ``at_once``:
        sent now (``Ticket.answer_now``). Counts, and returns, those it answered (a ticket
        answered already keeps its answer)."""
        if not refused:
            return 0
        ending = ENDINGS[kind]
        code = getattr(pb_utils.TritonError, ending.code)
        answer = Ticket.answer_now if at_once else Ticket.answer
        answered = 0
        for ticket, message in refused:
            if ending.event is not None:
                self.metrics.on_event(ending.event)
            answered += answer(ticket, error(message, code))
        if answered and ending.refusal_label is not None:
            self.metrics.on_rejected(ending.refusal_label, answered)
        return answered


def error(message: str, code) -> "pb_utils.InferenceResponse":
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


def embedding_response(embedding: np.ndarray) -> "pb_utils.InferenceResponse":
    """One request's EMBEDDING response: its [1, D] row of its batch's outputs (a view of
    the batch's array, which the tensor keeps alive: no copy where the row is float32 and
    contiguous already), or a 1-D embedding."""
    row = embedding.reshape(1, -1) if embedding.ndim == 1 else embedding
    tensor = pb_utils.Tensor("EMBEDDING", np.ascontiguousarray(row, dtype=np.float32))
    return pb_utils.InferenceResponse(output_tensors=[tensor])


def embedding_responses(rows: np.ndarray) -> list:
    """``embedding_response`` for each row of a batch's [B, D] outputs, in one loop (it
    runs on every launched call): response i holds ``rows[i:i + 1]``, a view of the batch
    made contiguous float32 once."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    tensor, response = pb_utils.Tensor, pb_utils.InferenceResponse
    return [response(output_tensors=[tensor("EMBEDDING", rows[i:i + 1])])
            for i in range(len(rows))]


class EmbeddingSlots:
    """A batch's EMBEDDING responses, built while the batch is on the device, before its
    outputs exist: response i holds row i of a [rows, width] float32 buffer, which
    ``responses`` fills with the batch's outputs. A ``pb_utils.Tensor`` made from a
    C-contiguous array keeps that array, not a copy, and python_backend copies it into
    shared memory only when its response is returned or sent (r24.10's numpy ``PbTensor``
    constructor and ``SaveToSharedMemory``; checked live on 2.51), so the rows may be
    written until then. Building them costs the host what it costs after the batch; built
    beside the device, they are not host time between the device's end and the call's."""

    __slots__ = ("buffer", "built")

    def __init__(self, rows: int, width: int):
        self.buffer = np.empty((rows, width), np.float32)
        self.built = embedding_responses(self.buffer)

    def responses(self, outputs) -> list:
        """The batch's responses holding ``outputs`` ([rows, width] floats): the ones built,
        filled; outputs of another shape or kind get theirs built anew."""
        rows = np.asarray(outputs)
        if rows.shape != self.buffer.shape or rows.dtype.kind != "f":
            return embedding_responses(rows)
        np.copyto(self.buffer, rows)
        return self.built


def embedding_slots(executor, rows: int) -> EmbeddingSlots | None:
    """``EmbeddingSlots`` for a batch of ``rows`` on ``executor``, where it names the width
    of its outputs (``output_dim``); None: build the responses from the outputs."""
    width = getattr(executor, "output_dim", None)
    return EmbeddingSlots(rows, width) if rows and isinstance(width, int) else None


def outputs_response(outputs: dict[str, np.ndarray]) -> "pb_utils.InferenceResponse":
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()])


def built(response) -> "pb_utils.InferenceResponse":
    """The response to send or return for one request: ``response``, or the one its
    builder makes; never nothing (INTERNAL if building fails or, a bug, intake hold's
    call holds no answer for it)."""
    if response is None:
        return error("request left unanswered (a bug)", pb_utils.TritonError.INTERNAL)
    try:
        return response() if callable(response) else response
    except Exception as exc:  # never leave a request without its answer
        return error(f"could not build the response: {exc}", pb_utils.TritonError.INTERNAL)


def send(sender, response) -> None:
    """Send one final response; a failure (the client may be gone) is logged, not raised."""
    try:
        sender.send(response, flags=FINAL)
    except Exception as exc:  # never let that kill the loop
        pb_utils.Logger.log_warn(f"could not send a response: {exc}")
