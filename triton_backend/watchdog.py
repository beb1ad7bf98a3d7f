"""The watchdog on the batch the executor runs: one past its bound has its requests
answered INTERNAL at once (its call cannot return them); when the executor returns, its
results find them answered and are dropped.

``Runner`` tells it each batch it starts (``watch``) and that it returned (``clear``); the
model's metrics thread asks (``check``) when the running batch reaches its bound
(``due_in_s``).
"""

from __future__ import annotations

from typing import Sequence

import triton_python_backend_utils as pb_utils

# The watchdog's bound on a batch: this many times its estimate, and at least the floor
# (parameter batch_timeout_floor_ms): an estimate is never exact, a hang is far past it.
BATCH_TIMEOUT_FACTOR = 10.0


class Running:
    """The batch on the executor now, as the watchdog reads it."""

    __slots__ = ("batch", "started_s", "bound_s", "estimated_ms", "hung")

    def __init__(self, batch, started_s: float, bound_s: float, estimated_ms: float):
        self.batch, self.started_s, self.bound_s = batch, started_s, bound_s
        self.estimated_ms, self.hung = estimated_ms, False


class Watchdog:
    """One model's watchdog (see the module docstring)."""

    def __init__(self, model_name: str, answers, metrics, floor_s: float = 5.0):
        self.model_name = model_name
        self.answers = answers
        self.metrics = metrics
        self.floor_s = floor_s
        self.running: Running | None = None
        self.hung_batches = 0

    def watch(self, batch: Sequence, started_s: float, estimated_ms: float) -> Running:
        """``batch`` goes on the executor at ``started_s``: watched until ``clear``."""
        self.running = Running(
            tuple(batch), started_s,
            max(self.floor_s, BATCH_TIMEOUT_FACTOR * estimated_ms / 1000.0), estimated_ms)
        return self.running

    def clear(self) -> None:
        self.running = None

    def due_in_s(self, now: float) -> float:
        """Seconds until ``check`` can find a hung batch: the running batch's bound, and at
        most the floor (a batch that starts after this is asked is bound at least that far
        off)."""
        running = self.running
        if running is None or running.hung:
            return self.floor_s
        return min(self.floor_s, running.started_s + running.bound_s - now)

    def check(self, now: float) -> int:
        """A batch on the executor past its bound has its unanswered requests answered
        INTERNAL, sent at once (its call cannot return them), and counts once in
        hung_batches_total. New work waits in Triton's queue until the executor returns
        (the liveness probe, server_ops/probe.py, restarts a pod whose never does).
        Returns how many requests it answered."""
        running = self.running
        if running is None or running.hung or now - running.started_s < running.bound_s:
            return 0
        running.hung = True
        self.hung_batches += 1
        self.metrics.on_event("hung_batches_total")
        bound_ms = running.bound_s * 1000.0
        pb_utils.Logger.log_error(
            f"{self.model_name}: a batch of {len(running.batch)} has run "
            f"{(now - running.started_s) * 1000.0:.0f} ms, past the watchdog's bound of "
            f"{bound_ms:.0f} ms (estimate {running.estimated_ms:.1f} ms): its requests are "
            "answered INTERNAL; the model serves again once the executor returns")
        return self.answers.fail_now(
            [r.handle for r in running.batch], "batch_hung",
            f"batch ran past the watchdog's bound of {bound_ms:.0f} ms (its estimate "
            f"{running.estimated_ms:.1f} ms x {BATCH_TIMEOUT_FACTOR:g}, at least "
            "batch_timeout_floor_ms): the executor has not returned")
