"""``explicit-batching simulate``: the deterministic simulator on a workload spec.

Runs ``simulation.simulator.simulate`` with explicit control
(``Scheduler.from_profile``) and the model of Triton's dynamic batcher (``native``; more
baselines with ``--baselines``) on the same arrivals, on the EMULATED device of a hardware
profile, and prints the table ``compare`` prints for a live server
(``operator_tools.report.summary_table``). Same arguments, same output.

The workload comes from a spec file (``perf_analyzer_configs/workloads/*.yaml``, keys in
``perf_analyzer_configs/README.md``), from CLI options that override the spec's keys, or
from a perf_analyzer trace (``--request-intervals`` + ``--input-data``: exactly what
perf_analyzer would replay, offline). SLA classes are written at real-hardware speed and
multiplied by the time scale, like the device's cost (the convention of the reliability
suite and of ``compare``).

``--tune`` grid-searches the elastic window's ``alpha``, ``beta`` and ``base_window_ms``
for the profile on this workload (``profile.with_overrides`` + ``Scheduler.from_profile``,
one simulation per setting, the profile's own setting always included), prints the best
settings by goodput and can write the best one as a profile file (``--write-profile``).
"""

from __future__ import annotations

import os
import re
from typing import Sequence

import click
import numpy as np

from . import report
from . import resources
from .output import echo_for, emit_json, json_option, summary_dict
from .simulate_runs import tune_section, run_policy
from .workload_spec import (LENGTH_MIXES, SpecError, WorkloadSpec, apply_overrides,
                            load_workload_spec, parse_float_list, parse_params)
from scheduler_core.profile import HardwareProfile, ProfileError
from scheduler_core.profile_files import load_profile, profile_path
from simulation import workload as W
from simulation.simulator import capacity_rps, fifo_capacity_rps


# From the package when installed as a wheel, else the checkout (operator_tools.resources).
CONFIGS_DIR = resources.configs_dir()
DEFAULT_WORKLOAD = os.path.join(CONFIGS_DIR, "workloads", "mixed_poisson.yaml")
PROFILE_DIR = os.path.join(resources.model_templates_dir(), "emulated_explicit", "profiles")
NATIVE_CONFIG = os.path.join(resources.model_templates_dir(), "emulated_native", "config.pbtxt")
BASELINES = ("native", "fixed-window", "adaptive")


CAPACITY_SAMPLE = 50_000

# -- perf_analyzer traces, offline ---------------------------------------------------------------

def trace_arrivals(intervals_path: str, input_data_path: str, time_scale: float,
                   default_sla_ms: float) -> list[W.Arrival]:
    """What perf_analyzer replays with ``--request-intervals`` and ``--input-data``: send
    k uses data entry k (modulo the entries: perf_analyzer cycles through them). SLAs in
    the file are multiplied by ``time_scale``; an entry without SLA_MS gets
    ``default_sla_ms`` (what the server assigns)."""
    times = W.read_request_intervals(intervals_path)
    entries = W.read_input_data(input_data_path)
    if not times or not entries:
        raise SpecError(f"{intervals_path if not times else input_data_path}: holds no requests")
    out = []
    for k, t in enumerate(times):
        length, sla = entries[k % len(entries)]
        out.append(W.Arrival(t, length, default_sla_ms if sla is None else sla * time_scale))
    return out

# -- profiles and policies ----------------------------------------------------------------------

def resolve_profile(name_or_path: str) -> HardwareProfile:
    """A profile by name (``model_repository/emulated_explicit/profiles/<name>.yaml``) or
    by path to a YAML file."""
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        return load_profile(name_or_path)
    return load_profile(profile_path(PROFILE_DIR, name_or_path))


