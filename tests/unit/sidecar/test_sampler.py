"""Sidecar.poll_once with NVML absent or failing, against a metrics endpoint that is down,
serves garbage, is slow, or recovers (a real HTTP server on 127.0.0.1); and the background
thread. Intervals come from an injected clock, so rates are exact."""

from __future__ import annotations

import threading
import time

import pytest

from sidecar.nvml import NvmlUnavailable
from sidecar.sampler import (DOWN_AFTER_FAILURES, HEALTH_DEGRADED, HEALTH_DOWN, HEALTH_OK,
                             Sidecar)


def advanced_page(real_page, set_value):
    """The captured page after 100 more emulated_native requests: 400 inferences in 100
    executions, 300 ms more queueing, 1 s more compute."""
    page = real_page
    for metric, value in (("nv_inference_request_success", 340), ("nv_inference_count", 640),
                          ("nv_inference_exec_count", 339),
                          ("nv_inference_queue_duration_us", 540226 + 300_000),
                          ("nv_inference_request_duration_us", 1217974 + 800_000),
                          ("nv_inference_compute_infer_duration_us", 612036 + 1_000_000)):
        page = set_value(page, metric, "emulated_native", value)
    return page


def nvml_log_lines(logs):
    return [line for line in logs if "NVML unavailable" in line]


# -- construction ------------------------------------------------------------------------

@pytest.mark.parametrize("period_s,timeout_s", [(0, 0.5), (-0.1, 0.5), (0.2, 0), (0.2, -1)])
def test_non_positive_period_or_timeout_raises(period_s, timeout_s, absent_nvml):
    with pytest.raises(ValueError, match="must be positive"):
        Sidecar(None, period_s=period_s, timeout_s=timeout_s, nvml=absent_nvml)


def test_latest_is_none_before_the_first_poll(absent_nvml):
    assert Sidecar(None, nvml=absent_nvml, log=lambda _: None).latest() is None


# -- NVML absent ---------------------------------------------------------------------------

def test_nvml_absent_without_endpoint_is_healthy_and_logged_once(absent_nvml, clock):
    logs = []
    s = Sidecar(None, nvml=absent_nvml, clock=clock, log=logs.append)
    samples = []
    for _ in range(50):
        samples.append(s.poll_once())
        clock.advance(0.2)
    for i, sample in enumerate(samples):
        assert sample.taken_s == pytest.approx(100.0 + 0.2 * i)
        assert sample.health == HEALTH_OK
        assert sample.endpoint_ok is None  # no endpoint configured
        assert sample.nvml_available is False
        assert sample.utilization is None
        assert sample.nvml is None
        assert sample.models == {}
        assert sample.error == ""
    assert len(nvml_log_lines(logs)) == 1
    assert "busy fraction" in nvml_log_lines(logs)[0]  # says what is used instead
    assert absent_nvml.opens == 1  # absent from the start: asked once, not every poll
    assert s.latest() is samples[-1]
    assert s.next_delay_s() == s.period_s


def test_empty_metrics_url_means_no_endpoint(absent_nvml):
    s = Sidecar("", nvml=absent_nvml, log=lambda _: None, fetch=lambda *_: pytest.fail("fetched"))
    assert s.poll_once().endpoint_ok is None


def test_nvml_absent_with_working_endpoint(absent_nvml, clock, real_page):
    logs = []
    s = Sidecar("http://triton/metrics", nvml=absent_nvml, clock=clock, log=logs.append,
                fetch=lambda url, timeout: real_page)
    for _ in range(10):
        sample = s.poll_once()
        assert (sample.health, sample.endpoint_ok, sample.nvml_available) == (HEALTH_OK, True, False)
        assert sample.utilization is None
        clock.advance(1.0)
    assert len(nvml_log_lines(logs)) == 1


# -- NVML failing mid-run ---------------------------------------------------------------------

