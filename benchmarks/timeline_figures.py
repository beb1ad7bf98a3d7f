"""Figures from the per-call timelines (``triton_backend/timeline.py``) a run leaves in
``EXPLICIT_BATCHING_TIMELINE_DIR``, written by the explicit models and, for comparison, by
native: the device idle while requests wait (the issue's figure), the gap before each
hand-over per request it carries, the cost of an early send, and calls of equal size side
by side, with the host time of each phase of a call (``phases``), and the CPU of a call
by the path it took (``cpu_by_kind``).
``scripts/host_ledger.py --timeline DIR`` prints them; ``make bench``'s idle block
(``bench_idle.py``) reports them.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from operator_tools.report import fmt_num
from triton_backend.intake import hand_over_s
from triton_backend.timeline import read as read_timeline

IDLE_GAP_S = 1.0  # a gap this long between calls is a pause in the traffic, not serving


def idle_while_waiting(records: list[dict]) -> dict:
    """From one model's per-call timeline (``triton_backend/timeline.py``): how long the
    device stood idle while requests waited for it. Counted: each call's time outside its
    batches (decoding, admission, answers: its requests wait, the device does not run),
    and the gap before a call that carried requests which queued in Triton during the
    previous one (a hand-over: they waited through the gap); as a share of the time the
    model was serving (calls and the gaps between them, pauses over IDLE_GAP_S left out).
    The device runs only while the executor does (``executor_s``, recorded since
    the timeline carries it): an explicit batch's decision and bookkeeping are host time.
    Older records without it count the batch's whole span."""
    if not records:
        return {}
    inside = gaps = wall = 0.0
    previous = None
    for r in records:
        run = sum(executor_s(b) for b in r["batches"] if b[0])
        inside += (r["return_s"] - r["start_s"]) - run
        wall += r["return_s"] - r["start_s"]
        if previous is not None:
            gap = r["start_s"] - previous["return_s"]
            if gap <= IDLE_GAP_S:  # longer: the model had no traffic (another's turn)
                wall += max(0.0, gap)
            if _hand_over(r, previous, gap):
                gaps += max(0.0, gap)
        previous = r
    calls = len(records)
    return {"calls": calls, "requests_per_call": sum(r["requests"] for r in records) / calls,
            "call_ms": 1000 * sum(r["return_s"] - r["start_s"] for r in records) / calls,
            "host_ms_per_call": 1000 * inside / calls, "handed_over_gap_ms": 1000 * gaps,
            "idle_while_waiting_share": (inside + gaps) / wall if wall > 0 else 0.0,
            "early_sends": sum(r.get("early_sends", 0) for r in records),
            "gap_us_per_request": gap_us_per_request(records),
            "early_send_ms": early_send_ms(records)}


def executor_s(batch) -> float:
    """A timeline batch's run on the executor (s): its recorded ``executor_s`` (0 where
    the executor raised), or its whole span in records from before the timeline carried
    it."""
    return batch[6] if len(batch) > 6 else batch[3] - batch[2]


BY_SIZE = (2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64)  # hand-over sizes the table compares
BY_SIZE_MIN_CALLS = 15


def by_size(records: list[dict]) -> dict[int, dict]:
    """Per call size (requests in the call), over the calls of that size: the mean call,
    its executor time, the time inside its batches around the executor (decisions,
    bookkeeping), the host time outside its batches (decoding, admission, answers), in
    ms, and batches per call. Calls of equal size compare two models without the
    difference in call sizes a load gives them."""
    cells: dict[int, list[tuple[float, float, float, int]]] = {}
    for r in records:
        if not r["batches"]:
            continue
        span = sum(b[3] - b[2] for b in r["batches"] if b[0])
        run = sum(executor_s(b) for b in r["batches"] if b[0])
        call = r["return_s"] - r["start_s"]
        cells.setdefault(r["requests"], []).append((call, run, span - run, len(r["batches"])))
    out = {}
    for n, rows in cells.items():
        if len(rows) >= BY_SIZE_MIN_CALLS:
            call, run, inside, batches = (float(np.mean(c)) for c in zip(*rows))
            out[n] = {"calls": len(rows), "call_ms": 1000 * call, "executor_ms": 1000 * run,
                      "in_batches_ms": 1000 * inside,
                      "outside_ms": 1000 * (call - run - inside), "batches": batches}
    return out


def _side_by_side(figures: dict[str, dict[int, dict]], sizes, header: str,
                  cells: Callable[[dict], str]) -> list[str]:
    """One row per call size in ``sizes`` every model has, then per model: ``header``'s
    columns after the size and the model, each row's ``cells(figure)``."""
    sizes = [n for n in sizes if all(n in f for f in figures.values())]
    columns = header.count("|") + 1
    lines = [f"| requests in the call | model | {header} |",
             "|---:|---|" + "---:|" * columns]
    for n in sizes:
        lines += [f"| {n} | {model} | {cells(f[n])} |" for model, f in figures.items()]
    return lines


