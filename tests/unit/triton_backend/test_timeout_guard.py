"""``timeout_guard.TimeoutGuard``: a request whose client timeout passes while the plugin
holds it is answered at its deadline (UNAVAILABLE, naming the timeout), sent at once; its
batch's later result is dropped; requests without a timeout are untouched. Driven through
intake hold on the fake ``triton_python_backend_utils`` with the device held at its door
(a gate), so the timeout certainly passes while the batch runs."""

from __future__ import annotations

from tests.eventually import eventually
from tests.unit.triton_backend.test_adapter_cancellation import the_answer
from triton_backend.timeout_guard import TimeoutGuard

SLA_MS = 10_000.0


def test_a_timeout_that_passes_while_its_batch_runs_is_answered_at_its_deadline(
        adapter, pb_utils):
    model = adapter.model("hold", gated=True)
    timed = pb_utils.FakeRequest([300, 7, 8], sla_ms=SLA_MS, timeout_us=100_000)
    plain = [pb_utils.FakeRequest([301 + k, 7, 8], sla_ms=SLA_MS) for k in range(2)]
    requests = [timed, *plain]
    call, returned = adapter.held_call(model, requests)

    eventually(lambda: len(timed.sender.sends) == 1,
               what="the timed request answered while its batch is held")
    (response, _), = timed.sender.sends
    assert pb_utils.error_code(response) == pb_utils.TritonError.UNAVAILABLE
    assert "timeout of 100.0 ms" in response.error().message()
    assert not any(r.sender.sends for r in plain)
    adapter.gate.open()
    call.join(timeout=30)
    assert not call.is_alive()

    for i, req in enumerate(requests):
        answer = the_answer(pb_utils, req, returned[0], i)  # exactly one each
        if req is not timed:
            assert pb_utils.error_code(answer) is None
    assert returned[0][0] is None and model.runner.timeouts.expired == 1


def test_a_request_answered_in_time_is_not_answered_again(pb_utils):
    """Watched requests answered before their deadline are skipped; those still open when
    it passes are answered once, together."""
    class Ticket:
        def __init__(self, answered):
            self.answered = answered

    class Answers:
        def __init__(self):
            self.refused = []

        def refuse_each(self, refused, kind, at_once=False):
            self.refused.append(([t for t, _ in refused], kind, at_once))
            for t, _ in refused:
                t.answered = True
            return len(refused)

    answers = Answers()
    guard = TimeoutGuard(answers, "m", clock=lambda: 100.0)
    done, open_a, open_b = Ticket(True), Ticket(False), Ticket(False)
    guard.watch([(done, 99.0, 50.0), (open_a, 99.5, 50.0), (open_b, 99.9, 80.0)])

    eventually(lambda: guard.expired == 2, what="the two open requests answered")
    guard.stop(timeout_s=5)
    assert answers.refused == [([open_a, open_b], "timed_out", True)]
