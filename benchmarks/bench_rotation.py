"""Rotated rounds for the h200 block's host-path figures: the closed-loop peaks (time scale
1 and host-bound) and the stub's CPU per request at 0.8x of native's peak.

Measured once each, one model after the other, these read the moment as much as the code:
on this shared 2-core host the same row of the same code moved by up to 0.4x between
runs (results/bench_h200_b0dcbc6/). Here each is measured in ``ROTATION_ROUNDS`` rounds,
each model first in turn, and judged by the median of the rounds' explicit / native
ratios: a slow spell during one round moves one ratio, not the verdict. The round whose
throughput ratio is the median stands for the peaks in the tables and the older targets.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from benchmarks.bench_setup import EXPLICIT, NATIVE
from benchmarks.bench_targets import fmt_num
from operator_tools.benchmark_mode import POLICY_KEY, SERVE_LATE

ROTATION_ROUNDS = 3
CPU_RATIO_TARGET = 1.25  # explicit's stub CPU per request at most 1.25x native's (issue 29)
CPU_LOAD = 0.8  # the open-loop row whose stub CPU is measured in rounds
ROLES = ("explicit", "native")


def rotated_peaks(bench, native_params: dict, setting, max_batch: int, explicit_params: dict,
                  data: dict[str, str], measure_ms: int, rounds: int) -> list[dict]:
    """``rounds`` rounds of closed-loop peaks, ``{"native": peak, "explicit": peak}`` each,
    native first in the first round and in turn after. Native runs ``setting``; explicit
    runs ``control.infeasible_policy=serve_late`` (perf_analyzer stops at the first
    refused request), its config restored after. ``data``: each role's input data."""
    bench.configure(NATIVE, native_params, setting, max_batch)
    bench.configure(EXPLICIT, {**explicit_params, POLICY_KEY: SERVE_LATE})
    models = {"explicit": EXPLICIT, "native": NATIVE}
    try:
        return [{role: bench.closed_loop_peak(models[role], data[role], measure_ms)
                 for role in (ROLES[::-1] if i % 2 == 0 else ROLES)} for i in range(rounds)]
    finally:
        bench.configure(EXPLICIT, explicit_params)


def _value(measured: Any, key: str) -> float | None:
    """A figure of a peak (a dict), of a segment (SegmentStats or its JSON form), or the
    figure itself (``cpu_rounds``' plain numbers); None where it failed or is missing."""
    if isinstance(measured, (int, float)):
        v = measured
    elif isinstance(measured, dict):
        if measured.get("error"):
            return None
        v = measured.get(key)
    else:
        v = getattr(measured, key, None)
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def _indexed_ratios(rounds: list[dict], key: str) -> list[tuple[float, int]]:
    """(explicit / native ratio of ``key``, the round's index) for each round with both
    figures, in round order."""
    out = []
    for i, r in enumerate(rounds):
        e, n = _value(r.get("explicit"), key), _value(r.get("native"), key)
        if e is not None and n:
            out.append((e / n, i))
    return out


def round_ratios(rounds: list[dict], key: str) -> list[float]:
    """Each round's explicit / native ratio of ``key``, rounds with a failed or missing
    figure left out."""
    return [ratio for ratio, _ in _indexed_ratios(rounds, key)]


def median_round(rounds: list[dict], key: str = "throughput_rps") -> dict:
    """The round whose ratio of ``key`` is the median (the lower middle of an even count);
    the first round where no round has both figures."""
    ratios = sorted(_indexed_ratios(rounds, key))
    if not ratios:
        return rounds[0] if rounds else {}
    return rounds[ratios[(len(ratios) - 1) // 2][1]]


def cpu_rounds(first: dict, more: list[dict]) -> list[dict]:
    """The CPU row's rounds as plain figures (``{"explicit": us, "native": us}``): the
    row's own segments, then ``more`` pairs of segments on the same arrivals."""
    return [{role: _value(pair[role], "stub_cpu_us_per_request") for role in ROLES}
            for pair in [first, *more]]


def rotation_targets(run: dict, scope: str, add: Callable[..., None]) -> None:
    """The stub CPU targets of a run measured in rounds (at 0.8x and at the closed-loop
    peak): the median of the rounds' ratios at most ``CPU_RATIO_TARGET``."""
    for label, rounds in ((f"at {CPU_LOAD:g}x, open loop", run.get("cpu_rounds")),
                          ("at the closed-loop peak", run.get("peak_rounds"))):
        ratios = round_ratios(rounds or [], "stub_cpu_us_per_request")
        if not ratios:
            continue
        v = statistics.median(ratios)
        add(f"explicit stub CPU per request vs native {label} (median of rotated rounds)",
            scope, "rounds: " + ", ".join(f"{r:.2f}x" for r in ratios), v,
            f"<= {CPU_RATIO_TARGET:g}x", v <= CPU_RATIO_TARGET)


def rotation_markdown(holder: dict) -> list[str]:
    """A run's (or the host-bound run's) rounds, one line each: the peaks' throughput,
    stub CPU and requests a call, and the CPU row's, explicit against native."""
    lines = []
    for i, r in enumerate(holder.get("peak_rounds") or [], 1):
        e, n = r.get("explicit") or {}, r.get("native") or {}
        lines.append(
            f"- peak round {i}: explicit {fmt_num(_value(e, 'throughput_rps'), '{:.0f}')} vs "
            f"native {fmt_num(_value(n, 'throughput_rps'), '{:.0f}')} req/s, stub CPU "
            f"{fmt_num(_value(e, 'stub_cpu_us_per_request'), '{:.0f}')} vs "
            f"{fmt_num(_value(n, 'stub_cpu_us_per_request'), '{:.0f}')} us a request, "
            f"{fmt_num(_value(e, 'requests_per_call'), '{:.1f}')} vs "
            f"{fmt_num(_value(n, 'requests_per_call'), '{:.1f}')} requests a call")
    for i, r in enumerate(holder.get("cpu_rounds") or [], 1):
        lines.append(f"- {CPU_LOAD:g}x round {i}: stub CPU "
                     f"{fmt_num(r.get('explicit'), '{:.0f}')} vs "
                     f"{fmt_num(r.get('native'), '{:.0f}')} us a request")
    if lines:
        lines = ["Rotated rounds (each model first in turn; the verdicts read the median of "
                 "the rounds' ratios, the tables the median round's peaks):", "", *lines, ""]
    return lines
