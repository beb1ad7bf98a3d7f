"""Reading a profile: a parsed YAML mapping in, a validated ``HardwareProfile`` out
(``profile_from_mapping``), and overrides of one (``with_overrides``, per section;
``with_dotted_overrides``, from ``section.key`` strings; ``with_emulation``). Every error
names the file, the key and the bad value (``ProfileError``); the types are ``profile.py``.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, fields, replace
from typing import Any, Mapping

from .cost_table import CostTable, CostTableError
from .profile import (CalibrationConfig, ControlConfig, CostModelConfig, EmulationConfig,
                      HardwareProfile, ProfileError, SchedulerConfig)
from .profile_limits import (BOUNDS, COST_MODES, ENTRY_MODES, FORMER_NAMES,  # noqa: F401
                             INFEASIBLE_POLICIES, MAX_TABLE_SOURCE_CHARS, RENAMED_KEYS,
                             SAFE_ZONE_BATCHING)
from .safe_repr import short_repr

MAX_TABLE_CELLS = 1024


def _bad(source: str, key: str, value: Any, why: str) -> ProfileError:
    return ProfileError(f"profile {source}: key '{key}': {why} (got {short_repr(value)})")


def _renamed(source: str, dotted: str, value: Any) -> ProfileError:
    return _bad(source, dotted, value, f"was renamed to '{RENAMED_KEYS[dotted]}'")


def _section(cls, raw: Any, source: str, section: str):
    """Build dataclass ``cls`` from mapping ``raw``, checking names, types and bounds."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise _bad(source, section, raw, "must be a mapping")
    known = {f.name: f for f in fields(cls)}
    for key in raw:
        if f"{section}.{key}" in RENAMED_KEYS:
            raise _renamed(source, f"{section}.{key}", raw[key])
        if key not in known:
            raise _bad(source, f"{section}.{key}", raw[key],
                       f"unknown key; expected one of {sorted(known)}")
    values = {}
    for name, f in known.items():
        if name not in raw:
            continue
        value = raw[name]
        dotted = f"{section}.{name}"
        default = f.default
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise _bad(source, dotted, value, "must be true or false")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise _bad(source, dotted, value, "must be an integer")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _bad(source, dotted, value, "must be a number")
            try:
                value = float(value)
            except OverflowError:
                raise _bad(source, dotted, value, "is too large") from None
            if not math.isfinite(value):
                raise _bad(source, dotted, value, "must be finite")
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise _bad(source, dotted, value, "must be a string")
        lo, hi = BOUNDS.get(name, (None, None))
        if lo is not None and value < lo or hi is not None and value > hi:
            raise _bad(source, dotted, value, f"must be within [{lo}, {hi}]")
        values[name] = value
    return cls(**values)


def _table_rows(raw: Any, source: str) -> tuple[tuple[int, int, float], ...]:
    """``cost_model.table``: measured cells, validated (and checked to form a table)."""
    key = "cost_model.table"
    if not isinstance(raw, (list, tuple)) or not raw:
        raise _bad(source, key, raw, "must be a non-empty list of [batch, length, ms] cells")
    if len(raw) > MAX_TABLE_CELLS:
        raise _bad(source, key, len(raw), f"at most {MAX_TABLE_CELLS} cells")
    rows = []
    for k, cell in enumerate(raw):
        if isinstance(cell, Mapping):
            if set(cell) - {"batch", "length", "ms"}:
                raise _bad(source, f"{key}[{k}]", cell, "cell keys are batch, length, ms")
            cell = (cell.get("batch"), cell.get("length"), cell.get("ms"))
        if not isinstance(cell, (list, tuple)) or len(cell) != 3:
            raise _bad(source, f"{key}[{k}]", cell, "must be [batch, length, ms]")
        b, n, ms = cell
        for name, v in (("batch", b), ("length", n)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1_000_000:
                raise _bad(source, f"{key}[{k}].{name}", v, "must be an integer in [1, 1000000]")
        if (isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms)
                or not 0 < ms <= 3_600_000):
            raise _bad(source, f"{key}[{k}].ms", ms, "must be a number in (0, 3600000]")
        rows.append((b, n, float(ms)))
    try:
        CostTable.from_rows(rows)
    except CostTableError as exc:
        raise _bad(source, key, len(rows), str(exc)) from None
    return tuple(rows)


def _cost_model(raw: Any, source: str) -> CostModelConfig:
    if isinstance(raw, Mapping) and ("table" in raw or "table_source" in raw):
        raw = dict(raw)
        cells = raw.pop("table", ())
        # An empty table (a profile written back from a formula profile) means none.
        table = _table_rows(cells, source) if cells not in ((), [], None) else ()
        table_source = raw.pop("table_source", "")
        if not isinstance(table_source, str):
            raise _bad(source, "cost_model.table_source", table_source, "must be a string")
        if len(table_source) > MAX_TABLE_SOURCE_CHARS:
            # Refused, not cut: a profile carries exactly what its file (or override) says.
            raise _bad(source, "cost_model.table_source", table_source,
                       f"must be at most {MAX_TABLE_SOURCE_CHARS} characters "
                       f"(has {len(table_source)})")
        return replace(_section(CostModelConfig, raw, source, "cost_model"), table=table,
                       table_source=table_source)
    return _section(CostModelConfig, raw, source, "cost_model")


def _emulation(raw: Any, source: str) -> EmulationConfig:
    emulation = _section(EmulationConfig, raw, source, "emulation")
    if emulation.cost_mode not in COST_MODES:
        raise _bad(source, "emulation.cost_mode", emulation.cost_mode, f"must be one of {COST_MODES}")
    return emulation


