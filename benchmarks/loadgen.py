"""Open-loop load generator over gRPC (tritonclient.grpc ``async_infer`` with callbacks).

Requests go out at scheduled times whatever the server does (open loop: a slow server
never slows the sender down), so overload shows as queueing and errors, not as a
quietly lower offered rate. The schedule is a fixed rate or any list of arrivals
(objects with ``time_s``, ``seq_len`` and ``sla_ms``, e.g. from
``simulation.workload.generate``), bounded in count and duration.

Design, for a few hundred requests per second on a 2-core machine shared with the
server:

* ONE sender thread sleeps until the next send time and calls ``async_infer``; the inputs
  of the next request are built (or taken from a cache keyed by length and SLA) while it
  waits, so only the gRPC call itself sits on the critical path. Behind schedule it sends
  at once, without sleeping, and never skips a request.
* callbacks (gRPC's threads) only append ``(index, time, error)`` to a list; the response
  tensors are dropped at once, and everything else is computed after the run.
* a small pool of clients, each on its own HTTP/2 connection, spreads the streams.

After the schedule ends the generator waits (bounded by ``drain_timeout_s``) for the
outstanding responses; a request without one by then is **LOST**. Each request's record:
scheduled time, actual send time, response time, outcome (``ok`` or the gRPC status code
name of the error, e.g. ``UNAVAILABLE``) and the error message.

It only ever talks to the given localhost URL.
"""

from __future__ import annotations

import gc
import math
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from benchmarks.load_result import LoadResult
from operator_tools.records import (LOST, OK, SEND_FAILED, RequestRecord, answer_latency_ms,
                                    timed_record)


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
CLS_ID, SEP_ID = 101, 102


@dataclass(frozen=True, slots=True)
class Arrival:
    """One scheduled request (the same fields as ``simulation.workload.Arrival``)."""

    time_s: float
    seq_len: int
    sla_ms: float | None = None


def check_local_url(url: str) -> str:
    """``url`` as ``host:port`` if the host is this machine; ValueError otherwise."""
    text = url.strip()
    for scheme in ("grpc://", "http://"):
        if text.startswith(scheme):
            text = text[len(scheme):]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or host.lower() not in LOCAL_HOSTS:
        raise ValueError(f"load generator only sends to localhost:<port>, got {url!r}")
    return f"{host}:{port}"


def fixed_rate(rate_rps: float, duration_s: float, seq_len: int = 64,
               sla_ms: float | None = None) -> list[Arrival]:
    """Evenly spaced arrivals at ``rate_rps`` for ``duration_s`` seconds."""
    if not (rate_rps > 0 and math.isfinite(rate_rps)):
        raise ValueError(f"rate_rps must be a finite number > 0 (got {rate_rps!r})")
    n = int(math.floor(rate_rps * duration_s + 1e-9))
    return [Arrival(i / rate_rps, seq_len, sla_ms) for i in range(n)]


def concat_phases(phases: Sequence[Sequence[Any]], durations_s: Sequence[float]
                  ) -> list[Arrival]:
    """Phases of arrivals (each timed from its own start) laid end to end."""
    out, offset = [], 0.0
    for arrivals, duration in zip(phases, durations_s):
        out.extend(Arrival(offset + a.time_s, int(a.seq_len), getattr(a, "sla_ms", None))
                   for a in arrivals)
        offset += duration
    return out


def _status_name(error: Any) -> str:
    """'UNAVAILABLE' from an InferenceServerException whose status() is
    'StatusCode.UNAVAILABLE' (UNKNOWN when it carries none)."""
    try:
        status = error.status()
    except Exception:  # pragma: no cover - not an InferenceServerException
        status = None
    if not status:
        return "UNKNOWN"
    return str(status).rsplit(".", 1)[-1]


def _message(error: Any) -> str:
    try:
        return str(error.message())
    except Exception:  # pragma: no cover
        return str(error)


