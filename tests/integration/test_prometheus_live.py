"""A real Prometheus scrapes a live tritonserver running the shipped plugin model, and the
queries that ship with the project get the series they expect from it: every Grafana
dashboard query (Triton's nv_inference_* panels included), the prometheus-adapter query the
HPA scales on, and the alert rules, loaded into that Prometheus.

The plugin publishes its latency histograms as gauge families (``_bucket{le}``, ``_sum``,
``_count``; triton_backend/control_metrics.py): this is where a real Prometheus reads them as
histograms, ``histogram_quantile`` over their buckets giving a finite quantile. The last test
shows the check can fail: a query naming a series the server does not publish is reported.
"""

from __future__ import annotations

import copy
import math
import os
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from monitoring.queries import (Query, adapter_rules, adapter_series_names, dashboard_queries,
                                finite_values, grafana_intervals, label_values_query,
                                load_dashboard, missing_series, regex_of_values,
                                render_adapter_query, rule_groups, rule_queries, series_names,
                                unanswered)
from tests.eventually import eventually
from tests.integration.models import emulated_copy, grpc_inputs
from tests.integration.prometheus import SCRAPE_INTERVAL_S, LivePrometheus
from triton_backend.metric_catalog import LATENCY_BUCKETS, LATENCY_HISTOGRAMS, PREFIX

pytestmark = pytest.mark.integration
MODEL = "prom_explicit"
# What the Prometheus Operator's PodMonitor attaches to a pod's series (the adapter rule
# and the alerts group by them); the scrape config attaches the same here.
NAMESPACE, POD = "triton-test", "triton-explicit-0"
KUBERNETES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "deploy", "kubernetes")
# Series the alert rules read from another exporter, never from a tritonserver.
OTHER_EXPORTERS = {"kube_pod_container_status_restarts_total": "kube-state-metrics"}
# Every SLA class's series (metric_catalog.SLA_CLASSES), and refusals for the tightest.
SLA_MS = (20.0, 80.0, 150.0, 600.0, 5000.0)
# Prometheus's answers change once a scrape: polling them faster only loads the machine.
POLL_S = SCRAPE_INTERVAL_S / 2
# The Grafana interval a data source's default 15 s minimum interval gives
GRAFANA_STEP_S = 15.0


def _manifest(name: str) -> str:
    """A manifest's text, from the Kustomize base or, before it, the flat folder."""
    for path in (os.path.join(KUBERNETES, "base", name), os.path.join(KUBERNETES, name)):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                return fh.read()
    raise FileNotFoundError(f"{name} in neither {KUBERNETES}/base nor {KUBERNETES}")


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    from server_ops.launcher import TritonServer

    repo = str(tmp_path_factory.mktemp("prom") / "repo")
    os.makedirs(repo)
    emulated_copy(repo, MODEL)  # the shipped model as it is, EMULATED t4 at its own speed
    log = str(tmp_path_factory.mktemp("promlogs") / "tritonserver.log")
    with TritonServer(repo, log_path=log, exit_timeout_s=5) as srv:
        yield srv


@pytest.fixture(scope="module")
def traffic(triton):
    """Requests of every SLA class, paced, until the module ends: rate() over the counters
    needs increases inside its window whenever a test queries."""
    stop = threading.Event()

    def send():
        rng = np.random.default_rng(0)
        with grpcclient.InferenceServerClient(triton.grpc_url) as client:
            while not stop.is_set():
                sla_ms = SLA_MS[int(rng.integers(len(SLA_MS)))]
                try:
                    client.infer(MODEL, grpc_inputs(rng, int(rng.integers(8, 64)), sla_ms))
                except InferenceServerException:
                    pass  # a refusal (the tightest SLA) is traffic too: it is counted
                stop.wait(0.02)  # pacing the load, not a synchronisation

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)


@pytest.fixture(scope="module")
def prometheus(triton, traffic, tmp_path_factory):
    groups = rule_groups(_manifest("prometheus-rules.yaml"))
    with LivePrometheus(str(tmp_path_factory.mktemp("prometheus")),
                        [f"{triton.host}:{triton.metrics_port}"],
                        {"namespace": NAMESPACE, "pod": POD}, groups) as api:
        yield api


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return load_dashboard()


@pytest.fixture(scope="module")
def variables(prometheus, dashboard) -> dict[str, str]:
    """The dashboard's template variables as Grafana fills them: each query variable with
    what its ``label_values`` query lists ("All"), the interval built-ins."""
    values = grafana_intervals(SCRAPE_INTERVAL_S, GRAFANA_STEP_S)
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            selector, label = label_values_query(var["query"])
            listed = eventually(lambda: prometheus.label_values(label, selector),
                                what=f"${var['name']}'s values ({var['query']})", poll_s=POLL_S)
            values[var["name"]] = regex_of_values(listed)
    return values


