"""Run perf_analyzer 2.51 (found on PATH or beside this Python, see ``resources``), read
its CSV result and its profile export, and read the sweep definitions in
``perf_analyzer_configs/sweeps/``.

Three ways to drive it:

* :func:`run_request_rate`: one open-loop run at a fixed rate (``--request-rate-range``),
  read back from the CSV (``-f``): aggregate throughput and percentiles.
* :func:`replay_trace`: one replay of a recorded arrival trace (``--request-intervals``,
  exactly ``--request-count`` requests, no warm-up), read back from the profile export
  (``--profile-export-file``): every request's send and response timestamps and the
  inputs it carried (``records.RequestRecord``, its wall-clock nanoseconds exact).
* :func:`run_poisson`: Poisson arrivals at a rate (``--request-distribution poisson``),
  read back from the profile export like a replay.
* :func:`load_sweep`: a request-rate sweep definition (YAML) turned into the options of
  one perf_analyzer run per rate.

perf_analyzer stops a run at the first failed request ("Failed to retrieve results from
inference request", one "Thread [i] had error: ..." line per worker) and then writes no
export: :func:`run_exported` (under both) returns the error lines instead of requests.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Sequence

import yaml

from .records import RequestRecord, exported_record
from .resources import configs_dir, find_perf_analyzer, perf_analyzer_env

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The checkout's shell wrapper, for scripts that run perf_analyzer themselves; the
# functions here do not need it (an installed wheel has no scripts/).
WRAPPER = os.path.join(REPO_ROOT, "scripts", "perf_analyzer")
CONFIGS_DIR = configs_dir()
FELL_BEHIND = "not able to keep up with the desired request rate"
_THREAD_ERROR = re.compile(r"Thread \[\d+\] had error: (.*)")


@dataclass(frozen=True)
class PerfResult:
    model: str
    request_rate: float
    throughput: float  # responses per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    server_queue_ms: float
    kept_schedule: bool  # False when perf_analyzer said it fell behind the request rate
    output: str


def run_request_rate(url: str, model: str, input_data: str, rate: float,
                     measurement_ms: int = 4000, protocol: str = "http",
                     extra: tuple[str, ...] = (), timeout_s: float = 300,
                     concurrency: int = 0) -> PerfResult:
    """One open-loop perf_analyzer run (``--async --request-rate-range rate``), or with
    ``concurrency`` > 0 a closed-loop one (``--concurrency-range``; ``rate`` is ignored)."""
    load = (["--concurrency-range", str(concurrency)] if concurrency > 0
            else ["--request-rate-range", f"{rate:g}"])
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = os.path.join(tmp, "result.csv")
        cmd = [find_perf_analyzer(), "-m", model, "-u", url, "-i", protocol, "--async",
               "--input-data", input_data, *load,
               "--measurement-interval", str(measurement_ms), "-f", csv_path, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env=perf_analyzer_env())
        output = proc.stdout + proc.stderr
        if proc.returncode != 0 or not os.path.exists(csv_path):
            raise RuntimeError(f"perf_analyzer failed ({proc.returncode}) for {model}:\n{output}")
        with open(csv_path) as fh:
            row = next(csv.DictReader(fh))
    us = lambda key: float(row[key]) / 1000.0  # noqa: E731 - CSV latencies are in microseconds
    return PerfResult(model=model, request_rate=rate,
                      throughput=float(row["Inferences/Second"]),
                      p50_ms=us("p50 latency"), p90_ms=us("p90 latency"),
                      p99_ms=us("p99 latency"), server_queue_ms=us("Server Queue"),
                      kept_schedule=FELL_BEHIND not in output, output=output)


def markdown_table(results: list[PerfResult]) -> str:
    lines = ["| model | offered rate (req/s) | throughput (req/s) | p50 (ms) | p90 (ms) | "
             "p99 (ms) | load generator kept schedule |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r.model} | {r.request_rate:g} | {r.throughput:.1f} | {r.p50_ms:.2f} | "
                     f"{r.p90_ms:.2f} | {r.p99_ms:.2f} | {'yes' if r.kept_schedule else 'NO'} |")
    return "\n".join(lines)


# -- trace replay with the profile export ---------------------------------------------------

@dataclass(frozen=True)
class TraceRun:
    """One ``--request-intervals`` replay. ``error`` is set when perf_analyzer failed
    (then ``requests`` is empty)."""

    model: str
    command: tuple[str, ...]
    returncode: int
    output: str = field(repr=False)
    window_start_ns: int | None  # the schedule's time 0 (the export's first window boundary)
    requests: tuple[RequestRecord, ...] = field(repr=False)
    error: str | None = None

    @property
    def kept_schedule(self) -> bool:
        return FELL_BEHIND not in self.output


def _flat_ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, list):
        out: list[int] = []
        for v in value:
            out.extend(_flat_ints(v))
        return tuple(out)
    return (int(value),)


def _first_float(value: Any) -> float | None:
    while isinstance(value, list):
        if not value:
            return None
        value = value[0]
    return None if value is None else float(value)


def read_profile_export(path: str) -> tuple[int | None, list[RequestRecord]]:
    """(start of the first measurement window in ns, requests sorted by send time) of a
    perf_analyzer 2.51 ``--profile-export-file`` (last experiment)."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    try:
        experiment = doc["experiments"][-1]
        raw = experiment["requests"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"{path}: not a perf_analyzer profile export "
                         f"(no experiments[-1].requests)") from None
    bounds = experiment.get("window_boundaries") or []
    out = []
    for r in raw:
        inputs = r.get("request_inputs") or {}
        responses = r.get("response_timestamps") or []
        out.append(exported_record(
            sent_ns=int(r["timestamp"]),
            response_ns=int(responses[-1]) if responses else None,
            input_ids=_flat_ints(inputs.get("INPUT_IDS", [])),
            sla_ms=_first_float(inputs.get("SLA_MS"))))
    out.sort(key=lambda e: e.sent_ns)
    return (int(bounds[0]) if bounds else None), out


