"""``hold_driver.HoldDriver``: intake hold's execute() call, driven in process on the fake
``triton_python_backend_utils``. Contracts: one answer per request, in the returned list
unless the call's end would make it late; a client's timeout enforced at hand-over; one
timeline record per call, whose counts add up."""

from __future__ import annotations

import gc
import re
import threading
import time
import weakref

import pytest

from scheduler_core.engine import Step
from scheduler_core.request import QueuedRequest
from sidecar.sampler import PerceptionSample, SampleFile
from tests.eventually import eventually
from tests.unit.triton_backend.test_adapter_cancellation import the_answer
from triton_backend import timeline as timeline_module
from triton_backend.hold_driver import SEND_COST_S, SendCost
from triton_backend.metric_catalog import METRICS_PUBLISH_PERIOD_S
from triton_backend.timeline import CallRecord

SLA_MS = 10_000.0  # nothing is late unless a test makes it so


def requests_of(pb_utils, n: int, first: int = 100, **kwargs):
    return [pb_utils.FakeRequest([first + k, 7, 8, 9], **{"sla_ms": SLA_MS, **kwargs})
            for k in range(n)]


def sent_early(requests) -> int:
    return sum(len(r.sender.sends) for r in requests)


def estimated(monkeypatch, ms: float) -> None:
    """Every step's batch is estimated to run ``ms`` (the device still runs its own
    cost): a running batch's estimated end is then ahead of the clock (large), or behind
    it (0), whatever the host's speed."""
    monkeypatch.setattr(Step, "estimated_ms", property(lambda self: ms))


def test_answers_go_back_with_the_call(adapter, pb_utils):
    """A call that ends in time returns every answer in its list: no send() round trip."""
    model = adapter.model("hold")
    requests = requests_of(pb_utils, 5)

    returned = model.execute(requests)

    assert len(returned) == len(requests)
    for i, req in enumerate(requests):
        assert pb_utils.error_code(the_answer(pb_utils, req, returned, i)) is None
    assert sent_early(requests) == 0 and model.driver.early_sends == 0


def test_a_bad_request_fails_alone(adapter, pb_utils):
    model = adapter.model("hold")
    requests = requests_of(pb_utils, 3)
    requests.insert(1, pb_utils.FakeRequest([0, 1], sla_ms=SLA_MS))  # 0 is padding

    returned = model.execute(requests)

    bad = the_answer(pb_utils, requests[1], returned, 1)
    assert pb_utils.error_code(bad) == pb_utils.TritonError.INVALID_ARG
    assert "token ids" in bad.error().message()
    for i in (0, 2, 3):
        assert pb_utils.error_code(the_answer(pb_utils, requests[i], returned, i)) is None


def backdate(monkeypatch, model, seconds: float) -> None:
    """The call's requests are dated ``seconds`` earlier (they waited in Triton's queue)."""
    arrival = model.intake.admission_arrival

    def backdated(now_s, n):
        date, handed_over = arrival(now_s, n)
        return date - seconds, handed_over

    monkeypatch.setattr(model.intake, "admission_arrival", backdated)


def test_a_client_timeout_that_passed_in_the_queue_is_refused_at_hand_over(
        adapter, pb_utils, monkeypatch):
    """Triton's queue enforces no timeout without a queue policy: the plugin does, at
    hand-over, naming it; a request without a timeout is served."""
    model = adapter.model("hold")
    spy = adapter.spy(model)
    backdate(monkeypatch, model, 0.5)
    timed = pb_utils.FakeRequest([300, 7, 8], timeout_us=100_000)  # 100 ms, waited 500
    plain = pb_utils.FakeRequest([301, 7, 8], sla_ms=SLA_MS)

    returned = model.execute([timed, plain])

    refused = the_answer(pb_utils, timed, returned, 0)
    assert pb_utils.error_code(refused) == pb_utils.TritonError.UNAVAILABLE
    assert "timeout of 100.0 ms" in refused.error().message()
    assert pb_utils.error_code(the_answer(pb_utils, plain, returned, 1)) is None
    assert spy.computed == [(301, 7, 8)]


