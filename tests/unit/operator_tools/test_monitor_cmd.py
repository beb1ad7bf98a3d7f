"""monitor --check-metric-drift: fake metrics pages in, drift flags and the design's
remedies out (no server, no sleeping: the sampler runs on a fake clock)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from operator_tools import live
from operator_fakes import FakeClock, scripted_sampling
from operator_tools import monitor_cmd as mon
from operator_tools.live import ControlEffect
from sidecar.triton_metrics import MetricsParseError
from triton_backend.metric_catalog import BATCH_SIZE_BUCKETS, COUNTERS, GAUGES, PREFIX, SLA_CLASSES

MODEL = "emulated_explicit"


def render_page(gauges=None, sla=None, batch_sum=0.0, batch_count=0.0, profile="t4",
                model=MODEL) -> str:
    """A metrics page as Triton 2.51 serves it: a Triton family, then every
    explicit_batching_* family of ``model``."""
    gauges = {name: 0.0 for name in GAUGES} | (gauges or {})
    lab = f'model="{model}"'
    lines = ["# HELP nv_inference_request_success Number of successful inference requests",
             "# TYPE nv_inference_request_success counter",
             f'nv_inference_request_success{{{lab},version="1"}} 0']
    for name, value in gauges.items():
        lines += [f"# HELP {PREFIX}{name} {name}", f"# TYPE {PREFIX}{name} gauge",
                  f"{PREFIX}{name}{{{lab}}} {value}"]
    for name in COUNTERS:
        lines += [f"# HELP {PREFIX}{name} {name}", f"# TYPE {PREFIX}{name} counter",
                  f"{PREFIX}{name}{{{lab}}} 0"]
    lines += [f"# HELP {PREFIX}sla_requests_total by class", f"# TYPE {PREFIX}sla_requests_total counter"]
    for _, cls in SLA_CLASSES:
        for outcome in ("met", "missed"):
            value = (sla or {}).get((cls, outcome), 0.0)
            lines.append(f'{PREFIX}sla_requests_total{{{lab},outcome="{outcome}",'
                         f'sla_class="{cls}"}} {value}')
    lines += [f"# HELP {PREFIX}batch_size sizes", f"# TYPE {PREFIX}batch_size histogram"]
    lines += [f'{PREFIX}batch_size_bucket{{{lab},le="{b}"}} {batch_count}' for b in BATCH_SIZE_BUCKETS]
    lines += [f'{PREFIX}batch_size_bucket{{{lab},le="+Inf"}} {batch_count}',
              f"{PREFIX}batch_size_sum{{{lab}}} {batch_sum}",
              f"{PREFIX}batch_size_count{{{lab}}} {batch_count}",
              f"# HELP {PREFIX}profile_info profile", f"# TYPE {PREFIX}profile_info gauge",
              f'{PREFIX}profile_info{{{lab},profile="{profile}",reason="model config parameter '
              'hardware_profile"} 1']
    return "\n".join(lines) + "\n"


def steady_pages(n=11, met_per_page=10.0, missed_per_page=0.0, batch=4.0, window_ms=5.0,
                 zones=None, cost=1.0, period=100.0, profile="t4", sla_class="le200ms"):
    """``n`` consecutive pages of a server answering ``met_per_page + missed_per_page``
    requests of one SLA class between scrapes."""
    pages = []
    for i in range(n):
        answered = (met_per_page + missed_per_page) * i
        pages.append(render_page(
            gauges={"window_seconds": window_ms / 1000.0, "zone": (zones[i] if zones else 0),
                    "cost_correction_ratio": cost, "control_period_seconds": period / 1000.0},
            sla={(sla_class, "met"): met_per_page * i, (sla_class, "missed"): missed_per_page * i},
            batch_sum=answered, batch_count=answered / batch, profile=profile))
    return pages


def fake_sampler(pages):
    """A MonitorDeps whose sampling runs the real ``sample_series`` over ``pages``."""
    return scripted_sampling(pages)


def baseline_file(tmp_path, pages, wrap=True):
    effect = live.control_effect(
        [live.parse_plugin_metrics(p, MODEL, taken_s=i * 0.5) for i, p in enumerate(pages)], MODEL)
    doc = {"source": "test baseline", "effect": effect.to_dict()} if wrap else effect.to_dict()
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(doc))
    return str(path)


def check(tmp_path, now_pages, base_pages=None, extra=()):
    base = baseline_file(tmp_path, base_pages or steady_pages())
    return CliRunner().invoke(mon.command, ["--check-metric-drift", "--metrics-url", "http://m/metrics", "--model", MODEL,
                                            "--baseline", base, "--window-s", "5", *extra],
                              obj=fake_sampler(now_pages))


# -- parsing and summarising -------------------------------------------------------------

def test_page_parses_into_a_snapshot():
    page = render_page(gauges={"zone": 1, "window_seconds": 0.0075, "queue_depth": 3},
                       sla={("le50ms", "met"): 8, ("le50ms", "missed"): 2}, batch_sum=10,
                       batch_count=4, profile="t4_calibrated")
    snap = live.parse_plugin_metrics(page, MODEL)
    assert snap.zone == "no-mans-land" and snap.gauges["window_seconds"] == 0.0075
    assert snap.sla[("le50ms", "missed")] == 2 and snap.sla_total() == 10
    assert (snap.batch_size_sum, snap.batch_size_count) == (10, 4)
    assert snap.profile == "t4_calibrated"


def test_two_instances_make_one_snapshot():
    lines = []
    for i, (zone, window_s, depth, batches) in enumerate(((0, 0.004, 3, 10), (2, 0.006, 5, 30))):
        labels = f'model="{MODEL}",model_instance="{MODEL}_0_{i}"'
        lines += [f"{PREFIX}zone{{{labels}}} {zone}", f"{PREFIX}window_seconds{{{labels}}} {window_s}",
                  f"{PREFIX}queue_depth{{{labels}}} {depth}",
                  f"{PREFIX}batch_size_sum{{{labels}}} {batches * 2}",
                  f"{PREFIX}batch_size_count{{{labels}}} {batches}"]
    snap = live.parse_plugin_metrics("\n".join(lines) + "\n", MODEL)
    assert set(snap.instance_gauges) == {f"{MODEL}_0_0", f"{MODEL}_0_1"}
    assert snap.gauges["queue_depth"] == 8  # what the model holds
    assert snap.zone == "danger"  # the worst instance's
    assert snap.gauges["window_seconds"] == pytest.approx(0.005)
    assert (snap.batch_size_sum, snap.batch_size_count) == (80, 40)


def test_a_reload_that_leaves_two_profile_series_names_no_single_profile():
    page = render_page(profile="t4") + (
        f'{PREFIX}profile_info{{model="{MODEL}",profile="t4_live",reason="x"}} 1\n')
    snap = live.parse_plugin_metrics(page, MODEL)
    assert snap.profiles == ("t4", "t4_live") and snap.profile is None


def test_page_without_the_model_or_not_prometheus_is_refused():
    with pytest.raises(MetricsParseError, match="no explicit_batching"):
        live.parse_plugin_metrics(render_page(model="other"), MODEL)
    with pytest.raises(MetricsParseError):
        live.parse_plugin_metrics("this is { not a metrics page", MODEL)


def test_control_effect_survives_a_counter_reset_mid_window():
    pages = [render_page(sla={("le200ms", "met"): 100}, batch_sum=100, batch_count=50),
             render_page(sla={("le200ms", "met"): 110}, batch_sum=110, batch_count=55),
             render_page(sla={("le200ms", "met"): 5, ("le200ms", "missed"): 5},  # reloaded
                         batch_sum=10, batch_count=2)]
    snaps = [live.parse_plugin_metrics(p, MODEL, taken_s=i) for i, p in enumerate(pages)]
    effect = live.control_effect(snaps, MODEL)
    assert effect.sla_requests == {"le200ms": 20}
    assert effect.sla_attainment["le200ms"] == pytest.approx(15 / 20)
    assert effect.mean_batch_size == pytest.approx(20 / 7)


def test_sampler_counts_failed_scrapes_without_stopping():
    pages = iter([render_page(), OSError("connection refused"), render_page(), render_page()])
    clock = FakeClock()

    def fetch(url):
        item = next(pages)
        if isinstance(item, Exception):
            raise item
        return item
    series = live.sample_series("u", MODEL, 1.5, 0.5, fetch=fetch, clock=clock, sleep=clock.sleep)
    assert len(series.snapshots) == 3 and series.failures == 1
    assert "connection refused" in series.last_error
    assert clock.now == pytest.approx(101.5)


# -- drift verdicts ----------------------------------------------------------------------

def test_no_drift_when_the_effect_is_unchanged(tmp_path):
    result = check(tmp_path, steady_pages())
    assert result.exit_code == 0, result.output
    assert "verdict: no drift" in result.output
    assert "DRIFT" not in result.output


def test_sla_attainment_drop_flags_the_sla_weights(tmp_path):
    result = check(tmp_path, steady_pages(met_per_page=8, missed_per_page=2))
    assert result.exit_code == 0
    line = next(l for l in result.output.splitlines() if "SLA attainment le200ms" in l)
    assert "100.0%" in line and "80.0%" in line and "DRIFT" in line
    assert "Refresh the SLA weights" in result.output
    assert "calibrate --reset-parameters baseline" in result.output


def test_cost_correction_far_from_one_asks_to_refit_the_load_model(tmp_path):
    result = check(tmp_path, steady_pages(cost=1.9), base_pages=steady_pages(cost=1.7))
    line = next(l for l in result.output.splitlines() if "cost_correction_ratio" in l)
    assert "DRIFT" in line and "far from 1" in line  # only 12 % from the baseline, but far
    assert "Refit the load model" in result.output


def test_zone_and_window_drift_ask_to_adjust_the_control_period(tmp_path):
    zones = [0, 1, 1, 2, 2, 1, 1, 2, 2, 1, 1]
    result = check(tmp_path, steady_pages(zones=zones, window_ms=9.0))
    assert "zone share" in result.output
    zone_line = next(l for l in result.output.splitlines() if "zone share" in l)
    assert "DRIFT" in zone_line
    window_line = next(l for l in result.output.splitlines() if "elastic window" in l)
    assert "DRIFT" in window_line
    assert "within the design's 50-200 ms" in result.output
    # One remedy line for both metrics that call for it.
    assert result.output.count("Adjust the control period") == 1


def test_batch_size_drift_and_fail_on_drift_exit_status(tmp_path):
    result = check(tmp_path, steady_pages(batch=8.0), extra=("--fail-on-drift",))
    assert result.exit_code == 1
    assert "mean batch size" in result.output and "Refit the load model" in result.output


def test_limits_are_options(tmp_path):
    result = check(tmp_path, steady_pages(met_per_page=8, missed_per_page=2),
                   extra=("--max-attainment-drop", "0.25"))
    assert "verdict: no drift" in result.output


def test_too_little_traffic_is_not_judged(tmp_path):
    result = check(tmp_path, steady_pages(n=11, met_per_page=0.0))
    assert "no requests were answered" in result.output
    line = next(l for l in result.output.splitlines() if "SLA attainment le200ms" in l)
    assert "n/a" in line


def test_profile_change_since_the_baseline_is_pointed_out(tmp_path):
    result = check(tmp_path, steady_pages(profile="t4_calibrated"))
    assert "recorded on profile 't4'" in result.output and "t4_calibrated" in result.output


def test_record_baseline_round_trips(tmp_path):
    path = tmp_path / "b" / "recorded.json"
    result = CliRunner().invoke(mon.command, ["--record-baseline", str(path), "--metrics-url", "u", "--model", MODEL,
                                              "--window-s", "5"], obj=fake_sampler(steady_pages()))
    assert result.exit_code == 0, result.output
    effect, doc = mon.load_baseline(str(path))
    assert effect.sla_attainment == {"le200ms": 1.0} and effect.mean_batch_size == pytest.approx(4.0)
    result = CliRunner().invoke(mon.command, ["--check-metric-drift", "--metrics-url", "u", "--model", MODEL,
                                              "--baseline", str(path), "--window-s", "5"],
                                obj=fake_sampler(steady_pages()))
    assert "verdict: no drift" in result.output


def test_bare_effect_and_yaml_baselines_are_accepted(tmp_path):
    path = baseline_file(tmp_path, steady_pages(), wrap=False)
    effect, _ = mon.load_baseline(path)
    assert isinstance(effect, ControlEffect)


def test_bad_baseline_and_bad_usage(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"nothing": 1}')
    result = CliRunner().invoke(mon.command, ["--check-metric-drift", "--metrics-url", "u", "--model", MODEL,
                                              "--baseline", str(bad)], obj=fake_sampler(steady_pages()))
    assert result.exit_code == 1 and "sla_attainment" in result.output
    result = CliRunner().invoke(mon.command, ["--check-metric-drift", "--metrics-url", "u",
                                              "--model", MODEL])
    assert result.exit_code == 2 and "--baseline" in result.output
    result = CliRunner().invoke(mon.command, ["--check-metric-drift", "--metrics-url", "u",
                                              "--baseline", str(bad)])
    assert result.exit_code == 2 and "--model" in result.output  # no demo model assumed
    result = CliRunner().invoke(mon.command, ["--metrics-url", "u"])
    assert result.exit_code == 2


@pytest.mark.parametrize("error, exit_code", [
    (ConnectionRefusedError(111, "Connection refused"), 3),  # cannot reach: exit 3
    (OSError("Input/output error"), 1),  # reached, but no page: the command's own error
])
def test_unreachable_metrics_port_exits_3_and_another_failure_1(tmp_path, error, exit_code):
    def sample(url, model, duration_s, interval_s):
        clock = FakeClock()

        def fetch(u):
            raise error
        return live.sample_series(url, model, duration_s, interval_s, fetch=fetch, clock=clock,
                                  sleep=clock.sleep)
    base = baseline_file(tmp_path, steady_pages())
    result = CliRunner().invoke(mon.command, ["--check-metric-drift", "--metrics-url", "u", "--model", MODEL,
                                              "--baseline", base],
                                obj=live.SamplingDeps(sample=sample))
    assert result.exit_code == exit_code, result.output
    assert str(error.strerror or error) in result.output
    assert len(result.output.strip().splitlines()) == 2  # "watching ..." and one error line


def test_check_drift_directly():
    base = ControlEffect(MODEL, "t4", 5, 10, 100, {"le50ms": 0.99}, {"le50ms": 100}, 4.0, 5.0,
                         {"safe": 1.0, "no-mans-land": 0.0, "danger": 0.0}, 1.0, 100.0, 50.0, 1.0)
    now = ControlEffect(MODEL, "t4", 5, 10, 100, {"le50ms": 0.90}, {"le50ms": 100}, 4.0, 5.0,
                        {"safe": 1.0, "no-mans-land": 0.0, "danger": 0.0}, 1.0, 180.0, 50.0, 1.0)
    findings = {f.metric: f for f in mon.check_drift(now, base)}
    assert findings["SLA attainment le50ms"].remedy == "sla_weights"
    assert findings["control period (ms)"].status == "DRIFT"
    assert findings["mean batch size"].status == "ok"
