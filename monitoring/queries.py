"""The PromQL a deployment of the plugin runs, read from the files that ship it, and a check
of it against a live Prometheus.

Three consumers query Prometheus: the Grafana dashboard (``grafana_dashboard.json``), the
prometheus-adapter rule the HorizontalPodAutoscaler scales on, and the alert rules (a
PrometheusRule). A query over a series nobody publishes, or under labels the series do not
carry, returns nothing, silently, in all three: a blank panel, an HPA that never scales, an
alert that never fires. This module renders each query as its tool sends it (Grafana's
template variables; the adapter's ``<<.Series>>`` template) and asks a Prometheus, through
its HTTP API (``/api/v1``), whether it answers with a series, and which series names it
lacks when not.
"""

from __future__ import annotations

import json
import math
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Iterable, Mapping

import yaml

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD_PATH = os.path.join(REPO_ROOT, "monitoring", "grafana_dashboard.json")


@dataclass(frozen=True)
class Query:
    """One PromQL expression as Prometheus receives it, and where it comes from."""

    where: str  # e.g. "dashboard panel 'Queue depth' A"
    expr: str


# --- Grafana ----------------------------------------------------------------------------

_GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*$")
_RE2_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")


def load_dashboard(path: str = DASHBOARD_PATH) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def panels(dashboard: dict) -> list[dict]:
    """Every panel, those folded into a collapsed row included (Grafana nests them there)."""
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", ()))
    return out


def grafana_variables_used(text: str) -> set[str]:
    """The template variable names ``text`` uses (``$x``, ``${x}``, ``${x:fmt}``, ``[[x]]``)."""
    return {next(g for g in m.groups() if g) for m in _GRAFANA_VARIABLE.finditer(text)}


def render_grafana(expr: str, variables: Mapping[str, str]) -> str:
    """``expr`` with each template variable replaced by its value in ``variables`` (Grafana's
    built-ins such as ``__rate_interval`` included); a variable without a value is an error."""
    def value(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        if name not in variables:
            raise ValueError(f"template variable ${name} has no value (in {expr!r})")
        return variables[name]
    return _GRAFANA_VARIABLE.sub(value, expr)


def grafana_intervals(scrape_interval_s: float, interval_s: float | None = None,
                      range_s: float = 900.0) -> dict[str, str]:
    """Grafana's interval built-ins as it computes them for a Prometheus data source whose
    scrape interval is ``scrape_interval_s``: ``$__interval`` is the step (never below the
    scrape interval), ``$__rate_interval`` = max(``$__interval`` + scrape, 4 x scrape)."""
    step = max(interval_s or scrape_interval_s, scrape_interval_s)
    rate = max(step + scrape_interval_s, 4 * scrape_interval_s)
    return {"__interval": f"{step:g}s", "__interval_ms": f"{step * 1000:g}",
            "__rate_interval": f"{rate:g}s", "__range": f"{range_s:g}s",
            "__range_s": f"{range_s:g}"}


def regex_of_values(values: Iterable[str]) -> str:
    """A multi-value variable's values as Grafana hands them to a ``=~`` matcher: escaped
    and joined, ``(a|b)``."""
    escaped = [_RE2_SPECIAL.sub(r"\\\1", v) for v in sorted(values)]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def label_values_query(query: str) -> tuple[str, str]:
    """(series selector, label) of a ``label_values(selector, label)`` variable query."""
    match = _LABEL_VALUES.match(query)
    if not match:
        raise ValueError(f"not a label_values(selector, label) query: {query!r}")
    return match.group(1), match.group(2)


def dashboard_queries(dashboard: dict, variables: Mapping[str, str]) -> list[Query]:
    """Every panel target's expression, rendered with ``variables``."""
    return [Query(f"dashboard panel {p['title']!r} {t.get('refId', '?')}",
                  render_grafana(t["expr"], variables))
            for p in panels(dashboard) for t in p.get("targets", ()) if t.get("expr")]


# --- prometheus-adapter -----------------------------------------------------------------

def adapter_rules(manifest_text: str) -> list[dict]:
    """The rules (``rules`` and ``externalRules``) of the adapter config a manifest file
    carries: a ConfigMap's ``config.yaml``, or the config itself."""
    rules = []
    for doc in yaml.safe_load_all(manifest_text):
        if not doc:
            continue
        config = doc
        if doc.get("kind") == "ConfigMap":
            config = yaml.safe_load(doc["data"]["config.yaml"])
        for key in ("rules", "externalRules"):
            rules.extend({**rule, "_kind": key} for rule in config.get(key) or ())
    return rules


def _resource_label(rule: dict, resource: str) -> str:
    resources = rule.get("resources") or {}
    for label, target in (resources.get("overrides") or {}).items():
        if target.get("resource") in (resource, resource + "s"):
            return label
    if "template" in resources:
        return resources["template"].replace("<<.Resource>>", resource)
    raise ValueError(f"adapter rule {rule.get('seriesQuery')!r} maps no label to {resource}")


def render_adapter_query(rule: dict, series: str, namespace: str,
                         pods: Iterable[str] = ()) -> str:
    """The rule's ``metricsQuery`` as prometheus-adapter renders it (pkg/naming/
    metrics_query.go) for ``series``: a per-pod rule asked for ``pods`` in ``namespace``
    (``<<.LabelMatchers>>`` = ``ns="…",pod="…"``, or ``pod=~"a|b"`` for several;
    ``<<.GroupBy>>`` = the pod label), an external rule asked in ``namespace`` alone."""
    matchers = [f'{_resource_label(rule, "namespace")}="{namespace}"']
    group_by = ""
    if rule["_kind"] == "rules":
        names = list(pods)
        group_by = _resource_label(rule, "pod")
        op = "=~" if len(names) > 1 else "="
        matchers.append(f'{group_by}{op}"{"|".join(names)}"')
    text = rule["metricsQuery"]
    for field, value in (("Series", series), ("LabelMatchers", ",".join(matchers)),
                         ("GroupBy", group_by)):
        text = re.sub(r"<<\s*\." + field + r"\s*>>", value, text)
    if "<<" in text:
        raise ValueError(f"metricsQuery uses a template field this renderer lacks: {text!r}")
    return text


def adapter_series_names(rule: dict, found: Iterable[str]) -> list[str]:
    """Of the series names ``found`` for the rule's ``seriesQuery``, those its
    ``name.matches`` keeps (all when it has none), as the adapter discovers them."""
    pattern = re.compile((rule.get("name") or {}).get("matches") or ".*")
    return sorted({n for n in found if pattern.search(n)})


# --- alert and recording rules ----------------------------------------------------------

def rule_groups(manifest_text: str) -> list[dict]:
    """The rule groups of a PrometheusRule manifest (``spec.groups``) or a rule file."""
    groups = []
    for doc in yaml.safe_load_all(manifest_text):
        if doc:
            groups.extend((doc.get("spec") or doc).get("groups") or ())
    return groups


def rule_queries(groups: Iterable[dict]) -> list[Query]:
    return [Query(f"rule {rule.get('alert') or rule.get('record')!r}", str(rule["expr"]))
            for group in groups for rule in group["rules"]]


# --- series names in PromQL -------------------------------------------------------------

_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                 "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2", "start", "end"}
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_TOKEN = re.compile(r"""\s+|"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`|\{[^}]*\}|\[[^\]]*\]
                        |[0-9][0-9a-zA-Z_.]*|([a-zA-Z_:][a-zA-Z0-9_:]*)|.""", re.VERBOSE)