def test_requests_whose_timeout_passed_in_the_queue_count_as_late(adapter, pb_utils,
                                                                  monkeypatch):
    """Refused at hand-over, they still move the scheduler's late share, as the same wait
    under an SLA would (else a timeout hides an overload until the calls run long)."""
    model = adapter.model("hold")
    model.execute(requests_of(pb_utils, 3))
    assert model.scheduler.late_share == 0.0
    backdate(monkeypatch, model, 0.5)
    model.execute([pb_utils.FakeRequest([300 + k, 7, 8], timeout_us=100_000)
                   for k in range(3)])
    assert model.scheduler.late_share > 0.0


def test_a_timeout_shorter_than_the_sla_is_the_deadline(adapter, pb_utils):
    """SLA 10 s and timeout 80 ms, handed over in time: queued with the timeout as its
    deadline (an answer after it reaches nobody), and served."""
    model = adapter.model("hold")
    seen = {}  # what either path (run as handed, or submitted) was given
    for name in ("take_planned", "submit"):
        real = getattr(model.runner, name)
        setattr(model.runner, name, lambda queued, *args, _real=real: (
            seen.update((q.request_id, q.sla_ms) for q in queued), _real(queued, *args))[1])
    req = pb_utils.FakeRequest([400, 7], sla_ms=SLA_MS, timeout_us=80_000)

    returned = model.execute([req])

    assert SLA_MS > 80.0 and list(seen.values()) == [80.0]
    assert pb_utils.error_code(the_answer(pb_utils, req, returned, 0)) is None


def test_answers_the_calls_end_would_make_late_go_early_exactly_once(adapter, pb_utils,
                                                                    monkeypatch):
    """A call of several batches whose remaining work is estimated past its requests'
    deadlines: the answers made so far, still in time, go early through their senders; the
    last batch's come back in the list; each request has one answer either way."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4"})
    monkeypatch.setattr(type(model.driver), "_remaining_s",
                        staticmethod(lambda record, left: 2 * SLA_MS / 1000.0))
    requests = requests_of(pb_utils, 10)

    returned = model.execute(requests)

    for i, req in enumerate(requests):
        the_answer(pb_utils, req, returned, i)  # exactly one, wherever it went
    early = sent_early(requests)
    # every batch's answers but the last's (ten in batches of at most four: two before it)
    assert early == model.driver.early_sends and 6 <= early <= 8
    assert sum(r is None for r in returned) == early
    assert all(bool(r.sender.sends) != (returned[i] is not None)
               for i, r in enumerate(requests))


def spy_device(monkeypatch, model) -> tuple[list, list]:
    """The executor's batches as events, in order: ("launch", n) and ("result",); and a
    list that is not empty while a batch is between its launch and its result."""
    events, flying = [], []
    launch = model.executor.launch

    class Flight:
        def __init__(self, inner):
            self.inner, self.waited = inner, True

        @property
        def device_s(self):
            return self.inner.device_s

        def result(self):
            flying.pop()
            events.append(("result",))
            return self.inner.result()

    def spied_launch(sequences, timeout_s=0.0):
        flying.append(1)
        events.append(("launch", len(sequences)))
        return Flight(launch(sequences, timeout_s))

    monkeypatch.setattr(model.executor, "launch", spied_launch)
    return events, flying


def test_bookkeeping_and_early_answers_go_while_the_next_batch_runs(adapter, pb_utils,
                                                                      monkeypatch):
    """A call of several batches: each batch's feedback (the engine's ``observed``) and
    the early answers happen while a later batch is on the device (between its launch and
    its result), never between batches; the last batch's feedback waits for the next
    call's batch, and the counts add up after it."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4"})
    monkeypatch.setattr(type(model.driver), "_remaining_s",
                        staticmethod(lambda record, left: 2 * SLA_MS / 1000.0))
    device, flying = spy_device(monkeypatch, model)
    events, runner = [], model.runner
    runner.deferred.max_items = 1  # each feedback due at the next batch (test_deferred.py)
    observed = runner.engine.observed

    def spied_observed(batch, *args):
        events.append(("observed", bool(flying)))
        return observed(batch, *args)

    monkeypatch.setattr(runner.engine, "observed", spied_observed)
    requests = requests_of(pb_utils, 10)
    for req in requests:
        send = req.sender.send
        req.sender.send = lambda *a, _send=send, **k: (events.append(("send", bool(flying))),
                                                        _send(*a, **k))[1]

    returned = model.execute(requests)

    for i, req in enumerate(requests):
        the_answer(pb_utils, req, returned, i)
    launches = [e[1] for e in device if e[0] == "launch"]
    assert len(launches) >= 3 and sum(launches) == 10 and model.driver.early_sends > 0
    assert events and all(during for _, during in events), events
    assert sum(kind == "observed" for kind, _ in events) == len(launches) - 1
    assert model.scheduler.counts["requests"] < 10  # the last batch's, not yet observed
    model.execute(requests_of(pb_utils, 1, first=300))
    assert model.scheduler.counts["requests"] >= 10


