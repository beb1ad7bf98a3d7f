"""``explicit-batching simulate`` through click's CliRunner: the table, determinism, the
workload specs and traces it reads, and ``--tune``."""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml
from click.testing import CliRunner

from operator_tools import simulate_cmd as S
from operator_tools import simulate_runs as R
from operator_tools.cli import main
from operator_tools.workload_spec import apply_overrides, load_workload_spec
from simulation import workload as W
from scheduler_core.profile_files import load_profile

CONFIGS = S.CONFIGS_DIR
TRACE = os.path.join(CONFIGS, "traces", "poisson_60rps_20s.intervals")
SHORT = ["--duration-s", "4"]  # a few thousand simulated requests: well under a second


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(main, ["simulate", *args])
    if ok:
        assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def table_rows(output: str) -> dict[str, list[str]]:
    """policy -> its cells, from the results table."""
    rows = {}
    for line in output.splitlines():
        if line.startswith("| ") and not line.startswith("| policy") and "---" not in line:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


def test_prints_the_comparison_table():
    out = run(*SHORT).output
    assert "EMULATED" in out and "time scale 1" in out
    assert ("| policy | requests | throughput (req/s) | goodput (req/s) | SLA attainment | "
            "P50 / P99 50 ms class (ms) | P50 / P99 100 ms class (ms) | "
            "P50 / P99 200 ms class (ms) | util. fluctuation | mean busy | padding waste | "
            "rejected |") in out
    rows = table_rows(out)
    assert set(rows) == {"explicit", "native", "**explicit / native**"}
    # Same arrivals for both policies.
    assert rows["explicit"][1] == rows["native"][1]
    assert int(rows["explicit"][1].replace(",", "")) > 1000


def test_same_arguments_same_output_and_the_seed_matters():
    first, second = run(*SHORT).output, run(*SHORT).output
    assert first == second
    assert run(*SHORT, "--seed", "5").output != first


def test_baselines_add_rows_and_an_unknown_one_is_refused():
    rows = table_rows(run(*SHORT, "--baselines", "native,fixed-window,adaptive").output)
    assert {"explicit", "native", "fixed-window", "adaptive"} <= set(rows)
    bad = run(*SHORT, "--baselines", "native,fifo", ok=False)
    assert bad.exit_code == 2 and "'fifo' is not one of" in bad.output


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CONFIGS, "workloads", "*.yaml"))))
def test_every_shipped_workload_spec_simulates(path):
    spec = load_workload_spec(path)
    out = run("--workload", path, *SHORT).output
    assert f"`{spec.name}`" in out and "| explicit |" in out


def test_options_override_the_spec():
    out = run(*SHORT, "--rate", "120", "--sla-classes", "80,400").output
    assert "mean 120.0 req/s" in out
    assert "P50 / P99 80 ms class (ms)" in out and "P50 / P99 400 ms class (ms)" in out


def test_time_scale_slows_the_device_and_scales_the_slas():
    out = run(*SHORT, "--time-scale", "5", "--rate", "60").output
    assert "time scale 5" in out and "= 250/500/1000 ms" in out
    assert "P50 / P99 250 ms class (ms)" in out


def test_replays_a_shipped_perf_analyzer_trace():
    with open(TRACE) as fh:
        count = sum(1 for line in fh if line.strip())
    out = run("--request-intervals", TRACE,
              "--input-data", os.path.join(CONFIGS, "mixed_sla.json")).output
    rows = table_rows(out)
    assert int(rows["explicit"][1].replace(",", "")) == count
    arrivals = S.trace_arrivals(TRACE, os.path.join(CONFIGS, "mixed_sla.json"), 2.0, 200.0)
    entries = W.read_input_data(os.path.join(CONFIGS, "mixed_sla.json"))
    # Send k carries data entry k, cycling through the 200 entries; SLAs x time scale.
    assert [(a.seq_len, a.sla_ms) for a in arrivals[198:202]] == [
        (entries[198][0], entries[198][1] * 2), (entries[199][0], entries[199][1] * 2),
        (entries[0][0], entries[0][1] * 2), (entries[1][0], entries[1][1] * 2)]


