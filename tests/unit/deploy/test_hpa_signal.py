"""scripts/hpa_signal.py's logic (benchmarks/hpa_signal.py): Kubernetes' HPA formula, the
step-by-step settling, the quantity parser, and one pod's reading on a tiny run. Its
figures are on results/hpa_signal.md, not checked here."""

from __future__ import annotations

import pytest

from benchmarks import hpa_signal as H

HPA = H.HpaSettings(target_s=0.025, max_replicas=8, up_pods=2, down_pods=1)


@pytest.mark.parametrize("text, value", [("25m", 0.025), ("2", 2.0), (3, 3.0), ("1500m", 1.5)])
def test_quantities(text, value):
    assert H.quantity(text) == pytest.approx(value)


def test_the_formula_is_kubernetes():
    assert H.hpa_ask(2, 0.050, 0.025) == 4
    assert H.hpa_ask(3, 0.0105, 0.025) == 2  # ceil(1.26)
    assert H.hpa_ask(4, 0.027, 0.025) == 4  # within the 0.1 tolerance: no change
    assert H.hpa_ask(4, 0.028, 0.025) == 5


def test_settling_follows_the_step_policies_and_stops_when_it_holds():
    # A wait proportional to the load per pod: 25 ms at 0.5 of a pod.
    steps = H.settle(2.0, lambda per_pod: 0.05 * per_pod, HPA)
    assert steps == [1, 3, 4, 4]
    assert H.span(steps) == (4, 4)


def test_settling_stops_on_a_cycle_and_reports_it():
    # A wait that jumps past the knee: one pod reads far over, two far under the target.
    steps = H.settle(1.0, lambda per_pod: 0.05 if per_pod > 0.7 else 0.001, HPA)
    assert steps == [1, 2, 1]
    assert H.span(steps) == (1, 2)


def test_settling_is_bounded_by_max_replicas():
    assert H.settle(100.0, lambda per_pod: 1.0, HPA)[-2:] == [8, 8]


def _row(load, ask, steps):
    return {"reading": H.PodReading(load, 0.0, 0.0, 0.0, 0.0), "ask": ask, "steps": steps}


def test_separating_needs_a_higher_ask_and_a_higher_settled_count():
    assert H.separates([_row(0.6, 1, [1, 1]), _row(2.0, 4, [1, 3, 3])])
    assert not H.separates([_row(0.6, 4, [1, 3, 3]), _row(2.0, 4, [1, 3, 3])])
    assert not H.separates([_row(0.6, 1, [1, 2, 1]), _row(2.0, 4, [1, 2, 2])])


def test_the_settings_are_read_from_the_committed_hpa():
    hpa = H.HpaSettings.from_file()
    assert hpa.target_s > 0 and hpa.max_replicas >= 2 and hpa.up_pods >= 1


def test_one_pods_reading_on_a_tiny_run():
    pod = H.Pod("t4", duration_s=0.2)
    low, high = pod.reading(0.3), pod.reading(2.0)
    assert low.arrivals_rps == pytest.approx(0.3 * pod.capacity_rps)
    for r in (low, high):
        assert r.queue_wait_s >= 0 and r.missed_or_refused_rps >= 0
        assert 0 <= r.unsafe_batch_share <= 1
    assert pod.reading(0.3) is low  # cached
    lines = H.page([(pod, H.profile_rows(pod, HPA, loads=(0.6, 2.0)))], HPA)
    assert any(line.startswith("| 2x |") for line in lines)
