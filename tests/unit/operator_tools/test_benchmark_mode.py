"""Benchmark mode: the explicit model reloaded with control.infeasible_policy=serve_late for a
load test past capacity, its original config loaded back after (fake model control)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from operator_tools import benchmark_mode as bm
from operator_tools.live import LoadRefused

CONFIG = {"name": "emulated_explicit", "parameters": {
    "executor": {"string_value": "emulated"}, "time_scale": {"string_value": "10"}}}


class FakeControl:
    def __init__(self, config=CONFIG, refuse=(), closed=None):
        self._config = json.loads(json.dumps(config))
        self.loads: list[dict] = []
        self.refuse = set(refuse)  # load numbers (1-based) the server refuses
        self.closed = False

    def config(self):
        return json.loads(json.dumps(self._config))

    def load(self, config):
        if len(self.loads) + 1 in self.refuse:
            self.loads.append(None)
            raise LoadRefused("[400] explicit model load / unload is not allowed")
        self.loads.append(config)

    def close(self):
        self.closed = True


def test_benchmark_config_adds_serve_late_and_keeps_the_rest():
    changed = bm.benchmark_config(CONFIG)
    assert changed["parameters"]["control.infeasible_policy"] == {"string_value": "serve_late"}
    assert changed["parameters"]["time_scale"] == {"string_value": "10"}
    assert "control.infeasible_policy" not in CONFIG["parameters"]  # a copy
    assert bm.benchmark_config(changed) is None  # already serves late


HELD = {**CONFIG, "dynamic_batching": {"max_queue_delay_microseconds": "0", "default_queue_policy": {
    "timeout_action": "REJECT", "allow_timeout_override": True, "max_queue_size": "128"}}}


def test_benchmark_mode_lifts_triton_queue_bound_and_off_puts_it_back():
    """A model configured with Triton's queue bounded (not the shipped default): past it
    Triton refuses at once and perf_analyzer would stop there too. On: unbounded, the
    bound kept; off: put back."""
    on = bm.benchmark_config(HELD)
    assert on["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 0
    assert on["parameters"]["control.infeasible_policy"] == {"string_value": "serve_late"}
    assert bm.benchmark_config(on) is None
    off = bm.normal_config(on)
    assert off["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 128
    assert off["parameters"] == HELD["parameters"]
    assert HELD["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == "128"  # a copy


def test_the_mode_names_every_setting_it_changed():
    """The shipped default (no queue policy) changes one setting, and says only that; a
    model with Triton's queue bounded also has the lifted bound named."""
    with bm.benchmark_mode(FakeControl()) as plain:
        pass
    with bm.benchmark_mode(FakeControl(HELD)) as held:
        pass
    changed = bm.benchmark_config(CONFIG)
    assert changed["parameters"].pop("control.infeasible_policy") == {"string_value":
                                                                      "serve_late"}
    assert changed == CONFIG and "max_queue_size" not in plain.text
    assert "max_queue_size 128" in held.text and "serve_late" in held.text


def test_off_on_a_config_never_switched_on_only_drops_serve_late():
    served_late = bm.benchmark_config(CONFIG)
    assert bm.normal_config(served_late) == {**CONFIG, "parameters": CONFIG["parameters"]}


def test_reloads_with_serve_late_and_restores_the_original():
    control = FakeControl()
    with bm.benchmark_mode(control) as mode:
        assert control.loads[-1]["parameters"]["control.infeasible_policy"]["string_value"] \
            == "serve_late"
        assert mode.applied and mode.serves_late
    assert control.loads[-1] == CONFIG and len(control.loads) == 2
    assert "served late" in mode.text and "loaded back" in mode.restored


def test_restores_even_when_the_run_fails():
    control = FakeControl()
    with pytest.raises(RuntimeError):
        with bm.benchmark_mode(control):
            raise RuntimeError("perf_analyzer crashed")
    assert control.loads[-1] == CONFIG


def test_a_refused_reload_runs_as_configured_and_says_so():
    control, warnings = FakeControl(refuse={1}), []
    with bm.benchmark_mode(control, warn=warnings.append) as mode:
        assert not mode.applied and not mode.serves_late
    assert len(control.loads) == 1  # nothing to restore
    assert "--model-control-mode=explicit" in mode.text and warnings


def test_a_model_already_serving_late_is_not_reloaded():
    control = FakeControl(bm.benchmark_config(CONFIG))
    with bm.benchmark_mode(control) as mode:
        assert mode.serves_late and not mode.applied
    assert control.loads == []


def test_a_failed_restore_is_reported():
    control, warnings = FakeControl(refuse={2}), []
    with bm.benchmark_mode(control, warn=warnings.append) as mode:
        pass
    assert "RESTORING THE ORIGINAL CONFIG FAILED" in mode.restored and warnings


def test_command_line_switches_on_and_off(monkeypatch, capsys):
    control = FakeControl()
    monkeypatch.setattr(bm.live, "ModelControl", lambda url, model: control)
    assert bm.main(["--url", "localhost:1", "--model", "m", "on"]) == 0
    assert control.loads[-1]["parameters"]["control.infeasible_policy"]["string_value"] \
        == "serve_late"
    control._config = control.loads[-1]
    assert bm.main(["--url", "localhost:1", "--model", "m", "off"]) == 0
    assert "control.infeasible_policy" not in control.loads[-1]["parameters"]
    assert control.closed
    control._config = control.loads[-1]
    assert bm.main(["--model", "m", "off"]) == 0 and "already off" in capsys.readouterr().out
    refusing = FakeControl(refuse={1})
    monkeypatch.setattr(bm.live, "ModelControl", lambda url, model: refusing)
    assert bm.main(["--model", "m", "on"]) == 1
    assert "refused the reload" in capsys.readouterr().err


def test_the_python_m_entry_and_the_cli_subcommand_are_one_command(monkeypatch):
    from operator_tools.cli import main

    control = FakeControl()
    monkeypatch.setattr(bm.live, "ModelControl", lambda url, model: control)
    result = CliRunner().invoke(main, ["benchmark-mode", "--model", "m", "on"])
    assert result.exit_code == 0 and "reloaded with control.infeasible_policy" in result.output
    assert bm.main(["on"]) == 2  # no demo model assumed: --model is required (usage)
