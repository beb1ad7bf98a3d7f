"""``eventually``: how a test says "this will happen" without betting on the clock.

A test never sleeps a fixed time and then asserts: on a loaded 2-core machine a fixed sleep
is either too short (the flake) or wasted. It polls a predicate until it holds, with a hang
guard that only turns a real hang into a failure naming what never happened. The guard is
not a performance target: it is long (30 s or more) so that a slow machine never trips it.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

HANG_GUARD_S = 30.0  # the shortest guard a test may use (tests/unit/test_test_timing_guard.py)
POLL_S = 0.02

T = TypeVar("T")


class NeverHappened(AssertionError):
    """``eventually``'s predicate did not hold within the hang guard."""


def eventually(predicate: Callable[[], T], hang_guard_s: float = HANG_GUARD_S, *,
               what: str, poll_s: float = POLL_S) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value.

    ``what`` says what was awaited; it is the failure's message when ``hang_guard_s``
    seconds pass first (the last value seen, or the last exception the predicate raised,
    is added). An exception from the predicate counts as "not yet" (a scrape of a server
    still starting, say)."""
    if hang_guard_s < HANG_GUARD_S:
        raise ValueError(f"hang_guard_s must be >= {HANG_GUARD_S} s (a hang guard, not a "
                         f"timing bound), got {hang_guard_s}")
    deadline = time.monotonic() + hang_guard_s
    last: object = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - "not yet"; reported if it lasts
            value, last = None, exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise NeverHappened(f"{hang_guard_s:.0f} s without: {what} (last: {last!r})")
        time.sleep(poll_s)


def stays(predicate: Callable[[], object], for_s: float, *, what: str,
          poll_s: float = POLL_S) -> None:
    """Assert that ``predicate`` holds at every poll for ``for_s`` seconds: the negative
    check (no second answer, no extra count). It can only miss a late event, never fail a
    correct run."""
    deadline = time.monotonic() + for_s
    while True:
        assert predicate(), f"no longer true: {what}"
        if time.monotonic() >= deadline:
            return
        time.sleep(poll_s)
