"""The intake config writers: each mode's config from the shipped config, and back, read
back as Triton's protobuf."""

from __future__ import annotations

import os

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.conftest import SHIPPED_REPOSITORY
from triton_backend.intake import DEFAULT_INTAKE, INTAKES
from server_ops.intake_config import (HOLD_MAX_HAND_OVER, HOLD_MAX_QUEUE_SIZE, gather_config,
                                          gather_config_json, hold_config, intake_of, parse,
                                          release_config)

SHIPPED_EXPLICIT = ("emulated_explicit", "minilm_explicit")


def _shipped(model: str = "emulated_explicit") -> str:
    with open(os.path.join(SHIPPED_REPOSITORY, model, "config.pbtxt")) as fh:
        return fh.read()


def _ragged(model: mc.ModelConfig) -> dict[str, bool]:
    return {t.name: t.allow_ragged_batch for t in model.input}


@pytest.mark.parametrize("model", SHIPPED_EXPLICIT)
def test_the_shipped_explicit_models_run_the_default_intake_behind_a_prefetching_queue(model):
    """What the writer makes is what ships: hold, delay 0, ragged INPUT_IDS, the hand-over
    size chosen by measurement, and no queue policy or priority levels (either would stop
    Triton's queue from prefetching: the lost wake-up of docs/platform.md)."""
    config = parse(_shipped(model))
    assert DEFAULT_INTAKE == "hold" and intake_of(config) == "hold"
    assert config.max_batch_size == HOLD_MAX_HAND_OVER
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    assert not config.dynamic_batching.HasField("default_queue_policy")
    assert config.dynamic_batching.priority_levels == 0
    assert HOLD_MAX_QUEUE_SIZE == 0
    assert _ragged(config) == {"INPUT_IDS": True, "SLA_MS": False}
    assert parse(hold_config(_shipped(model))) == config


def test_hold_config_without_a_bound_writes_no_queue_policy():
    config = parse(hold_config(_shipped(), max_queue_size=64))
    assert config.dynamic_batching.default_queue_policy.max_queue_size == 64
    unbounded = parse(hold_config(_shipped(), max_queue_size=0))
    assert not unbounded.dynamic_batching.HasField("default_queue_policy")


@pytest.mark.parametrize("model", SHIPPED_EXPLICIT)
def test_gather_config_puts_an_unbounded_batcher_in_front(model):
    config = parse(gather_config(_shipped(model)))
    assert intake_of(config) == "gather"
    assert config.max_batch_size == 512
    assert _ragged(config)["INPUT_IDS"]
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    assert not config.dynamic_batching.HasField("default_queue_policy")


def test_release_config_takes_the_batcher_away():
    config = parse(release_config(_shipped()))
    assert intake_of(config) == "release"
    assert not config.HasField("dynamic_batching")
    assert config.max_batch_size == 1
    assert not any(_ragged(config).values())


@pytest.mark.parametrize("make, mode", [(hold_config, "hold"), (gather_config, "gather")])
def test_hold_and_gather_configs_keep_one_batcher_and_one_intake(make, mode):
    for start in (_shipped(), release_config(_shipped())):
        text = make(start, max_hand_over=4, priority_levels=2)
        config = parse(text)
        assert intake_of(config) == mode
        assert text.count("dynamic_batching {") == 1
        assert text.count('key: "intake"') == 1
        assert config.dynamic_batching.priority_levels == 2
        assert config.dynamic_batching.default_priority_level == 2
        assert config.max_batch_size == 4


def test_every_mode_keeps_the_rest_of_the_config_and_its_leading_comments():
    shipped = _shipped()
    for make in (hold_config, gather_config, release_config):
        text = make(shipped)
        assert text.startswith(shipped.split("\n", 1)[0])
        config, original = parse(text), parse(shipped)
        assert config.name == original.name and config.backend == original.backend
        assert [t.name for t in config.input] == [t.name for t in original.input]
        assert config.parameters["executor"] == original.parameters["executor"]
    assert {intake_of(parse(m(shipped))) for m in (hold_config, gather_config,
                                                    release_config)} == set(INTAKES)


def test_text_that_is_not_a_model_config_is_refused():
    with pytest.raises(Exception, match="max_batch_sise"):
        hold_config('name: "x"\nmax_batch_sise: 4\n')


def test_the_json_form_switches_to_gather_as_the_text_form_does():
    text = _shipped()
    # Triton's JSON form: proto field names, int64 as strings, enums by name.
    as_triton_serves_it = json_format.MessageToDict(parse(text),
                                                    preserving_proto_field_name=True)
    switched = gather_config_json(as_triton_serves_it)
    assert json_format.ParseDict(switched, mc.ModelConfig()) == parse(gather_config(text))
    assert switched["parameters"]["intake"] == {"string_value": "gather"}
    assert "default_queue_policy" not in switched["dynamic_batching"]


def test_a_config_served_back_with_a_preferred_size_above_the_hand_over_still_loads():
    # Triton's auto-complete serves the shipped hold config back with
    # preferred_batch_size [1024]; gather's hand-over is 512, and Triton refuses a
    # preferred size above max_batch_size ("failed to poll from model repository").
    served = json_format.MessageToDict(parse(_shipped()), preserving_proto_field_name=True)
    served["dynamic_batching"]["preferred_batch_size"] = [64, HOLD_MAX_HAND_OVER]
    switched = gather_config_json(served)
    assert int(switched["max_batch_size"]) < HOLD_MAX_HAND_OVER
    assert [int(s) for s in switched["dynamic_batching"]["preferred_batch_size"]] == [64]
