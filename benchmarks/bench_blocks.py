"""``make bench``'s emulated, time-scale-1, MiniLM and decision blocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from benchmarks import segment_stats as B
from benchmarks.bench_server import Bench, peak_text, explicit_peak, peak_window_ms, sim_segment
from benchmarks.bench_setup import (CLIENT_TIMEOUT_SLAS, EXPLICIT, GRID_LOADS, LADDER_LOADS,
                                    LOWLOAD, LOWLOAD_NATIVE_DELAYS_US, MINI_EXPLICIT, MINI_LENGTHS,
                                    MINI_NATIVE, MINI_RATES, MINI_SLA_SCALE, NATIVE,
                                    NATIVE_DELAYS_US, NATIVE_PREFERRED, OVERHEAD_NATIVE,
                                    OVERHEAD_P99_BOUND_MS, OVERHEAD_RATES, OVERHEAD_SEQ_LEN,
                                    OVERLOAD, PEAK_CONCURRENCY, QUICK_TIMING, REPO_ROOT, SEED,
                                    SLA_CLASSES_MS, SWEEP_LOAD, TIMING, arrivals_for,
                                    bench_time_scale, capacity_at_device_speed, emulated_params,
                                    log, profile, write_input_data)
from benchmarks.loadgen import fixed_rate


def run_emulated_block(bench: Bench, name: str, cost_mode: str, quick: bool) -> dict:
    ts = bench_time_scale(name)
    prof = profile(name, cost_mode, ts)
    cap = capacity_at_device_speed(name, cost_mode) / ts
    slas = tuple(c * ts for c in SLA_CLASSES_MS)
    timeout_s = CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0
    tm = QUICK_TIMING if quick else TIMING
    warm = tm.warmup_s
    params = emulated_params(name, cost_mode, ts)
    block = {"profile": name, "cost_mode": cost_mode, "time_scale": ts, "capacity_rps": cap,
             "capacity_device_rps": cap * ts, "sla_classes_ms": slas, "sweep": [], "cells": [],
             "warmup_s": warm, "measure_s": tm.measure_s, "fluctuation_s": tm.fluctuation_s}
    log(f"block {name}/{cost_mode}: time scale {ts:g}, capacity {cap:.1f} req/s")
    bench.configure(EXPLICIT, params)

    # 1. the native sweep at 70 %
    settings = B.native_sweep(NATIVE_DELAYS_US, NATIVE_PREFERRED)
    if quick:
        settings = settings[:2]
    dur = tm.fluctuation_s
    arrivals = arrivals_for("poisson", SWEEP_LOAD * cap, warm + dur, SEED + 70, slas)
    for setting in settings:
        bench.configure(NATIVE, params, setting)
        measured = bench.segment("native", NATIVE, arrivals, dur, False, timeout_s, warm,
                                 busy=True)
        sim = sim_segment("native", prof, arrivals, dur, warm, setting)
        block["sweep"].append({"setting": setting, "measured": measured, "sim": sim})
        log(f"  sweep {setting.label}: goodput {measured.goodput_rps:.1f} "
            f"attainment {measured.attainment:.1%} (sim {sim.goodput_rps:.1f})")
    chosen = B.best_by(((e["setting"], e["measured"]) for e in block["sweep"]), "goodput")
    best_native = chosen[0] if chosen else settings[0]
    block["native_setting"] = best_native
    bench.configure(NATIVE, params, best_native)
    log(f"  native for the grid: {best_native.label}")

    # 2. the grid, explicit and native alternating on the same arrivals
    cells = [(load, "poisson") for load in LADDER_LOADS]
    cells += [(load, kind) for load in GRID_LOADS for kind in ("poisson", "bursty")]
    cells += [(OVERLOAD, "poisson")]
    if quick:
        cells = [(0.2, "poisson"), (0.7, "poisson"), (0.7, "bursty"), (OVERLOAD, "poisson")]
    for i, (load, kind) in enumerate(cells):
        fluct = load == SWEEP_LOAD
        dur = tm.fluctuation_s if fluct else tm.measure_s
        seed = SEED + int(round(load * 100)) + (1000 if kind == "bursty" else 0)
        arrivals = arrivals_for(kind, load * cap, warm + dur, seed, slas)
        order = ("explicit", "native") if i % 2 == 0 else ("native", "explicit")
        measured = {role: bench.segment(role, EXPLICIT if role == "explicit" else NATIVE,
                                        arrivals, dur, role == "explicit", timeout_s, warm,
                                        busy=fluct)
                    for role in order}
        sims = {"explicit": sim_segment("explicit", prof, arrivals, dur, warm),
                "native": sim_segment("native", prof, arrivals, dur, warm, best_native)}
        sim_best = {}
        if not quick:  # the simulator's best native for this cell, over the whole sweep
            sweep_sims = [(s, sim_segment("native", prof, arrivals, dur, warm, s))
                          for s in settings]
            found = B.best_by(sweep_sims, "goodput")
            if found:
                sim_best["goodput"] = {"setting": found[0], "sim": found[1]}
        block["cells"].append({"load": load, "arrival": kind, "rate_rps": load * cap,
                               "measured": measured, "sim": sims, "sim_best_native": sim_best})
        e, n = measured["explicit"], measured["native"]
        log(f"  {kind} {load:.0%}: explicit {e.goodput_rps:.1f} ({e.attainment:.1%}) "
            f"native {n.goodput_rps:.1f} ({n.attainment:.1%}) | sim "
            f"{sims['explicit'].goodput_rps:.1f} ({sims['explicit'].attainment:.1%}) / "
            f"{sims['native'].goodput_rps:.1f}; lag p99 {e.send_lag_p99_ms:.1f}/"
            f"{n.send_lag_p99_ms:.1f} ms")
    return block


def run_ts1_block(bench: Bench, quick: bool) -> dict:
    """t4, padded, time scale 1: low-load P50 and the overhead ramp."""
    name, mode = "t4", "padded"
    prof = profile(name, mode, 1.0)
    cap = capacity_at_device_speed(name, mode)
    params = emulated_params(name, mode, 1.0)
    timeout_s = 2.0
    tm = QUICK_TIMING if quick else TIMING
    warm = tm.warmup_s
    bench.configure(EXPLICIT, params)
    out = {"profile": name, "cost_mode": mode, "capacity_rps": cap, "lowload": {},
           "overhead": []}
    # low load
    dur = tm.fluctuation_s
    arrivals = arrivals_for("poisson", LOWLOAD * cap, warm + dur, SEED + 20, SLA_CLASSES_MS)
    ll = out["lowload"]
    ll["rate_rps"] = LOWLOAD * cap
    ll["explicit"] = bench.segment("explicit", EXPLICIT, arrivals, dur, True, timeout_s, warm)
    ll["explicit_sim"] = sim_segment("explicit", prof, arrivals, dur, warm)
    ll["native"] = []
    for delay in LOWLOAD_NATIVE_DELAYS_US:
        setting = B.NativeSetting(delay)
        bench.configure(NATIVE, params, setting)
        ll["native"].append({
            "setting": setting,
            "measured": bench.segment("native", NATIVE, arrivals, dur, False, timeout_s, warm),
            "sim": sim_segment("native", prof, arrivals, dur, warm, setting)})
    log(f"low load {LOWLOAD:.0%} ({ll['rate_rps']:.0f} req/s): explicit P50 "
        f"{ll['explicit'].p50_ms:.2f} ms; native "
        + ", ".join(f"{e['setting'].max_queue_delay_us} us {e['measured'].p50_ms:.2f} ms"
                    for e in ll["native"]))

    # overhead: same length, no SLA, fixed rates
    dur = tm.measure_s
    rates = OVERHEAD_RATES[:2] if quick else OVERHEAD_RATES
    alive = {"explicit": True, **{s.label: True for s in OVERHEAD_NATIVE}}
    for rate in rates:
        arrivals = fixed_rate(rate, warm + dur, OVERHEAD_SEQ_LEN)
        row = {"rate_rps": rate}
        if alive["explicit"]:
            stats = bench.segment("explicit", EXPLICIT, arrivals, dur, False, timeout_s, warm)
            row["explicit"] = stats
            alive["explicit"] = B.sustainable(stats, rate, OVERHEAD_P99_BOUND_MS)
        for setting in OVERHEAD_NATIVE:
            if not alive[setting.label]:
                continue
            bench.configure(NATIVE, params, setting)
            stats = bench.segment("native", NATIVE, arrivals, dur, False, timeout_s, warm)
            row[setting.label] = stats
            alive[setting.label] = B.sustainable(stats, rate, OVERHEAD_P99_BOUND_MS)
        out["overhead"].append(row)
        log(f"overhead {rate} req/s: " + ", ".join(
            f"{k}: p99 {v.p99_ms:.1f} ms ok {v.ok}/{v.sent} lag p99 {v.send_lag_p99_ms:.1f}"
            for k, v in row.items() if k != "rate_rps"))
        if not any(alive.values()):
            break

    # closed-loop peak on the same-length traffic: explicit and both natives
    peak_ms = peak_window_ms(quick, 1.0)
    with tempfile.TemporaryDirectory(prefix="bench-ts1-") as tmp:
        data = write_input_data(os.path.join(tmp, "same_length.json"),
                                [(OVERHEAD_SEQ_LEN, None)] * 16)
        closed = {"concurrency": PEAK_CONCURRENCY, "seq_len": OVERHEAD_SEQ_LEN,
                  "explicit": explicit_peak(bench, params, data, peak_ms),
                  "native": []}
        for setting in OVERHEAD_NATIVE:
            bench.configure(NATIVE, params, setting)
            closed["native"].append({"setting": setting,
                                     "peak": bench.closed_loop_peak(NATIVE, data, peak_ms)})
    out["closed_loop"] = closed
    log(f"closed loop (same length, concurrency {PEAK_CONCURRENCY}): explicit "
        f"{peak_text(closed['explicit'])}; " + ", ".join(
            f"native {e['setting'].label} {peak_text(e['peak'])}" for e in closed["native"]))
    return out


def run_minilm_block(bench: Bench, quick: bool) -> dict:
    slas = tuple(c * MINI_SLA_SCALE for c in SLA_CLASSES_MS)
    timeout_s = CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0
    warm, dur = (0.5, 2.0) if quick else (1.5, 6.0)
    rates = MINI_RATES[:2] if quick else MINI_RATES
    out = {"sla_classes_ms": slas, "rungs": [], "warmup_s": warm, "measure_s": dur}
    alive = {"explicit": True, "native": True}
    for i, rate in enumerate(rates):
        arrivals = arrivals_for("poisson", rate, warm + dur, SEED + rate, slas, MINI_LENGTHS)
        row = {"rate_rps": rate}
        order = ("explicit", "native") if i % 2 == 0 else ("native", "explicit")
        for role in order:
            if not alive[role]:
                continue
            model = MINI_EXPLICIT if role == "explicit" else MINI_NATIVE
            stats = bench.segment(role, model, arrivals, dur, role == "explicit", timeout_s,
                                  warm)
            row[role] = stats
            alive[role] = stats.attainment >= B.KNEE_ATTAINMENT
        out["rungs"].append(row)
        log(f"minilm {rate} req/s: " + ", ".join(
            f"{k} {v.attainment:.1%} (p99 {v.p99_ms:.0f} ms)" for k, v in row.items()
            if k != "rate_rps"))
        if not any(alive.values()):
            break
    return out


def run_decision_bench(quick: bool, out_dir: str) -> dict | None:
    """``scripts/bench_decision.py`` (its exit status says pass/miss; both are reported)."""
    script = os.path.join(REPO_ROOT, "scripts", "bench_decision.py")
    if not os.path.exists(script):
        return None
    path = os.path.join(out_dir, "decision.json")
    cmd = [sys.executable, script, "--json", path, "--profile",
           "--out", os.path.join(out_dir, "decision_microbench.md")]
    if quick:
        cmd += ["--calls", "200", "--repeats", "1"]
    subprocess.run(cmd, check=False, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
