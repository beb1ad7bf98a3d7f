"""``decode.decode_call``: a call's Triton requests in, queued requests for the engine or
the ones that end at once out (malformed, past their client timeout, the waker's), on the
fake pb_utils (conftest.py)."""

from __future__ import annotations

import itertools

from triton_backend.answers import CallList, Ticket
from triton_backend.decode import decode_call

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
