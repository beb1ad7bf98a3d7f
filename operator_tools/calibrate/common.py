"""What the calibrate commands share: the defaults, the injection points the unit tests
replace (``CalibrateDeps``), and the small readers of options and configs.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import click

from .. import live
from .. import resources
from ..live import LoadRun, PluginSnapshot
from scheduler_core.profile import HardwareProfile


# From the package when installed as a wheel, else the checkout (operator_tools.resources).
DEFAULT_REPOSITORY = resources.model_templates_dir()
DEFAULT_INPUT = os.path.join(resources.configs_dir(), "mixed_sla.json")
DEFAULT_SWEEP = os.path.join(resources.configs_dir(), "sweeps", "request_rate.yaml")


# The design's conservative start and recommended ranges (section 4.2 and 5.2).
BASELINE_ALPHA, BASELINE_BETA = 0.2, 0.1
ALPHA_RANGE, BETA_RANGE = (0.2, 0.5), (0.1, 0.3)
SAMPLE_INTERVAL_S = 0.2


@dataclass
class CalibrateDeps:
    run_load: Callable[..., LoadRun] = live.run_load
    model_control: Callable[[str, str], Any] = live.ModelControl
    sampler: Callable[[str, str, float], Any] = live.BackgroundSampler
    snapshot: Callable[[str, str], PluginSnapshot] = live.snapshot
    progress: Callable[..., Any] | None = None  # tqdm-like; None: tqdm on stderr


def progress(deps: CalibrateDeps, items, desc: str):
    if deps.progress is not None:
        return deps.progress(items, desc=desc)
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(items, desc=desc, unit="run", file=sys.stderr, dynamic_ncols=True)


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in re.split(r"[,\s]+", text.strip()) if x]
    except ValueError:
        raise click.BadParameter(f"rates must be numbers separated by commas, got {text!r}") from None
    if not rates or any(not math.isfinite(r) or r <= 0 for r in rates):
        raise click.BadParameter(f"rates must be positive numbers, got {text!r}")
    return sorted(set(rates))


def command_line(ctx: click.Context) -> str:
    """The invocation as an equivalent command line (options given on the command line)."""
    import shlex  # noqa: PLC0415

    parts = ["explicit-batching", "calibrate", ctx.info_name or "cold-start"]
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name != "COMMANDLINE":
            continue
        value = ctx.params[param.name]
        opt = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            if value:
                parts.append(opt)
        elif value is not None:
            parts += [opt, str(value)]
    return shlex.join(parts)


def show_path(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it (reports stay
    readable and portable), else absolute."""
    full, cwd = os.path.abspath(path), os.getcwd()
    return os.path.relpath(full, cwd) if os.path.commonpath([full, cwd]) == cwd else full


def profile_dir(config: Mapping[str, Any], model: str, repository: str) -> str:
    return os.path.join(repository, live.parameter(config, "profile_dir") or
                        os.path.join(model, "profiles"))


def describe_emulation(config: Mapping[str, Any], profile: HardwareProfile | None) -> tuple[str, float]:
    """("EMULATED device ... " or "", time scale) of the model."""
    if live.parameter(config, "executor") != "emulated":
        return "", 1.0
    scale = live.parameter(config, "time_scale")
    try:
        time_scale = float(scale) if scale else (profile.emulation.time_scale if profile else 1.0)
    except ValueError:
        time_scale = 1.0
    return (f"EMULATED device (a cost model slept, not a GPU), time scale {time_scale:g}: "
            f"the device runs {time_scale:g}x slower than the profile's hardware"), time_scale


def resolve_sla_scale(text: str, time_scale: float) -> float:
    if text == "auto":
        return time_scale
    try:
        value = float(text)
    except ValueError:
        raise click.BadParameter(f"--sla-scale must be a number or 'auto', got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise click.BadParameter(f"--sla-scale must be positive, got {text!r}")
    return value
