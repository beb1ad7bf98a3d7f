"""``make bench``'s idle block: the issue's "device idle while feasible requests wait", for
the shipped default (intake hold) beside native, per profile.

Each profile gets a server of its own with the per-call timelines on
(``triton_backend/timeline.py``, ``TIMELINE_ENV``), so no other block's stub CPU carries the
timelines' writing. perf_analyzer (Poisson, the mix with its SLA classes for explicit and
without for native, as ``scripts/hold_speed.py`` runs them) sends each load as a fraction of
native's closed-loop peak; the two models alternate. The figure is
``timeline_figures.idle_while_waiting`` over each model's calls that started inside its own
measured rows (warm-ups and the closed loop left out): the device's idle time while
requests waited for it, as a share of the time the model was serving.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Callable
from unittest import mock

from benchmarks.bench_setup import log
from benchmarks.hold_speed import NATIVE, SHIPPED, Row, measure, shipped_beside_native
from benchmarks.timeline_figures import idle_while_waiting
from triton_backend.timeline import TIMELINE_ENV
from triton_backend.timeline import read as read_timeline

IDLE_PROFILES = ("h200_minilm", "flat")
IDLE_FRACTIONS = (0.2, 0.5, 0.8, 0.94)
QUICK_IDLE_FRACTIONS = (0.5,)
IDLE_MEASURE_MS = 4000
QUICK_IDLE_MEASURE_MS = 1500
PEAK_CONCURRENCY = 64
LABELS = {"h200_minilm": "h200_minilm EMULATED, time scale 1",
          "flat": "flat GPU-like t4 (fixed 3.9 ms, 0.0006 ms/token) EMULATED, time scale 1"}


def in_windows(records: list[dict], windows: list[tuple[float, float]]) -> list[dict]:
    """The timeline ``records`` whose call started inside one of ``windows`` (monotonic
    seconds: the stub's clock and this process's are the same system clock)."""
    return [r for r in records if any(a <= r["start_s"] <= b for a, b in windows)]


def run_profile(device: str, fractions: tuple[float, ...], measurement_ms: int) -> dict:
    """One profile: native's closed-loop peak, then each fraction of it for both models,
    alternating; each model's timeline figures over its own rows (the timelines
    themselves are left in a temporary folder: tens of MB a run)."""
    models = (SHIPPED, NATIVE)
    windows: dict[str, list[tuple[float, float]]] = {m: [] for m in models}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        folder = os.path.join(tmp, "timelines")
        # the server's stubs inherit it at load
        with (mock.patch.dict(os.environ, {TIMELINE_ENV: folder}),
              shipped_beside_native(tmp, device) as (server, _, data)):
            peak = measure(server, NATIVE, data[NATIVE], 0, None, measurement_ms,
                           concurrency=PEAK_CONCURRENCY)
            peak_rps = peak.throughput or 1000.0
            for k, f in enumerate(fractions):
                for m in (models if k % 2 == 0 else models[::-1]):
                    t0 = time.monotonic()
                    rows.append(measure(server, m, data[m], f * peak_rps, f, measurement_ms))
                    windows[m].append((t0, time.monotonic()))
                    log(f"  idle {device} {f:g}x {m}: {rows[-1].throughput or 0:.0f} req/s, "
                        f"P50 {rows[-1].p50_ms or 0:.1f} ms {rows[-1].error}")
        # the server has exited: every stub flushed its timeline at unload
        figures = {}
        for m in models:
            path = os.path.join(folder, f"{m}.timeline.jsonl")
            records = read_timeline(path) if os.path.exists(path) else []
            figures[m] = idle_while_waiting(in_windows(records, windows[m]))
    return {"device": device, "label": LABELS.get(device, device), "peak": peak,
            "peak_rps": peak_rps, "rows": rows, "figures": figures}


def run_idle_block(quick: bool) -> dict:
    """Every profile of ``IDLE_PROFILES``."""
    fractions = QUICK_IDLE_FRACTIONS if quick else IDLE_FRACTIONS
    ms = QUICK_IDLE_MEASURE_MS if quick else IDLE_MEASURE_MS
    out = {"fractions": fractions, "measurement_ms": ms, "explicit": SHIPPED,
           "native": NATIVE, "profiles": []}
    for device in IDLE_PROFILES:
        log(f"block idle, {device}: perf_analyzer at {', '.join(f'{f:g}' for f in fractions)}"
            " of native's closed-loop peak, per-call timelines on")
        try:
            out["profiles"].append(run_profile(device, fractions, ms))
        except Exception as exc:  # noqa: BLE001 - one profile's failure blanks its rows only
            error = f"{type(exc).__name__}: {exc}"[:300]
            log(f"  idle {device} failed: {error}")
            out["profiles"].append({"device": device, "label": LABELS.get(device, device),
                                    "error": error})
    return out


def idle_targets(results: dict, add: Callable[..., None]) -> None:
    """Per profile: explicit's share of serving time with the device idle while requests
    waited, against native's (the issue's target: no more than native's)."""
    block = results.get("idle")
    if not block:
        return
    span = ", ".join(f"{f:g}x" for f in block["fractions"])
    for p in block["profiles"]:
        scope = f"{p['label']}, perf_analyzer"
        target = "device idle while requests wait vs native (per-call timelines)"
        if p.get("error"):
            add(target, scope, f"failed: {p['error']}", None, "<= native's", None)
            continue
        e, n = p["figures"].get(block["explicit"]), p["figures"].get(block["native"])
        if not e or not n:
            add(target, scope, "no timeline records", None, "<= native's", None)
            continue
        es, ns = e["idle_while_waiting_share"], n["idle_while_waiting_share"]
        add(target, scope,
            f"loads {span} of native's peak: explicit {es:.3f} vs native {ns:.3f} of the "
            f"serving time; host ms per call outside batches {e['host_ms_per_call']:.2f} "
            f"vs {n['host_ms_per_call']:.2f}", es - ns, "<= native's", es <= ns)


