"""``calibrate table --url``: the cost table of the user's own inner model, measured
through its Triton endpoint.

The plugin sends its inner model one request per batch, a padded ``[batch, length]``
tensor of token ids (its BLS call). This sends the same: one request of shape ``[b, L]``
per run, to the named model over HTTP or gRPC (tritonclient), on the grid of the base
profile (``scheduler.max_batch_size`` capped at the model's own ``max_batch_size``,
``calibration.max_sequence_length``, ``scheduler.max_batch_tokens``) or the one given,
timed by ``triton_backend.device_calibration.measure_cost_table`` (warm-ups, then the
median of the repeats, within a wall-clock budget). The input is the model's only input,
or the one named; its data type comes from the model's config.

What it times is the round trip seen by a client: the model's compute plus the transport
of the request and its outputs. The plugin's BLS call skips the network, so a table
measured from another host reads dearer than the device; measure from the server's host
(the source line says where it was measured). The scheduler refits the table online.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from scheduler_core.profile import HardwareProfile
from triton_backend.device_calibration import (calibration_grid, measure_cost_table,
                                               random_sequences)

Row = tuple[int, int, float]


class InputSpecError(ValueError):
    """The model's inputs do not admit one ``[batch, length]`` tensor as asked."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str  # Triton's wire name: INT64, INT32, FP32 ...
    max_batch_size: int  # the model's; 0: it takes no batch dimension (the shape is given whole)


def _client(url: str, protocol: str):
    if protocol == "grpc":
        import tritonclient.grpc as client  # noqa: PLC0415 - only the live commands need it
    else:
        import tritonclient.http as client  # noqa: PLC0415
    return client


def model_config(conn: Any, model: str, protocol: str) -> dict:
    """The model's config in Triton's JSON form, over either protocol."""
    if protocol == "grpc":
        return conn.get_model_config(model, as_json=True)["config"]
    return conn.get_model_config(model)


def input_spec(config: Mapping[str, Any], input_name: str | None = None) -> InputSpec:
    """The input that takes the ``[batch, length]`` token tensor: the one named, else the
    model's only input. Its shape must leave exactly one variable dimension (the length)
    besides the batch."""
    inputs = list(config.get("input") or [])
    name = config.get("name", "the model")
    if input_name:
        chosen = [i for i in inputs if i.get("name") == input_name]
        if not chosen:
            raise InputSpecError(f"{name} has no input {input_name!r} (it has "
                                 f"{', '.join(i.get('name', '?') for i in inputs) or 'none'})")
    elif len(inputs) != 1:
        raise InputSpecError(f"{name} has {len(inputs)} inputs "
                             f"({', '.join(i.get('name', '?') for i in inputs)}): name the "
                             "token input with --input-name")
    else:
        chosen = inputs
    spec = chosen[0]
    max_batch = int(config.get("max_batch_size") or 0)
    dims = [int(d) for d in spec.get("dims") or []]
    if spec.get("reshape"):
        dims = [int(d) for d in spec["reshape"].get("shape") or []]
    wanted = [-1] if max_batch > 0 else [-1, -1]
    if dims != wanted:
        raise InputSpecError(
            f"{name}: input {spec.get('name')!r} has dims {dims} with max_batch_size "
            f"{max_batch}; a [batch, length] token tensor needs dims {wanted}")
    return InputSpec(spec["name"], str(spec.get("data_type", "TYPE_INT64")).removeprefix("TYPE_"),
                     max_batch)


def remote_runner(conn: Any, client: Any, model: str, spec: InputSpec
                  ) -> Callable[[Sequence[np.ndarray]], Any]:
    """``run(sequences)``: one inference request of the sequences as one ``[b, L]`` tensor."""
    from tritonclient.utils import triton_to_np_dtype  # noqa: PLC0415

    dtype = triton_to_np_dtype(spec.datatype)

    def run(sequences: Sequence[np.ndarray]) -> Any:
        batch = np.stack(sequences).astype(dtype)
        tensor = client.InferInput(spec.name, list(batch.shape), spec.datatype)
        tensor.set_data_from_numpy(batch)
        return conn.infer(model, [tensor])

    return run


def grid(profile: HardwareProfile, model_max_batch: int, batch_sizes: Sequence[int] | None,
         lengths: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """(batch sizes, lengths): the ones given, else the profile's calibration grid; batch
    sizes above the model's own ``max_batch_size`` are left out (Triton would refuse)."""
    sched = profile.scheduler
    default_b, default_l = calibration_grid(sched.max_batch_size,
                                            profile.calibration.max_sequence_length,
                                            sched.max_batch_tokens)
    batches = sorted(set(batch_sizes or default_b))
    if model_max_batch > 0:
        batches = [b for b in batches if b <= model_max_batch]
    if not batches:
        raise InputSpecError(f"no batch size of the grid fits the model's max_batch_size "
                             f"{model_max_batch}")
    return batches, sorted(set(lengths or default_l))


def measure_remote_table(profile: HardwareProfile, url: str, model: str, protocol: str,
                         budget_s: float, input_name: str | None = None,
                         batch_sizes: Sequence[int] | None = None,
                         lengths: Sequence[int] | None = None) -> tuple[list[Row], str]:
    """(rows, source note): ``model`` at ``url`` timed over the grid within ``budget_s``."""
    client = _client(url, protocol)
    conn = client.InferenceServerClient(url)
    try:
        spec = input_spec(model_config(conn, model, protocol), input_name)
        batches, lens = grid(profile, spec.max_batch_size, batch_sizes, lengths)
        run = remote_runner(conn, client, model, spec)
        run(random_sequences(batches[0], lens[0]))  # connection set-up and first-call costs
        result = measure_cost_table(run, batches, lens, budget_s, clock=time.perf_counter,
                                    max_batch_tokens=profile.scheduler.max_batch_tokens)
    finally:
        conn.close()
    if not result.rows:
        raise ValueError(f"no cell of the grid fit the {budget_s:g} s budget")
    rows = [(r["batch"], r["length"], r["ms"]) for r in result.rows]
    note = "" if result.complete else f", {len(result.skipped)} cells cut by the budget"
    return rows, (f"measured by explicit-batching calibrate table through {protocol} "
                  f"{url} (model {model}, input {spec.name} {spec.datatype}; a client's "
                  f"round trip){note}")
