"""Triton's dynamic batcher and a fixed-window batcher, modelled as policies behind
``policy.BatchingPolicy`` (the baselines the explicit scheduler is compared with).

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
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from typing import Sequence

from scheduler_core.cost_model import CostEstimator
from scheduler_core.entry_queue import take_fifo
from scheduler_core.contract import BatchDecision, QueueFull, Reason
from scheduler_core.request import QueuedRequest


def check_int(name: str, value, lo: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {value!r})")


def check_number(name: str, value, lo: float = 0.0) -> None:
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
            check_int("max_queue_size", max_queue_size)
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
        check_int("max_batch_size", max_batch_size)
        check_number("max_queue_delay_us", max_queue_delay_us)
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
        check_number("window_ms", window_ms)
        check_int("max_batch_size", max_batch_size)
        if max_batch_tokens is not None:
            check_int("max_batch_tokens", max_batch_tokens)
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
