"""What a profile key may hold: the bounds and the choices every profile is validated
against (``profile.py``), kept apart so tools and tests can quote them."""

from __future__ import annotations

from .contract import FORMER_NAMES

COST_MODES = ("padded", "ragged")
# cost_model.table_source: a line saying where the cells come from, not a document.
MAX_TABLE_SOURCE_CHARS = 200
# (low, high) inclusive bounds; None = unbounded on that side.
BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "fixed_ms": (0.0, 60_000.0),
    "per_sequence_ms": (0.0, 60_000.0),
    "per_token_ms": (0.0, 1_000.0),
    "per_token_squared_ms": (0.0, 1_000.0),
    "time_scale": (0.01, 1000.0),
    "max_batch_size": (1, 4096),
    "max_batch_tokens": (1, 10_000_000),
    "max_queued_requests": (1, 10_000_000),
    "default_sla_ms": (0.001, 3_600_000.0),
    "base_window_ms": (0.0, 10_000.0),
    "min_window_ms": (0.0, 10_000.0),
    "max_window_ms": (0.0, 10_000.0),
    "alpha": (0.0, 5.0),
    "beta": (0.0, 5.0),
    "wait_ms_per_saved_device_ms": (0.0, 1_000_000.0),
    "batch_host_ms": (0.0, 1_000.0),
    "perception_window_ms": (10.0, 600_000.0),
    "perception_period_ms": (10.0, 10_000.0),
    "control_period_ms": (10.0, 10_000.0),
    "period_jitter": (0.0, 0.5),
    "window_time_constant_ms": (0.0, 60_000.0),
    "utilization_safe": (0.0, 1.0),
    "utilization_danger": (0.0, 1.0),
    "queue_depth_safe": (0.0, 1_000_000.0),
    "queue_depth_danger": (0.0, 1_000_000.0),
    "p99_cv_safe": (0.0, 100.0),
    "p99_cv_danger": (0.0, 100.0),
    "weight_utilization": (0.0, 1.0),
    "weight_queue_depth": (0.0, 1.0),
    "weight_p99_cv": (0.0, 1.0),
    "nml_score": (0.0, 1.0),
    "danger_zone_threshold": (0.0, 1.0),
    "prewarm_utilization": (0.0, 1.0),
    "hysteresis": (0.0, 0.5),
    "min_dwell_ms": (0.0, 600_000.0),
    "urgency_decay_rate": (0.01, 0.999),
    "urgency_slack_unit_ms": (0.001, 600_000.0),
    "aging_per_s": (0.0, 1000.0),
    "urgent_threshold": (0.0, 1.0),
    "priority_slots": (0, 4096),
    "max_padding_waste": (0.0, 1.0),
    "min_batch_fill": (0.0, 1.0),
    "infeasible_margin_ms": (0.0, 60_000.0),
    "refusal_late_share": (0.0, 1.0),
    "refusal_window_ms": (1.0, 600_000.0),
    "overload_late_share": (0.0, 1.0),
    "overload_exit_late_share": (0.0, 1.0),
    "overload_call_budget_sla_fraction": (0.01, 10.0),
    "budget_ms": (0.0, 600_000.0),
    "cpu_budget_ms": (0.0, 600_000.0),
    "max_sequence_length": (1, 1_000_000),
    "reserved_capacity": (0.0, 0.9),
    "emergency_batch_size": (1, 4096),
    "noncritical_sla_ms": (0.001, 3_600_000.0),
    "dilution_gap_ms": (0.0, 10_000.0),
    "max_compensation": (0.0, 100.0),
    "compensation_cooldown_ms": (0.0, 600_000.0),
}
# Profile keys that were renamed: the old spelling refuses, naming the new one (in a
# profile file and as a model-config parameter). Durations are in ms, and the plugin's
# queue bound is named apart from Triton's ``max_queue_size`` (docs/configuration.md).
RENAMED_KEYS = {
    "scheduler.max_queue_size": "scheduler.max_queued_requests",
    "calibration.budget_s": "calibration.budget_ms",
    "calibration.cpu_budget_s": "calibration.cpu_budget_ms",
}
ENTRY_MODES = ("all", "weighted")
INFEASIBLE_POLICIES = ("serve_late", "reject")
SAFE_ZONE_BATCHING = ("auto", *FORMER_NAMES)
