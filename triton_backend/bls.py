"""Executors that run a batch on another Triton model through BLS (business logic
scripting: ``pb_utils.InferenceRequest(...).exec()`` from inside this model).

Each inner call carries a Triton timeout derived from its batch's deadlines
(``call_timeout_s``). Triton enforces a request's timeout only while it waits in the inner
model's queue, and only where that model's queue policy has ``allow_timeout_override``
(docs/reliability.md); a call that hangs inside the inner model is the watchdog's
(``watchdog.Watchdog``)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

from .executors import pad_batch
from .tensor_contract import (Contract, GenericRequest, batch_groups, batch_inputs,
                              split_outputs)


def call_timeout_s(latest_deadline_s: float, now_s: float, estimated_ms: float,
                   bound_s: float) -> float:
    """The inner call's timeout: until the batch's latest deadline (no member can use an
    answer after it), but at least the batch's estimate (a batch run late, under
    ``infeasible_policy: serve_late``, still gets its run) and at most the watchdog's
    bound (past it the watchdog has answered every member)."""
    return min(bound_s, max(latest_deadline_s - now_s, estimated_ms / 1000.0))


def _timeout_us(timeout_s: float) -> int:
    """Triton's timeout in whole microseconds, rounded up (0 would mean none)."""
    return max(1, math.ceil(timeout_s * 1e6)) if timeout_s > 0 else 0


def _exec(model_name: str, inputs: list, outputs: list[str], timeout_s: float):
    response = pb_utils.InferenceRequest(model_name=model_name, inputs=inputs,
                                         requested_output_names=outputs,
                                         timeout=_timeout_us(timeout_s)).exec()
    if response.has_error():
        raise RuntimeError(f"BLS call to '{model_name}' failed: {response.error().message()}")
    return response


class BLSExecutor:
    """Runs a batch on another Triton model (by name) through BLS, as one padded request."""

    def __init__(self, model_name: str):
        self.model_name = model_name

    def run(self, sequences: Sequence[np.ndarray], timeout_s: float = 0.0) -> np.ndarray:
        """``timeout_s``: the inner call's Triton timeout (``call_timeout_s``; 0: none)."""
        response = _exec(self.model_name, [pb_utils.Tensor("INPUT_IDS", pad_batch(sequences))],
                         ["EMBEDDING"], timeout_s)
        return pb_utils.get_output_tensor_by_name(response, "EMBEDDING").as_numpy()


class GenericBLSExecutor:
    """Runs a batch on another Triton model through BLS under any tensor contract
    (``tensor_contract``): sequences padded, other inputs concatenated, the outputs split
    back into one set per request."""

    def __init__(self, model_name: str, contract: Contract):
        self.model_name = model_name
        self.contract = contract

    def run(self, requests: Sequence[GenericRequest], timeout_s: float = 0.0
            ) -> list[dict[str, np.ndarray]]:
        """One inner call for each group of requests that can share a batch
        (``batch_groups``: a request with an optional input the others lack, or with rows of
        another shape, runs beside them, not in their batch); outputs in request order.
        Every inner call carries ``timeout_s`` (``call_timeout_s``; 0: none)."""
        outputs: list = [None] * len(requests)
        for group in batch_groups(requests):
            for i, out in zip(group, self._run_one([requests[i] for i in group], timeout_s)):
                outputs[i] = out
        return outputs

    def _run_one(self, requests: Sequence[GenericRequest], timeout_s: float
                 ) -> list[dict[str, np.ndarray]]:
        inputs = batch_inputs(self.contract, requests)
        response = _exec(self.model_name,
                         [pb_utils.Tensor(name, value) for name, value in inputs.items()],
                         self.contract.output_names, timeout_s)
        outputs = {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy()
                   for name in self.contract.output_names}
        return split_outputs(outputs, len(requests))
