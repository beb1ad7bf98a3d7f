"""perf_analyzer_configs/: every file documented and read, generated files reproducible,
sweeps valid; and the readers of perf_analyzer's profile export and error output."""

from __future__ import annotations

import glob
import json
import os

import pytest

from benchmarks import make_perf_inputs
from operator_tools import perf_analyzer as pa
from operator_tools.records import exported_record
from simulation import workload as W

CONFIGS = pa.CONFIGS_DIR


def _files() -> list[str]:
    out = []
    for root, _, names in os.walk(CONFIGS):
        out += [os.path.relpath(os.path.join(root, n), CONFIGS) for n in names]
    return sorted(out)


def test_every_file_is_listed_in_the_readme():
    with open(os.path.join(CONFIGS, "README.md")) as fh:
        readme = fh.read()
    missing = [f for f in _files() if f != "README.md" and f"`{f}`" not in readme]
    assert not missing


def test_generated_files_are_exactly_what_the_script_writes(tmp_path):
    written = make_perf_inputs.write_all(str(tmp_path))
    assert set(written) == {"mixed_sla.json", "mixed.json", "bimodal_sla.json", "bimodal.json",
                            os.path.join("traces", "poisson_60rps_20s.intervals"),
                            os.path.join("traces", "bursty_60rps_20s.intervals")}
    for rel in written:
        with open(tmp_path / rel, "rb") as fresh, open(os.path.join(CONFIGS, rel), "rb") as shipped:
            assert fresh.read() == shipped.read(), rel


@pytest.mark.parametrize("stem,check", [
    ("mixed", lambda n: 16 <= n <= 512),
    ("bimodal", lambda n: 16 <= n <= 64 or 256 <= n <= 512),
])
def test_input_data_twins(stem, check):
    with_sla = W.read_input_data(os.path.join(CONFIGS, f"{stem}_sla.json"))
    plain = W.read_input_data(os.path.join(CONFIGS, f"{stem}.json"))
    assert len(with_sla) == len(plain) == 200
    assert {sla for _, sla in with_sla} == {50.0, 100.0, 200.0}
    assert all(sla is None for _, sla in plain)
    assert all(check(n) for n, _ in with_sla)
    with open(os.path.join(CONFIGS, f"{stem}_sla.json")) as a, \
            open(os.path.join(CONFIGS, f"{stem}.json")) as b:
        ids_a = [e["INPUT_IDS"] for e in json.load(a)["data"]]
        ids_b = [e["INPUT_IDS"] for e in json.load(b)["data"]]
    assert ids_a == ids_b  # the very same sequences
    if stem == "bimodal":
        long_share = sum(1 for n, _ in with_sla if n >= 256) / len(with_sla)
        assert 0.1 <= long_share <= 0.3


@pytest.mark.parametrize("name", ["poisson_60rps_20s.intervals", "bursty_60rps_20s.intervals"])
def test_traces_hold_20_s_at_about_60_req_s(name):
    path = os.path.join(CONFIGS, "traces", name)
    times = W.read_request_intervals(path)
    assert 19.0 <= times[-1] <= 20.0
    assert 45 <= len(times) / 20.0 <= 70
    with open(path) as fh:
        assert all(line.strip().isdigit() for line in fh)


def test_bursty_trace_has_bursts():
    times = W.read_request_intervals(
        os.path.join(CONFIGS, "traces", "bursty_60rps_20s.intervals"))
    per_quarter = [0] * 80
    for t in times:
        per_quarter[min(int(t * 4), 79)] += 1
    assert max(per_quarter) >= 3 * (len(times) / 80)  # some 0.25 s hold 3x the mean


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CONFIGS, "sweeps", "*.yaml"))))
def test_sweeps_load(path):
    sweep = pa.load_sweep(path)
    assert sweep.request_rates_rps and all(r > 0 for r in sweep.request_rates_rps)
    assert os.path.isfile(sweep.input_data) and os.path.isfile(sweep.input_data_no_sla)
    args = sweep.perf_analyzer_args(sweep.request_rates_rps[0], with_sla=False)
    assert args[:3] == ["--async", "--request-rate-range", f"{sweep.request_rates_rps[0]:g}"]
    assert args[args.index("--input-data") + 1] == sweep.input_data_no_sla
    assert args[args.index("--measurement-interval") + 1] == str(
        int(sweep.run_duration_s * 1000))


