"""The shipped Grafana dashboard loads as a Grafana dashboard model, plots every
control-state metric the plugin exports (and nothing it does not) and, beside them, Triton's
own per-model series. (That a live Prometheus answers each query with a series is
tests/integration/test_prometheus_live.py.)"""

from __future__ import annotations

import json
import os
import re

import jsonschema
import pytest

from monitoring.queries import (grafana_intervals, grafana_variables_used, load_dashboard, panels,
                               series_names)
from triton_backend.metric_catalog import PREFIX, all_metric_names

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DASHBOARD = os.path.join(REPO_ROOT, "monitoring", "grafana_dashboard.json")

TRITON_SERIES = {"nv_inference_request_success", "nv_inference_request_failure",
                 "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us",
                 "nv_inference_count", "nv_inference_exec_count",
                 "nv_inference_pending_request_count"}

# The part of Grafana's dashboard JSON model (schemaVersion 39) that an import relies on.
TARGET = {"type": "object", "required": ["refId", "expr"],
          "properties": {"refId": {"type": "string", "pattern": "^[A-Z]$"},
                         "expr": {"type": "string", "minLength": 1},
                         "legendFormat": {"type": "string"}}}
PANEL = {"type": "object", "required": ["id", "type", "title", "gridPos", "targets"],
         "properties": {
             "id": {"type": "integer", "minimum": 1},
             "type": {"enum": ["timeseries", "stat", "gauge", "table", "bargauge", "heatmap"]},
             "title": {"type": "string", "minLength": 1},
             "gridPos": {"type": "object", "required": ["h", "w", "x", "y"],
                         "properties": {k: {"type": "integer", "minimum": 0}
                                        for k in ("h", "w", "x", "y")}},
             "datasource": {"type": "object", "required": ["type", "uid"]},
             "targets": {"type": "array", "minItems": 1, "items": TARGET}}}
# A row: a full-width header that groups the panels below it (Grafana's "row" panel).
ROW = {"type": "object", "required": ["id", "type", "title", "gridPos"],
       "properties": {"id": {"type": "integer", "minimum": 1}, "type": {"const": "row"},
                      "title": {"type": "string", "minLength": 1},
                      "gridPos": {"type": "object", "required": ["h", "w", "x", "y"],
                                  "properties": {"w": {"const": 24}, "x": {"const": 0}}},
                      "panels": {"type": "array", "items": PANEL}}}
DASHBOARD_SCHEMA = {
    "type": "object",
    "required": ["title", "uid", "schemaVersion", "panels", "time", "templating"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 30},
        "time": {"type": "object", "required": ["from", "to"]},
        "templating": {"type": "object", "required": ["list"],
                       "properties": {"list": {"type": "array"}}},
        "panels": {"type": "array", "minItems": 1,
                   "items": {"if": {"properties": {"type": {"const": "row"}}},
                             "then": ROW, "else": PANEL}},
    },
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return load_dashboard(DASHBOARD)


def test_dashboard_matches_grafana_model(dashboard):
    jsonschema.validate(dashboard, DASHBOARD_SCHEMA)
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_panels_do_not_overlap(dashboard):
    cells = set()
    for p in panels(dashboard):
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                cells.add((x, y))


def _queried(dashboard, prefix: str) -> set[str]:
    """The families of the series with ``prefix`` the dashboard's expressions select."""
    names = set()
    for p in panels(dashboard):
        for t in p.get("targets", ()):
            names.update(re.sub(r"_(bucket|sum|count)$", "", n)
                         for n in series_names(t["expr"]) if n.startswith(prefix))
    return names


def test_every_exported_metric_is_plotted_and_nothing_else(dashboard):
    queried = _queried(dashboard, PREFIX)
    exported = set(all_metric_names())
    assert exported - queried == set(), "exported but not plotted"
    assert queried - exported == set(), "plotted but never exported"


def test_tritons_own_series_are_plotted_beside_the_plugins(dashboard):
    # what Triton 2.51 publishes per model (tests/integration/test_prometheus_live.py reads
    # them from a live server); the sample names, e.g. nv_inference_count
    queried = {n for p in panels(dashboard) for t in p.get("targets", ())
               for n in series_names(t["expr"]) if n.startswith("nv_inference_")}
    assert TRITON_SERIES - queried == set(), "Triton's series not plotted"


def test_template_variables_are_defined(dashboard):
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    defined |= set(grafana_intervals(15.0))  # Grafana's built-ins ($__rate_interval ...)
    for used in grafana_variables_used(json.dumps(dashboard["panels"])):
        assert used in defined, f"${used} is used but not defined"


def test_rate_windows_follow_the_scrape_interval(dashboard):
    # $__rate_interval keeps at least four scrapes in every rate() window, whatever the
    # data source's scrape interval; a fixed window can hold fewer than two
    for p in panels(dashboard):
        for t in p.get("targets", ()):
            assert not re.search(r"\[\d+[smh]\]", t["expr"]), (p["title"], t["expr"])
