"""The one profile editor: a hardware profile's YAML with some keys changed, every other
line (comments included) kept, validated by the loader before it replaces anything.
``calibrate`` (thresholds, alpha and beta, cost tables) and ``simulate --write-profile``
write profiles through it. Edited as a ruamel.yaml round trip (the YAML library made to
keep comments, key order, flow and block style), then checked to parse to exactly the
intended mapping."""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import replace
from typing import Any, Mapping

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from scheduler_core.profile import HardwareProfile, ProfileError
from scheduler_core.profile_files import load_profile


def _round_trip() -> YAML:
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # one key, one line: no folding of long strings or tables
    rt.indent(mapping=2, sequence=4, offset=2)
    return rt


def _node(value: Any) -> Any:
    """``value`` as the node to write: floats rounded (a profile is read by people), lists
    in flow style (``[1, 16, 2.5]``; a list of lists one flow row per line)."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, (list, tuple)):
        seq = CommentedSeq(_node(v) for v in value)
        if not any(isinstance(v, (list, tuple, Mapping)) for v in value):
            seq.fa.set_flow_style()
        return seq
    if isinstance(value, Mapping):
        return CommentedMap((k, _node(v)) for k, v in value.items())
    return value


def _plain(value: Any) -> Any:
    """``value`` as safe_load reads the written text back (tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return round(value, 6) if isinstance(value, float) else value


def edit_profile_text(text: str, changes: Mapping[str, Mapping[str, Any]], name: str | None = None,
                      comment: str | None = None, top_level: Mapping[str, Any] | None = None,
                      header: str | None = None) -> str:
    """``text`` (a profile YAML) with some ``section.key`` values replaced or added and,
    optionally, a new ``name``, top-level keys replaced whole (``top_level``: a list is
    written in flow style, ``device_match: []``) and ``header`` comment lines put first;
    every other line, comments included, stays as it was. ``comment`` goes on a line of its
    own above each edited section. The result is checked to parse to exactly the intended
    mapping."""
    rt = _round_trip()
    try:
        doc = rt.load(text)
    except Exception as exc:  # ruamel's errors have no common base worth naming
        raise ProfileError(f"the profile text cannot be read as YAML: {exc}") from None
    doc = CommentedMap() if doc is None else doc
    if not isinstance(doc, CommentedMap):
        raise ProfileError("a profile must be a YAML mapping")
    expected = yaml.safe_load(text) or {}
    for key, value in (top_level or {}).items():
        doc[key] = _node(value)
        expected[key] = _plain(value)
    if name is not None:
        if "name" in doc:
            doc["name"] = name
        else:
            doc.insert(0, "name", name)
        expected["name"] = name
    for section, values in changes.items():
        block = doc.get(section)
        if block is None:
            doc[section] = block = CommentedMap()
        elif not isinstance(block, CommentedMap):
            raise ProfileError(f"section '{section}' is not a mapping; cannot edit it")
        for key, value in values.items():
            block[key] = _node(value)
        if comment:
            doc.yaml_set_comment_before_after_key(section, before=comment)
        expected[section] = {**(expected.get(section) or {}), **_plain(values)}
    out = io.StringIO()
    rt.dump(doc, out)
    # The header goes before everything, the file's own leading comments after it.
    result = "".join(f"# {line}\n" if line else "#\n"
                     for line in (header or "").splitlines()) + out.getvalue()
    if yaml.safe_load(result) != expected:
        raise ProfileError("editing the profile text did not give the intended values "
                           "(unusual YAML layout): edit it by hand")
    return result


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
