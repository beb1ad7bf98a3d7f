"""Names, help texts, labels and buckets of the control-state metrics (no Triton import:
the Grafana dashboard test and operator tools read the same catalogue)."""

from __future__ import annotations

import math

from scheduler_core.policy import FORMER_NAMES  # noqa: F401  (formed_batches_total's labels)

PREFIX = "explicit_batching_"
SLA_CLASSES = ((50.0, "le50ms"), (100.0, "le100ms"), (200.0, "le200ms"), (1000.0, "le1000ms"),
               (math.inf, "gt1000ms"))
REJECT_REASONS = ("deadline_infeasible", "queue_full", "invalid_input", "shutting_down")
BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128]
PADDING_WASTE_BUCKETS = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75]
SIDECAR_DISABLED = -1.0

GAUGES = {
    "zone": "Control zone: 0 safe, 1 no-man's land, 2 danger",
    "prewarmed": "1 while explicit control is pre-warmed by utilisation",
    "window_ms": "Elastic batching window (ms)",
    "queue_depth": "Requests waiting in the explicit queue",
    "utilization_ratio": "Device utilisation the controller acts on (0-1)",
    "observation_age_ms": "Age of the perception sample the last decision used (ms)",
    "control_period_ms": "Measured interval between the last two control decisions (ms)",
    "control_lag_ms": "How late the last control decision ran against its period (ms)",
    "sidecar_health": "Perception sidecar: 1 ok, 0.5 degraded, 0 down, -1 disabled",
    "cost_correction_ratio": "Online correction of the profile's cost model (observed/predicted)",
}
COUNTERS = {
    "emergency_batches_total": "Batches sent by the emergency policy",
    "compensation_batches_total": "Compensation batches sent after P99 breaches",
    "batch_failures_total": "Batches whose inference failed (their requests got INTERNAL)",
    "loop_errors_total": "Unexpected exceptions in the scheduler loop (it was restarted)",
    "cancelled_requests_total": "Requests the client cancelled, answered without computing",
}


def sla_class(sla_ms: float) -> str:
    for bound, label in SLA_CLASSES:
        if sla_ms <= bound:
            return label
    return SLA_CLASSES[-1][1]


HISTOGRAMS = {
    "batch_size": "Requests per dispatched batch",
    "padding_waste_ratio": "Share of a batch's padded tokens that are padding",
}
LABELLED = {
    "sla_requests_total": "Answered requests by SLA class and outcome",
    "rejected_requests_total": "Requests refused, by reason",
    "profile_info": "The hardware profile in use (value 1) and why it was chosen",
    "formed_batches_total": "Dispatched batches, by the batch former that formed them",
}


def all_metric_names() -> list[str]:
    """Every family this plugin exports, with the prefix."""
    return [PREFIX + n for n in (*GAUGES, *COUNTERS, *HISTOGRAMS, *LABELLED)]
