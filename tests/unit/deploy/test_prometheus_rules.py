"""The alerts (deploy/kubernetes/base/prometheus-rules.yaml) and the autoscaler's query
(prometheus-adapter-rules.yaml) evaluated by Prometheus's own engine: ``promtool test rules``
(Debian's ``prometheus`` package, which ``make setup`` installs) on the cases in
prometheus-rules-test.yaml and prometheus-adapter-test.yaml. Without promtool these tests
fail and say to run ``make setup``: they are never skipped."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from monitoring.queries import adapter_rules, render_adapter_query, rule_groups, series_names
from tests.conftest import REPO_ROOT
from triton_backend.metric_catalog import PREFIX, all_metric_names

BASE = os.path.join(REPO_ROOT, "deploy", "kubernetes", "base")
HERE = os.path.dirname(os.path.abspath(__file__))
# Triton 2.51's own families the rules may read, and kube-state-metrics' restart counter.
TRITON_SERIES = {"nv_inference_queue_duration_us", "nv_inference_request_success",
                 "nv_inference_request_failure", "nv_inference_count",
                 "nv_inference_compute_infer_duration_us", "nv_inference_pending_request_count"}
KUBE_STATE_SERIES = {"kube_pod_container_status_restarts_total"}
# The pods the adapter is asked about in the cases (prometheus-adapter-test.yaml).
ADAPTER_NAMESPACE, ADAPTER_PODS = "ml", ("triton-explicit-a", "triton-explicit-b")


def _read(name: str) -> str:
    with open(os.path.join(BASE, name)) as fh:
        return fh.read()


def _groups() -> list[dict]:
    text = _read("prometheus-rules.yaml")
    rule = yaml.safe_load(text)
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    return rule_groups(text)


def _adapter_query() -> str:
    """The one rule's metricsQuery as the adapter renders it for the cases' pods."""
    (rule,) = adapter_rules(_read("prometheus-adapter-rules.yaml"))
    series = rule["seriesQuery"].split("{", 1)[0]
    return render_adapter_query(rule, series, ADAPTER_NAMESPACE, ADAPTER_PODS)


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: run make setup (it installs Debian's prometheus)")
    return path


def _run_promtool(tmp_path, cases: dict, with_rules: bool) -> subprocess.CompletedProcess:
    if with_rules:
        with open(tmp_path / "rules.yaml", "w") as fh:
            yaml.safe_dump({"groups": _groups()}, fh, sort_keys=False)
    with open(tmp_path / "cases.yaml", "w") as fh:
        yaml.safe_dump(cases, fh, sort_keys=False)
    return subprocess.run([_promtool(), "test", "rules", str(tmp_path / "cases.yaml")],
                          capture_output=True, text=True, timeout=120)


def _cases(name: str) -> dict:
    with open(os.path.join(HERE, name)) as fh:
        return yaml.safe_load(fh)


def _adapter_cases() -> dict:
    cases = _cases("prometheus-adapter-test.yaml")
    for test in cases["tests"]:
        for expr_test in test["promql_expr_test"]:
            expr_test["expr"] = _adapter_query()
    return cases


def test_the_alerts_fire_as_the_cases_expect(tmp_path):
    done = _run_promtool(tmp_path, _cases("prometheus-rules-test.yaml"), with_rules=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_expectation_fails_promtool(tmp_path):
    cases = _cases("prometheus-rules-test.yaml")
    cases["tests"][0]["alert_rule_test"][0]["exp_alerts"] = \
        cases["tests"][0]["alert_rule_test"][1]["exp_alerts"]  # firing before its `for`
    done = _run_promtool(tmp_path, cases, with_rules=True)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


def test_the_autoscalers_query_reads_the_queue_wait_per_request(tmp_path):
    done = _run_promtool(tmp_path, _adapter_cases(), with_rules=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_queue_wait_fails_promtool(tmp_path):
    cases = _adapter_cases()
    cases["tests"][0]["promql_expr_test"][0]["exp_samples"][0]["value"] *= 2
    done = _run_promtool(tmp_path, cases, with_rules=False)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


def test_every_alert_is_covered_by_a_case():
    alerts = {r["alert"] for g in _groups() for r in g["rules"]}
    tested = {t["alertname"] for test in _cases("prometheus-rules-test.yaml")["tests"]
              for t in test["alert_rule_test"] if t["exp_alerts"]}
    assert alerts == tested


def test_every_expression_names_series_the_pods_or_kube_state_metrics_publish():
    plugin = set()
    for name in all_metric_names():
        plugin |= {name, f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    known = plugin | TRITON_SERIES | KUBE_STATE_SERIES
    exprs = [r["expr"] for g in _groups() for r in g["rules"]] + [_adapter_query()]
    for expr in exprs:
        names = series_names(expr)
        assert names and names <= known, (expr, names - known)
    assert any(n.startswith(PREFIX) for e in exprs for n in series_names(e))
