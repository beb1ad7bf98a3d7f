"""``monitor --check-metric-drift``: is explicit control still doing what it did when it
was calibrated? (the design's fire-fighting manual, docs/design.md section 6.2)

Watches the plugin's metrics port for a short window and compares the control effect
now (SLA attainment per class, mean batch size, elastic window, zone distribution,
cost-model correction, control period) with a baseline that ``calibrate`` records
(``baseline.json`` beside the profile) or that ``monitor --record-baseline`` takes from a
healthy deployment. Drift beyond the limits is flagged with the design's remedies.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import click
import yaml

from . import live
from .exit_codes import FINDING, check_reached
from .live import ControlEffect
from .output import echo_for, emit_json, json_option
from .report import fmt_num

REMEDIES = {
    "control_period": (
        "Adjust the control period within the design's 50-200 ms (control.control_period_ms): "
        "shorter follows load changes sooner, longer damps zone flapping. Check "
        "`analyze --control-feedback-lag` first: a lag beyond 200 ms calls for a shorter period."),
    "sla_weights": (
        "Refresh the SLA weights of the request features (control.urgency_decay_rate, "
        "urgency_slack_unit_ms, urgent_threshold, and the SLA classes the clients send): the "
        "urgency order no longer matches the traffic's deadlines."),
    "load_model": (
        "Refit the load model: the profile's cost_model no longer predicts what a batch costs "
        "(cost_correction_ratio is observed/predicted, 1 = exact). Refit cost_model from the "
        "observed batches (or re-run `calibrate`) and reload the model."),
}
NEXT_STEPS = ("Then, as in the design's diagnosis: `explicit-batching analyze --control-feedback-lag`"
              " and, if the parameters wandered, `explicit-batching calibrate --reset-parameters "
              "baseline --profile PROFILE` followed by `calibrate step`.")


@dataclass(frozen=True)
class DriftLimits:
    max_attainment_drop: float = 0.05  # absolute, per SLA class
    max_batch_size_change: float = 0.30  # relative
    max_window_change: float = 0.30  # relative
    max_zone_shift: float = 0.20  # total-variation distance between zone shares
    max_cost_correction_change: float = 0.20  # relative to the baseline
    cost_correction_far: float = 1.5  # outside [1/far, far] is far from 1 whatever the baseline
    max_control_period_change: float = 0.50  # relative
    min_requests: int = 20  # per SLA class, in both, to compare attainment


@dataclass(frozen=True)
class Finding:
    metric: str
    baseline: str
    now: str
    status: str  # "ok", "DRIFT", "n/a"
    detail: str = ""
    remedy: str = ""  # a key of REMEDIES when status is DRIFT


def _rel(now: float, base: float) -> float:
    return abs(now - base) / abs(base) if base else (0.0 if now == base else math.inf)


def check_drift(now: ControlEffect, base: ControlEffect, limits: DriftLimits = DriftLimits()
                ) -> list[Finding]:
    """Compare two control effects metric by metric."""
    out = _attainment_findings(now, base, limits)
    out.append(_relative_finding("mean batch size", base.mean_batch_size, now.mean_batch_size,
                                 limits.max_batch_size_change, "load_model"))
    out.append(_relative_finding("elastic window (ms)", base.window_ms, now.window_ms,
                                 limits.max_window_change, "control_period"))
    out.append(_zone_finding(now, base, limits))
    out.append(_cost_correction_finding(now, base, limits))
    out.append(_relative_finding("control period (ms)", base.control_period_ms,
                                 now.control_period_ms, limits.max_control_period_change,
                                 "control_period", ".0f"))
    return out


def _attainment_findings(now: ControlEffect, base: ControlEffect, limits: DriftLimits
                         ) -> list[Finding]:
    """One finding per SLA class: did its attainment drop by more than the limit?"""
    out: list[Finding] = []
    classes = sorted(set(base.sla_attainment) | set(now.sla_attainment))
    if not classes:
        out.append(Finding("SLA attainment", "-", "-", "n/a", "no SLA traffic in either"))
    for cls in classes:
        b, n = base.sla_attainment.get(cls), now.sla_attainment.get(cls)
        nb, nn = base.sla_requests.get(cls, 0), now.sla_requests.get(cls, 0)
        name = f"SLA attainment {cls}"
        if b is None or n is None or nb < limits.min_requests or nn < limits.min_requests:
            out.append(Finding(name, fmt_num(b, ".1%"), fmt_num(n, ".1%"), "n/a",
                               f"needs >= {limits.min_requests} requests in both "
                               f"(baseline {nb:.0f}, now {nn:.0f})"))
            continue
        drop = b - n
        drift = drop > limits.max_attainment_drop
        out.append(Finding(name, f"{b:.1%}", f"{n:.1%}", "DRIFT" if drift else "ok",
                           f"{'dropped' if drop > 0 else 'changed'} {abs(drop) * 100:.1f} points "
                           f"(limit {limits.max_attainment_drop * 100:g})",
                           "sla_weights" if drift else ""))
    return out


def _relative_finding(metric: str, b: float | None, n: float | None, limit: float, remedy: str,
                      fmt: str = ".2f") -> Finding:
    """A metric that drifts when it changed by more than ``limit`` (relative)."""
    if b is None or n is None:
        return Finding(metric, fmt_num(b, fmt), fmt_num(n, fmt), "n/a", "not measured in both")
    change = _rel(n, b)
    drift = change > limit
    return Finding(metric, fmt_num(b, fmt), fmt_num(n, fmt), "DRIFT" if drift else "ok",
                   f"changed {change:.0%} (limit {limit:.0%})", remedy if drift else "")


def _zone_finding(now: ControlEffect, base: ControlEffect, limits: DriftLimits) -> Finding:
    """The zone shares drift when their total-variation distance exceeds the limit."""
    if base.zone_share and now.zone_share:
        zones = set(base.zone_share) | set(now.zone_share)
        tv = 0.5 * sum(abs(base.zone_share.get(z, 0.0) - now.zone_share.get(z, 0.0)) for z in zones)
        drift = tv > limits.max_zone_shift
        show = lambda s: " / ".join(f"{s.get(z, 0.0):.0%}" for z in live.ZONE_NAMES)  # noqa: E731
        return Finding("zone share safe / nml / danger", show(base.zone_share),
                       show(now.zone_share), "DRIFT" if drift else "ok",
                       f"shifted {tv:.0%} of the time (limit {limits.max_zone_shift:.0%})",
                       "control_period" if drift else "")
    return Finding("zone share", "-", "-", "n/a", "no zone samples in both")


def _cost_correction_finding(now: ControlEffect, base: ControlEffect, limits: DriftLimits
                             ) -> Finding:
    """The cost correction drifts when it is far from 1 or changed beyond the limit."""
    b, n = base.cost_correction_ratio, now.cost_correction_ratio
    if b is None or n is None:
        return Finding("cost_correction_ratio", fmt_num(b, ".2f"), fmt_num(n, ".2f"), "n/a",
                       "not measured in both")
    far = not (1.0 / limits.cost_correction_far <= n <= limits.cost_correction_far)
    change = _rel(n, b)
    drift = far or change > limits.max_cost_correction_change
    why = (f"far from 1 (outside {1 / limits.cost_correction_far:.2f}-"
           f"{limits.cost_correction_far:g})" if far else
           f"changed {change:.0%} (limit {limits.max_cost_correction_change:.0%})")
    return Finding("cost_correction_ratio", f"{b:.2f}", f"{n:.2f}",
                   "DRIFT" if drift else "ok", why, "load_model" if drift else "")


def load_baseline(path: str) -> tuple[ControlEffect, dict[str, Any]]:
    """A baseline file (JSON or YAML): calibrate's document (``effect`` inside) or a bare
    control effect."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)  # JSON is YAML
    except (OSError, yaml.YAMLError) as exc:
        raise click.ClickException(f"baseline {path}: cannot be read: {exc}") from None
    if not isinstance(raw, Mapping):
        raise click.ClickException(f"baseline {path}: expected a mapping")
    effect = raw.get("effect", raw)
    if not isinstance(effect, Mapping) or "sla_attainment" not in effect:
        raise click.ClickException(f"baseline {path}: no control effect (key 'sla_attainment' "
                                   "missing): write one with calibrate or monitor --record-baseline")
    try:
        return ControlEffect.from_dict(effect), dict(raw)
    except (TypeError, ValueError) as exc:
        raise click.ClickException(f"baseline {path}: bad control effect: {exc}") from None