def test_nvml_read_failure_degrades_then_reopens_and_recovers(scripted_nvml, clock,
                                                             make_nvml_sample):
    nvml = scripted_nvml(opens=["Fake H200"],
                         reads=[0.42, RuntimeError("GPU has fallen off the bus"), 0.55])
    logs = []
    s = Sidecar(None, period_s=0.2, nvml=nvml, clock=clock, log=logs.append)

    first = s.poll_once()
    assert (first.health, first.nvml_available, first.utilization) == (HEALTH_OK, True, 0.42)
    assert first.nvml == make_nvml_sample(0.42)
    assert any("Fake H200" in line for line in logs)

    failed = s.poll_once()
    assert failed.health == HEALTH_DEGRADED
    assert failed.nvml_available is False
    assert failed.utilization is None and failed.nvml is None
    assert "NVML" in failed.error and "GPU has fallen off the bus" in failed.error
    assert nvml.closes == 1  # closed so it can be reopened
    assert s.next_delay_s() == pytest.approx(0.4)  # backs off

    recovered = s.poll_once()
    assert nvml.opens == 2
    assert (recovered.health, recovered.nvml_available, recovered.utilization) == (
        HEALTH_OK, True, 0.55)
    assert recovered.error == ""
    assert s.next_delay_s() == pytest.approx(0.2)
    assert nvml_log_lines(logs) == []  # NVML was there: never called "unavailable"


def test_nvml_failure_degrades_even_with_a_healthy_endpoint(scripted_nvml, clock, real_page):
    nvml = scripted_nvml(reads=[0.3, RuntimeError("Unknown Error"), 0.3])
    s = Sidecar("http://triton/metrics", nvml=nvml, clock=clock, log=lambda _: None,
                fetch=lambda url, timeout: real_page)
    healths = []
    for _ in range(3):
        sample = s.poll_once()
        healths.append((sample.health, sample.endpoint_ok))
        clock.advance(0.2)
    assert healths == [(HEALTH_OK, True), (HEALTH_DEGRADED, True), (HEALTH_OK, True)]


def test_nvml_lost_until_the_driver_returns_stays_degraded(scripted_nvml, clock):
    gone = NvmlUnavailable("NVML unavailable: Driver Not Loaded")
    nvml = scripted_nvml(opens=["Fake H200", gone, gone, "Fake H200"],
                         reads=[0.42, RuntimeError("GPU is lost"), 0.6])
    logs = []
    s = Sidecar(None, nvml=nvml, clock=clock, log=logs.append)
    samples = [s.poll_once() for _ in range(5)]
    assert [x.health for x in samples] == [HEALTH_OK] + [HEALTH_DEGRADED] * 3 + [HEALTH_OK]
    # lost mid-run is not the benign "absent from the start": it is retried and reported
    assert "Driver Not Loaded" in samples[2].error and "Driver Not Loaded" in samples[3].error
    assert nvml.opens == 4
    assert samples[4].utilization == 0.6 and samples[4].nvml_available is True
    assert len(nvml_log_lines(logs)) == 1


# -- the metrics endpoint: down, garbage, slow --------------------------------------------------

def assert_backoff_and_health(s, expect_error):
    """Polls four times against a failing endpoint; period 0.1 s, backoff capped at 0.5 s."""
    seen = []
    for failures in range(1, 5):
        sample = s.poll_once()  # never raises
        assert sample.endpoint_ok is False
        assert sample.models == {}
        assert "metrics endpoint" in sample.error
        assert expect_error(sample.error), sample.error
        seen.append((sample.health, round(s.next_delay_s(), 9)))
    assert DOWN_AFTER_FAILURES == 3
    assert seen == [(HEALTH_DEGRADED, 0.2), (HEALTH_DEGRADED, 0.4),
                    (HEALTH_DOWN, 0.5), (HEALTH_DOWN, 0.5)]


def test_endpoint_down(closed_port_url, absent_nvml, clock):
    s = Sidecar(closed_port_url, period_s=0.1, timeout_s=1.0, max_backoff_s=0.5,
                nvml=absent_nvml, clock=clock, log=lambda _: None)
    assert_backoff_and_health(s, lambda err: "refused" in err.lower())


