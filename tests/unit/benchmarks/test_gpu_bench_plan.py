"""benchmarks/gpu_bench.py without a server or a GPU: the time plan, the model repository it
builds, and the report of a finished run."""

from __future__ import annotations

import os

import pytest

from server_ops.intake_config import parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def gb():
    """The GPU bench's modules by what the tests read of them."""
    from types import SimpleNamespace

    from benchmarks import gpu_bench, gpu_plan, gpu_report

    return SimpleNamespace(LOADS=gpu_plan.LOADS, plan_segment_s=gpu_plan.plan_segment_s,
                           segment_cost_factor=gpu_plan.segment_cost_factor,
                           build_repository=gpu_bench.build_repository,
                           render_report=gpu_report.render_report)


def test_segment_length_fits_the_time_left(gb):
    loads = gb.LOADS
    seg = gb.plan_segment_s(340.0, loads, 3, warmup_s=1.0, overhead_s=1.0, min_s=2.0,
                            max_s=20.0)
    assert 2.0 < seg < 20.0
    factors = [gb.segment_cost_factor(load, native) for load in loads
               for native in (False, True, True, True)]
    total = sum((1.0 + seg) * f + 1.0 for f in factors)
    assert total == pytest.approx(340.0, rel=1e-6)


def test_segment_length_clamped(gb):
    assert gb.plan_segment_s(10.0, gb.LOADS, 3, 1.0, 1.0, 2.0, 20.0) == 2.0
    assert gb.plan_segment_s(1e6, gb.LOADS, 3, 1.0, 1.0, 2.0, 20.0) == 20.0


def test_native_past_its_peak_costs_its_backlog(gb):
    assert gb.segment_cost_factor(2.0, native=True) == 2.0
    assert gb.segment_cost_factor(2.0, native=False) == 1.0
    assert gb.segment_cost_factor(0.5, native=True) == 1.0


def _config(folder):
    return parse((folder / "config.pbtxt").read_text())


def _params(config) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()}


def test_repository_on_a_gpu_host(gb, tmp_path):
    models = gb.build_repository(str(tmp_path), (0, 1000, 5000), "cuda:0", {"k.x": "1"})
    assert models == ["minilm_explicit", "minilm_explicit_peak", "minilm_native_d0",
                      "minilm_native_d1000", "minilm_native_d5000"]
    for m in models:
        config = _config(tmp_path / m)
        assert config.name == m
        assert _params(config)["device"] == "cuda:0"
        assert not (tmp_path / m / "1" / "__pycache__").exists()
    peak = _params(_config(tmp_path / "minilm_explicit_peak"))
    assert peak["control.infeasible_policy"] == "serve_late" and peak["k.x"] == "1"
    assert "control.infeasible_policy" not in _params(_config(tmp_path / "minilm_explicit"))
    assert (tmp_path / "minilm_explicit_peak" / "profiles" / "h200.yaml").exists()
    native = _config(tmp_path / "minilm_native_d1000")
    assert native.max_batch_size == 64
    assert native.dynamic_batching.max_queue_delay_microseconds == 1000


def test_repository_on_a_cpu_has_no_device_parameter(gb, tmp_path):
    gb.build_repository(str(tmp_path), (0,), None, {})
    for m in ("minilm_explicit", "minilm_native_d0"):
        assert "device" not in _params(_config(tmp_path / m))
        assert "shape_bucket_tokens" not in _params(_config(tmp_path / m))


def test_the_bert_large_repository_runs_the_random_encoder_at_its_width(gb, tmp_path):
    from benchmarks.gpu_plan import FAMILIES

    models = gb.build_repository(str(tmp_path), (0,), "cuda:0", {}, FAMILIES["bert_large"],
                                 bert_layers=2, shape_bucket_tokens=64)
    assert models == ["bert_large_explicit", "bert_large_explicit_peak", "bert_large_native_d0"]
    for m in models:
        config = _config(tmp_path / m)
        params = _params(config)
        assert params["executor"] == "bert_large_random" and params["bert_layers"] == "2"
        assert params["shape_bucket_tokens"] == "64"
        assert list(config.output[0].dims) == [1024]
    assert _config(tmp_path / "bert_large_native_d0").max_batch_size == 64


def test_report_names_the_source(gb):
    from benchmarks.segment_stats import SegmentStats

    def stats(good):
        return SegmentStats("native", "measured", 2.0, 10, 10, good, {"UNAVAILABLE": 1}, 0,
                            good / 2.0, good / 10, 5.0, 9.0, {}, send_lag_p99_ms=1.0)

    results = {"device": {"torch_device": "cuda:0", "torch_name": "NVIDIA H200",
                          "nvml_name": "NVIDIA H200", "torch": "2.11", "python": "3.12",
                          "cpus": 16},
               "smoke": False, "command": "python3 scripts/gpu_bench.py", "started": "now",
               "wall_s": 400.0, "time_limit_s": 480.0,
               "settings": {"sla_classes_ms": (50.0, 100.0, 200.0), "concurrency": 64},
               "native_peak_rps": 1800.0, "native_peak_source": "closed loop",
               "open_loop_plan": {"segment_s": 6.0, "warmup_s": 1.0, "client_timeout_s": 0.22},
               "open_loop": [{"load": 0.5, "rate_rps": 900.0, "skipped": ["native_d5000"],
                              "idle_wait_s": {"explicit": 0.1},
                              "cells": {"explicit": stats(9), "native_d0": stats(10),
                                        "native_d1000": stats(8)}}]}
    text = gb.render_report(results)
    assert "Figures from a real device: NVIDIA H200 (cuda:0)" in text
    assert "| 0.5 | 900 | 4.5 | 90.0 |" in text and "| native_d0 | 5.0 | 100.0 |" in text
    assert "skipped (time limit)" in text
    assert text.startswith("# MiniLM on NVIDIA H200")
    results["model"] = "bert_large"
    assert "outputs are meaningless, the costs are real" in gb.render_report(results)
    results["smoke"] = True
    assert "CPU smoke run, not a device result" in gb.render_report(results)
