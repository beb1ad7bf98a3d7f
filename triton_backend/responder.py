"""The responder threads of the threaded intakes (release, gather): they build and send
the responses the scheduler thread hands them, so that thread goes on to the next batch.

Each send is a round trip to the server that blocks its thread (~0.45 ms here under load,
measured with cProfile): one thread caps the model at ~2,100 responses/s whatever the
batching, hence several (parameter ``responder_threads``)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from .answers import built, send


class Responder:
    """A pool of threads sending ``(sender, response or builder)`` pairs, in order per
    thread; ``stop`` sends everything queued before it, then ends the threads."""

    def __init__(self, threads: int, profiler: Any = None,
                 on_cpu_s: Callable[[float], None] = lambda s: None):
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._profiler = profiler  # a cProfile object serves one thread: the first one
        self._on_cpu_s = on_cpu_s  # each thread's CPU seconds, when it ends
        self._threads = [threading.Thread(target=self._run, args=(k == 0,), daemon=True,
                                          name=f"explicit-responder-{k}")
                         for k in range(threads)]
        for thread in self._threads:
            thread.start()

    def deliver(self, ticket, response) -> None:
        """The outbox of a ``answers.Ticket``: send ``response`` (or what the builder
        ``response`` makes) on the ticket's response sender, soon."""
        self._outbox.put((ticket.sender, response))

    def stop(self, timeout_s: float) -> None:
        """Send what is queued, then end the threads (waiting up to ``timeout_s``)."""
        for _ in self._threads:
            self._outbox.put(None)
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _run(self, profiled: bool) -> None:
        profiler = self._profiler if profiled else None
        if profiler is not None:
            profiler.enable()  # this thread only
        try:
            while True:
                item = self._outbox.get()
                if item is None:
                    return
                sender, response = item
                send(sender, built(response))
        finally:
            if profiler is not None:
                profiler.disable()
            self._on_cpu_s(time.thread_time())