def test_endpoint_serving_garbage_then_recovering(local_server, absent_nvml, clock, real_page):
    local_server.state.body = "<html><body>Welcome to nginx!</body></html>\n"
    s = Sidecar(local_server.url, period_s=0.1, timeout_s=2.0, max_backoff_s=0.5,
                nvml=absent_nvml, clock=clock, log=lambda _: None)
    assert_backoff_and_health(s, lambda err: "MetricsParseError" in err)

    local_server.state.body = real_page
    ok = s.poll_once()
    assert (ok.health, ok.endpoint_ok, ok.error) == (HEALTH_OK, True, "")
    assert s.next_delay_s() == pytest.approx(0.1)  # failures reset

    # the count restarts: one more failure is "degraded" again, not "down"
    local_server.state.body = "not metrics\n"
    assert s.poll_once().health == HEALTH_DEGRADED
    assert local_server.state.hits == 6


@pytest.mark.parametrize("status", [404, 500, 503])
def test_endpoint_http_error_status_is_a_failure(local_server, absent_nvml, real_page, status):
    local_server.state.body = real_page  # even with a metrics body
    local_server.state.status = status
    s = Sidecar(local_server.url, timeout_s=2.0, nvml=absent_nvml, log=lambda _: None)
    sample = s.poll_once()
    assert (sample.health, sample.endpoint_ok) == (HEALTH_DEGRADED, False)
    assert str(status) in sample.error


def test_slow_endpoint_times_out(local_server, absent_nvml, clock, real_page):
    local_server.state.body = real_page
    # Far longer than timeout_s: a poll that waited for the page would take 120 s, so four
    # polls inside the 30 s hang guard show each was cut by the 0.2 s timeout.
    local_server.state.delay_s = 120.0
    s = Sidecar(local_server.url, period_s=0.1, timeout_s=0.2, max_backoff_s=0.5,
                nvml=absent_nvml, clock=clock, log=lambda _: None)
    started = time.monotonic()
    assert_backoff_and_health(s, lambda err: "timed out" in err.lower())
    waited_s = time.monotonic() - started
    assert waited_s < 30.0, f"four polls took {waited_s:.0f} s: the 0.2 s timeout did not cut them"
    local_server.state.release.set()  # let the handler threads still sleeping go

    local_server.state.delay_s = 0.0
    ok = s.poll_once()
    assert (ok.health, ok.endpoint_ok, ok.error) == (HEALTH_OK, True, "")


def test_backoff_never_below_period():
    s = Sidecar(None, period_s=2.0, max_backoff_s=0.5, nvml=None, log=lambda _: None)
    s._endpoint_failures = 3  # white-box: the cap is max(max_backoff_s, period_s)
    assert s.next_delay_s() == 2.0


# -- rates through the endpoint --------------------------------------------------------------

def test_two_scrapes_give_model_rates_over_the_clock_interval(local_server, absent_nvml, clock,
                                                             real_page, set_value):
    local_server.state.body = real_page
    s = Sidecar(local_server.url, timeout_s=2.0, nvml=absent_nvml, clock=clock,
                log=lambda _: None)
    first = s.poll_once()
    assert (first.health, first.endpoint_ok, first.models) == (HEALTH_OK, True, {})

    clock.advance(2.0)
    local_server.state.body = advanced_page(real_page, set_value)
    second = s.poll_once()
    assert second.health == HEALTH_OK
    assert set(second.models) == {"minilm", "minilm_native", "minilm_explicit",
                                  "emulated_device", "emulated_native", "emulated_explicit"}
    r = second.models["emulated_native"]
    assert r.interval_s == 2.0
    assert r.requests_per_s == pytest.approx(50.0)  # 100 requests / 2 s
    assert r.inferences_per_s == pytest.approx(200.0)
    assert r.avg_batch_size == pytest.approx(4.0)  # 400 inferences / 100 executions
    assert r.avg_queue_ms == pytest.approx(3.0)  # 300 ms / 100 requests
    assert r.avg_request_ms == pytest.approx(8.0)  # 800 ms / 100 requests
    assert r.compute_busy_fraction == pytest.approx(0.5)  # 1 s compute / 2 s
    assert second.models["emulated_explicit"].requests_per_s == 0.0


