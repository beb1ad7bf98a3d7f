"""The scheduler: a synchronous step function with no I/O.

The caller (the Triton adapter, or the simulator) owns the loop and the clock:

    scheduler.submit(request, now_s)          # on arrival
    decision = scheduler.schedule(now_s)      # whenever the device is free
    scheduler.batch_started(batch, now_s)     # it dispatched decision.batch
    scheduler.batch_finished(batch, now_s)    # the batch's responses went out

``schedule`` returns either a batch to run now or the time at which it wants to be asked
again (``wake_at_s``) if nothing arrives before then.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

from .cost_model import CostEstimator
from .perception import BusyTracker, LatencyWindow
from .profile import SchedulerConfig
from .request import QueuedRequest
from .window import ElasticWindow


class QueueFull(Exception):
    """The queue holds ``max_queue_size`` requests already."""


@dataclass(frozen=True)
class BatchDecision:
    batch: tuple[QueuedRequest, ...]
    wake_at_s: float | None  # ask again at this time if nothing arrives; None = on arrival
    reason: str  # why the batch was dispatched ("full", "window", "deadline") or "wait"/"idle"
    window_ms: float
    utilization: float
    estimated_ms: float  # estimated run time of ``batch`` (0 when empty)


@dataclass(frozen=True)
class SchedulerStats:
    """Plain numbers for the adapter to log or publish; the core exports no metrics."""

    queue_depth: int
    window_ms: float
    utilization: float
    delay_variation: float
    batches: int
    requests: int
    cost_correction: float


def take_fifo(queue: Iterable[QueuedRequest], max_batch_size: int,
              max_batch_tokens: int) -> list[QueuedRequest]:
    """The longest queue prefix within the batch-size and padded-token limits.

    The first request is always taken, even alone over the token limit, so an oversized
    request can never block the queue.
    """
    batch: list[QueuedRequest] = []
    longest = 0
    for req in queue:
        if len(batch) >= max_batch_size:
            break
        new_longest = max(longest, req.seq_len)
        if batch and new_longest * (len(batch) + 1) > max_batch_tokens:
            break
        batch.append(req)
        longest = new_longest
    return batch


class Scheduler:
    """Default dynamic batching with the elastic window and an SLA guard.

    FIFO; a batch goes when it is full, when the oldest request has waited the elastic
    window, or when waiting longer would make its most urgent member miss its deadline.
    Everything already queued is drained into the batch first, so a scheduler that falls
    behind forms full batches instead of degrading to size 1.
    """

    def __init__(self, cfg: SchedulerConfig, estimator: CostEstimator):
        self.cfg = cfg
        self.estimator = estimator
        self.window = ElasticWindow.from_config(cfg)
        self.busy = BusyTracker(cfg.perception_window_ms / 1000.0)
        self.latencies = LatencyWindow(cfg.perception_window_ms / 1000.0)
        self._queue: deque[QueuedRequest] = deque()
        self._batches = 0
        self._requests = 0

    # -- arrivals -------------------------------------------------------------------
    def submit(self, request: QueuedRequest, now_s: float) -> None:
        """Queue a request; raises ``QueueFull`` when the queue is at its bound."""
        if len(self._queue) >= self.cfg.max_queue_size:
            raise QueueFull(f"queue holds max_queue_size={self.cfg.max_queue_size} requests")
        self._queue.append(request)

    def remove(self, request_ids: Sequence[int]) -> list[QueuedRequest]:
        """Take requests out of the queue (cancelled, or failed by the adapter)."""
        wanted = set(request_ids)
        kept, removed = deque(), []
        for req in self._queue:
            (removed if req.request_id in wanted else kept).append(req)
        self._queue = kept
        return removed

    def drain(self) -> list[QueuedRequest]:
        """Empty the queue (shutdown): the caller must answer every returned request."""
        drained = list(self._queue)
        self._queue.clear()
        return drained

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    # -- decisions ------------------------------------------------------------------
    def current_window_ms(self, now_s: float) -> tuple[float, float]:
        util = self.busy.utilization(now_s)
        variation = self.latencies.coefficient_of_variation(now_s)
        return self.window.adjusted_ms(util, variation), util

    def schedule(self, now_s: float, flush: bool = False) -> BatchDecision:
        """Decide, with the device free at ``now_s``, whether to dispatch a batch now.

        ``flush`` dispatches whatever is queued without waiting (shutdown drain).
        """
        window_ms, util = self.current_window_ms(now_s)
        if not self._queue:
            return BatchDecision((), None, "idle", window_ms, util, 0.0)
        cfg = self.cfg
        candidates = take_fifo(self._queue, cfg.max_batch_size, cfg.max_batch_tokens)
        estimated_ms = self.estimator.estimate_ms([r.seq_len for r in candidates])
        full = len(candidates) < len(self._queue) or len(candidates) >= cfg.max_batch_size
        window_close_s = self._queue[0].arrival_s + window_ms / 1000.0
        latest_start_s = min(r.deadline_s for r in candidates) - estimated_ms / 1000.0
        if full:
            reason = "full"
        elif flush:
            reason = "flush"
        elif now_s >= latest_start_s:
            reason = "deadline"
        elif now_s >= window_close_s:
            reason = "window"
        else:
            return BatchDecision((), min(window_close_s, latest_start_s), "wait",
                                 window_ms, util, 0.0)
        for _ in candidates:
            self._queue.popleft()
        return BatchDecision(tuple(candidates), None, reason, window_ms, util, estimated_ms)

    # -- feedback -------------------------------------------------------------------
    def batch_started(self, batch: Sequence[QueuedRequest], now_s: float) -> None:
        self.busy.start(now_s)

    def batch_finished(self, batch: Sequence[QueuedRequest], started_s: float,
                       now_s: float, succeeded: bool = True) -> None:
        """Feed back a finished batch: busy time, per-request latency, cost refit."""
        self.busy.stop(now_s)
        self._batches += 1
        self._requests += len(batch)
        if succeeded:
            self.estimator.observe([r.seq_len for r in batch], (now_s - started_s) * 1000.0)
            for req in batch:
                self.latencies.add(now_s, (now_s - req.arrival_s) * 1000.0)

    def stats(self, now_s: float) -> SchedulerStats:
        window_ms, util = self.current_window_ms(now_s)
        return SchedulerStats(
            queue_depth=len(self._queue),
            window_ms=window_ms,
            utilization=util,
            delay_variation=self.latencies.coefficient_of_variation(now_s),
            batches=self._batches,
            requests=self._requests,
            cost_correction=self.estimator.correction,
        )

    def __repr__(self) -> str:
        return f"Scheduler(queue_depth={len(self._queue)}, batches={self._batches})"