def by_size_table(figures: dict[str, dict[int, dict]]) -> list[str]:
    """``by_size`` of each model, side by side at the sizes in ``BY_SIZE`` every model has."""
    return _side_by_side(
        figures, BY_SIZE, "calls | ms per call | executor (ms) | in batches, around the "
        "executor (ms) | outside batches (ms) | batches per call",
        lambda c: (f"{c['calls']} | {c['call_ms']:.2f} | {c['executor_ms']:.2f} | "
                   f"{c['in_batches_ms']:.2f} | {c['outside_ms']:.2f} | {c['batches']:.2f}"))


PHASE_SIZES = (1, 2, 4, 8, 16)  # call sizes the phase table compares


def phases(records: list[dict]) -> dict[int, dict]:
    """Per call size (in ``PHASE_SIZES``, with BY_SIZE_MIN_CALLS calls or more), the
    median host time (us) of each phase of a call outside the device's runs: before its
    first batch (an explicit call splits it at ``decoded_s``: its decoding and admission,
    then the decision up to the launch), inside its batches around the executor, and
    after its last batch (the answers built). Medians: a stall of the 2 shared cores
    does not tilt them."""
    cells: dict[int, dict[str, list[float]]] = {}
    for r in records:
        n = r["requests"]
        if n not in PHASE_SIZES or not r["batches"]:
            continue
        first, last = r["batches"][0], r["batches"][-1]
        c = cells.setdefault(n, {"decode": [], "decide": [], "before": [], "around": [],
                                 "after": []})
        c["before"].append(first[2] - r["start_s"])
        if r.get("decoded_s"):
            c["decode"].append(r["decoded_s"] - r["start_s"])
            c["decide"].append(first[2] - r["decoded_s"])
        c["around"].append(sum(b[3] - b[2] - executor_s(b) for b in r["batches"] if b[0]))
        c["after"].append(r["return_s"] - last[3])
    return {n: {k: (1e6 * float(np.median(v)) if v else None) for k, v in c.items()}
            | {"calls": len(c["before"])}
            for n, c in sorted(cells.items()) if len(c["before"]) >= BY_SIZE_MIN_CALLS}


def phases_table(figures: dict[str, dict[int, dict]]) -> list[str]:
    """``phases`` of each model, side by side at the sizes every model has."""
    return _side_by_side(
        figures, PHASE_SIZES, "calls | before the first batch (us) | of it: decoding, "
        "admission | of it: the decision | in batches, around the executor | after the "
        "last batch",
        lambda c: (f"{c['calls']} | {c['before']:.0f} | {fmt_num(c['decode'], '.0f')} | "
                   f"{fmt_num(c['decide'], '.0f')} | {c['around']:.0f} | {c['after']:.0f}"))


def call_kind(record: dict) -> str:
    """Which path a call took: native's one batch, intake hold's launch first, or a
    decided call by its batches (an explicit call whose batches all were refused: none)."""
    batches = record["batches"]
    if any(b[5] == "native" for b in batches):
        return "native"
    if record.get("launched_first"):
        return "launched first"
    ran = sum(1 for b in batches if b[0])
    return "decided, " + ("no batch" if not ran else "1 batch" if ran == 1
                          else f"{min(ran, 3)}{'+' if ran > 3 else ''} batches")


CPU_FIT_MIN_CALLS = 50  # a call kind is fitted with this many calls or more


def cpu_by_kind(records: list[dict]) -> dict[str, dict]:
    """The CPU of the ``execute()`` thread per call (``cpu_s``: records since the timeline
    carries it), by ``call_kind``: calls, requests a call, CPU per request, and a least
    squares line through (requests, CPU) of each call: what a call costs whatever its
    size (``fixed_us``) and what each request adds (``per_request_us``); None where the
    kind has fewer than CPU_FIT_MIN_CALLS calls or one size only. Calls of one model
    compare by kind, and the line says whether a gap is per call or per request."""
    cells: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if "cpu_s" in r and r["requests"]:
            cells.setdefault(call_kind(r), []).append((r["requests"], 1e6 * r["cpu_s"]))
    out = {}
    for kind, rows in sorted(cells.items()):
        sizes, cpu = (np.array(c, dtype=float) for c in zip(*rows))
        fitted = len(rows) >= CPU_FIT_MIN_CALLS and len(set(sizes)) > 1
        per_request, fixed = np.polyfit(sizes, cpu, 1) if fitted else (None, None)
        out[kind] = {"calls": len(rows), "requests_per_call": float(sizes.mean()),
                     "cpu_us_per_request": float(cpu.sum() / sizes.sum()),
                     "fixed_us": None if fixed is None else float(fixed),
                     "per_request_us": None if per_request is None else float(per_request)}
    return out


