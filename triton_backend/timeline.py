"""The per-call timeline of intake hold: one ``CallRecord`` per ``execute()`` call.

A record says where the call's time went: the gap since the previous call returned, the
hand-over (how many requests, whether they queued in Triton during the previous call, the
arrival date the plugin gave them), decoding, each batch (size, refusals, start, end, the
estimate it was formed on), the answers sent early, the return, and the CPU the call's
thread spent (its wall time also holds the device's waits and other processes' turns).
Totals are kept always (``summary()``, the unload log line); the records themselves are
written only when the environment variable ``TIMELINE_ENV`` names a folder: as JSON lines to
``<folder>/<model>.timeline.jsonl``, in blocks of ``FLUSH_EVERY`` calls and at unload.
``scripts/host_ledger.py --timeline`` reads them.

No Triton import: unit-tested alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

TIMELINE_ENV = "EXPLICIT_BATCHING_TIMELINE_DIR"
FLUSH_EVERY = 512  # records per write


@dataclass
class CallRecord:
    """One ``execute()`` call; times are seconds on the stub's monotonic clock."""

    start_s: float
    requests: int
    gap_s: float | None = None  # since the previous call returned (None: the first call)
    arrival_s: float = 0.0  # the arrival date given to the call's requests
    handed_over: bool = False  # they queued in Triton during the previous call
    decoded_s: float = 0.0
    launched_first: bool = False  # its batch launched before its SLAs were read
    # per batch: (size, refused, started, ended, estimated_ms, former, executor_s); the
    # span from started to ended holds the decision and the bookkeeping around the run,
    # executor_s the executor's own run (the device's share; 0 where none ran)
    batches: list[tuple[int, int, float, float, float, str, float]] = field(
        default_factory=list)
    early_sends: int = 0
    wakes: int = 0
    return_s: float = 0.0
    cpu_s: float = 0.0  # the call's own thread CPU (``time.thread_time``), start to return

    def batch(self, size: int, refused: int, started: float, ended: float,
              estimated_ms: float, former: str, executor_s: float = 0.0) -> None:
        self.batches.append((size, refused, started, ended, estimated_ms, former,
                             executor_s))

    @property
    def device_s(self) -> float:
        """Time inside the batches' decide-and-run steps (the device's share and its
        bookkeeping)."""
        return sum(b[3] - b[2] for b in self.batches if b[0])

    @property
    def host_s(self) -> float:
        """The rest of the call: decoding, admission, answers, sends."""
        return self.return_s - self.start_s - self.device_s


class Timeline:
    """The calls of one model instance (see the module doc)."""

    def __init__(self, model: str, folder: str | None = None):
        self.path = (os.path.join(folder, f"{model}.timeline.jsonl") if folder else None)
        self._pending: list[CallRecord] = []
        self._last_return: float | None = None
        self.totals = {"calls": 0, "requests": 0, "batches": 0, "refused": 0,
                       "early_sends": 0, "call_s": 0.0, "cpu_s": 0.0, "device_s": 0.0,
                       "handed_over_gap_s": 0.0}
        if self.path:
            os.makedirs(folder, exist_ok=True)
            open(self.path, "w").close()  # one file per load

    def begin(self, now: float, requests: int) -> CallRecord:
        gap = None if self._last_return is None else now - self._last_return
        return CallRecord(now, requests, gap)

    def end(self, record: CallRecord, now: float) -> None:
        record.return_s = now
        self._last_return = now
        t = self.totals
        t["calls"] += 1
        t["requests"] += record.requests
        for size, refused, started, ended, *_ in record.batches:  # one pass
            t["refused"] += refused
            if size:
                t["batches"] += 1
                t["device_s"] += ended - started
        t["early_sends"] += record.early_sends
        t["call_s"] += now - record.start_s
        t["cpu_s"] += record.cpu_s
        if record.handed_over and record.gap_s is not None:
            t["handed_over_gap_s"] += record.gap_s
        if self.path:
            self._pending.append(record)
            if len(self._pending) >= FLUSH_EVERY:
                self.flush()

    def flush(self) -> None:
        """Append the records kept so far to the file (when there is one)."""
        if not (self.path and self._pending):
            return
        records, self._pending = self._pending, []
        with open(self.path, "a", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(asdict(r), separators=(",", ":")) + "\n")

    def summary(self) -> str:
        t = self.totals
        calls = max(1, t["calls"])
        return (f" hold: calls={t['calls']} requests_per_call={t['requests'] / calls:.1f} "
                f"batches_per_call={t['batches'] / calls:.2f} call_ms_mean="
                f"{1000 * t['call_s'] / calls:.2f} cpu_ms_mean="
                f"{1000 * t['cpu_s'] / calls:.3f} device_ms_mean="
                f"{1000 * t['device_s'] / calls:.2f} refused={t['refused']} "
                f"early_sends={t['early_sends']} handed_over_gap_ms_total="
                f"{1000 * t['handed_over_gap_s']:.0f}")


def read(path: str) -> list[dict]:
    """A timeline file's records, as dicts."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