_NAME_MATCHER = re.compile(r"""__name__\s*=\s*["']([a-zA-Z_:][a-zA-Z0-9_:]*)["']""")


def series_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: bare names and ``{__name__="…"}``
    matchers; functions, aggregations, keywords and label lists are not names."""
    names: set[str] = set()
    tokens = [(m.group(0), m.group(1)) for m in _TOKEN.finditer(expr)
              if not m.group(0).isspace()]
    skip_list = False
    for i, (text, ident) in enumerate(tokens):
        if skip_list:  # the (label, …) after by/without/on/ignoring/group_*
            skip_list = text != ")"
            continue
        if text.startswith("{"):
            names.update(_NAME_MATCHER.findall(text))
        if not ident:
            continue
        following = tokens[i + 1][0] if i + 1 < len(tokens) else ""
        if ident in _LABEL_LISTS:
            skip_list = following == "("
        elif (following != "(" and ident not in _AGGREGATIONS
              and ident.lower() not in _KEYWORDS):
            names.add(ident)
    return names


# --- a live Prometheus ------------------------------------------------------------------

class PrometheusError(RuntimeError):
    """Prometheus answered a request with an error (its ``error`` text)."""


class PrometheusAPI:
    """The few calls of Prometheus's HTTP API (``/api/v1``) the checks need."""

    def __init__(self, url: str, timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, params: list[tuple[str, str]] = ()) -> object:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}",
                                        timeout=self.timeout_s) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:  # 400/422: a bad query, the reason in JSON
            body = json.load(exc)
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """The instant vector ``expr`` evaluates to now (a scalar: one sample, no labels)."""
        data = self._get("query", [("query", expr)])
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def series(self, match: str) -> list[dict]:
        """The label sets of the series ``match`` selects, over all stored time."""
        return self._get("series", [("match[]", match)])

    def label_values(self, label: str, match: str) -> list[str]:
        return self._get(f"label/{label}/values", [("match[]", match)])

    def rules(self) -> list[dict]:
        """Every loaded rule, with its group's name in ``group``."""
        return [{**rule, "group": group["name"]}
                for group in self._get("rules")["groups"] for rule in group["rules"]]


def value_of(sample: dict) -> float:
    """A result sample's value as a float (Prometheus sends ``[time, "text"]``)."""
    return float(sample["value"][1])


def missing_series(api: PrometheusAPI, names: Iterable[str]) -> list[str]:
    """Those of ``names`` Prometheus holds no series of."""
    return sorted(n for n in set(names) if not api.series(n))


def unanswered(api: PrometheusAPI, queries: Iterable[Query]) -> list[str]:
    """One finding per query that Prometheus refuses or answers with no series: where it
    comes from, the expression, and the series names in it that Prometheus has never
    stored (a name the server does not publish, or a typo)."""
    findings = []
    for q in queries:
        try:
            if api.query(q.expr):
                continue
            problem = "no series"
        except PrometheusError as exc:
            problem = f"refused ({exc})"
        absent = missing_series(api, series_names(q.expr))
        findings.append(f"{q.where}: {problem} from `{' '.join(q.expr.split())}`"
                        + (f"; never stored: {', '.join(absent)}" if absent else ""))
    return findings


def finite_values(samples: Iterable[dict]) -> list[float]:
    return [v for v in map(value_of, samples) if math.isfinite(v)]