@pytest.mark.parametrize("ahead", [True, False])
def test_the_next_batch_is_decided_while_the_running_one_is_on_the_device(
        adapter, pb_utils, monkeypatch, ahead):
    """A call of several decided batches: while a batch runs and its estimated end is
    still ahead, the engine steps for the next one (at that end), which is launched as
    soon as the running batch returns, with no decision between; a batch already past
    its estimate leaves the decision to its end. Either way the call's batches take
    every request once, and each has one answer."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4"})
    estimated(monkeypatch, 1_000.0 if ahead else 0.0)
    events, flying = spy_device(monkeypatch, model)
    step = model.runner.engine.step  # ("decide", whether a batch is on the device)
    monkeypatch.setattr(model.runner.engine, "step", lambda *args: (
        events.append(("decide", bool(flying))), step(*args))[1])
    requests = requests_of(pb_utils, 10)

    returned = model.execute(requests)

    for i, req in enumerate(requests):
        assert pb_utils.error_code(the_answer(pb_utils, req, returned, i)) is None
    launches = [e[1] for e in events if e[0] == "launch"]
    assert len(launches) >= 3 and sum(launches) == 10
    decides = [e for e in events if e[0] == "decide"]
    assert decides[0] == ("decide", False)  # the call's first batch: nothing runs yet
    # each later decision: while its predecessor ran (ahead), or after it returned
    assert decides[1:] == [("decide", ahead)] * (len(launches) - 1), events
    # what follows a batch's result: the next launch (decided ahead), or its decision
    follows = [after for before, after in zip(events, events[1:]) if before == ("result",)]
    assert follows == ([("launch", n) for n in launches[1:]] if ahead
                       else [("decide", False)] * (len(launches) - 1)), events
    assert events[-1] == ("result",)


def test_the_send_cost_follows_the_sends_measured_on_this_host():
    """The cost of one early send starts at SEND_COST_S and moves toward what the driver's
    own rounds of sends took, per send; a round of no sends teaches nothing."""
    cost = SendCost(initial_s=SEND_COST_S, smoothing=0.5)
    cost.observe(0.0, 0)
    assert cost.estimate_s == SEND_COST_S
    cost.observe(10 * 0.0001, 10)  # ten sends of 0.1 ms each
    assert cost.estimate_s == pytest.approx((SEND_COST_S + 0.0001) / 2)
    for _ in range(40):
        cost.observe(4 * 0.001, 4)
    assert cost.estimate_s == pytest.approx(0.001)


def test_a_calls_remaining_run_counts_each_queued_batchs_launch(adapter, pb_utils):
    """What the call still has to run is at least the scheduler's estimate for what is
    queued (each batch whole, with its launch), however fast its batches so far went
    per request."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4"})
    scheduler = model.runner.scheduler
    for k in range(6):
        scheduler.submit(QueuedRequest(k, seq_len=8 + k, arrival_s=0.0, sla_ms=SLA_MS), 0.0)
    record = CallRecord(start_s=0.0, requests=30)
    record.batch(24, 0, 0.0, 24e-9, 1.0, "fifo")  # 1 ns a request so far
    queued_s = scheduler.queued_run_ms() / 1000.0
    try:
        assert queued_s > 6e-9
        assert model.driver._remaining_s(record, 6) == pytest.approx(queued_s)
    finally:
        scheduler.drain()  # these carry no Triton request to answer


