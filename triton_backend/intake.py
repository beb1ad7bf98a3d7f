"""The plugin's intakes: how ``execute()`` hands a call's requests to the plugin, one named
part each (no Triton import: unit-tested without a server). ``intake_config`` writes each
one's ``config.pbtxt``; ``ExplicitModel`` (``explicit_model``) drives them.

* ``hold`` (the shipped default): Triton's dynamic batcher (delay 0, no queue policy, so
  its queue prefetches) in front. ``execute()`` decides, runs and answers its own requests
  in the calling thread (``hold_driver.HoldDriver``: no scheduler thread, no responder
  threads), so they stay Triton's until answered and a stub crash fails them (INTERNAL,
  within about a second) instead of losing them. Answers go back in the call's returned
  list, except one that is in time now and would be late at the call's estimated end,
  which goes at once through its response sender. What arrives meanwhile waits in
  Triton's queue and comes over, all of it, in the next call; the plugin is not told when
  it arrived and dates it conservatively (``HoldIntake.admission_arrival``).
* ``release``: ``execute()`` queues its requests and returns at once; the plugin alone
  holds them, sees the whole queue and decides every wait. One ``execute()`` call per
  request. A crash of its Python stub loses them: Triton 2.51's Python backend keeps
  nothing for requests released this way (clients wait for their own timeout).
* ``gather``: the front is ``hold``'s. ``execute()`` queues its requests with the plugin and
  parks until the scheduler thread lets it go: when the batch in flight has finished, or
  when the plugin has nothing to run and waits for arrivals (bounded: 1 s, and a quarter of
  the smallest recent SLA). What arrives meanwhile comes over in ONE call. Like
  ``release``, a crash of the stub loses the requests already handed over.

Intake hold is read by its driver (``hold_driver.HoldDriver``): ``admission_arrival``,
``earliest_arrival`` and ``call_returned``. The threaded intakes (release, gather) follow
the threaded driver's contract (``threaded_driver.ThreadedDriver``):

1. ``call_arrival(now_s, requests)`` at the start of every ``execute()`` call (``requests``
   of them), before decoding: when they arrived (the deadlines and latency metrics count
   from it).
2. ``execute()`` queues the call's requests and, with the driver's lock held, calls
   ``call_queued_locked()``; then, without the lock, ``after_queued(requests,
   min_sla_ms, generation)`` (gather parks there) and returns None. ``generation`` is
   ``generation()`` read before queueing.
3. The scheduler thread, with the driver's lock held: ``idle_locked()`` before it waits
   for arrivals, ``batch_finished_locked(started_s)`` when the device is free again
   (gather may wait there, on the driver's condition, for the next call).
4. ``stop_locked()`` once the model unloads (lock held): nothing parks after it.
5. ``summary()``: figures for the stats log line ("" when there are none).

``waker.Waker`` (intake hold, where Triton's queue does not prefetch) has a contract of
its own, in its docstring.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol

DEFAULT_INTAKE = "hold"  # with Triton's batcher in front; without one only release runs

# A call that starts within this long after the previous one returned (intake hold) or
# came back from its park (intake gather) carries requests that queued in Triton
# meanwhile: their arrival time is estimated (see hand_over_arrival) ...
HAND_OVER_S = 0.005
# ... and this much longer for each request the call carries: Triton copies each one's
# inputs before the call starts. The previous call's answers count alike: Triton takes a
# returned list's responses before it hands over again. Twice the slope measured here
# (docs/defaults.md).
HAND_OVER_PER_REQUEST_S = 0.00025
# intake: gather. A call parked while a batch runs returns at the latest after this long
# (a safety bound: normally the batch's end releases it).
GATHER_PARK_MAX_S = 1.0
# ... and after this fraction of the smallest recent SLA: what queues in Triton meanwhile
# is invisible to the plugin, which must see it in time to refuse what cannot make its
# deadline (docs/defaults.md).
GATHER_PARK_SLA_FRACTION = 0.25
# When the device frees and a call was parked, the scheduler thread lets it return and
# may wait at most this long for the next call's requests (those that queued in Triton
# meanwhile) before deciding; parameter gather_grace_ms. Default 0 (decide at once): a
# Python thread woken from a wait needs the GIL back, so a short grace lasts far longer
# than asked and costs peak rate (docs/defaults.md). Without a grace the next call still
# arrives soon: an idle scheduler wakes on it, and one that has just dispatched leftovers
# meets it at the next batch.
GATHER_GRACE_MS = 0.0
# ... but at least this share of the batch that just ended (capped below): where a batch
# takes long against the host path (a slow device, or the EMULATED device time-scaled),
# the requests that queued in Triton during it would otherwise miss the next batch and
# wait a whole batch more (docs/defaults.md); where batches are a few ms it stays well
# under the GIL hand-over that made a fixed grace cost peak rate.
GATHER_GRACE_BATCH_FRACTION = 0.02
GATHER_GRACE_MAX_S = 0.005


def hand_over_arrival(now_s: float, previous: tuple[float, float] | None,
                      requests: int = 1, previous_answers: int = 0) -> float:
    """When a call's ``requests`` arrived. They queued in Triton while the previous call
    (intake hold), or its park (intake gather), ran from ``previous[0]`` to
    ``previous[1]``, somewhere in between; the plugin is not told when (Triton 24.10's
    Python backend exposes no queue timestamps): take the middle, so deadlines and the
    latency histograms count that wait. A call that comes later than ``hand_over_s(
    requests)`` after that return found Triton's queue empty then: its requests arrived
    just now."""
    if handed_over(now_s, previous, requests, previous_answers):
        return (previous[0] + previous[1]) / 2.0
    return now_s


def handed_over(now_s: float, previous: tuple[float, float] | None, requests: int,
                previous_answers: int = 0) -> bool:
    """Whether a call of ``requests`` starting at ``now_s`` carries what queued in Triton
    during ``previous`` (its start and return, with ``previous_answers`` answers in its
    returned list): it starts within ``hand_over_s`` of that return."""
    return previous is not None and now_s - previous[1] <= hand_over_s(
        requests, previous_answers)


def hand_over_s(requests: int, previous_answers: int = 0) -> float:
    """How long after a return a call of ``requests`` still counts as Triton handing
    over what queued meanwhile (HAND_OVER_S, HAND_OVER_PER_REQUEST_S): Triton copies each
    new request's inputs, and first takes the previous call's returned answers, each
    costing about as much."""
    return HAND_OVER_S + HAND_OVER_PER_REQUEST_S * max(requests - 1 + previous_answers, 0)


class Intake(Protocol):
    """A threaded intake (see the module docstring for the driver contract)."""

    name: str
    threaded: bool

    def call_arrival(self, now_s: float, requests: int) -> float: ...

    def generation(self) -> int: ...

    def call_queued_locked(self) -> None: ...

    def after_queued(self, requests: int, min_sla_ms: float, generation: int) -> None: ...

    def idle_locked(self) -> None: ...

    def batch_finished_locked(self, started_s: float) -> None: ...

    def stop_locked(self) -> None: ...

    def summary(self) -> str: ...


class _Base:
    """What a threaded intake does not do (every hook a no-op)."""

    name = ""
    threaded = True

    def __init__(self, *_args, **_kwargs):
        pass

    def call_arrival(self, now_s: float, requests: int) -> float:
        return now_s

    def generation(self) -> int:
        return 0

    def call_queued_locked(self) -> None:
        pass

    def after_queued(self, requests: int, min_sla_ms: float, generation: int) -> None:
        pass

    def idle_locked(self) -> None:
        pass

    def batch_finished_locked(self, started_s: float) -> None:
        pass

    def stop_locked(self) -> None:
        pass

    def summary(self) -> str:
        return ""


class HoldIntake:
    """``execute()`` answers its own requests (see the module docstring): what the hold
    driver needs to date a call's requests."""

    name = "hold"
    threaded = False

    def __init__(self, *_args, **_kwargs):
        self._previous: tuple[float, float] | None = None  # the last call's (start, return)
        self._previous_answers = 0  # the answers it returned

    def call_arrival(self, now_s: float, requests: int) -> float:
        """The middle estimate (``hand_over_arrival``): what the latency figures count."""
        return hand_over_arrival(now_s, self._previous, requests, self._previous_answers)

    def admission_arrival(self, now_s: float, requests: int) -> tuple[float, bool]:
        """(the arrival date ``hold_driver`` gives a call's requests, whether they queued
        in Triton during the previous call). Conservative: a hand-over's requests count
        from the previous call's start, the earliest they can have arrived, so a refusal
        never takes a request for younger than it is; a call that starts later than
        ``hand_over_s(requests)`` after the last return found Triton's queue empty then."""
        if handed_over(now_s, self._previous, requests, self._previous_answers):
            return self._previous[0], True
        return now_s, False

    def earliest_arrival(self, now_s: float) -> float:
        """The earliest a call's requests can have arrived, whatever the gap before the
        call: the previous call's start (now, for the first call)."""
        return now_s if self._previous is None else self._previous[0]

    def call_returned(self, start_s: float, end_s: float, answers: int = 0) -> None:
        self._previous = (start_s, end_s)
        self._previous_answers = answers

    def summary(self) -> str:
        return ""


