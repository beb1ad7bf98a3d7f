"""A BentoML-style adaptive batcher, as a policy behind ``policy.BatchingPolicy``.

``AdaptiveCostBatcher``
    In the style of BentoML's adaptive batching dispatcher (``CorkDispatcher`` and its
    ``Optimizer`` in ``bentoml/_internal/marshal/dispatcher.py``): an online least-squares
    fit ``duration = a*n + b`` over the last ``history`` batches, and shedding of a request
    whose estimated finish already misses its budget. The rule, kept simple:

    * **shed**: a queued request whose deadline is missed even if it ran alone starting
      now (``now + estimate([its length]) > deadline``) is rejected with reason
      ``RejectReason.INFEASIBLE``;
    * **dispatch** when the batch is full (size or padded-token limit), when waiting any
      longer would make its most urgent member miss its deadline (``"deadline"``), or when
      waiting does not pay (``"cost"``);
    * **waiting pays** while ``n * gap < b``: a newcomer that rides along saves one
      batch's fixed cost ``b``, and waiting for it delays the ``n`` queued requests by the
      expected gap to the next arrival. ``gap`` is the larger of the smoothed inter-arrival
      time and the time already passed since the last arrival, so a stalled stream releases
      the batch at ``last_arrival + b/n`` at the latest.

    ``b`` is the intercept of the fit once ``min_fit_batches`` batches of at least two
    different sizes have been seen; before that (and for all per-batch cost estimates) the
    ``CostEstimator`` passed in is used.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Sequence

from scheduler_core.cost_model import CostEstimator
from scheduler_core.contract import BatchDecision, QueueFull, Reason, RejectReason
from scheduler_core.request import QueuedRequest

from .native_batcher import check_int, fifo_prefix


class AdaptiveCostBatcher:
    """BentoML-style adaptive batching with deadline shedding (rule: module docstring)."""

    def __init__(self, estimator: CostEstimator, max_batch_size: int,
                 max_batch_tokens: int | None = None, max_queue_size: int | None = None,
                 history: int = 50, min_fit_batches: int = 5, gap_smoothing: float = 0.1):
        check_int("max_batch_size", max_batch_size)
        if max_batch_tokens is not None:
            check_int("max_batch_tokens", max_batch_tokens)
        if max_queue_size is not None:
            check_int("max_queue_size", max_queue_size)
        check_int("history", history, lo=2)
        check_int("min_fit_batches", min_fit_batches, lo=2)
        if not 0 < gap_smoothing <= 1:
            raise ValueError(f"gap_smoothing must be within (0, 1] (got {gap_smoothing!r})")
        self.estimator = estimator
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_queue_size = max_queue_size
        self.min_fit_batches = min(min_fit_batches, history)
        self.gap_smoothing = gap_smoothing
        # FIFO of queued requests; shed ones stay in the deque until they reach the front
        # (lazy deletion), ``_queued`` is the truth.
        self._queue: deque[QueuedRequest] = deque()
        self._queued: dict[int, QueuedRequest] = {}
        # (latest feasible start alone, seq, request): the shedding check pops from the top.
        self._latest_start: list[tuple[float, int, QueuedRequest]] = []
        self._seq = itertools.count()
        self._last_arrival_s: float | None = None
        self._gap_s: float | None = None  # smoothed inter-arrival time
        # Least-squares state over the last ``history`` batches: (n, duration_s).
        self._samples: deque[tuple[int, float]] = deque(maxlen=history)
        self._sums = [0.0, 0.0, 0.0, 0.0]  # sum n, sum d, sum n*n, sum n*d
        self.fit_a_s: float | None = None
        self.fit_b_s: float | None = None
        self.batches = 0
        self.shed = 0

    # -- arrivals ---------------------------------------------------------------------------
    def submit(self, request: QueuedRequest, now_s: float) -> None:
        if self.max_queue_size is not None and len(self._queued) >= self.max_queue_size:
            raise QueueFull(f"queue holds max_queue_size={self.max_queue_size} requests")
        if self._last_arrival_s is not None:
            gap = max(now_s - self._last_arrival_s, 0.0)
            self._gap_s = gap if self._gap_s is None else (
                self._gap_s + self.gap_smoothing * (gap - self._gap_s))
        self._last_arrival_s = now_s
        self._queue.append(request)
        self._queued[request.request_id] = request
        alone_s = self.estimator.estimate_ms((request.seq_len,)) / 1000.0
        heapq.heappush(self._latest_start,
                       (request.deadline_s - alone_s, next(self._seq), request))

    @property
    def queue_depth(self) -> int:
        return len(self._queued)

    def drain(self) -> list[QueuedRequest]:
        drained = [r for r in self._queue if r.request_id in self._queued]
        self._queue.clear()
        self._queued.clear()
        self._latest_start.clear()
        return drained

    def tick(self, now_s: float) -> None:
        pass  # no periodic layers

    # -- decisions --------------------------------------------------------------------------
    def _shed(self, now_s: float) -> list[tuple[QueuedRequest, str]]:
        rejected = []
        heap = self._latest_start
        while heap and heap[0][0] < now_s:
            _, _, req = heapq.heappop(heap)
            if req.request_id not in self._queued:
                continue  # already dispatched
            # Re-check with the current estimate (its correction may have moved).
            alone_s = self.estimator.estimate_ms((req.seq_len,)) / 1000.0
            latest = req.deadline_s - alone_s
            if latest < now_s:
                del self._queued[req.request_id]
                rejected.append((req, RejectReason.INFEASIBLE))
            else:
                heapq.heappush(heap, (latest, next(self._seq), req))
        self.shed += len(rejected)
        return rejected

    def fixed_cost_s(self, lengths: Sequence[int]) -> float:
        """``b``: the fitted intercept, or (before the fit) the estimator's intercept for
        batches of the oldest request's length."""
        if self.fit_b_s is not None:
            return self.fit_b_s
        one = self.estimator.estimate_ms(lengths[:1])
        two = self.estimator.estimate_ms([lengths[0], lengths[0]])
        return max(2.0 * one - two, 0.0) / 1000.0

    def schedule(self, now_s: float, flush: bool = False) -> BatchDecision:
        rejected = tuple(self._shed(now_s))
        queue, queued = self._queue, self._queued
        while queue and queue[0].request_id not in queued:
            queue.popleft()
        if not queued:
            return BatchDecision((), None, Reason.IDLE, 0.0, 0.0, 0.0, rejected)
        live = (r for r in queue if r.request_id in queued)
        candidates = fifo_prefix(list(itertools.islice(live, self.max_batch_size)),
                                 self.max_batch_size, self.max_batch_tokens)
        n = len(candidates)
        lengths = [r.seq_len for r in candidates]
        estimated_ms = self.estimator.estimate_ms(lengths)
        latest_start_s = min(r.deadline_s for r in candidates) - estimated_ms / 1000.0
        b_s = self.fixed_cost_s(lengths)
        wait_ms = 0.0
        if n >= self.max_batch_size or n < len(queued):
            reason = Reason.FULL
        elif flush:
            reason = Reason.FLUSH
        elif now_s >= latest_start_s:
            reason = Reason.DEADLINE
        else:
            since_last = now_s - self._last_arrival_s
            gap_s = since_last if self._gap_s is None else max(self._gap_s, since_last)
            if n * gap_s >= b_s:
                reason = Reason.COST
            else:
                wake_s = min(latest_start_s, self._last_arrival_s + b_s / n)
                wait_ms = (wake_s - now_s) * 1000.0
                return BatchDecision((), wake_s, Reason.WAIT, wait_ms, 0.0, 0.0, rejected)
        for r in candidates:
            del queued[r.request_id]
        return BatchDecision(tuple(candidates), None, reason, wait_ms, 0.0, estimated_ms,
                             rejected)

    # -- feedback ---------------------------------------------------------------------------
    def batch_started(self, batch: Sequence[QueuedRequest], now_s: float) -> None:
        pass

    def batch_finished(self, batch: Sequence[QueuedRequest], started_s: float, now_s: float,
                       succeeded: bool = True) -> None:
        """Feed one finished batch into the estimator and the ``a*n + b`` fit."""
        self.batches += 1
        if not succeeded or not batch:
            return
        duration_s = now_s - started_s
        self.estimator.observe([r.seq_len for r in batch], duration_s * 1000.0)
        sums, samples = self._sums, self._samples
        if len(samples) == samples.maxlen:
            old_n, old_d = samples[0]
            sums[0] -= old_n
            sums[1] -= old_d
            sums[2] -= old_n * old_n
            sums[3] -= old_n * old_d
        n = len(batch)
        samples.append((n, duration_s))
        sums[0] += n
        sums[1] += duration_s
        sums[2] += n * n
        sums[3] += n * duration_s
        self._refit()

    def _refit(self) -> None:
        count = len(self._samples)
        if count < self.min_fit_batches:
            return
        s_n, s_d, s_nn, s_nd = self._sums
        denom = count * s_nn - s_n * s_n
        if denom <= 1e-9 * max(count * s_nn, 1.0):
            return  # all batches the same size: the line is not determined
        a = (count * s_nd - s_n * s_d) / denom
        b = (s_d - a * s_n) / count
        self.fit_a_s, self.fit_b_s = max(a, 0.0), max(b, 0.0)

    def __repr__(self) -> str:
        return (f"AdaptiveCostBatcher(max_batch_size={self.max_batch_size}, "
                f"queue_depth={len(self._queued)}, shed={self.shed})")
