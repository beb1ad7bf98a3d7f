"""NVML through ``pynvml`` (the ``nvidia-ml-py`` package). Absent NVML is a normal state:
these machines have no GPU, and the controller then uses the executor's busy fraction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NvmlSample:
    device_name: str
    gpu_utilization: float  # 0..1, share of the last sample period a kernel was running
    memory_utilization: float  # 0..1, share of time device memory was read or written
    sm_clock_mhz: float
    memory_used_bytes: float
    memory_total_bytes: float
    power_w: float


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no driver, no library, no device)."""


class NvmlReader:
    """Reads one device: NVML index ``device_index`` (the model instance's GPU, see
    ``triton_backend.placement``; None for an instance that runs on the CPU, whose
    ``open()`` then always raises ``NvmlUnavailable``). ``open()`` raises
    ``NvmlUnavailable`` where NVML is absent; ``read()`` may raise (the driver can fail
    mid-run), and the caller retries."""

    def __init__(self, device_index: int | None = 0):
        if device_index is not None and (isinstance(device_index, bool)
                                         or not isinstance(device_index, int)
                                         or device_index < 0):
            raise ValueError(f"NVML device_index must be an integer >= 0 or None, "
                             f"got {device_index!r}")
        self.device_index = device_index
        self._nvml = None
        self._handle = None
        self.device_name = ""

    def open(self) -> str:
        if self.device_index is None:
            raise NvmlUnavailable("NVML not read: this model instance has no GPU")
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
            raise NvmlUnavailable(f"pynvml is not installed: {exc}") from None
        try:
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.device_index)
            name = pynvml.nvmlDeviceGetName(handle)
        except Exception as exc:  # pynvml raises NVMLError subclasses, by value
            raise NvmlUnavailable(f"NVML unavailable: {exc}") from None
        self._nvml, self._handle = pynvml, handle
        self.device_name = name.decode() if isinstance(name, bytes) else str(name)
        return self.device_name

    def read(self) -> NvmlSample:
        if self._handle is None:
            raise NvmlUnavailable("NVML is not open")
        nvml, h = self._nvml, self._handle
        util = nvml.nvmlDeviceGetUtilizationRates(h)
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        try:
            power_w = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        except Exception:  # not every board reports power
            power_w = float("nan")
        return NvmlSample(
            device_name=self.device_name,
            gpu_utilization=util.gpu / 100.0,
            memory_utilization=util.memory / 100.0,
            sm_clock_mhz=float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
            memory_used_bytes=float(mem.used),
            memory_total_bytes=float(mem.total),
            power_w=power_w,
        )

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = self._handle = None


def detect_device_name(index: int | None = 0) -> str | None:
    """The NVML name of GPU ``index`` (the model instance's GPU), or None where there is no
    NVML or ``index`` is None (used to pick a profile)."""
    if index is None:
        return None
    reader = NvmlReader(index)
    try:
        return reader.open()
    except NvmlUnavailable:
        return None
    finally:
        reader.close()
