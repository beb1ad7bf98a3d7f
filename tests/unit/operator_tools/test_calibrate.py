"""calibrate: boundary finding on synthetic load curves, profile writing (valid, loadable,
comments kept), --reset-parameters baseline, and the whole command on a fake server
(fake model control, fake perf_analyzer runs, fake metric samples)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml
from click.testing import CliRunner

from operator_tools.calibrate import boundaries, cold_start, common
from operator_tools.calibrate.cli import command
from operator_tools.profile_editor import write_profile
from operator_tools.live import LoadRefused, LoadRun, PluginSnapshot, Series
from operator_tools.perf_analyzer import PerfResult, read_measured_requests
from operator_tools.records import RequestRecord
from scheduler_core.profile import ControlConfig, ProfileError
from scheduler_core.profile_files import load_profile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
T4 = os.path.join(REPO_ROOT, "model_repository", "emulated_explicit", "profiles", "t4.yaml")

# A synthetic deployment: offered rate -> (utilisation, mean queue depth, P99 CV).
CURVE = {10: (0.15, 0.0, 0.02), 20: (0.30, 1.0, 0.05), 30: (0.45, 3.0, 0.15),
         40: (0.60, 8.0, 0.25), 50: (0.75, 20.0, 0.40), 60: (0.90, 40.0, 0.60)}


def point(rate, util, depth, cv):
    return boundaries.RatePoint(rate=rate, throughput=rate, p50_ms=20.0, p99_ms=40.0, p99_cv=cv,
                         utilization=util, queue_depth=depth, queue_depth_max=depth)


def curve_points(curve=CURVE):
    return [point(r, *v) for r, v in curve.items()]


# -- boundary finding --------------------------------------------------------------------

def test_crossing_is_interpolated_between_the_rates_around_it():
    c = boundaries.find_crossing(curve_points(), "p99_cv", 0.1)
    assert c.status == "found"
    assert c.rate == pytest.approx(25.0)
    assert c.utilization == pytest.approx(0.375)
    assert c.queue_depth == pytest.approx(2.0)
    assert c.p99_cv == pytest.approx(0.1)


def test_a_one_rate_blip_is_not_a_crossing():
    curve = {10: (0.1, 0, 0.05), 20: (0.2, 0, 0.35), 30: (0.3, 0, 0.2), 40: (0.4, 0, 0.25),
             50: (0.5, 0, 0.5), 60: (0.6, 0, 0.6)}
    c = boundaries.find_crossing(curve_points(curve), "p99_cv", 0.3)
    assert c.rate == pytest.approx(40 + 10 * 0.05 / 0.25)  # not the blip at 20 req/s
    # A crossing at the last pair needs no confirmation.
    assert boundaries.find_crossing(curve_points(curve), "p99_cv", 0.55).rate == pytest.approx(55.0)


def test_crossing_below_range_and_not_reached():
    assert boundaries.find_crossing(curve_points(), "queue_depth", 0.0).status == "below_range"
    assert boundaries.find_crossing(curve_points(), "queue_depth", 100.0).status == "not_reached"
    no_cv = [boundaries.RatePoint(rate=r) for r in (1, 2)]
    assert boundaries.find_crossing(no_cv, "p99_cv", 0.1).status == "no_data"


def test_boundaries_come_from_the_earliest_signal_and_set_all_three_thresholds():
    calib = boundaries.find_boundaries(curve_points(), ControlConfig())
    # P99 CV reaches 0.1 at 25 req/s, before the queue reaches 5 (34 req/s).
    assert calib.nml.indicator == "p99_cv" and calib.nml.rate == pytest.approx(25.0)
    # P99 CV reaches 0.3 at 43.3 req/s, before the queue reaches 15 (45.8 req/s).
    assert calib.danger.indicator == "p99_cv" and calib.danger.rate == pytest.approx(43.333, abs=1e-3)
    assert calib.thresholds == {
        "utilization_safe": 0.375, "utilization_danger": 0.65,
        "queue_depth_safe": 2.0, "queue_depth_danger": 12.0,
        "p99_cv_safe": 0.1, "p99_cv_danger": 0.3}
    assert set(calib.calibrated) == set(boundaries.THRESHOLD_KEYS)
    assert [boundaries.zone_of(r, calib) for r in sorted(CURVE)] == [
        "safe", "safe", "no-mans-land", "no-mans-land", "danger", "danger"]


def test_queue_depth_sets_the_boundary_when_it_rises_first():
    curve = {10: (0.2, 1.0, 0.01), 20: (0.4, 9.0, 0.02), 30: (0.6, 30.0, 0.05), 40: (0.8, 60.0, 0.5)}
    calib = boundaries.find_boundaries(curve_points(curve), ControlConfig())
    assert calib.nml.indicator == "queue_depth" and calib.nml.rate == pytest.approx(15.0)
    assert calib.danger.indicator == "queue_depth"
    assert calib.thresholds["queue_depth_safe"] == 5.0
    assert calib.thresholds["queue_depth_danger"] == 15.0
    assert calib.thresholds["utilization_safe"] == pytest.approx(0.3)


def test_unlocated_boundary_keeps_current_thresholds_and_says_why():
    flat = {10: (0.1, 0.0, 0.01), 20: (0.2, 0.5, 0.02), 30: (0.3, 1.0, 0.03)}
    current = ControlConfig(utilization_safe=0.55, utilization_danger=0.9)
    calib = boundaries.find_boundaries(curve_points(flat), current)
    assert calib.nml is None and calib.danger is None and calib.calibrated == ()
    assert calib.thresholds["utilization_safe"] == 0.55
    assert any("add higher rates" in n for n in calib.notes)


def test_measured_thresholds_out_of_order_fall_back_for_that_indicator():
    # Utilisation dips at the danger boundary (noise): the utilisation pair is kept.
    curve = {10: (0.5, 0.0, 0.02), 20: (0.6, 2.0, 0.2), 30: (0.3, 4.0, 0.5)}
    calib = boundaries.find_boundaries(curve_points(curve), ControlConfig())
    assert calib.thresholds["utilization_safe"] == 0.5
    assert calib.thresholds["utilization_danger"] == 0.85
    assert "utilization_safe" not in calib.calibrated
    assert "p99_cv_safe" in calib.calibrated
    assert any("utilization_safe" in n for n in calib.notes)


def test_a_p99_cv_floor_above_the_safe_level_shifts_the_cv_levels():
    # At light load the per-second P99 is the maximum of a few requests: CV 0.15 already.
    curve = {10: (0.1, 0.0, 0.15), 20: (0.3, 0.5, 0.20), 30: (0.5, 1.0, 0.35),
             40: (0.7, 2.0, 0.55), 50: (0.9, 3.0, 0.8)}
    calib = boundaries.find_boundaries(curve_points(curve), ControlConfig())
    levels = [c.level for c in calib.crossings if c.indicator == "p99_cv"]
    assert levels == [0.25, 0.45]
    assert calib.nml.rate == pytest.approx(20 + 10 * (0.25 - 0.20) / 0.15)
    assert calib.thresholds["p99_cv_safe"] == 0.25 and calib.thresholds["p99_cv_danger"] == 0.45
    assert calib.thresholds["utilization_safe"] == pytest.approx(0.367, abs=1e-3)
    assert any("floor" in n for n in calib.notes)


def test_signals_that_disagree_on_the_order_leave_the_no_mans_land_unlocated():
    # The queue starts past 5 and reaches 15 before the P99 CV reaches 0.1.
    curve = {10: (0.3, 6.0, 0.02), 20: (0.5, 20.0, 0.05), 30: (0.7, 30.0, 0.2)}
    calib = boundaries.find_boundaries(curve_points(curve), ControlConfig())
    assert calib.nml is None and calib.danger.indicator == "queue_depth"
    assert any("disagree" in n for n in calib.notes)
    # The danger boundary's utilisation (0.36) is below the kept safe one: both stay.
    assert (calib.thresholds["utilization_safe"], calib.thresholds["utilization_danger"]) == (0.5, 0.85)
    assert calib.thresholds["queue_depth_danger"] == 15.0
    assert calib.calibrated == ("queue_depth_danger",)


def test_failed_rates_are_left_out_of_the_boundaries():
    points = curve_points() + [boundaries.RatePoint(rate=35, error="perf_analyzer failed")]
    assert boundaries.find_boundaries(points, ControlConfig()).thresholds == \
        boundaries.find_boundaries(curve_points(), ControlConfig()).thresholds


# -- per-run summaries -------------------------------------------------------------------

def synthetic_run(rate: float, cv: float, t0: float = 1000.0, sla_ms: float = 1000.0,
                  base_ms: float = 30.0) -> LoadRun:
    """3 one-second windows; every request of second k has latency base*(1+(k-1)*cv), so
    the per-second P99s have exactly coefficient of variation ``cv``."""
    n = max(3, int(rate))
    requests = [RequestRecord(latency_ms=base_ms * (1 + (k - 1) * cv), sla_ms=sla_ms,
                              sent_s=t0 + k + (i + 0.5) / n)
                for k in range(3) for i in range(n)]
    perf = PerfResult("emulated_explicit", rate, float(rate), base_ms, base_ms * 1.5,
                      base_ms * (1 + cv), 0.1, True, "")
    return LoadRun(perf, tuple(requests), (t0, t0 + 1, t0 + 2, t0 + 3))


def snap(wall_s, gauges, sla=None, batch=(0.0, 0.0), profile="t4", taken_s=None):
    return PluginSnapshot(taken_s if taken_s is not None else wall_s, wall_s, dict(gauges),
                          dict(sla or {}), batch[0], batch[1], (profile,))


def test_summary_uses_samples_inside_the_measurement_windows():
    run = synthetic_run(20, 0.2)
    series = Series([snap(999.0, {"queue_depth": 100.0, "utilization_ratio": 0.0}),
                     snap(1000.5, {"queue_depth": 4.0, "utilization_ratio": 0.5}),
                     snap(1001.5, {"queue_depth": 6.0, "utilization_ratio": 0.7}),
                     snap(1010.0, {"queue_depth": 100.0, "utilization_ratio": 0.0})])
    p = boundaries.summarize_rate(20, run, series)
    assert p.queue_depth == pytest.approx(5.0) and p.queue_depth_max == 6.0
    assert p.utilization == pytest.approx(0.6)
    assert p.p99_cv == pytest.approx(0.2)
    assert p.goodput == pytest.approx(20.0)
    assert p.samples == 2


def test_goodput_counts_only_requests_within_their_sla():
    run = synthetic_run(10, 0.5, sla_ms=30.0)  # seconds 0 and 1 meet 30 ms, second 2 does not
    assert run.goodput() == pytest.approx(20 / 3)


def test_profile_export_reader_keeps_the_measured_requests(tmp_path):
    ns = 1_000_000_000
    doc = {"experiments": [{"experiment": {"mode": "request_rate", "value": 10},
                            "window_boundaries": [100 * ns, 101 * ns, 102 * ns],
                            "requests": [
                                {"timestamp": 99 * ns, "request_inputs": {"SLA_MS": 50.0},
                                 "response_timestamps": [99 * ns + 5_000_000]},
                                {"timestamp": 100 * ns + 1, "request_inputs": {"SLA_MS": [500.0]},
                                 "response_timestamps": [100 * ns + 20_000_001]},
                                {"timestamp": 101 * ns, "request_inputs": {},
                                 "response_timestamps": []}]}]}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    records, windows = read_measured_requests(str(path))
    assert windows == [100.0, 101.0, 102.0]
    assert len(records) == 1
    assert records[0].latency_ms == pytest.approx(20.0) and records[0].sla_ms == 500.0


# -- profile files -----------------------------------------------------------------------

def test_written_profile_keeps_comments_changes_only_the_thresholds_and_loads(tmp_path):
    out = tmp_path / "t4_calibrated.yaml"
    thresholds = boundaries.find_boundaries(curve_points(), ControlConfig()).thresholds
    profile = write_profile(T4, str(out), {"control": thresholds}, comment="calibrated")
    assert profile.name == "t4_calibrated"
    loaded = load_profile(str(out))
    for key, value in thresholds.items():
        assert getattr(loaded.control, key) == pytest.approx(value)
    base = load_profile(T4)
    assert loaded.cost_model == base.cost_model and loaded.scheduler == base.scheduler
    assert loaded.emulation == base.emulation
    # Every other control key keeps its value.
    for key in ControlConfig.__dataclass_fields__:
        if key not in thresholds:
            assert getattr(loaded.control, key) == getattr(base.control, key)
    text = out.read_text()
    original = open(T4).read()
    comments = [line for line in original.splitlines() if line.startswith("#")]
    assert all(c in text for c in comments)
    assert text.count("\n#") - original.count("\n#") <= 1  # one added comment line at most


def test_reset_parameters_baseline_rewrites_alpha_and_beta_in_place(tmp_path):
    path = tmp_path / "t4.yaml"
    path.write_text(open(T4).read().replace("alpha: 0.2", "alpha: 0.45")
                    .replace("beta: 0.1", "beta: 0.27"))
    result = CliRunner().invoke(command, ["--reset-parameters", "baseline", "--profile", str(path)])
    assert result.exit_code == 0, result.output
    assert "alpha 0.45 -> 0.2" in result.output and "beta 0.27 -> 0.1" in result.output
    loaded = load_profile(str(path))
    assert (loaded.scheduler.alpha, loaded.scheduler.beta) == (0.2, 0.1)
    assert loaded.name == "t4"
    assert open(T4).read() == path.read_text()  # only those two values differed


def test_reset_parameters_needs_a_profile():
    result = CliRunner().invoke(command, ["--reset-parameters", "baseline"])
    assert result.exit_code == 2 and "--profile" in result.output
    result = CliRunner().invoke(command, ["reset"])
    assert result.exit_code == 2 and "--profile" in result.output


def test_reset_is_the_same_as_the_designs_spelling(tmp_path):
    path = tmp_path / "t4.yaml"
    path.write_text(open(T4).read().replace("alpha: 0.2", "alpha: 0.45"))
    result = CliRunner().invoke(command, ["reset", "--profile", str(path)])
    assert result.exit_code == 0, result.output
    assert "alpha 0.45 -> 0.2" in result.output
    assert open(T4).read() == path.read_text()


def test_calibrate_alone_lists_its_four_commands():
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0
    for name in ("cold-start", "step", "reset", "table"):
        assert name in result.output


def test_sweep_file_gives_rates_window_and_input_and_options_override(tmp_path):
    sweep = tmp_path / "sweeps" / "s.yaml"
    sweep.parent.mkdir()
    for name in ("in_sla.json", "in.json"):
        (tmp_path / name).write_text('{"data": []}')
    sweep.write_text(yaml.safe_dump({
        "request_rates_rps": [40, 5], "run_duration_s": 1.5, "input_data": "in_sla.json",
        "input_data_no_sla": "in.json", "request_distribution": "constant", "max_trials": 4}))
    opts = {"sweep_file": str(sweep), "rates": None, "measurement_ms": None, "input_data": None,
            "request_distribution": None, "step": False, "step_rate": None}
    settings = cold_start.sweep_settings(opts)
    assert settings["rates"] == [5.0, 40.0] and settings["measurement_ms"] == 1500
    assert settings["input_data"] == str(tmp_path / "in_sla.json")
    assert settings["distribution"] == "constant" and settings["max_trials"] == 4
    settings = cold_start.sweep_settings({**opts, "rates": "7,3", "request_distribution": "poisson"})
    assert settings["rates"] == [3.0, 7.0] and settings["distribution"] == "poisson"


# -- the command on a fake server --------------------------------------------------------

class FakeServer:
    """Model control, perf_analyzer and metric samples of a server whose deployment
    follows CURVE; records every model load."""

    CONFIG = {"name": "emulated_explicit", "parameters": {
        "executor": {"string_value": "emulated"}, "hardware_profile": {"string_value": "t4"},
        "time_scale": {"string_value": "10"}}}

    def __init__(self, refuse_load=False, fail_rates=()):
        self.loads: list[dict] = []
        self.runs: list[tuple[float, str]] = []
        self.refuse_load, self.fail_rates = refuse_load, set(fail_rates)
        self.rate = None
        self.t0 = 1000.0

    # deps
    def model_control(self, url, model):
        server = self

        class Control:
            def config(self):
                return json.loads(json.dumps(server.CONFIG))

            def load(self, config):
                if server.refuse_load:
                    raise LoadRefused("[400] explicit model load / unload is not allowed if "
                                      "polling is enabled")
                server.loads.append(config)
        return Control()

    def current_params(self):
        cfg = self.loads[-1] if self.loads else self.CONFIG
        return {k: v["string_value"] for k, v in cfg["parameters"].items()}

    def run_load(self, url, model, input_data, rate, measurement_ms, protocol, distribution,
                 max_trials):
        self.runs.append((rate, input_data))
        self.rate = rate
        self.t0 += 10.0
        if rate in self.fail_rates:
            raise RuntimeError("perf_analyzer failed (99) for emulated_explicit:\nThread [1] had "
                               "error: deadline infeasible")
        params = self.current_params()
        cv = CURVE.get(rate, (0.5, 5.0, 0.1))[2]
        # --step: goodput peaks at alpha 0.3, then at beta 0.2 (SLA 1000 ms: met below it).
        alpha, beta = float(params.get("scheduler.alpha", 0.2)), float(params.get("scheduler.beta", 0.1))
        base = 30.0 + 1000 * abs(alpha - 0.3) + 1000 * abs(beta - 0.2)
        run = synthetic_run(rate, cv, self.t0, base_ms=base)
        with open(input_data) as fh:
            sla = json.load(fh)["data"][0]["SLA_MS"]["content"][0]
        self.seen_sla = sla
        return run

    def sampler(self, metrics_url, model, interval_s):
        server = self

        class Sampler:
            series = Series()

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                if server.rate is None:
                    return
                util, depth, _ = CURVE.get(server.rate, (0.5, 5.0, 0.1))
                t = server.t0
                zone = 1.0 if server.current_params().get("control.enabled") != "false" else 0.0
                self.series = Series([snap(t + 0.5 + i * 0.2, {
                    "queue_depth": depth, "utilization_ratio": util, "zone": zone,
                    "window_seconds": 0.005, "cost_correction_ratio": 1.0,
                    "control_period_seconds": 0.1, "observation_age_seconds": 0.05,
                    "control_lag_seconds": 0.001},
                    sla={("le1000ms", "met"): 10.0 * i, ("le1000ms", "missed"): float(i)},
                    batch=(4.0 * i, 1.0 * i), taken_s=t + i * 0.2) for i in range(10)])
        return Sampler()

    def snapshot(self, metrics_url, model):
        return snap(0.0, {}, profile="t4")

    def deps(self):
        return common.CalibrateDeps(run_load=self.run_load, model_control=self.model_control,
                                 sampler=self.sampler, snapshot=self.snapshot,
                                 progress=lambda items, desc: items)


@pytest.fixture
def repo(tmp_path):
    """A model repository holding emulated_explicit's profiles folder."""
    root = tmp_path / "repo"
    shutil.copytree(os.path.dirname(T4), root / "emulated_explicit" / "profiles")
    return root


