"""The ``make bench`` report: targets first, then every table the targets come from.

``write(results, out_dir)`` takes what ``scripts/bench.py`` collected (SegmentStats and
NativeSetting objects in plain dicts) and writes ``report.md``, ``bench.json`` and the
plots. ``targets(results)`` is the verdict table on its own (unit-tested).
"""

from __future__ import annotations

import json
import math
import os

from . import segment_stats as B
from benchmarks.bench_idle import idle_markdown, idle_targets
from benchmarks.bench_report_h200 import h200_markdown, h200_targets
from benchmarks.bench_targets import (decision_target, errors_cell, fmt_num, knee_targets,
                                      minilm_target, nml_goodput_target, overload_target, fmt_pct,
                                      seventy_percent_targets, ts1_targets, verdict_text,
                                      fmt_ratio, block_knee, poisson_ladder)
from server_ops.intake_config import HOLD_MAX_HAND_OVER
from triton_backend.intake import DEFAULT_INTAKE


def targets(results: dict) -> list[dict]:
    """One row per target and block: what, measured, ratio, target, verdict."""
    rows = []

    def add(target: str, scope: str, measured: str, value: float | None, goal: str,
            ok: bool | None):
        rows.append({"target": target, "scope": scope, "measured": measured, "value": value,
                     "goal": goal, "verdict": verdict_text(ok)})

    for block in results.get("emulated", []):
        scope = f"{block['profile']} {block['cost_mode']}"
        nml_goodput_target(block, scope, add)
        knee_targets(block, scope, add)
        overload_target(block, scope, add)
        seventy_percent_targets(block, scope, add)
    ts1 = results.get("ts1")
    if ts1:
        ts1_targets(results, ts1, add)
    decision_target(results, add)
    minilm_target(results, add)
    h200_targets(results, add)
    idle_targets(results, add)
    return rows


def _per_class(s: B.SegmentStats, slas) -> str:
    """P50/P99 of each SLA class, tightest first: ``12/40 · 20/95 · ...`` (ms)."""
    parts = []
    for c in slas:
        p50, p99, _ = s.per_class.get(c, (math.nan,) * 3)
        parts.append(f"{fmt_num(p50, '{:.0f}')}/{fmt_num(p99, '{:.0f}')}")
    return " · ".join(parts)


def _stats_cells(s: B.SegmentStats, slas) -> list[str]:
    cells = [fmt_num(s.goodput_rps), fmt_pct(s.attainment)]
    cells.append(_per_class(s, slas))
    cells += [fmt_num(s.p50_ms), fmt_num(s.fluctuation, "{:.3f}"), fmt_num(s.mean_busy, '{:.2f}')]
    return cells


