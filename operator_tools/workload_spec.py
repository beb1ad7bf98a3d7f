"""Workload specs, shared by ``simulate`` and ``compare``: the arrival process, length
mix, SLA mix, duration and seed of one workload, read from a spec file
(``perf_analyzer_configs/workloads/*.yaml``, keys in ``perf_analyzer_configs/README.md``)
or given by CLI options that override the spec's keys.

SLA classes are written at real-hardware speed and multiplied by the time scale, like the
device's cost.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import click
import yaml

from simulation import workload as W

LENGTH_MIXES = {"lognormal": W.LogNormalLengths, "bimodal": W.BimodalLengths}
# The parameters of each arrival process that are rates (scaled together by --rate).
RATE_PARAMS = {"poisson": ("rate_rps",), "bursty": ("low_rps", "high_rps"),
               "ramp": ("start_rps", "end_rps"), "flash_crowd": ("base_rps",)}


class SpecError(ValueError):
    """A workload spec holds a missing or bad value (the message names file and key)."""


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload: arrival process, length mix, SLA mix, duration and seed (plus, for
    ``simulate``, the profile and time scale). Rates are absolute requests per second."""

    name: str
    arrival: str
    arrival_params: Mapping[str, float]
    lengths: str = "lognormal"
    length_params: Mapping[str, Any] = field(default_factory=dict)
    sla_classes_ms: tuple[float, ...] = W.DEFAULT_SLA_CLASSES_MS  # at time scale 1
    sla_weights: tuple[float, ...] | None = None
    duration_s: float = 30.0
    seed: int = 20240601
    profile: str = "t4"
    time_scale: float | None = None  # None: the profile's emulation.time_scale
    description: str = ""
    source: str = "<options>"

    def process(self):
        try:
            return W.arrival_process(self.arrival, **dict(self.arrival_params))
        except (TypeError, ValueError) as exc:
            raise SpecError(f"workload {self.source}: arrival {self.arrival!r} "
                            f"{dict(self.arrival_params)}: {exc}") from None

    def length_mix(self):
        cls = LENGTH_MIXES.get(self.lengths)
        if cls is None:
            raise SpecError(f"workload {self.source}: lengths.mix {self.lengths!r} is not one "
                            f"of {sorted(LENGTH_MIXES)}")
        try:
            return cls(**dict(self.length_params))
        except (TypeError, ValueError) as exc:
            raise SpecError(f"workload {self.source}: lengths {dict(self.length_params)}: "
                            f"{exc}") from None

    def sla_mix(self, time_scale: float) -> W.SlaMix:
        try:
            return W.SlaMix(tuple(c * time_scale for c in self.sla_classes_ms), self.sla_weights)
        except ValueError as exc:
            raise SpecError(f"workload {self.source}: sla: {exc}") from None

    def mean_rate_rps(self) -> float:
        return self.process().mean_rate_rps(self.duration_s)

    def with_rate(self, rate_rps: float) -> "WorkloadSpec":
        """The same process with its rate parameters scaled so the mean rate is
        ``rate_rps`` (a bursty process keeps its burst ratio)."""
        if not (rate_rps > 0 and math.isfinite(rate_rps)):
            raise SpecError(f"--rate must be a finite number > 0 (got {rate_rps!r})")
        names = RATE_PARAMS.get(self.arrival, ())
        mean = self.mean_rate_rps()
        params = dict(self.arrival_params)
        if mean <= 0:  # an all-zero process: set the first rate parameter
            params[names[0]] = rate_rps
        else:
            for name in names:
                params[name] = params.get(name, 0.0) * rate_rps / mean
        return replace(self, arrival_params=params)

    def arrivals(self, time_scale: float) -> list[W.Arrival]:
        """The seeded arrivals, SLAs multiplied by ``time_scale``."""
        return W.generate(self.process(), self.duration_s, self.seed, self.length_mix(),
                          self.sla_mix(time_scale))

    def describe(self, time_scale: float) -> str:
        params = ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}"
                           for k, v in self.arrival_params.items())
        lengths = ", ".join(f"{k} {v:g}" for k, v in self.length_params.items())
        classes = "/".join(f"{c:g}" for c in self.sla_classes_ms)
        scaled = "/".join(f"{c * time_scale:g}" for c in self.sla_classes_ms)
        weights = ("equal shares" if self.sla_weights is None
                   else "weights " + "/".join(f"{w:g}" for w in self.sla_weights))
        return (f"`{self.name}`: {self.arrival} arrivals ({params}; mean "
                f"{self.mean_rate_rps():,.1f} req/s), {self.lengths} lengths"
                f"{f' ({lengths})' if lengths else ''}, SLA classes {classes} ms x time scale "
                f"{time_scale:g} = {scaled} ms ({weights}), {self.duration_s:g} s, seed "
                f"{self.seed}")


