"""What an operator expects of ``explicit-batching`` whatever the command: ``--version``,
exit codes with one meaning each (0 ok, 1 a finding, 2 usage, 3 cannot reach the server),
``--json`` that is one JSON object alone on stdout, no demo model assumed, no path of this
machine in ``--help``, and the former ``python -m`` tools as subcommands."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
from importlib.metadata import version

import click
import pytest
from click.testing import CliRunner
from tritonclient.utils import InferenceServerException

from operator_fakes import scripted_sampling
from operator_tools import benchmark_mode, exit_codes
from operator_tools.cli import main
from operator_tools.exit_codes import is_unreachable
from server_ops import launcher, supervisor
from sidecar import __main__ as sidecar_main
from test_analyze_cmd import lag_page
from test_monitor_cmd import MODEL, baseline_file, steady_pages

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
T4 = os.path.join(REPO, "model_repository", "emulated_explicit", "profiles", "t4.yaml")
CLOSED = "127.0.0.1:9"  # the discard port: nothing listens, the connection is refused


def invoke(args, obj=None):
    return CliRunner().invoke(main, args, obj=obj)


def all_commands(group=main, path=()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from all_commands(command, (*path, name))


# -- --version and --help -------------------------------------------------------------------

def test_version_names_the_package_version_and_the_triton_release():
    result = invoke(["--version"])
    assert result.exit_code == 0
    assert version("explicit-batching") in result.output and "2.51" in result.output


@pytest.mark.parametrize("path", list(all_commands()), ids=" ".join)
def test_help_shows_no_path_of_this_machine_and_the_exit_codes(path):
    result = invoke([*path, "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # help text wraps lines anywhere
    assert REPO not in result.output and os.path.expanduser("~") + "/" not in result.output
    assert "Exit codes: 0 ok; 1 a finding" in text and "3 the server cannot be reached" in text


def test_the_python_m_tools_are_the_cli_subcommands():
    for module_main, name in ((launcher.main, "serve"), (supervisor.main, "supervise"),
                              (sidecar_main.main, "sidecar"),
                              (benchmark_mode.main, "benchmark-mode")):
        assert module_main(["--help"]) == 0
        assert name in main.commands
    assert supervisor.main(["--server-pid", "1"]) == 2  # no MODELS: usage
    assert sidecar_main.main(["--nvml-index", "-1"]) == 2


# -- no demo model assumed ------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["monitor", "--check-metric-drift", "--metrics-url", f"http://{CLOSED}/metrics",
     "--baseline", T4],
    ["analyze", "--control-feedback-lag", "--metrics-url", f"http://{CLOSED}/metrics"],
    ["calibrate", "step", "--url", CLOSED, "--rates", "10"],
    ["compare", "--url", CLOSED],
    ["benchmark-mode", "--url", CLOSED, "on"],
    ["calibrate", "table", "--url", CLOSED, "--base-profile", T4, "--out", "x.yaml"],
])
def test_a_command_that_needs_your_model_asks_for_it(args):
    result = invoke(args)
    assert result.exit_code == exit_codes.USAGE and "--model" in result.output, result.output


# -- exit codes -----------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["monitor", "--check-metric-drift", "--metrics-url", f"http://{CLOSED}/metrics",
     "--model", "m", "--window-s", "0.5", "--interval-s", "0.5"],
    ["analyze", "--control-feedback-lag", "--metrics-url", f"http://{CLOSED}/metrics",
     "--model", "m", "--duration-s", "0.5", "--interval-s", "0.5"],
    ["calibrate", "step", "--url", CLOSED, "--model", "m", "--rates", "10"],
    ["compare", "--url", CLOSED, "--model", "m"],
    ["benchmark-mode", "--url", CLOSED, "--model", "m", "on"],
    ["calibrate", "table", "--url", CLOSED, "--model", "m", "--base-profile", T4, "--out", "x.yaml"],
    ["calibrate", "table", "--url", CLOSED, "--protocol", "grpc", "--model", "m",
     "--base-profile", T4, "--out", "x.yaml"],
])
def test_a_server_that_cannot_be_reached_exits_3_with_one_line(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if args[0] == "monitor":
        args = [*args, "--baseline", baseline_file(tmp_path, steady_pages())]
    result = invoke(args)
    assert result.exit_code == exit_codes.UNREACHABLE, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "cannot reach" in errors[0] and "refused" in errors[0].lower()
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.yaml").exists()


def test_the_python_m_entry_exits_3_too():
    assert benchmark_mode.main(["--url", CLOSED, "--model", "m", "on"]) == exit_codes.UNREACHABLE


def test_a_finding_exits_1_and_a_usage_error_2(tmp_path):
    trace = tmp_path / "lag.json"
    trace.write_text(json.dumps([{"t": i * 0.2, "observation_age_ms": 240.0,
                                  "control_lag_ms": 30.0} for i in range(10)]))
    exceeds = ["analyze", "--control-feedback-lag", "--trace", str(trace)]
    assert invoke(exceeds).exit_code == exit_codes.OK  # a report, not a gate, unless asked
    assert invoke([*exceeds, "--fail-on-exceeds"]).exit_code == exit_codes.FINDING
    drift = ["monitor", "--check-metric-drift", "--metrics-url", "http://m/metrics", "--model",
             MODEL, "--window-s", "5", "--fail-on-drift",
             "--baseline", baseline_file(tmp_path, steady_pages())]
    assert invoke(drift, scripted_sampling(steady_pages(batch=8.0))).exit_code == exit_codes.FINDING
    assert invoke(drift, scripted_sampling(steady_pages())).exit_code == exit_codes.OK
    assert invoke(["analyze", "--no-such-option"]).exit_code == exit_codes.USAGE


@pytest.mark.parametrize("exc, unreachable", [
    (ConnectionRefusedError(111, "Connection refused"), True),
    (urllib.error.URLError(socket.gaierror(-2, "Name or service not known")), True),
    (socket.timeout("timed out"), True),
    (InferenceServerException("failed to connect to all addresses", "StatusCode.UNAVAILABLE"),
     True),
    # The plugin's own refusal is UNAVAILABLE too: the server was reached.
    (InferenceServerException("deadline infeasible", "StatusCode.UNAVAILABLE"), False),
    (OSError("Input/output error"), False),
    (ValueError("bad page"), False),
])
def test_what_counts_as_cannot_reach(exc, unreachable):
    assert is_unreachable(exc) is unreachable
    try:
        try:
            raise exc
        except Exception:
            raise click.ClickException("wrapped") from None  # the context is still looked at
    except click.ClickException as wrapped:
        assert is_unreachable(wrapped.__context__) is unreachable


# -- --json ---------------------------------------------------------------------------------

def test_monitor_json_is_the_verdict_alone_on_stdout(tmp_path):
    result = invoke(["monitor", "--check-metric-drift", "--metrics-url", "http://m/metrics",
                     "--model", MODEL, "--window-s", "5", "--json",
                     "--baseline", baseline_file(tmp_path, steady_pages())],
                    scripted_sampling(steady_pages(batch=8.0)))
    doc = json.loads(result.stdout)
    assert doc["kind"] == "metric_drift" and doc["drift"] is True
    assert "mean batch size" in doc["drifted"]
    row = next(f for f in doc["findings"] if f["metric"] == "mean batch size")
    assert row["status"] == "DRIFT" and doc["now"]["mean_batch_size"] == pytest.approx(8.0)
    assert "verdict: DRIFT" in result.stderr  # the text still there, on stderr


def test_analyze_json_holds_the_distribution_and_the_verdict():
    pages = [lag_page(100.0 + (i % 2) * 80, 3.0, met=10 * i) for i in range(31)]
    result = invoke(["analyze", "--control-feedback-lag", "--metrics-url", "http://m/metrics",
                     "--model", "emulated_explicit", "--duration-s", "3", "--interval-s", "0.1",
                     "--json"], scripted_sampling(pages, start=50.0))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "control_feedback_lag" and doc["verdict"] == "within"
    assert doc["lag"]["count"] == 31 and doc["lag"]["max"] == pytest.approx(183.0)
    assert doc["band_ms"] == [100.0, 200.0] and doc["per_second"]


def test_simulate_json_has_one_row_per_policy():
    result = invoke(["simulate", "--duration-s", "2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["name"] for r in doc["rows"]] == ["explicit", "native"]
    for row in doc["rows"]:
        assert row["requests"] == sum(c["requests"] for c in row["per_class"]) > 0
        assert 0 <= row["sla_attainment"] <= 1 and row["goodput_rps"] <= row["throughput_rps"]


def test_calibrate_table_json_lists_the_cells_written(tmp_path):
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": [[1, 16, 2.0], [8, 16, 3.5]]}))
    out = tmp_path / "t4_measured.yaml"
    result = invoke(["calibrate", "table", "--table-json", str(table), "--base-profile", T4,
                     "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["rows"] == [{"batch": 1, "length": 16, "ms": 2.0},
                           {"batch": 8, "length": 16, "ms": 3.5}]
    assert doc["profile"] == str(out)
