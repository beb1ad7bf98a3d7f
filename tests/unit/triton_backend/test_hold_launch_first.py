"""``hold_driver.HoldDriver._launch_first``: a call launched before its SLAs are read, on
the fake ``triton_python_backend_utils``. Contracts: the device starts before the call's
SLAs, parameters and timeouts are read, once the engine knows an SLA floor; every request
still ends with exactly one answer, as a decoded call would end it; the counts add up."""

from __future__ import annotations

import math

import pytest

from tests.unit.triton_backend.test_adapter_cancellation import check_outcome, the_answer
from tests.unit.triton_backend.test_hold_driver import SLA_MS, backdate, requests_of
from triton_backend import timeline as timeline_module


def logged_requests(pb_utils, events: list, n: int, first: int, **kwargs):
    """``n`` requests that log ("read", id) when their timeout is read (decode reads
    every request's, beside its SLA and parameters)."""
    class Logged(pb_utils.FakeRequest):
        def timeout(self):
            events.append(("read", self.ids[0]))
            return super().timeout()

    return [Logged([first + k, 7, 8, 9], **{"sla_ms": SLA_MS, **kwargs}) for k in range(n)]


def log_launches(model, monkeypatch, events: list) -> None:
    launch = model.executor.launch

    def launched(sequences, timeout_s=0.0):
        events.append(("launch", len(sequences)))
        return launch(sequences, timeout_s)

    monkeypatch.setattr(model.executor, "launch", launched)


def test_once_a_floor_is_known_the_device_starts_before_the_calls_slas_are_read(
        adapter, pb_utils, monkeypatch, tmp_path):
    """A fresh model knows no SLA: its first call is decoded whole, then launched. From
    the second on, the batch goes to the device first and its SLAs are read beside it;
    every request is answered with its result, and the timeline says which call was
    launched first."""
    monkeypatch.setenv(timeline_module.TIMELINE_ENV, str(tmp_path / "tl"))
    model = adapter.model("hold")
    events: list = []
    log_launches(model, monkeypatch, events)
    calls = [logged_requests(pb_utils, events, 3, first=100 * k) for k in (1, 2, 3)]

    orders = []
    for requests in calls:
        events.clear()
        returned = model.execute(requests)
        orders.append([e[0] for e in events])
        for i, req in enumerate(requests):
            assert pb_utils.error_code(the_answer(pb_utils, req, returned, i)) is None
    adapter.finalize(model)

    assert orders[0] == ["read", "read", "read", "launch"]
    assert orders[1] == orders[2] == ["launch", "read", "read", "read"]
    assert model.scheduler.controller.sla_floor_ms == SLA_MS
    records = timeline_module.read(str(tmp_path / "tl" / "emulated_explicit.timeline.jsonl"))
    assert [r["launched_first"] for r in records] == [False, True, True]
    assert [[b[0] for b in r["batches"]] for r in records] == [[3], [3], [3]]
    assert model.scheduler.counts["requests"] == 9


def test_a_launched_call_ends_each_request_as_a_decoded_call_would(adapter, pb_utils,
                                                                   monkeypatch):
    """Launched first, then decoded: a request with an invalid SLA parameter is refused
    INVALID_ARG naming it, one whose client timeout passed in Triton's queue is refused
    naming it, and the batch's results for them are dropped; the rest are served. The
    device ran all four; the scheduler counts the two it served, and the two refusals."""
    model = adapter.model("hold")
    model.execute(requests_of(pb_utils, 2))  # the floor: SLA_MS
    spy = adapter.spy(model)
    backdate(monkeypatch, model, 0.05)  # waited 50 ms of a 10 s floor: still launched
    served = requests_of(pb_utils, 2, first=300)
    bad_sla = pb_utils.FakeRequest([400, 7], params={"sla_ms": -5})
    expired = pb_utils.FakeRequest([500, 7], sla_ms=SLA_MS, timeout_us=20_000)
    requests = [served[0], bad_sla, expired, served[1]]

    returned = model.execute(requests)

    assert len(spy.batches) == 1 and len(spy.computed) == 4  # launched before decoding
    refused = the_answer(pb_utils, bad_sla, returned, 1)
    assert pb_utils.error_code(refused) == pb_utils.TritonError.INVALID_ARG
    assert "parameter sla_ms" in refused.error().message()
    late = the_answer(pb_utils, expired, returned, 2)
    assert pb_utils.error_code(late) == pb_utils.TritonError.UNAVAILABLE
    assert "timeout of 20.0 ms" in late.error().message()
    for i in (0, 3):
        assert pb_utils.error_code(the_answer(pb_utils, requests[i], returned, i)) is None
    model.runner.deferred.run_all()  # the batch's feedback, due beside the next batch
    assert model.scheduler.counts["requests"] == 2 + 2
    assert model.scheduler.controller.sla_floor_ms == 20.0  # the timeout's, for the floor


