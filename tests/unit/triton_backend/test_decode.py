"""``decode.decode_call``: a call's Triton requests in, queued requests for the engine or
the ones that end at once out (malformed, past their client timeout, the waker's), on the
fake pb_utils (conftest.py)."""

from __future__ import annotations

import itertools

import numpy as np

from triton_backend.answers import CallList, Ticket, embedding_responses
from triton_backend.decode import decode_call, read_launchable
from triton_backend.executors import MINILM_MAX_SEQ_LEN, MINILM_VOCAB_SIZE

DEFAULT_SLA_MS = 200.0


def test_a_call_is_sorted_into_queued_invalid_expired_and_wake_requests(pb_utils):
    fake = pb_utils.FakeRequest
    requests = [
        fake([5, 6], sla_ms=80.0),  # queued with its SLA
        fake([7]),  # queued with the default SLA
        fake(None, sla_ms=80.0),  # no INPUT_IDS: invalid
        fake([8], sla_ms=80.0, timeout_us=20_000),  # waited 50 ms of a 20 ms timeout
        fake([9], sla_ms=80.0, timeout_us=60_000),  # in time: its timeout is its deadline
        fake([10], request_id="wake"),
    ]
    call = CallList(requests)
    tickets = [Ticket(r, call, slot=i) for i, r in enumerate(requests)]

    decoded = decode_call(requests, None, tickets, arrival_s=1.0, now_s=1.05,
                          default_sla_ms=DEFAULT_SLA_MS, ids=itertools.count(1),
                          is_wake=lambda r: r.request_id() == "wake")

    assert [q.handle for q in decoded.queued] == [tickets[0], tickets[1], tickets[4]]
    assert [q.sla_ms for q in decoded.queued] == [80.0, DEFAULT_SLA_MS, 60.0]
    assert all(q.arrival_s == 1.0 for q in decoded.queued)
    assert [t for t, _ in decoded.invalid] == [tickets[2]]
    assert [t for t, _ in decoded.expired] == [tickets[3]]
    assert "timeout of 20.0 ms" in decoded.expired[0][1]
    assert decoded.wakes == 1 and call.answered(5)  # the wake request: answered empty
    assert decoded.min_sla_ms == 60.0
    assert tickets[0].input_ids.tolist() == [5, 6]


def test_a_request_whose_decode_raises_fails_alone_naming_the_error_not_its_content(pb_utils):
    class Broken(pb_utils.FakeRequest):
        def inputs(self):
            raise RuntimeError("secret-content-of-the-request")

    requests = [pb_utils.FakeRequest([5, 6], sla_ms=80.0), Broken([7], sla_ms=80.0),
                pb_utils.FakeRequest([8], sla_ms=80.0)]
    call = CallList(requests)
    tickets = [Ticket(r, call, slot=i) for i, r in enumerate(requests)]

    decoded = decode_call(requests, None, tickets, arrival_s=1.0, now_s=1.0,
                          default_sla_ms=DEFAULT_SLA_MS, ids=itertools.count(1))

    assert [q.handle for q in decoded.queued] == [tickets[0], tickets[2]]
    ((ticket, message),) = decoded.failed
    assert ticket is tickets[1] and "RuntimeError" in message
    assert "secret" not in message and not decoded.invalid


def _decoded(requests, read=None):
    """``decode_call`` of ``requests`` (arrived at 1.0, decoded at 1.05), as comparable
    values: queued (slot, length, SLA, tokens), each ending's (slot, message), the timed."""
    call = CallList(requests)
    tickets = [Ticket(r, call, slot=i) for i, r in enumerate(requests)]
    d = decode_call(requests, None, tickets, arrival_s=1.0, now_s=1.05,
                    default_sla_ms=DEFAULT_SLA_MS, ids=itertools.count(1), read=read)
    return ([(q.handle.slot, q.seq_len, q.sla_ms, q.arrival_s, q.handle.input_ids.tolist())
             for q in d.queued],
            [[(t.slot, m) for t, m in part] for part in (d.invalid, d.failed, d.expired)],
            [(t.slot, at, ms) for t, at, ms in d.timed], d.expired_sla_ms)


