"""The perception sidecar's latest sample as the engine takes it (``Perception``): the
adapter's one reading of ``sidecar/``, for the drivers' steps and the metrics thread."""

from __future__ import annotations

from scheduler_core.engine import Perceived
from sidecar.sampler import HEALTH_VALUE, usable

from .metric_catalog import SIDECAR_DISABLED


class Perception:
    """The sidecar's latest sample as the engine takes it (``Perceived``): usable only
    when healthy and younger than ``max_age_s``. No sidecar: nothing to apply."""

    def __init__(self, sidecar, max_age_s: float):
        self.sidecar = sidecar
        self.max_age_s = max_age_s

    def read(self, now_s: float) -> tuple[Perceived | None, float]:
        """(the sample, or None without a sidecar; its health for the metric, -1 when
        there is no sidecar)."""
        if self.sidecar is None:
            return None, SIDECAR_DISABLED
        sample = self.sidecar.latest()
        ok = usable(sample, now_s, self.max_age_s)
        health = HEALTH_VALUE.get(sample.health, 0.0) if sample is not None else 0.0
        return Perceived(ok, sample.utilization if ok else None,
                         sample.taken_s if ok else 0.0), health
