"""Executors that run a batch on another Triton model through BLS (business logic
scripting: ``pb_utils.InferenceRequest(...).exec()`` from inside this model)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

from .executors import pad_batch
from .tensor_contract import (Contract, GenericRequest, batch_groups, batch_inputs,
                              split_outputs)


def _exec(model_name: str, inputs: list, outputs: list[str]):
    response = pb_utils.InferenceRequest(model_name=model_name, inputs=inputs,
                                         requested_output_names=outputs).exec()
    if response.has_error():
        raise RuntimeError(f"BLS call to '{model_name}' failed: {response.error().message()}")
    return response


class BLSExecutor:
    """Runs a batch on another Triton model (by name) through BLS, as one padded request."""

    def __init__(self, model_name: str):
        self.model_name = model_name

    def run(self, sequences: Sequence[np.ndarray]) -> np.ndarray:
        response = _exec(self.model_name, [pb_utils.Tensor("INPUT_IDS", pad_batch(sequences))],
                         ["EMBEDDING"])
        return pb_utils.get_output_tensor_by_name(response, "EMBEDDING").as_numpy()


class GenericBLSExecutor:
    """Runs a batch on another Triton model through BLS under any tensor contract
    (``tensor_contract``): sequences padded, other inputs concatenated, the outputs split
    back into one set per request."""

    def __init__(self, model_name: str, contract: Contract):
        self.model_name = model_name
        self.contract = contract

    def run(self, requests: Sequence[GenericRequest]) -> list[dict[str, np.ndarray]]:
        """One inner call for each group of requests that can share a batch
        (``batch_groups``: a request with an optional input the others lack, or with rows of
        another shape, runs beside them, not in their batch); outputs in request order."""
        outputs: list = [None] * len(requests)
        for group in batch_groups(requests):
            for i, out in zip(group, self._run_one([requests[i] for i in group])):
                outputs[i] = out
        return outputs

    def _run_one(self, requests: Sequence[GenericRequest]) -> list[dict[str, np.ndarray]]:
        inputs = batch_inputs(self.contract, requests)
        response = _exec(self.model_name,
                         [pb_utils.Tensor(name, value) for name, value in inputs.items()],
                         self.contract.output_names)
        outputs = {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy()
                   for name in self.contract.output_names}
        return split_outputs(outputs, len(requests))