def test_bad_input_is_a_clean_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"arrival": {"process": "poisson", "rate_rps": 10},
                                   "duraton_s": 5}))
    r = run("--workload", str(bad), ok=False)
    assert r.exit_code == 1 and "duraton_s" in r.output and str(bad) in r.output
    bad.write_text(yaml.safe_dump({"arrival": {"process": "poisson", "rate_rps": -3}}))
    r = run("--workload", str(bad), ok=False)
    assert r.exit_code == 1 and "rate_rps" in r.output
    r = run("--write-profile", str(tmp_path / "x.yaml"), ok=False)
    assert r.exit_code == 2 and "--write-profile needs --tune" in r.output
    r = run("--request-intervals", TRACE, ok=False)
    assert r.exit_code == 2 and "go together" in r.output
    r = run("--profile", "no_such_profile", ok=False)
    assert r.exit_code == 1 and "no_such_profile" in r.output


def _tune_rows(output: str) -> list[list[str]]:
    section = output.split("## Tuning", 1)[1].split("## Results", 1)[0]
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if re.match(r"\| \d+ \|", line)]


def test_tune_finds_a_setting_at_least_as_good_and_writes_a_loadable_profile(tmp_path):
    target = tmp_path / "profiles" / "t4_tuned.yaml"
    args = ["--tune", "--rate", "450", *SHORT, "--no-progress", "--top", "3"]
    r = run(*args, "--write-profile", str(target))
    rows = _tune_rows(r.output)
    assert len(rows) >= 3
    best_goodput = float(rows[0][4].replace(",", ""))
    own = [row for row in rows if "(profile)" in row[3]]
    assert len(own) == 1
    assert best_goodput >= float(own[0][4].replace(",", ""))
    # 4 alphas x 3 betas x 3 windows (0.5x, 1x, 2x the profile's 5 ms); the own setting is
    # one of them.
    assert "36 settings" in r.output

    tuned = load_profile(str(target))  # the validating loader accepts it
    base = S.resolve_profile("t4")
    assert tuned.name == "t4_tuned"
    assert (tuned.scheduler.alpha, tuned.scheduler.beta) == (float(rows[0][1]),
                                                             float(rows[0][2]))
    assert tuned.scheduler.base_window_ms == float(rows[0][3])
    assert tuned.cost_model == base.cost_model and tuned.control == base.control
    assert target.read_text().startswith("# Profile t4 with the elastic window tuned by")

    # Re-simulated on its own, the written profile does at least as well as the shipped one.
    spec = apply_overrides(load_workload_spec(S.DEFAULT_WORKLOAD), rate=450.0,
                             duration_s=4.0)
    arrivals = spec.arrivals(1.0)
    native = S.shipped_native_batcher()
    tuned_run = R.run_policy("explicit", tuned, 1.0, arrivals, native)
    base_run = R.run_policy("explicit", base, 1.0, arrivals, native)
    assert tuned_run.goodput_rps >= base_run.goodput_rps
    assert tuned_run.goodput_rps == pytest.approx(best_goodput, abs=0.051)

    # --tune is deterministic, whatever the number of worker processes.
    assert run(*args).output.split("## Tuning")[1] == r.output.split("## Tuning")[1].replace(
        f"\nWrote the best setting to `{target}` (profile `t4_tuned`).\n", "")
    grid = R.tune_grid(base, (0.2, 0.5), (0.1,), (5.0,))
    assert (R.tune(base, 1.0, arrivals, grid, jobs=1, progress=False)
            == R.tune(base, 1.0, arrivals, grid, jobs=2, progress=False))


def test_tuned_profile_is_usable_by_simulate(tmp_path):
    target = tmp_path / "t4_tuned.yaml"
    run("--tune", *SHORT, "--no-progress", "--alphas", "0.3", "--betas", "0.2",
        "--windows", "4", "--write-profile", str(target))
    out = run(*SHORT, "--profile", str(target)).output
    assert "profile `t4_tuned`" in out and "| explicit |" in out
