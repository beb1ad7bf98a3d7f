"""The autoscaler's signal in the simulator: one pod (one emulated device, the plugin's
scheduler with the t4 or h200 profile) at 0.3x, 0.6x, 1x and 2x of its capacity. Per load:
the queue wait per request the adapter rule computes (deploy/kubernetes/base/
prometheus-adapter-rules.yaml: the plugin's queue time of the dispatched requests; the
simulator has no Triton queue in front of the plugin, which is empty without intake hold),
the replicas Kubernetes' HPA formula asks for from that one pod, and where the HPA settles
when it keeps scaling on the readings of the pods it made (hpa.yaml's target, tolerance and
step policies). Beside it the former signal, the share of batches dispatched outside the
safe zone, and what the former target (0.3) asked.

    .venv/bin/python scripts/hpa_signal.py [--out results/hpa_signal.md]

Deterministic (seeded Poisson arrivals; a pod of N sees 1/N of the load as a Poisson stream
of its own, rougher than a round-robin split): the same command writes the same page.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from dataclasses import dataclass
from typing import Callable

import yaml

from benchmarks.pages import write_page
from benchmarks.simulate_report import LENGTHS, PROFILE_DIR, SLA_CLASSES_MS
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.scheduler import Scheduler
from simulation import workload as W
from simulation.sim_result import MISSED, REJECTED
from simulation.simulator import capacity_rps, simulate

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "hpa_signal.md")
HPA_FILE = os.path.join(REPO_ROOT, "deploy", "kubernetes", "base", "hpa.yaml")
PROFILES = ("t4", "h200")
LOADS = (0.3, 0.6, 1.0, 2.0)  # of one pod's capacity
DURATION_S, SEED, TIME_SCALE = 10.0, 3, 1.0
HPA_TOLERANCE = 0.1  # Kubernetes' default --horizontal-pod-autoscaler-tolerance
FORMER_ZONE_TARGET = 0.3  # the former hpa.yaml's target for the zone share
MAX_STEPS = 10


@dataclass(frozen=True)
class PodReading:
    load: float  # of one pod's capacity
    arrivals_rps: float
    queue_wait_s: float  # mean, over the dispatched requests
    missed_or_refused_rps: float
    unsafe_batch_share: float  # batches dispatched outside the safe zone


@dataclass(frozen=True)
class HpaSettings:
    target_s: float
    max_replicas: int
    up_pods: int  # at most this many pods added a step
    down_pods: int  # at most this many removed a step
    min_replicas: int = 1  # the signal decides, not hpa.yaml's floor

    @classmethod
    def from_file(cls, path: str = HPA_FILE) -> HpaSettings:
        with open(path) as fh:
            spec = yaml.safe_load(fh)["spec"]
        (metric,) = spec["metrics"]
        (up,) = spec["behavior"]["scaleUp"]["policies"]
        (down,) = spec["behavior"]["scaleDown"]["policies"]
        assert up["type"] == down["type"] == "Pods", (up, down)
        return cls(quantity(metric["pods"]["target"]["averageValue"]), spec["maxReplicas"],
                   up["value"], down["value"])


def quantity(text) -> float:
    """A Kubernetes quantity as a number: "25m" is 0.025, "2" is 2."""
    text = str(text)
    return float(text[:-1]) / 1000.0 if text.endswith("m") else float(text)


def hpa_ask(replicas: int, value: float, target: float,
            tolerance: float = HPA_TOLERANCE) -> int:
    """Kubernetes' HPA formula for an AverageValue target: ceil(replicas x value / target),
    no change while the ratio is within the tolerance of 1."""
    ratio = value / target
    if abs(ratio - 1.0) <= tolerance:
        return replicas
    return math.ceil(replicas * ratio)


def settle(total_load: float, read: Callable[[float], float], hpa: HpaSettings,
           start: int = 1) -> list[int]:
    """Replica counts step by step: every pod reads ``read(total_load / replicas)``, the
    formula asks, the step policies and the bounds limit the change. Ends when the count
    holds (the last two equal), comes back to an earlier one (a cycle) or after MAX_STEPS."""
    counts = [start]
    while len(counts) <= MAX_STEPS:
        n = counts[-1]
        ask = hpa_ask(n, read(total_load / n), hpa.target_s)
        nxt = min(max(ask, n - hpa.down_pods, hpa.min_replicas), n + hpa.up_pods,
                  hpa.max_replicas)
        counts.append(nxt)
        if nxt == n or nxt in counts[:-1]:
            break
    return counts


def span(counts: list[int]) -> tuple[int, int]:
    """The replica counts ``settle`` ended on: (n, n) where it held, else the smallest and
    largest count of the cycle (or of the last steps, where it ran out of steps)."""
    last = counts[-1]
    if len(counts) > 1 and counts[-2] == last:
        return last, last
    tail = counts[counts.index(last):]
    return min(tail), max(tail)


def _settled_text(counts: list[int]) -> str:
    lo, hi = span(counts)
    path = " → ".join(map(str, counts[:-1] if lo == hi and len(counts) > 1 else counts))
    return f"{lo} ({path})" if lo == hi else f"cycles {lo} ↔ {hi} ({path})"


class Pod:
    """One pod of a profile in the simulator, its readings cached per load."""

    def __init__(self, profile_name: str, duration_s: float = DURATION_S, seed: int = SEED):
        self.name = profile_name
        self.profile = load_profile(profile_path(PROFILE_DIR, profile_name))
        lengths = W.sample_lengths(20_000, 1, LENGTHS)
        sched = self.profile.scheduler
        self.capacity_rps = capacity_rps(self.profile.cost_model, "padded", TIME_SCALE, lengths,
                                         sched.max_batch_size, sched.max_batch_tokens)
        self.duration_s, self.seed = duration_s, seed
        self._readings: dict[float, PodReading] = {}

    def reading(self, load: float) -> PodReading:
        key = round(load, 6)
        if key not in self._readings:
            self._readings[key] = self._simulate(key)
        return self._readings[key]

    def _simulate(self, load: float) -> PodReading:
        rate = load * self.capacity_rps
        arrivals = W.generate(W.Poisson(rate), self.duration_s, self.seed, LENGTHS,
                              W.SlaMix(SLA_CLASSES_MS))
        result = simulate(Scheduler.from_profile(self.profile, TIME_SCALE, seed=0), arrivals,
                          self.profile.cost_model, "padded", TIME_SCALE)
        waits = [d - a for a, d in zip(result.arrival_s, result.dispatch_s) if not math.isnan(d)]
        bad = sum(o in (MISSED, REJECTED) for o in result.outcome)
        batches = sum(result.zones.values())
        unsafe = sum(n for zone, n in result.zones.items() if zone > 0)
        return PodReading(load, rate, statistics.fmean(waits) if waits else 0.0,
                          bad / self.duration_s, unsafe / batches if batches else 0.0)


def profile_rows(pod: Pod, hpa: HpaSettings, loads=LOADS) -> list[dict]:
    rows = []
    for load in loads:
        r = pod.reading(load)
        steps = settle(load, lambda per_pod: pod.reading(per_pod).queue_wait_s, hpa)
        rows.append({"reading": r, "ask": hpa_ask(1, r.queue_wait_s, hpa.target_s),
                     "steps": steps,
                     "zone_ask": hpa_ask(1, r.unsafe_batch_share, FORMER_ZONE_TARGET)})
    return rows


def separates(rows: list[dict], low: float = 0.6, high: float = 2.0) -> bool:
    """The signal tells ``low`` from ``high``: the first ask of ``high`` is above ``low``'s,
    and every count it settles on above every count ``low`` settles on."""
    by_load = {row["reading"].load: row for row in rows}
    lo, hi = by_load[low], by_load[high]
    return hi["ask"] > lo["ask"] and span(hi["steps"])[0] > span(lo["steps"])[1]


def page(tables: list[tuple[Pod, list[dict]]], hpa: HpaSettings) -> list[str]:
    lines = ["# The autoscaler's signal: queue wait per request (simulator)", "",
             "Generated by `.venv/bin/python scripts/hpa_signal.py` (the simulator: no server, "
             "no GPU; deterministic). " + __doc__.split("\n\n")[0].replace("\n", " "), "",
             f"HPA settings read from `deploy/kubernetes/base/hpa.yaml`: target "
             f"{hpa.target_s * 1000:g} ms of queue wait per request (AverageValue), at most "
             f"+{hpa.up_pods} / -{hpa.down_pods} pods a step, maxReplicas {hpa.max_replicas}; "
             f"tolerance {HPA_TOLERANCE:g} (Kubernetes' default); minReplicas taken as "
             f"{hpa.min_replicas} here so the signal, not the floor, decides. "
             f"{DURATION_S:g} s of Poisson arrivals per reading, SLA classes "
             f"{', '.join(f'{s:g}' for s in SLA_CLASSES_MS)} ms, log-normal lengths."]
    for pod, rows in tables:
        lines += ["", f"## {pod.name} (EMULATED, capacity {pod.capacity_rps:,.0f} req/s "
                      "per pod)", "",
                  "| load (x one pod) | arrivals (req/s) | queue wait per request (ms) | HPA "
                  "asks from 1 pod | HPA settles at (replicas step by step) | missed + "
                  "refused (req/s) | batches outside the safe zone | former zone signal "
                  f"asks (target {FORMER_ZONE_TARGET:g}) |",
                  "|---:|---:|---:|---:|---|---:|---:|---:|"]
        for row in rows:
            r = row["reading"]
            lines.append(f"| {r.load:g}x | {r.arrivals_rps:,.0f} | {r.queue_wait_s * 1000:.1f} "
                         f"| {row['ask']} | {_settled_text(row['steps'])} "
                         f"| {r.missed_or_refused_rps:,.1f} | {r.unsafe_batch_share:.1%} "
                         f"| {row['zone_ask']} |")
        verdict = "tells" if separates(rows) else "does NOT tell"
        lines += ["", f"The queue wait {verdict} 0.6x from 2x on {pod.name} (the ask from "
                      "one pod and the settled count both higher at 2x)."]
    lines += ["", "A cycle is the formula's whole-pod steps over a wait that grows faster "
                  "than the load: the pods it adds read much less than the target, it takes "
                  "one back, and the rest read more again. In a cluster hpa.yaml's "
                  "scale-down stabilisation window holds the larger count through the "
                  "window's lower asks, so a cycle is slow, and its minReplicas "
                  "is a floor under it."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    hpa = HpaSettings.from_file()
    tables = [(pod, profile_rows(pod, hpa)) for pod in (Pod(name) for name in PROFILES)]
    write_page(args.out, page(tables, hpa))
    return 0 if all(separates(rows) for _, rows in tables) else 1