def test_an_answer_already_late_waits_for_the_list(adapter, pb_utils, monkeypatch):
    """With too little of the call ahead to pay for the sends, sending early cannot make a
    late answer in time: it goes back with the call."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4",
                                     "control.infeasible_policy": "serve_late"})
    monkeypatch.setattr(type(model.driver), "_remaining_s",
                        staticmethod(lambda record, left: SEND_COST_S))
    backdate(monkeypatch, model, 1.0)  # waited 1 s: a 50 ms SLA is gone
    requests = requests_of(pb_utils, 10, sla_ms=50.0)

    returned = model.execute(requests)

    assert sent_early(requests) == 0 and all(r is not None for r in returned)


def test_with_a_long_call_ahead_a_finished_batchs_answers_go_early(adapter, pb_utils,
                                                                    monkeypatch):
    """Between batches, with more of the call ahead than the sends cost everyone still in
    it: the answers made so far, late or not, go early through their senders; the last
    batch's come back in the list; each request has one answer."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4",
                                     "control.infeasible_policy": "serve_late"})
    monkeypatch.setattr(type(model.driver), "_remaining_s",
                        staticmethod(lambda record, left: 100 * SEND_COST_S))
    backdate(monkeypatch, model, 1.0)  # waited 1 s: late, and sent early all the same
    requests = requests_of(pb_utils, 10, sla_ms=50.0)

    returned = model.execute(requests)

    early = sent_early(requests)
    assert early == model.driver.early_sends and 6 <= early <= 8  # all but the last batch
    assert sum(r is None for r in returned) == early
    for i, req in enumerate(requests):
        the_answer(pb_utils, req, returned, i)


def test_the_timeline_records_every_call(adapter, pb_utils, monkeypatch, tmp_path):
    """One record per call; the calls' requests add up to what was sent; a record's
    batches add up to its valid requests; each call's thread spent CPU, which the totals
    add up."""
    monkeypatch.setenv(timeline_module.TIMELINE_ENV, str(tmp_path / "tl"))
    model = adapter.model("hold")
    sizes = [3, 1, 6]
    sent = 0
    for k, n in enumerate(sizes):
        model.execute(requests_of(pb_utils, n, first=100 * (k + 1)))
        sent += n
    adapter.finalize(model)

    records = timeline_module.read(str(tmp_path / "tl" / "emulated_explicit.timeline.jsonl"))
    assert [r["requests"] for r in records] == sizes
    assert sum(b[0] + b[1] for r in records for b in r["batches"]) == sent
    assert all(r["start_s"] <= r["decoded_s"] <= r["return_s"] for r in records)
    assert records[0]["gap_s"] is None and all(r["gap_s"] >= 0 for r in records[1:])
    assert model.driver.timeline.totals["requests"] == sent
    assert all(r["cpu_s"] > 0 for r in records)
    assert model.driver.timeline.totals["cpu_s"] == pytest.approx(sum(r["cpu_s"]
                                                                      for r in records))


@pytest.mark.parametrize("ahead", [False, True])
def test_under_a_sustained_overload_a_call_keeps_its_budget_and_refuses_the_rest(
        adapter, pb_utils, monkeypatch, ahead):
    """Overloaded (the scheduler says so), the call stops dispatching once its budget is
    spent and refuses what is left at once, UNAVAILABLE, naming the overload; every
    request still has exactly one answer, and served + refused == sent. ``ahead``: the
    running batch's estimated end is ahead of the clock, where the next step would be
    decided while it runs: the budget is kept there too."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4",
                                     "control.overload_call_budget_sla_fraction": "0.01"})
    if ahead:
        estimated(monkeypatch, 1_000.0)
    monkeypatch.setattr(type(model.scheduler), "overloaded", property(lambda self: True))
    monkeypatch.setattr(type(model.driver), "_mean_batch_s",
                        staticmethod(lambda record: 10.0))  # any batch would overrun it
    requests = requests_of(pb_utils, 10)

    returned = model.execute(requests)

    codes = [pb_utils.error_code(the_answer(pb_utils, r, returned, i))
             for i, r in enumerate(requests)]
    refused = [i for i, c in enumerate(codes) if c == pb_utils.TritonError.UNAVAILABLE]
    assert len(refused) + codes.count(None) == len(requests) and refused
    assert codes.count(None) == 4  # the first batch, then the budget
    message = the_answer(pb_utils, requests[refused[0]], returned, refused[0]).error().message()
    assert "overloaded" in message
    assert re.search(r"; retry after \d+ ms$", message), message  # docs/reliability.md


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("late", [0, 3])
def test_a_call_past_its_budget_that_refuses_enough_becomes_an_overload(
        adapter, pb_utils, monkeypatch, late, ahead):
    """Not yet overloaded, a call past its budget whose first decision refused ``late`` of
    the requests it decided: with none refused it serves everything; with 3 of 7 the
    scheduler enters the overload state and the call refuses the rest at once. Either
    way, exactly one answer per request; and the same where the next step would be
    decided while the first batch runs (``ahead``: that batch and its refusals count)."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4",
                                     "control.overload_call_budget_sla_fraction": "0.01"})
    if ahead:
        estimated(monkeypatch, 1_000.0)
    monkeypatch.setattr(type(model.driver), "_mean_batch_s", staticmethod(lambda record: 10.0))
    backdate(monkeypatch, model, 1.0)  # waited 1 s: a 50 ms SLA is gone
    requests = ([pb_utils.FakeRequest([500 + k, 7], sla_ms=50.0) for k in range(late)]
                + requests_of(pb_utils, 10 - late))

    returned = model.execute(requests)

    codes = [pb_utils.error_code(the_answer(pb_utils, r, returned, i))
             for i, r in enumerate(requests)]
    assert model.scheduler.overloaded is bool(late)
    assert codes.count(None) == (4 if late else 10)  # one batch of 4, then the budget
    assert codes.count(pb_utils.TritonError.UNAVAILABLE) == (6 if late else 0)


