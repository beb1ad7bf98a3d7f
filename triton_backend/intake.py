"""Model-config text for the plugin's three intake modes (no Triton import: tests, scripts
and operator tools use it to write deployments).

* ``release`` (the shipped default): ``execute()`` queues its requests and returns at
  once; the plugin alone holds them, sees the whole queue and decides every wait. One
  ``execute()`` call per request (Triton never holds a second one). A crash of its
  Python stub loses them: Triton 2.51's Python backend keeps nothing for requests
  released this way (clients wait for their own timeout).
* ``gather`` (``gather_config``): Triton's dynamic batcher (delay 0) sits in front.
  ``execute()`` queues its requests with the plugin and parks until the scheduler thread
  lets it go: when the batch in flight has finished, or when the plugin has nothing to
  run and waits for arrivals (bounded: 1 s, and a quarter of the smallest recent SLA).
  What arrives meanwhile waits in Triton's queue and comes over in ONE call - one call
  IPC for many requests, as Triton's own batcher gets - while the plugin still owns its
  queue and every decision. Those requests' arrival is estimated (the middle of the
  park). Like ``release``, a crash of the stub loses the requests already handed over;
  like ``hold``, refusals of what waited in Triton's queue come up to one park late.
* ``hold``: ``execute()`` decides, runs and answers its own requests in the calling
  thread and returns their responses (no scheduler thread, no responder threads, one
  decision pass per call), so they stay Triton's until then and a stub crash fails them
  (INTERNAL, within about a second) instead of losing them. Triton's dynamic batcher
  (delay 0) queues what arrives meanwhile and hands it over in the next call; that
  backlog is invisible to the plugin, so past capacity refusals come late (see README,
  "Stub crashes").
"""

from __future__ import annotations

import re

INTAKES = ("gather", "release", "hold")
HOLD_MAX_HAND_OVER = 512  # requests Triton hands over in one execute() call
GATHER_MAX_HAND_OVER = 512

_INTAKE_PARAMETER = re.compile(
    r'parameters \{ key: "intake" value: \{ string_value: "\w+" \} \}\n?')
_DYNAMIC_BATCHING = re.compile(r"dynamic_batching \{[^}]*\}\n?")


def _set_intake(config: str, intake: str) -> str:
    config = _INTAKE_PARAMETER.sub("", config)
    return (config.rstrip("\n")
            + f'\nparameters {{ key: "intake" value: {{ string_value: "{intake}" }} }}\n')


def _batcher_in_front(config: str, max_hand_over: int, priority_levels: int) -> str:
    """Triton's dynamic batcher (delay 0) in front, ragged ``INPUT_IDS``, and
    ``max_batch_size`` as the hand-over bound (one sequence per request still)."""
    config = re.sub(r"max_batch_size: \d+", f"max_batch_size: {max_hand_over}", config, count=1)
    if "allow_ragged_batch" not in config:
        config = config.replace("    dims: [ -1 ]\n",
                                "    dims: [ -1 ]\n    allow_ragged_batch: true\n", 1)
    levels = (f" priority_levels: {priority_levels} default_priority_level: "
              f"{priority_levels}" if priority_levels > 0 else "")
    batcher = f"dynamic_batching {{ max_queue_delay_microseconds: 0{levels} }}\n"
    if "dynamic_batching" in config:
        config = _DYNAMIC_BATCHING.sub(batcher, config, count=1)
    else:
        config = config.rstrip("\n") + "\n" + batcher
    return config


def hold_config(config: str, max_hand_over: int = HOLD_MAX_HAND_OVER,
                priority_levels: int = 0) -> str:
    """A shipped explicit model's ``config.pbtxt`` text switched to ``intake: hold``:
    Triton's dynamic batcher in front (delay 0), ragged ``INPUT_IDS``, and
    ``max_batch_size`` as the hand-over bound (one sequence per request still).

    ``priority_levels`` > 0 maps Triton's request ``priority`` onto the hand-over: Triton's
    queue then hands higher priorities (1 is the highest) over first, requests without one
    at the lowest level. (The Python backend of Triton 24.10 gives a Python model no
    access to a request's priority, so this queue is the only place it can act; with
    ``intake: release`` nothing waits in Triton's queue and priority has no effect.)"""
    return _set_intake(_batcher_in_front(config, max_hand_over, priority_levels), "hold")


def gather_config(config: str, max_hand_over: int = GATHER_MAX_HAND_OVER,
                  priority_levels: int = 0) -> str:
    """``config`` switched to ``intake: gather`` (the front is the same as ``hold``'s)."""
    return _set_intake(_batcher_in_front(config, max_hand_over, priority_levels), "gather")


def release_config(config: str) -> str:
    """``config`` switched to ``intake: release``: no Triton batcher in front
    (``max_batch_size: 1``, no ``dynamic_batching``), one request per ``execute()``."""
    config = _DYNAMIC_BATCHING.sub("", config)
    config = re.sub(r"max_batch_size: \d+", "max_batch_size: 1", config, count=1)
    return _set_intake(config, "release")