def failure_reason(output: str) -> str:
    """perf_analyzer's own words for a failed run: the distinct per-thread errors, else
    its last lines."""
    errors = sorted(set(_THREAD_ERROR.findall(output)))
    if errors:
        return "; ".join(errors)
    tail = [line for line in output.strip().splitlines() if line.strip()][-3:]
    return " / ".join(tail) or "no output"


REPLAY_HUNG = "perf_analyzer did not finish"  # how a replay that ran past its timeout is told


def replay_trace(url: str, model: str, intervals_path: str, input_data: str,
                 request_count: int, export_path: str, protocol: str = "http",
                 timeout_s: float = 600, extra: Sequence[str] = ()) -> TraceRun:
    """Replay a ``--request-intervals`` trace once: ``request_count`` requests (send k at
    the k-th cumulative interval with data entry k, cycling), asynchronous (open loop),
    every request's timestamps written to ``export_path``.

    One worker thread (``--max-threads 1``): perf_analyzer 2.51 starts its workers with an
    unlocked notify (``RequestRateManager::ResumeWorkers``), and a worker that misses it
    sleeps for good, its share of the requests never sent and the replay waiting for them
    (docs/platform.md). With one worker a replay that hangs so sent nothing at all."""
    return run_exported(url, model, input_data, ("--request-intervals", intervals_path,
                                                 "--request-count", str(request_count),
                                                 "--max-threads", "1"),
                        export_path, protocol, timeout_s, extra)