def effect_table(effect: ControlEffect) -> str:
    rows = [("window", f"{effect.duration_s:.1f} s, {effect.samples} samples, "
                       f"{effect.requests:.0f} requests answered"),
            ("profile", effect.profile or "-")]
    rows += [(f"SLA attainment {c}", f"{v:.1%} of {effect.sla_requests.get(c, 0):.0f}")
             for c, v in sorted(effect.sla_attainment.items())]
    rows += [("mean batch size", fmt_num(effect.mean_batch_size, '.2f')),
             ("elastic window (ms)", fmt_num(effect.window_ms, '.2f')),
             ("zone share safe / nml / danger", " / ".join(
                 f"{effect.zone_share.get(z, 0.0):.0%}" for z in live.ZONE_NAMES)),
             ("cost_correction_ratio", fmt_num(effect.cost_correction_ratio, '.2f')),
             ("control period (ms)", fmt_num(effect.control_period_ms, ".0f"))]
    return "\n".join(f"  {k:32s} {v}" for k, v in rows)


@click.command(name="monitor")
@click.option("--check-metric-drift", is_flag=True,
              help="Compare the control effect now with --baseline and flag drift.")
@click.option("--record-baseline", "record_path", type=click.Path(dir_okay=False),
              help="Instead: record the control effect now as a baseline file (JSON).")