_SPEC_KEYS = {"name", "description", "profile", "time_scale", "duration_s", "seed",
              "arrival", "lengths", "sla"}


def _number(source: str, key: str, value: Any, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(f"workload {source}: key '{key}': must be a finite number "
                        f"(got {value!r})")
    if positive and value <= 0:
        raise SpecError(f"workload {source}: key '{key}': must be > 0 (got {value!r})")
    return float(value)


def spec_from_mapping(raw: Any, source: str) -> WorkloadSpec:
    """Validate a parsed workload spec; errors name ``source`` and the key."""
    if not isinstance(raw, Mapping):
        raise SpecError(f"workload {source}: must be a YAML mapping (got {raw!r})")
    for key in raw:
        if key not in _SPEC_KEYS:
            raise SpecError(f"workload {source}: unknown key {key!r}; expected one of "
                            f"{sorted(_SPEC_KEYS)}")
    arrival = raw.get("arrival")
    if not isinstance(arrival, Mapping) or not isinstance(arrival.get("process"), str):
        raise SpecError(f"workload {source}: key 'arrival': needs a mapping with 'process' "
                        f"(one of {sorted(W.ARRIVAL_PROCESSES)}) (got {arrival!r})")
    params = {k: _number(source, f"arrival.{k}", v) for k, v in arrival.items()
              if k != "process"}
    lengths = raw.get("lengths", {"mix": "lognormal"})
    if not isinstance(lengths, Mapping):
        raise SpecError(f"workload {source}: key 'lengths': must be a mapping (got {lengths!r})")
    length_params = {k: v for k, v in lengths.items() if k != "mix"}
    sla = raw.get("sla", {})
    if not isinstance(sla, Mapping) or set(sla) - {"classes_ms", "weights"}:
        raise SpecError(f"workload {source}: key 'sla': a mapping of classes_ms and weights "
                        f"(got {sla!r})")
    classes = sla.get("classes_ms", list(W.DEFAULT_SLA_CLASSES_MS))
    if not isinstance(classes, list) or not classes:
        raise SpecError(f"workload {source}: key 'sla.classes_ms': a list of ms "
                        f"(got {classes!r})")
    classes = tuple(_number(source, "sla.classes_ms", c, positive=True) for c in classes)
    weights = sla.get("weights")
    if weights is not None:
        if not isinstance(weights, list):
            raise SpecError(f"workload {source}: key 'sla.weights': a list (got {weights!r})")
        weights = tuple(_number(source, "sla.weights", w) for w in weights)
    time_scale = raw.get("time_scale")
    seed = raw.get("seed", 20240601)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError(f"workload {source}: key 'seed': an integer >= 0 (got {seed!r})")
    name = raw.get("name", os.path.splitext(os.path.basename(source))[0])
    spec = WorkloadSpec(
        name=str(name), description=str(raw.get("description", "")),
        arrival=arrival["process"], arrival_params=params,
        lengths=str(lengths.get("mix", "lognormal")), length_params=length_params,
        sla_classes_ms=classes, sla_weights=weights,
        duration_s=_number(source, "duration_s", raw.get("duration_s", 30.0), positive=True),
        seed=seed, profile=str(raw.get("profile", "t4")),
        time_scale=None if time_scale is None else _number(source, "time_scale", time_scale,
                                                           positive=True),
        source=source)
    spec.process(), spec.length_mix(), spec.sla_mix(1.0)  # validate now, name the file
    return spec


def load_workload_spec(path: str) -> WorkloadSpec:
    """Read and validate one workload spec file (``yaml.safe_load``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except OSError as exc:
        raise SpecError(f"workload {path}: cannot be read: {exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"workload {path}: not valid YAML: {exc}") from None
    return spec_from_mapping(raw, path)


def parse_float_list(text: str, what: str) -> tuple[float, ...]:
    """``"50,100,200"`` -> (50.0, 100.0, 200.0); BadParameter naming ``what``."""
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{what}: comma-separated numbers expected (got {text!r})")
    if not values or not all(math.isfinite(v) for v in values):
        raise click.BadParameter(f"{what}: comma-separated finite numbers expected "
                                 f"(got {text!r})")
    return values


def parse_params(pairs: Sequence[str], what: str) -> dict[str, float]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            if not sep or not key:
                raise ValueError
            out[key.strip()] = float(value)
        except ValueError:
            raise click.BadParameter(f"{what}: KEY=NUMBER expected (got {pair!r})") from None
    return out


def default_arrival_params(arrival: str, rate_rps: float) -> dict[str, float]:
    """Parameters of ``arrival`` with mean rate ``rate_rps``: bursty = 3x the rate for
    ~0.25 s, half of it for ~1 s between bursts; ramp = from half to 1.5x the rate;
    flash crowd = the default 5x spike (the rate is then the mean, spike included)."""
    if arrival == "poisson":
        return {"rate_rps": rate_rps}
    if arrival == "bursty":
        return {"low_rps": rate_rps / 2, "high_rps": rate_rps * 3, "mean_low_s": 1.0,
                "mean_high_s": 0.25}
    if arrival == "ramp":
        return {"start_rps": rate_rps / 2, "end_rps": rate_rps * 1.5}
    if arrival == "flash_crowd":
        return {"base_rps": rate_rps}
    raise SpecError(f"unknown arrival process {arrival!r}; expected one of "
                    f"{sorted(W.ARRIVAL_PROCESSES)}")


def apply_overrides(spec: WorkloadSpec, *, arrival: str | None = None,
                    arrival_params: Mapping[str, float] | None = None,
                    rate: float | None = None, lengths: str | None = None,
                    sla_classes: Sequence[float] | None = None,
                    duration_s: float | None = None, seed: int | None = None,
                    profile: str | None = None, time_scale: float | None = None
                    ) -> WorkloadSpec:
    """``spec`` with the CLI's overrides. A new ``arrival`` starts from
    :func:`default_arrival_params` at the spec's mean rate (or ``rate``), a new
    ``lengths`` mix from its defaults."""
    changes: dict[str, Any] = {}
    if arrival is not None and arrival != spec.arrival:
        changes.update(arrival=arrival, arrival_params=default_arrival_params(
            arrival, rate if rate is not None else spec.mean_rate_rps()))
    if arrival_params:
        changes["arrival_params"] = {**changes.get("arrival_params", spec.arrival_params),
                                     **arrival_params}
    if lengths is not None and lengths != spec.lengths:
        changes.update(lengths=lengths, length_params={})
    if sla_classes is not None:
        changes.update(sla_classes_ms=tuple(sla_classes), sla_weights=None)
    if duration_s is not None:
        changes["duration_s"] = duration_s
    if seed is not None:
        changes["seed"] = seed
    if profile is not None:
        changes["profile"] = profile
    if time_scale is not None:
        changes["time_scale"] = time_scale
    if changes:
        spec = replace(spec, **changes, source=f"{spec.source} + options")
    if rate is not None:
        if spec.arrival not in RATE_PARAMS:
            raise SpecError(f"--rate: arrival process {spec.arrival!r} is not one of "
                            f"{sorted(RATE_PARAMS)}")
        if not any(k in spec.arrival_params for k in RATE_PARAMS[spec.arrival]):
            spec = replace(spec, arrival_params={**spec.arrival_params,
                                                 RATE_PARAMS[spec.arrival][0]: rate})
        spec = spec.with_rate(rate)
    spec.process(), spec.length_mix(), spec.sla_mix(1.0)
    return spec