def idle_markdown(block: dict) -> list[str]:
    lines = ["### Device idle while requests wait (per-call timelines)", "",
             "A server of its own per profile, timelines on (`EXPLICIT_BATCHING_TIMELINE_DIR`"
             "); perf_analyzer over HTTP, Poisson, the mix (with its SLA classes for explicit)"
             f", {block['measurement_ms'] / 1000:g} s per row at "
             f"{', '.join(f'{f:g}' for f in block['fractions'])} of native's closed-loop "
             "peak, the models alternating. `timeline_figures.idle_while_waiting` over the calls "
             "inside each model's own rows: the call's time outside its batches, and the gap "
             "before a hand-over, as a share of the serving time. An explicit batch's span "
             "includes its decision and feedback, native's only the executor: the explicit "
             "figure is the smaller by that much. Explicit is the shipped default, intake "
             "hold.", ""]
    for p in block["profiles"]:
        if p.get("error"):
            lines += [f"#### {p['label']}", "", f"Failed: {p['error']}", ""]
            continue
        lines += [f"#### {p['label']}", "",
                  f"Native's closed-loop peak (concurrency {PEAK_CONCURRENCY}): "
                  f"{p['peak_rps']:.0f} req/s.", "",
                  "| model | calls | requests per call | ms per call | host ms per call "
                  "(outside batches) | idle gap before hand-overs (ms, total) | device idle "
                  "while requests wait (share) | gap per handed-over request (us) | "
                  "answers sent early | ms per early send |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for m, f in p["figures"].items():
            if f:
                lines.append(f"| {m} | {f['calls']} | {f['requests_per_call']:.1f} | "
                             f"{f['call_ms']:.2f} | {f['host_ms_per_call']:.2f} | "
                             f"{f['handed_over_gap_ms']:.0f} | "
                             f"{f['idle_while_waiting_share']:.3f} | "
                             f"{_num(f.get('gap_us_per_request'), '.0f')} | "
                             f"{f['early_sends']} | {_num(f.get('early_send_ms'), '.2f')} |")
        lines += ["", "| load | model | offered (req/s) | served (req/s) | P50 (ms) | P99 (ms) "
                  "| stub CPU (us/req) | note |", "|---:|---|---:|---:|---:|---:|---:|---|"]
        for r in p["rows"]:
            lines.append(f"| {r.fraction:g}x | {r.model} | {r.rate:.0f} | "
                         f"{_num(r.throughput, '.0f')} | {_num(r.p50_ms, '.1f')} | "
                         f"{_num(r.p99_ms, '.1f')} | {_num(r.stub_us, '.0f')} | "
                         f"{r.error[:100] or ('' if r.kept else 'perf_analyzer fell behind')} |")
        lines.append("")
    return lines


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)
