"""The one profile editor, without a server: edits keep every other line and comment, a
result that would not load is never written."""

from __future__ import annotations

import os

import pytest
import yaml

from operator_tools.profile_editor import edit_profile_text, write_profile
from scheduler_core.profile import ProfileError
from scheduler_core.profile_files import load_profile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
T4 = os.path.join(REPO_ROOT, "model_repository", "emulated_explicit", "profiles", "t4.yaml")


def test_existing_control_section_is_edited_in_place_with_inline_comments(tmp_path):
    base = tmp_path / "edge.yaml"
    base.write_text(open(T4).read().replace("name: t4", "name: edge")
                    + "control:\n  enabled: true\n  queue_depth_safe: 5.0  # design table\n\n"
                      "  # weights\n  weight_p99_cv: 0.2\n")
    out = tmp_path / "edge2.yaml"
    write_profile(str(base), str(out), {"control": {"queue_depth_safe": 3.0,
                                                        "p99_cv_danger": 0.45}})
    text = out.read_text()
    assert "  queue_depth_safe: 3.0  # design table" in text
    assert "  # weights" in text
    loaded = load_profile(str(out))
    assert loaded.control.queue_depth_safe == 3.0 and loaded.control.p99_cv_danger == 0.45
    assert loaded.control.weight_p99_cv == 0.2 and loaded.name == "edge2"


def test_an_invalid_profile_is_never_written(tmp_path):
    out = tmp_path / "bad.yaml"
    with pytest.raises(ProfileError, match="utilization_safe"):
        write_profile(T4, str(out), {"control": {"utilization_safe": 0.9,
                                                     "utilization_danger": 0.5}})
    assert not out.exists()


def test_a_top_level_block_is_replaced_whole_and_a_header_goes_first(tmp_path):
    text = ("# the original comment\nname: edge\ndevice_match:\n  - Tesla T4\n  - T4\n"
            "scheduler:\n  alpha: 0.2  # kept\n")
    out = edit_profile_text(text, {"scheduler": {"alpha": 0.4}}, top_level={"device_match": []},
                            header="tuned by a test\n\nsecond line")
    assert out.startswith("# tuned by a test\n#\n# second line\n# the original comment\n")
    assert "device_match: []\n" in out and "Tesla T4" not in out
    assert "  alpha: 0.4  # kept" in out
    assert yaml.safe_load(out) == {"name": "edge", "device_match": [],
                                   "scheduler": {"alpha": 0.4}}


def test_a_written_copy_is_named_after_its_file_and_loads(tmp_path):
    out = tmp_path / "t4_tuned.yaml"
    profile = write_profile(T4, str(out), {"scheduler": {"alpha": 0.35}},
                            top_level={"device_match": []}, header="tuned")
    assert profile.name == "t4_tuned" and profile.device_match == ()
    assert load_profile(str(out)).scheduler.alpha == 0.35
    assert out.read_text().startswith("# tuned\n")


def test_an_inline_section_is_edited_in_its_own_flow_style():
    out = edit_profile_text("name: x\nscheduler: {alpha: 0.2, beta: 0.1}  # inline\n",
                            {"scheduler": {"alpha": 0.3}})
    assert out == "name: x\nscheduler: {alpha: 0.3, beta: 0.1}  # inline\n"


def test_comments_everywhere_survive_an_edit_that_adds_sections_and_keys(tmp_path):
    """A round trip through the editor keeps every comment of a shipped profile (head,
    section, inline, trailing), adds keys and a section with its comment, and loads."""
    shipped = open(T4, encoding="utf-8").read()
    assert "\n  alpha: " in shipped and "\n  max_batch_size: " in shipped
    text = (shipped.replace("\n  alpha: ", "\n  # the elastic window's gain\n  alpha: ")
            .replace("\n  max_batch_size: 32", "\n  max_batch_size: 32  # kept inline")
            + "# a trailing note\n")
    comments = [line.strip() for line in text.splitlines() if line.strip().startswith("#")]
    assert len(comments) > 3
    base = tmp_path / "t4.yaml"
    base.write_text(text)
    out = tmp_path / "t4_tuned.yaml"
    profile = write_profile(str(base), str(out),
                            {"scheduler": {"alpha": 0.31, "max_queued_requests": 512},
                             "calibration": {"budget_ms": 500.0}},
                            comment="tuned by the test")
    text = out.read_text()
    for line in comments + ["# tuned by the test", "  max_batch_size: 32  # kept inline"]:
        assert line in text, line
    assert (profile.scheduler.alpha, profile.scheduler.max_queued_requests,
            profile.calibration.budget_ms) == (0.31, 512, 500.0)


def test_text_that_is_not_a_mapping_is_refused():
    with pytest.raises(ProfileError, match="must be a YAML mapping"):
        edit_profile_text("- a\n- b\n", {"scheduler": {"alpha": 0.3}})
