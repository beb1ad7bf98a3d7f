"""The ``calibrate`` click group (``command``) and its sub-commands (cold-start, step, reset, table).
"""

from __future__ import annotations

import click

from ..measure import default_metrics_url
from ..output import json_option
from .cold_start import run_cold_start, reset_profile, sweep_settings
from .common import CalibrateDeps, DEFAULT_REPOSITORY
from .step_search import run_step
from .table_cmd import write_table


# Every option of the four subcommands, by name; each subcommand takes the ones it lists.
_OPTIONS = {
    "url": click.option("--url", required=True,
                        help="Triton HTTP endpoint HOST:PORT of the running server."),
    "model": click.option("--model", required=True,
                          help="The explicit-control model to calibrate."),
    "metrics_url": click.option("--metrics-url",
                                help="Triton metrics page [default: http://HOST:PORT+2/metrics]."),
    "out_path": click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True,
                             help="Profile YAML to write (its name becomes the profile name)."),
    "rates": click.option("--rates", help="Offered loads in requests/s, comma separated "
                          "[default: perf_analyzer_configs/sweeps/request_rate.yaml when present]."),
    "sweep_file": click.option("--sweep", "sweep_file",
                               type=click.Path(exists=True, dir_okay=False),
                               help="Request-rate sweep YAML (keys: perf_analyzer_configs/README.md)."),
    "measurement_ms": click.option(
        "--measurement-ms", type=click.IntRange(200, 60_000), default=None,
        help="Length of each perf_analyzer measurement window (three per run) [1000, or the "
             "sweep's run_duration_s]."),
    "request_distribution": click.option(
        "--request-distribution", type=click.Choice(["poisson", "constant"]), default=None,
        help="Arrival process of each run [poisson, or the sweep's]."),
    "input_data": click.option(
        "--input-data", type=click.Path(exists=True, dir_okay=False), default=None,
        help="perf_analyzer --input-data file [perf_analyzer_configs/mixed_sla.json]."),
    "sla_scale": click.option(
        "--sla-scale", default="auto", show_default=True,
        help="Multiply the input's SLA_MS by this ('auto': the emulated device's time scale)."),
    "protocol": click.option("--protocol", type=click.Choice(["http", "grpc"]), default="http",
                             show_default=True),
    "base_profile": click.option(
        "--base-profile", type=click.Path(exists=True, dir_okay=False),
        help="Profile to start from [default: the one the model runs, from its profiles folder]."),
    "model_repository": click.option(
        "--model-repository", type=click.Path(file_okay=False), default=DEFAULT_REPOSITORY,
        show_default="the shipped model_repository/",
        help="Where the model's profiles folder is (to find the base profile)."),
    "plot_path": click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
                              help="Load-latency curve PNG [default: load_latency.png beside --out]."),
    "report_path": click.option("--report", "report_path", type=click.Path(dir_okay=False),
                                help="Markdown report [default: calibrate.md beside --out]."),
    "baseline_path": click.option(
        "--baseline", "baseline_path", type=click.Path(dir_okay=False),
        help="Control-effect baseline JSON for monitor [default: baseline.json beside --out]."),
    "baseline_rate": click.option(
        "--baseline-rate", type=float, default=None,
        help="Offered load of the baseline run [default: the highest rate below the danger zone]."),
    "no_baseline": click.option("--no-baseline", is_flag=True, help="Skip the baseline run."),
    "step_rate": click.option("--step-rate", type=float, default=None,
                              help="Offered load of each run [default: the first of --rates]."),
    "step_size": click.option("--step-size", type=click.FloatRange(0.01, 0.3), default=0.1,
                              show_default=True,
                              help="Step of alpha and beta (0.1: the design's 10% steps)."),
    "max_steps": click.option("--max-steps", type=click.IntRange(1, 1000), default=None,
                              help="At most this many runs (settings)."),
    "infeasible_policy": click.option(
        "--infeasible-policy", type=click.Choice(["serve_late", "as-configured"]),
        default="serve_late", show_default=True,
        help="serve_late reloads each setting with control.infeasible_policy=serve_late "
             "(perf_analyzer stops at the first refused request); as-configured leaves the "
             "model's policy."),
    "profile_path": click.option("--profile", "profile_path", required=True,
                                 type=click.Path(exists=True, dir_okay=False),
                                 help="The profile to rewrite in place."),
    "table_json": click.option(
        "--table-json", type=click.Path(exists=True, dir_okay=False), default=None,
        help="A measured cost table (JSON rows of batch/length/ms, as scripts/gpu_bench.py "
             "writes). No server needed."),
    "measure_table": click.option(
        "--measure", "measure_table", is_flag=True,
        help="Measure the cost table of the real MiniLM executor on this host (--device)."),
    "table_device": click.option("--device", "table_device", default="cpu", show_default=True,
                                 help="--measure: torch device (cpu, cuda:0)."),
    "table_budget_s": click.option("--budget-s", "table_budget_s",
                                   type=click.FloatRange(0.1, 600), default=10.0,
                                   show_default=True,
                                   help="--measure / --url: wall-clock budget."),
    "table_url": click.option(
        "--url", "table_url",
        help="Measure your inner model through this running Triton endpoint HOST:PORT "
             "(HTTP, or gRPC with --protocol grpc): one [batch, length] request per run."),
    "table_model": click.option("--model", "table_model",
                                help="--url: the inner model to measure (the one the plugin "
                                     "calls, not the explicit-control model)."),
    "input_name": click.option("--input-name",
                               help="--url: the token input [default: the model's only input]."),
    "batch_sizes": click.option("--batch-sizes", help="--url: batch sizes, comma separated "
                                "[default: the base profile's grid, up to the model's "
                                "max_batch_size]."),
    "lengths": click.option("--lengths", help="--url: sequence lengths, comma separated "
                            "[default: the base profile's grid]."),
}
_SWEEP = ("url", "model", "metrics_url", "rates", "sweep_file", "measurement_ms",
          "request_distribution", "input_data", "sla_scale", "protocol", "base_profile",
          "model_repository")
