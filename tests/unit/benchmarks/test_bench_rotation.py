"""The h200 block's rotated rounds: which round stands for the peaks, the verdicts on the
median of the rounds' ratios, and the order the rounds run in (a fake bench records it)."""

import pytest

from benchmarks import bench_rotation as R
from benchmarks import segment_stats as B
from benchmarks.bench_setup import EXPLICIT, NATIVE
from operator_tools.benchmark_mode import POLICY_KEY, SERVE_LATE


def peak(rps, cpu=None, error=None, per_call=None):
    return {"throughput_rps": rps, "stub_cpu_us_per_request": cpu, "error": error,
            "requests_per_call": per_call}


def rnd(e, n, ecpu=None, ncpu=None, e_call=None, n_call=None):
    return {"explicit": peak(e, ecpu, per_call=e_call),
            "native": peak(n, ncpu, per_call=n_call)}


def verdicts(run):
    out = []
    R.rotation_targets(run, "scope", lambda *a: out.append(
        dict(zip(("target", "scope", "measured", "value", "goal", "ok"), a))))
    return out


def test_the_median_round_stands_for_the_peaks():
    rounds = [rnd(90, 100), rnd(60, 100), rnd(120, 100)]  # ratios 0.9, 0.6, 1.2
    assert R.median_round(rounds) is rounds[0]
    assert R.round_ratios(rounds, "throughput_rps") == pytest.approx([0.9, 0.6, 1.2])


def test_failed_rounds_are_left_out_and_an_even_count_takes_the_lower_middle():
    rounds = [rnd(90, 100), {"explicit": peak(None, error="perf_analyzer failed"),
                             "native": peak(100)}, rnd(50, 100)]
    assert R.round_ratios(rounds, "throughput_rps") == pytest.approx([0.9, 0.5])
    assert R.median_round(rounds) is rounds[2]  # 0.5 below 0.9: the lower middle
    failed = [{"explicit": peak(1, error="x"), "native": peak(1)}]
    assert R.median_round(failed) is failed[0]  # none has both figures: the first
    assert R.median_round([]) == {}


def test_cpu_verdicts_read_the_median_of_the_rounds_ratios():
    run = {"cpu_rounds": [{"explicit": 150.0, "native": 100.0},
                          {"explicit": 120.0, "native": 100.0},
                          {"explicit": 110.0, "native": 100.0}],
           "peak_rounds": [rnd(1, 1, 130.0, 100.0), rnd(1, 1, 200.0, 100.0),
                           rnd(1, 1, 125.0, 100.0)]}
    at_load, at_peak = verdicts(run)
    assert "0.8x" in at_load["target"] and at_load["value"] == pytest.approx(1.2)
    assert at_load["ok"] is True  # 1.5x in one round does not decide it
    assert "closed-loop peak" in at_peak["target"]
    assert at_peak["value"] == pytest.approx(1.3) and at_peak["ok"] is False
    assert verdicts({}) == []  # a run without rounds (time scale 57, quick) has no verdict


def test_cpu_rounds_read_segments_and_keep_a_missing_figure_as_none():
    def seg(cpu):
        return B.SegmentStats(role="x", source="measured", duration_s=1.0, sent=1, ok=1, met=1,
                              errors={}, lost=0, goodput_rps=1.0, attainment=1.0, p50_ms=1.0,
                              p99_ms=1.0, per_class={}, send_lag_p99_ms=0.0,
                              stub_cpu_us_per_request=cpu)
    rounds = R.cpu_rounds({"explicit": seg(130.0), "native": seg(100.0)},
                          [{"explicit": seg(None), "native": seg(90.0)}])
    assert rounds == [{"explicit": 130.0, "native": 100.0}, {"explicit": None, "native": 90.0}]
    assert [v["value"] for v in verdicts({"cpu_rounds": rounds})] == pytest.approx([1.3])


class FakeBench:
    """Records configure and closed_loop_peak calls; a peak's throughput is its call's
    index, so the rounds' order can be read back."""

    def __init__(self, fail_at=None):
        self.calls, self.fail_at = [], fail_at

    def configure(self, model, params, setting=None, max_batch=None):
        self.calls.append(("configure", model, dict(params)))

    def closed_loop_peak(self, model, data, measure_ms):
        index = sum(1 for c in self.calls if c[0] == "peak")
        self.calls.append(("peak", model, data))
        if index == self.fail_at:
            raise RuntimeError("perf_analyzer gone")
        return peak(float(index))


def test_rotated_peaks_alternate_the_first_model_and_restore_explicit():
    bench = FakeBench()
    rounds = R.rotated_peaks(bench, {"n": "1"}, "setting", 64, {"e": "1"},
                             {"explicit": "e.json", "native": "n.json"}, 2000, 3)
    peaks = [(c[1], c[2]) for c in bench.calls if c[0] == "peak"]
    assert peaks == [(NATIVE, "n.json"), (EXPLICIT, "e.json"), (EXPLICIT, "e.json"),
                     (NATIVE, "n.json"), (NATIVE, "n.json"), (EXPLICIT, "e.json")]
    assert [(r["native"]["throughput_rps"], r["explicit"]["throughput_rps"])
            for r in rounds] == [(0.0, 1.0), (3.0, 2.0), (4.0, 5.0)]
    configs = [c for c in bench.calls if c[0] == "configure"]
    assert configs[0][1] == NATIVE
    assert configs[1] == ("configure", EXPLICIT, {"e": "1", POLICY_KEY: SERVE_LATE})
    assert configs[-1] == ("configure", EXPLICIT, {"e": "1"})  # restored


def test_rotated_peaks_restore_explicit_when_a_round_fails():
    bench = FakeBench(fail_at=1)
    with pytest.raises(RuntimeError):
        R.rotated_peaks(bench, {}, None, 64, {"e": "1"}, {"explicit": "e", "native": "n"},
                        2000, 3)
    assert bench.calls[-1] == ("configure", EXPLICIT, {"e": "1"})


def test_rounds_render_one_line_each():
    lines = R.rotation_markdown({"peak_rounds": [rnd(90, 100, 130.0, None, 21.5, 4.3)],
                                 "cpu_rounds": [{"explicit": 150.0, "native": 100.0}]})
    assert ("- peak round 1: explicit 90 vs native 100 req/s, stub CPU 130 vs - us a request, "
            "21.5 vs 4.3 requests a call") in lines
    assert "- 0.8x round 1: stub CPU 150 vs 100 us a request" in lines
    assert R.rotation_markdown({}) == []
