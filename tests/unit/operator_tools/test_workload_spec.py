"""Workload specs (``operator_tools.workload_spec``), shared by ``simulate`` and
``compare``: the shipped spec files load, and CLI overrides keep the mean rate."""

from __future__ import annotations

import glob
import os

import pytest

from operator_tools.simulate_cmd import CONFIGS_DIR, DEFAULT_WORKLOAD
from operator_tools.workload_spec import apply_overrides, load_workload_spec


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CONFIGS_DIR, "workloads",
                                                               "*.yaml"))))
def test_every_shipped_workload_spec_loads(path):
    spec = load_workload_spec(path)
    assert spec.name == os.path.splitext(os.path.basename(path))[0]


def test_overrides_keep_the_mean_rate():
    # A new arrival process keeps the mean rate; bursty keeps its 6:1 burst ratio.
    bursty = apply_overrides(load_workload_spec(DEFAULT_WORKLOAD), arrival="bursty",
                             rate=300.0)
    assert bursty.mean_rate_rps() == pytest.approx(300.0)
    assert bursty.arrival_params["high_rps"] / bursty.arrival_params["low_rps"] == 6.0
    rescaled = apply_overrides(bursty, rate=150.0)
    assert rescaled.mean_rate_rps() == pytest.approx(150.0)