def invoke(server, args):
    return CliRunner().invoke(command, args, obj=server.deps(), catch_exceptions=False)


def test_cold_start_sweeps_with_control_off_writes_everything_and_restores(tmp_path, repo):
    server = FakeServer()
    out = tmp_path / "out" / "t4_calibrated.yaml"
    result = invoke(server, ["cold-start", "--url", "localhost:8000", "--model", "emulated_explicit",
                             "--metrics-url", "http://x/metrics",
                             "--model-repository", str(repo), "--out", str(out),
                             "--rates", "10,20,30,40,50,60"])
    assert result.exit_code == 0, result.output
    # Control off for the sweep, original config back after it.
    assert server.loads[0]["parameters"]["control.enabled"] == {"string_value": "false"}
    assert server.loads[-1] == FakeServer.CONFIG
    assert [r for r, _ in server.runs[:6]] == [10, 20, 30, 40, 50, 60]
    assert server.seen_sla == 500.0  # mixed_sla.json's 50 ms scaled by the time scale 10
    profile = load_profile(str(out))
    assert profile.name == "t4_calibrated"
    assert profile.control.utilization_safe == 0.375 and profile.control.utilization_danger == 0.65
    assert profile.control.queue_depth_safe == 2.0 and profile.control.queue_depth_danger == 12.0
    assert profile.control.p99_cv_safe == 0.1 and profile.control.p99_cv_danger == 0.3
    png = (out.parent / "load_latency.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    report = (out.parent / "calibrate.md").read_text()
    assert report.splitlines()[1].startswith(
        "$ explicit-batching calibrate cold-start --url localhost:8000")
    assert "EMULATED device" in report and "time scale 10" in report
    assert "explicit control OFF" in report and "restored" in report
    assert "| 30 | 30.0 |" in report and "no-mans-land" in report
    baseline = json.loads((out.parent / "baseline.json").read_text())
    assert baseline["offered_rate"] == 40.0  # the highest rate below the danger zone
    assert baseline["effect"]["sla_attainment"] == {"le1000ms": pytest.approx(10 / 11)}
    assert baseline["effect"]["mean_batch_size"] == pytest.approx(4.0)
    # The baseline ran with control restored.
    assert server.runs[-1][0] == 40.0 and len(server.loads) == 2


def test_refused_load_measures_as_is_and_says_so(tmp_path, repo):
    server = FakeServer(refuse_load=True)
    out = tmp_path / "p.yaml"
    result = CliRunner().invoke(command, [
        "cold-start", "--url", "localhost:8000", "--model", "emulated_explicit", "--model-repository", str(repo), "--out", str(out),
        "--rates", "10,30,60", "--no-baseline"], obj=server.deps())
    assert result.exit_code == 0, result.output
    assert "refused to reload" in result.output and "--model-control-mode=explicit" in result.output
    assert "AS IS" in (tmp_path / "calibrate.md").read_text()
    assert server.loads == [] and len(server.runs) == 3
    load_profile(str(out))


def test_a_failed_rate_is_reported_and_the_rest_still_calibrate(tmp_path, repo):
    server = FakeServer(fail_rates={50})
    out = tmp_path / "p.yaml"
    result = invoke(server, ["cold-start", "--url", "localhost:8000", "--model", "emulated_explicit", "--model-repository", str(repo),
                             "--out", str(out), "--rates", "10,20,30,40,50,60", "--no-baseline"])
    assert result.exit_code == 0
    assert "| 50 | failed: deadline infeasible |" in result.output
    assert server.loads[-1] == FakeServer.CONFIG


def test_base_profile_unknown_is_an_error(tmp_path):
    server = FakeServer()
    result = CliRunner().invoke(command, [
        "cold-start", "--url", "localhost:8000", "--model", "emulated_explicit", "--model-repository", str(tmp_path / "nowhere"),
        "--out", str(tmp_path / "p.yaml"), "--rates", "10"], obj=server.deps())
    assert result.exit_code == 1 and "--base-profile" in result.output


def test_step_walks_alpha_then_beta_reloading_each_setting(tmp_path):
    server = FakeServer()
    result = invoke(server, ["step", "--url", "localhost:8000", "--model", "emulated_explicit", "--rates", "30"])
    assert result.exit_code == 0, result.output
    settings = [(c["parameters"]["scheduler.alpha"]["string_value"],
                 c["parameters"]["scheduler.beta"]["string_value"])
                for c in server.loads if "scheduler.alpha" in c["parameters"]]
    assert settings == [("0.2", "0.1"), ("0.3", "0.1"), ("0.4", "0.1"), ("0.5", "0.1"),
                        ("0.3", "0.2"), ("0.3", "0.3")]
    assert server.loads[-1] == FakeServer.CONFIG  # restored
    assert "best: alpha=0.3 beta=0.2" in result.output
    assert "| 0.4 | 0.1 |" in result.output


def test_step_is_bounded_by_max_steps(tmp_path):
    server = FakeServer()
    result = invoke(server, ["step", "--url", "localhost:8000", "--model", "emulated_explicit", "--step-rate", "30",
                             "--max-steps", "2"])
    assert result.exit_code == 0
    assert len(server.runs) == 2
    assert "bounded by --max-steps 2" in result.output


def test_step_without_explicit_model_control_fails_clearly():
    server = FakeServer(refuse_load=True)
    result = CliRunner().invoke(command, ["step", "--url", "localhost:8000", "--model", "emulated_explicit", "--rates", "30"],
                                obj=server.deps())
    assert result.exit_code == 1 and "--model-control-mode=explicit" in result.output


def test_sweep_needs_rates_and_out(tmp_path, monkeypatch):
    monkeypatch.setattr(cold_start, "DEFAULT_SWEEP", str(tmp_path / "absent.yaml"))
    server = FakeServer()
    result = CliRunner().invoke(command, ["cold-start", "--url", "h:1", "--model", "emulated_explicit",
                                              "--out", str(tmp_path / "p.yaml")],
                                obj=server.deps())
    assert result.exit_code == 2 and "--rates" in result.output
    result = CliRunner().invoke(command, ["cold-start", "--url", "h:1", "--model", "emulated_explicit", "--rates", "10"],
                                obj=server.deps())
    assert result.exit_code == 2 and "--out" in result.output


def test_step_reloads_each_setting_in_benchmark_mode_and_says_so():
    server = FakeServer()
    result = invoke(server, ["step", "--url", "localhost:8000", "--model", "emulated_explicit", "--step-rate", "30",
                             "--max-steps", "2"])
    assert result.exit_code == 0, result.output
    stepped = [c["parameters"] for c in server.loads if "scheduler.alpha" in c["parameters"]]
    assert all(p["control.infeasible_policy"] == {"string_value": "serve_late"} for p in stepped)
    assert server.loads[-1] == FakeServer.CONFIG  # restored: no serve_late left behind
    assert "control.infeasible_policy=serve_late (benchmark mode" in result.output


def test_step_as_configured_leaves_the_policy():
    server = FakeServer()
    result = invoke(server, ["step", "--url", "localhost:8000", "--model", "emulated_explicit", "--step-rate", "30",
                             "--max-steps", "1", "--infeasible-policy", "as-configured"])
    assert result.exit_code == 0, result.output
    assert all("control.infeasible_policy" not in c["parameters"] for c in server.loads)
    assert "a refused request ends its run" in result.output


def test_cold_start_and_step_json_hold_the_figures_alone_on_stdout(tmp_path, repo):
    out = tmp_path / "t4_calibrated.yaml"
    result = invoke(FakeServer(), ["cold-start", "--url", "localhost:8000", "--model",
                                   "emulated_explicit", "--metrics-url", "http://x/metrics",
                                   "--model-repository", str(repo), "--out", str(out),
                                   "--rates", "10,20,30,40,50,60", "--no-baseline", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "calibrate_cold_start" and doc["profile"] == str(out)
    assert [p["rate"] for p in doc["points"]] == [10, 20, 30, 40, 50, 60]
    assert doc["calibration"]["thresholds"]["utilization_danger"] == \
        load_profile(str(out)).control.utilization_danger
    result = invoke(FakeServer(), ["step", "--url", "localhost:8000", "--model",
                                   "emulated_explicit", "--step-rate", "30", "--max-steps", "2",
                                   "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "calibrate_step" and len(doc["results"]) == 2
    assert doc["best"] in doc["results"]
