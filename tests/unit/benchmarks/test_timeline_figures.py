"""benchmarks/timeline_figures.py on timeline records made here: the gap per handed-over
request, the cost of an early send."""

from __future__ import annotations

import pytest

from benchmarks import timeline_figures as tf
from benchmarks.timeline_figures import BY_SIZE_MIN_CALLS


def _call(start_s: float, requests: int, batches: list, early_sends: int = 0,
          handed_over: bool = True) -> dict:
    """One timeline record (triton_backend/timeline.py's fields) of ``batches`` (size,
    start, end), returning at the last batch's end."""
    return {"start_s": start_s, "requests": requests, "handed_over": handed_over,
            "batches": [[n, 0, a, b, 0.0, "fifo"] for n, a, b in batches],
            "early_sends": early_sends, "return_s": batches[-1][2] if batches else start_s}


def test_the_gap_per_request_is_the_slope_of_the_gap_against_the_hand_over():
    """A gap of 200 us plus 50 us per handed-over request (every twentieth call paused
    by 5 ms, as a collector would): the fit reads 50 us a request, the pauses aside."""
    records, t = [], 0.0
    for k in range(400):
        n = 4 + k % 5
        gap = 200e-6 + 50e-6 * n + (5e-3 if k % 20 == 0 else 0.0)
        t += gap
        records.append(_call(t, n, [(n, t, t + 0.004)]))
        t += 0.004
    assert tf.gap_us_per_request(records) == pytest.approx(50.0, rel=1e-6)
    assert tf.idle_while_waiting(records)["gap_us_per_request"] == pytest.approx(50.0,
                                                                                 rel=1e-6)
    assert tf.gap_us_per_request(records[:15]) is None  # too few calls of each size


def test_an_early_send_costs_the_time_between_its_calls_batches_per_answer():
    records = [_call(0.0, 8, [(4, 0.0, 0.004), (4, 0.0052, 0.009)], early_sends=4),
               _call(0.01, 8, [(8, 0.01, 0.015)]),
               _call(0.02, 6, [(2, 0.02, 0.021), (2, 0.0214, 0.022), (2, 0.0224, 0.023)],
                     early_sends=4)]
    # (1.2 ms + 0.4 ms + 0.4 ms) over 8 answers sent early
    assert tf.early_send_ms(records) == pytest.approx(2.0 / 8)
    assert tf.early_send_ms(records[1:2]) is None


def test_the_device_runs_only_while_the_executor_does():
    """A batch's span beyond its executor run (its decision, its bookkeeping) is host
    time: in the idle share, and in the calls of equal size side by side; a record from
    before the timeline carried executor_s counts its whole span as the device's."""
    records = []
    for k in range(20):
        t = k * 0.010
        call = _call(t, 4, [(4, t + 0.001, t + 0.006)])
        call["batches"][0].append(0.004)  # the executor ran 4 of the batch's 5 ms
        call["return_s"] = t + 0.007
        records.append(call)
    cell = tf.by_size(records)[4]
    assert cell["calls"] == 20 and cell["batches"] == 1
    assert cell["executor_ms"] == pytest.approx(4.0)
    assert cell["in_batches_ms"] == pytest.approx(1.0)
    assert cell["outside_ms"] == pytest.approx(2.0)
    # each 10 ms: 7 ms of call (3 idle), 3 ms of gap before a hand-over (idle)
    figures = tf.idle_while_waiting(records)
    assert figures["host_ms_per_call"] == pytest.approx(3.0)
    old = [{**r, "batches": [b[:6] for b in r["batches"]]} for r in records]
    assert tf.by_size(old)[4]["executor_ms"] == pytest.approx(5.0)


def test_a_calls_phases_add_up_to_its_host_time_and_split_at_its_decoding():
    """Per call size, the medians of a call's phases outside the device: before its first
    batch (an explicit call splits it where its decoding ended), around its executors,
    after its last batch; native's records carry no decoding mark. Too few calls of a
    size: no row."""
    explicit, native = [], []
    for k in range(BY_SIZE_MIN_CALLS):
        t = k * 0.010
        call = _call(t, 2, [(2, t + 0.0003, t + 0.0053)])  # first batch 300 us in
        call["decoded_s"] = t + 0.0001
        call["batches"][0].append(0.0048)  # 200 us of the batch's span is host time
        call["return_s"] = t + 0.0058  # 500 us after the last batch
        explicit.append(call)
        native.append(_call(t, 2, [(2, t + 0.0001, t + 0.0041)]) | {"return_s": t + 0.0042})
    got, base = tf.phases(explicit)[2], tf.phases(native)[2]
    assert got["calls"] == BY_SIZE_MIN_CALLS
    assert (got["before"], got["decode"], got["decide"]) == pytest.approx((300, 100, 200))
    assert (got["around"], got["after"]) == pytest.approx((200, 500))
    assert base["decode"] is None and base["before"] == pytest.approx(100)
    assert tf.phases(explicit[:-1]) == {}  # one call short of a row
    assert "| 2 | explicit |" in "\n".join(tf.phases_table({"explicit": tf.phases(explicit),
                                                            "native": tf.phases(native)}))


def _cpu_call(requests: int, cpu_us: float, batches: list, launched: bool = False) -> dict:
    """A record of ``requests`` whose ``execute()`` thread spent ``cpu_us``; ``batches``:
    (size, former) each."""
    return {"start_s": 0.0, "requests": requests, "launched_first": launched,
            "batches": [[n, 0, 0.0, 0.001, 0.0, former, 0.001] for n, former in batches],
            "return_s": 0.002, "cpu_s": cpu_us / 1e6}


def test_a_calls_cpu_is_split_by_its_path_into_a_cost_per_call_and_per_request():
    """Native's calls cost 100 us + 50 us a request, launched calls 300 us + 50, decided
    calls of two batches 900 us + 55: each kind's line reads back its own costs; a kind
    with too few calls gets no line, and records from before the timeline carried the
    CPU count in none."""
    records = {"native": [], "explicit": []}
    for k in range(tf.CPU_FIT_MIN_CALLS * 2):
        n = 10 + k % 30
        records["native"].append(_cpu_call(n, 100 + 50 * n, [(n, "native")]))
        records["explicit"].append(_cpu_call(n, 300 + 50 * n, [(n, "as_handed")], True))
        records["explicit"].append(_cpu_call(n, 900 + 55 * n, [(n - 5, "length_aware"),
                                                               (5, "length_aware")]))
    records["explicit"] += [_cpu_call(8, 700.0, [(8, "length_aware")])] * 3
    figures = {m: tf.cpu_by_kind(r) for m, r in records.items()}
    assert set(figures["explicit"]) == {"launched first", "decided, 2 batches",
                                        "decided, 1 batch"}
    for model, kind, fixed, per_request in (("native", "native", 100, 50),
                                            ("explicit", "launched first", 300, 50),
                                            ("explicit", "decided, 2 batches", 900, 55)):
        cell = figures[model][kind]
        assert cell["fixed_us"] == pytest.approx(fixed, rel=1e-6)
        assert cell["per_request_us"] == pytest.approx(per_request, rel=1e-6)
        assert cell["calls"] == tf.CPU_FIT_MIN_CALLS * 2
    alone = figures["explicit"]["decided, 1 batch"]
    assert alone["fixed_us"] is None and alone["cpu_us_per_request"] == pytest.approx(87.5)
    old = [{k: v for k, v in r.items() if k != "cpu_s"} for r in records["native"]]
    assert tf.cpu_by_kind(old) == {}
    assert len(tf.cpu_table(figures)) == 2 + 4
