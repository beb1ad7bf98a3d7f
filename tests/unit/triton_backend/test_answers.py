"""``answers``: one answer per request (``Ticket.answer``), the call's list and its early
sends (``CallList``), and every way to end without a result (``ENDINGS``), on the fake
``triton_python_backend_utils``."""

from __future__ import annotations

import numpy as np

from triton_backend.answers import (ENDINGS, Answers, CallList, EmbeddingSlots, Ticket,
                                    answer_all, embedding_response, embedding_slots, error)
from triton_backend.metric_catalog import REJECT_REASONS


class Outbox:
    def __init__(self):
        self.delivered = []

    def deliver(self, ticket, response):
        self.delivered.append((ticket, response))


class Metrics:
    def __init__(self):
        self.rejected, self.events = [], []

    def on_rejected(self, reason, count=1):
        self.rejected.append((reason, count))

    def on_event(self, counter):
        self.events.append(counter)


def test_a_ticket_is_answered_once_and_a_second_answer_is_dropped(pb_utils):
    outbox = Outbox()
    ticket = Ticket(pb_utils.FakeRequest([5]), outbox)
    first, second = embedding_response(np.zeros(4)), error("late", pb_utils.TritonError.INTERNAL)

    assert ticket.answer(first) is True
    assert ticket.answer(second) is False

    assert outbox.delivered == [(ticket, first)] and ticket.answered


def test_the_call_list_returns_every_answer_once_and_an_early_one_only_through_its_sender(
        pb_utils):
    requests = [pb_utils.FakeRequest([k + 1]) for k in range(3)]
    call = CallList(requests)
    tickets = [Ticket(r, call, slot=i) for i, r in enumerate(requests)]
    tickets[0].answer(lambda: embedding_response(np.ones(4)))  # a builder, built when sent
    tickets[1].answer(embedding_response(np.zeros(4)))

    assert call.answered(0) and call.answered(1) and not call.answered(2)
    call.send_now(0)
    assert not call.answered(0) and call.early_sends == 1
    returned = call.returned()

    assert returned[0] is None  # sent early: its slot is empty in the returned list
    assert len(requests[0].sender.sends) == 1
    assert pb_utils.error_code(requests[0].sender.sends[0][0]) is None
    assert pb_utils.error_code(returned[1]) is None and not requests[1].sender.sends
    # A slot left without an answer is a bug, answered INTERNAL, never nothing.
    assert pb_utils.error_code(returned[2]) == pb_utils.TritonError.INTERNAL
    assert "unanswered" in returned[2].error().message()


def test_refusals_carry_their_endings_code_and_are_counted_once_for_all(pb_utils):
    metrics = Metrics()
    answers = Answers(metrics)
    outbox = Outbox()
    tickets = [Ticket(pb_utils.FakeRequest([k + 1]), outbox) for k in range(3)]

    answers.refuse(tickets, "queue_full", "queue full: bound 2")
    answers.refuse_each([(Ticket(pb_utils.FakeRequest([9]), outbox), "cancelled by its client")],
                        "cancelled")
    answers.refuse([], "deadline_infeasible", "nothing to refuse: not counted")

    codes = [pb_utils.error_code(r) for _, r in outbox.delivered]
    assert codes == [pb_utils.TritonError.UNAVAILABLE] * 3 + [pb_utils.TritonError.CANCELLED]
    assert outbox.delivered[0][1].error().message() == "queue full: bound 2"
    assert metrics.rejected == [("queue_full", 3)]
    assert metrics.events == ["cancelled_requests_total"]


def test_every_ending_names_a_triton_error_code_and_a_published_label(pb_utils):
    for kind, ending in ENDINGS.items():
        assert hasattr(pb_utils.TritonError, ending.code), kind
        assert ending.refusal_label is None or ending.refusal_label in REJECT_REASONS, kind


def test_a_batchs_answers_go_to_each_ticket_once_and_an_earlier_answer_stays(pb_utils):
    """``answer_all``: every ticket gets its own response; one answered already (say, its
    timeout passed while it queued) keeps its answer."""
    outbox = Outbox()
    tickets = [Ticket(pb_utils.FakeRequest([k + 1]), outbox) for k in range(3)]
    earlier = error("timed out", pb_utils.TritonError.UNAVAILABLE)
    tickets[1].answer(earlier)
    responses = [embedding_response(np.full(4, k)) for k in range(3)]

    answer_all(tickets, responses)

    assert outbox.delivered == [(tickets[1], earlier), (tickets[0], responses[0]),
                                (tickets[2], responses[2])]
    assert all(t.answered for t in tickets)


def test_slots_built_before_the_outputs_answer_each_row_with_the_outputs_given_after(pb_utils):
    slots = EmbeddingSlots(3, 4)
    built = list(slots.built)  # what a batch builds while it is on the device
    outputs = np.arange(12, dtype=np.float64).reshape(3, 4)
    responses = slots.responses(outputs)
    assert responses == built  # the same objects, filled: nothing built after the batch
    tensors = [r.output_tensors()[0] for r in responses]
    assert [t.name() for t in tensors] == ["EMBEDDING"] * 3
    assert [t.as_numpy().tolist() for t in tensors] == [[row] for row in outputs.tolist()]
    assert all(t.as_numpy().dtype == np.float32 for t in tensors)


def test_slots_given_outputs_of_another_shape_or_kind_build_responses_from_the_outputs(
        pb_utils):
    for outputs in (np.ones((2, 4)), np.ones((3, 5)), np.ones((3, 4), dtype=np.int64)):
        slots = EmbeddingSlots(3, 4)
        responses = slots.responses(outputs)
        assert all(r not in slots.built for r in responses)
        assert [r.output_tensors()[0].as_numpy().tolist() for r in responses] == [
            [row] for row in outputs.tolist()]


def test_slots_only_for_an_executor_that_names_its_output_width(pb_utils):
    class Wide:
        output_dim = 8

    assert embedding_slots(Wide(), 2).buffer.shape == (2, 8)
    assert embedding_slots(object(), 2) is None  # no width: built from the outputs
    assert embedding_slots(Wide(), 0) is None