@click.option("--metrics-url", required=True, help="Triton metrics page, e.g. http://localhost:8002/metrics.")
@click.option("--model", required=True, help="The explicit-control model to watch.")
@click.option("--baseline", "baseline_path", type=click.Path(exists=True, dir_okay=False),
              help="Baseline (calibrate's baseline.json, or monitor --record-baseline's).")
@click.option("--window-s", type=click.FloatRange(0.5, 3600), default=10.0, show_default=True,
              help="How long to watch the metrics port.")
@click.option("--interval-s", type=click.FloatRange(0.05, 60), default=0.5, show_default=True)
@click.option("--max-attainment-drop", type=click.FloatRange(0, 1), default=0.05, show_default=True,
              help="Flag an SLA class whose attainment fell by more than this (absolute).")
@click.option("--max-batch-size-change", type=click.FloatRange(0), default=0.3, show_default=True)
@click.option("--max-window-change", type=click.FloatRange(0), default=0.3, show_default=True)
@click.option("--max-zone-shift", type=click.FloatRange(0, 1), default=0.2, show_default=True)
@click.option("--max-cost-correction-change", type=click.FloatRange(0), default=0.2, show_default=True)
@click.option("--min-requests", type=click.IntRange(1), default=20, show_default=True,
              help="Per SLA class, in both windows, to compare its attainment.")
