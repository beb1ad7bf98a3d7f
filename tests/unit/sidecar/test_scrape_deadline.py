"""A scrape has one deadline for the whole page: an endpoint that drips one byte every 0.2 s
(a real HTTP server on 127.0.0.1) fails the scrape by its deadline, not after the ~5 h the
page would take, and the sidecar's health drops below ok on the drip, then to down. A poll
stuck anyway (the fetch never returns) stops reading as ok once it has run past the deadline
plus a period. How fast health drops is a target, measured by ``make reliability``'s
drip-feeding case, not bounded here: a loaded machine may be slow."""

from __future__ import annotations

import threading
import time

import pytest

from sidecar.sampler import (DOWN_AFTER_FAILURES, HEALTH_DEGRADED, HEALTH_DOWN, HEALTH_OK,
                             HEALTH_VALUE, Sidecar)
from sidecar.triton_metrics import ScrapeTimeout, fetch_url

DRIP_S = 0.2  # a hostile endpoint: one byte every 0.2 s


HANG_GUARD_S = 30.0


def wait_until(accept, what: str, bound_s: float = HANG_GUARD_S, step_s: float = 0.01):
    """Polls ``accept()`` until it returns something truthy; a hang guard of ``bound_s``.
    Waits for a real server and a real sidecar thread, not for a scheduling decision."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        value = accept()
        if value:
            return value
        time.sleep(step_s)
    pytest.fail(f"gave up after {bound_s:g} s waiting for {what}")


# -- fetch_url ---------------------------------------------------------------------------------

@pytest.mark.parametrize("drip_headers", [False, True], ids=["body", "headers"])
def test_dripping_page_fails_by_the_deadline(local_server, real_page, drip_headers):
    local_server.state.body = real_page
    local_server.state.drip_s = DRIP_S
    local_server.state.drip_headers = drip_headers
    started = time.monotonic()
    with pytest.raises(ScrapeTimeout, match="timed out"):
        fetch_url(local_server.url, 1.0)
    elapsed_s = time.monotonic() - started
    # Not before the 1 s deadline, and nowhere near 0.2 s per byte for ~100 kB (~5 h): the
    # upper bound is a hang guard, not a speed target.
    assert 0.9 <= elapsed_s < HANG_GUARD_S, elapsed_s
    assert local_server.state.drip_started_s is not None  # it did connect and drip


def test_scrape_timeout_is_an_os_error_as_a_socket_timeout_is():
    # operator_tools.live and others catch OSError around a scrape
    assert issubclass(ScrapeTimeout, TimeoutError) and issubclass(ScrapeTimeout, OSError)


def test_a_prompt_page_is_read_whole(local_server, real_page):
    local_server.state.body = real_page
    assert fetch_url(local_server.url, 1.0) == real_page


def test_deadline_is_read_on_the_injected_clock(local_server, real_page, clock):
    local_server.state.body = real_page
    # a clock that never moves: the deadline never passes (the socket's own timeout, real
    # time, is what is left of it: generous here, so a loaded machine cannot trip it)
    assert fetch_url(local_server.url, 2.0, clock=clock) == real_page

    def late_clock():  # the deadline has passed by the time it would connect
        clock.advance(1.0)
        return clock.now

    hits = local_server.state.hits
    with pytest.raises(ScrapeTimeout, match="no connection within 0.5 s"):
        fetch_url(local_server.url, 0.5, clock=late_clock)
    assert local_server.state.hits == hits


# -- the sidecar's health ---------------------------------------------------------------------

def test_dripping_endpoint_makes_health_degraded_within_2_s_then_down(local_server, real_page,
                                                                      absent_nvml):
    local_server.state.body = real_page
    s = Sidecar(local_server.url, nvml=absent_nvml, log=lambda _: None)  # adapter's defaults
    polled = []  # every sample the sidecar's polls made, in order (the adapter's sink)
    s.start(sink=polled.append)
    try:
        def published(value):
            """The sample ``latest()`` gives now (what the adapter publishes as
            sidecar_health) when its health value is ``value(...)``-accepted."""
            sample = s.latest()
            return sample if sample is not None and value(HEALTH_VALUE[sample.health]) else None

        wait_until(lambda: published(lambda v: v == 1.0), "a healthy sample")
        before_drip = len(polled)
        local_server.state.drip_s = DRIP_S  # every request from now on drips
        wait_until(lambda: local_server.state.drip_started_s, "the drip to start")
        below = wait_until(lambda: published(lambda v: v < 1.0), "health below ok on the drip")
        degraded_after_s = time.monotonic() - local_server.state.drip_started_s
        # What reads below ok first: the failed scrape's own sample, or, while a scrape runs
        # late past its deadline plus a period (a loaded machine), the stuck view of the
        # last good one. (Down, if this thread only looked after three failures.)
        assert below.health in (HEALTH_DEGRADED, HEALTH_DOWN)
        assert "ScrapeTimeout" in below.error or "sidecar poll stuck" in below.error, below

        # The scrape itself failed on its deadline: the first sample after the good ones
        # is degraded, and says ScrapeTimeout.
        wait_until(lambda: any("ScrapeTimeout" in p.error for p in polled[before_drip:]),
                   "a sample whose scrape failed with ScrapeTimeout")
        first_failed = next(p for p in polled[before_drip:] if p.health != HEALTH_OK)
        assert first_failed.health == HEALTH_DEGRADED
        assert "ScrapeTimeout" in first_failed.error, first_failed.error

        # three scrapes past their deadline, with backoff in between: down
        down = wait_until(lambda: published(lambda v: v == 0.0),
                          "health down after three failed scrapes")
        assert down.health == HEALTH_DOWN
        print(f"\ndrip -> degraded after {degraded_after_s:.2f} s; "
              f"-> down after {time.monotonic() - local_server.state.drip_started_s:.2f} s")
    finally:
        s.stop(HANG_GUARD_S)  # a scrape under way ends by its 0.5 s deadline: a hang guard
    assert not s._thread.is_alive()


def test_poll_stuck_past_the_deadline_stops_reading_as_ok(absent_nvml, clock, real_page):
    entered, release = threading.Event(), threading.Event()
    calls = []

    def fetch(url, timeout_s):
        calls.append(timeout_s)
        if len(calls) > 1:  # the second scrape hangs (a fetch that ignores its deadline)
            entered.set()
            release.wait(HANG_GUARD_S)
            raise TimeoutError("released")
        return real_page

    s = Sidecar("http://triton/metrics", period_s=0.2, timeout_s=0.5, nvml=absent_nvml,
                clock=clock, fetch=fetch, log=lambda _: None)
    good = s.poll_once()
    assert good.health == HEALTH_OK and s.latest() is good
    assert s.stuck_after_s == pytest.approx(0.7)

    poller = threading.Thread(target=s.poll_once, daemon=True)
    poller.start()
    try:
        assert entered.wait(HANG_GUARD_S), "the second scrape never started"
        clock.advance(0.69)  # not yet past the deadline plus a period
        assert s.latest() is good

        clock.advance(0.02)
        stuck = s.latest()
        assert (stuck.health, stuck.taken_s) == (HEALTH_DEGRADED, good.taken_s)
        assert "stuck for over 0.7 s" in stuck.error
        assert s.latest() is stuck  # built once, not per read

        clock.advance(DOWN_AFTER_FAILURES * 0.7 - 0.7)  # 2.11 s in: past 3 x 0.7 s
        assert s.latest().health == HEALTH_DOWN
        assert good.health == HEALTH_OK  # the sample itself is untouched
    finally:
        release.set()
        poller.join(HANG_GUARD_S)
    assert not poller.is_alive(), "the released poll never returned"
    after = s.latest()  # the poll ended (a failure): its own verdict, no stuck view
    assert (after.health, after.endpoint_ok) == (HEALTH_DEGRADED, False)
    assert "stuck" not in after.error
