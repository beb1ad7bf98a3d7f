"""``explicit-batching calibrate table --table-json``: a measured table into a profile."""

import json
import os

import pytest
from click.testing import CliRunner

from operator_tools.cli import main
from operator_tools.cost_table_io import read_table_json, rows_from_document
from scheduler_core.profile import ProfileError
from scheduler_core.profile_files import load_profile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
BASE = os.path.join(REPO, "model_repository", "minilm_explicit", "profiles", "h200.yaml")


def _table(tmp_path, doc):
    path = tmp_path / "table.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_table_json_is_written_into_the_profile_and_the_rest_kept(tmp_path):
    doc = {"device": "NVIDIA H200", "date": "2026-11-30",
           "rows": [{"batch": b, "length": n, "ms": 3.9 + b * n / 2000} for b in (1, 64)
                    for n in (16, 512)]}
    out = tmp_path / "h200_measured.yaml"
    result = CliRunner().invoke(main, ["calibrate", "table", "--table-json", _table(tmp_path, doc),
                                       "--base-profile", BASE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    profile, base = load_profile(str(out)), load_profile(BASE)
    assert profile.name == "h200_measured"
    assert profile.cost_model.table == tuple((b, n, round(3.9 + b * n / 2000, 4))
                                             for b in (1, 64) for n in (16, 512))
    assert "NVIDIA H200" in profile.cost_model.table_source
    assert profile.scheduler == base.scheduler and profile.control == base.control
    assert "# " in out.read_text()  # the base's comments survive


def test_a_bad_table_is_refused_naming_the_cell(tmp_path):
    path = _table(tmp_path, {"rows": [{"batch": 1, "length": 16, "ms": -2}]})
    result = CliRunner().invoke(main, ["calibrate", "table", "--table-json", path, "--base-profile",
                                       BASE, "--out", str(tmp_path / "x.yaml")])
    assert result.exit_code != 0
    assert "cost_model.table[0].ms" in result.output
    assert not (tmp_path / "x.yaml").exists()


def test_table_documents_in_either_form():
    assert rows_from_document([[1, 16, 2.0]], "x") == [(1, 16, 2.0)]
    with pytest.raises(ProfileError, match="rows"):
        rows_from_document({"rows": []}, "x")


def test_the_shipped_h200_measurement_reads():
    rows, source = read_table_json(os.path.join(REPO, "results", "gpu", "h200_minilm_costs.json"))
    assert len(rows) == 20 and "H200" in source