def test_a_timeout_passed_in_the_queue_lowers_the_floor_on_the_decoded_path_too(
        adapter, pb_utils, monkeypatch):
    """A fresh model decodes its first call whole: its request refused for a timeout
    passed in Triton's queue still lowers the floor (``hand_over_expired``), as it does in
    a launched call."""
    model = adapter.model("hold")
    backdate(monkeypatch, model, 0.05)
    expired = pb_utils.FakeRequest([510, 7], sla_ms=SLA_MS, timeout_us=20_000)

    returned = model.execute([expired, *requests_of(pb_utils, 1)])

    assert pb_utils.error_code(the_answer(pb_utils, expired, returned, 0)) == \
        pb_utils.TritonError.UNAVAILABLE
    assert model.scheduler.controller.sla_floor_ms == 20.0


def test_a_request_below_every_earlier_sla_runs_in_its_launch_and_lowers_the_floor(
        adapter, pb_utils):
    """The first request whose SLA is below the floor cannot be told from the others
    before its SLA is read: it runs in the launched batch and is served (its compute is
    spent), and the floor follows it. The next such request is decoded before any launch
    and, infeasible even alone, refused before it runs."""
    model = adapter.model("hold")
    model.execute(requests_of(pb_utils, 2))  # the floor: SLA_MS
    spy = adapter.spy(model)
    tiny = 0.001  # ms: below any batch's run

    first = pb_utils.FakeRequest([600, 7], sla_ms=tiny)
    returned = model.execute([first])
    assert pb_utils.error_code(the_answer(pb_utils, first, returned, 0)) is None
    assert model.scheduler.controller.sla_floor_ms == pytest.approx(tiny)  # FP32

    second = pb_utils.FakeRequest([700, 7], sla_ms=tiny)
    returned = model.execute([second])
    refused = the_answer(pb_utils, second, returned, 0)
    assert pb_utils.error_code(refused) == pb_utils.TritonError.UNAVAILABLE
    assert spy.computed == [(600, 7)]


def test_a_call_old_enough_to_ask_about_cancellation_is_asked_before_it_runs(
        adapter, pb_utils, monkeypatch, tmp_path):
    """A call whose requests waited long enough for the plugin to ask whether their
    clients cancelled them is not launched first: a cancelled one is answered CANCELLED
    and never computed, and every other one gets its own embedding."""
    monkeypatch.setenv(timeline_module.TIMELINE_ENV, str(tmp_path / "tl"))
    model = adapter.model("hold")
    model.execute(requests_of(pb_utils, 2))  # the floor: SLA_MS
    spy = adapter.spy(model)
    backdate(monkeypatch, model, 0.5)
    requests = requests_of(pb_utils, 4, first=800)
    requests[2].cancelled = True

    returned = model.execute(requests)

    check_outcome(pb_utils, spy, requests, {2}, returned)
    adapter.finalize(model)
    records = timeline_module.read(str(tmp_path / "tl" / "emulated_explicit.timeline.jsonl"))
    assert [r["launched_first"] for r in records] == [False, False]


def test_no_floor_means_no_launch_first():
    """A scheduler that has noted no SLA declines to launch anything before it is read."""
    from scheduler_core.scheduler import Scheduler
    from tests.unit.scheduler_core.test_scheduler import _twin_profile

    s = Scheduler.from_profile(_twin_profile("flat", "padded", "shipped"))
    assert s.controller.sla_floor_ms == math.inf
    assert s.launches_as_handed(10.0, [16, 16], 9.999) is None


def test_the_engine_hears_a_batch_end_where_the_device_went_free(adapter, pb_utils,
                                                                 monkeypatch, tmp_path):
    """The busy share the zones read is the device's: each batch's end, heard at the
    engine's next entry, is its launch plus its run on the executor (the timeline's
    ``executor_s``), before its answers were built (the timeline's batch end), on the
    decoded path (the first call) and the launched one alike."""
    monkeypatch.setenv(timeline_module.TIMELINE_ENV, str(tmp_path / "tl"))
    model = adapter.model("hold")
    heard: list[float] = []
    ended = model.runner.engine.ended
    monkeypatch.setattr(model.runner.engine, "ended",
                        lambda now_s: (heard.append(now_s), ended(now_s))[1])
    for k in (1, 2, 3):
        model.execute(requests_of(pb_utils, 2, first=100 * k))
    adapter.finalize(model)

    records = timeline_module.read(str(tmp_path / "tl" / "emulated_explicit.timeline.jsonl"))
    assert [r["launched_first"] for r in records] == [False, True, True]
    runs = [r["batches"][0] for r in records]
    # Heard at the next call's entry: the first two calls' batches. A launched batch's
    # timeline starts at its launch; a decoded one's a little before (its bracket).
    (_, _, started, ended_s, _, _, executor_s), launched = runs[0], runs[1]
    assert started + executor_s <= heard[0] < ended_s
    assert heard[1] == launched[2] + launched[6] < launched[3]
