"""monitoring/queries.py without a Prometheus: reading series names out of PromQL, rendering
Grafana's and prometheus-adapter's templates as those tools do, and what the checker reports.
(Against a live Prometheus: tests/integration/test_prometheus_live.py.)"""

from __future__ import annotations

import pytest

from monitoring.queries import (PrometheusError, Query, adapter_rules, adapter_series_names,
                                grafana_intervals, label_values_query, regex_of_values,
                                render_adapter_query, render_grafana, rule_groups,
                                rule_queries, series_names, unanswered)


@pytest.mark.parametrize("expr, names", [
    ('histogram_quantile(0.99, sum by (le, model) (rate(a_bucket{model=~"$m"}[1m])))',
     {"a_bucket"}),
    ("x / on (pod, model) group_left(extra) y + ignoring(version) z", {"x", "y", "z"}),
    ('{__name__="z", job="j"} or count({__name__=~"re.*"})', {"z"}),
    ('label_replace(m, "dst", "$1", "src", "(.*)")', {"m"}),
    ('max(avg_over_time((s{a="b"} >= bool 1)[1m:5s])) by (pod)', {"s"}),
    ("rate(m[5m] offset 1h) and m2 unless m3", {"m", "m2", "m3"}),
    ("sum without (instance) (a) / clamp_min(b, 1e-9) > 0.05", {"a", "b"}),
    ("topk(3, sum by (x) (a:recorded:rate5m))", {"a:recorded:rate5m"}),
])
def test_series_names_are_the_selected_metrics_only(expr, names):
    assert series_names(expr) == names


def test_grafana_variables_render_in_every_syntax():
    values = {"model": "(a|b)", "__rate_interval": "1m"}
    assert (render_grafana('x{m=~"$model",n=~"${model}",o=~"${model:regex}",p=~"[[model]]"}'
                           "[$__rate_interval]", values)
            == 'x{m=~"(a|b)",n=~"(a|b)",o=~"(a|b)",p=~"(a|b)"}[1m]')
    with pytest.raises(ValueError, match=r"\$pod has no value"):
        render_grafana('x{pod="$pod"}', values)


def test_grafana_intervals_follow_grafanas_rule():
    # $__rate_interval = max($__interval + scrape, 4 x scrape); $__interval >= scrape
    assert grafana_intervals(15.0, 1.0)["__rate_interval"] == "60s"
    assert grafana_intervals(5.0, 30.0)["__rate_interval"] == "35s"
    assert grafana_intervals(15.0, 1.0)["__interval"] == "15s"


def test_multi_values_become_an_escaped_alternation():
    assert regex_of_values(["b", "a.x"]) == r"(a\.x|b)"
    assert regex_of_values(["only"]) == "only"
    assert label_values_query("label_values(explicit_batching_zone, model)") == (
        "explicit_batching_zone", "model")
    with pytest.raises(ValueError):
        label_values_query("query_result(up)")


CONFIG_MAP = """
apiVersion: v1
kind: ConfigMap
metadata: {name: rules}
data:
  config.yaml: |
    rules:
      - seriesQuery: 'q_total{namespace!="",pod!=""}'
        resources:
          overrides:
            kubernetes_namespace: {resource: "namespace"}
            kubernetes_pod: {resource: "pod"}
        name: {matches: "^(.*)_total$", as: "${1}_per_second"}
        metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)'
    externalRules:
      - seriesQuery: 'q_total'
        resources: {template: "<<.Resource>>"}
        metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m]))'
"""


def test_adapter_queries_render_as_the_adapter_renders_them():
    pods, external = adapter_rules(CONFIG_MAP)
    assert render_adapter_query(pods, "q_total", "ns", ["p0"]) == (
        'sum(rate(q_total{kubernetes_namespace="ns",kubernetes_pod="p0"}[1m])) '
        "by (kubernetes_pod)")
    assert 'kubernetes_pod=~"p0|p1"' in render_adapter_query(pods, "q_total", "ns",
                                                              ["p0", "p1"])
    assert (render_adapter_query(external, "q_total", "ns")
            == 'sum(rate(q_total{namespace="ns"}[1m]))')
    assert adapter_series_names(pods, {"q_total", "q_seconds", "r_total"}) == [
        "q_total", "r_total"]
    with pytest.raises(ValueError, match="template field"):
        render_adapter_query({**pods, "metricsQuery": "<<.LabelValuesByName>>"}, "q", "ns",
                             ["p"])


def test_rules_read_from_a_prometheus_rule_and_from_a_rule_file():
    group = {"name": "g", "rules": [{"alert": "A", "expr": "x > 1"},
                                    {"record": "r:x", "expr": "sum(x)"}]}
    manifest = ("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\n"
                f"spec:\n  groups: [{group}]")
    for text in (manifest, f"groups: [{group}]"):
        assert rule_queries(rule_groups(text)) == [Query("rule 'A'", "x > 1"),
                                                   Query("rule 'r:x'", "sum(x)")]


class FakePrometheus:
    """Series ``stored``; a query answers when every name in it is stored, ``bad`` refused."""

    def __init__(self, stored: set[str]):
        self.stored = stored

    def query(self, expr: str) -> list[dict]:
        if "bad" in expr:
            raise PrometheusError("bad_data: parse error")
        return [{"metric": {}, "value": [0, "1"]}] if series_names(expr) <= self.stored else []

    def series(self, match: str) -> list[dict]:
        return [{"__name__": match}] if match in self.stored else []


def test_the_checker_names_each_unanswered_query_and_the_series_never_stored():
    api = FakePrometheus({"a", "b"})
    findings = unanswered(api, [Query("p1", "a / b"), Query("p2", "rate(a[1m]) / c"),
                                Query("p3", "bad(")])
    assert findings == ["p2: no series from `rate(a[1m]) / c`; never stored: c",
                        "p3: refused (bad_data: parse error) from `bad(`"]
