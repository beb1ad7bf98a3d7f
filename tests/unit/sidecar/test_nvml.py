"""NvmlReader: the real one on this GPU-less machine, and its unit conversions against a
fake ``pynvml`` module (so they are checked without a GPU)."""

from __future__ import annotations

import glob
import math
import sys
import types

import pytest

from sidecar.nvml import NvmlReader, NvmlUnavailable, detect_device_name

no_gpu_here = pytest.mark.skipif(bool(glob.glob("/dev/nvidia[0-9]*")),
                                 reason="this machine has an NVIDIA device")


# -- the real reader where there is no NVML -----------------------------------------------

@no_gpu_here
def test_real_reader_open_raises_nvml_unavailable():
    reader = NvmlReader()
    with pytest.raises(NvmlUnavailable, match="NVML"):
        reader.open()
    reader.close()  # closing a reader that never opened is harmless


@no_gpu_here
def test_real_detect_device_name_is_none():
    assert detect_device_name() is None


def test_read_before_open_raises_nvml_unavailable():
    with pytest.raises(NvmlUnavailable, match="not open"):
        NvmlReader().read()


def test_nvml_unavailable_is_a_runtime_error():
    assert issubclass(NvmlUnavailable, RuntimeError)


# -- against a fake pynvml -------------------------------------------------------------------

class NVMLError(Exception):
    pass


def fake_pynvml(name=b"NVIDIA H200", power_mw=250_500, init_error=None, shutdown_error=None):
    calls = []
    mod = types.ModuleType("pynvml")
    mod.NVML_CLOCK_SM = 1

    def nvmlInit():  # noqa: N802 - pynvml's names
        calls.append("init")
        if init_error:
            raise init_error

    def nvmlDeviceGetHandleByIndex(i):  # noqa: N802
        calls.append(("handle", i))
        return f"handle{i}"

    def nvmlDeviceGetName(h):  # noqa: N802
        return name

    def nvmlDeviceGetUtilizationRates(h):  # noqa: N802
        return types.SimpleNamespace(gpu=87, memory=31)

    def nvmlDeviceGetMemoryInfo(h):  # noqa: N802
        return types.SimpleNamespace(used=12 * 2**30, total=141 * 2**30, free=129 * 2**30)

    def nvmlDeviceGetPowerUsage(h):  # noqa: N802
        if power_mw is None:
            raise NVMLError("Not Supported")
        return power_mw

    def nvmlDeviceGetClockInfo(h, which):  # noqa: N802
        assert which == mod.NVML_CLOCK_SM
        return 1980

    def nvmlShutdown():  # noqa: N802
        calls.append("shutdown")
        if shutdown_error:
            raise shutdown_error

    for fn in (nvmlInit, nvmlDeviceGetHandleByIndex, nvmlDeviceGetName,
               nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo, nvmlDeviceGetPowerUsage,
               nvmlDeviceGetClockInfo, nvmlShutdown):
        setattr(mod, fn.__name__, fn)
    mod.calls = calls
    return mod


def test_open_returns_decoded_name_of_the_chosen_device(monkeypatch):
    mod = fake_pynvml(name=b"NVIDIA H200")
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    reader = NvmlReader(device_index=2)
    assert reader.open() == "NVIDIA H200"
    assert reader.device_name == "NVIDIA H200"
    assert mod.calls == ["init", ("handle", 2)]


def test_open_accepts_a_str_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(name="NVIDIA A100-SXM4-80GB"))
    assert NvmlReader().open() == "NVIDIA A100-SXM4-80GB"


def test_read_converts_units(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(power_mw=250_500))
    reader = NvmlReader()
    reader.open()
    s = reader.read()
    assert s.device_name == "NVIDIA H200"
    assert s.gpu_utilization == pytest.approx(0.87)  # percent -> fraction
    assert s.memory_utilization == pytest.approx(0.31)
    assert s.sm_clock_mhz == 1980.0
    assert s.memory_used_bytes == 12 * 2**30
    assert s.memory_total_bytes == 141 * 2**30
    assert s.power_w == pytest.approx(250.5)  # milliwatts -> watts


def test_read_without_power_reporting_gives_nan_power(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(power_mw=None))
    reader = NvmlReader()
    reader.open()
    s = reader.read()
    assert math.isnan(s.power_w)
    assert s.gpu_utilization == pytest.approx(0.87)


def test_init_failure_becomes_nvml_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml",
                        fake_pynvml(init_error=NVMLError("Driver Not Loaded")))
    reader = NvmlReader()
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        reader.open()
    with pytest.raises(NvmlUnavailable):
        reader.read()


def test_close_shuts_down_once_and_swallows_shutdown_errors(monkeypatch):
    mod = fake_pynvml(shutdown_error=NVMLError("Uninitialized"))
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    reader = NvmlReader()
    reader.open()
    reader.close()
    reader.close()
    assert mod.calls.count("shutdown") == 1
    with pytest.raises(NvmlUnavailable):
        reader.read()  # closed: must be reopened first


def test_detect_device_name_with_nvml_opens_and_shuts_down(monkeypatch):
    mod = fake_pynvml(name=b"NVIDIA L4")
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    assert detect_device_name() == "NVIDIA L4"
    assert mod.calls[-1] == "shutdown"


# -- which GPU: the model instance's, not always device 0 ------------------------------------------

def test_detect_device_name_reads_the_given_index(monkeypatch):
    mod = fake_pynvml(name=b"NVIDIA L40S")
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    assert detect_device_name(3) == "NVIDIA L40S"
    assert ("handle", 3) in mod.calls


def test_detect_device_name_without_a_gpu_index_never_touches_nvml(monkeypatch):
    mod = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    assert detect_device_name(None) is None
    assert mod.calls == []


def test_reader_without_an_index_is_unavailable_without_touching_nvml(monkeypatch):
    mod = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    reader = NvmlReader(device_index=None)
    with pytest.raises(NvmlUnavailable, match="no GPU"):
        reader.open()
    reader.close()
    assert mod.calls == []


@pytest.mark.parametrize("index", [-1, 1.0, "0", True])
def test_reader_refuses_a_bad_index(index):
    with pytest.raises(ValueError, match=f"device_index.*{index!r}"):
        NvmlReader(device_index=index)
