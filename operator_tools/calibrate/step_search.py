"""``calibrate step``: walk alpha, then beta, one reload and one perf_analyzer run a step.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from typing import Mapping, Sequence

import click

from .. import live, perf_analyzer
from ..benchmark_mode import RECIPE as BENCHMARK_MODE, SERVED_LATE_NOTE
from ..live import LoadRefused
from ..output import echo_for, emit_json
from .cold_start import measure_rates, read_config
from .common import (ALPHA_RANGE, BASELINE_ALPHA, BASELINE_BETA, BETA_RANGE, CalibrateDeps,
                     command_line, describe_emulation, progress, resolve_sla_scale)
from ..report import fmt_num



def _grid(lo: float, hi: float, step: float) -> list[float]:
    n = int(math.floor((hi - lo) / step + 1e-9))
    return [round(lo + i * step, 6) for i in range(n + 1)]


@dataclass
class StepResult:
    alpha: float
    beta: float
    goodput: float | None = None
    p99_ms: float | None = None
    throughput: float | None = None
    error: str = ""


GOODPUT_TIE = 0.01  # goodputs within 1 % are a tie (run-to-run noise); P99 decides then


def _better(a: StepResult, b: StepResult | None) -> bool:
    """``a`` beats ``b``: more goodput (beyond GOODPUT_TIE), else a lower P99."""
    if a.error or a.goodput is None:
        return False
    if b is None or b.goodput is None:
        return True
    if not math.isclose(a.goodput, b.goodput, rel_tol=GOODPUT_TIE):
        return a.goodput > b.goodput
    return (a.p99_ms or math.inf) < (b.p99_ms or math.inf)


def run_step(ctx, deps: CalibrateDeps, opts, metrics_url: str, settings) -> None:
    url, model = opts["url"], opts["model"]
    rate = opts["step_rate"] or settings["rates"][0]
    alphas = _grid(*ALPHA_RANGE, opts["step_size"])
    betas = _grid(*BETA_RANGE, opts["step_size"])
    budget = opts["max_steps"] or (len(alphas) + len(betas) - 1)
    control, original = read_config(deps, url, model)
    _, time_scale = describe_emulation(original, None)
    sla_scale = resolve_sla_scale(opts["sla_scale"], time_scale)
    results, best = _step_walk(deps, opts, metrics_url, settings, control, original, rate,
                               alphas, betas, budget, sla_scale)
    lines = _step_report(ctx, model, rate, settings, sla_scale, results, best,
                         len(alphas) + len(betas) - 1, budget, _step_policy(opts))
    echo_for(opts.get("as_json", False))("\n".join(lines))
    if opts.get("as_json"):
        emit_json({"kind": "calibrate_step", "model": model, "rate": rate,
                   "sla_scale": sla_scale, "results": results, "best": best})


def _step_walk(deps: CalibrateDeps, opts, metrics_url: str, settings, control, original,
               rate: float, alphas: Sequence[float], betas: Sequence[float], budget: int,
               sla_scale: float) -> tuple[list[StepResult], StepResult | None]:
    """Alpha first (beta at the conservative start), then beta at the best alpha, one
    reload and one measured run per setting, at most ``budget`` of them; the original
    config restored after. (every result, the best)"""
    url, model = opts["url"], opts["model"]
    results: list[StepResult] = []
    changed = []  # non-empty once a reload went through: the original must come back

    def run(alpha: float, beta: float) -> StepResult:
        result = StepResult(alpha, beta)
        control.load(live.with_parameters(original, {"scheduler.alpha": f"{alpha:g}",
                                                     "scheduler.beta": f"{beta:g}",
                                                     **_step_policy(opts)}))
        changed.append(True)
        point, load, _ = measure_rates(deps, url, model, metrics_url, input_data, rate, settings,
                                  opts["protocol"])
        result.error = point.error
        if load is not None:
            result.goodput, result.p99_ms, result.throughput = (point.goodput, point.p99_ms,
                                                                 point.throughput)
        results.append(result)
        return result

    plan = [(a, BASELINE_BETA) for a in alphas]
    best: StepResult | None = None
    with tempfile.TemporaryDirectory() as tmp:
        input_data = perf_analyzer.scaled_input_data(settings["input_data"], sla_scale, tmp)
        bar = progress(deps, range(budget), "calibrate step")
        steps = iter(bar)
        try:
            for alpha, beta in plan:  # alpha first, beta at the conservative start
                if next(steps, None) is None:
                    break
                r = run(alpha, beta)
                best = r if _better(r, best) else best
            best_alpha = best.alpha if best else BASELINE_ALPHA
            for beta in betas[1:]:  # then beta, at the best alpha
                if next(steps, None) is None:
                    break
                r = run(best_alpha, beta)
                best = r if _better(r, best) else best
        except LoadRefused as exc:
            raise click.ClickException(
                f"the server refused to reload '{model}' with new parameters ({exc}): --step "
                "needs a server started with --model-control-mode=explicit") from None
        finally:
            if hasattr(bar, "close"):
                bar.close()
            if changed:
                try:
                    control.load(original)
                except LoadRefused as exc:
                    click.echo(f"error: restoring the original config failed: {exc}", err=True)
    return results, best


def _step_policy(opts) -> dict[str, str]:
    """The benchmark-mode parameter each --step reload adds (none when as-configured)."""
    return dict(BENCHMARK_MODE) if opts.get("infeasible_policy", "serve_late") == "serve_late" \
        else {}


def _step_report(ctx, model: str, rate: float, settings, sla_scale: float,
                 results: Sequence[StepResult], best: StepResult | None, full_walk: int,
                 budget: int, policy: Mapping[str, str] | None = None) -> list[str]:
    """The --step report: how each setting was run, one row per setting, the best."""
    lines = ["```", f"$ {command_line(ctx)}", "```", "",
             f"--step on `{model}` at {rate:g} req/s offered ({settings['distribution']} "
             f"arrivals, SLAs x{sla_scale:g}), one perf_analyzer run ({settings['max_trials']} x "
             f"{settings['measurement_ms']} ms) per setting, each applied by reloading the model "
             "with parameters scheduler.alpha / scheduler.beta"
             + (f" and {', '.join(f'{k}={v}' for k, v in policy.items())} (benchmark mode: "
                f"{SERVED_LATE_NOTE}; goodput counts met SLAs only)" if policy else
                " (infeasible_policy as configured: a refused request ends its run)")
             + "; original config restored after.",
             "", "| alpha | beta | goodput (req/s) | P99 (ms) | throughput (req/s) |",
             "|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.alpha:g} | {r.beta:g} | failed: {r.error} |  |  |")
        else:
            lines.append(f"| {r.alpha:g} | {r.beta:g} | {fmt_num(r.goodput)} | "
                         f"{fmt_num(r.p99_ms)} | "
                         f"{fmt_num(r.throughput)} |")
    if best is not None and best.goodput is not None:
        lines += ["", f"best: alpha={best.alpha:g} beta={best.beta:g} (goodput "
                      f"{best.goodput:.1f} req/s, P99 {fmt_num(best.p99_ms)} ms; goodput within "
                      f"{GOODPUT_TIE:.0%} is a tie, broken by the lower P99). Keep it with "
                      "scheduler.alpha/beta in the profile (or as model-config parameters)."]
    else:
        lines += ["", "best: none (no run completed)"]
    if len(results) < full_walk:
        lines.append(f"(walk bounded by --max-steps {budget}: {len(results)} settings tried)")
    return lines
