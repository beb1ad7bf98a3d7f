"""``benchmarks/call_path.py`` runs both model classes on the fake pb_utils and reports a
CPU cost per request for each (a smoke at tiny sizes; the figures are results/, not here)."""

from collections import defaultdict
from types import SimpleNamespace

from benchmarks.call_path import main, thread_timed


def test_both_model_classes_run_and_are_costed():
    results = main(["--calls", "3", "--per-call", "4"])
    assert set(results) == {"native", "explicit (hold)"}
    assert all(cost > 0 for cost in results.values())


def test_calls_that_start_cold_are_costed_too():
    results = main(["--calls", "3", "--per-call", "2", "--evict-mb", "1"])
    assert all(cost > 0 for cost in results.values())


def test_thread_timed_counts_each_call_and_keeps_the_answer():
    owner = SimpleNamespace(double=lambda x: 2 * x)
    spent = defaultdict(lambda: [0.0, 0])
    thread_timed(owner, "double", spent, "twice")
    assert [owner.double(3), owner.double(4)] == [6, 8]
    seconds, calls = spent["twice"]
    assert calls == 2 and seconds >= 0.0
