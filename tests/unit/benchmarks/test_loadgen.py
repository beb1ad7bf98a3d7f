"""benchmarks/loadgen.py against an in-process fake gRPC inference service (no Triton):
schedules, outcomes by gRPC status code, LOST after the drain wait, aggregates."""

from __future__ import annotations

import math
import threading
import time
from concurrent import futures

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from benchmarks.load_result import LoadResult

from benchmarks.loadgen import Arrival, LoadGenerator, check_local_url, concat_phases, fixed_rate
from operator_tools.records import LOST, OK, timed_record
from scheduler_core.stats import percentile


class FakeService(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Sequence length picks the behaviour: 3 ok, 4 UNAVAILABLE, 5 never answers."""

    def __init__(self):
        self.release = threading.Event()
        self.calls = 0  # handlers entered (gRPC runs them on several threads)
        self._lock = threading.Lock()

    def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    def ModelInfer(self, request, context):
        with self._lock:
            self.calls += 1
        length = request.inputs[0].shape[-1]
        if length == 4:
            context.abort(grpc.StatusCode.UNAVAILABLE, "queue full: test")
        if length == 5:
            self.release.wait(60)  # longer than any hang guard: unanswered for the test
            context.abort(grpc.StatusCode.INTERNAL, "released at teardown")
        return service_pb2.ModelInferResponse(model_name=request.model_name)


@pytest.fixture
def fake():
    service = FakeService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield service, f"localhost:{port}"
    service.release.set()
    server.stop(grace=None)


def test_only_localhost():
    assert check_local_url("localhost:8001") == "localhost:8001"
    assert check_local_url("grpc://127.0.0.1:9") == "127.0.0.1:9"
    for bad in ("example.com:8001", "10.0.0.1:8001", "localhost", "localhost:port"):
        with pytest.raises(ValueError):
            check_local_url(bad)
    with pytest.raises(ValueError):
        LoadGenerator("remote.host:8001", "m")


def test_fixed_rate_and_phases():
    arrivals = fixed_rate(100.0, 0.5, seq_len=8, sla_ms=50.0)
    assert len(arrivals) == 50 and arrivals[1].time_s == pytest.approx(0.01)
    joined = concat_phases([fixed_rate(10, 1.0), fixed_rate(20, 1.0)], [1.0, 1.0])
    assert len(joined) == 30 and joined[10].time_s == pytest.approx(1.0)
    assert all(a.time_s <= b.time_s for a, b in zip(joined, joined[1:]))


class AnswerCounter:
    """Answers the generator has taken in (its callbacks, counted after they ran); set
    ``all_in`` once ``expected`` have."""

    def __init__(self, expected: int):
        self.expected, self.count = expected, 0
        self.lock = threading.Lock()
        self.all_in = threading.Event()

    def note(self) -> None:
        with self.lock:
            self.count += 1
            if self.count >= self.expected:
                self.all_in.set()


class CountingGenerator(LoadGenerator):
    """A LoadGenerator whose answers are counted as they arrive."""

    def __init__(self, *args, counter: AnswerCounter, **kwargs):
        super().__init__(*args, **kwargs)
        self.counter = counter

    def _send_all(self, grpcclient, clients, schedule, scheduled, sent, send_errors, append,
                  t0_box, on_start):
        def counted(item):
            append(item)
            self.counter.note()
        super()._send_all(grpcclient, clients, schedule, scheduled, sent, send_errors,
                          counted, t0_box, on_start)


class DrainClock:
    """The drain's clock: stopped until every answerable request was answered, then a second
    further at each reading, so any drain timeout passes at once. The cut comes after those
    answers however slow the machine, and before any later one."""

    def __init__(self, answered: threading.Event):
        self.answered, self.now = answered, 0.0

    def __call__(self) -> float:
        if self.answered.is_set():
            self.now += 1.0
        return self.now


def test_outcomes_lost_and_schedule(fake):
    service, url = fake
    # 60 ok, 20 UNAVAILABLE, 4 never answered, interleaved over 0.42 s.
    lengths = [3, 3, 3, 4] * 20 + [5] * 4
    arrivals = [Arrival(i * 0.005, n) for i, n in enumerate(lengths)]
    counter = AnswerCounter(expected=80)
    gen = CountingGenerator(url, "fake", clients=2, include_sla=False, counter=counter,
                            drain_clock=DrainClock(counter.all_in))
    started = time.monotonic()
    result = gen.run(arrivals, drain_timeout_s=0.5)
    # A hang guard: the 4 unanswered requests never come back, so a drain that ignored its
    # timeout would never end.
    assert time.monotonic() - started < 30.0, "the drain did not stop at its timeout"
    assert result.planned == result.sent == 84
    # The server's side: every answered request reached it; the unanswered ones may not
    # have (the generator closes its channels when the drain ends, cancelling a call still
    # on its way to a handler).
    assert 80 <= service.calls <= 84, service.calls
    assert result.ok == 60
    assert result.errors_by_code == {"UNAVAILABLE": 20}
    assert result.messages("UNAVAILABLE") == ["queue full: test"]
    assert result.lost == 4 and result.responses == 80
    assert all(r.outcome == LOST and r.response_s is None for r in result.records[-4:])
    assert result.duplicates == 0
    # The sender keeps its schedule: each request goes out in order, never before its send
    # time, and its lag behind that time is measured. How far behind is the machine's
    # (99 ms at P99 once, on a loaded fresh clone), a figure the runs report, not a bound.
    sent = [r.sent_s for r in result.records]
    assert all(s is not None for s in sent) and sent == sorted(sent)
    lags = result.lags_ms()
    assert len(lags) == 84 and min(lags) >= 0.0
    assert math.isfinite(result.send_lag_p99_ms)  # the figure the runs report
    assert not math.isnan(result.p99_ms)


def test_bounds_on_count_and_duration(fake):
    _, url = fake
    arrivals = fixed_rate(200.0, 1.0, seq_len=3)
    gen = LoadGenerator(url, "fake", clients=1, include_sla=False)
    assert gen.run(arrivals, max_requests=10).planned == 10
    cut = gen.run(arrivals, max_duration_s=0.1)
    assert cut.planned == 20 and cut.ok == 20 and cut.duration_s == pytest.approx(0.1)


def test_aggregates_and_buckets():
    recs = [timed_record(0.1, 0.1, 0.2, OK), timed_record(0.5, 0.51, 0.61, OK),
            timed_record(1.2, 1.2, 1.25, "UNAVAILABLE", "queue full"),
            timed_record(1.5, 1.5, None, LOST)]
    r = LoadResult("m", "localhost:1", 4, 2.0, recs)
    assert (r.sent, r.ok, r.errors, r.lost, r.responses) == (4, 2, 1, 1, 3)
    assert r.p50_ms == pytest.approx(100.0)
    assert r.send_lag_mean_ms == pytest.approx(2.5)
    b0, b1 = r.buckets(1.0)
    assert (b0.sent, b0.ok, b0.errors, b0.lost) == (2, 2, 0, 0)
    assert (b1.sent, b1.ok, b1.errors, b1.lost) == (2, 0, 1, 1)
    assert b1.error_p99_ms == pytest.approx(50.0)
    w = r.window(1.0, 2.0)
    assert w.planned == 2 and w.records[0].scheduled_s == pytest.approx(0.2)
    assert percentile([], 99) != percentile([], 99)  # nan
