"""Control-state metrics on Triton's own metrics port (``pb_utils.MetricFamily``).

The scheduler core exports plain numbers (``SchedulerStats``); this module turns them into
Prometheus families with unit suffixes and small, fixed label sets. Per-request and
per-batch events are counted locally and flushed once per ``flush()`` (the adapter calls it
every control period): each metric update is a message to the server process, too dear
for the per-request path.

The families are kept referenced for the model's whole life: a ``Metric`` whose family
was garbage-collected raises on ``set()``.

A gauge is set only when its value changed since the last flush (most stay put for
minutes: zone, period, health).

Latency histograms (``request_duration_seconds``, ``queue_duration_seconds``, per SLA
class) are counted into their buckets here and published at most once a second as the
three series of a Prometheus histogram (``_bucket{le}``, ``_sum``, ``_count``, running
totals): a ``pb_utils`` histogram costs one message to the server per observation (~43 us,
about three per request: measured with cProfile at the host-bound peak); this costs one
per changed bucket per publish. The families are gauges that only grow (a counter family
would be read back as ``<name>_total`` by Prometheus's Python parser); Prometheus's
``histogram_quantile(rate(..._bucket[...]))`` reads them as it reads any histogram. A
class's series appear with its first request.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import triton_python_backend_utils as pb_utils

from .metric_catalog import (BATCH_SIZE_BUCKETS, COUNTERS, FORMER_NAMES, GAUGES, HISTOGRAMS,
                             LABELLED, LATENCY_BUCKETS, LATENCY_HISTOGRAMS,
                             LATENCY_PUBLISH_PERIOD_S,
                             PADDING_WASTE_BUCKETS, PREFIX, REJECT_REASONS, SIDECAR_DISABLED,
                             SLA_CLASSES)




_CLASS_BOUNDS = np.array([bound for bound, _ in SLA_CLASSES])  # sla_class() as searchsorted
_LATENCY_EDGES = np.array(LATENCY_BUCKETS)  # bisect_left over the bucket bounds
_BUCKETS = len(LATENCY_BUCKETS) + 1  # the last: +Inf


class ControlMetrics:
    def __init__(self, model: str, profile: str, profile_reason: str, instance: str = ""):
        # model_instance: Triton's instance name (``<model>_<group>_<index>``): with
        # instance_group count N each instance is its own stub, queue and controller, and
        # publishes its own series (Prometheus keeps ``instance`` for the scrape target).
        labels = {"model": model, "model_instance": instance or model}
        self._families = []  # keep every family alive (see the module docstring)

        def family(name, description, kind):
            fam = pb_utils.MetricFamily(name=PREFIX + name, description=description, kind=kind)
            self._families.append(fam)
            return fam

        self._gauges = {name: family(name, text, pb_utils.MetricFamily.GAUGE).Metric(labels=labels)
                        for name, text in GAUGES.items()}
        self._counters = {name: family(name, text, pb_utils.MetricFamily.COUNTER).Metric(
            labels=labels) for name, text in COUNTERS.items()}
        sla = family("sla_requests_total", LABELLED["sla_requests_total"],
                     pb_utils.MetricFamily.COUNTER)
        self._sla = {(cls, outcome): sla.Metric(labels={**labels, "sla_class": cls,
                                                        "outcome": outcome})
                     for _, cls in SLA_CLASSES for outcome in ("met", "missed")}
        rejected = family("rejected_requests_total", LABELLED["rejected_requests_total"],
                          pb_utils.MetricFamily.COUNTER)
        self._rejected = {r: rejected.Metric(labels={**labels, "reason": r})
                          for r in REJECT_REASONS}
        self._batch_size = family("batch_size", HISTOGRAMS["batch_size"],
                                  pb_utils.MetricFamily.HISTOGRAM).Metric(
            labels=labels, buckets=BATCH_SIZE_BUCKETS)
        self._padding = family("padding_waste_ratio", HISTOGRAMS["padding_waste_ratio"],
                               pb_utils.MetricFamily.HISTOGRAM).Metric(
            labels=labels, buckets=PADDING_WASTE_BUCKETS)
        formed = family("formed_batches_total", LABELLED["formed_batches_total"],
                        pb_utils.MetricFamily.COUNTER)
        self._formed = {f: formed.Metric(labels={**labels, "former": f}) for f in FORMER_NAMES}
        info = family("profile_info", LABELLED["profile_info"], pb_utils.MetricFamily.GAUGE)
        self._profile_info = info.Metric(labels={**labels, "profile": profile,
                                                 "reason": profile_reason})
        self._profile_info.set(1)
        self._labels = labels
        self._latency_families = {
            (name, part): family(f"{name}_{part}", text, pb_utils.MetricFamily.GAUGE)
            for name, text in LATENCY_HISTOGRAMS.items() for part in ("bucket", "sum", "count")}
        self._latency = {}  # (family key, sla_class, le) -> [Metric, running total]
        # (histogram name, sla_class) -> [count per bucket (last: +Inf), sum of seconds]
        self._latency_counts: dict[tuple[str, str], list] = {}
        self._last_latency_publish = 0.0

        self._lock = threading.Lock()  # events come from Triton's thread and the loop
        self._pending_sla: Counter = Counter()
        self._pending_rejected: Counter = Counter()
        self._pending_counters: Counter = Counter()
        self._pending_batches: list[tuple[int, float]] = []
        self._pending_formed: Counter = Counter()
        # per answered batch: (SLA ms, wait s, latency s), one array each
        self._pending_served: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._published_counts = {"emergency_batches_total": 0, "compensation_batches_total": 0}
        self._gauge_values: dict[str, float] = {}  # the last value set on each gauge

    # -- events (cheap: counted locally) -------------------------------------------------
    def on_served(self, sla_ms: np.ndarray, wait_s: np.ndarray, latency_s: np.ndarray
                  ) -> None:
        """One batch answered: per member its SLA (ms), its wait from arrival to dispatch
        and its latency from arrival to the answer (seconds). Counted per batch, as arrays:
        the flush sorts them into classes and buckets in one pass."""
        with self._lock:
            self._pending_served.append((sla_ms, wait_s, latency_s))

    def on_rejected(self, reason: str, count: int = 1) -> None:
        with self._lock:
            self._pending_rejected[reason] += count

    def on_batch(self, size: int, padding_waste: float, former: str) -> None:
        with self._lock:
            self._pending_batches.append((size, padding_waste))
            self._pending_formed[former] += 1

    def on_event(self, counter: str) -> None:
        with self._lock:
            self._pending_counters[counter] += 1

    # -- publishing ----------------------------------------------------------------------
    def flush(self, stats, sidecar_health: float) -> None:
        """Publish the gauges from ``stats`` and everything counted since the last flush."""
        for name, value in (
                ("zone", stats.zone), ("prewarmed", 1.0 if stats.prewarmed else 0.0),
                ("window_seconds", stats.window_ms / 1000.0),
                ("queue_depth", stats.queue_depth), ("utilization_ratio", stats.utilization),
                ("observation_age_seconds", stats.observation_age_ms / 1000.0),
                ("control_period_seconds", stats.control_period_ms / 1000.0),
                ("control_lag_seconds", stats.control_lag_ms / 1000.0),
                ("sidecar_health", sidecar_health),
                ("cost_correction_ratio", stats.cost_correction),
                ("cost_estimate_error_ratio", stats.cost_error)):
            if self._gauge_values.get(name) != value:  # one message to the server each
                self._gauge_values[name] = value
                self._gauges[name].set(value)
        for name, total in (("emergency_batches_total", stats.emergency_batches),
                            ("compensation_batches_total", stats.compensation_batches)):
            delta = total - self._published_counts[name]
            if delta > 0:
                self._counters[name].increment(delta)
                self._published_counts[name] = total
        with self._lock:
            counters, self._pending_counters = self._pending_counters, Counter()
            sla, self._pending_sla = self._pending_sla, Counter()
            rejected, self._pending_rejected = self._pending_rejected, Counter()
            batches, self._pending_batches = self._pending_batches, []
            formed, self._pending_formed = self._pending_formed, Counter()
            served, self._pending_served = self._pending_served, []
        for name, n in counters.items():
            self._counters[name].increment(n)
        for reason, n in rejected.items():
            self._rejected[reason].increment(n)
        for former, n in formed.items():
            self._formed[former].increment(n)
        for size, waste in batches:
            self._batch_size.observe(size)
            self._padding.observe(waste)
        if served:
            self._count_served(served, sla)
        for key, n in sla.items():
            self._sla[key].increment(n)
        now = time.monotonic()
        if now - self._last_latency_publish >= LATENCY_PUBLISH_PERIOD_S:
            self._last_latency_publish = now
            self._publish_latency()

    def _count_served(self, served: list, sla: Counter) -> None:
        """Sort the answered batches' requests into SLA classes (met or missed, into
        ``sla``) and latency buckets (``_latency_counts``), vectorised."""
        sla_ms = np.concatenate([b[0] for b in served])
        latency_s = np.concatenate([b[2] for b in served])
        classes = np.searchsorted(_CLASS_BOUNDS, sla_ms, side="left")
        n_classes = len(SLA_CLASSES)
        in_class = np.bincount(classes, minlength=n_classes)
        met = np.bincount(classes[latency_s * 1000.0 <= sla_ms], minlength=n_classes)
        present = np.flatnonzero(in_class)
        for c in present:
            cls = SLA_CLASSES[c][1]
            if met[c]:
                sla[(cls, "met")] += int(met[c])
            if in_class[c] > met[c]:
                sla[(cls, "missed")] += int(in_class[c] - met[c])
        for name, seconds in (("queue_duration_seconds", np.concatenate([b[1] for b in served])),
                              ("request_duration_seconds", latency_s)):
            buckets = np.searchsorted(_LATENCY_EDGES, seconds, side="left")
            per_cell = np.bincount(classes * _BUCKETS + buckets,
                                   minlength=n_classes * _BUCKETS).reshape(n_classes, _BUCKETS)
            sums = np.bincount(classes, weights=seconds, minlength=n_classes)
            for c in present:
                counts = self._latency_counts.setdefault((name, SLA_CLASSES[c][1]),
                                                         [[0] * _BUCKETS, 0.0])
                counts[0] = [a + int(b) for a, b in zip(counts[0], per_cell[c])]
                counts[1] += float(sums[c])

    def _publish_latency(self) -> None:
        """Add each class's bucket counts since the last publish to its running totals
        and set the series that changed."""
        counts, self._latency_counts = self._latency_counts, {}
        for (name, cls), (per_bucket, total_s) in counts.items():
            if (name, "count", cls, None) not in self._latency:  # the class's first publish:
                for bound in (*LATENCY_BUCKETS, "+Inf"):  # every bucket, so quantiles see
                    self._latency_series(name, "bucket", cls, bound)  # the empty ones too
            cumulative = 0
            for bound, n in zip((*LATENCY_BUCKETS, "+Inf"), per_bucket):
                cumulative += n
                if cumulative:
                    self._add(self._latency_series(name, "bucket", cls, bound), cumulative)
            if cumulative:
                self._add(self._latency_series(name, "count", cls), cumulative)
                self._add(self._latency_series(name, "sum", cls), total_s)

    @staticmethod
    def _add(series: list, amount: float) -> None:
        series[1] += amount
        series[0].set(series[1])

    def _latency_series(self, name: str, part: str, cls: str, bound=None) -> list:
        key = (name, part, cls, bound)
        series = self._latency.get(key)
        if series is None:
            labels = {**self._labels, "sla_class": cls}
            if bound is not None:
                labels["le"] = bound if isinstance(bound, str) else repr(float(bound))
            metric = self._latency_families[(name, part)].Metric(labels=labels)
            metric.set(0.0)
            series = self._latency[key] = [metric, 0.0]
        return series

    def close(self) -> None:
        """On unload: the profile series must not stay at 1 beside the next load's; the
        latency counted since the last publish is published."""
        self._profile_info.set(0)
        self._publish_latency()
