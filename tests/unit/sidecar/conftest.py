"""Fixtures for the perception sidecar tests: the captured Triton 2.51 metrics page, a fake
clock, fake NVML readers, and a real HTTP server on 127.0.0.1 whose answer a test controls
(including how slowly it arrives).

Everything here is a fixture (no helper module to import), so the tests do not depend on
how pytest puts this directory on ``sys.path``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from sidecar.nvml import NvmlSample, NvmlUnavailable

DATA_DIR = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "data")
CAPTURED_PAGE = os.path.join(DATA_DIR, "triton_metrics_2.51.txt")


@pytest.fixture(scope="session")
def real_page() -> str:
    """Triton 2.51's /metrics, captured on a CPU machine after 240 requests per emulated model."""
    with open(CAPTURED_PAGE, encoding="utf-8") as fh:
        return fh.read()


def _set_value(page: str, metric: str, model: str, value: float, reason: str | None = None) -> str:
    """``page`` with the one sample of ``metric`` for ``model`` (and ``reason``) set to
    ``value``. Fails when not exactly one line matches, so a typo cannot pass silently."""
    lines = page.splitlines()
    hits = [i for i, line in enumerate(lines)
            if line.startswith(metric + "{") and f'model="{model}"' in line
            and (reason is None or f'reason="{reason}"' in line)]
    assert len(hits) == 1, f"{metric} for {model}/{reason}: {len(hits)} lines match"
    labels = lines[hits[0]].rsplit(" ", 1)[0]
    lines[hits[0]] = f"{labels} {value}"
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def set_value():
    return _set_value


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, start: float = 100.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def nvml_sample(util: float = 0.42, name: str = "Fake H200") -> NvmlSample:
    return NvmlSample(device_name=name, gpu_utilization=util, memory_utilization=0.1,
                      sm_clock_mhz=1980.0, memory_used_bytes=1.5e9, memory_total_bytes=141e9,
                      power_w=321.5)


class AbsentNvml:
    """An NvmlReader on a machine without NVML: open() always raises."""

    def __init__(self):
        self.opens = self.reads = self.closes = 0

    def open(self) -> str:
        self.opens += 1
        raise NvmlUnavailable("NVML unavailable: NVML Shared Library Not Found")

    def read(self) -> NvmlSample:  # never reached: the sidecar does not read after open fails
        self.reads += 1
        raise AssertionError("read() called although open() failed")

    def close(self) -> None:
        self.closes += 1


class ScriptedNvml:
    """An NvmlReader whose open() and read() follow scripts: each entry is a value to
    return or an exception to raise; the last entry repeats."""

    def __init__(self, opens=("Fake H200",), reads=(0.42,)):
        self.open_script, self.read_script = list(opens), list(reads)
        self.opens = self.reads = self.closes = 0

    @staticmethod
    def _step(script, n):
        item = script[min(n, len(script) - 1)]
        if isinstance(item, BaseException):
            raise item
        return item

    def open(self) -> str:
        self.opens += 1
        return self._step(self.open_script, self.opens - 1)

    def read(self) -> NvmlSample:
        self.reads += 1
        return nvml_sample(self._step(self.read_script, self.reads - 1))

    def close(self) -> None:
        self.closes += 1


@pytest.fixture
def absent_nvml() -> AbsentNvml:
    return AbsentNvml()


@pytest.fixture
def scripted_nvml():
    return ScriptedNvml


@pytest.fixture
def make_nvml_sample():
    return nvml_sample


class _ServerState:
    def __init__(self):
        self.body = ""
        self.status = 200
        self.content_type = "text/plain; version=0.0.4; charset=utf-8"
        self.delay_s = 0.0
        self.drip_s = 0.0  # > 0: one byte of the answer, then this long a pause, and so on
        self.drip_headers = False  # drip from the status line on, not only the body
        self.drip_started_s: float | None = None  # time.monotonic() of the first drip
        self.hits = 0
        self.location = ""  # set: every GET of another path is redirected (302) here
        self.release = threading.Event()  # set at teardown: wakes handlers that are "slow"


class LocalServer:
    """A real HTTP server on 127.0.0.1 (free port) answering every GET with ``state``."""

    def __init__(self):
        state = self.state = _ServerState()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                state.hits += 1
                if state.location and self.path != urlsplit(state.location).path:
                    self.send_response(302)
                    self.send_header("Location", state.location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if state.delay_s:
                    state.release.wait(state.delay_s)
                body = state.body.encode("utf-8")
                if state.drip_s:
                    self._drip(body)
                    return
                try:
                    self.send_response(state.status)
                    self.send_header("Content-Type", state.content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (timeout): nothing to answer
                    pass

            def _drip(self, body: bytes) -> None:
                head = (f"HTTP/1.1 {state.status} OK\r\nContent-Type: {state.content_type}\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
                answer = head.encode("ascii") + body
                at_once = 0 if state.drip_headers else len(head)
                try:
                    self.wfile.write(answer[:at_once])
                    if state.drip_started_s is None:
                        state.drip_started_s = time.monotonic()
                    for i in range(at_once, len(answer)):
                        self.wfile.write(answer[i:i + 1])
                        if state.release.wait(state.drip_s):
                            return  # teardown
                except OSError:  # the client gave up: the point of the drip
                    pass
                self.close_connection = True

            def log_message(self, *args):  # keep the test output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.state.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=2.0)


@pytest.fixture
def local_server():
    srv = LocalServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def closed_port_url():
    """A localhost URL nothing listens on: the port stays bound (not listening) for the
    test, so it cannot be reused and every connect is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
    finally:
        sock.close()