def cpu_table(figures: dict[str, dict[str, dict]]) -> list[str]:
    """``cpu_by_kind`` of each model, one row per model and call kind."""
    lines = ["| model | call kind | calls | requests per call | CPU per request (us) | "
             "fit: per call (us) | fit: per request (us) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for model, kinds in figures.items():
        lines += [f"| {model} | {kind} | {c['calls']} | {c['requests_per_call']:.1f} | "
                  f"{c['cpu_us_per_request']:.1f} | {fmt_num(c['fixed_us'], '.0f')} | "
                  f"{fmt_num(c['per_request_us'], '.1f')} |" for kind, c in kinds.items()]
    return lines


def _hand_over(record: dict, previous: dict, gap: float) -> bool:
    """Whether ``record``'s call carried requests that queued in Triton during the
    previous call. Native records no hand-over flag: a call that starts within the
    hand-over bound after the previous return counts as one, as the plugin judges it."""
    return bool(record.get("handed_over")) or 0 <= gap <= hand_over_s(record["requests"],
                                                                      previous["requests"])


GAP_FIT_MIN_CALLS = 10  # a hand-over size enters the gap's fit with this many calls or more


def gap_us_per_request(records: list[dict]) -> float | None:
    """What each request of a hand-over adds to the gap before its call (us): the slope of
    the gap's median, per hand-over size, against the size (weighted by the square root
    of the calls of that size; medians, so a pause of the collector does not tilt it).
    The gap is the server's and the stub's work between two calls: the responses of the
    one, the next one's requests and their input tensors. None with fewer than two sizes
    of GAP_FIT_MIN_CALLS calls each."""
    by_size: dict[int, list[float]] = {}
    previous = None
    for r in records:
        if previous is not None:
            gap = r["start_s"] - previous["return_s"]
            if 0 <= gap <= IDLE_GAP_S and _hand_over(r, previous, gap):
                by_size.setdefault(r["requests"], []).append(gap * 1e6)
        previous = r
    cells = [(n, float(np.median(g)), len(g)) for n, g in sorted(by_size.items())
             if len(g) >= GAP_FIT_MIN_CALLS]
    if len(cells) < 2:
        return None
    sizes, medians, weights = (np.array(c, dtype=float) for c in zip(*cells))
    return float(np.polyfit(sizes, medians, 1, w=np.sqrt(weights))[0])


def early_send_ms(records: list[dict]) -> float | None:
    """What one early send took (ms): in the calls that sent answers early, the time
    between their batches (where the sends happen, with the next batch's decision) over
    the answers sent. None without early sends."""
    spent, sent = 0.0, 0
    for r in records:
        if r.get("early_sends") and len(r["batches"]) > 1:
            b = r["batches"]
            spent += sum(max(0.0, b[k + 1][2] - b[k][3]) for k in range(len(b) - 1))
            sent += r["early_sends"]
    return 1000 * spent / sent if sent else None


def timeline_table(folder: str) -> list[str]:
    """One row per model timeline in ``folder``, then the calls of equal size side by
    side (``by_size``)."""
    lines = ["| model | calls | requests per call | ms per call | host ms per call (outside "
             "batches) | idle gap before hand-overs (ms, total) | device idle while "
             "requests wait (share of the wall time) | gap per handed-over request (us) | "
             "answers sent early | ms per early send |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".timeline.jsonl"):
            continue
        f = idle_while_waiting(read_timeline(os.path.join(folder, name)))
        if f:
            lines.append(f"| {name.split('.')[0]} | {f['calls']} | {f['requests_per_call']:.1f} "
                         f"| {f['call_ms']:.2f} | {f['host_ms_per_call']:.2f} | "
                         f"{f['handed_over_gap_ms']:.0f} | {f['idle_while_waiting_share']:.3f} "
                         f"| {fmt_num(f['gap_us_per_request'], '.0f')} | {f['early_sends']} | "
                         f"{fmt_num(f['early_send_ms'], '.2f')} |")
    records = {name.split('.')[0]: read_timeline(os.path.join(folder, name))
               for name in sorted(os.listdir(folder)) if name.endswith(".timeline.jsonl")}
    return lines + ["", *by_size_table({m: by_size(r) for m, r in records.items()}),
                    "", "Host time per call phase, medians (us):", "",
                    *phases_table({m: phases(r) for m, r in records.items()}),
                    "", "The execute() thread's CPU per call, by call kind:", "",
                    *cpu_table({m: cpu_by_kind(r) for m, r in records.items()})]
