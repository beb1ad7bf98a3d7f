"""The separate-process transport: PerceptionSample JSON, SampleFile and usable()."""

from __future__ import annotations

import json
import math
import os

import pytest

from sidecar.nvml import NvmlSample
from sidecar.sampler import PerceptionSample, SampleFile, usable
from sidecar.triton_metrics import ModelRates

RATES = ModelRates(interval_s=0.2, requests_per_s=150.0, failures_per_s=0.5,
                   inferences_per_s=600.0, executions_per_s=37.5, avg_batch_size=16.0,
                   avg_request_ms=12.25, avg_queue_ms=3.5, compute_busy_fraction=0.8125,
                   pending=4.0)
NVML = NvmlSample(device_name="NVIDIA H200", gpu_utilization=0.87, memory_utilization=0.31,
                  sm_clock_mhz=1980.0, memory_used_bytes=12884901888.0,
                  memory_total_bytes=151397597184.0, power_w=250.5)


def full_sample(taken_s=1234.5, health="ok", **kw) -> PerceptionSample:
    fields = dict(taken_s=taken_s, health=health, endpoint_ok=True, nvml_available=True,
                  utilization=0.87, nvml=NVML,
                  models={"emulated_native": RATES, "minilm": RATES}, error="")
    fields.update(kw)
    return PerceptionSample(**fields)


def set_mtime_ns(path, mtime_ns):
    os.utime(path, ns=(mtime_ns, mtime_ns))


# -- JSON ---------------------------------------------------------------------------------

def test_json_round_trip_with_nvml_and_rates():
    sample = full_sample()
    back = PerceptionSample.from_json(sample.to_json())
    assert back == sample
    assert isinstance(back.nvml, NvmlSample)
    assert isinstance(back.models["emulated_native"], ModelRates)


def test_json_round_trip_without_nvml_or_endpoint():
    sample = PerceptionSample(taken_s=5.0, health="degraded", endpoint_ok=None,
                              nvml_available=False, utilization=None,
                              error="metrics endpoint: URLError: refused")
    assert PerceptionSample.from_json(sample.to_json()) == sample


def test_json_carries_nan_power():
    sample = full_sample(nvml=NvmlSample(**{**NVML.__dict__, "power_w": float("nan")}))
    back = PerceptionSample.from_json(sample.to_json())
    assert math.isnan(back.nvml.power_w)
    assert back.nvml.gpu_utilization == 0.87


def test_age_ms():
    assert full_sample(taken_s=10.0).age_ms(10.25) == pytest.approx(250.0)


# -- SampleFile -------------------------------------------------------------------------------

def test_write_then_latest_round_trip(tmp_path):
    path = str(tmp_path / "sidecar.json")
    SampleFile(path).write(full_sample())
    assert SampleFile(path).latest() == full_sample()
    assert os.listdir(tmp_path) == ["sidecar.json"]  # the temporary file was renamed away
    with open(path, encoding="utf-8") as fh:
        assert json.load(fh)["models"]["emulated_native"]["avg_batch_size"] == 16.0


def test_latest_rereads_only_when_the_file_changes(tmp_path):
    path = str(tmp_path / "sidecar.json")
    writer, reader = SampleFile(path), SampleFile(path)
    writer.write(full_sample(taken_s=1.0))
    set_mtime_ns(path, 1_000_000_000_000_000_000)
    first = reader.latest()
    assert first.taken_s == 1.0
    assert reader.latest() is first  # unchanged file: the cached object, not a re-read

    # the same file (inode, size, mtime) with other bytes: not re-read, which proves the
    # cache is what answers (a real writer always replaces the file)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    assert '"taken_s": 1.0' in text
    with open(path, "r+", encoding="utf-8") as fh:
        fh.write(text.replace('"taken_s": 1.0', '"taken_s": 3.0'))
    set_mtime_ns(path, 1_000_000_000_000_000_000)
    assert reader.latest() is first

    # a new sample with a new mtime: re-read
    writer.write(full_sample(taken_s=2.0))
    set_mtime_ns(path, 1_000_000_001_000_000_000)
    second = reader.latest()
    assert second.taken_s == 2.0
    assert reader.latest() is second


def test_latest_of_a_missing_file_is_none(tmp_path):
    assert SampleFile(str(tmp_path / "nothing-here.json")).latest() is None


@pytest.mark.parametrize("content", [
    "", "{not json", '{"taken_s": 1.0, "health": "ok"', '{"taken_s": 1.0}', "{}",
    '{"taken_s": 1, "health": "ok", "endpoint_ok": true, "nvml_available": false, '
    '"utilization": null, "surprise": 1}',
], ids=["empty", "broken", "truncated", "missing-fields", "empty-object", "unknown-field"])
def test_latest_of_a_corrupt_file_is_none(tmp_path, content):
    path = tmp_path / "sidecar.json"
    path.write_text(content, encoding="utf-8")
    assert SampleFile(str(path)).latest() is None


def test_latest_of_a_non_utf8_file_is_none(tmp_path):
    path = tmp_path / "sidecar.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert SampleFile(str(path)).latest() is None


@pytest.mark.parametrize("content", [
    "[]", "null", '"text"', "42",
    '{"taken_s": 1, "health": "ok", "endpoint_ok": true, "nvml_available": false, '
    '"utilization": null, "models": []}',
], ids=["list", "null", "string", "number", "models-list"])
def test_latest_of_valid_json_that_is_not_a_sample_is_none(tmp_path, content):
    path = tmp_path / "sidecar.json"
    path.write_text(content, encoding="utf-8")
    assert SampleFile(str(path)).latest() is None


def test_corrupt_file_then_a_good_one_is_read(tmp_path):
    path = str(tmp_path / "sidecar.json")
    with open(path, "w") as fh:
        fh.write("{half a sam")
    set_mtime_ns(path, 5_000_000_000)
    reader = SampleFile(path)
    assert reader.latest() is None
    SampleFile(path).write(full_sample(taken_s=7.0))
    set_mtime_ns(path, 6_000_000_000)
    assert reader.latest().taken_s == 7.0


def test_replaced_file_with_the_same_mtime_is_reread(tmp_path):
    path = str(tmp_path / "sidecar.json")
    writer, reader = SampleFile(path), SampleFile(path)
    writer.write(full_sample(taken_s=1.0, health="ok"))
    set_mtime_ns(path, 1_700_000_000_000_000_000)
    assert reader.latest().health == "ok"
    writer.write(full_sample(taken_s=1.0, health="down", error="metrics endpoint: refused"))
    set_mtime_ns(path, 1_700_000_000_000_000_000)  # a coarse clock gave the same timestamp
    assert reader.latest().health == "down"


# -- usable -----------------------------------------------------------------------------------

@pytest.mark.parametrize("sample,now,expected", [
    (full_sample(taken_s=10.0), 10.0, True),
    (full_sample(taken_s=10.0), 10.5, True),  # exactly max_age old
    (full_sample(taken_s=10.0), 10.500001, False),  # older than max_age
    (full_sample(taken_s=10.0), 9.9, False),  # from the future: not trusted
    (full_sample(taken_s=10.0, health="degraded"), 10.1, False),
    (full_sample(taken_s=10.0, health="down"), 10.1, False),
    (full_sample(taken_s=float("nan")), 10.0, False),
    (None, 10.0, False),
], ids=["fresh", "at-max-age", "stale", "future", "degraded", "down", "nan", "none"])
def test_usable(sample, now, expected):
    assert usable(sample, now, max_age_s=0.5) is expected