def _all_answered(prometheus, queries: list[Query]) -> bool:
    findings = unanswered(prometheus, queries)
    assert not findings, "\n".join(findings)
    return True


def _with_finite_values(prometheus, expr: str) -> list[dict]:
    samples = prometheus.query(expr)
    return samples if samples and len(finite_values(samples)) == len(samples) else []


def test_the_model_variable_lists_the_model(variables):
    assert variables["model"] == MODEL


def test_every_dashboard_query_returns_a_series(prometheus, dashboard, variables):
    queries = dashboard_queries(dashboard, variables)
    eventually(lambda: _all_answered(prometheus, queries),
               what="every dashboard query answered with a series", poll_s=POLL_S)


def test_the_hpa_query_returns_the_pods_value(prometheus):
    rules = adapter_rules(_manifest("prometheus-adapter-rules.yaml"))
    assert rules
    for rule in rules:
        # discovery: the adapter lists the series its seriesQuery selects
        names = eventually(lambda: adapter_series_names(
            rule, {s["__name__"] for s in prometheus.series(rule["seriesQuery"])}),
            what=f"series for the adapter's seriesQuery {rule['seriesQuery']}", poll_s=POLL_S)
        for name in names:
            expr = render_adapter_query(rule, name, NAMESPACE, [POD])
            samples = eventually(lambda: _with_finite_values(prometheus, expr),
                                 what=f"a finite value from {expr}", poll_s=POLL_S)
            if rule["_kind"] == "rules":  # per pod: exactly the pod asked for
                assert [s["metric"].get("pod") for s in samples] == [POD], samples
            assert all(float(s["value"][1]) >= 0 for s in samples), samples


@pytest.mark.parametrize("family", sorted(LATENCY_HISTOGRAMS))
def test_a_quantile_over_the_plugins_latency_buckets_is_finite(prometheus, family):
    bucket = f"{PREFIX}{family}_bucket"
    # Prometheus reads the gauges' le labels as the catalogue's bounds, +Inf last
    bounds = {float(le) for le in eventually(lambda: prometheus.label_values("le", bucket),
                                             what=f"{bucket}'s le labels", poll_s=POLL_S)}
    assert bounds == {*LATENCY_BUCKETS, math.inf}
    expr = f'histogram_quantile(0.99, sum by (le) (rate({bucket}{{model="{MODEL}"}}[1m])))'
    p99 = eventually(lambda: finite_values(prometheus.query(expr)),
                     what=f"a finite P99 from {expr}", poll_s=POLL_S)
    assert len(p99) == 1 and 0.0 < p99[0] <= LATENCY_BUCKETS[-1], p99


def test_the_alert_rules_evaluate_over_published_series(prometheus):
    def evaluated():
        rules = prometheus.rules()
        return rules if all(r["health"] != "unknown" for r in rules) else None
    rules = eventually(evaluated, what="every alert rule loaded and evaluated once", poll_s=POLL_S)
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    names = set().union(*(series_names(q.expr) for q in rule_queries(
        rule_groups(_manifest("prometheus-rules.yaml")))))
    assert names - set(OTHER_EXPORTERS), "the rules read none of the server's series"
    assert missing_series(prometheus, names - set(OTHER_EXPORTERS)) == []


def test_a_query_over_a_series_the_server_does_not_publish_is_reported(
        prometheus, dashboard, variables):
    eventually(lambda: _all_answered(prometheus, dashboard_queries(dashboard, variables)),
               what="every dashboard query answered with a series", poll_s=POLL_S)
    broken = copy.deepcopy(dashboard)
    panel = copy.deepcopy(next(p for p in broken["panels"] if p.get("targets")))
    panel["title"] = "Queue time in the wrong unit"
    panel["targets"] = [{"refId": "A", "expr": 'rate(nv_inference_queue_duration_ms'
                                               '{model=~"$model"}[$__rate_interval])'},
                        {"refId": "B", "expr": 'explicit_batching_zone{model="no_such_model"}'}]
    broken["panels"].append(panel)
    findings = unanswered(prometheus, dashboard_queries(broken, variables))
    assert len(findings) == 2, findings
    assert findings[0].startswith("dashboard panel 'Queue time in the wrong unit' A: no series")
    assert findings[0].endswith("never stored: nv_inference_queue_duration_ms")
    # a published series under labels it does not carry: reported, no name missing
    assert "explicit_batching_zone" in findings[1] and "never stored" not in findings[1]
