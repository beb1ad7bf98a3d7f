"""``stats_log.StatsLog``: a zone, mode or former change is logged once, when it happens;
the scheduler's stats at most once per ``STATS_LOG_PERIOD_S`` (times are passed in)."""

from __future__ import annotations

from scheduler_core.profile_files import load_profile
from scheduler_core.scheduler import Scheduler
from tests.unit.triton_backend.conftest import SHIPPED_MODEL_DIR
from triton_backend.stats_log import STATS_LOG_PERIOD_S, StatsLog


def lines(pb_utils, what: str) -> list[str]:
    return [m for _, m in pb_utils.LOG if what in m]


def test_a_change_is_logged_once_and_stats_once_per_period(pb_utils):
    scheduler = Scheduler.from_profile(load_profile(f"{SHIPPED_MODEL_DIR}/profiles/t4.yaml"))
    log = StatsLog("m_stats", scheduler)
    pb_utils.LOG.clear()
    log.zone_change(0, "default", "fifo", 1.0)
    log.zone_change(0, "default", "fifo", 2.0)
    log.zone_change(2, "emergency", "fifo", 3.0)
    assert len(lines(pb_utils, "m_stats: zone=")) == 2
    scheduler.batch_finished([], 0.0, 0.0)  # one batch, so there are stats to log
    pb_utils.LOG.clear()
    for now in (10.0, 10.0 + STATS_LOG_PERIOD_S / 2, 10.0 + STATS_LOG_PERIOD_S):
        log.maybe_stats(now, extra=" x=1")
    assert len(lines(pb_utils, "x=1")) == 2
