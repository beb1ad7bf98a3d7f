"""Profile loading and validation: shipped profiles load; every error names the file,
the key and the bad value."""

from __future__ import annotations

import glob
import math
import os

import pytest
import yaml

from scheduler_core.profile_limits import COST_MODES
from scheduler_core.profile import (CostModelConfig, EmulationConfig, HardwareProfile,
                                    ProfileError, SchedulerConfig)

from scheduler_core.profile_parse import profile_from_mapping
from scheduler_core.profile_files import load_profile, profile_path

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SHIPPED = sorted(glob.glob(os.path.join(REPO_ROOT, "model_repository", "*", "profiles", "*.yaml")))
T4 = os.path.join(REPO_ROOT, "model_repository", "emulated_explicit", "profiles", "t4.yaml")


def _valid_doc(name: str = "good") -> dict:
    with open(T4, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    doc["name"] = name
    return doc


def _write(tmp_path, doc, name: str = "good") -> str:
    path = str(tmp_path / f"{name}.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(doc, fh)
    return path


def _assert_names(exc: ProfileError, path: str, key: str, value_repr: str) -> None:
    msg = str(exc)
    assert path in msg, msg
    assert f"'{key}'" in msg, msg
    assert f"(got {value_repr})" in msg, msg


# -- shipped profiles ---------------------------------------------------------------

def test_shipped_profiles_are_found():
    names = {os.path.relpath(p, REPO_ROOT) for p in SHIPPED}
    assert len(SHIPPED) >= 5
    assert os.path.join("model_repository", "emulated_explicit", "profiles", "t4.yaml") in names
    assert os.path.join("model_repository", "minilm_explicit", "profiles", "cpu.yaml") in names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: os.path.relpath(p, REPO_ROOT))
def test_every_shipped_profile_loads(path):
    profile = load_profile(path)
    assert isinstance(profile, HardwareProfile)
    assert profile.name == os.path.splitext(os.path.basename(path))[0]
    assert profile.source == path
    assert isinstance(profile.cost_model, CostModelConfig)
    assert isinstance(profile.emulation, EmulationConfig)
    assert isinstance(profile.scheduler, SchedulerConfig)
    assert profile.emulation.cost_mode in COST_MODES
    s = profile.scheduler
    assert s.min_window_ms <= s.max_window_ms
    assert 1 <= s.max_batch_size <= s.max_queued_requests
    assert all(math.isfinite(v) for v in (profile.cost_model.fixed_ms,
                                          profile.cost_model.per_token_ms,
                                          s.base_window_ms, s.default_sla_ms))


def test_t4_profile_values():
    p = load_profile(T4)
    assert p.device_match == ("T4",)
    assert p.cost_model == CostModelConfig(fixed_ms=1.2, per_sequence_ms=0.02,
                                           per_token_ms=0.0065, per_token_squared_ms=0.0000014)
    assert p.emulation == EmulationConfig(cost_mode="padded", time_scale=1.0)
    assert p.scheduler.max_batch_size == 32
    assert type(p.scheduler.max_batch_size) is int
    assert p.scheduler.max_batch_tokens == 8192
    assert p.scheduler.base_window_ms == 5.0
    assert p.scheduler.min_window_ms == 0.5
    assert p.scheduler.max_window_ms == 20.0
    assert p.scheduler.wait_ms_per_saved_device_ms == 1.0


def test_missing_sections_take_defaults(tmp_path):
    path = _write(tmp_path, {"name": "bare"}, "bare")
    p = load_profile(path)
    assert p.cost_model == CostModelConfig()
    assert p.emulation == EmulationConfig()
    assert p.scheduler == SchedulerConfig()
    assert p.device_match == ()
    assert p.description == ""


def test_integer_accepted_for_float_field_and_converted(tmp_path):
    doc = _valid_doc()
    doc["cost_model"]["fixed_ms"] = 3
    p = load_profile(_write(tmp_path, doc))
    assert p.cost_model.fixed_ms == 3.0
    assert type(p.cost_model.fixed_ms) is float


# -- bad values -----------------------------------------------------------------------

def _mutate(section, key, value):
    def apply(doc):
        if section is None:
            doc[key] = value
        else:
            doc.setdefault(section, {})[key] = value
    return apply


BAD_CASES = [
    # (id, mutation, key named in the error, repr of the bad value, reason fragment)
    ("unknown-top-level-key", _mutate(None, "colour", "blue"), "colour", "'blue'", "unknown key"),
    ("unknown-section-key", _mutate("scheduler", "max_batchsize", 8),
     "scheduler.max_batchsize", "8", "unknown key"),
    ("renamed-queue-bound", _mutate("scheduler", "max_queue_size", 4096),
     "scheduler.max_queue_size", "4096", "was renamed to 'scheduler.max_queued_requests'"),
    ("renamed-to-ms", _mutate("calibration", "cpu_budget_s", 0.5),
     "calibration.cpu_budget_s", "0.5", "was renamed to 'calibration.cpu_budget_ms'"),
    ("int-field-string", _mutate("scheduler", "max_batch_size", "32"),
     "scheduler.max_batch_size", "'32'", "must be an integer"),
    ("int-field-float", _mutate("scheduler", "max_queued_requests", 10.5),
     "scheduler.max_queued_requests", "10.5", "must be an integer"),
    ("int-field-bool", _mutate("scheduler", "max_batch_size", True),
     "scheduler.max_batch_size", "True", "must be an integer"),
    ("float-field-string", _mutate("cost_model", "fixed_ms", "fast"),
     "cost_model.fixed_ms", "'fast'", "must be a number"),
    ("float-field-bool", _mutate("scheduler", "alpha", True),
     "scheduler.alpha", "True", "must be a number"),
    ("float-field-list", _mutate("cost_model", "per_token_ms", [1, 2]),
     "cost_model.per_token_ms", "[1, 2]", "must be a number"),
    ("string-field-number", _mutate("emulation", "cost_mode", 3),
     "emulation.cost_mode", "3", "must be a string"),
    ("int-below-bound", _mutate("scheduler", "max_batch_size", 0),
     "scheduler.max_batch_size", "0", "must be within [1, 4096]"),
    ("int-above-bound", _mutate("scheduler", "max_batch_size", 4097),
     "scheduler.max_batch_size", "4097", "must be within [1, 4096]"),
    ("float-negative", _mutate("cost_model", "per_token_ms", -0.5),
     "cost_model.per_token_ms", "-0.5", "must be within [0.0, 1000.0]"),
    ("time-scale-too-small", _mutate("emulation", "time_scale", 0.001),
     "emulation.time_scale", "0.001", "must be within [0.01, 1000.0]"),
    ("perception-window-too-small", _mutate("scheduler", "perception_window_ms", 5.0),
     "scheduler.perception_window_ms", "5.0", "must be within [10.0, 600000.0]"),
    ("wait-weight-negative", _mutate("scheduler", "wait_ms_per_saved_device_ms", -1.0),
     "scheduler.wait_ms_per_saved_device_ms", "-1.0", "must be within [0.0, 1000000.0]"),
    ("nan", _mutate("scheduler", "base_window_ms", float("nan")),
     "scheduler.base_window_ms", "nan", "must be finite"),
    ("inf", _mutate("cost_model", "fixed_ms", float("inf")),
     "cost_model.fixed_ms", "inf", "must be finite"),
    ("min-window-above-max", lambda d: d["scheduler"].update(min_window_ms=30.0, max_window_ms=20.0),
     "scheduler.min_window_ms", "30.0", "must not exceed scheduler.max_window_ms (20.0)"),
    ("bad-cost-mode", _mutate("emulation", "cost_mode", "gpu"),
     "emulation.cost_mode", "'gpu'", "must be one of ('padded', 'ragged')"),
    ("section-not-mapping", _mutate(None, "scheduler", [1, 2]), "scheduler", "[1, 2]",
     "must be a mapping"),
    ("device-match-not-list", _mutate(None, "device_match", "T4"), "device_match", "'T4'",
     "must be a list of non-empty strings"),
    ("device-match-empty-string", _mutate(None, "device_match", [""]), "device_match", "['']",
     "must be a list of non-empty strings"),
    ("description-not-string", _mutate(None, "description", 7), "description", "7",
     "must be a string"),
]


@pytest.mark.parametrize("mutation,key,value_repr,why", [c[1:] for c in BAD_CASES],
                         ids=[c[0] for c in BAD_CASES])
def test_bad_value_names_file_key_and_value(tmp_path, mutation, key, value_repr, why):
    doc = _valid_doc()
    mutation(doc)
    path = _write(tmp_path, doc)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    _assert_names(info.value, path, key, value_repr)
    assert why in str(info.value)


def test_min_window_equal_to_max_is_fine(tmp_path):
    doc = _valid_doc()
    doc["scheduler"].update(min_window_ms=7.0, max_window_ms=7.0)
    assert load_profile(_write(tmp_path, doc)).scheduler.min_window_ms == 7.0


def test_bounds_are_inclusive(tmp_path):
    doc = _valid_doc()
    doc["scheduler"]["max_batch_size"] = 4096
    doc["emulation"]["time_scale"] = 0.01
    p = load_profile(_write(tmp_path, doc))
    assert p.scheduler.max_batch_size == 4096
    assert p.emulation.time_scale == 0.01


def test_ragged_cost_mode_accepted(tmp_path):
    doc = _valid_doc()
    doc["emulation"]["cost_mode"] = "ragged"
    assert load_profile(_write(tmp_path, doc)).emulation.cost_mode == "ragged"


def test_name_must_match_file_stem(tmp_path):
    doc = _valid_doc("t4")
    path = _write(tmp_path, doc, "t4x")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    _assert_names(info.value, path, "name", "'t4'")
    assert "must match the file name 't4x'" in str(info.value)


@pytest.mark.parametrize("name", [None, "", 5])
def test_name_missing_or_not_a_string(tmp_path, name):
    doc = _valid_doc()
    if name is None:
        del doc["name"]
    else:
        doc["name"] = name
    path = _write(tmp_path, doc)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    _assert_names(info.value, path, "name", repr(name))
    assert "must be a non-empty string" in str(info.value)


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert path in str(info.value)
    assert "file not found" in str(info.value)


def test_invalid_yaml(tmp_path):
    path = str(tmp_path / "broken.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("name: broken\nscheduler: [unclosed\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert path in str(info.value)
    assert "cannot be read as YAML" in str(info.value)


def test_yaml_tags_are_not_executed(tmp_path):
    path = str(tmp_path / "evil.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("name: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert "cannot be read as YAML" in str(info.value)


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_document_must_be_a_mapping(tmp_path, text):
    path = str(tmp_path / "doc.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert path in str(info.value)
    assert "'<document>'" in str(info.value)
    assert "must be a YAML mapping" in str(info.value)


def test_directory_instead_of_file(tmp_path):
    path = str(tmp_path / "adir.yaml")
    os.mkdir(path)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert path in str(info.value)


def test_profile_from_mapping_uses_source_in_errors():
    doc = _valid_doc()
    doc["scheduler"]["alpha"] = 9.0
    with pytest.raises(ProfileError) as info:
        profile_from_mapping(doc, source="inline-test")
    _assert_names(info.value, "inline-test", "scheduler.alpha", "9.0")


def test_profile_error_is_a_value_error():
    assert issubclass(ProfileError, ValueError)


def test_profiles_are_frozen():
    p = load_profile(T4)
    with pytest.raises(AttributeError):
        p.scheduler.max_batch_size = 1  # type: ignore[misc]


def test_non_utf8_file_is_a_profile_error(tmp_path):
    path = str(tmp_path / "latin.yaml")
    with open(path, "wb") as fh:
        fh.write(b"name: latin\ndescription: \"caf\xe9\"\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert path in str(info.value)


def test_huge_integer_for_float_field_is_a_profile_error(tmp_path):
    path = str(tmp_path / "huge.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("name: huge\ncost_model:\n  fixed_ms: 1" + "0" * 400 + "\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert "cost_model.fixed_ms" in str(info.value)


# -- profile_path ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["t4", "a100", "cpu_fp32", "my-gpu-2"])
def test_profile_path_accepts_plain_names(tmp_path, name):
    assert profile_path(str(tmp_path), name) == os.path.join(str(tmp_path), f"{name}.yaml")


def test_profile_path_result_loads():
    d = os.path.dirname(T4)
    assert load_profile(profile_path(d, "t4")).name == "t4"


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", "/etc/passwd", "a\\b",
                                  "t4.yaml", "a b", "x\0y"])
def test_profile_path_refuses_names_that_leave_the_folder(tmp_path, name):
    with pytest.raises(ProfileError) as info:
        profile_path(str(tmp_path), name)
    assert repr(name) in str(info.value)
    assert "letters, digits" in str(info.value)


def test_with_emulation_overrides_time_scale_and_cost_mode():
    from scheduler_core.profile_parse import with_emulation

    base = load_profile(T4)
    slowed = with_emulation(base, {"time_scale": 10.0, "cost_mode": "ragged"}, source="params")
    assert slowed.emulation.time_scale == 10.0 and slowed.emulation.cost_mode == "ragged"
    assert slowed.cost_model == base.cost_model and base.emulation.time_scale == 1.0
    assert with_emulation(base, {}, source="params") is base
    with pytest.raises(ProfileError, match="params.*emulation.cost_mode.*'diagonal'"):
        with_emulation(base, {"cost_mode": "diagonal"}, source="params")
    with pytest.raises(ProfileError, match="emulation.time_scale"):
        with_emulation(base, {"time_scale": 0.0}, source="params")


# -- profile folders and selection -------------------------------------------------------------

EMULATED_DIR = os.path.dirname(T4)
MINILM_DIR = os.path.join(REPO_ROOT, "model_repository", "minilm_explicit", "profiles")


@pytest.mark.parametrize("folder,extra", [(EMULATED_DIR, {"h200_minilm"}), (MINILM_DIR, set())])
def test_each_model_ships_every_hardware_class(folder, extra):
    from scheduler_core.profile_files import load_profile_dir

    assert set(load_profile_dir(folder)) == {"cpu", "gpu", "t4", "a100", "h100", "h200", "cdna",
                                             "gaudi"} | extra


@pytest.mark.parametrize("device,expected", [
    ("Tesla T4", "t4"), ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200")])
def test_profile_chosen_by_nvml_device_name(device, expected):
    from scheduler_core.profile_files import load_profile_dir, select_profile

    name, why = select_profile(load_profile_dir(MINILM_DIR), device)
    assert name == expected
    assert why == f"NVML device '{device}'"


def test_profile_selection_order_env_then_config_then_device_then_default():
    from scheduler_core.profile_files import load_profile_dir, select_profile

    profiles = load_profile_dir(EMULATED_DIR)
    assert select_profile(profiles, "Tesla T4", config_choice="a100", env_choice="h100") == (
        "h100", "environment variable")
    assert select_profile(profiles, "Tesla T4", config_choice="a100") == (
        "a100", "model config parameter hardware_profile")
    assert select_profile(profiles, None) == ("cpu", "no NVML device: default")
    assert select_profile(profiles, "NVIDIA GeForce RTX 4090") == (
        "gpu", "no profile matches NVML device 'NVIDIA GeForce RTX 4090': generic gpu profile")


@pytest.mark.parametrize("folder", [EMULATED_DIR, MINILM_DIR])
@pytest.mark.parametrize("device", ["NVIDIA L4", "NVIDIA A10G", "NVIDIA L40S"])
def test_unmatched_gpu_gets_the_generic_gpu_profile_and_a_why_naming_it(folder, device):
    from scheduler_core.profile_files import load_profile_dir, select_profile

    profiles = load_profile_dir(folder)
    assert select_profile(profiles, device) == (
        "gpu", f"no profile matches NVML device '{device}': generic gpu profile")
    # the model's default only applies where there is no GPU at all
    assert select_profile(profiles, device, default="t4")[0] == "gpu"
    assert select_profile(profiles, None, default="t4") == ("t4", "no NVML device: default")
    assert select_profile(profiles, "", default="cpu") == ("cpu", "no NVML device: default")


def test_unmatched_gpu_without_a_gpu_profile_falls_back_to_the_default(tmp_path):
    from scheduler_core.profile_files import load_profile_dir, select_profile

    for name in ("cpu", "t4"):
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\n")
    profiles = load_profile_dir(str(tmp_path))
    assert select_profile(profiles, "NVIDIA L4") == (
        "cpu", "no profile matches NVML device 'NVIDIA L4': default")
    assert select_profile(profiles, "NVIDIA L4", gpu_fallback="t4")[0] == "t4"
    assert select_profile(profiles, "NVIDIA L4", gpu_fallback="")[0] == "cpu"


@pytest.mark.parametrize("folder", [EMULATED_DIR, MINILM_DIR])
def test_generic_gpu_profile_matches_no_device_and_says_it_is_a_fallback(folder):
    from scheduler_core.profile_files import load_profile_dir

    gpu = load_profile_dir(folder)["gpu"]
    assert gpu.device_match == ()
    assert "fallback" in gpu.description and "explicit-batching calibrate" in gpu.description


@pytest.mark.parametrize("folder", [EMULATED_DIR, MINILM_DIR])
@pytest.mark.parametrize("name", ["cdna", "gaudi"])
def test_amd_and_gaudi_profiles_say_how_they_are_selected(folder, name):
    from scheduler_core.profile_files import load_profile_dir

    description = load_profile_dir(folder)[name].description
    assert "NVML does not see" in description
    assert f"hardware_profile={name}" in description
    assert f"EXPLICIT_BATCHING_PROFILE={name}" in description


def test_longest_device_match_wins(tmp_path):
    from scheduler_core.profile_files import load_profile_dir, select_profile

    for name, match in (("h100", '["H100"]'), ("h100nvl", '["H100 NVL"]')):
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ndevice_match: {match}\n")
    assert select_profile(load_profile_dir(str(tmp_path)), "NVIDIA H100 NVL")[0] == "h100nvl"
    assert select_profile(load_profile_dir(str(tmp_path)), "NVIDIA H100 PCIe")[0] == "h100"


def test_unknown_profile_named_by_override_is_an_error():
    from scheduler_core.profile_files import load_profile_dir, select_profile

    profiles = load_profile_dir(EMULATED_DIR)
    with pytest.raises(ProfileError, match="environment variable names profile 'v100'"):
        select_profile(profiles, None, env_choice="v100")
    with pytest.raises(ProfileError, match="hardware_profile names profile 'x'"):
        select_profile(profiles, None, config_choice="x")


def test_one_bad_file_fails_the_whole_folder(tmp_path):
    from scheduler_core.profile_files import load_profile_dir

    (tmp_path / "good.yaml").write_text("name: good\n")
    (tmp_path / "bad.yaml").write_text("name: bad\nscheduler:\n  alpha: -1\n")
    with pytest.raises(ProfileError, match=r"bad\.yaml.*scheduler\.alpha.*-1"):
        load_profile_dir(str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProfileError, match="holds no"):
        load_profile_dir(str(empty))
    with pytest.raises(ProfileError, match="cannot be listed"):
        load_profile_dir(str(tmp_path / "missing"))


def test_dotted_overrides_are_typed_validated_and_keep_the_source():
    from scheduler_core.profile_parse import parse_override, with_overrides

    base = load_profile(T4)
    assert parse_override("scheduler.alpha", "0.3", "params") == ("scheduler", "alpha", 0.3)
    assert parse_override("control.enabled", "False", "params") == ("control", "enabled", False)
    assert parse_override("scheduler.max_batch_size", "8", "p") == ("scheduler", "max_batch_size", 8)
    tuned = with_overrides(base, {"scheduler": {"alpha": 0.3, "beta": 0.2},
                                  "control": {"enabled": False}}, source="params")
    assert (tuned.scheduler.alpha, tuned.scheduler.beta, tuned.control.enabled) == (0.3, 0.2, False)
    assert tuned.source == base.source and tuned.cost_model == base.cost_model
    with pytest.raises(ProfileError, match="params.*scheduler.alpha.*'fast'"):
        parse_override("scheduler.alpha", "fast", "params")
    with pytest.raises(ProfileError, match="params.*scheduler.nope"):
        parse_override("scheduler.nope", "1", "params")
    with pytest.raises(ProfileError, match="params.*control.enabled"):
        parse_override("control.enabled", "maybe", "params")
    with pytest.raises(ProfileError, match="params.*scheduler.alpha.*9"):
        with_overrides(base, {"scheduler": {"alpha": 9.0}}, source="params")
    with pytest.raises(ProfileError, match="params: key 'calibration.budget_s': was renamed "
                                           "to 'calibration.budget_ms'"):
        parse_override("calibration.budget_s", "1", "params")
