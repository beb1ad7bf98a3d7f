"""What a model chooses and checks at load, without a server: intake, queue prefetch,
profile and its parameter overrides, the inner model, the executor."""

from __future__ import annotations

import os

import pytest

from triton_backend.model_loading import (LoadRefused, check_embedding_width,
                                          check_inner_model, choose_intake,
                                          inner_contract, instance_index,
                                          load_profile, make_executor, queue_prefetches)
from triton_backend.model_settings import ModelSettings
from triton_backend.placement import placement

REPO = os.path.join(os.path.dirname(__file__), "..", "..", "..", "model_repository")
ARGS = {"model_name": "emulated_explicit",
        "model_repository": os.path.join(REPO, "emulated_explicit")}
BATCHED = {"dynamic_batching": {}, "max_batch_size": 128}


def settings(**params: str) -> ModelSettings:
    return ModelSettings.from_parameters("emulated_explicit", params)


def test_the_intake_defaults_to_hold_behind_a_batcher_and_release_without_one():
    assert choose_intake(BATCHED, settings(), "m") == "hold"
    assert choose_intake({"max_batch_size": 1}, settings(), "m") == "release"
    assert choose_intake(BATCHED, settings(intake="gather"), "m") == "gather"


def test_hold_without_a_batcher_in_front_refuses_naming_the_fix():
    with pytest.raises(LoadRefused, match="model 'm': intake 'hold' needs dynamic_batching.*"
                                          "set parameter intake to 'release'"):
        choose_intake({"max_batch_size": 1}, settings(intake="hold"), "m")


@pytest.mark.parametrize("batcher, prefetches", [
    ({}, True),
    ({"default_queue_policy": {"max_queue_size": 128}}, False),
    ({"default_queue_policy": {"allow_timeout_override": True}}, False),
    ({"default_queue_policy": {"default_timeout_microseconds": "1000"}}, False),
    ({"priority_levels": 2}, False),
])
def test_triton_prefetches_only_without_a_queue_policy_or_priorities(batcher, prefetches):
    assert queue_prefetches({"dynamic_batching": batcher}) is prefetches


def test_the_profile_named_by_the_parameter_loads_with_its_overrides():
    profile, why = load_profile(ARGS, settings(hardware_profile="t4", time_scale="8",
                                               **{"scheduler.alpha": "0.3"}),
                                "t4", None, warn=print)
    assert profile.name == "t4" and "hardware_profile" in why
    assert (profile.emulation.time_scale, profile.scheduler.alpha) == (8.0, 0.3)


def test_a_misspelt_profile_override_refuses_naming_the_key():
    with pytest.raises(LoadRefused, match="control.infeasible_polcy.*not a profile key"):
        load_profile(ARGS, settings(hardware_profile="t4",
                                    **{"control.infeasible_polcy": "serve_late"}),
                     "t4", None, warn=print)


def test_a_profile_dir_outside_the_repository_refuses():
    with pytest.raises(LoadRefused, match="profile_dir='../..' leaves the model repository"):
        load_profile(ARGS, settings(profile_dir="../.."), "t4", None, warn=print)


def test_an_inner_model_with_no_folder_refuses_unless_the_check_is_off():
    with pytest.raises(LoadRefused, match="inner_model='no_such_model': no model folder"):
        check_inner_model(ARGS, settings(inner_model="no_such_model"))
    check_inner_model(ARGS, settings(inner_model="no_such_model", inner_model_check="off"))
    check_inner_model(ARGS, settings(inner_model="emulated_device"))


def test_no_executor_refuses_naming_the_choices():
    where = placement("CPU", "0", lambda: False, "", None)
    with pytest.raises(LoadRefused, match="'executor' must be one of .*'minilm'.*'emulated'"):
        make_executor(ARGS, settings(), where, warn=print)


