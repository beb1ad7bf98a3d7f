"""Facts a test waits for instead of sleeping: a held EMULATED device, and what Triton
itself counts for a model.

``DeviceGate`` is the test side of the ``device_gate_file`` hook (executors.DeviceGate):
closed, the model's device holds each batch at its door and says so; a test that has seen a
batch held knows the device is busy, and ``triton_pending`` (Triton's own
``nv_inference_pending_request_count``) tells it how many requests queue behind it. Open
the gate, and the counts that follow are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.triton_metrics import ModelCounters, fetch_url, parse_metrics
from tests.device_gate import DeviceGate
from tests.eventually import HANG_GUARD_S, eventually

__all__ = ["DeviceGate", "TritonCounts", "triton_counts", "triton_pending", "wait_pending"]


@dataclass(frozen=True)
class TritonCounts:
    """Triton's own counters for one model (summed over versions and instances)."""

    success: float
    failure: float
    canceled: float  # failures with reason CANCELED (Triton's queue answered them)
    executions: float  # execute() calls
    inferences: float  # requests handed to execute() calls that have returned
    pending: float  # requests no execute() call has taken yet

    def __sub__(self, other: "TritonCounts") -> "TritonCounts":
        return TritonCounts(*(a - b for a, b in zip(self._values(), other._values())))

    def _values(self) -> tuple[float, ...]:
        return (self.success, self.failure, self.canceled, self.executions, self.inferences,
                self.pending)


def triton_counts(metrics_url: str, model: str) -> TritonCounts:
    """Triton's ``nv_inference_*`` counters of ``model`` now (as the sidecar reads them)."""
    c = parse_metrics(fetch_url(metrics_url, 5.0)).models.get(model, ModelCounters())
    return TritonCounts(c.success, c.failure, c.canceled, c.executions, c.inferences, c.pending)


def triton_pending(metrics_url: str, model: str) -> float:
    """Requests of ``model`` Triton holds that no ``execute()`` call has taken yet."""
    return triton_counts(metrics_url, model).pending


def wait_pending(metrics_url: str, model: str, count: int,
                 hang_guard_s: float = HANG_GUARD_S) -> None:
    """Until Triton reports at least ``count`` requests of ``model`` pending."""
    eventually(lambda: triton_pending(metrics_url, model) >= count, hang_guard_s,
               what=f"Triton held {count} request(s) of {model} pending")