# Each subcommand passes its own options to the helpers; the one shared helper that reads
# options of another subcommand, sweep_settings (cold-start and step), reads these two.
_UNSET = {"step": False, "step_rate": None}


def _options(*names: str):
    def decorate(f):
        for name in reversed(names):
            f = _OPTIONS[name](f)
        return f
    return decorate


@click.group(name="calibrate", invoke_without_command=True)
@click.option("--reset-parameters", type=click.Choice(["baseline"]), default=None,
              help="The design's spelling of `calibrate reset`: rewrite --profile with "
                   "alpha=0.2, beta=0.1.")
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False),
              help="With --reset-parameters: the profile to rewrite in place.")
@click.pass_context
def command(ctx: click.Context, reset_parameters: str | None, profile_path: str | None) -> None:
    """The design's tuning road map: cold-start (explicit control off, request-rate sweep,
    zone boundaries, a hardware profile), step (alpha/beta walk on the live model), reset
    (the conservative start) and table (a measured cost table into a profile)."""
    if ctx.invoked_subcommand is not None:
        return
    if reset_parameters:
        if not profile_path:
            raise click.UsageError("--reset-parameters baseline needs --profile PATH")
        reset_profile({"profile_path": profile_path})
        return
    click.echo(ctx.get_help())


@command.command(name="cold-start")
@_options(*_SWEEP, "out_path", "plot_path", "report_path", "baseline_path", "baseline_rate",
          "no_baseline")
@json_option
@click.pass_context
def cold_start(ctx: click.Context, **given) -> None:
    """Explicit control off, a request-rate sweep, the zone boundaries it finds, written
    into a validated profile (and a baseline for monitor)."""
    opts = {**_UNSET, **given}
    deps = ctx.find_object(CalibrateDeps) or CalibrateDeps()
    metrics_url = opts["metrics_url"] or default_metrics_url(opts["url"])
    run_cold_start(ctx, deps, opts, metrics_url, sweep_settings(opts))


@command.command(name="step")
@_options(*_SWEEP, "step_rate", "step_size", "max_steps", "infeasible_policy")
@json_option
@click.pass_context
def step(ctx: click.Context, **given) -> None:
    """Walk scheduler.alpha (0.2..0.5), then beta (0.1..0.3), on the live model: one reload
    and one perf_analyzer run per setting; goodput and P99 of each, and the best."""
    opts = {**_UNSET, **given, "step": True}
    deps = ctx.find_object(CalibrateDeps) or CalibrateDeps()
    metrics_url = opts["metrics_url"] or default_metrics_url(opts["url"])
    run_step(ctx, deps, opts, metrics_url, sweep_settings(opts))


@command.command(name="reset")
@_options("profile_path")
def reset(profile_path: str) -> None:
    """Rewrite --profile in place with the design's conservative start (alpha=0.2,
    beta=0.1), validated."""
    reset_profile({"profile_path": profile_path})


@command.command(name="table")
@_options("base_profile", "out_path", "table_json", "measure_table", "table_device",
          "table_url", "table_model", "protocol", "input_name", "batch_sizes", "lengths",
          "table_budget_s")
@json_option
def table(**given) -> None:
    """A measured cost table written into --base-profile as cost_model.table, saved to
    --out: from a file (--table-json), the MiniLM executor on this host (--measure), or
    your own inner model through its Triton endpoint (--url HOST:PORT --model NAME)."""
    write_table({**_UNSET, **given})
