"""The operator tools' one per-request record: what one request did, as the load source
that sent it measured it.

Three sources fill it, each with its own clock, and the record keeps each source's own
numbers rather than converting them (a conversion would move latencies and send lags in
their last bits, and a float cannot hold a wall-clock time to the nanosecond):

* ``loadgen`` (the benchmark, the reliability script): seconds from the run's start
  (``scheduled_s``, ``sent_s``, ``response_s``), an outcome and the error message;
* perf_analyzer's profile export, as calibrate reads it (``live``): the wall-clock send
  time in seconds (``sent_s``);
* perf_analyzer's profile export, as compare reads it (``perf_analyzer``): the exact
  wall-clock nanoseconds (``sent_ns``, ``response_ns``) and the inputs it carried.

``latency_ms`` is the one latency: the source computes it once from its own clock when
the answer arrives (None: no answer).
"""

from __future__ import annotations

from dataclasses import dataclass

OK = "ok"
LOST = "LOST"
CLIENT_TIMEOUT = "DEADLINE_EXCEEDED"  # with client_timeout_s: the client's own deadline
SEND_FAILED = "SEND_FAILED"  # async_infer itself raised (the call never left the client)


@dataclass
class RequestRecord:
    """One request: its latency (ms, as measured; None: no answer), its SLA and length, the
    outcome (``ok``, a gRPC status code name, LOST or SEND_FAILED) and the times its source
    knows (None where it does not)."""

    latency_ms: float | None = None
    sla_ms: float | None = None
    seq_len: int = 0
    outcome: str = OK
    message: str = ""
    scheduled_s: float | None = None  # from the run's start (loadgen, compare's trace)
    sent_s: float | None = None  # loadgen: from the run's start; calibrate: wall clock
    response_s: float | None = None  # loadgen: from the run's start
    sent_ns: int | None = None  # perf_analyzer's export: wall clock, exact
    response_ns: int | None = None
    input_ids: tuple[int, ...] = ()  # the INPUT_IDS it carried (perf_analyzer's export)


def timed_record(scheduled_s: float, sent_s: float | None, response_s: float | None,
                 outcome: str, message: str = "", seq_len: int = 0,
                 sla_ms: float | None = None) -> RequestRecord:
    """A record on one clock in seconds (the load generator's), its latency the response
    time minus the send time."""
    return RequestRecord(latency_ms=answer_latency_ms(sent_s, response_s), sla_ms=sla_ms,
                         seq_len=seq_len, outcome=outcome, message=message,
                         scheduled_s=scheduled_s, sent_s=sent_s, response_s=response_s)


def answer_latency_ms(sent_s: float | None, response_s: float | None) -> float | None:
    """Milliseconds from ``sent_s`` to ``response_s`` (seconds); None without either."""
    if sent_s is None or response_s is None:
        return None
    return (response_s - sent_s) * 1000.0


def exported_record(sent_ns: int, response_ns: int | None, input_ids: tuple[int, ...] = (),
                    sla_ms: float | None = None) -> RequestRecord:
    """A record of perf_analyzer's export: wall-clock nanoseconds, exactly as exported."""
    latency = None if response_ns is None else (response_ns - sent_ns) / 1e6
    return RequestRecord(latency_ms=latency, sla_ms=sla_ms, outcome=OK if latency is not None
                         else LOST, sent_ns=sent_ns,
                         response_ns=response_ns, input_ids=input_ids)
