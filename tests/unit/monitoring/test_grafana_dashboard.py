"""The shipped Grafana dashboard loads as a Grafana dashboard model and plots every
control-state metric the plugin exports (and nothing it does not)."""

from __future__ import annotations

import json
import os
import re

import jsonschema
import pytest

from triton_backend.metric_catalog import PREFIX, all_metric_names

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DASHBOARD = os.path.join(REPO_ROOT, "monitoring", "grafana_dashboard.json")

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
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
    },
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    with open(DASHBOARD, encoding="utf-8") as fh:
        return json.load(fh)


def test_dashboard_matches_grafana_model(dashboard):
    jsonschema.validate(dashboard, DASHBOARD_SCHEMA)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_panels_do_not_overlap(dashboard):
    cells = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                cells.add((x, y))


def _queried_families(dashboard) -> set[str]:
    names = set()
    for p in dashboard["panels"]:
        for t in p["targets"]:
            for name in re.findall(rf"{PREFIX}[a-z_]+", t["expr"]):
                names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def test_every_exported_metric_is_plotted_and_nothing_else(dashboard):
    queried = _queried_families(dashboard)
    exported = set(all_metric_names())
    assert exported - queried == set(), "exported but not plotted"
    assert queried - exported == set(), "plotted but never exported"


def test_template_variables_are_defined(dashboard):
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    text = json.dumps(dashboard["panels"])
    for used in set(re.findall(r"\$\{?([a-z_]+)", text)):
        assert used in defined, f"${used} is used but not defined"