def test_failed_scrape_in_between_stretches_the_interval(local_server, absent_nvml, clock,
                                                        real_page, set_value):
    local_server.state.body = real_page
    s = Sidecar(local_server.url, timeout_s=2.0, nvml=absent_nvml, clock=clock,
                log=lambda _: None)
    s.poll_once()
    clock.advance(1.0)
    local_server.state.body = "garbage\n"
    assert s.poll_once().models == {}
    clock.advance(1.5)
    local_server.state.body = advanced_page(real_page, set_value)
    r = s.poll_once().models["emulated_native"]
    assert r.interval_s == pytest.approx(2.5)  # from the last good scrape
    assert r.requests_per_s == pytest.approx(40.0)


def test_no_rates_when_the_clock_did_not_move(absent_nvml, clock, real_page):
    s = Sidecar("http://triton/metrics", nvml=absent_nvml, clock=clock, log=lambda _: None,
                fetch=lambda url, timeout: real_page)
    s.poll_once()
    again = s.poll_once()  # same clock reading: no interval to divide by
    assert (again.health, again.models) == (HEALTH_OK, {})


def test_server_restart_between_scrapes_gives_no_negative_rates(absent_nvml, clock, real_page,
                                                                set_value):
    pages = iter([advanced_page(real_page, set_value), real_page])
    s = Sidecar("http://triton/metrics", nvml=absent_nvml, clock=clock, log=lambda _: None,
                fetch=lambda url, timeout: next(pages))
    s.poll_once()
    clock.advance(1.0)
    sample = s.poll_once()
    assert sample.health == HEALTH_OK
    for r in sample.models.values():
        assert min(r.requests_per_s, r.inferences_per_s, r.executions_per_s, r.avg_batch_size,
                   r.avg_queue_ms, r.avg_request_ms, r.compute_busy_fraction) >= 0.0
    assert sample.models["emulated_native"].requests_per_s == pytest.approx(240.0)


# -- the background thread ---------------------------------------------------------------------

def _sidecar_threads():
    return [t for t in threading.enumerate() if t.name == "perception-sidecar" and t.is_alive()]


def test_thread_delivers_samples_to_the_sink(absent_nvml, real_page):
    received, enough = [], threading.Event()

    def sink(sample):
        received.append(sample)
        if len(received) >= 5:
            enough.set()

    s = Sidecar("http://triton/metrics", period_s=0.01, nvml=absent_nvml, log=lambda _: None,
                fetch=lambda url, timeout: real_page)
    s.start(sink=sink)
    try:
        assert enough.wait(30.0)
    finally:
        s.stop(timeout_s=30.0)  # a hang guard (the default 2 s join bets on the scheduler)
    assert not _sidecar_threads()
    assert s.latest() is received[-1]  # latest() is the newest sample
    taken = [x.taken_s for x in received]
    assert taken == sorted(taken)
    assert all(x.health == HEALTH_OK and x.endpoint_ok for x in received)
    assert "emulated_native" in received[-1].models  # rates once there are two scrapes
    assert absent_nvml.closes >= 1  # stop() closes NVML


def test_stop_ends_the_thread_even_with_a_long_period(absent_nvml):
    first = threading.Event()
    # A period of 10 min: a stop that waited out the period would leave the thread running
    # past the 30 s join (the hang guard), and the thread check below would see it.
    s = Sidecar(None, period_s=600.0, nvml=absent_nvml, log=lambda _: None)
    s.start(sink=lambda sample: first.set())
    try:
        assert first.wait(30.0), "the sidecar's first sample never came"
    finally:
        s.stop(timeout_s=30.0)
    assert not _sidecar_threads(), "the sidecar thread outlived stop()"


