"""``simulate``'s runs: one policy on a workload (``run_policy``), and ``--tune``: a grid of
alpha, beta and base window, each simulated (in a process pool), the best written into a
profile.
"""

from __future__ import annotations

import itertools
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import click

from . import report
from .profile_editor import write_profile as edit_profile_file
from .workload_spec import parse_float_list
from scheduler_core.profile import HardwareProfile, ProfileError
from scheduler_core.profile_parse import with_overrides
from scheduler_core.scheduler import Scheduler
from simulation import baselines
from simulation import workload as W
from simulation.simulator import SimResult, simulate


TUNE_ALPHAS = (0.2, 0.3, 0.4, 0.5)
TUNE_BETAS = (0.1, 0.2, 0.3)
TUNE_WINDOW_FACTORS = (0.5, 1.0, 2.0)  # times the profile's base_window_ms


def make_policy(kind: str, profile: HardwareProfile, time_scale: float,
                native: tuple[int, int]):
    """A fresh policy object (they keep state, so one per run)."""
    return baselines.make_policy(kind, profile, time_scale, native_max_batch_size=native[0],
                                 native_delay_us=native[1])


def run_policy(kind: str, profile: HardwareProfile, time_scale: float,
               arrivals: Sequence[W.Arrival], native: tuple[int, int],
               name: str | None = None) -> SimResult:
    return simulate(make_policy(kind, profile, time_scale, native), arrivals,
                    profile.cost_model, profile.emulation.cost_mode, time_scale,
                    name=name or kind)


@dataclass(frozen=True)
class TuneResult:
    alpha: float
    beta: float
    base_window_ms: float
    goodput_rps: float
    sla_attainment: float
    p99_ms: float
    is_profile: bool  # the profile's own setting

    def key(self) -> tuple:
        """Best first: goodput, then attainment, then P99; ties to the smaller values."""
        p99 = self.p99_ms if not math.isnan(self.p99_ms) else math.inf
        return (-round(self.goodput_rps, 9), -round(self.sla_attainment, 12), p99,
                self.alpha, self.beta, self.base_window_ms)


def tuned_profile(profile: HardwareProfile, alpha: float, beta: float,
                  base_window_ms: float) -> HardwareProfile:
    return with_overrides(profile, {"scheduler": {"alpha": alpha, "beta": beta,
                                                  "base_window_ms": base_window_ms}},
                          source=f"simulate --tune (alpha={alpha:g}, beta={beta:g}, "
                                 f"base_window_ms={base_window_ms:g})")


_TUNE_STATE: dict[str, Any] = {}


def _tune_init(profile: HardwareProfile, time_scale: float, arrivals) -> None:
    _TUNE_STATE.update(profile=profile, time_scale=time_scale, arrivals=arrivals)


def _tune_one(setting: tuple[float, float, float]) -> tuple[float, float, float, float]:
    alpha, beta, window = setting
    p = tuned_profile(_TUNE_STATE["profile"], alpha, beta, window)
    r = simulate(Scheduler.from_profile(p, _TUNE_STATE["time_scale"]), _TUNE_STATE["arrivals"],
                 p.cost_model, p.emulation.cost_mode, _TUNE_STATE["time_scale"])
    return r.goodput_rps, r.sla_attainment, r.p99_ms, r.met


def tune_grid(profile: HardwareProfile, alphas: Sequence[float], betas: Sequence[float],
              windows: Sequence[float]) -> list[tuple[float, float, float]]:
    """Every (alpha, beta, base_window_ms) of the grid, plus the profile's own setting."""
    s = profile.scheduler
    grid = list(itertools.product(alphas, betas, windows))
    own = (s.alpha, s.beta, s.base_window_ms)
    if own not in grid:
        grid.append(own)
    return grid


def tune(profile: HardwareProfile, time_scale: float, arrivals: Sequence[W.Arrival],
         grid: Sequence[tuple[float, float, float]], jobs: int = 1,
         progress: bool = True) -> list[TuneResult]:
    """One simulation per setting; results best first (deterministic whatever ``jobs``)."""
    from tqdm import tqdm

    s = profile.scheduler
    own = (s.alpha, s.beta, s.base_window_ms)
    bar = tqdm(total=len(grid), desc="simulate --tune", unit="setting", disable=not progress,
               file=sys.stderr)
    try:
        if jobs > 1:
            with ProcessPoolExecutor(max_workers=jobs, initializer=_tune_init,
                                     initargs=(profile, time_scale, list(arrivals))) as pool:
                outcomes = []
                for out in pool.map(_tune_one, grid):
                    outcomes.append(out)
                    bar.update()
        else:
            _tune_init(profile, time_scale, arrivals)
            outcomes = []
            for setting in grid:
                outcomes.append(_tune_one(setting))
                bar.update()
    finally:
        bar.close()
    results = [TuneResult(a, b, w, g, att, p99, (a, b, w) == own)
               for (a, b, w), (g, att, p99, _) in zip(grid, outcomes)]
    return sorted(results, key=TuneResult.key)


