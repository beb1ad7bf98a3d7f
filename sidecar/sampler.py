"""The sidecar loop: scrape Triton's metrics endpoint and read NVML every period, keep the
latest sample, back off on failure, never block a reader.

Readers call ``latest()``: one attribute read of an immutable sample, so the scheduling
thread never waits on the sidecar. Every sample carries ``taken_s`` (monotonic seconds;
on Linux CLOCK_MONOTONIC is shared by all processes, so samples written by a separate
sidecar process compare with the reader's clock) and a health verdict.

Transport for the separate-process mode (``python -m sidecar``): the sidecar writes each
sample as JSON to a file (atomically: write a temporary file, then ``os.replace``), and
every model instance reads it when its mtime changes. One writer, many readers, no
locks, no ports to allocate, and a dead sidecar shows up as a stale ``taken_s``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .nvml import NvmlReader, NvmlSample, NvmlUnavailable
from .triton_metrics import ModelRates, TritonMetrics, fetch_url, parse_metrics, rates

HEALTH_OK, HEALTH_DEGRADED, HEALTH_DOWN = "ok", "degraded", "down"
HEALTH_VALUE = {HEALTH_OK: 1.0, HEALTH_DEGRADED: 0.5, HEALTH_DOWN: 0.0}
DOWN_AFTER_FAILURES = 3


@dataclass(frozen=True)
class PerceptionSample:
    taken_s: float
    health: str  # ok | degraded | down
    endpoint_ok: bool | None  # None: no endpoint configured
    nvml_available: bool
    utilization: float | None  # NVML GPU utilisation (0..1) where there is NVML
    nvml: NvmlSample | None = None
    models: dict[str, ModelRates] = field(default_factory=dict)
    error: str = ""

    def age_ms(self, now_s: float) -> float:
        return (now_s - self.taken_s) * 1000.0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> "PerceptionSample":
        raw = json.loads(text)
        nvml = NvmlSample(**raw["nvml"]) if raw.get("nvml") else None
        models = {k: ModelRates(**v) for k, v in raw.get("models", {}).items()}
        return cls(**{**raw, "nvml": nvml, "models": models})


class Sidecar:
    """Perception sidecar. ``poll_once()`` is one step (tests drive it directly);
    ``start()`` runs it in a daemon thread every ``period_s``, backing off after failures.

    ``timeout_s`` is the deadline of one whole scrape (connect, headers and body): a page
    that has not all arrived by then is a failed scrape. A poll stuck past its deadline
    anyway (a name lookup, the NVML driver) shows in ``latest()``: see ``stuck_after_s``.

    ``nvml_index`` is the GPU NVML reads (the model instance's, see
    ``triton_backend.placement``); None reads no NVML (an instance on the CPU). A reader
    passed as ``nvml`` (tests) replaces it."""

    def __init__(self, metrics_url: str | None, period_s: float = 0.2, timeout_s: float = 0.5,
                 nvml: NvmlReader | None = None, clock: Callable[[], float] = time.monotonic,
                 fetch: Callable[[str, float], str] = fetch_url,
                 log: Callable[[str], None] = print, max_backoff_s: float = 2.0,
                 nvml_index: int | None = 0, scrape_every: int = 1):
        if period_s <= 0 or timeout_s <= 0:
            raise ValueError(f"period_s and timeout_s must be positive "
                             f"(got {period_s!r}, {timeout_s!r})")
        self.metrics_url = metrics_url or None
        self.period_s = period_s
        # Triton's /metrics page is scraped every ``scrape_every``-th poll (NVML every
        # poll): the server renders the whole page for each scrape, and the plugin uses
        # only its health from it; between scrapes a sample carries the last scrape's.
        # After a failed scrape every poll scrapes (at the backoff's pace), so a page
        # that comes back is seen within one poll, not ``scrape_every`` of them.
        self.scrape_every = max(1, int(scrape_every))
        self._polls = 0
        self._endpoint_error = ""  # the last failed scrape's, carried between scrapes
        self.timeout_s = timeout_s
        self.max_backoff_s = max_backoff_s
        self._clock, self._fetch, self._log = clock, fetch, log
        self._nvml = nvml if nvml is not None else NvmlReader(nvml_index)
        self._nvml_open = False
        self._nvml_said_absent = False
        self._nvml_failures = 0
        self._endpoint_failures = 0
        self._previous: tuple[float, TritonMetrics] | None = None
        self._latest: PerceptionSample | None = None
        self._poll_started_s: float | None = None  # set while a poll runs
        self._stuck_view: tuple[PerceptionSample, str, PerceptionSample] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sink: Callable[[PerceptionSample], None] | None = None

    # -- reading ------------------------------------------------------------------------
    @property
    def stuck_after_s(self) -> float:
        """Seconds a poll may run before ``latest()`` stops trusting the last sample: the
        scrape deadline plus one period for NVML and parsing."""
        return self.timeout_s + self.period_s

    def latest(self) -> PerceptionSample | None:
        """The newest sample, never blocking. While a poll has run longer than
        ``stuck_after_s`` the newest sample is no longer current: it then reads as at least
        degraded, and as down once the poll has run ``DOWN_AFTER_FAILURES`` times that."""
        sample = self._latest  # read first: a poll that ends in between at worst shows stuck once
        started_s = self._poll_started_s
        if sample is None or started_s is None:
            return sample
        running_s = self._clock() - started_s
        if running_s <= self.stuck_after_s:
            return sample
        health = (HEALTH_DOWN if running_s > DOWN_AFTER_FAILURES * self.stuck_after_s
                  else HEALTH_DEGRADED)
        if HEALTH_VALUE[sample.health] <= HEALTH_VALUE[health]:
            return sample  # already as bad as that
        view = self._stuck_view
        if view is None or view[0] is not sample or view[1] != health:
            # Built once per (sample, verdict): readers may call this every step.
            error = f"sidecar poll stuck for over {self.stuck_after_s:g} s"
            view = (sample, health, dataclasses.replace(
                sample, health=health,
                error=f"{sample.error}; {error}" if sample.error else error))
            self._stuck_view = view
        return view[2]

    # -- one step -----------------------------------------------------------------------
    def poll_once(self) -> PerceptionSample:
        self._poll_started_s = self._clock()
        try:
            return self._poll()
        finally:
            self._poll_started_s = None

    def _poll(self) -> PerceptionSample:
        errors = []
        nvml_sample = self._read_nvml(errors)
        models: dict[str, ModelRates] = {}
        endpoint_ok = None
        scrape = self._polls % self.scrape_every == 0 or self._endpoint_failures > 0
        self._polls += 1
        if self.metrics_url and not scrape and self._latest is not None:
            endpoint_ok, models = self._latest.endpoint_ok, self._latest.models
            if endpoint_ok is False:
                errors.append(self._endpoint_error)
        elif self.metrics_url:
            endpoint_ok = False
            try:
                page = self._fetch(self.metrics_url, self.timeout_s)
                scraped_at = self._clock()
                metrics = parse_metrics(page)
                if self._previous is not None and scraped_at > self._previous[0]:
                    models = rates(self._previous[1], metrics, scraped_at - self._previous[0])
                self._previous = (scraped_at, metrics)
                endpoint_ok = True
                self._endpoint_failures = 0
            except Exception as exc:  # down, slow (deadline), garbage: all the same here
                self._endpoint_failures += 1
                self._endpoint_error = f"metrics endpoint: {type(exc).__name__}: {exc}"
                errors.append(self._endpoint_error)
        nvml_failed = self._nvml_failures > 0
        if endpoint_ok is False and self._endpoint_failures >= DOWN_AFTER_FAILURES:
            health = HEALTH_DOWN
        elif endpoint_ok is False or nvml_failed:
            health = HEALTH_DEGRADED
        else:
            health = HEALTH_OK
        sample = PerceptionSample(
            taken_s=self._clock(), health=health, endpoint_ok=endpoint_ok,
            nvml_available=self._nvml_open,
            utilization=nvml_sample.gpu_utilization if nvml_sample else None,
            nvml=nvml_sample, models=models, error="; ".join(errors))
        self._latest = sample
        return sample

    def _read_nvml(self, errors: list[str]) -> NvmlSample | None:
        if not self._nvml_open:
            if self._nvml_said_absent and self._nvml_failures == 0:
                return None  # absent from the start: a normal state, asked once
            try:
                name = self._nvml.open()
                self._nvml_open = True
                index = getattr(self._nvml, "device_index", "?")
                self._log(f"sidecar: NVML device {index} is '{name}'")
            except NvmlUnavailable as exc:
                if not self._nvml_said_absent:
                    self._nvml_said_absent = True
                    self._log(f"sidecar: {exc}; utilisation comes from the executor's "
                              f"measured busy fraction")
                if self._nvml_failures:
                    errors.append(f"NVML: {exc}")
                return None
        try:
            sample = self._nvml.read()
            self._nvml_failures = 0
            return sample
        except Exception as exc:  # the driver failed mid-run: reopen on the next poll
            self._nvml_failures += 1
            self._nvml_open = False
            self._nvml.close()
            errors.append(f"NVML read failed: {type(exc).__name__}: {exc}")
            return None

    # -- the thread ---------------------------------------------------------------------
    def next_delay_s(self) -> float:
        """Period, doubled per consecutive failure up to ``max_backoff_s``."""
        failures = max(self._endpoint_failures, self._nvml_failures)
        return min(self.period_s * (2 ** failures), max(self.max_backoff_s, self.period_s))

    def start(self, sink: Callable[[PerceptionSample], None] | None = None) -> "Sidecar":
        self._sink = sink
        self._thread = threading.Thread(target=self._run, name="perception-sidecar", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sample = self.poll_once()
                if self._sink is not None:
                    self._sink(sample)
            except Exception as exc:  # never let the sidecar thread die
                self._log(f"sidecar: poll failed: {type(exc).__name__}: {exc}")
            self._stop.wait(self.next_delay_s())

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        self._nvml.close()


class SampleFile:
    """The separate-process transport: one JSON sample in a file, replaced atomically."""

    def __init__(self, path: str):
        self.path = path
        self._version: tuple[int, int, int] | None = None
        self._cached: PerceptionSample | None = None

    def write(self, sample: PerceptionSample) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(sample.to_json())
        os.replace(tmp, self.path)

    def latest(self) -> PerceptionSample | None:
        """The newest sample, re-read only when the file changed; None if unreadable."""
        try:
            st = os.stat(self.path)
            # Inode too: os.replace gives a new one even where mtimes are coarse.
            version = (st.st_ino, st.st_mtime_ns, st.st_size)
            if version != self._version:
                with open(self.path, encoding="utf-8") as fh:
                    self._cached = PerceptionSample.from_json(fh.read())
                self._version = version
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # missing, half-written or not a sample: no sample, not an error
        return self._cached


def usable(sample: PerceptionSample | None, now_s: float, max_age_s: float) -> bool:
    """A sample the controller may act on: healthy and fresh."""
    return (sample is not None and sample.health == HEALTH_OK
            and 0 <= now_s - sample.taken_s <= max_age_s and not math.isnan(sample.taken_s))