def test_the_random_bert_executor_answers_1024_floats_a_request():
    """bert_large_random (one layer here, on the CPU): real compute, timed at load, unit
    rows of BERT-large's width."""
    import numpy as np

    where = placement("CPU", "0", lambda: False, "", None)
    executor, profile = make_executor(ARGS, settings(executor="bert_large_random",
                                                     bert_layers="1"), where, warn=print)
    assert profile is None and executor.measured_at_load and executor.output_dim == 1024
    assert len(executor.model.encoder.layer) == 1
    out = executor.run([np.arange(1, 9), np.arange(3, 40)])
    assert out.shape == (2, 1024) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_shape_buckets_change_no_real_row():
    """Padding a batch to its bucket shape (longer, more rows) leaves each request's
    embedding as it was: padding is masked and the added rows are dropped."""
    import numpy as np

    where = placement("CPU", "0", lambda: False, "", None)
    plain, _ = make_executor(ARGS, settings(executor="bert_large_random", bert_layers="1"),
                             where, warn=print)
    bucketed, _ = make_executor(ARGS, settings(executor="bert_large_random", bert_layers="1",
                                               shape_bucket_tokens="64"), where, warn=print)
    assert bucketed.shape_bucket_tokens == 64
    seqs = [np.arange(1, 20), np.arange(5, 70), np.arange(3, 9)]
    assert np.allclose(plain.run(seqs), bucketed.run(seqs), atol=1e-5)


@pytest.mark.parametrize("dims,refused", [([384], False), ([1024], True), ([-1], True)])
def test_an_embedding_width_other_than_the_executors_refuses_naming_both(dims, refused):
    from triton_backend.executors import EmulatedDevice

    config = {"output": [{"name": "EMBEDDING", "data_type": "TYPE_FP32", "dims": dims}]}
    executor = EmulatedDevice.__new__(EmulatedDevice)  # only its width is read
    if not refused:
        check_embedding_width("m", config, executor)
        return
    with pytest.raises(LoadRefused, match=r"model 'm': output EMBEDDING has dims "
                                          rf"\[{dims[0]}\], .* answers 384 floats"):
        check_embedding_width("m", config, executor)


def test_an_instance_knows_its_index_in_the_group():
    assert instance_index({"model_instance_name": "pair_hold_0_1"}) == 1
    assert instance_index({"model_instance_name": "m_0_0"}) == 0
    assert instance_index({}) == 0


# The front's own config (the JSON Triton hands initialize) and its inner model's.
FRONT = {"input": [{"name": "TOKENS", "data_type": "TYPE_INT32", "dims": [-1]}],
         "output": [{"name": "SCORE", "data_type": "TYPE_FP32", "dims": [1]}]}
# Valid text the former regular expressions read as "no inputs": repeated ``input {}``
# fields, ``dims: -1``, fields in another order, comments.
REPEATED_FORM = """# scorer: written the other valid way
output { dims: 1 data_type: TYPE_FP32 name: "SCORE" }
input {  # the sequence
  dims: -1
  name: "TOKENS"
  data_type: TYPE_INT32
}
max_batch_size: {mbs}
backend: "python"
"""


def _front_with_inner(tmp_path, inner_config: str) -> dict:
    """A repository holding a front model and its inner model ``scorer``; the front's
    ``initialize`` args."""
    (tmp_path / "front").mkdir()
    (tmp_path / "scorer").mkdir()
    (tmp_path / "scorer" / "config.pbtxt").write_text(inner_config)
    return {"model_name": "front", "model_repository": str(tmp_path / "front")}


def _inner_settings() -> ModelSettings:
    return ModelSettings.from_parameters("front", {"inner_model": "scorer",
                                                   "sequence_input": "TOKENS"})


@pytest.mark.parametrize("inner_config", [
    REPEATED_FORM.replace("{mbs}", "32"),
    'name: "scorer"\nbackend: "onnxruntime"\n',  # auto-completed by Triton at load
])
def test_a_valid_inner_config_the_regular_expressions_refused_loads(tmp_path, inner_config):
    args = _front_with_inner(tmp_path, inner_config)
    contract = inner_contract(args, FRONT, _inner_settings(), max_batch_size=32)
    assert contract.sequence.name == "TOKENS" and contract.output_names == ["SCORE"]


def test_an_inner_max_batch_size_below_the_batches_sent_refuses_with_both_numbers(tmp_path):
    args = _front_with_inner(tmp_path, REPEATED_FORM.replace("{mbs}", "8"))
    with pytest.raises(LoadRefused, match=r"model 'front': inner_model 'scorer'.*has "
                       r"max_batch_size 8, but this model sends it batches of up to 32 "
                       r"\(scheduler.max_batch_size\)"):
        inner_contract(args, FRONT, _inner_settings(), max_batch_size=32)
    inner_contract(args, FRONT, _inner_settings(), max_batch_size=8)  # fits
