"""Docs quote no measured figure that a committed results page they link does not hold.

What counts as a figure: a number followed by a unit (``ms``, ``µs``/``us``, ``s``,
``min``, ``req/s``, ``%``, ``x``, ``MiB`` ...), e.g. ``3.9 ms``, ``1,550 req/s``,
``0.86-1.00x``, ``10.8/25.3/95.1 ms`` (every number of a range or a list carries the unit).
It is checked in README.md and every page of docs/, code blocks included (quoted output is
measured output).

A figure passes when either:

- **backed**: the same number with the same unit (``µs`` = ``us``, ``×`` = ``x``; thousands
  separators ignored) is written on a page under ``results/`` that the same doc links with
  a markdown link (``[...](../results/page.md)``; a link to a results folder means its
  README.md). A figure is quoted from its page, so the page carries it as written; in a
  page's table a number also carries the unit its column names in parentheses
  (``| rate (req/s) |`` above ``| 200 |`` is ``200 req/s``). A derived figure (a
  difference, a ratio of two rows) is not on the page: quote the page's own numbers.
- **a setting**: the figure is inside one inline code span that also names a key which
  exists in the product's code or configs (an identifier with an underscore, or a
  ``--flag``), e.g. ``perception_period_ms = 200 ms``. Write settings and defaults the way
  the config or the code spells them; a bare ``10 ms`` in backticks is not a setting.

Anything else (a figure from a run nobody committed, a design guess) is a failure: commit
the page and link it, or drop the figure.
"""

from __future__ import annotations

import functools
import glob
import os
import re

from tests.conftest import REPO_ROOT

DOC_PATHS = [os.path.join(REPO_ROOT, "README.md"),
             *sorted(glob.glob(os.path.join(REPO_ROOT, "docs", "*.md")))]
RESULTS = os.path.join(REPO_ROOT, "results")
UNIT = r"(?:req/s|ok/s|infer/s|ms|µs|us|ns|min|s|h|%|x|MiB|GiB|KiB|MB|GB|KB|points)"
NUMBER = r"~?\d[\d,]*(?:\.\d+)?"
# a number, or numbers joined by -, –, / or " to ", then the unit they share
# (× counts as x only written against its number: "5000 × preferred sizes" is a product)
FIGURE = re.compile(rf"(?<![\w.\-/−])({NUMBER}(?:(?:\s?[-–/]\s?|\sto\s){NUMBER})*)"
                    rf"(?:\s?({UNIT})|(×))(?![\w])")
NUMBERS = re.compile(NUMBER)
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
KEY = re.compile(r"--[a-z][\w-]+|[A-Za-z]\w*_\w+")
COLUMN_UNIT = re.compile(rf"\((?:[^()]*\s)?({UNIT})\)")
PLAIN_NUMBER = re.compile(rf"\**({NUMBER})\**")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
UNIT_ALIASES = {"µs": "us", "×": "x"}
SOURCE_DIRS = ("scheduler_core", "simulation", "triton_backend", "server_ops", "sidecar",
               "operator_tools", "model_repository", "deploy", "benchmarks", "scripts",
               "monitoring", "perf_analyzer_configs")
SOURCE_EXTENSIONS = (".py", ".pbtxt", ".yaml", ".yml", ".sh", ".json")


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def figures(text: str) -> list[tuple[str, str, str]]:
    """(number, unit, as written) for every figure in ``text``: commas and ``~`` dropped
    from the number, the unit's alias resolved."""
    found = []
    for match in FIGURE.finditer(text):
        unit = match.group(2) or "x"  # group 3 is a × against its number
        unit = UNIT_ALIASES.get(unit, unit)
        for number in NUMBERS.findall(match.group(1)):
            found.append((number.lstrip("~").replace(",", ""), unit, match.group(0)))
    return found


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def table_figures(text: str) -> set[tuple[str, str]]:
    """(number, unit) for each plain number in a markdown table cell whose column header
    names a unit in parentheses, e.g. ``rate (req/s)``."""
    found: set[tuple[str, str]] = set()
    units: list[str | None] = []
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            units = []
            continue
        cells = _cells(line)
        if not units:
            units = [(m.group(1) if (m := COLUMN_UNIT.search(c)) else None) for c in cells]
            continue
        for cell, unit in zip(cells, units):
            if unit and (number := PLAIN_NUMBER.fullmatch(cell)):
                found.add((number.group(1).lstrip("~").replace(",", ""),
                           UNIT_ALIASES.get(unit, unit)))
    return found


