"""``make bench``'s h200 block in the report: its targets (goodput, refusals, P50, peaks,
stub CPU, regressions of the emulated rows against the committed report) and its tables.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from . import segment_stats as B
from benchmarks.bench_pa import pa_markdown, pa_targets
from benchmarks.bench_rotation import rotation_markdown, rotation_targets
from benchmarks.bench_targets import (CPU_TARGET_US, H200_GOODPUT_TARGET, H200_P50_MARGIN_MS,
                                      OVERLOAD_TARGET, errors_cell, fmt_num, fmt_pct, fmt_ratio)

H200_PAST_KNEE_TARGET = 1.5  # x native between 1.0x and 1.3x of native's peak
H200_PAST_KNEE_LOADS = (1.0, 1.3)
H200_OVERLOAD = 2.0
PEAK_RATIO_TARGET = 1.0
HOST_BOUND_PEAK_TARGET = 0.9  # host-bound closed-loop peak vs native
REGRESSION_GOODPUT_TOL = 0.03  # a t4/a100 row is worse below 97 % of its committed goodput
REGRESSION_P99_TOL = 0.10  # ... or above 110 % of its committed P99
REFUSED = "UNAVAILABLE"  # the plugin's refusals (deadline infeasible, queue full)


def _stat(s: Any, key: str) -> Any:
    """A field of a SegmentStats or of its JSON form (a dict)."""
    return s.get(key) if isinstance(s, dict) else getattr(s, key, None)


def refusals(s: Any) -> int:
    """Requests the plugin refused (UNAVAILABLE); other server errors are not counted."""
    return int((_stat(s, "errors") or {}).get(REFUSED, 0))


def in_sla_rps(s: Any, measure_s: float) -> float:
    """Requests answered within their SLA per second of the measured schedule: explicit and
    native ran the same arrivals, so their ratio is the ratio of requests in SLA (no span
    stretched by a late last answer)."""
    return (_stat(s, "met") or 0) / measure_s


def h200_knee(run: dict, role: str) -> tuple[float | None, float | None]:
    """(knee, first failing load): the highest load of the run at which ``role`` keeps >= 99 %
    in SLA, every lower load too."""
    return B.knee([(r["load"], _stat(r["measured"][role], "attainment")) for r in run["rows"]])


def _peak(run_or_block: dict, role: str) -> float | None:
    p = (run_or_block.get("peaks") or {}).get(role) or {}
    return None if p.get("error") else p.get("throughput_rps")


def run_label(run: dict) -> str:
    """The profile an h200-block run measured (reports before the flat run: h200_minilm)."""
    return run.get("label", "h200_minilm EMULATED")


def h200_run_targets(run: dict, add: Callable[..., None]) -> None:
    """The real-device targets for one run of the h200 block (one time scale)."""
    ts = run["time_scale"]
    measure_s = run["measure_s"]
    scope = f"{run_label(run)}, time scale {ts:g}"
    rows = sorted(run["rows"], key=lambda r: r["load"])
    nk, nf = h200_knee(run, "native")
    knee_text = (f"native's knee {nk:g}x (next load {fmt_num(nf, '{:g}x')})" if nk is not None
                 else "native under 99 % in SLA at every load")
    upto = [r for r in rows if nk is not None and r["load"] <= nk + 1e-9]

    def met_ratio(r: dict) -> float:
        e, n = (_stat(r["measured"][k], "met") or 0 for k in ("explicit", "native"))
        return e / n if n else (math.inf if e else math.nan)

    if upto:
        worst = min(upto, key=met_ratio)
        v = met_ratio(worst)
        add("goodput vs native at every load up to native's knee", scope,
            f"{knee_text}; worst {worst['load']:g}x: {in_sla_rps(worst['measured']['explicit'], measure_s):.1f}"
            f" vs {in_sla_rps(worst['measured']['native'], measure_s):.1f} req/s in SLA", v,
            f">= {H200_GOODPUT_TARGET:g}x", not math.isnan(v) and v >= H200_GOODPUT_TARGET)

        def p50_gap(r: dict) -> float:
            e, n = (_stat(r["measured"][k], "p50_ms") for k in ("explicit", "native"))
            return (e - n) / ts if e is not None and n is not None else math.nan

        gaps = [(p50_gap(r), r) for r in upto if not math.isnan(p50_gap(r))]
        if gaps:
            gap, r = max(gaps, key=lambda t: t[0])
            e, n = (_stat(r["measured"][k], "p50_ms") for k in ("explicit", "native"))
            add("P50 above native at every load up to native's knee (at device speed)", scope,
                f"{knee_text}; worst {r['load']:g}x: {e / ts:.2f} vs {n / ts:.2f} ms "
                f"({e:.1f} vs {n:.1f} ms at time scale {ts:g}, / {ts:g})", gap,
                f"<= +{H200_P50_MARGIN_MS:g} ms", gap <= H200_P50_MARGIN_MS)
    else:
        add("goodput vs native at every load up to native's knee", scope,
            f"{knee_text}: no load to compare", None, f">= {H200_GOODPUT_TARGET:g}x", None)

    clean = [r for r in rows if _stat(r["measured"]["native"], "attainment") is not None
             and _stat(r["measured"]["native"], "attainment") >= B.KNEE_ATTAINMENT]
    if clean:
        refused = [(r["load"], refusals(r["measured"]["explicit"])) for r in clean]
        bad = [f"{load:g}x: {n}" for load, n in refused if n]
        total = sum(n for _, n in refused)
        clean_loads = ", ".join(f"{r['load']:g}x" for r in clean)
        add("refusals wherever native keeps >= 99 % in SLA", scope,
            f"native >= 99 % at {clean_loads}; explicit refused "
            f"{', '.join(bad) if bad else 'none'}", float(total), "0", total == 0)

    lo, hi = H200_PAST_KNEE_LOADS
    past = [r for r in rows if lo - 1e-9 <= r["load"] <= hi + 1e-9]
    if past:
        worst = min(past, key=met_ratio)
        v = met_ratio(worst)
        add(f"goodput vs native between {lo:g}x and {hi:g}x of native's peak", scope,
            "; ".join(f"{r['load']:g}x: {in_sla_rps(r['measured']['explicit'], measure_s):.1f} vs "
                      f"{in_sla_rps(r['measured']['native'], measure_s):.1f} req/s in SLA"
                      for r in past), v, f">= {H200_PAST_KNEE_TARGET:g}x",
            not math.isnan(v) and v >= H200_PAST_KNEE_TARGET)

    over = next((r for r in rows if abs(r["load"] - H200_OVERLOAD) < 1e-9), None)
    ek, _ = h200_knee(run, "explicit")
    if over is not None:
        knee_row = next((r for r in rows if ek is not None and r["load"] == ek), None)
        if knee_row is None:
            add(f"goodput at {H200_OVERLOAD:g}x vs the plugin's own knee goodput", scope,
                "explicit under 99 % in SLA at every load: no knee", None, ">= 90%", False)
        else:
            o = in_sla_rps(over["measured"]["explicit"], measure_s)
            k = in_sla_rps(knee_row["measured"]["explicit"], measure_s)
            v = B.ratio(o, k)
            add(f"goodput at {H200_OVERLOAD:g}x vs the plugin's own knee goodput", scope,
                f"explicit {o:.1f} at {H200_OVERLOAD:g}x vs {k:.1f} req/s at its knee "
                f"{ek:g}x", v, f">= {OVERLOAD_TARGET:.0%}",
                None if math.isnan(v) else v >= OVERLOAD_TARGET)

    _peak_target(f"closed-loop peak (concurrency {_peak_concurrency(run)}) vs native", scope,
                 run, PEAK_RATIO_TARGET, add)
    pa_targets(run, scope, add)

    rotation_targets(run, scope, add)
    cpu = h200_cpu_us(run)
    if cpu is not None:
        e, n, extra = cpu
        add("explicit stub CPU per request vs native (median over loads <= 1.0x)", scope,
            f"explicit {e:.0f} us, native {n:.0f} us per request (each stub's CPU over the "
            "whole segment, background work included, / requests answered)", extra,
            f"<= native + {CPU_TARGET_US:.0f} us", extra <= CPU_TARGET_US)


def _peak_concurrency(run: dict) -> Any:
    p = (run.get("peaks") or {}).get("explicit") or {}
    return p.get("concurrency", 64)


def _peak_target(target: str, scope: str, holder: dict, goal: float,
                 add: Callable[..., None], native_label: str = "") -> None:
    e, n = _peak(holder, "explicit"), _peak(holder, "native")
    errors = [f"{k}: {p['error']}" for k, p in (holder.get("peaks") or {}).items()
              if p and p.get("error")]
    v = B.ratio(e, n)
    add(target, scope, f"explicit {fmt_num(e, '{:.0f}')} vs native {fmt_num(n, '{:.0f}')} req/s"
        f"{native_label}" + (f" ({'; '.join(errors)})" if errors else ""), v, f">= {goal:g}x",
        None if math.isnan(v) else v >= goal)


def h200_cpu_us(run: dict, max_load: float = 1.0) -> tuple[float, float, float] | None:
    """Medians over the run's rows up to ``max_load`` of (explicit stub CPU per request,
    native's, their difference): each row's figure is its stub's CPU over the whole segment
    (warm-up included) / requests answered."""
    pairs = []
    for r in run["rows"]:
        if r["load"] > max_load + 1e-9:
            continue
        e = _stat(r["measured"]["explicit"], "stub_cpu_us_per_request")
        n = _stat(r["measured"]["native"], "stub_cpu_us_per_request")
        if e is not None and n is not None:
            pairs.append((e, n))
    if not pairs:
        return None
    med = statistics.median
    return med([p[0] for p in pairs]), med([p[1] for p in pairs]), med([a - b for a, b in pairs])


def ts1_peak(ts1: dict) -> dict | None:
    """The ts1 same-length closed loop as {'peaks': {'explicit', 'native'}} with the better
    native setting, and its label."""
    closed = ts1.get("closed_loop")
    if not closed:
        return None
    good = [e for e in closed["native"] if not e["peak"].get("error")]
    best = max(good, key=lambda e: e["peak"]["throughput_rps"]) if good else (
        closed["native"][0] if closed["native"] else None)
    return {"peaks": {"explicit": closed["explicit"], "native": best["peak"] if best else {}},
            "native_label": best["setting"].label if best else "-"}


def compact_emulated(blocks: list) -> list[dict]:
    """The t4/a100 grid's explicit and native rows as plain figures (from this run's
    SegmentStats or a bench.json): profile, cost mode, load, arrival, goodput, P99,
    attainment."""
    out = []
    for block in blocks:
        for c in block.get("cells", []):
            for role in ("explicit", "native"):
                s = c["measured"][role]
                out.append({"profile": block["profile"], "cost_mode": block["cost_mode"],
                            "load": c["load"], "arrival": c["arrival"], "role": role,
                            "goodput_rps": _stat(s, "goodput_rps"),
                            "p99_ms": _stat(s, "p99_ms"),
                            "attainment": _stat(s, "attainment")})
    return out


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def worse_rows(current: list[dict], baseline: list[dict], role: str = "explicit",
               goodput_tol: float = REGRESSION_GOODPUT_TOL,
               p99_tol: float = REGRESSION_P99_TOL) -> tuple[int, list[str]]:
    """(rows compared, a line per row of ``role`` that is worse than the committed one):
    goodput below (1 - goodput_tol) x, or P99 above (1 + p99_tol) x its committed figure
    (a P99 is compared only where both runs answered). Rows match on profile, cost mode,
    load and arrival process."""
    key = lambda r: (r["profile"], r["cost_mode"], r["load"], r["arrival"])  # noqa: E731
    old = {key(r): r for r in baseline if r["role"] == role}
    compared, worse = 0, []
    for r in current:
        if r["role"] != role or key(r) not in old:
            continue
        compared += 1
        o = old[key(r)]
        why = []
        if _finite(o["goodput_rps"]) and (not _finite(r["goodput_rps"]) or
                                          r["goodput_rps"] < (1 - goodput_tol) * o["goodput_rps"]):
            why.append(f"goodput {fmt_num(r['goodput_rps'])} vs {fmt_num(o['goodput_rps'])}")
        if _finite(o["p99_ms"]) and _finite(r["p99_ms"]) and \
                r["p99_ms"] > (1 + p99_tol) * o["p99_ms"]:
            why.append(f"P99 {r['p99_ms']:.0f} vs {o['p99_ms']:.0f} ms")
        if why:
            worse.append(f"{r['arrival']} {r['load']:.0%}: {', '.join(why)}")
    return compared, worse


def regression_targets(results: dict, add: Callable[..., None]) -> None:
    """Each t4/a100 block's explicit rows against the last committed report."""
    if "baseline" not in results:  # a run from before the comparison existed
        return
    base = results["baseline"] or {}
    goal = (f"no row worse (goodput >= {1 - REGRESSION_GOODPUT_TOL:.0%}, P99 <= "
            f"{1 + REGRESSION_P99_TOL:.0%} of committed)")
    target = "t4/a100 rows no worse than the last committed report"
    if base.get("error") or "emulated" not in base:
        add(target, "emulated blocks", f"no committed report to compare "
            f"({base.get('error', 'not read')})", None, goal, None)
        return
    blocks = results.get("emulated", [])
    if not blocks:
        add(target, "emulated blocks", "the emulated block was not run", None, goal, None)
        return
    note = (f"vs {base['source']} ({base.get('commit', '?')}, {base.get('started', '?')}"
            f"{', a QUICK run' if base.get('quick') else ''}{'; this run is QUICK' if results.get('quick') else ''})")
    for block in blocks:
        scope = f"{block['profile']} {block['cost_mode']}"
        compared, worse = worse_rows(compact_emulated([block]), base["emulated"])
        if not compared:
            add(target, scope, f"no matching committed rows {note}", None, goal, None)
            continue
        add(target, scope, f"{compared} explicit rows {note}; worse: "
            f"{'; '.join(worse) if worse else 'none'}", float(len(worse)), goal, not worse)


