"""``make bench``'s h200 block: h200_minilm and the flat profile at time scale 1, loads as
fractions of native's closed-loop peak, and the host-bound run. At time scale 1 the
closed-loop peaks and the stub CPU at 0.8x run in rotated rounds (``bench_rotation.py``).
"""

from __future__ import annotations

import os
import tempfile

from benchmarks import segment_stats as B
from benchmarks.bench_pa import pa_rows
from benchmarks.bench_rotation import (CPU_LOAD, ROTATION_ROUNDS, cpu_rounds, median_round,
                                       rotated_peaks)
from benchmarks.bench_server import Bench, peak_text, peak_window_ms
from benchmarks.bench_setup import (CLIENT_TIMEOUT_SLAS, EXPLICIT, FLAT_LABEL, FLAT_PARAMS,
                                    FLAT_PROFILE, H200, H200_LOADS, H200_MODE,
                                    H200_NATIVE_MAX_BATCH, H200_QUICK_LOADS, H200_SCALED_TIMING,
                                    H200_SWEEP_LOAD, HOST_BOUND_TIME_SCALE, NATIVE,
                                    NATIVE_DELAYS_US, NATIVE_PREFERRED, QUICK_TIMING, SEED,
                                    SLA_CLASSES_MS, TIMING, Timing, arrivals_for, bench_time_scale,
                                    capacity_at_device_speed, emulated_params, log, mix_entries,
                                    profile, write_input_data)


def run_h200_run(bench: Bench, time_scale: float, quick: bool, tmp: str,
                 rows_timing: Timing, prof_name: str = H200, extra_params: dict | None = None,
                 label: str = "") -> dict:
    """One run of the h200 block at ``time_scale``: native sweep, closed-loop peaks, then
    the open-loop rows at fractions of native's closed-loop peak. ``prof_name`` and
    ``extra_params`` (profile overrides, to both models) give another profile's run,
    ``label`` its name in the report."""
    ts = float(time_scale)
    params = {**emulated_params(prof_name, H200_MODE, ts), **(extra_params or {})}
    params_e = params  # the run's intake: Bench.configure sets a variant's
    slas = tuple(c * ts for c in SLA_CLASSES_MS)
    timeout_s = CLIENT_TIMEOUT_SLAS * max(slas) / 1000.0
    warm = rows_timing.warmup_s
    peak_ms = peak_window_ms(quick, ts)
    cap = (capacity_at_device_speed(H200, H200_MODE) / ts if prof_name == H200 and not extra_params
           else float("nan"))  # the simulator's capacity is the h200 profile's only
    tag = f"{prof_name}{'_flat' if extra_params else ''}_ts{ts:g}"
    data_e = write_input_data(os.path.join(tmp, f"h200_{tag}_sla.json"), mix_entries(slas))
    data_n = write_input_data(os.path.join(tmp, f"h200_{tag}.json"), mix_entries(None))
    run = {"profile": prof_name, "label": label or f"{prof_name} EMULATED",
           "intake": bench.explicit_intake, "cost_mode": H200_MODE, "time_scale": ts,
           "sla_classes_ms": slas,
           "capacity_rps": cap, "native_max_batch_size": H200_NATIVE_MAX_BATCH,
           "warmup_s": warm, "measure_s": rows_timing.measure_s,
           "sweep_s": rows_timing.fluctuation_s, "client_timeout_s": timeout_s,
           "peak_measure_ms": peak_ms, "sweep": [], "rows": []}
    log(f"block h200, {run['label']} at time scale {ts:g}: simulator capacity {cap:.1f} req/s, SLA classes "
        f"{'/'.join(f'{x:g}' for x in slas)} ms")
    bench.configure(EXPLICIT, params_e)

    # 1. native at delay 0: its closed-loop peak sets the sweep's rate
    settings = B.native_sweep(NATIVE_DELAYS_US, NATIVE_PREFERRED)
    if quick:
        settings = settings[:2]
    bench.configure(NATIVE, params, settings[0], H200_NATIVE_MAX_BATCH)
    pre = bench.closed_loop_peak(NATIVE, data_n, peak_ms)
    run["sweep_reference_peak"] = {"setting": settings[0], "peak": pre}
    ref = pre.get("throughput_rps") or cap
    run["sweep_rate_rps"] = H200_SWEEP_LOAD * ref
    log(f"  native {settings[0].label} closed loop: {peak_text(pre)}; sweep at "
        f"{run['sweep_rate_rps']:.0f} req/s")

    # 2. the sweep
    dur = rows_timing.fluctuation_s
    arrivals = arrivals_for("poisson", run["sweep_rate_rps"], warm + dur, SEED + 70, slas)
    for setting in settings:
        bench.configure(NATIVE, params, setting, H200_NATIVE_MAX_BATCH)
        measured = bench.segment("native", NATIVE, arrivals, dur, False, timeout_s, warm)
        run["sweep"].append({"setting": setting, "measured": measured})
        log(f"  sweep {setting.label}: goodput {measured.goodput_rps:.1f} "
            f"attainment {measured.attainment:.1%}")
    chosen = B.best_by(((e["setting"], e["measured"]) for e in run["sweep"]), "goodput")
    best = chosen[0] if chosen else settings[0]
    run["native_setting"] = best

    # 3. closed-loop peaks: the best native, then explicit; at device speed in rotated
    # rounds (bench_rotation.py), the median round standing for them
    rotate = ts == 1.0 and not quick
    rounds = rotated_peaks(bench, params, best, H200_NATIVE_MAX_BATCH, params_e,
                           {"explicit": data_e, "native": data_n}, peak_ms,
                           ROTATION_ROUNDS if rotate else 1)
    peaks = run["peaks"] = median_round(rounds)
    if rotate:
        run["peak_rounds"] = rounds
    native_peak = peaks["native"].get("throughput_rps")
    if native_peak:
        run["load_reference"] = "native's closed-loop peak"
    else:  # said in the report: the rows are then fractions of something else
        native_peak = ref
        run["load_reference"] = ("native's closed-loop peak FAILED; loads are fractions of "
                                 + ("native's peak at delay 0" if pre.get("throughput_rps")
                                    else "the simulator's capacity"))
    run["native_peak_rps"] = native_peak
    log(f"  native {best.label}; closed loop: native {peak_text(peaks['native'])}, "
        f"explicit {peak_text(peaks['explicit'])}")

    # 4. open loop at fractions of native's peak, alternating on the same arrivals
    dur = rows_timing.measure_s
    loads = H200_QUICK_LOADS if quick else H200_LOADS
    for i, load in enumerate(loads):
        rate = load * native_peak
        arrivals = arrivals_for("poisson", rate, warm + dur,
                                SEED + 5000 + int(round(load * 100)), slas)
        order = ("explicit", "native") if i % 2 == 0 else ("native", "explicit")

        def pair(roles: tuple[str, str]) -> dict:
            """Both models on this row's arrivals, in the order ``roles``."""
            return {role: bench.segment(role, EXPLICIT if role == "explicit" else NATIVE,
                                        arrivals, dur, role == "explicit", timeout_s, warm)
                    for role in roles}

        measured = pair(order)
        run["rows"].append({"load": load, "rate_rps": rate, "measured": measured})
        if rotate and abs(load - CPU_LOAD) < 1e-9:  # the stub CPU row: more rounds
            run["cpu_rounds"] = cpu_rounds(measured, [
                pair(order[::-1] if k % 2 else order) for k in range(1, ROTATION_ROUNDS)])
        e, n = measured["explicit"], measured["native"]
        log(f"  {load:.1f}x ({rate:.0f} req/s): explicit {e.met / dur:.1f} in SLA/s "
            f"({e.attainment:.1%}, P50 {e.p50_ms:.1f} ms, refused "
            f"{e.errors.get('UNAVAILABLE', 0)}) native {n.met / dur:.1f} ({n.attainment:.1%}, "
            f"P50 {n.p50_ms:.1f} ms); lag p99 {e.send_lag_p99_ms:.1f}/"
            f"{n.send_lag_p99_ms:.1f} ms")

    # 5. at device speed, the same loads from perf_analyzer (benchmarks/bench_pa.py)
    if ts == 1.0:
        run["perf_analyzer"] = pa_rows(bench, {"explicit": (EXPLICIT, data_e),
                                               "native": (NATIVE, data_n)},
                                       native_peak, tmp, tag, quick, log)
    return run