def test_a_call_read_first_decodes_each_request_as_the_whole_decode_does(pb_utils):
    """Launch first reads a call's sequences (``read_launchable``) and decodes the rest
    beside the device, the usual request in the loop itself: every request ends as the
    call decoded whole would end it (queued with the same SLA, or the same error)."""
    fake, tensor = pb_utils.FakeRequest, pb_utils.Tensor

    class Broken(fake):
        def parameters(self):
            raise RuntimeError("secret-content-of-the-request")

    def with_sla(value):  # an SLA_MS tensor as the client sent it
        return fake(None, inputs=[tensor("INPUT_IDS", np.array([[3, 4]], np.int64)),
                                  tensor("SLA_MS", np.asarray(value))])

    requests = [
        fake([5, 6], sla_ms=80.0), fake([7]), fake([8], params={"sla_ms": 90}),
        fake([9], sla_ms=70.0, params={"sla_ms": 70.0}),
        fake([10], sla_ms=70.0, params={"sla_ms": 75.0}),  # they disagree: invalid
        fake([11], sla_ms=80.0, timeout_us=60_000),  # in time: timed
        fake([12], sla_ms=80.0, timeout_us=20_000),  # waited 50 ms of 20: expired
        fake([13], sla_ms=float("nan")), fake([14], sla_ms=0.0), fake([15], sla_ms=-1.0),
        fake([16], sla_ms=4_000_000.0), fake([17], params={"sla_ms": "soon"}),
        with_sla(np.array([[50]], np.int32)), with_sla(np.array([[50.0, 60.0]], np.float32)),
        with_sla(np.array([[40.0]], np.float64)), with_sla(np.array([["50"]], np.object_)),
        fake(np.array([18, 19], np.int64)),  # a 1-D INPUT_IDS: sequence_of takes it
        Broken([20], sla_ms=80.0),  # decoding raises: failed, naming the type alone
    ]
    read = read_launchable(requests)

    assert read is not None
    whole, first = _decoded(requests), _decoded(requests, read[0])
    assert first == whole
    queued, (invalid, failed, expired), timed, _ = first
    assert [slot for slot, *_ in queued] == [0, 1, 2, 3, 5, 12, 14, 16]
    assert [slot for slot, _ in invalid] == [4, 7, 8, 9, 10, 11, 13, 15]
    assert [slot for slot, _ in expired] == [6] and [slot for slot, *_ in timed] == [5]
    assert [slot for slot, _ in failed] == [17] and "secret" not in failed[0][1]


def test_read_launchable_takes_a_call_only_where_every_sequence_is_valid(pb_utils):
    """A call with one sequence ``sequence_of`` refuses (or out of the vocabulary) is not
    read first: the call is decoded whole, which names the problem."""
    fake = pb_utils.FakeRequest
    good = [fake([5, 6], sla_ms=80.0), fake(np.array([[7, 8, 9]], np.int64))]
    read, sequences = read_launchable(good)
    assert [s.tolist() for s in sequences] == [[5, 6], [7, 8, 9]]
    assert [r[0] is s for r, s in zip(read, sequences)] == [True, True]
    assert all(s.flags.c_contiguous and s.dtype == np.int64 for s in sequences)
    for bad in (fake(None, sla_ms=80.0), fake([0, 5]), fake([MINILM_VOCAB_SIZE]),
                fake(np.array([[5, 6]], np.int32)), fake(np.array([[5], [6]], np.int64)),
                fake(np.zeros((1, 0), np.int64)), fake([1] * (MINILM_MAX_SEQ_LEN + 1))):
        assert read_launchable([*good, bad]) is None
    # A [1, L] view that is not contiguous: read as a contiguous copy.
    strided = fake(np.arange(1, 9, dtype=np.int64).reshape(2, 4)[:1, ::2])
    (_, sequences) = read_launchable([strided])
    assert sequences[0].tolist() == [1, 3] and sequences[0].flags.c_contiguous


def test_embedding_responses_answer_row_i_with_its_own_row_as_float32(pb_utils):
    rows = np.arange(12, dtype=np.float64).reshape(3, 4)
    responses = embedding_responses(rows)
    outputs = [r.output_tensors()[0] for r in responses]
    assert [o.name() for o in outputs] == ["EMBEDDING"] * 3
    assert [o.as_numpy().tolist() for o in outputs] == [[row] for row in rows.tolist()]
    assert all(o.as_numpy().dtype == np.float32 for o in outputs)
