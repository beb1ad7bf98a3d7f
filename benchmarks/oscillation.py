"""Cross-controller oscillation, measured live: every SAMPLE_S, the zone and elastic-window
gauges of several controllers (servers, or instances of one model), from their metrics
pages; then the variance of the aggregate window, a coupling index and zone flips, over
the part of the run that is measured (the cold start is not oscillation)."""

from __future__ import annotations

import threading
import time
from typing import Mapping, Sequence

from simulation.fleet import oscillation
from sidecar.triton_metrics import fetch_url, read_samples
from triton_backend.metric_catalog import PREFIX

SAMPLE_S = 0.2
ZONE, WINDOW = PREFIX + "zone", PREFIX + "window_seconds"


class ZoneSampler:
    """``with ZoneSampler([(metrics_url, labels), ...]) as s: run()``; one source per
    controller: the series on that page whose labels include ``labels``."""

    def __init__(self, sources: Sequence[tuple[str, Mapping[str, str]]]):
        self.sources = list(sources)
        self.zones: list[list[int]] = [[] for _ in self.sources]
        self.windows: list[list[float]] = [[] for _ in self.sources]
        self.times_s: list[float] = []  # each sampling round, seconds since __enter__
        self._started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ZoneSampler":
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            pages: dict[str, list] = {}
            try:
                for url, _ in self.sources:
                    if url not in pages:
                        pages[url] = read_samples(fetch_url(url, 2.0))
            except OSError:
                continue  # a missed sample only thins the series
            taken_s = time.monotonic() - self._started
            rounds = []
            for url, labels in self.sources:
                got = {s.name: s.value for s in pages[url] if s.name in (ZONE, WINDOW)
                       and all(s.labels.get(k) == v for k, v in labels.items())}
                rounds.append(got)
            if not all(ZONE in got and WINDOW in got for got in rounds):
                continue  # a controller without its gauges yet: no round, not a 0 ms window
            self.times_s.append(taken_s)
            for i, got in enumerate(rounds):
                self.zones[i].append(int(got[ZONE]))
                self.windows[i].append(1000.0 * got[WINDOW])

    def oscillation(self, start_s: float = 0.0, end_s: float = float("inf"),
                    sources: Sequence[int] | None = None) -> dict[str, float]:
        """``simulation.fleet.oscillation`` of the rounds sampled between ``start_s``
        and ``end_s`` seconds after ``__enter__``, over the controllers at ``sources``
        (indices into the sources given; default all). On a loaded machine a round takes
        longer than SAMPLE_S, so the rounds are chosen by their time, not by their count."""
        keep = [k for k, t in enumerate(self.times_s) if start_s <= t <= end_s]
        span_s = self.times_s[keep[-1]] - self.times_s[keep[0]] + SAMPLE_S if keep else 0.0
        chosen = range(len(self.sources)) if sources is None else sources
        return oscillation([[self.windows[i][k] for k in keep] for i in chosen],
                           [[self.zones[i][k] for k in keep] for i in chosen], SAMPLE_S, span_s)