def h200_targets(results: dict, add: Callable[..., None]) -> None:
    h200 = results.get("h200")
    if h200:
        for run in h200["runs"]:
            h200_run_targets(run, add)
        host = h200.get("host_bound")
        if host:
            _peak_target("closed-loop peak vs native, device nearly free (host-bound)",
                         f"h200_minilm EMULATED, time scale {host['time_scale']:g}", host,
                         HOST_BOUND_PEAK_TARGET, add)
    ts1 = results.get("ts1")
    peak = ts1_peak(ts1) if ts1 else None
    if peak:
        _peak_target("closed-loop peak vs native on the same-length rung",
                     "t4 padded, time scale 1, explicit as shipped", peak,
                     PEAK_RATIO_TARGET, add,
                     f" ({peak['native_label']})")
    regression_targets(results, add)


def _peak_cells(p: dict | None) -> str:
    if not p:
        return "- | - | - | - | -"
    if p.get("error"):
        return f"failed: {p['error']} | - | - | - | -"
    return (f"{p['throughput_rps']:.0f} | {fmt_num(p.get('p50_ms'), '{:.1f}')} | {fmt_num(p.get('p99_ms'), '{:.1f}')}"
            f" | {fmt_num(p.get('stub_cpu_us_per_request'), '{:.0f}')} | {fmt_num(p.get('requests'), '{:.0f}')}")


