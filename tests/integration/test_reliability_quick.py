"""The reliability suite's short cases (scripts/reliability.py --quick) on a real server:
overload 2x with recovery and timely refusals, a short soak, kill -9 of a stub with 150
requests queued (intake hold), hostile reloads, and a drip-feeding metrics endpoint. Every
request must get exactly one answer, the server must be healthy after each case, and the
main server must stop by itself within its exit timeout (the kill and hostile cases run on
servers of their own, whose stops Triton 2.51 holds to their exit timeout: documented). A
kill -9 that lands while the stub holds the shared-memory lock aborts tritonserver itself
(Triton 2.51, docs/reliability.md): that row is "documented", and lost 0 still holds.
Time bounds are the full run's (make reliability): here a missed one is only a WARN."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO_ROOT, "scripts", "reliability.py")
TIMEOUT_S = 300  # the quick suite takes ~90 s here; the margin is for a loaded machine


def _table_rows(output: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and data rows of the printed markdown table."""
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith("|")]
    header_at = next(i for i, line in enumerate(lines) if "lost" in line and "case" in line)
    cells = lambda line: [c.strip() for c in line.strip("|").split("|")]  # noqa: E731
    header = cells(lines[header_at])
    rows = [cells(line) for line in lines[header_at + 2:]]
    rows = [r for r in rows if len(r) == len(header)]
    return header, rows


def test_reliability_quick():
    proc = subprocess.run([sys.executable, SCRIPT, "--quick"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"reliability --quick failed ({proc.returncode}):\n{output}"
    header, rows = _table_rows(proc.stdout)
    lost = next(i for i, name in enumerate(header) if name.startswith("lost"))
    case = header.index("case")
    healthy = header.index("healthy afterwards")
    assert {r[case] for r in rows} >= {"overload 2x", "soak", "stub kill -9 (intake hold)",
                                       "hostile reloads", "drip-feeding metrics endpoint",
                                       "server stop (after the cases)"}, proc.stdout
    for row in rows:
        assert row[lost] == "0", f"{row[case]}: {row[lost]} requests lost\n{proc.stdout}"
        if row[case].startswith("server stop"):
            main_server = row[case] == "server stop (after the cases)"
            assert row[-1] == "PASS" if main_server else row[-1].startswith(
                ("PASS", "documented")), f"{row[case]}: {row[-1]}\n{proc.stdout}"
        elif row[-1].startswith("documented"):
            # Triton 2.51 aborts when a stub is killed holding the shared-memory lock;
            # only that abort is documented, and lost 0 above still held.
            assert row[healthy] == "no: tritonserver aborted after the kill", \
                f"{row[case]}: {row[healthy]}\n{proc.stdout}"
        elif row[-1] != "skipped":
            assert row[healthy].startswith("yes"), f"{row[case]}: {row[healthy]}\n{proc.stdout}"
