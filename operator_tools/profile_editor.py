"""The one profile editor: a hardware profile's YAML with some keys changed, every other
line (comments included) kept, validated by the loader before it replaces anything.
``calibrate`` (thresholds, alpha and beta, cost tables) and ``simulate --write-profile``
write profiles through it."""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import replace
from typing import Any, Mapping

import yaml

from scheduler_core.profile import HardwareProfile, ProfileError
from scheduler_core.profile_files import load_profile

_TOP_KEY = re.compile(r"^([A-Za-z_][\w-]*)\s*:")


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 6))
    if isinstance(value, str) and not re.fullmatch(r"[\w.+-]+( [\w.+-]+)*", value):
        return json.dumps(value)  # a YAML double-quoted scalar
    return str(value)


def _top_key_line(lines: list[str], key: str) -> int | None:
    return next((i for i, line in enumerate(lines)
                 if _TOP_KEY.match(line) and _TOP_KEY.match(line).group(1) == key), None)


def _block_end(lines: list[str], start: int) -> int:
    """The line after the block that the top-level key at ``start`` opens."""
    return next((i for i in range(start + 1, len(lines))
                 if lines[i].strip() and not lines[i].lstrip().startswith("#")
                 and not lines[i][0].isspace()), len(lines))


def edit_profile_text(text: str, changes: Mapping[str, Mapping[str, Any]], name: str | None = None,
                      comment: str | None = None, top_level: Mapping[str, Any] | None = None,
                      header: str | None = None) -> str:
    """``text`` (a profile YAML) with some ``section.key`` values replaced or added and,
    optionally, a new ``name``, top-level keys replaced whole (``top_level``, flow style:
    ``device_match: []``) and ``header`` comment lines put first; every other line,
    comments included, stays as it was. ``comment`` goes on a line of its own above each
    edited section. The result is checked to parse to exactly the intended mapping."""
    lines = text.splitlines()
    expected = yaml.safe_load(text) or {}
    for key, value in (top_level or {}).items():
        flow = json.dumps(value)  # JSON is YAML flow style
        start = _top_key_line(lines, key)
        if start is None:
            lines.append(f"{key}: {flow}")
        else:
            lines[start:_block_end(lines, start)] = [f"{key}: {flow}"]
        expected[key] = value
    if name is not None:
        for i, line in enumerate(lines):
            if _TOP_KEY.match(line) and _TOP_KEY.match(line).group(1) == "name":
                lines[i] = f"name: {name}"
                break
        else:
            lines.insert(0, f"name: {name}")
        expected["name"] = name
    for section, values in changes.items():
        start = next((i for i, line in enumerate(lines)
                      if _TOP_KEY.match(line) and _TOP_KEY.match(line).group(1) == section), None)
        if start is None:
            if lines and lines[-1].strip():
                lines.append("")
            if comment:
                lines.append(f"# {comment}")
            lines.append(f"{section}:")
            lines.extend(f"  {k}: {_format(v)}" for k, v in values.items())
        else:
            if lines[start].split(":", 1)[1].split("#", 1)[0].strip():
                raise ProfileError(f"section '{section}' is written inline; cannot edit it")
            end = next((i for i in range(start + 1, len(lines))
                        if lines[i].strip() and not lines[i].lstrip().startswith("#")
                        and not lines[i][0].isspace()), len(lines))
            indent = next((re.match(r"\s*", lines[i]).group(0) for i in range(start + 1, end)
                           if lines[i].strip() and not lines[i].lstrip().startswith("#")), "  ")
            missing = []
            for key, value in values.items():
                pattern = re.compile(rf"^({re.escape(indent)}{re.escape(key)}\s*:\s*)([^#]*?)(\s*#.*)?$")
                for i in range(start + 1, end):
                    m = pattern.match(lines[i])
                    if m:
                        lines[i] = f"{m.group(1)}{_format(value)}{m.group(3) or ''}"
                        break
                else:
                    missing.append(f"{indent}{key}: {_format(value)}")
            # New keys go at the end of the section, before any trailing blank lines.
            insert_at = end
            while insert_at - 1 > start and not lines[insert_at - 1].strip():
                insert_at -= 1
            lines[insert_at:insert_at] = missing
            if comment:
                lines.insert(start, f"# {comment}")
        expected[section] = {**(expected.get(section) or {}), **values}
    if header:
        lines[:0] = [f"# {line}" if line else "#" for line in header.splitlines()]
    out = "\n".join(lines) + "\n"
    if yaml.safe_load(out) != expected:
        raise ProfileError("editing the profile text did not give the intended values "
                           "(unusual YAML layout): edit it by hand")
    return out


def write_profile(base_path: str, out_path: str, changes: Mapping[str, Mapping[str, Any]],
                  comment: str | None = None, rename: bool = True,
                  top_level: Mapping[str, Any] | None = None,
                  header: str | None = None) -> HardwareProfile:
    """Write ``base_path`` with ``changes`` (and ``top_level``, ``header``: see
    ``edit_profile_text``) to ``out_path``, its ``name`` set to the file's stem when
    ``rename``; validated by ``load_profile`` before it replaces anything."""
    with open(base_path, encoding="utf-8") as fh:
        text = fh.read()
    stem = os.path.splitext(os.path.basename(out_path))[0]
    new_text = edit_profile_text(text, changes, name=stem if rename else None, comment=comment,
                                 top_level=top_level, header=header)
    directory = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        candidate = os.path.join(tmp, os.path.basename(out_path))
        with open(candidate, "w", encoding="utf-8") as fh:
            fh.write(new_text)
        profile = load_profile(candidate)  # raises ProfileError naming the bad key
        os.replace(candidate, out_path)
    return replace(profile, source=out_path)
