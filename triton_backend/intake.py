"""Model-config text for the plugin's three intake modes (no Triton import). ``intake_config``
writes each mode's ``config.pbtxt``.

* ``hold`` (the shipped default, ``hold_config``): Triton's dynamic batcher (delay 0) in
  front. ``execute()`` decides, runs and answers its own requests in the calling thread
  (no scheduler thread, no responder threads, one decision pass per batch), so they stay
  Triton's until answered and a stub crash fails them (INTERNAL, within about a second)
  instead of losing them. Answers made while more of the call's work remains - refusals,
  every batch but the last - go out at once through the request's response sender; the
  last batch's are returned. What arrives meanwhile waits in Triton's queue and comes over
  in the next call; that backlog is invisible to the plugin, so Triton's queue policy bounds
  it (``max_queue_size``: beyond it Triton refuses at once, UNAVAILABLE; a client's own
  ``timeout`` is honoured in the queue) and its requests' arrival is estimated (see
  ``ExplicitModel``).
* ``release`` (``release_config``): ``execute()`` queues its requests and returns at once;
  the plugin alone holds them, sees the whole queue and decides every wait. One
  ``execute()`` call per request. A crash of its Python stub loses them: Triton 2.51's
  Python backend keeps nothing for requests released this way (clients wait for their own
  timeout).
* ``gather`` (``gather_config``): the front is ``hold``'s. ``execute()`` queues its requests
  with the plugin and parks until the scheduler thread lets it go: when the batch in
  flight has finished, or when the plugin has nothing to run and waits for arrivals
  (bounded: 1 s, and a quarter of the smallest recent SLA). Like ``release``, a crash of the
  stub loses the requests already handed over.
"""

from __future__ import annotations

INTAKES = ("gather", "release", "hold")
DEFAULT_INTAKE = "hold"  # with Triton's batcher in front; without one only release runs
