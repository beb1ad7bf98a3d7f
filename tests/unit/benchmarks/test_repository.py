"""The benchmarks' repository builder, without a server: a copy named, edited as
protobuf and given parameters, with no bytecode caches."""

from __future__ import annotations

from benchmarks.repository import copy_model, edit_model, set_max_batch_size
from server_ops.intake_config import hold_config, parse, release_config


def _config(folder: str):
    with open(f"{folder}/config.pbtxt") as fh:
        return parse(fh.read())


def test_a_copy_is_renamed_edited_and_given_parameters(tmp_path):
    folder = copy_model("emulated_explicit", str(tmp_path), "x_explicit",
                        text_writer=release_config, edit=set_max_batch_size(1),
                        params={"time_scale": "10", "profile_dir": "x_explicit/profiles"})
    config = _config(folder)
    assert config.name == "x_explicit" and config.max_batch_size == 1
    assert config.parameters["intake"].string_value == "release"
    assert config.parameters["time_scale"].string_value == "10"
    assert not config.HasField("dynamic_batching")
    assert (tmp_path / "x_explicit" / "profiles" / "t4.yaml").exists()
    assert not list(tmp_path.rglob("__pycache__"))


def test_a_parameter_set_twice_holds_the_last_value(tmp_path):
    folder = copy_model("emulated_native", str(tmp_path), params={"time_scale": "5"})
    edit_model(folder, params={"time_scale": "8"}, text_writer=hold_config)
    config = _config(folder)
    assert config.name == "emulated_native"
    assert config.parameters["time_scale"].string_value == "8"
    assert config.parameters["intake"].string_value == "hold"  # the writer ran too
