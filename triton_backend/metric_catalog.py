"""Names, help texts, labels and buckets of the control-state metrics (no Triton import:
the Grafana dashboard test and operator tools read the same catalogue)."""

from __future__ import annotations

import math

from scheduler_core.engine import AS_HANDED
from scheduler_core.contract import FORMER_NAMES

# formed_batches_total's former labels: the formers a profile can name, and intake hold's
# batch run as Triton handed it over (Engine.take_planned).
FORMED_BY = (*FORMER_NAMES, AS_HANDED)

PREFIX = "explicit_batching_"
SLA_CLASSES = ((50.0, "le50ms"), (100.0, "le100ms"), (200.0, "le200ms"), (1000.0, "le1000ms"),
               (math.inf, "gt1000ms"))
REJECT_REASONS = ("deadline_infeasible", "queue_full", "invalid_input", "shutting_down",
                  "timed_out")
BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128]
PADDING_WASTE_BUCKETS = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75]
SIDECAR_DISABLED = -1.0
# Latency buckets (seconds), 1 ms .. 30 s: 14 rounded steps a decade (each at most 1.22x the
# one below) that keep the SLA bounds (50, 100, 200, 1000 ms) as bucket edges. Prometheus's
# histogram_quantile interpolates linearly inside a bucket, so a quantile's error is below
# the bucket's width (<= 22 %) and, over a smooth latency spread, a few % in practice;
# 64 buckets x 5 classes stays a small page (a class's series appear with its first request).
_MANTISSAS = (1.0, 1.2, 1.4, 1.7, 2.0, 2.4, 2.8, 3.4, 4.0, 4.5, 5.0, 6.0, 7.0, 8.5)
LATENCY_BUCKETS = [round(m * 10.0 ** e, 6) for e in range(-3, 2) for m in _MANTISSAS
                   if m * 10.0 ** e <= 30.0] + [30.0]

GAUGES = {
    "zone": "Control zone: 0 safe, 1 no-man's land, 2 danger",
    "prewarmed": "1 while explicit control is pre-warmed by utilisation",
    "window_seconds": "Elastic batching window (s)",
    "queue_depth": "Requests waiting in the explicit queue",
    "utilization_ratio": "Device utilisation the controller acts on (0-1)",
    "observation_age_seconds": "Age of the perception sample the last decision used (s)",
    "control_period_seconds": "Measured interval between the last two control decisions (s)",
    "control_lag_seconds": "How late the last control decision ran against its period (s)",
    "sidecar_health": "Perception sidecar: 1 ok, 0.5 degraded, 0 down, -1 disabled",
    "cost_correction_ratio": "Online correction of the profile's cost model (observed/predicted; "
                             "a measured table: its mean refit factor)",
    "cost_estimate_error_ratio": "Measured vs predicted batch time: smoothed "
                                 "|measured - predicted| / measured (0 = exact)",
}
COUNTERS = {
    "emergency_batches_total": "Batches sent by the emergency policy",
    "compensation_batches_total": "Compensation batches sent after P99 breaches",
    "batch_failures_total": "Batches whose inference failed (their requests got INTERNAL)",
    "loop_errors_total": "Unexpected exceptions in the scheduler loop (it was restarted)",
    "hung_batches_total": "Batches that ran past the watchdog's bound (their requests got "
                          "INTERNAL while the executor had not returned)",
    "cancelled_requests_total": "Requests the client cancelled, answered without computing",
    "wake_requests_total": "Wake requests intake hold sent into its own model to end a "
                           "stall of Triton's batcher (Triton counts them as requests)",
}


# intake hold's wake requests, as a metrics page names them: Triton counts them as
# requests too, so figures of requests answered subtract them (bench, intake_check).
WAKE_REQUESTS_METRIC = PREFIX + "wake_requests_total"


def sla_class(sla_ms: float) -> str:
    for bound, label in SLA_CLASSES:
        if sla_ms <= bound:
            return label
    return SLA_CLASSES[-1][1]


HISTOGRAMS = {
    "batch_size": "Requests per dispatched batch",
    "padding_waste_ratio": "Share of a batch's padded tokens that are padding",
}
# Per SLA class (label sla_class), buckets LATENCY_BUCKETS. Measured from the request's
# arrival in the plugin's execute(); Triton's own nv_inference_* latencies cover only
# execute() itself and so miss the time a request waits in the plugin's queue.
LATENCY_HISTOGRAMS = {
    "request_duration_seconds": "From arrival in the plugin to the successful response handed "
                                "to the sender (s); refusals and failures are not observed",
    "queue_duration_seconds": "From arrival in the plugin to dispatch in a batch (s)",
}
LABELLED = {
    "sla_requests_total": "Answered requests by SLA class and outcome",
    "rejected_requests_total": "Requests refused, by reason",
    "profile_info": "The hardware profile in use (value 1) and why it was chosen",
    "formed_batches_total": "Dispatched batches, by the batch former that formed them",
}


def all_metric_names() -> list[str]:
    """Every family this plugin exports, with the prefix."""
    return [PREFIX + n for n in (*GAUGES, *COUNTERS, *HISTOGRAMS, *LATENCY_HISTOGRAMS, *LABELLED)]

# The gauges and counters are published at most once a second (see control_metrics.py):
# every update is a message to the server, and Prometheus scrapes every 15 s or so.
METRICS_PUBLISH_PERIOD_S = 1.0
# The histograms, counted at every publish, are sent at most once per this period: every
# bucket at or above an observation changes, a few hundred messages a publish under load,
# each holding the stub's GIL, and a rate() over a minute reads them the same.
HISTOGRAM_PUBLISH_PERIOD_S = 5.0