@click.option("--fail-on-drift", is_flag=True, help="Exit with status 1 when drift is found.")
@json_option
@click.pass_context
def command(ctx: click.Context, check_metric_drift: bool, record_path: str | None, metrics_url: str,
            model: str, baseline_path: str | None, window_s: float, interval_s: float,
            max_attainment_drop: float, max_batch_size_change: float, max_window_change: float,
            max_zone_shift: float, max_cost_correction_change: float, min_requests: int,
            fail_on_drift: bool, as_json: bool) -> None:
    """Watch the control-state metrics: --check-metric-drift against a calibrated
    baseline (with the design's remedies), or --record-baseline."""
    deps = ctx.find_object(live.SamplingDeps) or live.SamplingDeps()
    if check_metric_drift == bool(record_path):
        raise click.UsageError("give exactly one of --check-metric-drift or --record-baseline FILE")
    if check_metric_drift and not baseline_path:
        raise click.UsageError("--check-metric-drift needs --baseline FILE")
    base = base_doc = None
    if baseline_path:
        base, base_doc = load_baseline(baseline_path)
    click.echo(f"watching {metrics_url} for {window_s:g} s (model {model}) ...", err=True)
    series = deps.sample(metrics_url, model, window_s, interval_s)
    if len(series.snapshots) < 2:
        check_reached(series, metrics_url)
        raise click.ClickException(
            f"fewer than two readable scrapes of {metrics_url} for model '{model}' "
            f"({series.failures} failed: {series.last_error})")
    now = live.control_effect(series.snapshots, model)
    say = echo_for(as_json)
    if series.failures:
        say(f"note: {series.failures} scrapes failed (last: {series.last_error})")

    if record_path:
        _write_baseline(record_path, window_s, now, say)
        if as_json:
            emit_json({"kind": "baseline_recorded", "model": model, "path": record_path,
                       "effect": now.to_dict()})
        return

    limits = DriftLimits(max_attainment_drop, max_batch_size_change, max_window_change,
                         max_zone_shift, max_cost_correction_change, min_requests=min_requests)
    findings = check_drift(now, base, limits)
    _echo_drift_context(model, now, base, base_doc, baseline_path, say)
    drifted = _echo_findings(findings, say)
    if as_json:
        emit_json({"kind": "metric_drift", "model": model, "metrics_url": metrics_url,
                   "baseline_path": baseline_path, "drift": drifted,
                   "drifted": [f.metric for f in findings if f.status == "DRIFT"],
                   "findings": findings, "now": now.to_dict(), "baseline": base.to_dict()})
    if drifted and fail_on_drift:
        ctx.exit(FINDING)


def _write_baseline(record_path: str, window_s: float, now: ControlEffect, say) -> None:
    """--record-baseline: the control effect now as a baseline file (JSON)."""
    doc = {"kind": "explicit_batching_control_baseline", "version": 1,
           "source": f"monitor --record-baseline over {window_s:g} s", "effect": now.to_dict()}
    os.makedirs(os.path.dirname(os.path.abspath(record_path)), exist_ok=True)
    with open(record_path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    say(f"control effect now:\n{effect_table(now)}\nrecorded as baseline {record_path}")


def _echo_drift_context(model: str, now: ControlEffect, base: ControlEffect,
                        base_doc: Mapping[str, Any], baseline_path: str, say) -> None:
    """What is compared with what, and notes on what makes the comparison weaker."""
    say(f"metric drift check: {model}, now ({now.duration_s:.1f} s, "
               f"{now.requests:.0f} requests) vs baseline {baseline_path}"
               + (f" ({base_doc.get('source')})" if base_doc.get("source") else ""))
    if base.profile and now.profile and base.profile != now.profile:
        say(f"note: the baseline was recorded on profile '{base.profile}', the model now "
                   f"runs '{now.profile}': differences mix the profile change with drift")
    if base.sla_requests and now.sla_requests and not set(base.sla_requests) & set(now.sla_requests):
        say(f"note: no SLA class in common (baseline {', '.join(sorted(base.sla_requests))}; "
                   f"now {', '.join(sorted(now.sla_requests))}): has the traffic's SLA mix, or "
                   "its scaling, changed?")
    if now.requests == 0:
        say("note: no requests were answered in the window: SLA attainment and batch "
                   "size cannot be judged (run it under load)")


def _echo_findings(findings: Sequence[Finding], say) -> bool:
    """The findings table, the verdict and the remedies; True when something drifted."""
    width = max(len(f.metric) for f in findings)
    say(f"\n  {'metric':{width}s}  {'baseline':>16s}  {'now':>16s}  status  detail")
    for f in findings:
        say(f"  {f.metric:{width}s}  {f.baseline:>16s}  {f.now:>16s}  {f.status:6s}  {f.detail}")
    drifted = [f for f in findings if f.status == "DRIFT"]
    if not drifted:
        say("\nverdict: no drift beyond the limits")
        return False
    say(f"\nverdict: DRIFT in {len(drifted)} metric(s): "
               + ", ".join(f.metric for f in drifted))
    say("remedies:")
    for key in dict.fromkeys(f.remedy for f in drifted):
        because = ", ".join(f.metric for f in drifted if f.remedy == key)
        say(f"  - [{because}] {REMEDIES[key]}")
    say(NEXT_STEPS)
    return True