class LoadGenerator:
    """Open-loop sender; ``run`` sends one schedule and returns a :class:`LoadResult`."""

    def __init__(self, url: str, model: str, *, clients: int = 4, include_sla: bool = True,
                 sla_as_parameter: bool = False, client_timeout_s: float | None = None,
                 sla_as_timeout: bool = False, seed: int = 0,
                 switch_interval_s: float | None = None,
                 drain_clock: Callable[[], float] = time.monotonic):
        """``drain_clock``: what the drain's timeout (and ``drain_s``) is measured on; a
        test's own clock cuts the drain exactly when it means to. ``sla_as_timeout``: each
        arrival's SLA goes as Triton's own per-request ``timeout`` (microseconds), and no
        SLA input or parameter is sent."""
        self.url = check_local_url(url)
        self.drain_clock = drain_clock
        self.model = model
        self.n_clients = max(1, int(clients))
        self.include_sla = include_sla
        self.sla_as_parameter = sla_as_parameter
        self.client_timeout_s = client_timeout_s
        self.sla_as_timeout = sla_as_timeout
        if sla_as_timeout:
            self.include_sla = False
        self.switch_interval_s = switch_interval_s
        self._rng = np.random.default_rng(seed)
        self._cache: dict[tuple[int, float | None], list] = {}

    # -- inputs ----------------------------------------------------------------------------
    def _inputs(self, grpcclient, seq_len: int, sla_ms: float | None) -> list:
        """INPUT_IDS INT64 [1, L] (101 ... 102, ids in 1000..29999) and optional SLA_MS FP32
        [1, 1]; cached per (length, SLA) - async_infer copies them into each request."""
        key = (int(seq_len), sla_ms if (self.include_sla and not self.sla_as_parameter) else None)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        length = max(2, int(seq_len))
        ids = np.array([[CLS_ID, *self._rng.integers(1000, 30000, size=length - 2), SEP_ID]],
                       dtype=np.int64)
        t = grpcclient.InferInput("INPUT_IDS", [1, length], "INT64")
        t.set_data_from_numpy(ids)
        inputs = [t]
        if key[1] is not None:
            s = grpcclient.InferInput("SLA_MS", [1, 1], "FP32")
            s.set_data_from_numpy(np.array([[key[1]]], dtype=np.float32))
            inputs.append(s)
        self._cache[key] = inputs
        return inputs

    # -- the run ---------------------------------------------------------------------------
    def run(self, arrivals: Sequence[Any], *, max_requests: int | None = None,
            max_duration_s: float | None = None, drain_timeout_s: float = 30.0,
            bucket_s: float = 1.0, on_start: Callable[[float], None] | None = None
            ) -> LoadResult:
        """Send ``arrivals`` (sorted by ``time_s``, seconds from the start) open-loop.

        ``max_requests`` / ``max_duration_s`` cut the schedule; ``drain_timeout_s`` bounds
        the wait for outstanding responses after the last send; ``on_start(t0)`` is called
        with the monotonic start time just before the first send (to align monitors)."""
        import tritonclient.grpc as grpcclient

        schedule, duration = _cut_schedule(arrivals, max_requests, max_duration_s)
        n = len(schedule)
        scheduled = [float(a.time_s) for a in schedule]
        sent = [math.nan] * n
        send_errors: dict[int, str] = {}
        done: list[tuple[int, float, Any]] = []  # (index, monotonic time, error or None)
        clients = self._open_clients(grpcclient, schedule)
        t0_box: list[float] = []
        failure: list[BaseException] = []

        def sender() -> None:
            try:
                self._send_all(grpcclient, clients, schedule, scheduled, sent, send_errors,
                               done.append, t0_box, on_start)
            except BaseException as exc:  # surfaced in the caller's thread below
                failure.append(exc)

        answered, drain_s = self._send_and_drain(sender, failure, clients, done, n,
                                                 send_errors, drain_timeout_s)
        t0 = t0_box[0]
        for c in clients:
            try:
                c.close()
            except Exception:
                pass
        records, duplicates = _records(schedule, scheduled, sent, send_errors, answered, t0)
        return LoadResult(self.model, self.url, n, float(duration), records, bucket_s,
                          drain_s, duplicates, self.client_timeout_s)

    def _open_clients(self, grpcclient, schedule: Sequence[Any]) -> list:
        """The pool of clients, each connection warmed, and every input pre-built."""
        # Separate HTTP/2 connections per client (no shared global subchannel).
        channel_args = [("grpc.max_send_message_length", 2 ** 31 - 1),
                        ("grpc.max_receive_message_length", 2 ** 31 - 1),
                        ("grpc.use_local_subchannel_pool", 1)]
        clients = [grpcclient.InferenceServerClient(self.url, channel_args=channel_args)
                   for _ in range(self.n_clients)]
        # Warm each connection (channel set-up off the schedule).
        for c in clients:
            c.is_server_live()
        # Pre-build the inputs so the sender only looks them up.
        for a in schedule:
            self._inputs(grpcclient, a.seq_len, getattr(a, "sla_ms", None))
        return clients

    def _send_all(self, grpcclient, clients: Sequence[Any], schedule: Sequence[Any],
                  scheduled: list[float], sent: list[float], send_errors: dict[int, str],
                  append: Callable[[tuple[int, float, Any]], None], t0_box: list[float],
                  on_start: Callable[[float], None] | None) -> None:
        """The sender thread's loop: sleep until each send time, send, note the time."""
        mono = time.monotonic

        def make_callback(i: int):
            def callback(result, error):
                append((i, mono(), error))
            return callback

        sleep = time.sleep
        t0 = mono() + 0.05
        t0_box.append(t0)
        if on_start is not None:
            on_start(t0)
        for i, a in enumerate(schedule):
            sla = getattr(a, "sla_ms", None)
            inputs = self._inputs(grpcclient, a.seq_len, sla)
            params = ({"sla_ms": float(sla)} if self.include_sla and self.sla_as_parameter
                      and sla is not None else None)
            timeout_us = (int(sla * 1000.0) if self.sla_as_timeout and sla is not None
                          else None)
            client = clients[i % len(clients)]
            cb = make_callback(i)
            target = t0 + scheduled[i]
            delay = target - mono()
            if delay > 0:
                sleep(delay)
            now = mono()
            sent[i] = now - t0
            try:
                client.async_infer(self.model, inputs, cb, parameters=params,
                                   client_timeout=self.client_timeout_s, timeout=timeout_us)
            except Exception as exc:  # the call never left this process
                send_errors[i] = str(exc)

    def _send_and_drain(self, sender: Callable[[], None], failure: list[BaseException],
                        clients: Sequence[Any], done: list, n: int,
                        send_errors: dict[int, str], drain_timeout_s: float
                        ) -> tuple[list, float]:
        """Run ``sender`` in its own thread with the collector held back, then wait for
        the outstanding answers: (the answers by the cut, how long the wait took)."""
        mono = self.drain_clock
        # Full garbage collections of everything a run accumulates took 50-270 ms here and
        # stalled the sender that long: during the run the automatic collector is off and
        # this thread collects the young generations only (cheap); survivors wait for the
        # full collection after the cut.
        gc.collect()
        gc.freeze()
        was_enabled = gc.isenabled()
        gc.disable()
        # A waking sender waits for the GIL at most this long (default 5 ms) while gRPC's
        # callback threads or a monitor hold it.
        old_switch = sys.getswitchinterval()
        if self.switch_interval_s:
            sys.setswitchinterval(self.switch_interval_s)
        thread = threading.Thread(target=sender, name="loadgen-sender", daemon=True)
        try:
            thread.start()
            while thread.is_alive():
                thread.join(timeout=0.5)
                gc.collect(1)
            if failure:
                for c in clients:
                    c.close()
                raise failure[0]
            expected = n - len(send_errors)
            drain_start = mono()
            deadline = drain_start + drain_timeout_s
            while len(done) < expected and mono() < deadline:
                time.sleep(0.01)
            drain_s = mono() - drain_start
            answered = list(done)  # the cut: anything later counts as LOST
        finally:
            sys.setswitchinterval(old_switch)
            gc.unfreeze()
            if was_enabled:
                gc.enable()
        return answered, drain_s


