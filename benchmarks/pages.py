"""Writing a results page: its folder made if needed, and where it went said."""

from __future__ import annotations

import os
from typing import Sequence


def write_page(path: str, text: str | Sequence[str]) -> None:
    """Write ``text`` (or its lines) to ``path``, ending in one newline, and say where."""
    body = text if isinstance(text, str) else "\n".join(text)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(body.rstrip("\n") + "\n")
    print(f"wrote {path}")