def test_raising_sink_does_not_kill_the_thread(absent_nvml, real_page):
    calls, enough, logs = [], threading.Event(), []

    def sink(sample):
        calls.append(sample)
        if len(calls) >= 5:
            enough.set()
        raise RuntimeError("consumer exploded")

    s = Sidecar("http://triton/metrics", period_s=0.01, nvml=absent_nvml, log=logs.append,
                fetch=lambda url, timeout: real_page)
    s.start(sink=sink)
    try:
        assert enough.wait(30.0)  # five samples: it survived four exceptions
        assert _sidecar_threads()
    finally:
        s.stop()
    assert any("poll failed: RuntimeError: consumer exploded" in line for line in logs)
    assert s.latest() is not None and s.latest().health == HEALTH_OK


def test_failing_fetch_in_the_thread_keeps_producing_samples(absent_nvml):
    received, enough = [], threading.Event()

    def fetch(url, timeout):
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    def sink(sample):
        received.append(sample)
        if len(received) >= 4:
            enough.set()

    s = Sidecar("http://triton/metrics", period_s=0.01, max_backoff_s=0.04, nvml=absent_nvml,
                log=lambda _: None, fetch=fetch)
    s.start(sink=sink)
    try:
        assert enough.wait(30.0)
    finally:
        s.stop()
    assert [x.health for x in received[:4]] == [HEALTH_DEGRADED, HEALTH_DEGRADED,
                                                HEALTH_DOWN, HEALTH_DOWN]
    assert "ConnectionRefusedError" in received[0].error


# -- which GPU NVML reads ---------------------------------------------------------------------

def test_sidecar_reads_the_nvml_index_it_is_given(monkeypatch, clock):
    from sidecar import sampler

    made = []

    class RecordingReader(sampler.NvmlReader):
        def __init__(self, device_index=0):
            super().__init__(device_index)
            made.append(device_index)

        def open(self):
            return "Fake L4"

    monkeypatch.setattr(sampler, "NvmlReader", RecordingReader)
    logs = []
    Sidecar(None, nvml_index=2, clock=clock, log=logs.append).poll_once()
    assert made == [2]
    assert "sidecar: NVML device 2 is 'Fake L4'" in logs


def test_sidecar_without_an_nvml_index_reads_no_nvml_and_stays_healthy(clock):
    logs = []
    s = Sidecar(None, nvml_index=None, clock=clock, log=logs.append)
    samples = [s.poll_once() for _ in range(3)]
    assert all(x.health == HEALTH_OK and x.nvml_available is False and x.utilization is None
               for x in samples)
    assert len([line for line in logs if "no GPU" in line]) == 1  # said once, not per poll


def test_the_metrics_page_is_scraped_every_nth_poll_and_again_after_a_failed_one(
        absent_nvml, real_page):
    """scrape_every=3: a good page's health is carried between scrapes (polls 2, 3); a
    failed scrape is retried at the next poll until one succeeds (polls 4, 5, 6), and the
    count goes on (poll 7 is the next third)."""
    fetched = []
    outcomes = iter([None, RuntimeError("refused"), RuntimeError("refused again"), None, None])

    def fetch(url, timeout_s):
        fetched.append(len(fetched))
        failure = next(outcomes)
        if failure is not None:
            raise failure
        return real_page

    sidecar = Sidecar("http://m/metrics", fetch=fetch, nvml=absent_nvml, log=lambda _: None,
                      scrape_every=3)
    samples = [sidecar.poll_once() for _ in range(7)]
    assert len(fetched) == 5  # polls 1, 4, 5, 6, 7
    assert [s.endpoint_ok for s in samples] == [True] * 3 + [False] * 2 + [True] * 2
    assert "refused" in samples[3].error and "refused again" in samples[4].error
    assert samples[5].error == ""
