"""benchmarks/newshape_costs.py without a server: the repository it builds and its rows."""

from __future__ import annotations

import yaml

from benchmarks import newshape_costs as NS
from benchmarks.segment_stats import SegmentStats
from server_ops.intake_config import parse


def test_both_models_run_the_new_shape_costs(tmp_path):
    NS.build_repo(str(tmp_path))
    profile = yaml.safe_load((tmp_path / NS.EXPLICIT / "profiles" / "newshapes.yaml").read_text())
    assert profile["name"] == "newshapes"
    assert {ms for b, _, ms in profile["cost_model"]["table"] if b == 1} == {6.0}
    assert {ms for b, _, ms in profile["cost_model"]["table"] if b > 1} == {40.0}
    for model in (NS.EXPLICIT, NS.NATIVE):
        config = parse((tmp_path / model / "config.pbtxt").read_text())
        assert config.parameters["hardware_profile"].string_value == "newshapes"
    native = parse((tmp_path / NS.NATIVE / "config.pbtxt").read_text())
    assert native.parameters["profile_dir"].string_value == "emulated_explicit/profiles"
    assert native.dynamic_batching.max_queue_delay_microseconds == 0


def test_a_row_gives_both_models_and_the_goodput_ratio():
    def stats(good, refused=0):
        return SegmentStats("x", "measured", 10.0, 100, 100, good,
                            {"UNAVAILABLE": refused} if refused else {}, 0, good / 10.0,
                            good / 100, 50.0, 90.0, {}, send_lag_p99_ms=1.5)

    row = NS.page_rows([{"rate": 234.0, "explicit": stats(60, 30), "native": stats(80)}],
                       "tree")[0]
    assert row == "| tree | 234 | 60.0 | 50.0 | 30 | 80.0 | 50.0 | 0.75 | 1.5 |"
