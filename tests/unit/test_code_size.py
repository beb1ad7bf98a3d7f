"""No source file outside tests/ is over MAX_LINES lines (the layout's rule: a file holds
one idea; docs/code-layout.md)."""

from __future__ import annotations

import os

from tests.conftest import REPO_ROOT

MAX_LINES = 400
SKIP = {".venv", ".git", "tests", "results", "__pycache__", ".wheelhouse", ".hypothesis"}


def test_no_source_file_outside_tests_is_over_the_limit():
    over = []
    for folder, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    lines = sum(1 for _ in fh)
                if lines > MAX_LINES:
                    over.append((os.path.relpath(path, REPO_ROOT), lines))
    assert not over, f"over {MAX_LINES} lines: {over}"
