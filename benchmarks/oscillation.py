"""Cross-controller oscillation, measured live: every SAMPLE_S, the zone and elastic-window
gauges of several controllers (servers, or instances of one model), from their metrics
pages; then the variance of the aggregate window, a coupling index and zone flips."""

from __future__ import annotations

import statistics
import threading
from typing import Mapping, Sequence

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
        """samples, aggregate_variance (ms^2), coupling (var of the sum / (N x the mean
        variance of one): 1 independent, N lockstep), flips_per_minute (all controllers),
        time_out_of_safe (share of samples outside the safe zone)."""
        n = min(len(w) for w in self.windows)
        windows = [w[:n] for w in self.windows]
        totals = [sum(x) for x in zip(*windows)]
        one = statistics.mean(statistics.pvariance(w) for w in windows) if n > 1 else 0.0
        aggregate = statistics.pvariance(totals) if n > 1 else 0.0
        flips = sum(sum(1 for a, b in zip(z, z[1:]) if a != b) for z in self.zones)
        minutes = n * SAMPLE_S / 60.0
        return {"samples": n, "aggregate_variance": aggregate,
                "coupling": aggregate / (len(windows) * one) if one else float("nan"),
                "flips_per_minute": flips / minutes if minutes else 0.0,
                "time_out_of_safe": sum(z > 0 for zs in self.zones for z in zs[:n])
                / max(1, n * len(self.zones))}
