"""``explicit-batching compare`` against a real tritonserver: 2 segments of ~3 s each
(explicit, then native) on the EMULATED t4 device slowed 5x, low load so every request
is answered. Checks the table, the PNG and that nothing was lost. What a busy machine can
cause (a failed metric scrape, perf_analyzer falling behind its schedule) is the report's
warning to make, not a failure; a segment with no data is one, and so is a replay unless
perf_analyzer's first try sent nothing (its sleeping worker, docs/platform.md: the server
ended none of that try's requests)."""

from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

from operator_tools.cli import main
from tests.conftest import SHIPPED_REPOSITORY

pytestmark = pytest.mark.integration
MODELS = ("emulated_explicit", "emulated_native")
TIME_SCALE = "5"


@pytest.fixture(scope="module")
def slowed_server(tmp_path_factory):
    """Its own server: a copy of the shipped repository whose two emulated models get
    the model-config parameter time_scale "5"; only those two are loaded."""
    from server_ops.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("compare") / "model_repository")
    shutil.copytree(SHIPPED_REPOSITORY, repo,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for model in MODELS:
        with open(os.path.join(repo, model, "config.pbtxt"), "a") as fh:
            fh.write(f'\nparameters {{ key: "time_scale" value: {{ string_value: '
                     f'"{TIME_SCALE}" }} }}\n')
    log = str(tmp_path_factory.mktemp("compare_logs") / "tritonserver.log")
    with TritonServer(repo, log_path=log, exit_timeout_s=10, extra_args=(
            "--model-control-mode=explicit", *(f"--load-model={m}" for m in MODELS))) as srv:
        yield srv


def _row(table_line: str) -> list[str]:
    return [c.strip() for c in table_line.strip().strip("|").split("|")]


def test_compare_two_short_segments(slowed_server, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "compare", "--url", slowed_server.http_url, "--metrics-url", slowed_server.metrics_url,
        "--model", "emulated", "--segments", "2", "--duration-s", "3", "--rate", "20", "--gap-s", "0.5",
        "--out", str(out), "--name", "it"])
    assert result.exit_code == 0, result.output + repr(result.exception)

    report = (out / "it.md").read_text()
    assert result.stdout.startswith(report.split("\n")[0])  # progress goes to stderr
    assert "**EMULATED** device" in report and "time scale 5 from model-config parameter" in report
    assert "250/500/1000 ms" in report  # SLA classes scaled by the time scale
    assert "alternating explicit, native" in report

    lines = report.splitlines()
    header = next(line for line in lines if line.startswith("| policy |"))
    cols = _row(header)
    assert {"lost", "send lag mean / P99 (ms)", "goodput (req/s)", "SLA attainment",
            "util. fluctuation", "P50 / P99 250 ms class (ms)"} <= set(cols)
    rows = {_row(line)[0]: dict(zip(cols, _row(line)))
            for line in lines if line.startswith("| ") and line != header and "---" not in line}
    assert {"explicit", "native", "**explicit / native**"} <= set(rows)
    for name in ("explicit", "native"):
        row = rows[name]
        assert row["lost"] == "0", row
        assert int(row["requests"].replace(",", "")) > 0
        assert float(row["throughput (req/s)"]) > 0
        # busy fractions were scraped, or the report says why not
        assert row["util. fluctuation"] != "-" or "metric scrapes failed" in report, report
    warnings = report[report.index("Warnings"):] if "Warnings" in report else ""
    assert "produced no data" not in warnings, report
    for line in warnings.splitlines():
        if "replayed" in line:
            assert "the server ended 0 of its" in line, report

    png = (out / "it.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
