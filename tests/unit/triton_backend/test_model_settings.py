"""The model-config parameters as one validated settings object, without a server."""

from __future__ import annotations

import pytest

from triton_backend.model_settings import (BACKEND_KEYS, KNOWN_KEYS, RESPONDER_THREADS,
                                           ModelSettings, SettingsError, parameters_of)


def settings(**params: str) -> ModelSettings:
    return ModelSettings.from_parameters("m", params)


def test_no_parameters_give_the_defaults():
    s = settings()
    assert (s.executor, s.intake, s.sidecar, s.responder_threads) == (
        "", "", "thread", RESPONDER_THREADS)
    assert s.profile_overrides == {}


def test_values_are_typed_and_an_empty_string_means_unset():
    s = settings(executor="emulated", intra_op_threads="3", pad_value="1.5", intake="",
                 wake_after_ms="2.5")
    assert (s.executor, s.intra_op_threads, s.pad_value, s.intake, s.wake_after_ms) == (
        "emulated", 3, 1.5, "", 2.5)


def test_an_unknown_key_refuses_naming_the_model_the_key_and_the_nearest_known_key():
    with pytest.raises(SettingsError, match=r"model 'm': unknown parameter 'intak' "
                                            r"\(value 'hold'\); nearest known key: 'intake'"):
        settings(intak="hold")


def test_an_unknown_key_without_a_near_one_lists_the_known_keys():
    with pytest.raises(SettingsError, match="Known: .*responder_threads") as info:
        settings(zzzz="1")
    assert "nearest" not in str(info.value)


@pytest.mark.parametrize("key, value, why", [
    ("executor", "gpu",
     r"must be one of \('minilm', 'bert_large_random', 'emulated'\), got 'gpu'"),
    ("bert_layers", "0", r"must be in \[1, 48\], got 0"),
    ("shape_bucket_tokens", "1024", r"must be in \[0, 512\], got 1024"),
    ("intake", "batch", r"must be one of \('gather', 'release', 'hold'\), got 'batch'"),
    ("inner_model_check", "maybe", "must be one of"),
    ("responder_threads", "four", "must be an integer, got 'four'"),
    ("responder_threads", "0", r"must be in \[1, 64\], got 0"),
    ("wake_after_ms", "-1", r"must be in \[0, 10000\], got -1.0"),
    ("pad_value", "x", "must be a number, got 'x'"),
    ("sidecar", "socket", r"must be one of \('thread', 'off', 'file:PATH'\), got 'socket'"),
])
def test_a_bad_value_refuses_naming_the_key_and_the_value(key, value, why):
    with pytest.raises(SettingsError, match=f"model 'm': parameter '{key}' {why}"):
        settings(**{key: value})


@pytest.mark.parametrize("old, new", [
    ("gather_grace_us", "gather_grace_ms"),
    ("wake_after_us", "wake_after_ms"),
    ("scheduler.max_queue_size", "scheduler.max_queued_requests"),
    ("calibration.budget_s", "calibration.budget_ms"),
    ("calibration.cpu_budget_s", "calibration.cpu_budget_ms"),
])
def test_a_renamed_parameter_refuses_naming_the_new_name(old, new):
    with pytest.raises(SettingsError, match=f"model 'm': parameter '{old}' was renamed to "
                                            f"'{new}'"):
        settings(**{old: "1"})
    settings(**{new: "1"})  # the new name loads


def test_dotted_keys_and_aliases_become_profile_overrides():
    s = settings(**{"time_scale": "8", "cost_mode": "ragged", "scheduler.alpha": "0.3",
                    "control.enabled": ""})
    assert s.profile_overrides == {"emulation.time_scale": "8", "emulation.cost_mode": "ragged",
                                   "scheduler.alpha": "0.3"}


def test_the_python_backends_own_keys_are_known_and_left_to_it():
    assert settings(**{key: "x" for key in BACKEND_KEYS}) == settings()
    assert set(BACKEND_KEYS) <= set(KNOWN_KEYS)


def test_a_sidecar_file_is_a_valid_mode():
    assert settings(sidecar="file:/tmp/samples.json").sidecar == "file:/tmp/samples.json"


def test_the_settings_are_frozen():
    with pytest.raises(AttributeError):
        settings().intake = "hold"  # type: ignore[misc]


def test_parameters_of_reads_the_config_triton_hands_initialize():
    config = {"parameters": {"intake": {"string_value": "hold"}, "x.y": {}}}
    assert parameters_of(config) == {"intake": "hold", "x.y": ""}
    assert ModelSettings.from_model_config("m", config).intake == "hold"