def run_poisson(url: str, model: str, input_data: str, rate_rps: float, measure_ms: int,
                export_path: str, protocol: str = "grpc", timeout_s: float = 300,
                trials: int = 3) -> TraceRun:
    """Poisson arrivals at ``rate_rps`` (``--request-distribution poisson``), ``trials``
    measurement windows of ``measure_ms`` each, every window counted as stable (as
    ``RequestRateSweep``), every request's timestamps written to ``export_path``."""
    return run_exported(url, model, input_data, (
        "--request-rate-range", f"{rate_rps:g}", "--request-distribution", "poisson",
        "--measurement-interval", str(measure_ms), "--max-trials", str(trials),
        "--stability-percentage", "1000"), export_path, protocol, timeout_s)


def run_exported(url: str, model: str, input_data: str, load: Sequence[str],
                 export_path: str, protocol: str = "http", timeout_s: float = 600,
                 extra: Sequence[str] = ()) -> TraceRun:
    """One asynchronous (open-loop) perf_analyzer run under the ``load`` options, every
    request's timestamps written to ``export_path`` (replaced if it exists: perf_analyzer
    refuses an existing export path). A failed run (perf_analyzer stops at the first
    request answered with an error) has ``error`` set to its own words."""
    if os.path.exists(export_path):
        os.remove(export_path)
    cmd = (find_perf_analyzer(), "-m", model, "-u", url, "-i", protocol, "--async",
           *load, "--input-data", input_data, "--profile-export-file", export_path, *extra)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env=perf_analyzer_env())
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(
            exc.stdout, bytes) else (exc.stdout or "")
        tail = " / ".join(line.strip() for line in output.splitlines()[-3:] if line.strip())
        return TraceRun(model, cmd, -1, output, None, (),
                        f"{REPLAY_HUNG} within {timeout_s:.0f} s"
                        + (f" (its last output: {tail[:300]})" if tail else ""))
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 or not os.path.exists(export_path):
        return TraceRun(model, cmd, proc.returncode, output, None, (),
                        f"perf_analyzer failed (exit {proc.returncode}): "
                        f"{failure_reason(output)}")
    start_ns, requests = read_profile_export(export_path)
    return TraceRun(model, cmd, proc.returncode, output, start_ns, tuple(requests))


# -- sweep definitions --------------------------------------------------------------------

@dataclass(frozen=True)
class RequestRateSweep:
    """``perf_analyzer_configs/sweeps/*.yaml`` (keys: perf_analyzer_configs/README.md):
    one open-loop perf_analyzer run per rate. Input-data paths are absolute."""

    name: str
    description: str
    request_rates_rps: tuple[float, ...]
    run_duration_s: float  # the measurement window of each run
    input_data: str  # with SLA_MS, for *_explicit models
    input_data_no_sla: str  # the same sequences without SLA_MS, for *_native models
    request_distribution: str = "poisson"
    max_trials: int = 3
    source: str = "<mapping>"

    def perf_analyzer_args(self, rate_rps: float, with_sla: bool = True) -> list[str]:
        """The perf_analyzer options of the run at ``rate_rps`` (add -m, -u, -f). Every
        window counts as stable (``--stability-percentage 1000``): Poisson arrivals over
        a few seconds vary by more than the default 10 %, and an overloaded rate - which
        a sweep must reach - never stabilises; perf_analyzer would report nothing."""
        return ["--async", "--request-rate-range", f"{rate_rps:g}",
                "--request-distribution", self.request_distribution,
                "--measurement-interval", str(int(round(self.run_duration_s * 1000))),
                "--max-trials", str(self.max_trials), "--stability-percentage", "1000",
                "--input-data", self.input_data if with_sla else self.input_data_no_sla]


_SWEEP_KEYS = {"name", "description", "request_rates_rps", "run_duration_s", "input_data",
               "input_data_no_sla", "request_distribution", "max_trials"}


