"""The test side of the EMULATED device's gate (model parameter ``device_gate_file``,
``triton_backend.executors.DeviceGate``): closed, the device holds each batch at its door
and counts it in ``<file>.held``; a test that has seen a batch held knows the device is
busy, so what it sends next queues for certain. Used by the unit tests (an ExplicitModel
in process) and the integration tests (a real server) alike."""

from __future__ import annotations

import contextlib
import os

from tests.eventually import HANG_GUARD_S, eventually
from triton_backend.executors import DeviceGate as _DeviceSide

HELD_SUFFIX = _DeviceSide.HELD_SUFFIX  # the device writes it


class DeviceGate:
    """The gate file of one model's EMULATED device (model parameter ``device_gate_file``)."""

    def __init__(self, path: str):
        self.path = path

    def close(self) -> None:
        with open(self.path, "w", encoding="utf-8"):
            pass

    def open(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    def held(self) -> int:
        """How many batches the device has held at the gate so far (ever)."""
        try:
            with open(self.path + HELD_SUFFIX, encoding="utf-8") as fh:
                return sum(1 for _ in fh)
        except FileNotFoundError:
            return 0

    def wait_held(self, count: int, hang_guard_s: float = HANG_GUARD_S) -> None:
        """Until the device has held ``count`` batches in all."""
        eventually(lambda: self.held() >= count, hang_guard_s,
                   what=f"the device held {count} batch(es) at its gate (held {self.held()})")

    @contextlib.contextmanager
    def closed(self):
        """The gate closed for the block, and open again after it, whatever happens (a
        failing test must not leave the device held for the next one)."""
        self.close()
        try:
            yield self
        finally:
            self.open()


