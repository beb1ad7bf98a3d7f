"""Model-config text for the plugin's two intake modes (no Triton import: tests, scripts
and operator tools use it to write deployments).

* ``release`` (the shipped default): ``execute()`` queues its requests and returns at
  once; the plugin alone holds them, sees the whole queue and decides every wait. A crash
  of its Python stub loses them: Triton 2.51's Python backend keeps nothing for requests
  released this way (clients wait for their own timeout).
* ``hold``: ``execute()`` returns only once its requests are answered, so they stay
  Triton's until then and a stub crash fails them (INTERNAL, within about a second)
  instead of losing them. Triton's dynamic batcher (delay 0) queues what arrives
  meanwhile and hands it over in one call; that backlog is invisible to the plugin, so
  past capacity refusals come late (see README, "Stub crashes").
"""

from __future__ import annotations

import re

HOLD_MAX_HAND_OVER = 512  # requests Triton hands over in one execute() call


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
    if 'key: "intake"' in config:
        config = re.sub(r'parameters \{ key: "intake" value: \{ string_value: "\w+" \} \}\n?',
                        "", config)
    config = re.sub(r"max_batch_size: \d+", f"max_batch_size: {max_hand_over}", config, count=1)
    if "allow_ragged_batch" not in config:
        config = config.replace("    dims: [ -1 ]\n",
                                "    dims: [ -1 ]\n    allow_ragged_batch: true\n", 1)
    if "dynamic_batching" not in config:
        levels = (f" priority_levels: {priority_levels} default_priority_level: "
                  f"{priority_levels}" if priority_levels > 0 else "")
        config = (config.rstrip("\n")
                  + f"\ndynamic_batching {{ max_queue_delay_microseconds: 0{levels} }}\n")
    return config.rstrip("\n") + '\nparameters { key: "intake" value: { string_value: "hold" } }\n'
