"""bench_report's account of the run itself: a segment rerun after a server crash is said,
and a run whose plugin is not the shipped intake says so."""

from benchmarks.bench_report import intake_line, server_crash_lines
from triton_backend.intake import DEFAULT_INTAKE


def test_no_crash_says_nothing():
    assert server_crash_lines([]) == []


def test_each_crash_is_a_row_naming_model_role_rate_and_exit_code():
    crashes = [{"at": "16:31:55", "model": "emulated_native", "role": "native",
                "rate_rps": 2673.2, "exit_code": -11, "requests": 20000}]
    text = "\n".join(server_crash_lines(crashes))
    assert "died 1 time(s)" in text
    assert "| 16:31:55 | emulated_native | native | 2673 | -11 |" in text


def test_a_run_of_the_shipped_intake_says_nothing_more():
    assert intake_line({"explicit_intake": DEFAULT_INTAKE}) == ""
    assert intake_line({}) == ""  # a run from before the option


def test_a_variant_intake_is_named_as_a_variant_beside_the_default():
    line = intake_line({"explicit_intake": "gather"})
    assert "VARIANT" in line and "`intake: gather`" in line
    assert f"`intake: {DEFAULT_INTAKE}`" in line


def test_a_variant_hand_over_is_named_with_the_shipped_one():
    from server_ops.intake_config import HOLD_MAX_HAND_OVER  # noqa: PLC0415

    line = intake_line({"explicit_intake": DEFAULT_INTAKE, "explicit_hand_over": 128})
    assert "VARIANT" in line and "hand-over of 128 requests" in line
    assert f"hands over {HOLD_MAX_HAND_OVER}" in line
    assert intake_line({"explicit_intake": DEFAULT_INTAKE, "explicit_hand_over": None}) == ""