class ReleaseIntake(_Base):
    """``execute()`` queues its one request and returns (see the module docstring)."""

    name = "release"


class GatherIntake(_Base):
    """``execute()`` queues its requests and parks while a batch runs (see the module
    docstring). ``lock`` is the driver's lock (it guards the scheduler) and ``cond`` the
    driver's condition over it (notified when a call's requests are queued); parked calls
    wait on a second condition over the same lock."""

    name = "gather"

    def __init__(self, lock, cond: threading.Condition,
                 grace_s: float = GATHER_GRACE_MS / 1e3, default_sla_ms: float = 200.0,
                 clock: Callable[[], float] = time.monotonic):
        self._cond = cond
        self._park_cond = threading.Condition(lock)
        self.grace_s = grace_s
        self._clock = clock
        self._parked = 0  # calls parked now
        self._release_gen = 0  # bumped to let parked calls return
        self._calls = 0  # calls whose requests are queued (ends a grace wait)
        self._stopping = False
        self._recent_min_sla_ms = default_sla_ms
        self._prev_call_start = 0.0
        self._prev_parked: tuple[float, float] | None = None  # (start, return) if it parked
        self.stats = {"calls": 0, "requests": 0, "parked": 0, "park_timeouts": 0,
                      "graces": 0, "grace_hits": 0, "grace_wait_s": 0.0}

    @property
    def parked(self) -> int:
        return self._parked

    def call_arrival(self, now_s: float, requests: int) -> float:
        arrival = hand_over_arrival(now_s, self._prev_parked, requests)
        self._prev_call_start, self._prev_parked = now_s, None
        return arrival

    def generation(self) -> int:
        return self._release_gen  # a release from now on lets this call return

    def call_queued_locked(self) -> None:
        self._calls += 1

    def after_queued(self, requests: int, min_sla_ms: float, generation: int) -> None:
        """Return only once the scheduler thread lets parked calls go - when the batch in
        flight has finished, or when it has nothing to run and waits - or after
        GATHER_PARK_MAX_S (and a quarter of the smallest recent SLA). Meanwhile what
        arrives queues in Triton and comes over in one call."""
        # The smallest recent SLA (it creeps back up by 1 % a call).
        self._recent_min_sla_ms = min(min_sla_ms, self._recent_min_sla_ms * 1.01)
        with self._cond:
            stats = self.stats
            stats["calls"] += 1
            stats["requests"] += requests
            if self._release_gen != generation or self._stopping:
                return
            stats["parked"] += 1
            deadline = self._clock() + min(
                GATHER_PARK_MAX_S, GATHER_PARK_SLA_FRACTION * self._recent_min_sla_ms / 1000.0)
            self._parked += 1
            try:
                while self._release_gen == generation and not self._stopping:
                    left = deadline - self._clock()
                    if left <= 0:
                        stats["park_timeouts"] += 1
                        return
                    self._park_cond.wait(left)
            finally:
                self._parked -= 1
                self._prev_parked = (self._prev_call_start, self._clock())

    def _let_go_locked(self) -> None:
        self._release_gen += 1
        self._park_cond.notify_all()

    def idle_locked(self) -> None:
        """Nothing to run: let parked calls go, or nothing else can arrive."""
        if self._parked:
            self._let_go_locked()

    def batch_finished_locked(self, started_s: float) -> None:
        """The device is free again: a parked call may return now; then wait (at most the
        grace) for the next call's requests - those that queued in Triton while the batch
        ran - so the next decision sees them."""
        if not self._parked:
            return
        calls = self._calls
        self._let_go_locked()
        t0 = self._clock()
        grace_s = max(self.grace_s, min(GATHER_GRACE_MAX_S,
                                        GATHER_GRACE_BATCH_FRACTION * (t0 - started_s)))
        if self._stopping or grace_s <= 0:
            return
        deadline = t0 + grace_s
        while self._calls == calls and not self._stopping:
            left = deadline - self._clock()
            if left <= 0:
                break
            self._cond.wait(left)
        stats = self.stats
        stats["graces"] += 1
        stats["grace_hits"] += self._calls != calls
        stats["grace_wait_s"] += self._clock() - t0

    def stop_locked(self) -> None:
        self._stopping = True
        self._park_cond.notify_all()

    def summary(self) -> str:
        g = self.stats
        return (f" gather: calls={g['calls']} requests_per_call="
                f"{g['requests'] / max(1, g['calls']):.1f} parked={g['parked']} "
                f"park_timeouts={g['park_timeouts']} graces={g['graces']} "
                f"grace_hits={g['grace_hits']} grace_wait_us_mean="
                f"{1e6 * g['grace_wait_s'] / max(1, g['graces']):.0f}")


INTAKE_CLASSES = {cls.name: cls for cls in (GatherIntake, ReleaseIntake, HoldIntake)}
INTAKES = tuple(INTAKE_CLASSES)  # ("gather", "release", "hold")


def make_intake(name: str, lock, cond: threading.Condition,
                grace_s: float = GATHER_GRACE_MS / 1e3, default_sla_ms: float = 200.0) -> Intake:
    """The intake named ``name`` over the driver's ``lock`` and ``cond`` (see GatherIntake);
    ValueError naming the known ones otherwise."""
    cls = INTAKE_CLASSES.get(name)
    if cls is None:
        raise ValueError(f"unknown intake {name!r}; known: {', '.join(INTAKES)}")
    return cls(lock, cond, grace_s=grace_s, default_sla_ms=default_sla_ms)
