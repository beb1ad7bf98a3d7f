"""Cross-controller oscillation, measured live: every SAMPLE_S, the zone and elastic-window
gauges of several controllers (servers, or instances of one model), from their metrics
pages; then the variance of the aggregate window, a coupling index and zone flips."""

from __future__ import annotations

import threading
from typing import Mapping, Sequence

from scheduler_core.fleet import oscillation
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
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ZoneSampler":
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
            for i, (url, labels) in enumerate(self.sources):
                got = {s.name: s.value for s in pages[url] if s.name in (ZONE, WINDOW)
                       and all(s.labels.get(k) == v for k, v in labels.items())}
                self.zones[i].append(int(got.get(ZONE, 0)))
                self.windows[i].append(1000.0 * got.get(WINDOW, 0.0))

    def oscillation(self) -> dict[str, float]:
        """``scheduler_core.fleet.oscillation`` of what was sampled."""
        return oscillation(self.windows, self.zones, SAMPLE_S)