def load_sweep(path: str) -> RequestRateSweep:
    """Read and validate a request-rate sweep (``yaml.safe_load``); errors name the file
    and the key. Relative input-data paths are taken from the sweep file's folder's
    parent (``perf_analyzer_configs/``)."""
    def bad(key: str, value: Any, why: str) -> ValueError:
        return ValueError(f"sweep {path}: key '{key}': {why} (got {value!r})")

    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"sweep {path}: cannot be read: {exc}") from None
    if not isinstance(raw, dict):
        raise bad("<document>", raw, "must be a mapping")
    for key in raw:
        if key not in _SWEEP_KEYS:
            raise bad(key, raw[key], f"unknown key; expected one of {sorted(_SWEEP_KEYS)}")
    rates = raw.get("request_rates_rps")
    if (not isinstance(rates, list) or not rates
            or not all(isinstance(r, (int, float)) and not isinstance(r, bool)
                       and math.isfinite(r) and r > 0 for r in rates)):
        raise bad("request_rates_rps", rates, "a non-empty list of rates > 0 (req/s)")
    duration = raw.get("run_duration_s")
    if (not isinstance(duration, (int, float)) or isinstance(duration, bool)
            or not math.isfinite(duration) or duration <= 0):
        raise bad("run_duration_s", duration, "a number of seconds > 0")
    distribution = raw.get("request_distribution", "poisson")
    if distribution not in ("poisson", "constant"):
        raise bad("request_distribution", distribution, "poisson or constant")
    trials = raw.get("max_trials", 3)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise bad("max_trials", trials, "an integer >= 1")
    base = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    files = {}
    for key in ("input_data", "input_data_no_sla"):
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise bad(key, value, "a path to a perf_analyzer --input-data file")
        full = value if os.path.isabs(value) else os.path.join(base, value)
        if not os.path.isfile(full):
            raise bad(key, value, f"no such file ({full})")
        files[key] = full
    return RequestRateSweep(
        name=str(raw.get("name", os.path.splitext(os.path.basename(path))[0])),
        description=str(raw.get("description", "")),
        request_rates_rps=tuple(float(r) for r in rates), run_duration_s=float(duration),
        input_data=files["input_data"], input_data_no_sla=files["input_data_no_sla"],
        request_distribution=distribution, max_trials=trials, source=path)


if __name__ == "__main__":  # pragma: no cover - manual use
    print(run_request_rate(*sys.argv[1:5]))


def read_measured_requests(path: str) -> tuple[list[RequestRecord], list[float]]:
    """Requests inside the measurement windows of a ``--profile-export-file`` JSON, and the
    window boundaries (both in wall-clock seconds)."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    records: list[RequestRecord] = []
    windows: list[float] = []
    for experiment in doc.get("experiments", []):
        windows = [b / 1e9 for b in experiment.get("window_boundaries", [])]
        for req in experiment.get("requests", []):
            responses = req.get("response_timestamps") or []
            if not responses:
                continue
            sent = req["timestamp"] / 1e9
            if len(windows) >= 2 and not windows[0] <= sent <= windows[-1]:
                continue
            sla = (req.get("request_inputs") or {}).get("SLA_MS")
            if isinstance(sla, list):
                sla = sla[0] if sla else None
            records.append(RequestRecord(latency_ms=(responses[-1] - req["timestamp"]) / 1e6,
                                         sla_ms=float(sla) if sla is not None else None,
                                         sent_s=sent))
    return records, windows


def scaled_input_data(path: str, sla_scale: float, out_dir: str) -> str:
    """``path`` itself, or a copy in ``out_dir`` with every ``SLA_MS`` multiplied by
    ``sla_scale`` (an emulated device slowed by its time scale gets SLAs slowed alike)."""
    if sla_scale == 1.0:
        return path
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    for entry in doc.get("data", []):
        sla = entry.get("SLA_MS")
        if isinstance(sla, dict) and "content" in sla:
            sla["content"] = [float(v) * sla_scale for v in sla["content"]]
    out = os.path.join(out_dir, f"sla_x{sla_scale:g}_{os.path.basename(path)}")
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return out
