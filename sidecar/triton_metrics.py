"""Triton's Prometheus metrics page -> typed per-model counters, and counters -> rates.

Also the project's one reader of a metrics page (``fetch_url`` and ``read_samples``): the
sidecar, the operator tools, the scripts and the tests all read the page through it.
Parsed with ``prometheus_client``'s text parser (no hand-written regexes).
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

MAX_PAGE_BYTES = 4 * 1024 * 1024

# Triton per-model counters (cumulative) and the one per-model gauge.
_COUNTERS = {
    "nv_inference_request_success": "success",
    "nv_inference_request_failure": "failure",
    "nv_inference_count": "inferences",
    "nv_inference_exec_count": "executions",
    "nv_inference_request_duration_us": "request_us",
    "nv_inference_queue_duration_us": "queue_us",
    "nv_inference_compute_infer_duration_us": "compute_infer_us",
}
_GAUGES = {"nv_inference_pending_request_count": "pending"}
_GPU = {"nv_gpu_utilization": "gpu_utilization", "nv_gpu_memory_used_bytes": "gpu_memory_used_bytes",
        "nv_gpu_memory_total_bytes": "gpu_memory_total_bytes", "nv_gpu_power_usage": "gpu_power_w"}


class MetricsParseError(ValueError):
    """The page is not a Prometheus text exposition Triton would serve."""


class ScrapeTimeout(TimeoutError):
    """The whole page did not arrive by the scrape's deadline (an ``OSError``, as a socket
    timeout is)."""


class UnsafeURL(ValueError):
    """A metrics URL, or a redirect of one, that the sidecar does not fetch: a scheme other
    than http(s), or another host than the one configured."""


FETCH_SCHEMES = ("http", "https")


def _check_scheme(url: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in FETCH_SCHEMES:
        raise UnsafeURL(f"metrics URL scheme {parts.scheme or '(none)'!r} refused: only "
                        f"{' and '.join(FETCH_SCHEMES)} are fetched")
    return parts


class _SameHostRedirect(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to the host (and port) of the URL configured."""

    def __init__(self, origin: urllib.parse.SplitResult):
        self._origin = (origin.hostname, origin.port)

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        target = _check_scheme(newurl)
        if (target.hostname, target.port) != self._origin:
            raise UnsafeURL(f"redirect to another host refused: {target.hostname}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch_url(url: str, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> str:
    """GET the metrics page (at most MAX_PAGE_BYTES) within ``timeout_s`` seconds in all:
    connect, request, headers and body. A socket timeout alone bounds each read, so a page
    that drips one byte at a time never trips it; here every read waits at most until the
    deadline, and the scrape raises ``ScrapeTimeout`` once it has passed. ``clock`` is
    monotonic seconds (the name lookup before connecting is not bounded).

    Only http(s) is fetched, straight from the host (the environment's proxies are not
    used: a scrape of localhost must not leave the machine), and a redirect is followed only
    to the same host; anything else raises ``UnsafeURL``."""
    origin = _check_scheme(url)
    deadline_s = clock() + timeout_s
    conn_args = {"deadline_s": deadline_s, "scrape_timeout_s": timeout_s, "clock": clock}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         _SameHostRedirect(origin),
                                         _DeadlineHTTPHandler(conn_args),
                                         _DeadlineHTTPSHandler(conn_args))
    try:
        resp = opener.open(url, timeout=timeout_s)
    except urllib.error.URLError as exc:  # urllib wraps what failed to connect or send
        if isinstance(exc.reason, UnsafeURL):
            raise exc.reason from None
        if isinstance(exc.reason, ScrapeTimeout):
            raise exc.reason from None
        if isinstance(exc.reason, TimeoutError):
            raise ScrapeTimeout(f"metrics page timed out: no connection within "
                                f"{timeout_s:g} s") from None
        raise
    with resp:
        body = resp.read(MAX_PAGE_BYTES + 1)
    if len(body) > MAX_PAGE_BYTES:
        raise MetricsParseError(f"metrics page larger than {MAX_PAGE_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


class _DeadlineReader(io.RawIOBase):
    """The socket's reader with the time left to the deadline as the timeout of each read."""

    def __init__(self, sock: socket.socket, deadline_s: float, timeout_s: float,
                 clock: Callable[[], float]):
        super().__init__()
        # The socket's own reader: it keeps the socket open after urllib closes the
        # connection, until the response is closed.
        self._raw = sock.makefile("rb", buffering=0)
        self._sock, self._deadline_s, self._timeout_s, self._clock = (
            sock, deadline_s, timeout_s, clock)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int | None:
        left_s = self._deadline_s - self._clock()
        if left_s <= 0:
            raise self._late()
        self._sock.settimeout(left_s)
        try:
            return self._raw.readinto(buffer)
        except socket.timeout:
            raise self._late() from None

    def close(self) -> None:
        self._raw.close()
        super().close()

    def _late(self) -> ScrapeTimeout:
        return ScrapeTimeout(f"metrics page timed out: not complete within {self._timeout_s:g} s")


class _DeadlineSocket:
    """A connected socket whose response reader honours the deadline; the rest passes through."""

    def __init__(self, sock: socket.socket, deadline_s: float, timeout_s: float,
                 clock: Callable[[], float]):
        self._sock = sock
        self._args = (deadline_s, timeout_s, clock)

    def makefile(self, mode: str = "r", *args, **kwargs):
        if mode != "rb":  # http.client reads the response only through makefile("rb")
            return self._sock.makefile(mode, *args, **kwargs)
        return io.BufferedReader(_DeadlineReader(self._sock, *self._args), 64 * 1024)

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


class _DeadlineConnection:
    """Mixed into ``http.client``'s connections: connect within the time left, then read
    through a ``_DeadlineSocket``."""

    def __init__(self, *args, deadline_s: float, scrape_timeout_s: float,
                 clock: Callable[[], float], **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline = (deadline_s, scrape_timeout_s, clock)

    def connect(self) -> None:
        deadline_s, timeout_s, clock = self._deadline
        left_s = deadline_s - clock()
        if left_s <= 0:
            raise ScrapeTimeout(f"metrics page timed out: no connection within {timeout_s:g} s")
        self.timeout = left_s
        super().connect()
        self.sock = _DeadlineSocket(self.sock, *self._deadline)


class _DeadlineHTTPConnection(_DeadlineConnection, http.client.HTTPConnection):
    pass


class _DeadlineHTTPSConnection(_DeadlineConnection, http.client.HTTPSConnection):
    pass


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, conn_args: dict):
        super().__init__()
        self._conn_args = conn_args

    def http_open(self, req):
        return self.do_open(functools.partial(_DeadlineHTTPConnection, **self._conn_args), req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, conn_args: dict):
        super().__init__()
        self._conn_args = conn_args

    def https_open(self, req):
        return self.do_open(functools.partial(_DeadlineHTTPSConnection, **self._conn_args), req,
                            context=self._context)


def read_samples(text: str) -> list[Sample]:
    """Every sample on a Prometheus text page (``name``, ``labels``, ``value``; a counter's
    samples are named ``<family>_total``). Raises ``MetricsParseError`` on anything that is
    not such a page."""
    try:
        return [s for family in text_string_to_metric_families(text) for s in family.samples]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise MetricsParseError(f"not a Prometheus metrics page: {exc}") from None


def model_sample_sum(text: str, name: str, model: str) -> float:
    """The sum of family ``name``'s samples labelled ``model`` on a metrics page (0 when it
    has none): e.g. the plugin's wake requests, which Triton counts as requests too."""
    return sum(s.value for s in read_samples(text)
               if s.name == name and s.labels.get("model") == model)


@dataclass
class ModelCounters:
    success: float = 0.0
    failure: float = 0.0  # summed over Triton's failure reasons
    canceled: float = 0.0  # of those, reason CANCELED (a client's cancel, seen in Triton's queue)
    inferences: float = 0.0
    executions: float = 0.0
    request_us: float = 0.0
    queue_us: float = 0.0
    compute_infer_us: float = 0.0
    pending: float = 0.0


@dataclass
class TritonMetrics:
    """One scrape: per-model counters and, where Triton exports them, GPU gauges."""

    models: dict[str, ModelCounters] = field(default_factory=dict)
    gpu: dict[str, float] = field(default_factory=dict)  # summed over GPUs
    cpu_utilization: float | None = None


_READ_FAMILIES = (*_COUNTERS, *_GAUGES, *_GPU, "nv_cpu_utilization")
_READ_LINE_PREFIXES = (*_READ_FAMILIES, *(f"# {kind} {family}" for family in _READ_FAMILIES
                                          for kind in ("HELP", "TYPE")))


def _read_families_only(text: str) -> str:
    """The page's lines of the families ``parse_metrics`` reads (their samples and their
    HELP/TYPE lines), every other family dropped before the parser sees it. The plugin's
    own families are most of the page; the sidecar reads it every perception period, and
    parsing it whole cost about a tenth of a core (py-spy, intake hold at the closed-loop
    peak)."""
    return "\n".join(line for line in text.splitlines()
                     if line.startswith(_READ_LINE_PREFIXES)) + "\n"


def parse_metrics(text: str) -> TritonMetrics:
    """Parse a metrics page; raises ``MetricsParseError`` on anything that is not one."""
    out = TritonMetrics()
    seen_triton = False
    for sample in read_samples(_read_families_only(text)):
        name = sample.name
        if name.endswith("_total") and name[:-6] in _COUNTERS:
            name = name[:-6]  # the parser may append _total to counter samples
        if name in _COUNTERS or name in _GAUGES:
            seen_triton = True
            model = sample.labels.get("model", "")
            counters = out.models.setdefault(model, ModelCounters())
            attr = _COUNTERS.get(name) or _GAUGES[name]
            setattr(counters, attr, getattr(counters, attr) + float(sample.value))
            if attr == "failure" and sample.labels.get("reason") == "CANCELED":
                counters.canceled += float(sample.value)
        elif name in _GPU:
            out.gpu[_GPU[name]] = out.gpu.get(_GPU[name], 0.0) + float(sample.value)
        elif name == "nv_cpu_utilization":
            out.cpu_utilization = float(sample.value)
    if not seen_triton:
        raise MetricsParseError("no Triton per-model metrics (nv_inference_*) on the page")
    return out


@dataclass(frozen=True)
class ModelRates:
    """What happened to one model between two scrapes."""

    interval_s: float
    requests_per_s: float
    failures_per_s: float
    inferences_per_s: float
    executions_per_s: float
    avg_batch_size: float  # inferences per execution
    avg_request_ms: float
    avg_queue_ms: float
    compute_busy_fraction: float  # compute time per wall time (per instance, summed)
    pending: float


def rates(before: TritonMetrics, after: TritonMetrics, interval_s: float) -> dict[str, ModelRates]:
    """Per-model rates between two scrapes ``interval_s`` apart. A counter that went down
    (server restart, model reload) restarts from zero instead of giving a negative rate."""
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s!r}")
    out = {}
    for model, now in after.models.items():
        prev = before.models.get(model, ModelCounters())
        reset = now.success + now.failure < prev.success + prev.failure

        def delta(attr: str) -> float:
            cur = getattr(now, attr)
            return cur if reset else max(cur - getattr(prev, attr), 0.0)

        requests = delta("success") + delta("failure")
        executions = delta("executions")
        out[model] = ModelRates(
            interval_s=interval_s,
            requests_per_s=requests / interval_s,
            failures_per_s=delta("failure") / interval_s,
            inferences_per_s=delta("inferences") / interval_s,
            executions_per_s=executions / interval_s,
            avg_batch_size=delta("inferences") / executions if executions else 0.0,
            avg_request_ms=delta("request_us") / 1000.0 / requests if requests else 0.0,
            avg_queue_ms=delta("queue_us") / 1000.0 / requests if requests else 0.0,
            compute_busy_fraction=delta("compute_infer_us") / 1e6 / interval_s,
            pending=now.pending,
        )
    return out