SECTIONS = {"cost_model": CostModelConfig, "emulation": EmulationConfig,
            "scheduler": SchedulerConfig, "control": ControlConfig,
            "calibration": CalibrationConfig}


def parse_override(dotted_key: str, text: str, source: str) -> tuple[str, str, Any]:
    """("section", "key", typed value) from a dotted key such as ``scheduler.alpha`` and its
    text (model-config parameters are strings); the type is the field's own."""
    section, _, key = dotted_key.partition(".")
    cls = SECTIONS.get(section)
    known = {f.name: f for f in fields(cls)} if cls else {}
    if dotted_key in RENAMED_KEYS:
        raise _renamed(source, dotted_key, text)
    if key not in known:
        every = [f"{name}.{f.name}" for name, c in SECTIONS.items() for f in fields(c)]
        nearest = difflib.get_close_matches(dotted_key, every, n=1, cutoff=0.6)
        hint = f"; nearest: '{nearest[0]}'" if nearest else ""
        raise _bad(source, dotted_key, text, f"not a profile key (section.key){hint}")
    default = known[key].default
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return section, key, text.lower() == "true"
        if isinstance(default, int):
            return section, key, int(text)
        if isinstance(default, float):
            return section, key, float(text)
    except ValueError:
        raise _bad(source, dotted_key, text, f"must be a {type(default).__name__}") from None
    return section, key, text


def with_overrides(profile: HardwareProfile, overrides: Mapping[str, Mapping[str, Any]],
                   source: str) -> HardwareProfile:
    """``profile`` with some keys replaced (``{"scheduler": {"alpha": 0.3}}``), the result
    validated like a file; ``source`` names the overrides in errors."""
    if not any(overrides.values()):
        return profile
    raw = asdict(profile)
    raw["device_match"] = list(profile.device_match)
    del raw["source"]
    for section, values in overrides.items():
        if section not in SECTIONS:
            raise _bad(source, section, values, f"not a profile section {sorted(SECTIONS)}")
        raw[section] = {**raw[section], **values}
    # Errors name the overrides; the profile still comes from its file.
    return replace(profile_from_mapping(raw, source), source=profile.source)


def with_dotted_overrides(profile: HardwareProfile, params: Mapping[str, str],
                          source: str) -> HardwareProfile:
    """``with_overrides`` from dotted keys and their text (``{"scheduler.alpha": "0.3"}``,
    as model-config parameters carry them), each typed by ``parse_override``."""
    overrides: dict[str, dict[str, Any]] = {}
    for key, text in params.items():
        section, name, value = parse_override(key, text, source)
        overrides.setdefault(section, {})[name] = value
    return with_overrides(profile, overrides, source)


def with_emulation(profile: HardwareProfile, overrides: Mapping[str, Any],
                   source: str) -> HardwareProfile:
    """``profile`` with some emulation keys (``time_scale``, ``cost_mode``) replaced."""
    return with_overrides(profile, {"emulation": dict(overrides)}, source)


def profile_from_mapping(raw: Any, source: str = "<mapping>") -> HardwareProfile:
    """Validate a parsed profile document; ``source`` names it in error messages."""
    if not isinstance(raw, Mapping):
        raise _bad(source, "<document>", raw, "a profile must be a YAML mapping")
    allowed = {"name", "description", "device_match", "cost_model", "emulation", "scheduler",
               "control", "calibration"}
    for key in raw:
        if key not in allowed:
            raise _bad(source, str(key), raw[key], f"unknown key; expected one of {sorted(allowed)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(source, "name", name, "must be a non-empty string")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise _bad(source, "description", description, "must be a string")
    match = raw.get("device_match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) and m for m in match):
        raise _bad(source, "device_match", match, "must be a list of non-empty strings")

    cost = _cost_model(raw.get("cost_model"), source)
    emulation = _emulation(raw.get("emulation"), source)
    sched = _section(SchedulerConfig, raw.get("scheduler"), source, "scheduler")
    if sched.min_window_ms > sched.max_window_ms:
        raise _bad(source, "scheduler.min_window_ms", sched.min_window_ms,
                   f"must not exceed scheduler.max_window_ms ({sched.max_window_ms})")
    control = _section(ControlConfig, raw.get("control"), source, "control")
    for key, options in (("entry_mode", ENTRY_MODES), ("infeasible_policy", INFEASIBLE_POLICIES),
                         ("safe_zone_batching", SAFE_ZONE_BATCHING),
                         ("explicit_former", FORMER_NAMES), ("emergency_former", FORMER_NAMES),
                         ("overload_former", FORMER_NAMES)):
        if getattr(control, key) not in options:
            raise _bad(source, f"control.{key}", getattr(control, key), f"must be one of {options}")
    for indicator in ("utilization", "queue_depth", "p99_cv"):
        safe, danger = getattr(control, f"{indicator}_safe"), getattr(control, f"{indicator}_danger")
        if safe >= danger:
            raise _bad(source, f"control.{indicator}_safe", safe,
                       f"must be below control.{indicator}_danger ({danger})")
    if control.weight_utilization + control.weight_queue_depth + control.weight_p99_cv <= 0:
        raise _bad(source, "control.weight_utilization", control.weight_utilization,
                   "the three indicator weights must not all be zero")
    if control.nml_score >= control.danger_zone_threshold:
        raise _bad(source, "control.nml_score", control.nml_score,
                   f"must be below control.danger_zone_threshold ({control.danger_zone_threshold})")
    return HardwareProfile(
        name=name,
        source=source,
        description=description,
        device_match=tuple(match),
        cost_model=cost,
        emulation=emulation,
        scheduler=sched,
        control=control,
        calibration=_section(CalibrationConfig, raw.get("calibration"), source, "calibration"),
    )
