"""The drip case: a metrics endpoint that answers one byte at a time must not stall the
plugin's perception or its health.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from benchmarks.loadgen import LoadGenerator, fixed_rate
from operator_tools.measure import scrape
from server_ops.launcher import TritonServer
from sidecar.triton_metrics import MetricsParseError, read_samples
from .fixtures import (CaseResult, Context, DRIP, DRIP_BYTE_EVERY_S, DRIP_FOR_S,
                       DRIP_HEALTH_BOUND_S, DRIP_SCRAPE_EVERY_S, SEED, SLA_CLASSES_MS,
                       load_average, missed_time_bound)
from .overload import error_breakdown
from .servers import load, unload, health_after


class DripServer:
    """A metrics endpoint on 127.0.0.1 (free port): serves ``page`` whole, or, once
    ``start_drip()`` is called, one byte every DRIP_BYTE_EVERY_S."""

    def __init__(self):
        self.page = ""
        self.drip_since: float | None = None  # monotonic time of start_drip()
        self.first_drip_s: float | None = None  # monotonic time of the first dripped byte
        self.release = threading.Event()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body = state.page.encode("utf-8")
                head = (f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                        ).encode("ascii")
                try:
                    if state.drip_since is None:
                        self.wfile.write(head + body)
                    else:
                        self.wfile.write(head)
                        for i in range(len(body)):
                            if state.first_drip_s is None:
                                state.first_drip_s = time.monotonic()
                            self.wfile.write(body[i:i + 1])
                            self.wfile.flush()
                            if state.release.wait(DRIP_BYTE_EVERY_S) or state.drip_since is None:
                                break
                except OSError:  # the scraper gave up: the point of the drip
                    pass
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def start_drip(self) -> None:
        self.first_drip_s = None
        self.drip_since = time.monotonic()

    def stop_drip(self) -> None:
        self.drip_since = None

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _sidecar_health(server: TritonServer, model: str) -> float | None:
    try:
        text = scrape(server.metrics_url, 1.0)
    except (OSError, MetricsParseError):
        return None
    for s in read_samples(text):
        if (s.name == "explicit_batching_sidecar_health"
                and s.labels.get("model") == model):
            return float(s.value)
    return None


def case_drip(ctx: Context) -> CaseResult:
    """The perception sidecar's metrics endpoint starts drip-feeding: sidecar_health must
    drop below 1 within DRIP_HEALTH_BOUND_S of the sidecar's first scrape that meets the
    drip (its first dripped byte), while the model keeps serving a light load. The sidecar
    scrapes at its own cadence (``explicit_model.SIDECAR_SCRAPE_EVERY`` perception periods,
    5 s as shipped, docs/defaults.md): nothing can notice the endpoint between two scrapes,
    so the drip lasts DRIP_FOR_S, a cadence and the bound with room, and the time from the
    drip's start is reported."""
    server, drip = ctx.server, ctx.drip
    case = CaseResult("drip-feeding metrics endpoint", None)
    notes, fails = case.notes, case.failures
    drip.stop_drip()
    drip.page = scrape(server.metrics_url, 5.0)  # a real Triton page: health reads ok
    load_s = load(server, DRIP)
    readings: list[tuple[float, float | None]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            readings.append((time.monotonic(), _sidecar_health(server, DRIP)))
            stop.wait(DRIP_SCRAPE_EVERY_S)

    watcher = threading.Thread(target=watch, name="health-watch", daemon=True)
    try:
        watcher.start()
        deadline = time.monotonic() + 15.0
        while not any(v == 1.0 for _, v in readings) and time.monotonic() < deadline:
            time.sleep(0.1)
        first_ok = next((t for t, v in readings if v == 1.0), None)
        if first_ok is None:
            fails.append(f"sidecar_health never read 1 before the drip (readings "
                         f"{sorted({v for _, v in readings}, key=str)})")
        good_s, drip_s = 2.0, DRIP_FOR_S
        gen = LoadGenerator(server.grpc_url, DRIP, clients=2, seed=SEED)
        timer: list[threading.Timer] = []

        def drip_later(t0: float) -> None:
            timer.append(threading.Timer(max(0.0, t0 + good_s - time.monotonic()),
                                         drip.start_drip))
            timer[0].start()

        result = gen.run(fixed_rate(5.0, good_s + drip_s, 64, SLA_CLASSES_MS[-1]),
                         drain_timeout_s=30.0, on_start=drip_later)
        timer[0].join()
        case.result = result
        since = drip.drip_since
        dropped = next((t for t, v in readings if t >= since and v is not None and v < 1.0),
                       None)
        values = sorted({v for t, v in readings if t >= since and v is not None})
        drip.stop_drip()
        stopped = time.monotonic()
        back = None
        while back is None and time.monotonic() < stopped + 10.0:
            time.sleep(0.1)
            back = next((t for t, v in list(readings) if t > stopped and v == 1.0), None)
        notes.append(f"{DRIP} loaded in {load_s:.1f} s; 5 req/s for {good_s + drip_s:g} s; "
                     f"the endpoint serves a whole page {good_s:g} s, then drips one byte "
                     f"every {DRIP_BYTE_EVERY_S:g} s; Triton's metrics port scraped every "
                     f"{DRIP_SCRAPE_EVERY_S:g} s ({len(readings)} reads)")
        met = drip.first_drip_s  # the sidecar's first scrape that met the drip
        if met is None:
            fails.append(f"the sidecar did not scrape its endpoint in the {drip_s:g} s of "
                         f"the drip (values {values})")
        elif dropped is None:
            fails.append(f"sidecar_health not below 1 within {drip_s:g} s of the drip, "
                         f"{since + drip_s - met:.2f} s after its first dripped byte "
                         f"(values {values})")
        else:
            took = dropped - met
            notes.append(f"the sidecar met the drip {met - since:.2f} s after it started; "
                         f"sidecar_health < 1 {took:.2f} s after that first dripped byte, "
                         f"{dropped - since:.2f} s after the drip started (bound "
                         f"{DRIP_HEALTH_BOUND_S:g} s from the first dripped byte; load "
                         f"average {load_average()}); values while dripping {values}")
            if took > DRIP_HEALTH_BOUND_S:
                missed_time_bound(ctx, case, f"sidecar_health < 1 only {took:.2f} s after the "
                                  f"first dripped byte > {DRIP_HEALTH_BOUND_S:g} s")
        notes.append(f"back to 1 {back - stopped:.1f} s after the drip stopped" if back
                     else "not back to 1 within 10 s of the drip stopping")
        if result.errors:
            notes.append(f"errors: {error_breakdown(result)}")
    finally:
        stop.set()
        watcher.join(timeout=5)
        drip.stop_drip()
        case.healthy = health_after(server, DRIP)
        unload(server, DRIP, case)
    return case