def tune_table(results: Sequence[TuneResult], top: int) -> str:
    own = next(r for r in results if r.is_profile)
    lines = ["| rank | alpha | beta | base_window_ms | goodput (req/s) | SLA attainment | "
             "P99 (ms) | goodput vs profile |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    shown = list(enumerate(results[:top], 1))
    if not any(r.is_profile for _, r in shown):
        shown.append((results.index(own) + 1, own))
    for rank, r in shown:
        delta = (r.goodput_rps / own.goodput_rps - 1.0) if own.goodput_rps > 0 else math.nan
        label = " (profile)" if r.is_profile else ""
        lines.append(f"| {rank} | {r.alpha:g} | {r.beta:g} | {r.base_window_ms:g}{label} | "
                     f"{r.goodput_rps:,.1f} | {r.sla_attainment:.1%} | {report.fmt_ms(r.p99_ms)} "
                     f"| {'-' if math.isnan(delta) else f'{delta:+.1%}'} |")
    return "\n".join(lines)


def _tune_grid_from_options(prof: HardwareProfile, alphas, betas, windows):
    """(alpha grid, beta grid, window grid, every setting), each setting validated."""
    s = prof.scheduler
    try:
        a_grid = parse_float_list(alphas, "--alphas") if alphas else TUNE_ALPHAS
        b_grid = parse_float_list(betas, "--betas") if betas else TUNE_BETAS
        w_grid = (parse_float_list(windows, "--windows") if windows else
                  tuple(sorted({min(max(s.base_window_ms * f, s.min_window_ms),
                                    s.max_window_ms) for f in TUNE_WINDOW_FACTORS})))
        grid = tune_grid(prof, a_grid, b_grid, w_grid)
        for a, b, w in grid:  # validate every setting before the first simulation
            tuned_profile(prof, a, b, w)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    return a_grid, b_grid, w_grid, grid


def tune_section(prof: HardwareProfile, scale: float, arrivals, native, alphas, betas,
                  windows, top, write_profile, jobs, no_progress):
    """(the report's tuning section, the tuned explicit policy's summary row); writes the
    best setting as a profile file when asked."""
    s = prof.scheduler
    a_grid, b_grid, w_grid, grid = _tune_grid_from_options(prof, alphas, betas, windows)
    results = tune(prof, scale, arrivals, grid, jobs=jobs, progress=not no_progress)
    best = results[0]
    own = next(r for r in results if r.is_profile)
    best_profile = tuned_profile(prof, best.alpha, best.beta, best.base_window_ms)
    out = [
        f"## Tuning the elastic window: {len(grid)} settings by goodput",
        "",
        f"Grid: alpha {{{', '.join(f'{x:g}' for x in a_grid)}}} x beta "
        f"{{{', '.join(f'{x:g}' for x in b_grid)}}} x base_window_ms "
        f"{{{', '.join(f'{x:g}' for x in w_grid)}}}, plus the profile's own "
        f"(alpha {s.alpha:g}, beta {s.beta:g}, base_window_ms {s.base_window_ms:g}). "
        f"Ranked by goodput, then SLA attainment, then P99.",
        "",
        tune_table(results, top),
        "",
        f"Best: alpha {best.alpha:g}, beta {best.beta:g}, base_window_ms "
        f"{best.base_window_ms:g}: goodput {best.goodput_rps:,.1f} req/s vs "
        f"{own.goodput_rps:,.1f} with the profile's own setting.",
        "",
    ]
    if write_profile:
        out += _write_tuned_profile(prof, scale, best, own, write_profile)
    row = report.from_sim(run_policy("explicit", best_profile, scale, arrivals, native),
                          "explicit (tuned)")
    return out, row


def _write_tuned_profile(prof: HardwareProfile, scale: float, best, own,
                         write_profile: str) -> list[str]:
    """Write ``prof`` with the best setting to ``write_profile``, with a header that says
    how it was tuned; the report's line about it."""
    header = (f"Profile {prof.name} with the elastic window tuned by\n"
              f"  {report.command_line(click.get_current_context())}\n"
              f"alpha {best.alpha:g}, beta {best.beta:g}, base_window_ms "
              f"{best.base_window_ms:g}: goodput {best.goodput_rps:,.1f} req/s vs "
              f"{own.goodput_rps:,.1f} with the profile's own setting,\n"
              f"simulated on the EMULATED device at time scale {scale:g} "
              f"(base_window_ms is in that time scale's milliseconds).\n"
              f"Everything else is {prof.source} as it was, except device_match:\n"
              f"empty, so select this profile by name (model parameter "
              f"hardware_profile or EXPLICIT_BATCHING_PROFILE).")
    # The profile's own file with the three keys changed: its comments kept, validated
    # before it is written. device_match empty: a tuned copy beside its original must not
    # win NVML auto-selection; pick it by name.
    try:
        written = edit_profile_file(prof.source, write_profile,
                                    {"scheduler": {"alpha": best.alpha, "beta": best.beta,
                                                   "base_window_ms": best.base_window_ms}},
                                    top_level={"device_match": []}, header=header)
    except (OSError, ProfileError) as exc:
        raise click.ClickException(f"--write-profile: {exc}") from None
    return [f"Wrote the best setting to `{write_profile}` (profile `{written.name}`).", ""]