def block_markdown(block: dict) -> list[str]:
    ts, slas = block["time_scale"], block["sla_classes_ms"]
    lines = [f"### {block['profile']}, {block['cost_mode']} mode (EMULATED, time scale {ts:g})",
             "",
             f"Capacity {block['capacity_rps']:.1f} req/s at time scale {ts:g} "
             f"({block['capacity_device_rps']:,.0f} req/s at device speed). SLA classes "
             f"{' / '.join(f'{s:g}' for s in slas)} ms (= {' / '.join(f'{s / ts:g}' for s in slas)}"
             f" ms x {ts:g}).", "",
             f"**Native sweep** at {B_LOAD_70} Poisson (measured; sim = simulator on the same "
             f"arrivals). Native in the grid below: **{block['native_setting'].label}** "
             f"(best measured goodput).", "",
             "| native setting | goodput | attainment | P50/P99 per class (ms) | P50 (ms) | "
             "fluctuation | busy | errors | sim goodput | sim attainment |",
             "|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for e in block["sweep"]:
        m, s = e["measured"], e["sim"]
        lines.append("| " + " | ".join([e["setting"].label, *_stats_cells(m, slas), errors_cell(m),
                                        fmt_num(s.goodput_rps), fmt_pct(s.attainment)]) + " |")
    lines += ["", "**Grid** (explicit vs native on the same arrivals; goodput in req/s; "
              "P50/P99 per class (tightest first) over answered requests; sim = simulator's prediction; "
              "sim-best = the simulator's best native setting for that cell's goodput "
              "over the whole sweep):", "",
              "| load | arrivals | rate | model | goodput | attainment | P50/P99 per class (ms) | "
              "P50 (ms) | fluctuation | busy | errors | padding | stub CPU/req (us) | "
              "send lag p99 (ms) | sim goodput | sim attainment | sim P50/P99 per class | "
              "ratio (meas.) | ratio (sim) | sim-best native |",
              "|---:|---|---:|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for c in block["cells"]:
        ratio_m = B.ratio(c["measured"]["explicit"].goodput_rps,
                          c["measured"]["native"].goodput_rps)
        ratio_s = B.ratio(c["sim"]["explicit"].goodput_rps, c["sim"]["native"].goodput_rps)
        best = c.get("sim_best_native", {}).get("goodput")
        for role in ("explicit", "native"):
            m, s = c["measured"][role], c["sim"][role]
            sim_p99 = _per_class(s, slas)
            first = role == "explicit"
            lines.append("| " + " | ".join([
                f"{c['load']:.0%}" if first else "", c["arrival"] if first else "",
                fmt_num(c["rate_rps"]) if first else "", role, *_stats_cells(m, slas), errors_cell(m),
                fmt_pct(m.padding_waste) if m.padding_waste is not None else
                f"{fmt_pct(s.padding_waste)} (sim)",
                fmt_num(m.stub_cpu_us_per_request, "{:.0f}"), fmt_num(m.send_lag_p99_ms, '{:.2f}'),
                fmt_num(s.goodput_rps), fmt_pct(s.attainment), sim_p99,
                fmt_ratio(ratio_m) if first else "", fmt_ratio(ratio_s) if first else "",
                (f"{best['setting'].label}: {best['sim'].goodput_rps:.1f}" if best and first
                 else "")]) + " |")
    ek, ef, _ = block_knee(block, "explicit")
    nk, nf, _ = block_knee(block, "native")
    lines += ["", f"Knee (highest Poisson load with >= 99 % attainment, all lower rungs too): "
              f"explicit **{fmt_pct(ek)}** (next rung {fmt_pct(ef)}), native **{fmt_pct(nk)}** "
              f"(next rung {fmt_pct(nf)}) of capacity.", ""]
    return lines


B_LOAD_70 = "70 %"


def ts1_markdown(ts1: dict) -> list[str]:
    ll = ts1["lowload"]
    lines = ["### Low load and overhead (t4, padded, EMULATED at time scale 1: device speed)",
             "", f"Low load: Poisson at 20 % of capacity ({ll['rate_rps']:.0f} req/s), SLA "
             f"classes 50 / 100 / 200 ms.", "",
             "| model | P50 (ms) | P99 (ms) | attainment | sim P50 | send lag p99 (ms) |",
             "|---|---:|---:|---:|---:|---:|"]
    e = ll["explicit"]
    lines.append(f"| explicit | {e.p50_ms:.2f} | {e.p99_ms:.2f} | {fmt_pct(e.attainment)} | "
                 f"{ll['explicit_sim'].p50_ms:.2f} | {e.send_lag_p99_ms:.2f} |")
    for n in ll["native"]:
        m = n["measured"]
        lines.append(f"| native {n['setting'].label} | {m.p50_ms:.2f} | {m.p99_ms:.2f} | "
                     f"{fmt_pct(m.attainment)} | {n['sim'].p50_ms:.2f} | {m.send_lag_p99_ms:.2f} |")
    lines += ["", "Overhead: same length (64 tokens), no SLA input, evenly spaced requests; a "
              "rung is sustained when >= 99.9 % are answered OK at >= 97 % of the offered "
              "rate with P99 <= 50 ms. A model stops climbing at its first failed rung.", "",
              "| rate (req/s) | model | OK / sent | P50 (ms) | P99 (ms) | stub CPU/req (us) | "
              "server CPU/req (us) | send lag p99 (ms) | sustained |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in ts1["overhead"]:
        for key, s in row.items():
            if key == "rate_rps":
                continue
            lines.append(f"| {row['rate_rps']} | {key} | {s.ok}/{s.sent} | {fmt_num(s.p50_ms, '{:.2f}')}"
                         f" | {fmt_num(s.p99_ms, '{:.2f}')} | {fmt_num(s.stub_cpu_us_per_request, '{:.0f}')}"
                         f" | {fmt_num(s.server_cpu_us_per_request, '{:.0f}')} | "
                         f"{fmt_num(s.send_lag_p99_ms, '{:.2f}')} | "
                         f"{'yes' if B.sustainable(s, row['rate_rps'], 50.0) else 'no'} |")
    return lines + [""]


def minilm_markdown(mini: dict) -> list[str]:
    slas = mini["sla_classes_ms"]
    lines = ["### MiniLM on this CPU (real compute, all-MiniLM-L6-v2, one torch thread)", "",
             f"Poisson, lengths 16-256 (log-normal, median 48), SLA classes "
             f"{' / '.join(f'{s:g}' for s in slas)} ms. minilm_native: Triton's dynamic "
             "batcher as shipped (ragged INPUT_IDS, padded to the batch's longest inside the "
             "model, max_queue_delay 2000 us).", "",
             "| rate (req/s) | model | goodput | attainment | P50/P99 per class (ms) | P50 (ms) | "
             "errors | send lag p99 (ms) |", "|---:|---|---:|---:|---|---:|---|---:|"]
    for row in mini["rungs"]:
        for role in ("explicit", "native"):
            if role not in row:
                continue
            s = row[role]
            lines.append(f"| {row['rate_rps']} | {role} | {s.goodput_rps:.1f} | "
                         f"{fmt_pct(s.attainment)} | {_per_class(s, slas)} | {fmt_num(s.p50_ms)} | {errors_cell(s)} | {fmt_num(s.send_lag_p99_ms, '{:.2f}')} |")
    return lines + [""]


def decision_markdown(dec: dict) -> list[str]:
    lines = ["### Scheduling decision at queue depth 1000 (microbenchmark)", "",
             "| profile | mode | median (us) | p90 (us) | p99 (us) |", "|---|---|---:|---:|---:|"]
    for m in dec["results"]:
        lines.append(f"| {m['profile']} | {m['mode']} | {m['median_us']:.0f} | "
                     f"{m['p90_us']:.0f} | {m['p99_us']:.0f} |")
    lines += ["", "Details and the profile of the hot path: "
              "[decision_microbench.md](decision_microbench.md).", ""]
    return lines


def plot(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    blocks = results.get("emulated", [])
    if not blocks:
        return
    fig, axes = plt.subplots(2, len(blocks), figsize=(4.2 * len(blocks), 7), squeeze=False)
    for j, block in enumerate(blocks):
        for role, color in (("explicit", "tab:blue"), ("native", "tab:red")):
            ladder = poisson_ladder(block, role)
            loads = [load for load, _ in ladder]
            sims = {c["load"]: c["sim"][role] for c in block["cells"]
                    if c["arrival"] == "poisson" and c["load"] <= 1.0}
            axes[0][j].plot(loads, [s.goodput_rps for _, s in ladder], "o-", color=color,
                            label=f"{role} measured")
            axes[0][j].plot(loads, [sims[x].goodput_rps for x in loads], "x--", color=color,
                            alpha=0.6, label=f"{role} simulated")
            axes[1][j].plot(loads, [s.attainment for _, s in ladder], "o-", color=color)
            axes[1][j].plot(loads, [sims[x].attainment for x in loads], "x--", color=color,
                            alpha=0.6)
        cap = block["capacity_rps"]
        axes[0][j].plot([0, 1], [0, cap], ":", color="grey", label="offered")
        axes[0][j].set_title(f"{block['profile']} {block['cost_mode']} (EMULATED, x{block['time_scale']:g})")
        axes[0][j].set_ylabel("goodput (req/s)")
        axes[1][j].set_ylabel("SLA attainment")
        axes[1][j].set_xlabel("load (fraction of capacity), Poisson")
        axes[1][j].axhline(0.99, color="grey", lw=0.8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: dict, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "bench.json"), "w", encoding="utf-8") as fh:
        json.dump(B.plain(results), fh, indent=1, allow_nan=False)
    plot(results, os.path.join(out_dir, "goodput.png"))
    rows = targets(results)
    lines = ["# Benchmark: explicit control vs Triton's dynamic batcher", "",
             f"Produced by `{results['command']}` on {results['started']} "
             f"({results['machine']}; wall time {results['wall_s'] / 60:.1f} min"
             f"{', QUICK run: short segments, thin grid' if results.get('quick') else ''}). "
             "The emulated device is an **EMULATION** of GPU batch cost (it sleeps for the "
             "profile's cost model times the time scale); MiniLM is real compute on this "
             "CPU. One tritonserver 2.51, one model instance each; explicit and native "
             "alternate on the same arrivals (same seed) in the same run. Open-loop gRPC load "
             "generator on the same 2 cores as the server; its send lag is in every table."
             + intake_line(results),
             "", "## Targets", "",
             "| target | scope | measured | value | goal | verdict |",
             "|---|---|---|---:|---|---|"]
    for r in rows:
        v = r["value"]
        lines.append(f"| {r['target']} | {r['scope']} | {r['measured']} | "
                     f"{fmt_num(v, '{:.2f}') if isinstance(v, float) else fmt_num(v)} | {r['goal']} | "
                     f"{r['verdict']} |")
    lines += ["", "Capacity (100 % load) is `simulation.simulator.capacity_rps`: "
              f"{results['capacity_sample']:,} lengths of the mix, sorted and cut into full "
              "batches (max_batch_size and max_batch_tokens of the profile), requests / total "
              "device time: the device's throughput with no padding waste. The time scale "
              f"slows the emulated device so capacity sits near "
              f"{results['target_capacity_rps']:g} req/s, which this machine can drive; SLA "
              "classes are scaled alike, so ratios and attainment carry over to device speed, "
              "absolute milliseconds do not.", "",
              "![goodput and attainment vs load](goodput.png)", "", "## Tables", ""]
    for block in results.get("emulated", []):
        lines += block_markdown(block)
    if results.get("ts1"):
        lines += ts1_markdown(results["ts1"])
    if results.get("minilm"):
        lines += minilm_markdown(results["minilm"])
    if results.get("decision"):
        lines += decision_markdown(results["decision"])
    if results.get("h200"):
        lines += h200_markdown(results["h200"])
    if results.get("idle"):
        lines += idle_markdown(results["idle"])
    lines += [f"Segments: {results.get('segments', 0)}; requests lost (no answer at all): "
              f"{results.get('lost', 0)}.", ""]
    lines += server_crash_lines(results.get("server_crashes") or [])
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))


def server_crash_lines(crashes: list[dict]) -> list[str]:
    """The segments during which tritonserver died (each was run again on a restarted
    server; its requests are in no figure above)."""
    if not crashes:
        return []
    lines = [f"**tritonserver died {len(crashes)} time(s) during this run** and was restarted "
             "with every model as it was; each segment below was run again, and only the "
             "rerun is in the figures. Triton 2.51's gRPC front end can crash when clients "
             "cancel at a high rate (results/tritonserver_sigsegv.md).", "",
             "| at | model | role | offered (req/s) | exit code |", "|---|---|---|---:|---:|"]
    lines += [f"| {c['at']} | {c['model']} | {c['role']} | {c['rate_rps']:.0f} | "
              f"{c['exit_code']} |" for c in crashes]
    return lines + [""]


def intake_line(results: dict) -> str:
    """The plugin's intake in this run, when it is not the shipped default."""
    intake = results.get("explicit_intake")
    hand_over = results.get("explicit_hand_over")
    if hand_over:
        return (f" **Explicit here is a VARIANT: `intake: {intake or DEFAULT_INTAKE}` with a "
                f"hand-over of {hand_over} requests** (Triton's `max_batch_size` in front of "
                "the plugin) in every block (the shipped default hands over "
                f"{HOLD_MAX_HAND_OVER}).")
    if not intake or intake == DEFAULT_INTAKE:
        return ""
    return (f" **Explicit here is a VARIANT: `intake: {intake}`** in every block (the shipped "
            f"default is `intake: {DEFAULT_INTAKE}`).")