def test_a_request_whose_sla_is_below_its_own_run_time_sets_no_budget(adapter, pb_utils):
    """One request with an SLA no run can meet (refused at once, whatever the load) rides
    in a call of more than one batch: it is refused as infeasible, and the others are all
    served; its SLA does not become the call's budget, which would have the call overrun
    at its second batch and refuse them as overloaded."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4"})
    requests = ([pb_utils.FakeRequest([500, 7], sla_ms=0.001)]
                + requests_of(pb_utils, 9))

    returned = model.execute(requests)

    codes = [pb_utils.error_code(the_answer(pb_utils, r, returned, i))
             for i, r in enumerate(requests)]
    assert codes[0] == pb_utils.TritonError.UNAVAILABLE
    assert "overloaded" not in the_answer(pb_utils, requests[0], returned, 0).error().message()
    assert codes[1:] == [None] * 9
    assert not model.scheduler.overloaded


def test_a_late_share_left_by_an_earlier_load_refuses_nothing_before_a_decision(
        adapter, pb_utils, monkeypatch):
    """The overload budget applies from a call's second batch: a call whose first
    decision serves it whole is served, however overloaded the scheduler still reads."""
    model = adapter.model("hold", **{"control.overload_call_budget_sla_fraction": "0.01"})
    monkeypatch.setattr(type(model.scheduler), "overloaded", property(lambda self: True))
    monkeypatch.setattr(type(model.driver), "_mean_batch_s", staticmethod(lambda record: 10.0))
    requests = requests_of(pb_utils, 3)

    returned = model.execute(requests)

    for i, req in enumerate(requests):
        assert pb_utils.error_code(the_answer(pb_utils, req, returned, i)) is None


def test_a_quiet_call_runs_as_handed_and_a_split_one_is_decided(adapter, pb_utils,
                                                                monkeypatch, tmp_path):
    """A call the scheduler would run whole is one batch as handed over (the scheduler is
    not asked for a decision), counted as any batch; one of more than a batch is
    submitted and decided. Every request has its one answer either way."""
    monkeypatch.setenv(timeline_module.TIMELINE_ENV, str(tmp_path / "tl"))
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4"})
    spy = adapter.spy(model)
    asked = []
    schedule = model.scheduler.schedule
    model.scheduler.schedule = lambda now, flush=False: (asked.append(now),
                                                         schedule(now, flush))[1]
    decided = []
    for requests in (requests_of(pb_utils, 3, first=100), requests_of(pb_utils, 6, first=200)):
        returned = model.execute(requests)
        decided.append(len(asked))
        for i, req in enumerate(requests):
            assert pb_utils.error_code(the_answer(pb_utils, req, returned, i)) is None
    adapter.finalize(model)

    records = timeline_module.read(str(tmp_path / "tl" / "emulated_explicit.timeline.jsonl"))
    batches = [[(b[0], b[5]) for b in r["batches"]] for r in records]
    assert batches[0] == [(3, "as_handed")]
    assert sorted(batches[1]) in ([(2, "length_aware"), (4, "length_aware")],
                                  [(3, "length_aware"), (3, "length_aware")])
    # each batch's executor run (Ran.executor_s) lies inside its span, on either path
    for b in (b for r in records for b in r["batches"]):
        assert 0.0 < b[6] <= b[3] - b[2], b
    assert decided[0] == 0 and decided[1] >= 2
    assert len(spy.computed) == 9
    assert model.scheduler.counts["batches"] == 3 and model.scheduler.counts["requests"] == 9


def test_no_request_outlives_its_call_in_the_plugin(adapter, pb_utils):
    """Once a call returned and Triton let its requests go, nothing of the plugin holds
    one: not a decided call's last batch (the runner's), not a launched call's. A request
    kept past its call is freed in a later one, cold, and holds its shared memory."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4"})
    gone = []
    for n, first in ((6, 200), (3, 100)):  # decided (two batches), then as handed over
        requests = requests_of(pb_utils, n, first=first)
        refs = [weakref.ref(r) for r in requests]
        returned = model.execute(requests)
        assert all(pb_utils.error_code(the_answer(pb_utils, r, returned, i)) is None
                   for i, r in enumerate(requests))
        del requests, returned
        gc.collect()
        gone.append(all(ref() is None for ref in refs))
    adapter.finalize(model)
    assert gone == [True, True]


