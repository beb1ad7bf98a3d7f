"""Baseline batching policies behind the same contract as ``scheduler.Scheduler``
(``policy.BatchingPolicy``), so the simulator (and, in principle, the Triton adapter) can
drive any of them. Like the scheduler they are pure: no clock, no threads, ``now_s``
comes in as an argument.

The policies live in ``native_batcher.py`` (``TritonDynamicBatcher``, ``FixedWindow``)
and ``adaptive_baseline.py`` (``AdaptiveCostBatcher``); ``make_policy`` builds any of
them, or the explicit ``Scheduler``, by name.
"""

from __future__ import annotations

from scheduler_core.cost_model import CostEstimator
from scheduler_core.profile import HardwareProfile
from scheduler_core.scheduler import Scheduler

from .adaptive_baseline import AdaptiveCostBatcher
from .native_batcher import FixedWindow, TritonDynamicBatcher

__all__ = ["POLICIES", "make_policy", "AdaptiveCostBatcher", "FixedWindow",
           "TritonDynamicBatcher"]


POLICIES = ("explicit", "native", "fixed-window", "adaptive")


def make_policy(kind: str, profile: HardwareProfile, time_scale: float | None = None,
                native_max_batch_size: int | None = None, native_delay_us: int = 0):
    """A fresh policy object for one simulation run (policies keep state).

    ``explicit`` is the shipped ``Scheduler``; ``native`` Triton's dynamic batcher with
    ``native_max_batch_size`` (default: the profile's) and ``native_delay_us``."""
    scale = profile.emulation.time_scale if time_scale is None else time_scale
    s = profile.scheduler
    if kind == "explicit":
        return Scheduler.from_profile(profile, scale)
    if kind == "native":
        return TritonDynamicBatcher(native_max_batch_size or s.max_batch_size, native_delay_us)
    estimator = CostEstimator(profile.cost_model, profile.emulation.cost_mode, scale)
    if kind == "fixed-window":
        return FixedWindow(s.base_window_ms, s.max_batch_size, s.max_batch_tokens,
                           s.max_queued_requests, estimator)
    if kind == "adaptive":
        return AdaptiveCostBatcher(estimator, s.max_batch_size, s.max_batch_tokens,
                                   s.max_queued_requests)
    raise ValueError(f"unknown policy {kind!r}; expected one of {POLICIES}")
