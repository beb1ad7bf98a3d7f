"""Baseline batching policies behind the same contract as ``scheduler.Scheduler``
(``policy.BatchingPolicy``), so the simulator (and, in principle, the Triton adapter) can
drive any of them. Like the scheduler they are pure: no clock, no threads, ``now_s``
comes in as an argument.

``TritonDynamicBatcher``
    A model of Triton's dynamic batcher for ONE model instance with ``allow_ragged_batch``
    (no shape check, so no token limit). What it follows:

    * Triton user guide, "Batchers" (docs/user_guide/batcher.md in
      triton-inference-server/server; docs.nvidia.com/deeplearning/triton-inference-server/
      user-guide/docs/batcher.html), sections *Preferred Batch Sizes* and *Delayed
      Batching*: requests join in arrival order; if a batch of a preferred size can be
      formed, the largest possible preferred size is sent; when neither a maximum nor a
      preferred size can be formed, the batch is delayed "as long as no request is delayed
      longer than" ``max_queue_delay_microseconds``; when the delay expires the batch is
      sent as is.
    * triton-inference-server/core ``src/dynamic_batch_scheduler.cc``,
      ``GetDynamicBatch()``: the delay is measured from the OLDEST pending request
      (``queue_.OldestEnqueueTime()``); a preferred size is sent at once only while that
      delay is not exceeded; once it is exceeded (or with a zero delay) everything pending,
      up to ``max_batch_size``, is sent; otherwise the batcher sleeps for the remaining
      delay.
    * ``model_config_utils.cc`` (``NormalizeModelConfig``): with dynamic batching and no
      ``preferred_batch_size``, Triton sets the preferred sizes to ``[max_batch_size]``.

    Simplification: Triton's batcher thread can stage the next payload while the instance
    is busy and keeps growing it until the instance picks it up; here the batch is formed at
    the instant the instance becomes free, which is the same "nothing is sealed early"
    behaviour for one instance. Queue policies (timeouts, priorities) are not modelled; the
    queue is unbounded unless ``max_queue_size`` is given (Triton's default is unbounded).

``FixedWindow``
    FIFO; a batch goes when it is full or when the oldest request has waited ``window_ms``.

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
import math
from collections import deque
from typing import Sequence

from .cost_model import CostEstimator
from .request import QueuedRequest
from .profile import HardwareProfile
from .entry_queue import take_fifo
from .policy import BatchDecision, QueueFull, Reason, RejectReason
from .scheduler import Scheduler


def _check_int(name: str, value, lo: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {value!r})")


def _check_number(name: str, value, lo: float = 0.0) -> None:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < lo):
        raise ValueError(f"{name} must be a finite number >= {lo} (got {value!r})")


def fifo_prefix(queue: Sequence[QueuedRequest] | deque, max_batch_size: int,
                max_batch_tokens: int | None) -> list[QueuedRequest]:
    """The longest queue prefix within the size and padded-token limits (the first request
    is always taken, so an oversized request cannot block the queue); no token limit when
    ``max_batch_tokens`` is None (Triton's batcher has none)."""
    if max_batch_tokens is None:
        return list(itertools.islice(queue, max_batch_size))
    return take_fifo(queue, max_batch_size, max_batch_tokens)


class _FifoPolicy:
    """A bounded FIFO queue and the no-op feedback hooks the baselines share."""

    def __init__(self, max_queue_size: int | None, estimator: CostEstimator | None):
        if max_queue_size is not None:
            _check_int("max_queue_size", max_queue_size)
        self.max_queue_size = max_queue_size
        self.estimator = estimator
        self._queue: deque[QueuedRequest] = deque()
        self.batches = 0

    def submit(self, request: QueuedRequest, now_s: float) -> None:
        """Queue a request; raises ``QueueFull`` at ``max_queue_size``."""
        if self.max_queue_size is not None and len(self._queue) >= self.max_queue_size:
            raise QueueFull(f"queue holds max_queue_size={self.max_queue_size} requests")
        self._queue.append(request)

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def drain(self) -> list[QueuedRequest]:
        """Empty the queue (shutdown): the caller must answer every returned request."""
        drained = list(self._queue)
        self._queue.clear()
        return drained

    def tick(self, now_s: float) -> None:
        pass  # no periodic layers

    def batch_started(self, batch: Sequence[QueuedRequest], now_s: float) -> None:
        pass

    def batch_finished(self, batch: Sequence[QueuedRequest], started_s: float, now_s: float,
                       succeeded: bool = True) -> None:
        self.batches += 1
        if succeeded and self.estimator is not None:
            self.estimator.observe([r.seq_len for r in batch], (now_s - started_s) * 1000.0)

    def _dispatch(self, count: int, reason: str, window_ms: float) -> BatchDecision:
        popleft = self._queue.popleft
        batch = tuple(popleft() for _ in range(count))
        estimated = (self.estimator.estimate_ms([r.seq_len for r in batch])
                     if self.estimator is not None else 0.0)
        return BatchDecision(batch, None, reason, window_ms, 0.0, estimated)


class TritonDynamicBatcher(_FifoPolicy):
    """Triton's dynamic batcher for one model instance (see the module docstring).

    ``utilization`` in its decisions is always 0 (Triton measures none); ``estimated_ms``
    is filled only when an ``estimator`` is given.
    """

    def __init__(self, max_batch_size: int, max_queue_delay_us: int = 0,
                 preferred_batch_sizes: Sequence[int] = (), max_queue_size: int | None = None,
                 estimator: CostEstimator | None = None):
        _check_int("max_batch_size", max_batch_size)
        _check_number("max_queue_delay_us", max_queue_delay_us)
        for size in preferred_batch_sizes:
            if (isinstance(size, bool) or not isinstance(size, int)
                    or not 1 <= size <= max_batch_size):
                raise ValueError(f"preferred_batch_sizes: each must be an integer in "
                                 f"[1, max_batch_size={max_batch_size}] (got {size!r})")
        preferred = tuple(sorted(set(preferred_batch_sizes)))
        super().__init__(max_queue_size, estimator)
        self.max_batch_size = max_batch_size
        self.max_queue_delay_us = max_queue_delay_us
        self._delay_s = max_queue_delay_us / 1e6
        # Triton's config normalisation: no preferred sizes means [max_batch_size].
        self.preferred_batch_sizes = preferred or (max_batch_size,)

    def _largest_preferred(self, pending: int) -> int:
        best = 0
        for size in self.preferred_batch_sizes:
            if size <= pending:
                best = size
        return best

    def schedule(self, now_s: float, flush: bool = False) -> BatchDecision:
        window_ms = self.max_queue_delay_us / 1000.0
        queue = self._queue
        if not queue:
            return BatchDecision((), None, Reason.IDLE, window_ms, 0.0, 0.0)
        take = min(len(queue), self.max_batch_size)
        delay_s = self._delay_s
        deadline_s = queue[0].arrival_s + delay_s
        delay_exceeded = delay_s > 0 and now_s >= deadline_s
        if not delay_exceeded:
            preferred = self._largest_preferred(take)
            if preferred:
                reason = Reason.FULL if preferred == self.max_batch_size else Reason.PREFERRED
                return self._dispatch(preferred, reason, window_ms)
        if delay_exceeded:
            return self._dispatch(take, Reason.DELAY, window_ms)
        if delay_s == 0:
            return self._dispatch(take, "no-delay", window_ms)
        if flush:
            return self._dispatch(take, Reason.FLUSH, window_ms)
        return BatchDecision((), deadline_s, Reason.WAIT, window_ms, 0.0, 0.0)

    def __repr__(self) -> str:
        return (f"TritonDynamicBatcher(max_batch_size={self.max_batch_size}, "
                f"max_queue_delay_us={self.max_queue_delay_us}, "
                f"preferred={list(self.preferred_batch_sizes)}, queue_depth={len(self._queue)})")


class FixedWindow(_FifoPolicy):
    """FIFO; dispatch when full, or when the oldest request has waited ``window_ms``."""

    def __init__(self, window_ms: float, max_batch_size: int,
                 max_batch_tokens: int | None = None, max_queue_size: int | None = None,
                 estimator: CostEstimator | None = None):
        _check_number("window_ms", window_ms)
        _check_int("max_batch_size", max_batch_size)
        if max_batch_tokens is not None:
            _check_int("max_batch_tokens", max_batch_tokens)
        super().__init__(max_queue_size, estimator)
        self.window_ms = window_ms
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self._window_s = window_ms / 1000.0

    def schedule(self, now_s: float, flush: bool = False) -> BatchDecision:
        queue = self._queue
        if not queue:
            return BatchDecision((), None, Reason.IDLE, self.window_ms, 0.0, 0.0)
        if len(queue) >= self.max_batch_size:
            take = self.max_batch_size if self.max_batch_tokens is None else len(
                fifo_prefix(queue, self.max_batch_size, self.max_batch_tokens))
            return self._dispatch(take, Reason.FULL, self.window_ms)
        take = len(fifo_prefix(queue, self.max_batch_size, self.max_batch_tokens))
        if take < len(queue):
            return self._dispatch(take, Reason.FULL, self.window_ms)
        if flush:
            return self._dispatch(take, Reason.FLUSH, self.window_ms)
        close_s = queue[0].arrival_s + self._window_s
        if now_s >= close_s:
            return self._dispatch(take, Reason.WINDOW, self.window_ms)
        return BatchDecision((), close_s, Reason.WAIT, self.window_ms, 0.0, 0.0)

    def __repr__(self) -> str:
        return (f"FixedWindow(window_ms={self.window_ms}, max_batch_size={self.max_batch_size}, "
                f"queue_depth={len(self._queue)})")


class AdaptiveCostBatcher:
    """BentoML-style adaptive batching with deadline shedding (rule: module docstring)."""

    def __init__(self, estimator: CostEstimator, max_batch_size: int,
                 max_batch_tokens: int | None = None, max_queue_size: int | None = None,
                 history: int = 50, min_fit_batches: int = 5, gap_smoothing: float = 0.1):
        _check_int("max_batch_size", max_batch_size)
        if max_batch_tokens is not None:
            _check_int("max_batch_tokens", max_batch_tokens)
        if max_queue_size is not None:
            _check_int("max_queue_size", max_queue_size)
        _check_int("history", history, lo=2)
        _check_int("min_fit_batches", min_fit_batches, lo=2)
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
                           s.max_queue_size, estimator)
    if kind == "adaptive":
        return AdaptiveCostBatcher(estimator, s.max_batch_size, s.max_batch_tokens,
                                   s.max_queue_size)
    raise ValueError(f"unknown policy {kind!r}; expected one of {POLICIES}")