@functools.lru_cache(maxsize=None)
def _page_figures(path: str) -> frozenset[tuple[str, str]]:
    text = _read(path)
    return frozenset({(number, unit) for number, unit, _ in figures(text)}
                     | table_figures(text))


@functools.lru_cache(maxsize=1)
def _source_text() -> str:
    parts = [_read(os.path.join(REPO_ROOT, "Makefile"))]
    for folder in SOURCE_DIRS:
        for root, _, files in os.walk(os.path.join(REPO_ROOT, folder)):
            parts += [_read(os.path.join(root, f)) for f in files
                      if f.endswith(SOURCE_EXTENSIONS)]
    return "\n".join(parts)


def linked_results_pages(doc: str, text: str) -> list[str]:
    """The pages under results/ that ``text`` (the doc at ``doc``) links."""
    pages = []
    for target in LINK.findall(text):
        path = os.path.normpath(os.path.join(os.path.dirname(doc), target))
        if os.path.isdir(path):
            path = os.path.join(path, "README.md")
        if path.startswith(RESULTS + os.sep) and os.path.isfile(path):
            pages.append(path)
    return pages


def _is_setting(span: str) -> bool:
    return any(key in _source_text() for key in KEY.findall(span))


def unbacked(doc: str) -> list[str]:
    """``line: figure`` for each figure of ``doc`` that is neither backed nor a setting."""
    text = _read(doc)
    backing = set()
    for page in linked_results_pages(doc, text):
        backing |= _page_figures(page)
    problems = []
    for lineno, line in enumerate(text.splitlines(), 1):
        settings = [m.span() for m in CODE_SPAN.finditer(line) if _is_setting(m.group(1))]
        for match in FIGURE.finditer(line):
            if any(start <= match.start() < end for start, end in settings):
                continue
            for number, unit, written in figures(match.group(0)):
                if (number, unit) not in backing:
                    problems.append(f"{lineno}: {written.strip()}")
                    break
    return problems


def test_the_figure_rules_find_ranges_lists_and_aliases():
    assert figures("1,550-1,720 req/s, 10.8/25.3/95.1 ms, 137 µs, 0.86 to 1.00x") == [
        ("1550", "req/s", "1,550-1,720 req/s"), ("1720", "req/s", "1,550-1,720 req/s"),
        ("10.8", "ms", "10.8/25.3/95.1 ms"), ("25.3", "ms", "10.8/25.3/95.1 ms"),
        ("95.1", "ms", "10.8/25.3/95.1 ms"), ("137", "us", "137 µs"),
        ("0.86", "x", "0.86 to 1.00x"), ("1.00", "x", "0.86 to 1.00x")]
    assert figures("v2.51, 24.10-py3, sha 9e571e8, [1, 384], x86, 5000 × sizes") == []
    assert figures("2× overload") == [("2", "x", "2×")]


def test_a_table_cell_carries_its_column_unit():
    page = "| rate (req/s) | P50 (ms) | met |\n|---:|---:|---:|\n| 200 | 1,187.0 | 1106 |\n"
    assert table_figures(page) == {("200", "req/s"), ("1187.0", "ms")}


def test_a_setting_names_a_key_of_the_code():
    assert _is_setting("control.perception_period_ms 200 ms")
    assert _is_setting("--measurement-ms 3000")
    assert not _is_setting("10 ms")
    assert not _is_setting("made_up_key_nobody_defines 10 ms")


def test_every_figure_in_the_docs_is_on_a_linked_results_page_or_a_setting():
    failures = {os.path.relpath(doc, REPO_ROOT): unbacked(doc) for doc in DOC_PATHS}
    failures = {doc: lines for doc, lines in failures.items() if lines}
    assert not failures, "figures no linked results page holds:\n" + "\n".join(
        f"{doc}:{line}" for doc, lines in failures.items() for line in lines)