def test_a_step_that_fails_on_the_as_handed_path_fails_its_batch_alone(adapter, pb_utils):
    """The injected scheduler fault (loop_fault_token) in a call run as handed: its
    requests are answered INTERNAL in the returned list (execute() does not raise), the
    step is counted, and the next call is served."""
    model = adapter.model("hold", loop_fault_token="4242")
    faulty = [pb_utils.FakeRequest([4242, 7], sla_ms=SLA_MS), *requests_of(pb_utils, 2)]

    returned = model.execute(faulty)

    for i, req in enumerate(faulty):
        answer = the_answer(pb_utils, req, returned, i)
        assert pb_utils.error_code(answer) == pb_utils.TritonError.INTERNAL
        assert "scheduler loop failed" in answer.error().message()
    assert model.runner.loop_errors == 1
    fine = requests_of(pb_utils, 2, first=500)
    returned = model.execute(fine)
    assert all(pb_utils.error_code(the_answer(pb_utils, r, returned, i)) is None
               for i, r in enumerate(fine))


def test_a_request_whose_decode_raises_fails_alone_and_its_call_is_served(adapter, pb_utils):
    """31 valid requests and one whose inputs cannot be read (an unexpected error, not an
    input error): 31 embeddings, one INTERNAL naming the error's type."""
    class Broken(pb_utils.FakeRequest):
        def inputs(self):
            raise RuntimeError("unreadable")

    model = adapter.model("hold")
    requests = [pb_utils.FakeRequest([100 + k, 7], sla_ms=SLA_MS) for k in range(31)]
    requests.insert(13, Broken([99], sla_ms=SLA_MS))

    returned = model.execute(requests)

    for i, req in enumerate(requests):
        response = the_answer(pb_utils, req, returned, i)
        if i == 13:
            assert pb_utils.error_code(response) == pb_utils.TritonError.INTERNAL
            assert "RuntimeError" in response.error().message()
        else:
            assert not response.has_error(), response


def test_a_hung_batch_is_answered_internal_by_the_watchdog_once(adapter, pb_utils):
    """The device held past the watchdog's bound (batch_timeout_floor_ms 50): the call's
    requests are answered INTERNAL through their senders while execute() is still inside
    the executor, hung_batches_total counts it, and when the device lets go the call
    returns no second answer for them."""
    from tests.eventually import eventually  # noqa: PLC0415

    model = adapter.model("hold", gated=True, batch_timeout_floor_ms="50")
    requests = [pb_utils.FakeRequest([200 + k, 7], sla_ms=SLA_MS) for k in range(3)]
    call, returned = adapter.held_call(model, requests)

    eventually(lambda: all(len(r.sender.sends) == 1 for r in requests),
               what="the watchdog answered the held batch's requests")
    for req in requests:
        (response, _), = req.sender.sends
        assert pb_utils.error_code(response) == pb_utils.TritonError.INTERNAL
        assert "watchdog" in response.error().message()
    adapter.gate.open()
    call.join(timeout=30)
    assert not call.is_alive()
    for i, req in enumerate(requests):
        the_answer(pb_utils, req, returned[0], i)  # exactly one: the early one
    assert model.runner.watchdog.hung_batches == 1
    eventually(lambda: pb_utils.metric_value("explicit_batching_hung_batches_total") == 1,
               what="hung_batches_total counts the batch once")