def shipped_native_batcher(path: str = NATIVE_CONFIG) -> tuple[int, int]:
    """(max_batch_size, max_queue_delay_microseconds) of the shipped ``emulated_native``
    config, so the simulated native batcher is the one the server runs."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    size = re.search(r"^max_batch_size:\s*(\d+)", text, re.M)
    delay = re.search(r"max_queue_delay_microseconds:\s*(\d+)", text)
    return (int(size.group(1)) if size else 32), (int(delay.group(1)) if delay else 0)


def capacities(profile: HardwareProfile, time_scale: float, spec: WorkloadSpec | None,
               arrivals: Sequence[W.Arrival]) -> tuple[float, float]:
    """(capacity, FIFO capacity) in req/s for this length mix: full batches of similar
    lengths (``capacity_rps``), and full batches in arrival order (what a FIFO batcher
    reaches at best)."""
    if spec is not None:
        lengths = spec.length_mix().draw(np.random.default_rng(spec.seed), CAPACITY_SAMPLE).tolist()
    else:
        lengths = [a.seq_len for a in arrivals]
    s, cm, mode = profile.scheduler, profile.cost_model, profile.emulation.cost_mode
    cap = capacity_rps(cm, mode, time_scale, lengths, s.max_batch_size, s.max_batch_tokens)
    return cap, fifo_capacity_rps(cm, mode, time_scale, lengths, s.max_batch_size)


def _check_options(request_intervals, input_data, write_profile, do_tune, baselines
                   ) -> list[str]:
    """The baselines asked for; UsageError for options that do not go together."""
    if (request_intervals is None) != (input_data is None):
        raise click.UsageError("--request-intervals and --input-data go together")
    if write_profile and not do_tune:
        raise click.UsageError("--write-profile needs --tune")
    kinds = [b.strip() for b in baselines.split(",") if b.strip()]
    for b in kinds:
        if b not in BASELINES:
            raise click.BadParameter(f"{b!r} is not one of {', '.join(BASELINES)}",
                                     param_hint="--baselines")
    return kinds


def _read_workload(workload_path, arrival, rate, arrival_param, lengths, sla_classes,
                   duration_s, seed, profile, time_scale, request_intervals, input_data):
    """(spec, profile, time scale, arrivals, the workload's description) from the spec
    file and the options, or from a perf_analyzer trace."""
    try:
        spec = load_workload_spec(workload_path or DEFAULT_WORKLOAD)
        spec = apply_overrides(
            spec, arrival=arrival, arrival_params=parse_params(arrival_param, "--arrival-param"),
            rate=rate, lengths=lengths,
            sla_classes=parse_float_list(sla_classes, "--sla-classes") if sla_classes else None,
            duration_s=duration_s, seed=seed, profile=profile, time_scale=time_scale)
        prof = resolve_profile(spec.profile)
        scale = spec.time_scale if spec.time_scale is not None else prof.emulation.time_scale
        if request_intervals:
            arrivals = trace_arrivals(request_intervals, input_data, scale,
                                      prof.scheduler.default_sla_ms)
            workload_text = (f"perf_analyzer trace `{request_intervals}` with `{input_data}` "
                             f"(send k uses data entry k, cycling), {len(arrivals):,} requests "
                             f"over {arrivals[-1].time_s:.1f} s (mean "
                             f"{len(arrivals) / max(arrivals[-1].time_s, 1e-9):,.1f} req/s), "
                             f"SLAs x time scale {scale:g}")
        else:
            arrivals = spec.arrivals(scale)
            workload_text = spec.describe(scale) + f", {len(arrivals):,} requests"
    except (SpecError, ProfileError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if not arrivals:
        raise click.ClickException("the workload holds no requests (rate or duration too small)")
    return spec, prof, scale, arrivals, workload_text


def _header_lines(prof: HardwareProfile, scale: float, arrivals, workload_text: str,
                  native: tuple[int, int], kinds: Sequence[str], cap: float, fifo: float
                  ) -> list[str]:
    """The report's title and what was simulated: device, workload, load, policies."""
    offered = len(arrivals) / max(arrivals[-1].time_s, 1e-9)
    return [
        f"# Simulated: explicit control vs Triton's batcher model ({prof.name}, EMULATED)",
        "",
        f"Command: `{report.command_line(click.get_current_context())}`",
        "",
        f"- Device: the **EMULATED** cost model of profile `{prof.name}` ({prof.description}; "
        f"{prof.source}), cost mode {prof.emulation.cost_mode}, time scale {scale:g}: "
        f"simulated, not measured.",
        f"- Workload: {workload_text}.",
        f"- Offered {offered:,.1f} req/s = {offered / cap:.0%} of capacity ({cap:,.0f} req/s: "
        f"full batches of similar lengths) and {offered / fifo:.0%} of the FIFO figure "
        f"({fifo:,.0f} req/s: full batches in arrival order, what a FIFO batcher reaches "
        f"at best).",
        f"- explicit = `Scheduler.from_profile({prof.name})`; native = Triton's dynamic "
        f"batcher model (`TritonDynamicBatcher`, max_batch_size {native[0]}, "
        f"max_queue_delay_microseconds {native[1]}, as in emulated_native's config)"
        + ("; fixed-window = `FixedWindow(base_window_ms)`" if "fixed-window" in kinds else "")
        + ("; adaptive = `AdaptiveCostBatcher` (BentoML-style)" if "adaptive" in kinds else "")
        + ".",
        "",
    ]


@click.command(name="simulate")
@click.option("--workload", "workload_path", type=click.Path(dir_okay=False),
              help="workload spec YAML (default: perf_analyzer_configs/workloads/"
                   "mixed_poisson.yaml); the options below override its keys")
@click.option("--arrival", type=click.Choice(sorted(W.ARRIVAL_PROCESSES)),
              help="arrival process (a new one starts from no parameters)")
@click.option("--rate", type=float, help="mean arrival rate (req/s); the process's rate "
              "parameters are scaled together (bursty keeps its burst ratio)")
@click.option("--arrival-param", "arrival_param", multiple=True, metavar="KEY=VALUE",
              help="an arrival-process parameter, e.g. mean_high_s=0.5 (repeatable)")
@click.option("--lengths", type=click.Choice(sorted(LENGTH_MIXES)), help="length mix")
@click.option("--sla-classes", help="SLA classes in ms at real-hardware speed, e.g. 50,100,200 "
              "(multiplied by the time scale)")
@click.option("--duration-s", type=float, help="simulated seconds")
@click.option("--seed", type=int)
@click.option("--profile", help="hardware profile name (model_repository/emulated_explicit/"
              "profiles) or path to a profile YAML")
@click.option("--time-scale", type=float, help="EMULATED device slow-down (default: the spec's, "
              "else the profile's emulation.time_scale)")
@click.option("--request-intervals", type=click.Path(exists=True, dir_okay=False),
              help="replay a perf_analyzer --request-intervals trace instead (needs "
                   "--input-data)")
@click.option("--input-data", type=click.Path(exists=True, dir_okay=False),
              help="the perf_analyzer --input-data file paired with --request-intervals")
@click.option("--baselines", default="native", show_default=True,
              help=f"comma-separated baselines besides explicit: {', '.join(BASELINES)}")
@click.option("--native-delay-us", type=int,
              help="native max_queue_delay_microseconds (default: the shipped emulated_native "
                   "config)")
@click.option("--tune", "do_tune", is_flag=True, help="grid-search alpha, beta and base_window_ms")
@click.option("--alphas", help="--tune grid for alpha (default 0.2,0.3,0.4,0.5)")
@click.option("--betas", help="--tune grid for beta (default 0.1,0.2,0.3)")
@click.option("--windows", help="--tune grid for base_window_ms (default: 0.5x, 1x, 2x the "
              "profile's)")
@click.option("--top", type=click.IntRange(1), default=5, show_default=True,
              help="--tune: settings shown")
@click.option("--write-profile", type=click.Path(dir_okay=False),
              help="--tune: write the best setting as a profile YAML here")
@click.option("--jobs", type=click.IntRange(1), default=1, show_default=True,
              help="--tune: worker processes (the result does not depend on it)")
@click.option("--no-progress", is_flag=True, help="--tune: no progress bar")
@json_option
def command(workload_path, arrival, rate, arrival_param, lengths, sla_classes, duration_s,
            seed, profile, time_scale, request_intervals, input_data, baselines,
            native_delay_us, do_tune, alphas, betas, windows, top, write_profile, jobs,
            no_progress, as_json) -> None:
    """Simulate explicit control vs Triton's batcher (and baselines) on a workload.

    Deterministic: the same arguments print the same table. --tune grid-searches the
    elastic window (alpha, beta, base_window_ms) by goodput.
    """
    kinds = _check_options(request_intervals, input_data, write_profile, do_tune, baselines)
    spec, prof, scale, arrivals, workload_text = _read_workload(
        workload_path, arrival, rate, arrival_param, lengths, sla_classes, duration_s, seed,
        profile, time_scale, request_intervals, input_data)
    native = shipped_native_batcher()
    if native_delay_us is not None:
        native = (native[0], native_delay_us)
    cap, fifo = capacities(prof, scale, None if request_intervals else spec, arrivals)
    out = _header_lines(prof, scale, arrivals, workload_text, native, kinds, cap, fifo)
    rows = []
    if do_tune:
        lines, row = tune_section(prof, scale, arrivals, native, alphas, betas, windows, top,
                                   write_profile, jobs, no_progress)
        out += lines
        rows.append(row)
    rows.append(report.from_sim(run_policy("explicit", prof, scale, arrivals, native),
                                "explicit"))
    for kind in kinds:
        rows.append(report.from_sim(run_policy(kind, prof, scale, arrivals, native), kind))
    out += ["## Results", "",
            report.summary_table(rows, ratio=("explicit", "native") if "native" in kinds else None),
            "",
            "Columns: goodput = requests finished within their SLA per second; SLA attainment = "
            "met / all requests; P50 / P99 per SLA class over completed requests; util. "
            "fluctuation = std of the per-second device busy fraction; padding waste = "
            "(padded - real tokens) / padded tokens; rejected = queue full, shed as "
            "infeasible, or never served."]
    echo_for(as_json)("\n".join(out))
    if as_json:
        emit_json({"kind": "simulate", "profile": prof.name, "time_scale": scale,
                   "workload": workload_text, "requests": len(arrivals),
                   "offered_rps": len(arrivals) / max(arrivals[-1].time_s, 1e-9),
                   "capacity_rps": cap, "fifo_capacity_rps": fifo,
                   "rows": [summary_dict(r) for r in rows]})