def _cut_schedule(arrivals: Sequence[Any], max_requests: int | None,
                  max_duration_s: float | None) -> tuple[list[Any], float]:
    """(the arrivals within the bounds, the schedule's length in s); ValueError when they
    are not sorted by time."""
    schedule = [a for a in arrivals
                if max_duration_s is None or a.time_s < max_duration_s]
    if max_requests is not None:
        schedule = schedule[:max_requests]
    for i in range(1, len(schedule)):
        if schedule[i].time_s < schedule[i - 1].time_s:
            raise ValueError(f"arrivals must be sorted by time_s (index {i})")
    duration = (max_duration_s if max_duration_s is not None
                else (schedule[-1].time_s if schedule else 0.0))
    if schedule and duration < schedule[-1].time_s:
        duration = schedule[-1].time_s
    return schedule, duration


def _records(schedule: Sequence[Any], scheduled: Sequence[float], sent: Sequence[float],
             send_errors: dict[int, str], answered: Sequence[tuple[int, float, Any]],
             t0: float) -> tuple[list[RequestRecord], int]:
    """(one record per scheduled request, answers beyond the first to one request): every
    request starts LOST; its first answer by the cut sets its response and outcome."""
    records = [timed_record(scheduled[i], sent[i] if not math.isnan(sent[i]) else None,
                            None, LOST, "", int(a.seq_len), getattr(a, "sla_ms", None))
               for i, a in enumerate(schedule)]
    for i, msg in send_errors.items():
        records[i].outcome, records[i].message = SEND_FAILED, msg
    duplicates = 0
    for i, t, error in answered:
        r = records[i]
        if r.response_s is not None:  # a second answer to one request: keep the first
            duplicates += 1
            continue
        r.response_s = t - t0
        r.latency_ms = answer_latency_ms(r.sent_s, r.response_s)
        if error is None:
            r.outcome = OK
        else:
            r.outcome, r.message = _status_name(error), _message(error)
    return records, duplicates


def run_load(url: str, model: str, arrivals: Sequence[Any], **kwargs) -> LoadResult:
    """One-shot helper: ``LoadGenerator(url, model, ...).run(arrivals, ...)``."""
    run_keys = {"max_requests", "max_duration_s", "drain_timeout_s", "bucket_s", "on_start"}
    run_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in run_keys}
    return LoadGenerator(url, model, **kwargs).run(arrivals, **run_kwargs)
