"""bench_report's account of the run itself: a segment rerun after a server crash is said."""

from benchmarks.bench_report import server_crash_lines


def test_no_crash_says_nothing():
    assert server_crash_lines([]) == []


def test_each_crash_is_a_row_naming_model_role_rate_and_exit_code():
    crashes = [{"at": "16:31:55", "model": "emulated_native", "role": "native",
                "rate_rps": 2673.2, "exit_code": -11, "requests": 20000}]
    text = "\n".join(server_crash_lines(crashes))
    assert "died 1 time(s)" in text
    assert "| 16:31:55 | emulated_native | native | 2673 | -11 |" in text
