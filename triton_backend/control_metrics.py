"""Control-state metrics on Triton's own metrics port (``pb_utils.MetricFamily``).

The scheduler core exports plain numbers (``SchedulerStats``); this module turns them into
Prometheus families with unit suffixes and small, fixed label sets. Per-request and
per-batch events are counted locally and published by ``flush()``, which the adapter calls
once per ``METRICS_PUBLISH_PERIOD_S``: each metric update is a message to the server
process, too dear for the per-request path, and Prometheus scrapes every 15 s or so.

The families are kept referenced for the model's whole life: a ``Metric`` whose family
was garbage-collected raises on ``set()``.

A gauge is set only when its value changed since the last flush (most stay put for
minutes: zone, period, health).

The histograms (``batch_size``, ``padding_waste_ratio``, and per SLA class
``request_duration_seconds`` and ``queue_duration_seconds``) are counted into their buckets
here (``CountedHistogram``) and published as the three series of a Prometheus histogram
(``_bucket{le}``, ``_sum``, ``_count``, running totals): a ``pb_utils`` histogram costs one
message to the server per observation (~43 us); this costs one per changed bucket per
publish. The families are gauges that only grow (a counter family would be read back as
``<name>_total`` by Prometheus's Python parser); Prometheus's
``histogram_quantile(rate(..._bucket[...]))`` reads them as it reads any histogram. A
series set appears with its first observation.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import triton_python_backend_utils as pb_utils

from .metric_catalog import (BATCH_SIZE_BUCKETS, COUNTERS, FORMED_BY, GAUGES, HISTOGRAMS,
                             LABELLED, LATENCY_BUCKETS, LATENCY_HISTOGRAMS,
                             PADDING_WASTE_BUCKETS, PREFIX, REJECT_REASONS, SLA_CLASSES)

_CLASS_BOUNDS = np.array([bound for bound, _ in SLA_CLASSES])  # sla_class() as searchsorted
_LATENCY_EDGES = np.array(LATENCY_BUCKETS)  # bisect_left over the bucket bounds
_BUCKETS = len(LATENCY_BUCKETS) + 1  # the last: +Inf


class CountedHistogram:
    """One Prometheus histogram counted in this process and published as its three series
    of gauges (see the module docstring). ``extra`` labels (a tuple of pairs) split it
    into series sets, e.g. one per SLA class. A value falls in the first bucket whose
    bound is >= it (Prometheus's ``le``)."""

    def __init__(self, family, name: str, text: str, bounds, labels: dict):
        self._families = {part: family(f"{name}_{part}", text, pb_utils.MetricFamily.GAUGE)
                          for part in ("bucket", "sum", "count")}
        self._edges = np.asarray(bounds, dtype=float)
        self._le = [*(repr(float(b)) for b in bounds), "+Inf"]
        self._labels = labels
        self._series: dict[tuple, list] = {}  # (part, extra, le) -> [Metric, running total]
        self._pending: dict[tuple, list] = {}  # extra -> [count per bucket, sum]

    @property
    def buckets(self) -> int:
        """Buckets per series set, +Inf included."""
        return len(self._le)

    def add(self, values: np.ndarray, extra: tuple = ()) -> None:
        """Count ``values`` (one observation each)."""
        buckets = np.searchsorted(self._edges, values, side="left")
        self.add_counts(np.bincount(buckets, minlength=self.buckets), float(np.sum(values)),
                        extra)

    def add_counts(self, per_bucket: np.ndarray, total: float, extra: tuple = ()) -> None:
        """Count observations already sorted into buckets (``per_bucket``, +Inf last)."""
        pending = self._pending.setdefault(extra, [np.zeros(self.buckets, np.int64), 0.0])
        pending[0] += per_bucket
        pending[1] += total

    def publish(self) -> None:
        """Add what was counted since the last publish to the running totals and set the
        series that changed; a series set's first publish sets all its buckets, so
        quantiles see the empty ones too."""
        pending, self._pending = self._pending, {}
        for extra, (per_bucket, total) in pending.items():
            if ("count", extra, None) not in self._series:
                for le in self._le:
                    self._get("bucket", extra, le)
            cumulative = np.cumsum(per_bucket)
            for le, n in zip(self._le, cumulative):
                if n:
                    self._add(self._get("bucket", extra, le), int(n))
            if cumulative[-1]:
                self._add(self._get("count", extra), int(cumulative[-1]))
                self._add(self._get("sum", extra), total)

    @staticmethod
    def _add(series: list, amount: float) -> None:
        series[1] += amount
        series[0].set(series[1])
        time.sleep(0)  # set() held the GIL through its round trip: let execute() have it

    def _get(self, part: str, extra: tuple, le: str | None = None) -> list:
        key = (part, extra, le)
        series = self._series.get(key)
        if series is None:
            labels = {**self._labels, **dict(extra)}
            if le is not None:
                labels["le"] = le
            metric = self._families[part].Metric(labels=labels)
            metric.set(0.0)
            series = self._series[key] = [metric, 0.0]
        return series


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
        self._batch_size = CountedHistogram(family, "batch_size", HISTOGRAMS["batch_size"],
                                            BATCH_SIZE_BUCKETS, labels)
        self._padding = CountedHistogram(family, "padding_waste_ratio",
                                         HISTOGRAMS["padding_waste_ratio"],
                                         PADDING_WASTE_BUCKETS, labels)
        formed = family("formed_batches_total", LABELLED["formed_batches_total"],
                        pb_utils.MetricFamily.COUNTER)
        self._formed = {f: formed.Metric(labels={**labels, "former": f}) for f in FORMED_BY}
        info = family("profile_info", LABELLED["profile_info"], pb_utils.MetricFamily.GAUGE)
        self._profile_info = info.Metric(labels={**labels, "profile": profile,
                                                 "reason": profile_reason})
        self._profile_info.set(1)
        self._latency = {name: CountedHistogram(family, name, text, LATENCY_BUCKETS, labels)
                         for name, text in LATENCY_HISTOGRAMS.items()}  # per SLA class

        self._lock = threading.Lock()  # events come from Triton's thread and the loop
        self._pending_sla: Counter = Counter()
        self._pending_rejected: Counter = Counter()
        self._pending_counters: Counter = Counter()
        self._pending_batches: list[list[int]] = []  # per batch: its members' lengths
        self._pending_formed: Counter = Counter()
        # per answered batch: (SLAs ms, arrivals s, dispatched s, answered s)
        self._pending_served: list[tuple[list, list, float, float]] = []
        self._published_counts = {"emergency_batches_total": 0, "compensation_batches_total": 0}
        self._gauge_values: dict[str, float] = {}  # the last value set on each gauge

    # -- events (cheap: counted locally) -------------------------------------------------
    def on_served(self, sla_ms: list[float], arrivals_s: list[float], dispatched_s: float,
                  answered_s: float) -> None:
        """One batch answered: per member its SLA (ms) and arrival, and when the batch was
        dispatched and answered (seconds, one clock). Kept as it came: the flush makes the
        waits and latencies and sorts them into classes and buckets in one pass, off the
        requests' path."""
        with self._lock:
            self._pending_served.append((sla_ms, arrivals_s, dispatched_s, answered_s))

    def on_rejected(self, reason: str, count: int = 1) -> None:
        with self._lock:
            self._pending_rejected[reason] += count

    def on_batch(self, lengths: list[int], former: str) -> None:
        """One batch dispatched: its members' lengths (size and padding waste are taken at
        the flush) and the former that formed it."""
        with self._lock:
            self._pending_batches.append(lengths)
            self._pending_formed[former] += 1

    def on_event(self, counter: str) -> None:
        with self._lock:
            self._pending_counters[counter] += 1

    # -- publishing ----------------------------------------------------------------------
    def flush(self, stats, sidecar_health: float, histograms: bool = True) -> None:
        """Publish the gauges from ``stats`` and everything counted since the last flush;
        the histograms' series only with ``histograms`` (what they counted is kept for the
        next publish that sends them)."""
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
        if batches:
            self._batch_size.add(np.array([len(b) for b in batches], dtype=float))
            self._padding.add(np.array([1.0 - sum(b) / (len(b) * max(b)) for b in batches]))
        if served:
            self._count_served(served, sla)
        for key, n in sla.items():
            self._sla[key].increment(n)
        if histograms:
            self._publish_histograms()

    def _count_served(self, served: list, sla: Counter) -> None:
        """Sort the answered batches' requests into SLA classes (met or missed, into
        ``sla``) and latency buckets (``_latency_counts``), vectorised."""
        sizes = [len(b[0]) for b in served]
        sla_ms = np.fromiter((s for b in served for s in b[0]), float, sum(sizes))
        arrivals_s = np.fromiter((a for b in served for a in b[1]), float, sum(sizes))
        wait_s = np.repeat([b[2] for b in served], sizes) - arrivals_s
        latency_s = np.repeat([b[3] for b in served], sizes) - arrivals_s
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
        for name, seconds in (("queue_duration_seconds", wait_s),
                              ("request_duration_seconds", latency_s)):
            buckets = np.searchsorted(_LATENCY_EDGES, seconds, side="left")
            per_cell = np.bincount(classes * _BUCKETS + buckets,
                                   minlength=n_classes * _BUCKETS).reshape(n_classes, _BUCKETS)
            sums = np.bincount(classes, weights=seconds, minlength=n_classes)
            for c in present:
                self._latency[name].add_counts(per_cell[c], float(sums[c]),
                                               (("sla_class", SLA_CLASSES[c][1]),))

    def _publish_histograms(self) -> None:
        for histogram in (self._batch_size, self._padding, *self._latency.values()):
            histogram.publish()

    def close(self) -> None:
        """On unload: the profile series must not stay at 1 beside the next load's; what
        was counted since the last publish is published."""
        self._profile_info.set(0)
        self._publish_histograms()
