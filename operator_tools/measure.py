"""What the operator tools measure on a live server, in one place: the metrics port read
through the project's one page reader (``sidecar.triton_metrics``), the per-model readings
compare and the benchmark take every second, and what they make of them (busy fractions,
padding waste).

Nothing here decides anything: the commands and scripts turn these readings into
verdicts and reports.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

from sidecar.triton_metrics import fetch_url, read_samples

EXPLICIT_GAUGE = "explicit_batching_utilization_ratio"
PADDING_HISTOGRAM = "explicit_batching_padding_waste_ratio"
QUEUE_GAUGES = ("explicit_batching_queue_depth", "nv_inference_pending_request_count")


# -- the metrics port ------------------------------------------------------------------

def default_metrics_url(url: str) -> str:
    """``http://HOST:PORT+2/metrics`` for the HTTP endpoint ``HOST:PORT`` (the layout of
    ``make serve`` and the launcher: HTTP, gRPC, metrics on consecutive ports)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.port is None:
        raise ValueError(f"cannot derive a metrics URL from {url!r} (expected host:port): "
                         "give --metrics-url")
    return f"http://{parts.hostname}:{parts.port + 2}/metrics"


def scrape(metrics_url: str, timeout_s: float = 2.0) -> str:
    """The metrics page as text."""
    return fetch_url(metrics_url, timeout_s)


def get_json(url: str, timeout_s: float = 5.0) -> Any:
    """GET one of Triton's JSON endpoints (model config, statistics)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return json.loads(resp.read().decode())


def ended_count(http_base: str, model: str, timeout_s: float = 5.0) -> int:
    """Requests ``model`` has ended since it loaded, answered or failed (Triton's statistics
    extension, ``GET /v2/models/<m>/stats``)."""
    stats = get_json(f"{http_base}/v2/models/{model}/stats", timeout_s)["model_stats"]
    return sum(int(m["inference_stats"]["success"]["count"])
               + int(m["inference_stats"]["fail"]["count"]) for m in stats)


def queue_gauges(metrics_url: str, timeout_s: float = 1.0) -> dict[tuple[str, str], float]:
    """{(metric name, model label): value} of the gauges that say how much a model holds:
    the explicit models' queue depth and Triton's pending-request count, each summed over
    the model's series (one per instance, ``model_instance``). Raises OSError when the page
    cannot be fetched, ``MetricsParseError`` when it is not a metrics page."""
    out: dict[tuple[str, str], float] = {}
    for s in read_samples(scrape(metrics_url, timeout_s)):
        if s.name in QUEUE_GAUGES:
            key = (s.name, s.labels.get("model", ""))
            out[key] = out.get(key, 0.0) + float(s.value)
    return out


# -- the one background sampler ---------------------------------------------------------

class PeriodicSampler:
    """Calls ``read()`` every ``period_s`` seconds in a daemon thread while the caller does
    something else (a load run) and keeps what it returns in ``samples`` (a None is not
    kept). A read that raises one of ``errors`` is counted in ``failures``, not fatal: a
    model's metrics vanish for a moment while it reloads.

    ``with PeriodicSampler(read, 1.0) as sampler: run(); sampler.samples``, or
    ``start()`` and ``stop()``; ``sample_once()`` reads once in the caller's thread."""

    def __init__(self, read: Callable[[], Any], period_s: float, name: str = "metrics-sampler",
                 errors: tuple[type[BaseException], ...] = (Exception,)):
        if period_s <= 0:
            raise ValueError(f"period_s must be positive (got {period_s!r})")
        self.read, self.period_s, self.errors = read, period_s, errors
        self.samples: list[Any] = []
        self.failures = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def sample_once(self) -> Any:
        """One reading, kept and returned; None when it failed."""
        try:
            value = self.read()
        except self.errors as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        if value is not None:
            self.samples.append(value)
        return value

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.period_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def start(self) -> "PeriodicSampler":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def __enter__(self) -> "PeriodicSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- per-model readings (compare, the benchmark) ------------------------------------------

@dataclass
class ModelSample:
    compute_us: float | None = None  # nv_inference_compute_infer_duration_us
    inferences: float | None = None  # nv_inference_count
    executions: float | None = None  # nv_inference_exec_count
    gauge: float | None = None  # explicit_batching_utilization_ratio
    padding_sum: float | None = None  # explicit_batching_padding_waste_ratio (histogram)
    padding_count: float | None = None
    batch_compute_ns: float | None = None  # sum of batch_stats[*].compute_infer.ns


@dataclass
class Sample:
    t_ns: int
    models: dict[str, ModelSample]


_MODEL_COUNTERS = {"nv_inference_compute_infer_duration_us": "compute_us",
                   "nv_inference_count": "inferences", "nv_inference_exec_count": "executions"}