def run_h200_block(bench: Bench, quick: bool) -> dict:
    """The h200 block: the h200_minilm EMULATION time-scaled and at time scale 1, then
    host-bound (time scale 0.01) closed-loop peaks."""
    out = {"profile": H200, "cost_mode": H200_MODE, "runs": [],
           "profile_description": profile(H200).description}
    with tempfile.TemporaryDirectory(prefix="bench-h200-") as tmp:
        for ts in (bench_time_scale(H200), 1.0):
            tm = QUICK_TIMING if quick else H200_SCALED_TIMING if ts > 1 else TIMING
            out["runs"].append(run_h200_run(bench, ts, quick, tmp, tm,
                                            label="h200_minilm EMULATED"))
        out["runs"].append(run_h200_run(bench, 1.0, quick, tmp,
                                        QUICK_TIMING if quick else TIMING, FLAT_PROFILE,
                                        FLAT_PARAMS, FLAT_LABEL))
        # host-bound: the device nearly free; the native tuned at time scale 1; SLAs at
        # device speed (x0.01 would make every request infeasible)
        ts = HOST_BOUND_TIME_SCALE
        params = emulated_params(H200, H200_MODE, ts)
        params_e = params  # the run's intake: Bench.configure sets a variant's
        setting = out["runs"][1]["native_setting"]  # h200_minilm at time scale 1
        peak_ms = peak_window_ms(quick, ts)
        data_e = write_input_data(os.path.join(tmp, "h200_host_sla.json"),
                                  mix_entries(SLA_CLASSES_MS))
        data_n = write_input_data(os.path.join(tmp, "h200_host.json"), mix_entries(None))
        rounds = rotated_peaks(bench, params, setting, H200_NATIVE_MAX_BATCH, params_e,
                               {"explicit": data_e, "native": data_n}, peak_ms,
                               1 if quick else ROTATION_ROUNDS)
        host = {"time_scale": ts, "native_setting": setting, "sla_classes_ms": SLA_CLASSES_MS,
                "peak_measure_ms": peak_ms, "peaks": median_round(rounds)}
        if len(rounds) > 1:
            host["peak_rounds"] = rounds
        out["host_bound"] = host
        log(f"host-bound (time scale {ts:g}) closed loop: native "
            f"{peak_text(host['peaks']['native'])}, explicit "
            f"{peak_text(host['peaks']['explicit'])}")
    return out
