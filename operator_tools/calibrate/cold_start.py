"""Cold start: explicit control off, a sweep, the boundaries into a profile, and a
control-effect baseline; and the design's conservative start (``calibrate reset``).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import tempfile
from typing import Any, Mapping, Sequence

import click

from .. import live
from ..live import LoadRefused, LoadRun, PluginSnapshot, Series
from .. import perf_analyzer
from ..perf_analyzer import failure_reason, load_sweep
from ..profile_editor import write_profile
from scheduler_core.profile import HardwareProfile, ProfileError
from scheduler_core.profile_files import load_profile
from .boundaries import (Calibration, RatePoint, THRESHOLD_KEYS, find_boundaries, summarize_rate,
                         zone_of)
from .common import (CalibrateDeps, DEFAULT_INPUT, DEFAULT_SWEEP, SAMPLE_INTERVAL_S, command_line,
                     describe_emulation, profile_dir, progress, resolve_sla_scale, show_path,
                     parse_rates)
from .tables import crossing_table, plot_curve, reset_parameters, sweep_table, threshold_table
from ..output import echo_for, emit_json
from ..report import fmt_num


def reset_profile(opts: Mapping[str, Any]) -> None:
    try:
        before, profile = reset_parameters(opts["profile_path"])
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{opts['profile_path']}: scheduler.alpha {before['alpha']:g} -> "
               f"{profile.scheduler.alpha:g}, scheduler.beta {before['beta']:g} -> "
               f"{profile.scheduler.beta:g} (the design's conservative start; validated)")


def sweep_settings(opts: Mapping[str, Any]) -> dict[str, Any]:
    """Rates, window length, input data and arrival distribution: the sweep file's
    (``perf_analyzer.load_sweep``), each overridden by its command-line option."""
    settings: dict[str, Any] = {"measurement_ms": 1000, "input_data": DEFAULT_INPUT,
                                "distribution": "poisson", "max_trials": 3}
    sweep_file = opts["sweep_file"] or (DEFAULT_SWEEP if not opts["rates"] and
                                        os.path.exists(DEFAULT_SWEEP) else None)
    if sweep_file:
        try:
            sweep = load_sweep(sweep_file)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        settings.update(rates=sorted(set(sweep.request_rates_rps)),
                        measurement_ms=int(round(sweep.run_duration_s * 1000)),
                        input_data=sweep.input_data, distribution=sweep.request_distribution,
                        max_trials=sweep.max_trials, sweep_file=sweep_file)
    if opts["rates"]:
        settings["rates"] = parse_rates(opts["rates"])
    if opts["measurement_ms"]:
        settings["measurement_ms"] = opts["measurement_ms"]
    if opts["input_data"]:
        settings["input_data"] = opts["input_data"]
    if opts["request_distribution"]:
        settings["distribution"] = opts["request_distribution"]
    if "rates" not in settings and not (opts["step"] and opts["step_rate"]):
        raise click.UsageError("give --rates (e.g. --rates 10,20,40) or --sweep FILE")
    return settings


def _base_profile(opts, config, snap: PluginSnapshot | None) -> tuple[str, HardwareProfile]:
    path = opts["base_profile"]
    if not path:
        # The metrics name the profile actually chosen (the environment variable wins over
        # the parameter) unless a reload left two profile_info series behind.
        name = (snap.profile if snap else None) or live.parameter(config, "hardware_profile")
        if not name:
            raise click.ClickException(
                "cannot tell which profile the model runs (no profile_info metric, no "
                "hardware_profile parameter): give --base-profile")
        path = os.path.join(profile_dir(config, opts["model"], opts["model_repository"]),
                            f"{name}.yaml")
    try:
        return path, load_profile(path)
    except ProfileError as exc:
        raise click.ClickException(f"{exc} (give --base-profile or --model-repository)") from None


def measure_rates(deps: CalibrateDeps, url: str, model: str, metrics_url: str, input_data: str,
             rate: float, settings: Mapping[str, Any], protocol: str
             ) -> tuple[RatePoint, LoadRun | None, Series]:
    with deps.sampler(metrics_url, model, SAMPLE_INTERVAL_S) as sampler:
        try:
            run = deps.run_load(url, model, input_data, rate, settings["measurement_ms"],
                                protocol, settings["distribution"], settings["max_trials"])
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            run = None
            error = failure_reason(str(exc))
    if run is None:
        return RatePoint(rate=rate, error=error), None, sampler.series
    return summarize_rate(rate, run, sampler.series), run, sampler.series


def read_config(deps: CalibrateDeps, url: str, model: str):
    """(the model's control handle, its current config); ClickException when unreadable."""
    try:
        control = deps.model_control(url, model)
        original = control.config()
    except Exception as exc:  # noqa: BLE001 - any client failure ends here, said plainly
        raise click.ClickException(f"cannot read the config of model '{model}' at {url}: {exc}")
    return control, original


def run_cold_start(ctx, deps: CalibrateDeps, opts, metrics_url: str, settings) -> None:
    url, model = opts["url"], opts["model"]
    out_path = os.path.abspath(opts["out_path"])
    out_dir = os.path.dirname(out_path)
    plot_path = opts["plot_path"] or os.path.join(out_dir, "load_latency.png")
    report_path = opts["report_path"] or os.path.join(out_dir, "calibrate.md")
    baseline_path = opts["baseline_path"] or os.path.join(out_dir, "baseline.json")
    control, original = read_config(deps, url, model)
    try:
        snap = deps.snapshot(metrics_url, model)
    except (OSError, ValueError) as exc:
        snap = None
        click.echo(f"warning: metrics page {metrics_url} unreadable ({exc}); queue depth and "
                   "utilisation will be missing", err=True)
    base_path, base = _base_profile(opts, original, snap)
    emulation_note, time_scale = describe_emulation(original, base)
    sla_scale = resolve_sla_scale(opts["sla_scale"], time_scale)
    overrides = sorted(k for k in (original.get("parameters") or {}) if k.startswith("control."))
    original_enabled = live.parameter(original, "control.enabled")
    original_state = (original_enabled if original_enabled is not None
                      else f"{str(base.control.enabled).lower()} (profile)")

    with tempfile.TemporaryDirectory() as tmp:
        input_data = perf_analyzer.scaled_input_data(settings["input_data"], sla_scale, tmp)
        points, control_line, restore_line = _sweep_with_control_off(
            deps, opts, metrics_url, settings, input_data, control, original, original_state)
        if not any(p.ok for p in points):
            raise click.ClickException("every perf_analyzer run failed: " +
                                       "; ".join(f"{p.rate:g}: {p.error}" for p in points))
        calibration = find_boundaries(points, base.control)
        stamp = datetime.date.today().isoformat()
        comment = (f"zone thresholds calibrated {stamp} by `explicit-batching calibrate` "
                   f"(model {model}, control off)")
        profile = write_profile(base_path, out_path,
                                {"control": {k: calibration.thresholds[k] for k in THRESHOLD_KEYS}},
                                comment=comment)
        title = (f"{model}: load-latency curve, explicit control off"
                 + (f" (EMULATED device, time scale {time_scale:g})" if emulation_note else ""))
        plot_curve(points, calibration, plot_path, title)

        baseline_line = "baseline: skipped (--no-baseline)"
        if not opts["no_baseline"]:
            baseline_line = _record_baseline(deps, opts, metrics_url, input_data, settings,
                                             points, calibration, baseline_path, profile,
                                             original_state, sla_scale)

    lines = _cold_start_header(ctx, model, emulation_note, sla_scale, control_line,
                               restore_line, settings, base_path, base)
    lines += _cold_start_results(points, calibration, base, out_path, profile, overrides,
                                 plot_path, baseline_line)
    text = "\n".join(lines) + "\n"
    with open(report_path, "w", encoding="utf-8") as fh:
        fh.write(text)
    echo_for(opts.get("as_json", False))(text)
    click.echo("wrote " + ", ".join(show_path(p) for p in (out_path, plot_path, report_path))
               + ("" if opts["no_baseline"] else f", {show_path(baseline_path)}"), err=True)
    if opts.get("as_json"):
        emit_json({"kind": "calibrate_cold_start", "model": model, "sla_scale": sla_scale,
                   "points": points, "calibration": calibration, "profile": out_path,
                   "plot": plot_path, "report": report_path,
                   "baseline": None if opts["no_baseline"] else baseline_path})


def _sweep_with_control_off(deps: CalibrateDeps, opts, metrics_url: str, settings,
                            input_data: str, control, original, original_state: str
                            ) -> tuple[list[RatePoint], str, str]:
    """One measured point per rate with explicit control switched off by a reload (as is
    when the server refuses it), the original config restored after: (points, what was
    done to control, how it was restored)."""
    url, model = opts["url"], opts["model"]
    points: list[RatePoint] = []
    reloaded = False
    try:
        try:
            control.load(live.with_parameters(original, {"control.enabled": "false"}))
            reloaded = True
            control_line = ("explicit control OFF during the sweep (model reloaded with "
                            "parameter control.enabled=false)")
        except LoadRefused as exc:
            control_line = (f"the server refused to reload the model ({exc}); start it with "
                            "--model-control-mode=explicit to switch control off. Measured "
                            f"AS IS, control.enabled={original_state}")
            click.echo(f"warning: {control_line}", err=True)
        for rate in progress(deps, settings["rates"], "calibrate sweep"):
            point, _, _ = measure_rates(deps, url, model, metrics_url, input_data, rate,
                                   settings, opts["protocol"])
            points.append(point)
    finally:
        if reloaded:
            try:
                control.load(original)
                restore_line = f"control.enabled restored to {original_state}"
            except LoadRefused as exc:
                restore_line = (f"RESTORING THE ORIGINAL CONFIG FAILED ({exc}): the model "
                                "still runs with control.enabled=false")
                click.echo(f"error: {restore_line}", err=True)
        else:
            restore_line = "the model's config was not changed"
    return points, control_line, restore_line


def _cold_start_header(ctx, model: str, emulation_note: str, sla_scale: float,
                       control_line: str, restore_line: str, settings,
                       base_path: str, base: HardwareProfile) -> list[str]:
    """The report's command, title and how the sweep was measured."""
    lines = ["```", f"$ {command_line(ctx)}", "```", "",
             f"# Cold-start calibration of `{model}`", ""]
    if emulation_note:
        lines += [f"**{emulation_note}.** SLAs of the input scaled x{sla_scale:g}.", ""]
    lines += [f"* {control_line}; {restore_line}.",
              f"* perf_analyzer --async --request-rate-range per rate "
              f"({settings['distribution']} arrivals), {settings['max_trials']} windows x "
              f"{settings['measurement_ms']} ms, input {show_path(settings['input_data'])}"
              + (f" (sweep file {show_path(settings['sweep_file'])})"
                 if settings.get("sweep_file") else "") + ".",
              f"* queue depth and utilisation: `explicit_batching_queue_depth` / "
              f"`_utilization_ratio` sampled every {SAMPLE_INTERVAL_S:g} s during each run; "
              "P99 CV: coefficient of variation of the per-second P99s of each run.",
              f"* base profile {show_path(base_path)} ({base.name})."]
    return lines


def _cold_start_results(points: Sequence[RatePoint], calibration: Calibration,
                        base: HardwareProfile, out_path: str, profile: HardwareProfile,
                        overrides: Sequence[str], plot_path: str, baseline_line: str
                        ) -> list[str]:
    """The report's sweep table, zone boundaries, profile written, notes and files."""
    sorted_points = sorted(points, key=lambda p: p.rate)
    lines = ["", sweep_table(sorted_points, calibration), "", "## Zone boundaries", "",
             crossing_table(calibration), ""]
    lines += _boundary_lines(calibration)
    lines += ["", "## Profile", "", threshold_table(base.control, calibration), "",
              f"Written to `{show_path(out_path)}` (profile `{profile.name}`, validated by load_profile). "
              f"Load it with model-config parameter hardware_profile={profile.name} after copying "
              "it into the model's profiles folder."]
    if overrides:
        lines.append(f"**Note:** the model config overrides {', '.join(overrides)}: a model-config "
                     "parameter wins over the profile.")
    for note in calibration.notes:
        lines.append(f"* note: {note}")
    lines += ["", f"Plot: `{show_path(plot_path)}`.", f"{baseline_line}"]
    return lines


def _boundary_lines(calibration: Calibration) -> list[str]:
    out = []
    for label, b in (("no-man's land", calibration.nml), ("danger zone", calibration.danger)):
        if b is None:
            out.append(f"* {label}: not located in this sweep.")
        else:
            out.append(f"* {label} from ~{b.rate:.1f} req/s offered (set by {b.indicator} "
                       f"reaching {b.level:g}): utilisation {fmt_num(b.utilization, '.3f')}, queue depth "
                       f"{fmt_num(b.queue_depth)}, P99 CV {fmt_num(b.p99_cv, '.3f')}.")
    return out


def _record_baseline(deps, opts, metrics_url, input_data, settings, points, calibration,
                     baseline_path, profile, original_state, sla_scale) -> str:
    """One more run, control as it originally was, to record the control effect that
    ``monitor --check-metric-drift`` compares against."""
    rate = opts["baseline_rate"]
    if rate is None:
        ok = sorted(p.rate for p in points if p.ok)
        below = [r for r in ok if zone_of(r, calibration) != "danger"]
        rate = below[-1] if below else ok[0]
    point, run, series = measure_rates(deps, opts["url"], opts["model"], metrics_url, input_data, rate,
                                  settings, opts["protocol"])
    if not point.ok or len(series.snapshots) < 2:
        return (f"baseline: NOT recorded (run at {rate:g} req/s: "
                f"{point.error or 'fewer than two metric samples'})")
    effect = live.control_effect(series.snapshots, opts["model"])
    doc = {"kind": "explicit_batching_control_baseline", "version": 1,
           "recorded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "source": f"calibrate baseline run at {rate:g} req/s, control.enabled={original_state}",
           "offered_rate": rate, "sla_scale": sla_scale, "p99_ms": point.p99_ms,
           "goodput": point.goodput, "calibrated_profile": profile.name,
           "effect": effect.to_dict()}
    with open(baseline_path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    return (f"Baseline for `monitor --check-metric-drift`: `{show_path(baseline_path)}` ({rate:g} req/s, "
            f"control as originally configured, profile {effect.profile}; SLA attainment "
            + ", ".join(f"{c} {v:.1%}" for c, v in sorted(effect.sla_attainment.items()))
            + f"; mean batch size {fmt_num(effect.mean_batch_size)}).")
