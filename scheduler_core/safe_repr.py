"""Bounded, never-failing ``repr`` for error messages that quote a bad value.

A value in an error message comes from outside (a profile file, a request): it may be a
YAML alias bomb whose full repr is gigabytes, or an int too long for ``str()``."""

from __future__ import annotations

import reprlib

MAX_CHARS = 200
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxtuple = 3, 6, 6, 6
_REPR.maxstring, _REPR.maxlong, _REPR.maxother = 80, 40, 80


def short_repr(value: object) -> str:
    try:
        text = _REPR.repr(value)
    except Exception:  # e.g. an int above Python's 4300-digit str() limit
        text = f"<unprintable {type(value).__name__}>"
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3] + "..."