PEAK_HEADER = ["| model | throughput (req/s) | P50 (ms) | P99 (ms) | stub CPU/req (us) | "
               "requests |", "|---|---:|---:|---:|---:|---:|"]


def h200_markdown(h200: dict) -> list[str]:
    lines = ["### h200_minilm: EMULATED device (emulating MiniLM costs MEASURED on an NVIDIA "
             "H200), on this 2-core CPU machine", "",
             f"Profile: {h200.get('profile_description', '')}. The device is NOT a GPU: it "
             "sleeps the measured cost table (flat ~3.9 ms up to ~4k tokens, then linear) "
             "times the time scale. Native: Triton's dynamic batcher, max_batch_size "
             f"{h200['runs'][0]['native_max_batch_size'] if h200['runs'] else 64}, one "
             "instance. Explicit: as shipped, `intake: "
             f"{(h200['runs'][0].get('intake') if h200['runs'] else None) or 'gather'}` "
             "(Triton's batcher in front hands the plugin what arrived while the device was "
             "busy, in one execute() call; the plugin forms every batch). "
             "Closed-loop peaks: perf_analyzer over gRPC, the explicit model with "
             "control.infeasible_policy=serve_late (perf_analyzer stops at the first refused "
             "request), stub CPU per request over the whole perf_analyzer run. Open-loop rows: "
             "the load generator (same 2 cores), Poisson, long-tailed lengths (16-512, median "
             "64), SLA classes 50/100/200 ms x the time scale; explicit and native alternate "
             "on the same arrivals; goodput = requests in SLA per second of the measured "
             "schedule; refusals = UNAVAILABLE answers; send lag = how late the load generator "
             "sent (P99).", ""]
    for run in h200["runs"]:
        ts = run["time_scale"]
        bound = "the device bounds the rate" if ts > 1 else "the host path bounds the rate"
        lines += [f"#### {run_label(run)} at time scale {ts:g} ({bound}; 2-core machine)",
                  "", f"SLA classes {' / '.join(f'{s:g}' for s in run['sla_classes_ms'])} ms; "
                  f"simulator capacity {fmt_num(run['capacity_rps'], '{:.1f}')} req/s; measured "
                  f"{run['measure_s']:g} s per row after {run['warmup_s']:g} s warm-up, "
                  f"client timeout {run['client_timeout_s']:.2f} s.", ""]
        ref = run.get("sweep_reference_peak") or {}
        lines += [f"Native sweep at {run['sweep_rate_rps']:.0f} req/s (70 % of native "
                  f"{ref['setting'].label if ref.get('setting') else '?'}'s closed-loop "
                  f"peak, {_peak_text(ref.get('peak'))}); chosen: "
                  f"**{run['native_setting'].label}** (best goodput).", "",
                  "| native setting | goodput | % in SLA | P50 (ms) | P99 (ms) | errors | "
                  "send lag p99 (ms) |", "|---|---:|---:|---:|---:|---|---:|"]
        for e in run["sweep"]:
            m = e["measured"]
            lines.append(f"| {e['setting'].label} | {fmt_num(m.goodput_rps)} | {fmt_pct(m.attainment)}"
                         f" | {fmt_num(m.p50_ms)} | {fmt_num(m.p99_ms)} | {errors_cell(m)} | "
                         f"{fmt_num(m.send_lag_p99_ms, '{:.2f}')} |")
        lines += ["", f"Closed-loop peaks (concurrency {_peak_concurrency(run)}):", "",
                  *PEAK_HEADER]
        for role in ("explicit", "native"):
            lines.append(f"| {role} | {_peak_cells(run['peaks'].get(role))} |")
        lines += ["", *rotation_markdown(run)] if run.get("peak_rounds") else []
        nk, _ = h200_knee(run, "native")
        ek, _ = h200_knee(run, "explicit")
        reference = run.get("load_reference", "native's closed-loop peak")
        lines += ["", f"Open loop, load = fraction of {reference} "
                  f"({run['native_peak_rps']:.0f} req/s). Knee (>= 99 % in SLA, every lower "
                  f"load too): explicit {fmt_num(ek, '{:g}x')}, native {fmt_num(nk, '{:g}x')}. P50 at "
                  f"device speed = P50 / {ts:g}.", "",
                  "| load | rate (req/s) | model | goodput (req/s in SLA) | % in SLA | P50 (ms) | "
                  "P50 at device speed (ms) | P99 (ms) | refusals | other errors | "
                  "stub CPU/req (us) | send lag p99 (ms) | ratio |",
                  "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
        for r in run["rows"]:
            e_met = _stat(r["measured"]["explicit"], "met") or 0
            n_met = _stat(r["measured"]["native"], "met") or 0
            ratio = e_met / n_met if n_met else (math.inf if e_met else math.nan)
            for role in ("explicit", "native"):
                m = r["measured"][role]
                first = role == "explicit"
                others = ", ".join(f"{k} {v}" for k, v in sorted(m.errors.items())
                                   if k != REFUSED) or "0"
                load_txt = f"{r['load']:g}x" if first else ""
                lines.append(
                    f"| {load_txt} | "
                    f"{fmt_num(r['rate_rps'], '{:.0f}') if first else ''} | {role} | "
                    f"{in_sla_rps(m, run['measure_s']):.1f} | {fmt_pct(m.attainment)} | "
                    f"{fmt_num(m.p50_ms)} | {fmt_num(m.p50_ms / ts if _finite(m.p50_ms) else None, '{:.2f}')} | "
                    f"{fmt_num(m.p99_ms)} | {refusals(m)} | {others} | "
                    f"{fmt_num(m.stub_cpu_us_per_request, '{:.0f}')} | "
                    f"{fmt_num(m.send_lag_p99_ms, '{:.2f}')} | {fmt_ratio(ratio) if first else ''} |")
        lines += ["", *pa_markdown(run)]
    host = h200.get("host_bound")
    if host:
        lines += [f"#### Host-bound: EMULATED h200_minilm at time scale {host['time_scale']:g} "
                  "(device nearly free; 2-core machine)", "",
                  f"Closed-loop peaks, native {host['native_setting'].label} (the time-scale-1 "
                  f"run's choice), SLA classes {' / '.join(f'{s:g}' for s in host['sla_classes_ms'])}"
                  " ms for explicit (device speed, not scaled):", "", *PEAK_HEADER]
        for role in ("explicit", "native"):
            lines.append(f"| {role} | {_peak_cells(host['peaks'].get(role))} |")
        lines += ["", *rotation_markdown(host)]
    return lines


def _peak_text(p: dict | None) -> str:
    if not p:
        return "-"
    if p.get("error"):
        return f"failed: {p['error']}"
    return f"{p['throughput_rps']:.0f} req/s"