def test_the_sidecars_sample_is_applied_by_the_metrics_thread_not_by_each_call(
        adapter, pb_utils, tmp_path, monkeypatch):
    """A sidecar sample lives a perception period: intake hold's calls (thousands a
    second) do not apply it again; the metrics thread applies a sample file's each
    perception period.
    Whether fresh, stale or missing, no reading of it is applied from a call."""
    path = tmp_path / "sample.json"
    model = adapter.model("hold", sidecar=f"file:{path}")
    applied = []  # (thread, reading) of every perceive with a reading
    perceive = model.runner.engine.perceive

    def spy(sample):
        if sample is not None:
            applied.append((threading.current_thread().name, sample))
        perceive(sample)

    def fresh_sample_applied() -> bool:
        SampleFile(str(path)).write(PerceptionSample(  # fresh at every look
            taken_s=time.monotonic(), health="ok", endpoint_ok=None, nvml_available=True,
            utilization=0.9))
        return any(s.ok and s.utilization == 0.9 for _, s in applied)

    monkeypatch.setattr(model.runner.engine, "perceive", spy)
    for _ in range(3):
        model.execute(requests_of(pb_utils, 3))  # no sample yet
    eventually(fresh_sample_applied, what="the metrics thread applies a fresh sample")
    for _ in range(3):
        model.execute(requests_of(pb_utils, 3))  # a sample there

    assert {thread for thread, _ in applied} == {"explicit-metrics"}


def test_the_in_process_sidecars_samples_are_applied_on_its_own_thread(adapter, pb_utils,
                                                                       monkeypatch):
    """The in-process sidecar hands each sample to the engine as it takes it (its sink):
    the metrics thread need not wake each perception period for it."""
    model = adapter.model("hold", sidecar="thread")
    applied = []  # the threads that applied a reading
    perceive = model.runner.engine.perceive

    def spy(sample):
        if sample is not None:
            applied.append(threading.current_thread().name)
        perceive(sample)

    monkeypatch.setattr(model.runner.engine, "perceive", spy)
    eventually(lambda: "perception-sidecar" in applied,
               what="a sample applied on the sidecar's thread")


def test_the_metrics_thread_wakes_when_the_watchdog_or_a_publish_is_due(adapter, pb_utils):
    """Between wake-ups the metrics thread sleeps until its next work: the next publish
    (intake hold), the running batch's bound, and at most the watchdog's floor (a batch
    that starts meanwhile is bound at least that far off)."""
    model = adapter.model("hold", gated=True, batch_timeout_floor_ms="5000")
    runner = model.runner
    now = time.monotonic()
    assert runner.metrics_due_in_s(now, publish=False) == 5.0
    assert runner.metrics_due_in_s(now, publish=True) <= METRICS_PUBLISH_PERIOD_S

    call, _ = adapter.held_call(model, requests_of(pb_utils, 2))
    running = runner.watchdog.running
    now = time.monotonic()
    assert runner.metrics_due_in_s(now, publish=False) == pytest.approx(
        running.started_s + running.bound_s - now)
    running.hung = True  # answered: nothing more to look for in it
    assert runner.metrics_due_in_s(now, publish=False) == 5.0
    running.hung = False
    adapter.gate.open()
    call.join(timeout=30)
    assert not call.is_alive()


def test_the_engine_hears_a_batch_started_once_it_is_on_the_device(adapter, pb_utils,
                                                                   monkeypatch):
    """The batch's bookkeeping (busy time, a hand-over's arrivals) runs beside the device:
    the engine hears each batch started after its launch, on the as-handed path and on
    the decided one, with the time the batch was taken to start."""
    model = adapter.model("hold", **{"scheduler.max_batch_size": "4"})
    events = []
    spy = adapter.spy(model)
    launch = model.executor.launch

    def launched(sequences, timeout_s=0.0):
        flight = launch(sequences, timeout_s)
        events.append(("launch", len(sequences)))
        return flight

    monkeypatch.setattr(model.executor, "launch", launched)
    started = model.runner.engine.started
    monkeypatch.setattr(model.runner.engine, "started", lambda batch, now_s: (
        events.append(("started", len(batch))), started(batch, now_s)))

    model.execute(requests_of(pb_utils, 3))  # one batch as handed
    model.execute(requests_of(pb_utils, 6, first=200))  # more than a batch: decided

    assert len(spy.batches) >= 3
    assert events == [e for n in map(len, spy.batches) for e in (("launch", n), ("started", n))]