def parse_model_samples(text: str, models: Sequence[str]) -> dict[str, ModelSample]:
    """The per-model values compare and the benchmark need from Triton's metrics text:
    counters summed over the model's series, the utilisation gauge the mean of its
    instances'."""
    out = {m: ModelSample() for m in models}
    utilization: dict[str, list[float]] = {}

    def add(sample: ModelSample, attr: str, value: float) -> None:
        setattr(sample, attr, (getattr(sample, attr) or 0.0) + value)

    for s in read_samples(text):
        model = s.labels.get("model")
        if model not in out:
            continue
        # prometheus_client names a counter's samples <family>_total.
        base = s.name[:-len("_total")] if s.name.endswith("_total") else s.name
        if base in _MODEL_COUNTERS:
            add(out[model], _MODEL_COUNTERS[base], s.value)
        elif s.name == EXPLICIT_GAUGE:
            utilization.setdefault(model, []).append(float(s.value))
        elif s.name == PADDING_HISTOGRAM + "_sum":
            add(out[model], "padding_sum", s.value)
        elif s.name == PADDING_HISTOGRAM + "_count":
            add(out[model], "padding_count", s.value)
    for model, values in utilization.items():
        out[model].gauge = statistics.fmean(values)
    return out


def read_models(metrics_url: str, http_base: str, models: Sequence[str]
                ) -> dict[str, ModelSample]:
    """One reading of each model: Triton's metrics page, plus the compute time of its
    batches from the statistics extension (``batch_stats``, counted once per execution).
    Raises whatever the fetch or the parse raised."""
    out = parse_model_samples(scrape(metrics_url), models)
    for m in models:
        stats = get_json(f"{http_base}/v2/models/{m}/stats", timeout_s=2.0)
        batches = stats["model_stats"][0].get("batch_stats") or []
        out[m].batch_compute_ns = float(sum(int(b["compute_infer"]["ns"]) for b in batches))
    return out


def model_sampler(metrics_url: str, http_base: str, models: Sequence[str], period_s: float,
                  clock_ns: Callable[[], int] = time.time_ns, name: str = "model-sampler"
                  ) -> PeriodicSampler:
    """A sampler of ``read_models`` every ``period_s``, each reading a ``Sample`` stamped
    with ``clock_ns`` (compare: the wall clock of perf_analyzer's export; the benchmark:
    the load generator's monotonic clock)."""
    models = list(models)

    def read() -> Sample:
        t_ns = clock_ns()
        return Sample(t_ns, read_models(metrics_url, http_base, models))

    return PeriodicSampler(read, period_s, name=name)


def busy_series(samples: Sequence[Sample], model: str, from_gauge: bool
                ) -> list[tuple[int, int, float]]:
    """(interval start ns, end ns, busy fraction) per scrape interval: the gauge's value
    at the interval's end (explicit), or the growth of Triton's per-batch compute time
    over the interval (native)."""
    out = []
    for prev, cur in zip(samples, samples[1:]):
        dt_ns = cur.t_ns - prev.t_ns
        if dt_ns <= 0:
            continue
        a, b = prev.models[model], cur.models[model]
        if from_gauge:
            value = b.gauge
        elif a.batch_compute_ns is not None and b.batch_compute_ns is not None:
            value = (b.batch_compute_ns - a.batch_compute_ns) / dt_ns
        else:
            value = None
        if value is not None:
            out.append((prev.t_ns, cur.t_ns, min(max(value, 0.0), 1.0)))
    return out


def inside(series: Sequence[tuple[int, int, float]], spans: Sequence[tuple[int, int]]
           ) -> list[float]:
    """The values of a ``busy_series`` whose interval lies wholly inside one of ``spans``."""
    return [v for s0, s1, v in series if any(s <= s0 and s1 <= e for s, e in spans)]


def counter_busy(samples: Sequence[Sample], model: str, spans: Sequence[tuple[int, int]]
                 ) -> float | None:
    """Mean of d(nv_inference_compute_infer_duration_us)/dt over the model's spans (what
    the raw counter would claim as busy fraction)."""
    values = []
    for prev, cur in zip(samples, samples[1:]):
        if not any(s <= prev.t_ns and cur.t_ns <= e for s, e in spans):
            continue
        a, b = prev.models[model].compute_us, cur.models[model].compute_us
        if a is not None and b is not None and cur.t_ns > prev.t_ns:
            values.append((b - a) * 1000.0 / (cur.t_ns - prev.t_ns))
    return statistics.fmean(values) if values else None


def padding_waste(samples: Sequence[Sample], model: str, spans) -> float | None:
    """Mean per-batch padding share of the explicit model's batches in its spans (its
    histogram's sum / count growth); None where the model exports no such histogram."""
    total_sum = total_count = 0.0
    for s, e in spans:
        before = [x for x in samples if x.t_ns <= s]
        after = [x for x in samples if x.t_ns >= e]
        if not before or not after:
            continue
        a, b = before[-1].models[model], after[0].models[model]
        if None in (a.padding_sum, b.padding_sum, a.padding_count, b.padding_count):
            return None
        total_sum += b.padding_sum - a.padding_sum
        total_count += b.padding_count - a.padding_count
    return total_sum / total_count if total_count > 0 else None
