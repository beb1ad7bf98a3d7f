"""The model's log lines about its control state: a zone, mode or former change at once,
and the scheduler's stats every ``STATS_LOG_PERIOD_S``."""

from __future__ import annotations

import triton_python_backend_utils as pb_utils

from scheduler_core.contract import ZONE_NAMES

STATS_LOG_PERIOD_S = 5.0


class StatsLog:
    """Writes one model's control-state lines to Triton's log."""

    def __init__(self, model_name: str, scheduler):
        self.model_name = model_name
        self.scheduler = scheduler
        self._last_zone = None
        self._last_stats_log = 0.0

    def zone_change(self, zone: int, mode: str, former: str, now: float) -> None:
        key = (zone, mode, former)
        if key != self._last_zone:
            self._last_zone = key
            s = self.scheduler.stats(now)
            pb_utils.Logger.log_info(
                f"{self.model_name}: zone={ZONE_NAMES[zone]} mode={mode} "
                f"former={former} "
                f"score={s.zone_score:.2f} utilization={s.utilization:.2f} "
                f"queue_depth={s.queue_depth} p99_cv={s.p99_cv:.2f} window_ms={s.window_ms:.2f}")

    def maybe_stats(self, now: float, extra: str = "") -> None:
        if now - self._last_stats_log < STATS_LOG_PERIOD_S:
            return
        self._last_stats_log = now
        s = self.scheduler.stats(now)
        if s.batches:
            pb_utils.Logger.log_info(
                f"{self.model_name}: zone={ZONE_NAMES[s.zone]} prewarmed={s.prewarmed} "
                f"window_ms={s.window_ms:.2f} utilization={s.utilization:.2f} "
                f"queue_depth={s.queue_depth} p99_ms={s.p99_ms:.1f} p99_cv={s.p99_cv:.2f} "
                f"observation_age_ms={s.observation_age_ms:.0f} batches={s.batches} "
                f"requests={s.requests} sla_met={s.sla_met} sla_missed={s.sla_missed} "
                f"rejected={s.rejected_infeasible} emergency={s.emergency_batches} "
                f"compensation={s.compensation_batches} cost_correction={s.cost_correction:.2f}"
                f"{extra}")
