"""analyze --control-feedback-lag: lag distribution, the verdict against the design's
100-200 ms, and its correlation with SLA misses, from fake metrics pages (live mode) and
from recorded traces."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from operator_tools import analyze_cmd as ana
from operator_fakes import scripted_sampling
from triton_backend.metric_catalog import PREFIX

MODEL = "emulated_explicit"


def lag_page(age_ms, lag_ms, period_ms=100.0, met=0.0, missed=0.0, model=MODEL) -> str:
    """The part of a metrics page analyze reads: three gauges and the SLA counters."""
    lab = f'model="{model}"'
    lines = []
    for name, value in (("observation_age_seconds", age_ms / 1000.0),
                        ("control_lag_seconds", lag_ms / 1000.0),
                        ("control_period_seconds", period_ms / 1000.0)):
        lines += [f"# HELP {PREFIX}{name} {name}", f"# TYPE {PREFIX}{name} gauge",
                  f"{PREFIX}{name}{{{lab}}} {value}"]
    lines += [f"# HELP {PREFIX}sla_requests_total by class",
              f"# TYPE {PREFIX}sla_requests_total counter",
              f'{PREFIX}sla_requests_total{{{lab},outcome="met",sla_class="le200ms"}} {met}',
              f'{PREFIX}sla_requests_total{{{lab},outcome="missed",sla_class="le200ms"}} {missed}']
    return "\n".join(lines) + "\n"


def samples(lags, t_step=0.1, age_share=0.9, per_sample=10, miss_when_over=None):
    """LagSamples with the given total lags; the SLA counters advance ``per_sample``
    answered requests per sample, all missed while the lag is over ``miss_when_over``."""
    out, met, missed = [], 0.0, 0.0
    for i, lag in enumerate(lags):
        if i:
            if miss_when_over is not None and lag > miss_when_over:
                missed += per_sample
            else:
                met += per_sample
        out.append(ana.LagSample(i * t_step, lag * age_share, lag * (1 - age_share), 100.0,
                                 met, missed))
    return out


def test_lag_within_the_design_band():
    report = ana.analyze_lag(samples([120, 150, 180, 110, 160] * 4))
    assert report.verdict == "within"
    assert report.lag.p50 == pytest.approx(150)
    assert report.share_over_budget == 0.0


def test_lag_beyond_200_ms_exceeds():
    report = ana.analyze_lag(samples([150, 250, 300, 260, 240] * 4))
    assert report.verdict == "exceeds"
    assert report.share_over_budget == pytest.approx(0.8)
    text = ana.render(report, "test", 100, 200)
    assert "verdict: EXCEEDS the design's 100-200 ms" in text
    assert "shorten the control period within 50-200 ms" in text


def test_fast_lag_is_within_and_said_to_be_faster():
    report = ana.analyze_lag(samples([10, 20, 30, 40] * 5))
    assert report.verdict == "faster"
    assert "faster than it" in ana.render(report, "test", 100, 200)


def test_verdict_judges_the_90th_percentile_band_is_configurable():
    lags = [100] * 18 + [500, 500]  # p90 = 100 (nearest rank 18 of 20)
    assert ana.analyze_lag(samples(lags)).verdict == "within"
    assert ana.analyze_lag(samples(lags), lower_ms=20, upper_ms=50).verdict == "exceeds"


def test_effect_correlates_lag_with_sla_misses_per_second():
    # Ten samples per second; seconds alternate between a low and a high lag, and misses
    # happen only while the lag is over 200 ms.
    lags = []
    for second in range(6):
        lags += [120.0] * 10 if second % 2 == 0 else [260.0] * 10
    report = ana.analyze_lag(samples(lags, miss_when_over=200))
    assert len(report.per_second) == 6
    assert report.correlation == pytest.approx(1.0, abs=0.05)
    assert report.miss_rate_within_budget == pytest.approx(0.0, abs=0.02)
    assert report.miss_rate_over_budget == pytest.approx(1.0, abs=0.02)
    text = ana.render(report, "test", 100, 200)
    assert "misses rise with the lag" in text


def test_no_sla_counters_means_no_effect_but_still_a_verdict():
    plain = [ana.LagSample(i * 0.1, 100.0, 5.0) for i in range(10)]
    report = ana.analyze_lag(plain)
    assert report.verdict == "within" and report.per_second == [] and report.correlation is None
    assert "effect on SLAs: n/a" in ana.render(report, "test", 100, 200)


def test_pearson_needs_variation():
    assert ana.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert ana.pearson([1, 1, 1], [2, 4, 6]) is None
    assert ana.pearson([1, 2], [2, 4]) is None


# -- the command -------------------------------------------------------------------------

def live_deps(pages):
    return scripted_sampling(pages, start=50.0)


def test_live_mode_samples_the_metrics_port_and_records_a_trace(tmp_path):
    pages = [lag_page(100.0 + (i % 2) * 80, 3.0, met=10 * i) for i in range(31)]
    trace = tmp_path / "t" / "lag.json"
    result = CliRunner().invoke(ana.command, [
        "--control-feedback-lag", "--metrics-url", "http://m/metrics", "--model", MODEL,
        "--duration-s", "3",
        "--interval-s", "0.1", "--record-trace", str(trace)], obj=live_deps(pages))
    assert result.exit_code == 0, result.output
    assert "31 samples" in result.output
    assert "verdict: WITHIN the design's 100-200 ms" in result.output
    assert "SLA miss rate" in result.output
    doc = json.loads(trace.read_text())
    assert doc["kind"] == ana.TRACE_KIND and len(doc["samples"]) == 31
    assert doc["samples"][1]["observation_age_ms"] == 180.0
    # The recorded trace gives the same analysis offline.
    again = CliRunner().invoke(ana.command, ["--control-feedback-lag", "--trace", str(trace)])
    assert again.exit_code == 0
    assert again.output.splitlines()[2:] == result.output.splitlines()[3:-2]


def test_trace_mode_reads_a_bare_list_with_t(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([{"t": i * 0.2, "observation_age_ms": 240.0, "control_lag_ms": 30.0}
                                for i in range(10)]))
    result = CliRunner().invoke(ana.command, ["--control-feedback-lag", "--trace", str(path)])
    assert result.exit_code == 0
    assert "verdict: EXCEEDS" in result.output and "p90 270 ms" in result.output


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot be read as JSON"),
    ('{"samples": []}', "no samples"),
    ('[{"t": 0, "control_lag_ms": 1}]', "lacks 'observation_age_ms'"),
    ('[{"t": 0, "observation_age_ms": "x", "control_lag_ms": 1}]', "sample 0"),
])
def test_bad_traces_are_refused_with_the_reason(tmp_path, content, message):
    path = tmp_path / "trace.json"
    path.write_text(content)
    result = CliRunner().invoke(ana.command, ["--control-feedback-lag", "--trace", str(path)])
    assert result.exit_code == 1 and message in result.output


def test_usage_errors(tmp_path):
    runner = CliRunner()
    assert runner.invoke(ana.command, ["--metrics-url", "u"]).exit_code == 2
    assert runner.invoke(ana.command, ["--control-feedback-lag"]).exit_code == 2
    result = runner.invoke(ana.command, ["--control-feedback-lag", "--metrics-url", "u",
                                         "--model", MODEL, "--lower-ms", "300"])
    assert result.exit_code == 2 and "--lower-ms" in result.output
    result = runner.invoke(ana.command, ["--control-feedback-lag", "--metrics-url", "u"])
    assert result.exit_code == 2 and "--model" in result.output  # no demo model assumed


def test_live_mode_without_the_model_on_the_page_fails_clearly():
    result = CliRunner().invoke(ana.command, ["--control-feedback-lag", "--metrics-url", "u",
                                              "--model", MODEL, "--duration-s", "1"],
                                obj=live_deps([lag_page(1, 1, model="other")]))
    assert result.exit_code == 1 and "no lag samples" in result.output
