"""The ``compare`` click command and its steps: options, the workload, the explicit model's
policy for the run, and the segments in order.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

import click

from .. import live
from .. import report
from ..benchmark_mode import benchmark_mode
from ..measure import default_metrics_url
from ..output import echo_for, emit_json, json_option, summary_dict
from ..workload_spec import (LENGTH_MIXES, SpecError, WorkloadSpec, apply_overrides,
                             load_workload_spec, parse_float_list)
from simulation import workload as W
from .model_info import ModelInfo, http_base, local_profile, model_info
from .outcome import (fifo_and_capacity, raw_counter_busy, report_text, run_warnings,
                      summarise_models, write_plot, write_requests_csv)
from .segments import load_trace_inputs, run_segments, write_inputs


DEFAULT_SPEC = WorkloadSpec(name="compare default", arrival="poisson",
                            arrival_params={"rate_rps": 60.0}, lengths="lognormal",
                            length_params={"median": 64.0, "sigma": 0.8, "lo": 16, "hi": 512},
                            duration_s=10.0, seed=20240601, source="compare defaults")


@click.command(name="compare")
@click.option("--url", default="localhost:8000", show_default=True,
              help="HTTP host:port of the running tritonserver")
@click.option("--metrics-url", help="Triton metrics endpoint (default: http://host:<port+2>/metrics)")
@click.option("--model", "model_base",
              help="compare <model>_explicit with <model>_native (or name both with "
                   "--explicit-model and --native-model)")
@click.option("--explicit-model", help="explicit model name (default <model>_explicit)")
@click.option("--native-model", help="native model name (default <model>_native)")
@click.option("--workload", "workload_path", type=click.Path(exists=True, dir_okay=False),
              help="workload spec YAML (perf_analyzer_configs/workloads/); its duration_s is "
                   "one segment's; profile and time_scale are ignored (the server's count)")
@click.option("--arrival", type=click.Choice(["poisson", "bursty"]),
              help="arrival process (default poisson; bursty: 3x the rate for ~0.25 s, "
                   "half of it for ~1 s between bursts)")
@click.option("--rate", type=float, help="mean offered rate in req/s (default 60)")
@click.option("--duration-s", type=float, help="length of one segment's trace (default 10)")
@click.option("--segments", type=click.IntRange(2), default=4, show_default=True,
              help="segments in all, alternating explicit, native, explicit, ...")
@click.option("--seed", type=int, help="workload seed (default 20240601)")
@click.option("--lengths", type=click.Choice(sorted(LENGTH_MIXES)), help="length mix")
@click.option("--sla-classes", help="SLA classes in ms at real-hardware speed (default "
              "50,100,200), multiplied by the model's time scale")
@click.option("--request-intervals", type=click.Path(exists=True, dir_okay=False),
              help="replay this perf_analyzer trace instead (e.g. perf_analyzer_configs/"
                   "traces/bursty_60rps_20s.intervals; needs --input-data)")
@click.option("--input-data", type=click.Path(exists=True, dir_okay=False),
              help="input data with SLA_MS for --request-intervals (e.g. perf_analyzer_configs/"
                   "mixed_sla.json); SLAs are multiplied by the time scale")
@click.option("--out", "out_dir", default=os.path.join("results", "compare"), show_default=True,
              type=click.Path(file_okay=False), help="folder for the report and the plot")
@click.option("--name", default="compare", show_default=True,
              help="file stem: <out>/<name>.md and <out>/<name>.png")
@click.option("--keep-data", is_flag=True, help="also keep the trace, the input data, "
              "perf_analyzer's exports and a per-request CSV in <out>/<name>_data/")
@click.option("--gap-s", type=float, default=1.0, show_default=True,
              help="pause between segments (the server settles)")
@click.option("--scrape-period-s", type=float, default=1.0, show_default=True)
@click.option("--note", help="a line of free text for the report (e.g. how the server was started)")
@click.option("--infeasible-policy", type=click.Choice(["serve_late", "as-configured"]),
              default="serve_late", show_default=True,
              help="serve_late: reload the explicit model with control.infeasible_policy="
                   "serve_late for the run (perf_analyzer stops at the first refused request), "
                   "original config restored after; as-configured: leave it as it is")
@json_option
def command(url, metrics_url, model_base, explicit_model, native_model, workload_path,
            arrival, rate, duration_s, segments, seed, lengths, sla_classes,
            request_intervals, input_data, out_dir, name, keep_data, gap_s, scrape_period_s,
            note, infeasible_policy, as_json) -> None:
    """Explicit vs native on a live server: the same trace, alternating segments."""
    ctx = click.get_current_context()
    check_trace_options(request_intervals, input_data, workload_path, arrival, rate,
                        duration_s, lengths, sla_classes, seed)
    if not model_base and not (explicit_model and native_model):
        raise click.UsageError("name the models: --model BASE (BASE_explicit and BASE_native) "
                               "or --explicit-model and --native-model")
    http = http_base(url)
    metrics_url = metrics_url or _metrics_url_of(url)
    explicit_model = explicit_model or f"{model_base}_explicit"
    native_model = native_model or f"{model_base}_native"
    xi, ni, warnings = read_model_pair(http, explicit_model, native_model)
    scale = xi.time_scale

    # The workload, written once; every segment replays the same files.
    profile = local_profile({"hardware_profile": xi.hardware_profile or ""})
    default_sla = profile.scheduler.default_sla_ms if profile else 200.0
    offsets_ms, entries, workload_text = build_workload(
        request_intervals, input_data, workload_path, scale, default_sla, arrival=arrival,
        rate=rate, lengths=lengths, sla_classes=sla_classes, duration_s=duration_s, seed=seed)

    workdir = _make_workdir(out_dir, name, keep_data)
    try:
        intervals, data_sla, data_plain, table = write_inputs(workdir, offsets_ms, entries)
        n = len(offsets_ms)
        trace_s = offsets_ms[-1] / 1000.0
        with _explicit_policy(url, explicit_model, infeasible_policy) as mode:
            runs, scraper = run_segments(url, metrics_url, http, (explicit_model, native_model),
                                         segments, workdir, intervals, (data_sla, data_plain),
                                         offsets_ms, table, gap_s, scrape_period_s)
        note = "\n\n".join(line for line in (note, _policy_line(mode, explicit_model)) if line)
        samples = scraper.samples

        summaries, series, latencies = summarise_models(runs, samples, explicit_model,
                                                        native_model)
        ok_runs = [s for s in runs if s.ok]
        t0 = min((s.start_ns for s in ok_runs), default=samples[0].t_ns if samples else 0)

        png = os.path.join(out_dir, f"{name}.png")
        write_plot(png, ok_runs, (explicit_model, native_model), latencies, series, t0,
                   sorted({e["SLA_MS"]["content"][0] for e in entries}),
                   title=_plot_title(xi, native_model))
        if keep_data:
            write_requests_csv(os.path.join(workdir, "requests.csv"), runs, t0)

        raw_busy = raw_counter_busy(samples, ok_runs, (explicit_model, native_model))
        failed = [s for s in runs if not s.ok]
        fifo_cap = (fifo_and_capacity(profile, xi, ni, [e_len for e_len, _ in table.values()])
                    if profile is not None and xi.emulated else None)
        warnings += run_warnings(runs, scraper)
        text = report_text(
            command_line=report.command_line(ctx), note=note, http=http,
            metrics_url=metrics_url, xi=xi, ni=ni, workload_text=workload_text,
            offered=n / max(trace_s, 1e-9), fifo_cap=fifo_cap, runs=runs, gap_s=gap_s,
            n=n, rows=[summaries["explicit"], summaries["native"]], raw_busy=raw_busy,
            scrape_period_s=scrape_period_s, warnings=warnings, name=name)
        with open(os.path.join(out_dir, f"{name}.md"), "w", encoding="utf-8") as fh:
            fh.write(text)
    finally:
        if not keep_data:
            shutil.rmtree(workdir, ignore_errors=True)
    echo_for(as_json)(text)
    if as_json:
        emit_json({"kind": "compare", "explicit_model": explicit_model,
                   "native_model": native_model, "segments": segments,
                   "failed_segments": len(failed), "offered_rps": n / max(trace_s, 1e-9),
                   "rows": [summary_dict(summaries[r]) for r in ("explicit", "native")],
                   "warnings": warnings, "report": os.path.join(out_dir, f"{name}.md")})
    click.echo(f"wrote {os.path.join(out_dir, name + '.md')} and {png}", err=True)
    if failed:
        raise click.ClickException(f"{len(failed)} of {segments} segments failed (see the "
                                   f"report's warnings)")

# -- the command's steps ------------------------------------------------------------------------

@contextlib.contextmanager
def _explicit_policy(url: str, model: str, policy: str):
    """The explicit model in benchmark mode for the block (``policy`` serve_late), or as
    configured (yields None)."""
    if policy != "serve_late":
        yield None
        return
    control = live.ModelControl(url.split("://", 1)[-1], model)
    try:
        with benchmark_mode(control, warn=lambda line: click.echo(line, err=True)) as mode:
            yield mode
    finally:
        control.close()


def _policy_line(mode, model: str) -> str:
    """The report's sentence on how the explicit model treated infeasible requests."""
    if mode is None:
        return (f"`{model}` ran as configured (`--infeasible-policy as-configured`): a request "
                "it refuses as deadline-infeasible ends its segment (perf_analyzer stops at the "
                "first error).")
    return f"`{model}`: {mode.text}" + (f"; {mode.restored}" if mode.restored else "") + "."


