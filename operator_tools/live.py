"""What the operator commands share about a live server: the plugin's control-state
metrics on Triton's metrics port, model reloads with a config override (Triton's
model-load API, explicit model-control mode), and one perf_analyzer run with its
per-request export.

Nothing here decides anything: the commands (calibrate, monitor, analyze) turn these
readings into verdicts, and their unit tests replace these functions with fakes.
"""

from __future__ import annotations

import copy
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from scheduler_core.contract import ZONE_NAMES
from scheduler_core.stats import percentile
from server_ops.admin import admin_headers, env_admin_key
from sidecar.triton_metrics import MetricsParseError, read_samples
from triton_backend.metric_catalog import PREFIX

from .measure import PeriodicSampler, scrape
from .perf_analyzer import PerfResult, read_measured_requests, run_request_rate
from .records import RequestRecord

# perf_analyzer stops a run whose latency is "not stabilizing" (exit 2, no result), which
# is exactly the overload a calibration sweep must reach: accept any windows as stable.
ANY_WINDOW_IS_STABLE = ("--stability-percentage", "1000")


# -- the metrics port ------------------------------------------------------------------

@dataclass(frozen=True)
class PluginSnapshot:
    """One scrape of one explicit model's control-state metrics.

    ``gauges`` are keyed by the catalogue name without prefix (``window_seconds``, ...)
    and combine the model's instances (``instance_gauges``, by the ``model_instance``
    label): the queue depth is their sum (what the model holds), the zone the worst one,
    every other gauge their mean. Counters are summed over the instances and cumulative
    since the model was (re)loaded."""

    taken_s: float  # monotonic seconds
    wall_s: float  # time.time() of the scrape (perf_analyzer's timestamps are wall clock)
    gauges: dict[str, float] = field(default_factory=dict)
    sla: dict[tuple[str, str], float] = field(default_factory=dict)  # (class, outcome)
    batch_size_sum: float = 0.0
    batch_size_count: float = 0.0
    profiles: tuple[str, ...] = ()  # profile_info series at 1 (a reload can leave the old one)
    instance_gauges: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def profile(self) -> str | None:
        """The profile in use, when the page names exactly one."""
        return self.profiles[0] if len(self.profiles) == 1 else None

    @property
    def zone(self) -> str | None:
        value = self.gauges.get("zone")
        if value is None:
            return None
        return ZONE_NAMES[min(max(int(round(value)), 0), 2)]

    def sla_total(self) -> float:
        return sum(self.sla.values())


def parse_plugin_metrics(text: str, model: str, taken_s: float = 0.0,
                         wall_s: float = 0.0) -> PluginSnapshot:
    """The ``explicit_batching_*`` samples of ``model`` on a metrics page.

    Raises ``MetricsParseError`` when the page is not a Prometheus page or carries no
    control-state metric for ``model`` (not an explicit model, or not loaded)."""
    per_instance: dict[str, dict[str, float]] = {}
    sla: dict[tuple[str, str], float] = {}
    batch_sum = batch_count = 0.0
    profiles: list[str] = []
    seen = False
    for s in read_samples(text):
        if not s.name.startswith(PREFIX) or s.labels.get("model") != model:
            continue
        seen = True
        name, value = s.name[len(PREFIX):], float(s.value)
        if name == "sla_requests_total":
            key = (s.labels.get("sla_class", ""), s.labels.get("outcome", ""))
            sla[key] = sla.get(key, 0.0) + value
        elif name == "batch_size_sum":
            batch_sum += value
        elif name == "batch_size_count":
            batch_count += value
        elif name == "profile_info":
            if value == 1.0 and s.labels.get("profile"):
                profiles.append(s.labels["profile"])
        elif not name.endswith(("_total", "_bucket", "_sum", "_count", "_created")):
            per_instance.setdefault(s.labels.get("model_instance", ""), {})[name] = value
    if not seen:
        raise MetricsParseError(
            f"no {PREFIX}* metrics for model '{model}' on the page: is it an explicit-control "
            "model, and loaded?")
    return PluginSnapshot(taken_s, wall_s, combine_instances(per_instance), sla, batch_sum,
                          batch_count, tuple(sorted(set(profiles))), per_instance)


