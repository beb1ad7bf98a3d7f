"""``benchmarks/stub_ab.py``: the variant model it writes, its perf reading and its page (the
server run is ``scripts/stub_ab.py`` itself)."""

from __future__ import annotations

import argparse
import os

from benchmarks.hold_speed import Row
from benchmarks.stub_ab import VARIANT, page, perf_by_library, share, variant_model
from server_ops.intake_config import parse


def read_config(folder: str):
    with open(os.path.join(folder, "config.pbtxt")) as fh:
        return parse(fh.read())


def test_a_variant_from_another_tree_imports_that_tree_first(tmp_path):
    tree = tmp_path / "other_tree"
    assert variant_model(str(tmp_path), str(tree), {"sidecar": "off"}, "flat") == VARIANT
    folder = str(tmp_path / VARIANT)
    source = (tmp_path / VARIANT / "1" / "model.py").read_text()
    lines = source.splitlines()
    assert lines[:2] == ["import sys", f"sys.path.insert(0, {str(tree)!r})"]
    assert "TritonPythonModel" in source  # the shipped model's own import follows
    config = read_config(folder)
    assert config.name == VARIANT
    assert config.parameters["sidecar"].string_value == "off"
    assert config.parameters["time_scale"].string_value == "1"


def test_a_variant_without_a_tree_runs_the_shipped_code(tmp_path):
    assert variant_model(str(tmp_path), None, {}, "flat") == VARIANT
    folder = str(tmp_path / VARIANT)
    assert "sys.path" not in (tmp_path / VARIANT / "1" / "model.py").read_text()
    assert read_config(folder).name == VARIANT


def test_perf_report_lines_are_read_as_samples_by_library():
    report = ("    54.46%          3607  libpython3.11.so.1.0\n"
              "    11.66%           772  triton_python_backend_stub\n"
              "\n# comment\n     2.75%           182  [kernel.kallsyms]\n")
    samples = perf_by_library(report)
    assert samples == {"libpython3.11.so.1.0": 3607, "triton_python_backend_stub": 772,
                       "[kernel.kallsyms]": 182}
    assert share(samples, "triton_python_backend_stub") == 772 / (3607 + 772 + 182)
    assert share({}, "libc.so.6") == 0.0


def test_the_page_gives_each_round_its_ratios_and_the_medians():
    args = argparse.Namespace(rate=1440.0, rounds=2, measurement_ms=10000, device="flat",
                              tree="", params='{"sidecar": "off"}', perf_s=0.0)

    def row(us: float) -> Row:
        return Row("m", None, 1440.0, throughput=1440.0, p50_ms=11.0, stub_us=us,
                   per_call=10.0)

    rows = {"A": [row(180.0), row(190.0)], "B": [row(171.0), row(190.0)],
            "native": [row(150.0), row(140.0)]}
    lines = page(rows, {}, args)
    assert "--params '{\"sidecar\": \"off\"}'" in lines[2]
    assert "the shipped code with parameters" in lines[2]
    assert lines[6] == "| 1 | 180.0 | 171.0 | 150.0 | 0.950 | 1.200 | 1.140 |"
    assert lines[8] == "| median | 185.0 | 180.5 | 145.0 | 0.976 | 1.276 | 1.245 |"
