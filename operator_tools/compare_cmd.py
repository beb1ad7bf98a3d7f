"""``explicit-batching compare``: the design's A/B on a live server, in ONE run.

The same open-loop load goes to ``<x>_explicit`` and ``<x>_native`` (default
``emulated_explicit`` / ``emulated_native``) on one running tritonserver, in alternating
segments: explicit, native, explicit, native, ... Every segment replays the very same
trace (same seed: same arrival times, same sequences, same SLAs), so the two models see
identical load, and alternating spreads whatever else the machine is doing over both.

How one segment runs
    perf_analyzer 2.51 replays the trace with ``--request-intervals`` (integer
    microseconds between sends, from ``scheduler_core.workload``: Poisson or bursty
    on-off arrivals) and ``--input-data`` (one entry per request: send k carries entry k),
    ``--async`` (open loop: a slow server never slows the sender) and ``--request-count``
    = the trace's length (exactly one pass, no warm-up). The explicit model gets each
    request's SLA as the ``SLA_MS`` input; the native model gets the same sequences
    without it (perf_analyzer refuses inputs a model does not declare). A request's SLA
    class is known from its input-data entry, whichever model served it.

Why perf_analyzer's profile export (``--profile-export-file``) for per-request data
    SLA attainment is a per-request question: did THIS request, with ITS SLA, finish in
    time? perf_analyzer's CSV and summary only give aggregate percentiles over all
    requests; the profile export gives every request's send timestamp, response
    timestamp and the very inputs it carried (so its SLA and length), measured by
    Triton's own load generator in the process that sent it. From it come latency per
    SLA class, goodput, and the load generator's send lag (actual send time minus the
    trace's scheduled time: a lagging sender would quietly offer a lower load, so it is
    reported, not assumed). Server-side request statistics cannot do this: they see
    neither the client's clock nor, for the explicit model, the request's completion
    (it answers from its own thread after ``execute()`` returned).

    The cost: perf_analyzer stops a run at the first failed request and then writes no
    export. An explicit model that sheds infeasible requests (``UNAVAILABLE``, its default
    ``control.infeasible_policy: reject``) under overload would end its segment there. So
    compare runs the explicit model in benchmark mode (``operator_tools.benchmark_mode``):
    reloaded with ``control.infeasible_policy=serve_late`` for the run and its original
    config loaded back after; such requests are served late and count as missed SLAs, and
    the report says so. ``--infeasible-policy as-configured`` keeps the model as it is; a
    server that cannot reload models (not ``--model-control-mode=explicit``) measures it as
    configured, and a segment that still fails is reported and makes compare exit 1.

Utilisation fluctuation from the server's metrics
    A scraper thread reads Triton's metrics port every second (``--scrape-period-s``).
    ``nv_inference_compute_infer_duration_us`` is NOT the device's busy time for either
    model here, which the report shows side by side:

    * the explicit model owns its queue: ``execute()`` only hands requests to the
      model's scheduler thread and returns, so Triton's compute counters measure those
      hand-overs (well under a millisecond each), not the batches. Its busy fraction is
      the model's own gauge ``explicit_batching_utilization_ratio`` (the executor's
      measured busy share over its 1 s perception window; NVML utilisation instead where
      the sidecar reads a GPU) - available for the explicit model only.
    * for the native model Triton adds a batch's compute time once per REQUEST in it
      (a batch of 8 adds it 8 times), so the counter overstates the busy time by the
      batch size. Its busy fraction comes from Triton's per-batch statistics (the
      statistics extension's ``batch_stats``, ``GET /v2/models/<m>/stats``, polled with
      the metrics), whose compute time is counted once per execution.

    Utilisation fluctuation is the standard deviation of the per-second busy fraction
    over the seconds that lie inside the model's own segments.

The report says whether the device is EMULATED and its time scale, read from each model's
config through the HTTP model-config API (``GET /v2/models/<m>/config``: parameters
``executor``, ``hardware_profile``, ``time_scale``). SLA classes are given at real-hardware
speed and multiplied by that time scale, like the device's cost.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import shutil
import tempfile
import time
import urllib.error
from dataclasses import dataclass, field, replace
from typing import Sequence

import click

from scheduler_core import workload as W
from scheduler_core.profile import ProfileError
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.simulator import capacity_rps, device_ms
from scheduler_core.stats import percentile

from . import resources
from . import live
from . import perf_analyzer as pa
from . import report
from .benchmark_mode import benchmark_mode
from .measure import (EXPLICIT_GAUGE, PADDING_HISTOGRAM, busy_series, counter_busy,
                      default_metrics_url, get_json, inside, model_sampler, padding_waste)
from .records import RequestRecord
from .workload_spec import (LENGTH_MIXES, SpecError, WorkloadSpec, apply_overrides,
                            load_workload_spec, parse_float_list)

# From the package when installed as a wheel, else the checkout (operator_tools.resources).
LOCAL_REPOSITORY = resources.model_templates_dir()
DEFAULT_SPEC = WorkloadSpec(name="compare default", arrival="poisson",
                            arrival_params={"rate_rps": 60.0}, lengths="lognormal",
                            length_params={"median": 64.0, "sigma": 0.8, "lo": 16, "hi": 512},
                            duration_s=10.0, seed=20240601, source="compare defaults")


# -- the server ---------------------------------------------------------------------------------

def _http_base(url: str) -> str:
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


@dataclass(frozen=True)
class ModelInfo:
    """What the model config says about the device (``GET /v2/models/<m>/config``)."""

    name: str
    executor: str | None
    hardware_profile: str | None
    time_scale: float
    time_scale_source: str
    cost_mode: str | None
    max_batch_size: int
    max_queue_delay_us: int | None  # Triton's dynamic batcher, when configured
    declares_sla: bool

    @property
    def emulated(self) -> bool:
        return self.executor == "emulated"

    def device_text(self) -> str:
        if self.emulated:
            return (f"**EMULATED** device (executor `emulated`, hardware profile "
                    f"`{self.hardware_profile or '?'}`, time scale {self.time_scale:g} "
                    f"from {self.time_scale_source})")
        return (f"real executor `{self.executor or '?'}` (not emulated; time scale "
                f"{self.time_scale:g})")


def _local_profile(params: dict[str, str]):
    """The model's profile from this checkout's model repository, if there is one."""
    name = params.get("hardware_profile")
    folder = params.get("profile_dir", "emulated_explicit/profiles")
    if not name:
        return None
    try:
        return load_profile(profile_path(os.path.join(LOCAL_REPOSITORY, folder), name))
    except ProfileError:
        return None


def model_info(http_base: str, model: str) -> ModelInfo:
    try:
        config = get_json(f"{http_base}/v2/models/{model}/config")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read the config of model {model!r} at "
                                   f"{http_base}: {exc}") from None
    params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
    scale_text = params.get("time_scale")
    if scale_text is not None:
        try:
            scale, source = float(scale_text), "model-config parameter `time_scale`"
        except ValueError:
            raise click.ClickException(f"model {model}: parameter time_scale {scale_text!r} "
                                       f"is not a number") from None
    else:
        profile = _local_profile(params)
        if profile is not None:
            scale = profile.emulation.time_scale
            source = f"profile `{profile.name}` (emulation.time_scale; no model parameter)"
        else:
            scale, source = 1.0, "default (no `time_scale` parameter, profile not found here)"
    batching = config.get("dynamic_batching")
    delay = int(batching.get("max_queue_delay_microseconds", 0)) if batching else None
    return ModelInfo(name=model, executor=params.get("executor"),
                     hardware_profile=params.get("hardware_profile"), time_scale=scale,
                     time_scale_source=source, cost_mode=params.get("cost_mode"),
                     max_batch_size=int(config.get("max_batch_size", 0)),
                     max_queue_delay_us=delay,
                     declares_sla=any(i.get("name") == "SLA_MS" for i in config.get("input", [])))


# -- the metrics scraper ------------------------------------------------------------------------

# -- segments -----------------------------------------------------------------------------------

@dataclass
class Segment:
    index: int
    model: str
    role: str  # "explicit" or "native"
    planned: int
    run: pa.TraceRun | None = None
    requests: list[RequestRecord] = field(default_factory=list)
    start_ns: int | None = None
    end_ns: int | None = None
    unmatched: int = 0  # exported requests whose input matches no trace entry
    hung: str = ""  # a first replay that never finished (replayed once): what it said

    @property
    def ok(self) -> bool:
        return self.run is not None and self.run.error is None

    @property
    def lost(self) -> int:
        """Planned requests without a response in the export (0 for a failed segment,
        which has no export: it is reported separately)."""
        if not self.ok:
            return 0
        return self.planned - sum(1 for r in self.run.requests if r.response_ns is not None)


def match_requests(segment: Segment, scheduled_ms: Sequence[float],
                   entries: dict[tuple[int, ...], tuple[int, float]]) -> None:
    """Fill ``segment.requests`` from its export: the k-th send (by time) was scheduled
    at ``scheduled_ms[k]``; SLA and length come from the input-data entry whose
    INPUT_IDS the request carried."""
    run = segment.run
    segment.start_ns = run.window_start_ns
    if segment.start_ns is None and run.requests:
        segment.start_ns = run.requests[0].sent_ns - int(scheduled_ms[0] * 1e6)
    ends = [r.response_ns or r.sent_ns for r in run.requests]
    segment.end_ns = max(ends) if ends else segment.start_ns
    for k, r in enumerate(run.requests):
        entry = entries.get(r.input_ids)
        if entry is None:
            segment.unmatched += 1
            continue
        seq_len, sla = entry
        segment.requests.append(replace(r, scheduled_s=scheduled_ms[k % len(scheduled_ms)] / 1e3,
                                        seq_len=seq_len, sla_ms=sla))


# -- inputs -------------------------------------------------------------------------------------

def load_trace_inputs(intervals_path: str, input_data_path: str, time_scale: float,
                      default_sla_ms: float) -> tuple[list[float], list[dict]]:
    """(send offsets in ms, input-data entries with SLA_MS scaled by ``time_scale``; an
    entry without SLA_MS gets ``default_sla_ms``) of a shipped trace and data file."""
    times = W.read_request_intervals(intervals_path)
    with open(input_data_path, encoding="utf-8") as fh:
        doc = json.load(fh)
    entries = doc.get("data") if isinstance(doc, dict) else None
    if not times or not entries:
        raise click.ClickException(f"{intervals_path} / {input_data_path}: no requests")
    scaled = []
    for e in entries:
        sla = e.get("SLA_MS")
        value = float(sla["content"][0]) * time_scale if sla else default_sla_ms
        scaled.append({"INPUT_IDS": e["INPUT_IDS"], "SLA_MS": {"content": [value], "shape": [1]}})
    return [t * 1000.0 for t in times], scaled


def write_inputs(workdir: str, offsets_ms: Sequence[float], entries: Sequence[dict]
                 ) -> tuple[str, str, str, dict[tuple[int, ...], tuple[int, float]]]:
    """(intervals, data with SLA_MS, data without, content -> (length, SLA ms))."""
    intervals = os.path.join(workdir, "trace.intervals")
    with_sla = os.path.join(workdir, "input_sla.json")
    without = os.path.join(workdir, "input.json")
    W.write_request_intervals([W.Arrival(t / 1000.0, 2, 1.0) for t in offsets_ms], intervals)
    with open(with_sla, "w", encoding="utf-8") as fh:
        json.dump({"data": list(entries)}, fh, separators=(",", ":"))
    with open(without, "w", encoding="utf-8") as fh:
        json.dump({"data": [{"INPUT_IDS": e["INPUT_IDS"]} for e in entries]}, fh,
                  separators=(",", ":"))
    table = {}
    for e in entries:
        ids = tuple(int(x) for x in e["INPUT_IDS"]["content"])
        table[ids] = (len(ids), float(e["SLA_MS"]["content"][0]))
    return intervals, with_sla, without, table


# -- the report ---------------------------------------------------------------------------------

def summarise_model(role: str, model: str, segments: Sequence[Segment], samples,
                    from_gauge: bool) -> tuple[report.Summary, list, list[float]]:
    mine = [s for s in segments if s.model == model and s.ok]
    spans = [(s.start_ns, s.end_ns) for s in mine]
    requests = [r for s in mine for r in s.requests]
    series = busy_series(samples, model, from_gauge)
    busy = inside(series, spans)
    lags = []
    for s in mine:
        lags += [(r.sent_ns - s.start_ns) / 1e6 - r.scheduled_s * 1e3 for r in s.requests]
    duration_s = sum((e - s) / 1e9 for s, e in spans)
    summary = report.summarise_requests(
        role, [r.sla_ms for r in requests], [r.latency_ms for r in requests], duration_s,
        busy, unlisted=sum(s.planned - len(s.requests) for s in mine),
        lost=sum(s.lost for s in mine),
        padding_waste=padding_waste(samples, model, spans) if from_gauge else None,
        send_lag_ms=lags)
    return summary, series, [r.latency_ms for r in requests if r.latency_ms is not None]


def segment_table(segments: Sequence[Segment]) -> str:
    """One line per segment, in run order: how consistent the alternating segments were."""
    lines = ["| segment | model | span (s) | answered | goodput (req/s) | SLA attainment | "
             "P50 / P99 (ms) | lost |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for s in segments:
        if not s.ok:
            lines.append(f"| {s.index + 1} | {s.model} | - | - | - | - | - | failed |")
            continue
        lat = sorted(r.latency_ms for r in s.requests if r.latency_ms is not None)
        met = sum(1 for r in s.requests if r.latency_ms is not None and r.latency_ms <= r.sla_ms)
        span = (s.end_ns - s.start_ns) / 1e9
        lines.append(
            f"| {s.index + 1} | {s.model} | {span:.1f} | {len(lat):,} | "
            f"{met / span if span > 0 else 0.0:,.1f} | {met / s.planned:.1%} | "
            f"{report.fmt_ms(percentile(lat, 50))} / {report.fmt_ms(percentile(lat, 99))} | "
            f"{s.lost} |")
    return "\n".join(lines)


def _fmt_opt(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else fmt.format(value)


def write_requests_csv(path: str, segments: Sequence[Segment], t0_ns: int) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["segment", "model", "scheduled_ms", "sent_ms", "latency_ms", "seq_len",
                    "sla_ms", "met"])
        for s in segments:
            for r in s.requests:
                lat = r.latency_ms
                w.writerow([s.index, s.model, f"{r.scheduled_s * 1e3:.3f}",
                            f"{(r.sent_ns - t0_ns) / 1e6:.3f}",
                            "" if lat is None else f"{lat:.3f}", r.seq_len, f"{r.sla_ms:g}",
                            "" if lat is None else int(lat <= r.sla_ms)])


# -- the command --------------------------------------------------------------------------------

@click.command(name="compare")
@click.option("--url", default="localhost:8000", show_default=True,
              help="HTTP host:port of the running tritonserver")
@click.option("--metrics-url", help="Triton metrics endpoint (default: http://host:<port+2>/metrics)")
@click.option("--model", "model_base", default="emulated", show_default=True,
              help="compare <model>_explicit with <model>_native")
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
def command(url, metrics_url, model_base, explicit_model, native_model, workload_path,
            arrival, rate, duration_s, segments, seed, lengths, sla_classes,
            request_intervals, input_data, out_dir, name, keep_data, gap_s, scrape_period_s,
            note, infeasible_policy) -> None:
    """Explicit vs native on a live server: the same trace, alternating segments."""
    ctx = click.get_current_context()
    check_trace_options(request_intervals, input_data, workload_path, arrival, rate,
                        duration_s, lengths, sla_classes, seed)
    http = _http_base(url)
    metrics_url = metrics_url or _metrics_url_of(url)
    explicit_model = explicit_model or f"{model_base}_explicit"
    native_model = native_model or f"{model_base}_native"
    xi, ni, warnings = read_model_pair(http, explicit_model, native_model)
    scale = xi.time_scale

    # The workload, written once; every segment replays the same files.
    profile = _local_profile({"hardware_profile": xi.hardware_profile or ""})
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
    click.echo(text)
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


def summarise_models(runs: Sequence[Segment], samples, explicit_model: str,
                     native_model: str) -> tuple[dict, dict, dict]:
    """({role: summary}, {role: busy series}, {role: latencies}) of both models."""
    summaries, series, latencies = {}, {}, {}
    for role, model, gauge in (("explicit", explicit_model, True),
                               ("native", native_model, False)):
        summaries[role], series[role], latencies[role] = summarise_model(
            role, model, runs, samples, gauge)
    return summaries, series, latencies


def raw_counter_busy(samples, ok_runs: Sequence[Segment], models: Sequence[str]
                     ) -> dict[str, float | None]:
    """{model: what Triton's compute counter claims as its busy fraction in its segments}."""
    spans = {m: [(s.start_ns, s.end_ns) for s in ok_runs if s.model == m] for m in models}
    return {m: counter_busy(samples, m, spans[m]) for m in spans}


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


def run_segments(url: str, metrics_url: str, http: str, models: tuple[str, str],
                 segments: int, workdir: str, intervals: str, data: tuple[str, str],
                 offsets_ms: Sequence[float], table, gap_s: float, scrape_period_s: float):
    """Replay the trace ``segments`` times, alternating explicit and native, while a
    sampler reads both models' metrics. Returns (segments, the sampler)."""
    explicit_model, native_model = models
    data_sla, data_plain = data
    n = len(offsets_ms)
    trace_s = offsets_ms[-1] / 1000.0
    scraper = model_sampler(metrics_url, http, [explicit_model, native_model],
                            scrape_period_s, name="compare-scraper")
    scraper.sample_once()
    if not scraper.samples:
        raise click.ClickException(f"cannot scrape {metrics_url}: {scraper.last_error}")
    scraper.samples.clear()
    scraper.start()
    runs: list[Segment] = []
    try:
        for k in range(segments):
            role = "explicit" if k % 2 == 0 else "native"
            model = explicit_model if role == "explicit" else native_model
            click.echo(f"segment {k + 1}/{segments}: {model}, {n:,} requests over "
                       f"{trace_s:.1f} s ...", err=True)
            seg = Segment(k, model, role, n)
            for attempt in range(2):
                seg.run = pa.replay_trace(
                    url.split("://", 1)[-1], model, intervals,
                    data_sla if role == "explicit" else data_plain, n,
                    os.path.join(workdir, f"segment{k}_{model}.export.json"),
                    timeout_s=trace_s * 4 + 120)
                # perf_analyzer 2.51 has been seen to hang on a replay that the server
                # answered (once in ~5 runs here, on the native model): replay it once more,
                # and say so in the report.
                if attempt or seg.ok or not seg.run.error.startswith(pa.REPLAY_HUNG):
                    break
                seg.hung = seg.run.error
                click.echo(f"  {seg.run.error}; replaying the segment once more", err=True)
            if seg.ok:
                match_requests(seg, offsets_ms, table)
            else:
                click.echo(f"  {seg.run.error}", err=True)
            runs.append(seg)
            if k + 1 < segments:
                time.sleep(gap_s)
        time.sleep(scrape_period_s * 1.5)  # one sample past the last response
    finally:
        scraper.stop()
    return runs, scraper


def responses_per_second(ok_runs: Sequence[Segment], model: str, t0: int
                         ) -> list[tuple[float, float]]:
    """(seconds since ``t0``, responses per second) of the model's segments, each on its
    own clock; a nan point between segments breaks the line."""
    points: list[tuple[float, float]] = []
    for s in ok_runs:
        if s.model != model:
            continue
        # Responses per second of the segment's own clock; the last, partial
        # second is divided by its actual length.
        span_s = (s.end_ns - s.start_ns) / 1e9
        bins = [0] * max(1, math.ceil(span_s))
        for r in s.requests:
            if r.response_ns is not None:
                k = min(int((r.response_ns - s.start_ns) // 1_000_000_000), len(bins) - 1)
                bins[k] += 1
        widths = [min(1.0, span_s - k) if span_s > k else 1.0 for k in range(len(bins))]
        if len(bins) > 1 and widths[-1] < 0.5:  # fold a sliver into its neighbour
            bins[-2] += bins.pop()
            widths[-2] += widths.pop()
        offset = (s.start_ns - t0) / 1e9
        for k, (count, width) in enumerate(zip(bins, widths)):
            points.append((offset + k + width / 2, count / max(width, 1e-3)))
        points.append((math.nan, math.nan))  # no line across other segments
    return points


def write_plot(png: str, ok_runs: Sequence[Segment], models: tuple[str, str], latencies,
               series, t0: int, sla_lines: Sequence[float], title: str) -> None:
    """The plot: latency CDFs, per-second responses and busy fraction."""
    per_second = {role: responses_per_second(ok_runs, model, t0)
                  for role, model in zip(("explicit", "native"), models)}
    busy_pts = {role: [((s1 - t0) / 1e9, v) for s0, s1, v in series[role]
                       if s1 >= t0] for role in series}
    report.comparison_plot(
        png, latencies, per_second, busy_pts, sla_lines, title=title,
        segments=[((s.start_ns - t0) / 1e9, (s.end_ns - t0) / 1e9, s.role) for s in ok_runs])


def fifo_and_capacity(profile, xi: ModelInfo, ni: ModelInfo, lengths_all: Sequence[int]
                      ) -> tuple[float, float]:
    """(what a FIFO batcher reaches at best on these lengths, the capacity with full
    batches of similar lengths), req/s on the emulated device."""
    scale = xi.time_scale
    mb = ni.max_batch_size or profile.scheduler.max_batch_size
    cm, mode = profile.cost_model, xi.cost_mode or profile.emulation.cost_mode
    fifo_ms = sum(device_ms(cm, lengths_all[i:i + mb], mode, scale)
                  for i in range(0, len(lengths_all), mb))
    fifo = len(lengths_all) / (fifo_ms / 1000.0)
    cap = capacity_rps(cm, mode, scale, lengths_all, profile.scheduler.max_batch_size,
                       profile.scheduler.max_batch_tokens)
    return fifo, cap


def run_warnings(runs: Sequence[Segment], scraper) -> list[str]:
    """What the report must warn about: failed scrapes, unmatched exports, a lagging
    sender, failed segments."""
    warnings = []
    if scraper.failures:
        warnings.append(f"{scraper.failures} metric scrapes failed (last: "
                        f"{scraper.last_error})")
    unmatched = sum(s.unmatched for s in runs)
    if unmatched:
        warnings.append(f"{unmatched} exported requests carried inputs found in no trace "
                        f"entry (left out)")
    behind = [s for s in runs if s.ok and not s.run.kept_schedule]
    if behind:
        warnings.append(f"perf_analyzer said it could not keep up in segment(s) "
                        f"{', '.join(str(s.index + 1) for s in behind)}")
    for s in runs:
        if s.hung:
            warnings.append(f"segment {s.index + 1} ({s.model}) was replayed once: the first "
                            f"replay {s.hung[len('perf_analyzer '):]}")
        if not s.ok:
            warnings.append(f"segment {s.index + 1} ({s.model}) produced no data: "
                            f"{s.run.error}. perf_analyzer stops a run at the first error "
                            f"response: run the explicit model with --infeasible-policy "
                            f"serve_late on a server in explicit model-control mode, or lower "
                            f"--rate to stay where every request is answered")
    return warnings


def _setup_lines(http: str, metrics_url: str, xi: ModelInfo, ni: ModelInfo,
                 workload_text: str, offered: float, fifo, cap, runs, gap_s: float, n: int
                 ) -> list[str]:
    """The report's list of what ran: server, devices, native batcher, workload, segments."""
    explicit_model, native_model = xi.name, ni.name
    return [
        f"- Server: {http} (metrics {metrics_url}); {time.strftime('%Y-%m-%d %H:%M %Z')}.",
        f"- Device: `{explicit_model}`: {xi.device_text()}; `{native_model}`: "
        f"{ni.device_text()}. Read from each model's config (`GET /v2/models/<m>/config`)."
        + (" An EMULATED device sleeps for each batch's cost-model time: this compares "
           "batching policies, not hardware." if xi.emulated else ""),
        f"- Native batcher: Triton's dynamic batcher, max_batch_size {ni.max_batch_size}, "
        f"max_queue_delay_microseconds {_fmt_opt(ni.max_queue_delay_us, '{}')}.",
        f"- Workload: {workload_text}; offered {offered:,.1f} req/s"
        + (f" = {offered / fifo:.0%} of what a FIFO batcher reaches at best on these "
           f"lengths ({fifo:,.1f} req/s: full batches in arrival order) and "
           f"{offered / cap:.0%} of the capacity with full batches of similar lengths "
           f"({cap:,.1f} req/s)" if fifo else "") + ".",
        f"- Segments: {len(runs)} in one run, alternating "
        + ", ".join(s.role for s in runs) + f", {gap_s:g} s apart; each replays the same "
        f"trace with perf_analyzer `--request-intervals` (`--async`, `--request-count "
        f"{n}`), per-request timestamps from `--profile-export-file`.",
        "",
    ]


def _method_lines(runs, xi: ModelInfo, ni: ModelInfo, raw_busy, scrape_period_s: float
                  ) -> list[str]:
    """The per-segment table and how each column and the utilisation were measured."""
    explicit_model, native_model = xi.name, ni.name
    return [
        "Per segment, in run order:",
        "",
        segment_table(runs),
        "",
        "Throughput and goodput are per second of the model's own segments (first send "
        "to last response); SLA attainment = met / requests planned; P50 / P99 over "
        "answered requests, per SLA class (scaled by the time scale). lost = planned "
        "requests without a response. Send lag = actual send time minus the trace's "
        "scheduled time (perf_analyzer's schedule start is the export's first window "
        "boundary).",
        "",
        "Utilisation (util. fluctuation = std of the per-second busy fraction over the "
        "seconds inside the model's own segments; mean busy = their mean): "
        f"`{explicit_model}` from its own gauge `{EXPLICIT_GAUGE}` (the executor's busy "
        "share over its 1 s perception window, sampled every "
        f"{scrape_period_s:g} s; Triton's counters see only `execute()`, which hands "
        f"requests to the model's own queue); `{native_model}` from Triton's per-batch "
        "compute time (statistics extension `batch_stats`, polled with the metrics). "
        "Triton's `nv_inference_compute_infer_duration_us` is not busy time for either: "
        f"its growth per second averaged {_fmt_opt(raw_busy[explicit_model])} for "
        f"`{explicit_model}` (hand-overs only) and {_fmt_opt(raw_busy[native_model])} for "
        f"`{native_model}` (a batch's time added once per request in it). Padding waste: "
        f"the explicit model's mean per-batch padding share (`{PADDING_HISTOGRAM}`); "
        "Triton does not export the native model's.",
        "",
    ]


def report_text(*, command_line: str, note, http: str, metrics_url: str, xi: ModelInfo,
                ni: ModelInfo, workload_text: str, offered: float, fifo_cap, runs, gap_s: float,
                n: int, rows, raw_busy, scrape_period_s: float, warnings: Sequence[str],
                name: str) -> str:
    """The markdown report."""
    explicit_model, native_model = xi.name, ni.name
    fifo, cap = fifo_cap if fifo_cap else (None, None)
    lines = [
        f"# explicit vs native on a live server: `{explicit_model}` vs `{native_model}`",
        "",
        f"Command: `{command_line}`",
        "",
    ]
    if note:
        lines += [note, ""]
    lines += _setup_lines(http, metrics_url, xi, ni, workload_text, offered, fifo, cap, runs,
                          gap_s, n)
    lines += [
        report.summary_table(rows, ratio=("explicit", "native")),
        "",
    ]
    lines += _method_lines(runs, xi, ni, raw_busy, scrape_period_s)
    if warnings:
        lines += ["**Warnings:**", ""] + [f"- {w}" for w in warnings] + [""]
    lines += [f"![latency CDF and per-second throughput]({name}.png)", ""]
    return "\n".join(lines)
