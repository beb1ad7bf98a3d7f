"""Benchmark mode: the load-test recipe for driving an explicit model past capacity with
perf_analyzer.

By design the plugin refuses a request whose deadline it can no longer meet: it answers
``UNAVAILABLE`` ("deadline infeasible") at the next scheduling step (profile key
``control.infeasible_policy: reject``, the default). perf_analyzer 2.51 has no option to go
on after an error response: it stops at the first one and exits 99, so past the knee it
measures nothing. Benchmark mode reloads the model through Triton's model-load API with the
model-config parameter ``control.infeasible_policy=serve_late``: such a request is served
after the feasible work instead (late, so it counts as a missed SLA), and every request gets
a response. The original config is loaded back afterwards.

The shipped default (intake hold) has no queue policy in front. A model configured with a
bound on Triton's queue (``default_queue_policy { max_queue_size }``) is refused at once
past it, which perf_analyzer would stop at too, so benchmark mode also lifts that bound (0:
unbounded) and says so. It changes nothing else: those two settings are the whole
difference, and the text every caller reports names each one it changed.

Two more limits apply to any run past capacity: the queue grows by (offered - capacity)
requests per second and a request beyond ``scheduler.max_queued_requests`` (4096 by default) is
still refused (``queue full``), so keep the run bounded (``--max-trials``,
``--measurement-interval``, ``--stability-percentage 1000``: an overloaded rate never
stabilises) or raise that key too.

From a shell (the server needs ``--model-control-mode=explicit``, which ``make serve`` uses;
``python -m operator_tools.benchmark_mode`` takes the same arguments)::

    .venv/bin/explicit-batching benchmark-mode --url localhost:8000 --model emulated_explicit on
    scripts/perf_analyzer -m emulated_explicit -u localhost:8000 --async --request-rate-range 286 \\
        --measurement-interval 3000 --max-trials 3 --stability-percentage 1000 \\
        --input-data perf_analyzer_configs/mixed_sla.json
    .venv/bin/explicit-batching benchmark-mode --url localhost:8000 --model emulated_explicit off

A server that cannot reload models takes the line
``parameters { key: "control.infeasible_policy" value: { string_value: "serve_late" } }``
appended to the model's ``config.pbtxt`` instead (then restart it).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import click

from . import live
from .live import LoadRefused

POLICY_KEY = "control.infeasible_policy"
SERVE_LATE = "serve_late"
RECIPE = {POLICY_KEY: SERVE_LATE}
# What the report says about the requests the model would have refused.
# Where "on" keeps the queue bound it lifted, for "off" to put back (no dot: not a profile
# key; a known parameter of the plugin, which does not act on it).
RESTORE_KEY = "benchmark_mode_restore_max_queue_size"
SERVED_LATE_NOTE = ("requests the plugin would refuse as deadline-infeasible (UNAVAILABLE) "
                    "were served late instead and count as missed SLAs")


def _queue_bound(config: Mapping[str, Any]) -> int:
    """Triton's own queue bound in front of the model (``default_queue_policy``'s
    ``max_queue_size``; 0: none). Triton's JSON form gives it as a string."""
    policy = (config.get("dynamic_batching") or {}).get("default_queue_policy") or {}
    return int(policy.get("max_queue_size", 0) or 0)


def benchmark_config(config: Mapping[str, Any]) -> dict | None:
    """``config`` (Triton's JSON form) with ``control.infeasible_policy=serve_late`` and
    Triton's queue in front unbounded (intake hold ships it bounded: past it Triton refuses
    at once), or None when it already serves late with no such bound."""
    if live.parameter(config, POLICY_KEY) == SERVE_LATE and not _queue_bound(config):
        return None
    bound = _queue_bound(config)
    out = live.with_parameters(config, {**RECIPE, **({RESTORE_KEY: str(bound)} if bound else {})})
    if bound:
        out["dynamic_batching"]["default_queue_policy"]["max_queue_size"] = 0
    return out


