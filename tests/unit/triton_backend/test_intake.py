"""The intake config helpers: each mode's config text from the shipped config, and back."""

from __future__ import annotations

import os

from tests.conftest import SHIPPED_REPOSITORY
from triton_backend.intake import INTAKES, gather_config, hold_config, release_config


def _shipped(model: str = "emulated_explicit") -> str:
    with open(os.path.join(SHIPPED_REPOSITORY, model, "config.pbtxt")) as fh:
        return fh.read()


def _intake(config: str) -> list[str]:
    return [mode for mode in INTAKES
            if f'key: "intake" value: {{ string_value: "{mode}" }}' in config]


def test_gather_config_puts_triton_batcher_in_front_of_the_shipped_models():
    for model in ("emulated_explicit", "minilm_explicit"):
        config = gather_config(_shipped(model))
        assert _intake(config) == ["gather"]
        assert "max_batch_size: 512\n" in config
        assert "allow_ragged_batch: true" in config
        assert config.count("dynamic_batching {") == 1


def test_release_config_takes_the_batcher_away():
    config = release_config(_shipped())
    assert _intake(config) == ["release"]
    assert "dynamic_batching" not in config
    assert "max_batch_size: 1\n" in config


def test_hold_and_gather_configs_keep_one_batcher_and_one_intake():
    for make, mode in ((hold_config, "hold"), (gather_config, "gather")):
        for start in (_shipped(), release_config(_shipped())):
            config = make(start, max_hand_over=4, priority_levels=2)
            assert _intake(config) == [mode]
            assert config.count("dynamic_batching {") == 1
            assert "priority_levels: 2 default_priority_level: 2" in config
            assert "max_batch_size: 4\n" in config
            assert config.count("allow_ragged_batch") == 1