def _make_workdir(out_dir: str, name: str, keep_data: bool) -> str:
    """The folder for the trace, the inputs and the exports: ``<out>/<name>_data`` when
    they are kept, else a temporary one."""
    os.makedirs(out_dir, exist_ok=True)
    keep_dir = os.path.join(out_dir, f"{name}_data")
    workdir = keep_dir if keep_data else tempfile.mkdtemp(prefix="compare-")
    os.makedirs(workdir, exist_ok=True)
    return workdir


def _plot_title(xi: ModelInfo, native_model: str) -> str:
    return (f"{xi.name} vs {native_model} - "
            f"{'EMULATED ' if xi.emulated else ''}"
            f"{xi.hardware_profile or ''} device, time scale {xi.time_scale:g}")


def _metrics_url_of(url: str) -> str:
    """The metrics page next to the HTTP endpoint; BadParameter when it cannot be told."""
    try:
        return default_metrics_url(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None


def check_trace_options(request_intervals, input_data, workload_path, arrival, rate,
                        duration_s, lengths, sla_classes, seed) -> None:
    """A fixed trace (``--request-intervals`` + ``--input-data``) or a workload, not both."""
    if (request_intervals is None) != (input_data is None):
        raise click.UsageError("--request-intervals and --input-data go together")
    if request_intervals and (workload_path or arrival or rate or duration_s or lengths
                              or sla_classes or seed is not None):
        raise click.UsageError("--request-intervals replays a fixed trace: drop the workload "
                               "options (--workload, --arrival, --rate, --duration-s, "
                               "--lengths, --sla-classes, --seed)")


def read_model_pair(http: str, explicit_model: str, native_model: str
                    ) -> tuple[ModelInfo, ModelInfo, list[str]]:
    """Both models' configs; refuses an explicit model without SLA_MS, warns when the two
    run at different time scales."""
    xi, ni = model_info(http, explicit_model), model_info(http, native_model)
    if not xi.declares_sla:
        raise click.ClickException(f"{explicit_model} declares no SLA_MS input: not an "
                                   f"explicit-control model")
    warnings = []
    if ni.time_scale != xi.time_scale:
        warnings.append(f"the two models run at different time scales ({xi.time_scale:g} vs "
                        f"{ni.time_scale:g}): SLAs are scaled by the explicit model's")
    return xi, ni, warnings


def build_workload(request_intervals, input_data, workload_path, scale: float,
                   default_sla: float, **overrides) -> tuple[list[float], list[dict], str]:
    """(send offsets in ms, input-data entries with SLA_MS, a sentence for the report): a
    shipped trace, or the workload spec with the command-line overrides."""
    try:
        if request_intervals:
            offsets_ms, entries = load_trace_inputs(request_intervals, input_data, scale,
                                                    default_sla)
            workload_text = (f"perf_analyzer trace `{request_intervals}` "
                             f"({len(offsets_ms):,} requests over {offsets_ms[-1] / 1000:.1f} s)"
                             f" with the sequences and SLAs of `{input_data}` (send k uses "
                             f"entry k, cycling), SLA_MS x time scale {scale:g}")
        else:
            spec = load_workload_spec(workload_path) if workload_path else DEFAULT_SPEC
            sla_classes = overrides.pop("sla_classes")
            spec = apply_overrides(
                spec, sla_classes=parse_float_list(sla_classes, "--sla-classes")
                if sla_classes else None, **overrides)
            arrivals = spec.arrivals(scale)
            if not arrivals:
                raise click.ClickException("the workload holds no requests")
            offsets_ms = [a.time_s * 1000.0 for a in arrivals]
            entries = W.input_data(arrivals, spec.seed, include_sla=True)["data"]
            workload_text = spec.describe(scale) + f", {len(arrivals):,} requests per segment"
    except (SpecError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    return offsets_ms, entries, workload_text