def combine_instances(per_instance: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """One model's gauges from its instances': the queue depth summed, the worst zone,
    the mean of every other gauge (see ``PluginSnapshot``)."""
    values: dict[str, list[float]] = {}
    for gauges in per_instance.values():
        for name, value in gauges.items():
            values.setdefault(name, []).append(value)
    combined = {name: sum(v) / len(v) for name, v in values.items()}
    if "queue_depth" in values:
        combined["queue_depth"] = sum(values["queue_depth"])
    if "zone" in values:
        combined["zone"] = max(values["zone"])
    return combined


def snapshot(metrics_url: str, model: str, fetch: Callable[[str], str] = scrape,
             clock: Callable[[], float] = time.monotonic) -> PluginSnapshot:
    taken, wall = clock(), time.time()
    return parse_plugin_metrics(fetch(metrics_url), model, taken, wall)


def counter_delta(before: float, after: float) -> float:
    """Increase of a cumulative counter; a counter that went down was reset (the model was
    reloaded) and counts from zero."""
    return after if after < before else after - before


@dataclass
class Series:
    """Snapshots taken at a fixed interval; failed scrapes are counted, not fatal (the
    metrics of a model vanish for a moment while it reloads)."""

    snapshots: list[PluginSnapshot] = field(default_factory=list)
    failures: int = 0
    last_error: str = ""
    # The last failure itself: the commands tell "cannot reach" (exit 3) from a bad page.
    last_exception: BaseException | None = field(default=None, repr=False, compare=False)


def sample_series(metrics_url: str, model: str, duration_s: float, interval_s: float,
                  fetch: Callable[[str], str] = scrape,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> Series:
    """Scrape every ``interval_s`` seconds for ``duration_s`` seconds (at least twice)."""
    series = Series()
    start = clock()
    n = max(2, int(round(duration_s / interval_s)) + 1)
    for i in range(n):
        _take(series, metrics_url, model, fetch, clock)
        if i < n - 1:
            sleep(max(0.0, start + (i + 1) * interval_s - clock()))
    return series


def _take(series: Series, metrics_url: str, model: str, fetch, clock) -> None:
    try:
        series.snapshots.append(snapshot(metrics_url, model, fetch, clock))
    except (OSError, MetricsParseError) as exc:
        series.failures += 1
        series.last_error, series.last_exception = str(exc), exc


@dataclass
class SamplingDeps:
    """Injection point of the commands that only watch the metrics port (monitor,
    analyze): their tests replace ``sample`` with one over fake pages."""

    sample: Callable[..., Series] = sample_series


class BackgroundSampler(PeriodicSampler):
    """Snapshots every ``interval_s`` in a thread while something else (a perf_analyzer run)
    blocks the caller: ``with BackgroundSampler(...) as sampler: run(); sampler.series``."""

    def __init__(self, metrics_url: str, model: str, interval_s: float = 0.2,
                 fetch: Callable[[str], str] = scrape):
        super().__init__(lambda: snapshot(metrics_url, model, fetch), interval_s,
                         errors=(OSError, MetricsParseError))

    @property
    def series(self) -> Series:
        return Series(self.samples, self.failures, self.last_error)


@dataclass(frozen=True)
class ControlEffect:
    """What explicit control did over a stretch of snapshots: SLA attainment per class
    (counter deltas), mean batch size (histogram deltas), and the mean of the gauges."""

    model: str
    profile: str | None
    duration_s: float
    samples: int
    requests: float
    sla_attainment: dict[str, float]  # per SLA class with traffic: met / answered
    sla_requests: dict[str, float]
    mean_batch_size: float | None
    window_ms: float | None
    zone_share: dict[str, float]
    cost_correction_ratio: float | None
    control_period_ms: float | None
    observation_age_ms: float | None
    control_lag_ms: float | None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "ControlEffect":
        known = {k: raw.get(k) for k in cls.__dataclass_fields__}
        for key in ("sla_attainment", "sla_requests", "zone_share"):
            known[key] = dict(known[key] or {})
        known["duration_s"] = float(known["duration_s"] or 0.0)
        known["samples"] = int(known["samples"] or 0)
        known["requests"] = float(known["requests"] or 0.0)
        return cls(**known)


def control_effect(snapshots: Sequence[PluginSnapshot], model: str) -> ControlEffect:
    """Summarise a series of snapshots (at least two for the counter deltas)."""
    if not snapshots:
        raise ValueError("no snapshots: the metrics port gave nothing to summarise")
    first, last = snapshots[0], snapshots[-1]
    per_class: dict[str, dict[str, float]] = {}
    batches = sizes = 0.0
    # Pairwise deltas: a reload in the middle of the series resets the counters.
    for before, after in zip(snapshots, snapshots[1:]):
        for key in set(before.sla) | set(after.sla):
            cls, outcome = key
            slot = per_class.setdefault(cls, {})
            slot[outcome] = slot.get(outcome, 0.0) + counter_delta(before.sla.get(key, 0.0),
                                                                   after.sla.get(key, 0.0))
        batches += counter_delta(before.batch_size_count, after.batch_size_count)
        sizes += counter_delta(before.batch_size_sum, after.batch_size_sum)
    requests = {c: v.get("met", 0.0) + v.get("missed", 0.0) for c, v in per_class.items()}
    attainment = {c: per_class[c].get("met", 0.0) / n for c, n in requests.items() if n > 0}

    def mean_gauge(name: str) -> float | None:
        values = [s.gauges[name] for s in snapshots if name in s.gauges]
        return sum(values) / len(values) if values else None

    def mean_ms(name: str) -> float | None:  # a *_seconds gauge, in ms
        mean = mean_gauge(name)
        return None if mean is None else mean * 1000.0

    zones = [s.zone for s in snapshots if s.zone is not None]
    share = {z: zones.count(z) / len(zones) for z in ZONE_NAMES} if zones else {}
    return ControlEffect(
        model=model, profile=last.profile, duration_s=last.taken_s - first.taken_s,
        samples=len(snapshots), requests=sum(requests.values()),
        sla_attainment=attainment, sla_requests={c: n for c, n in requests.items() if n > 0},
        mean_batch_size=sizes / batches if batches > 0 else None,
        window_ms=mean_ms("window_seconds"), zone_share=share,
        cost_correction_ratio=last.gauges.get("cost_correction_ratio"),
        control_period_ms=mean_ms("control_period_seconds"),
        observation_age_ms=mean_ms("observation_age_seconds"),
        control_lag_ms=mean_ms("control_lag_seconds"))


# -- model reloads (explicit model-control mode) ----------------------------------------

class LoadRefused(RuntimeError):
    """The server refused to (re)load the model: not in explicit model-control mode, or the
    new configuration failed to load (the previous version keeps serving then)."""


def with_parameters(config: Mapping[str, Any], params: Mapping[str, str | None]) -> dict:
    """A copy of a model config (Triton's JSON form) with string parameters set (a value
    of None removes the parameter)."""
    out = copy.deepcopy(dict(config))
    table = dict(out.get("parameters") or {})
    for key, value in params.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = {"string_value": str(value)}
    out["parameters"] = table
    return out


def parameter(config: Mapping[str, Any], key: str) -> str | None:
    entry = (config.get("parameters") or {}).get(key)
    return entry.get("string_value") if isinstance(entry, Mapping) else None


class ModelControl:
    """Read a model's config and reload it with another one through Triton's HTTP
    model-repository API (``load_model(name, config=json)``). Needs the server started
    with ``--model-control-mode=explicit``; the model files stay those on the server."""

    def __init__(self, url: str, model: str, settle_s: float = 0.5):
        import tritonclient.http as httpclient  # noqa: PLC0415 - only live commands need it

        self.url, self.model, self.settle_s = url, model, settle_s
        self._client = httpclient.InferenceServerClient(url, network_timeout=120.0,
                                                        connection_timeout=10.0)

    def config(self) -> dict:
        return self._client.get_model_config(self.model)

    def load(self, config: Mapping[str, Any]) -> None:
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        try:
            self._client.load_model(self.model, config=json.dumps(config),
                                    headers=admin_headers(env_admin_key()) or None)
        except InferenceServerException as exc:
            raise LoadRefused(str(exc).strip().splitlines()[0] if str(exc).strip() else
                              repr(exc)) from None
        if not self._client.is_model_ready(self.model):
            raise LoadRefused(f"model '{self.model}' is not ready after the load")
        # A fresh model instance publishes its first metrics after one control period.
        time.sleep(self.settle_s)

    def close(self) -> None:
        self._client.close()


# -- one perf_analyzer run with its per-request export ----------------------------------

@dataclass(frozen=True)
class LoadRun:
    """One perf_analyzer run: its summary, every measured request, and the measurement
    windows (wall-clock seconds; empty when perf_analyzer exported none)."""

    perf: PerfResult
    requests: tuple[RequestRecord, ...] = ()
    windows: tuple[float, ...] = ()

    @property
    def span_s(self) -> float:
        if len(self.windows) >= 2:
            return self.windows[-1] - self.windows[0]
        if self.requests:
            return max(r.sent_s for r in self.requests) - min(r.sent_s for r in self.requests)
        return 0.0

    def goodput(self) -> float | None:
        """Requests per second that met their SLA (None without per-request data)."""
        with_sla = [r for r in self.requests if r.sla_ms is not None]
        if not with_sla or self.span_s <= 0:
            return None
        return sum(r.latency_ms <= r.sla_ms for r in with_sla) / self.span_s

    def p99_per_bucket(self, bucket_s: float = 1.0, min_requests: int = 2) -> list[float]:
        """P99 latency (ms, nearest rank) of the requests sent in each ``bucket_s`` slice of
        the measured span; slices with fewer than ``min_requests`` are skipped."""
        if not self.requests:
            return []
        start = self.windows[0] if self.windows else min(r.sent_s for r in self.requests)
        span = self.span_s
        n = max(1, int(round(span / bucket_s))) if span > 0 else 1
        width = span / n if span > 0 else math.inf
        buckets: list[list[float]] = [[] for _ in range(n)]
        for r in self.requests:
            i = int((r.sent_s - start) // width) if width != math.inf else 0
            if 0 <= i < n:
                buckets[i].append(r.latency_ms)
            elif i == n and r.sent_s - start <= span + 1e-9:
                buckets[-1].append(r.latency_ms)
        return [percentile(b, 99) for b in buckets if len(b) >= min_requests]


def run_load(url: str, model: str, input_data: str, rate: float, measurement_ms: int,
             protocol: str = "http", distribution: str = "poisson", max_trials: int = 3) -> LoadRun:
    """One open-loop perf_analyzer run at ``rate`` through ``perf_analyzer.run_request_rate``
    (``max_trials`` measurement windows of ``measurement_ms``, every one accepted as stable),
    with the per-request export. Raises RuntimeError when perf_analyzer fails (it stops at
    the first error response, e.g. a request refused as deadline-infeasible)."""
    with tempfile.TemporaryDirectory() as tmp:
        export = os.path.join(tmp, "export.json")
        perf = run_request_rate(url, model, input_data, rate, measurement_ms, protocol,
                                extra=(*ANY_WINDOW_IS_STABLE, "--max-trials", str(max_trials),
                                       "--request-distribution", distribution,
                                       "--profile-export-file", export))
        requests, windows = (read_measured_requests(export) if os.path.exists(export)
                             else ([], []))
    return LoadRun(perf, tuple(requests), tuple(windows))
