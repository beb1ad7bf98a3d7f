"""``compare``'s segments: each model run alone on the same arrivals through perf_analyzer,
its requests matched to the schedule, and the inputs it replays.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import click

from .. import perf_analyzer as pa
from ..measure import ended_count, model_sampler
from ..records import RequestRecord
from simulation import workload as W


@dataclass
class Segment:
    index: int
    model: str
    role: str  # "explicit" or "native"
    planned: int
    run: pa.TraceRun | None = None
    requests: list[RequestRecord] = field(default_factory=list)
    start_ns: int | None = None
    end_ns: int | None = None
    unmatched: int = 0  # exported requests whose input matches no trace entry
    hung: str = ""  # a first replay that never finished (replayed once): what it said
    hung_ended: int | None = None  # requests the server ended during that replay

    @property
    def ok(self) -> bool:
        return self.run is not None and self.run.error is None

    @property
    def lost(self) -> int:
        """Planned requests without a response in the export (0 for a failed segment,
        which has no export: it is reported separately)."""
        if not self.ok:
            return 0
        return self.planned - sum(1 for r in self.run.requests if r.response_ns is not None)


def match_requests(segment: Segment, scheduled_ms: Sequence[float],
                   entries: dict[tuple[int, ...], tuple[int, float]]) -> None:
    """Fill ``segment.requests`` from its export: the k-th send (by time) was scheduled
    at ``scheduled_ms[k]``; SLA and length come from the input-data entry whose
    INPUT_IDS the request carried."""
    run = segment.run
    segment.start_ns = run.window_start_ns
    if segment.start_ns is None and run.requests:
        segment.start_ns = run.requests[0].sent_ns - int(scheduled_ms[0] * 1e6)
    ends = [r.response_ns or r.sent_ns for r in run.requests]
    segment.end_ns = max(ends) if ends else segment.start_ns
    for k, r in enumerate(run.requests):
        entry = entries.get(r.input_ids)
        if entry is None:
            segment.unmatched += 1
            continue
        seq_len, sla = entry
        segment.requests.append(replace(r, scheduled_s=scheduled_ms[k % len(scheduled_ms)] / 1e3,
                                        seq_len=seq_len, sla_ms=sla))

# -- inputs -------------------------------------------------------------------------------------

def load_trace_inputs(intervals_path: str, input_data_path: str, time_scale: float,
                      default_sla_ms: float) -> tuple[list[float], list[dict]]:
    """(send offsets in ms, input-data entries with SLA_MS scaled by ``time_scale``; an
    entry without SLA_MS gets ``default_sla_ms``) of a shipped trace and data file."""
    times = W.read_request_intervals(intervals_path)
    with open(input_data_path, encoding="utf-8") as fh:
        doc = json.load(fh)
    entries = doc.get("data") if isinstance(doc, dict) else None
    if not times or not entries:
        raise click.ClickException(f"{intervals_path} / {input_data_path}: no requests")
    scaled = []
    for e in entries:
        sla = e.get("SLA_MS")
        value = float(sla["content"][0]) * time_scale if sla else default_sla_ms
        scaled.append({"INPUT_IDS": e["INPUT_IDS"], "SLA_MS": {"content": [value], "shape": [1]}})
    return [t * 1000.0 for t in times], scaled


def write_inputs(workdir: str, offsets_ms: Sequence[float], entries: Sequence[dict]
                 ) -> tuple[str, str, str, dict[tuple[int, ...], tuple[int, float]]]:
    """(intervals, data with SLA_MS, data without, content -> (length, SLA ms))."""
    intervals = os.path.join(workdir, "trace.intervals")
    with_sla = os.path.join(workdir, "input_sla.json")
    without = os.path.join(workdir, "input.json")
    W.write_request_intervals([W.Arrival(t / 1000.0, 2, 1.0) for t in offsets_ms], intervals)
    with open(with_sla, "w", encoding="utf-8") as fh:
        json.dump({"data": list(entries)}, fh, separators=(",", ":"))
    with open(without, "w", encoding="utf-8") as fh:
        json.dump({"data": [{"INPUT_IDS": e["INPUT_IDS"]} for e in entries]}, fh,
                  separators=(",", ":"))
    table = {}
    for e in entries:
        ids = tuple(int(x) for x in e["INPUT_IDS"]["content"])
        table[ids] = (len(ids), float(e["SLA_MS"]["content"][0]))
    return intervals, with_sla, without, table


def run_segments(url: str, metrics_url: str, http: str, models: tuple[str, str],
                 segments: int, workdir: str, intervals: str, data: tuple[str, str],
                 offsets_ms: Sequence[float], table, gap_s: float, scrape_period_s: float):
    """Replay the trace ``segments`` times, alternating explicit and native, while a
    sampler reads both models' metrics. Returns (segments, the sampler)."""
    explicit_model, native_model = models
    data_sla, data_plain = data
    n = len(offsets_ms)
    trace_s = offsets_ms[-1] / 1000.0
    scraper = model_sampler(metrics_url, http, [explicit_model, native_model],
                            scrape_period_s, name="compare-scraper")
    scraper.sample_once()
    if not scraper.samples:
        raise click.ClickException(f"cannot scrape {metrics_url}: {scraper.last_error}")
    scraper.samples.clear()
    scraper.start()
    runs: list[Segment] = []
    try:
        for k in range(segments):
            role = "explicit" if k % 2 == 0 else "native"
            model = explicit_model if role == "explicit" else native_model
            click.echo(f"segment {k + 1}/{segments}: {model}, {n:,} requests over "
                       f"{trace_s:.1f} s ...", err=True)
            seg = Segment(k, model, role, n)
            for attempt in range(2):
                before = ended_count(http, model)
                seg.run = pa.replay_trace(
                    url.split("://", 1)[-1], model, intervals,
                    data_sla if role == "explicit" else data_plain, n,
                    os.path.join(workdir, f"segment{k}_{model}.export.json"),
                    timeout_s=trace_s * 4 + 120)
                # A replay that never finishes (perf_analyzer's sleeping worker, replay_trace
                # says how: then the server ended none of it) is replayed once more, and
                # the report says so with what the server ended of it.
                if attempt or seg.ok or not seg.run.error.startswith(pa.REPLAY_HUNG):
                    break
                seg.hung, seg.hung_ended = seg.run.error, ended_count(http, model) - before
                click.echo(f"  {seg.run.error}; replaying the segment once more", err=True)
            if seg.ok:
                match_requests(seg, offsets_ms, table)
            else:
                click.echo(f"  {seg.run.error}", err=True)
            runs.append(seg)
            if k + 1 < segments:
                time.sleep(gap_s)
        time.sleep(scrape_period_s * 1.5)  # one sample past the last response
    finally:
        scraper.stop()
    return runs, scraper