def test_request_rate_sweep_contents():
    sweep = pa.load_sweep(os.path.join(CONFIGS, "sweeps", "request_rate.yaml"))
    assert sweep.name == "request_rate"
    assert sweep.request_rates_rps == (25, 50, 75, 100, 125, 150, 200)
    assert sweep.run_duration_s == 5
    assert sweep.input_data.endswith("mixed_sla.json")


@pytest.mark.parametrize("doc,key", [
    ({"request_rates_rps": [10], "run_duration_s": 1, "input_data": "mixed_sla.json",
      "input_data_no_sla": "mixed.json", "rates": [1]}, "rates"),
    ({"request_rates_rps": [], "run_duration_s": 1, "input_data": "mixed_sla.json",
      "input_data_no_sla": "mixed.json"}, "request_rates_rps"),
    ({"request_rates_rps": [10, -1], "run_duration_s": 1, "input_data": "mixed_sla.json",
      "input_data_no_sla": "mixed.json"}, "request_rates_rps"),
    ({"request_rates_rps": [10], "run_duration_s": 0, "input_data": "mixed_sla.json",
      "input_data_no_sla": "mixed.json"}, "run_duration_s"),
    ({"request_rates_rps": [10], "run_duration_s": 1, "input_data": "nope.json",
      "input_data_no_sla": "mixed.json"}, "input_data"),
    ({"request_rates_rps": [10], "run_duration_s": 1, "input_data": "mixed_sla.json",
      "input_data_no_sla": "mixed.json", "request_distribution": "uniform"},
     "request_distribution"),
])
def test_bad_sweeps_name_the_key(tmp_path, doc, key):
    import yaml

    folder = tmp_path / "sweeps"
    folder.mkdir()
    for name in ("mixed_sla.json", "mixed.json"):
        (tmp_path / name).write_text("{}")
    path = folder / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=f"sweep {path}: key '{key}'"):
        pa.load_sweep(str(path))


def test_read_profile_export(tmp_path):
    doc = {"experiments": [{"experiment": {"mode": "request_rate", "value": 10},
                            "window_boundaries": [1000, 9000],
                            "requests": [
        {"timestamp": 3000, "request_inputs": {"INPUT_IDS": [101, 5, 102], "SLA_MS": 250.0},
         "response_timestamps": [3500, 4000], "response_outputs": [{}]},
        {"timestamp": 2000, "request_inputs": {"INPUT_IDS": [101, 7, 102]},
         "response_timestamps": [], "response_outputs": []}]}],
           "version": "2.51.0", "service_kind": "triton", "endpoint": ""}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    start, requests = pa.read_profile_export(str(path))
    assert start == 1000
    assert [r.sent_ns for r in requests] == [2000, 3000]  # sorted by send time
    assert requests[0] == exported_record(2000, None, (101, 7, 102), None)
    assert requests[1] == exported_record(3000, 4000, (101, 5, 102), 250.0)
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a perf_analyzer profile export"):
        pa.read_profile_export(str(path))


def test_failure_reason_quotes_the_thread_errors():
    output = ("Failed to retrieve results from inference request.\n"
              "Thread [0] had error: deadline infeasible: the estimated finish misses\n"
              "Thread [1] had error: deadline infeasible: the estimated finish misses\n")
    assert pa.failure_reason(output) == "deadline infeasible: the estimated finish misses"
    assert pa.failure_reason("a\nb\nc\nd\n") == "b / c / d"
