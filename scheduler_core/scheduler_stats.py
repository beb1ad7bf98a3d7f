"""The scheduler's figures as plain numbers, for the adapter to log or publish (the core
exports no metrics: ``triton_backend/control_metrics.py`` turns these into Prometheus's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerStats:
    """Plain numbers for the adapter to log or publish; the core exports no metrics."""

    queue_depth: int
    window_ms: float
    utilization: float
    delay_variation: float
    batches: int
    requests: int
    cost_correction: float  # the estimator's drift from its seed (1 = none)
    zone: int = 0
    prewarmed: bool = False
    zone_score: float = 0.0
    observation_age_ms: float = 0.0
    p99_ms: float = 0.0
    p99_cv: float = 0.0
    logical_rate: float = 1.0
    sla_met: int = 0
    sla_missed: int = 0
    rejected_infeasible: int = 0
    emergency_batches: int = 0
    compensation_batches: int = 0
    explicit_batches: int = 0
    perception_ok: bool = True
    control_period_ms: float = 0.0  # measured interval between the last two decisions
    control_lag_ms: float = 0.0  # how late the last decision ran against control_period_ms
    utilization_source: str = "busy_fraction"
    former: str = ""  # the batch former of the current mode
    cost_error: float = 0.0  # smoothed |measured - predicted| / measured batch time
