"""The live oscillation sampler: rounds taken from a real metrics page over HTTP, kept
only when every controller has its gauges, and chosen by time for the measured part."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchmarks.oscillation import WINDOW, ZONE, ZoneSampler
from tests.eventually import eventually

WAIT_S = 30.0  # hang guard: how long a test waits for the sampler's rounds


class _Page:
    def __init__(self):
        self.text = ""
        self.lock = threading.Lock()
        self.served = 0  # pages served (one per sampling round: the sources share the page)

    def set(self, windows_ms: dict[str, float]) -> None:
        lines = []
        for instance, ms in windows_ms.items():
            labels = f'model="m",model_instance="{instance}"'
            lines += [f"{ZONE}{{{labels}}} 1", f"{WINDOW}{{{labels}}} {ms / 1000.0}"]
        with self.lock:
            self.text = "\n".join(lines) + "\n"


@pytest.fixture
def page():
    page = _Page()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            with page.lock:
                body = page.text.encode()
                page.served += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    page.url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    yield page
    server.shutdown()
    server.server_close()


def _wait_rounds(sampler: ZoneSampler, n: int) -> None:
    eventually(lambda: len(sampler.times_s) >= n, WAIT_S, what=f"{n} sampling rounds")


def _sources(url: str):
    return [(url, {"model": "m", "model_instance": f"m_0_{i}"}) for i in range(2)]


def test_a_round_needs_every_controller_and_reads_each_one_s_window(page):
    page.set({"m_0_0": 4.0})  # the second instance has no gauges yet
    with ZoneSampler(_sources(page.url)) as sampler:
        # Two pages served: the sampler read the first one whole before it asked again.
        eventually(lambda: page.served >= 2, WAIT_S, what="two sampling rounds read the page")
        assert sampler.times_s == []  # no round with a made-up 0 ms window
        page.set({"m_0_0": 4.0, "m_0_1": 6.0})
        _wait_rounds(sampler, 2)
    assert sampler.windows[0][:2] == pytest.approx([4.0, 4.0])
    assert sampler.windows[1][:2] == pytest.approx([6.0, 6.0])
    assert sampler.zones[0][0] == sampler.zones[1][0] == 1


def test_the_measured_part_is_chosen_by_time(page):
    page.set({"m_0_0": 9.0, "m_0_1": 3.0})  # a cold start, far from the steady windows
    with ZoneSampler(_sources(page.url)) as sampler:
        _wait_rounds(sampler, 2)
        page.set({"m_0_0": 5.0, "m_0_1": 5.0})
        before = len(sampler.times_s)  # round `before` may have read the old page
        _wait_rounds(sampler, before + 5)
    whole = sampler.oscillation()
    measured = sampler.oscillation(start_s=sampler.times_s[before + 1])
    assert 2 <= measured["samples"] < whole["samples"]
    assert measured["aggregate_variance"] == pytest.approx(0.0)
    assert whole["aggregate_variance"] > 0.1  # the cold start moved the sum: 12 ms, then 10
    assert sampler.oscillation(end_s=-1.0)["samples"] == 0
    one = sampler.oscillation(start_s=sampler.times_s[before + 1], sources=[0])
    assert one["samples"] == measured["samples"] and one["aggregate_variance"] == 0.0
    assert sampler.oscillation(sources=[1])["aggregate_variance"] > 0.1  # 3 ms, then 5