def normal_config(config: Mapping[str, Any]) -> dict:
    """``config`` out of benchmark mode: the profile's policy again, and Triton's queue bound
    that ``benchmark_config`` lifted put back."""
    out = live.with_parameters(config, {POLICY_KEY: None, RESTORE_KEY: None})
    bound = live.parameter(config, RESTORE_KEY)
    if bound:
        policy = out.setdefault("dynamic_batching", {}).setdefault("default_queue_policy", {})
        policy["max_queue_size"] = int(bound)
    return out


@dataclass
class BenchmarkMode:
    """What happened to the model: ``applied`` when it was reloaded with serve_late,
    ``text`` a sentence for a report, ``restored`` what was done at the end."""

    applied: bool
    serves_late: bool
    text: str
    restored: str = ""


@contextmanager
def benchmark_mode(control, original: Mapping[str, Any] | None = None,
                   warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
                   ) -> Iterator[BenchmarkMode]:
    """Run the block with the model in benchmark mode (``control``: a ``live.ModelControl``;
    ``original``: its current config, read when not given), its original config loaded back
    afterwards. A server that refuses the reload (not in explicit model-control mode) runs
    the block as configured, and ``text`` says so."""
    original = control.config() if original is None else original
    changed = benchmark_config(original)
    if changed is None:
        yield BenchmarkMode(False, True, f"the model already runs with {POLICY_KEY}="
                                         f"{SERVE_LATE}: {SERVED_LATE_NOTE}")
        return
    try:
        control.load(changed)
    except LoadRefused as exc:
        line = (f"the server refused to reload the model with {POLICY_KEY}={SERVE_LATE} "
                f"({exc}); measured as configured, so perf_analyzer stops at the first "
                "refused request (start the server with --model-control-mode=explicit, or "
                f"set the model-config parameter {POLICY_KEY}={SERVE_LATE} in its config.pbtxt)")
        warn(f"warning: {line}")
        yield BenchmarkMode(False, False, line)
        return
    bound = _queue_bound(original)
    lifted = (f" and Triton's queue bound in front (max_queue_size {bound}) lifted"
              if bound else "")
    mode = BenchmarkMode(True, True, f"benchmark mode: the model was reloaded with "
                                     f"{POLICY_KEY}={SERVE_LATE}{lifted} for the run; "
                                     f"{SERVED_LATE_NOTE}")
    try:
        yield mode
    finally:
        try:
            control.load(original)
            mode.restored = "its original config was loaded back after the run"
        except LoadRefused as exc:
            mode.restored = (f"RESTORING THE ORIGINAL CONFIG FAILED ({exc}): the model still "
                             f"runs with {POLICY_KEY}={SERVE_LATE}")
            warn(f"error: {mode.restored}")


@click.command(name="benchmark-mode")
@click.option("--url", default="localhost:8000", show_default=True,
              help="HTTP host:port of the server (started with --model-control-mode=explicit).")
@click.option("--model", required=True, help="The explicit-control model to switch.")
@click.argument("state", type=click.Choice(["on", "off"]))
@click.pass_context
def command(ctx: click.Context, url: str, model: str, state: str) -> None:
    """Switch an explicit model's benchmark mode (control.infeasible_policy=serve_late,
    Triton's queue bound lifted) ON or OFF through Triton's model-load API."""
    control = live.ModelControl(url, model)
    try:
        config = control.config()
        target = benchmark_config(config) if state == "on" else normal_config(config)
        if target is None or (state == "off" and live.parameter(config, POLICY_KEY) is None):
            click.echo(f"{model}: benchmark mode already {state}")
            return
        control.load(target)
    except LoadRefused as exc:
        raise click.ClickException(f"{model}: the server refused the reload ({exc}); it "
                                   "needs --model-control-mode=explicit") from None
    finally:
        control.close()
    click.echo(f"{model}: reloaded with {POLICY_KEY}="
               f"{SERVE_LATE if state == 'on' else '(profile default)'}")


def main(argv: list[str] | None = None) -> int:
    """``python -m operator_tools.benchmark_mode``: ``explicit-batching benchmark-mode``."""
    from .server_cmds import run_as_module  # noqa: PLC0415

    return run_as_module(command, argv, "python -m operator_tools.benchmark_mode")


if __name__ == "__main__":  # pragma: no cover - command line
    sys.exit(main())
