"""The request contract of a plugin that fronts ANY Triton model (no Triton import).

The explicit model's own config names the tensors: the input that carries each request's
sequence (parameter ``sequence_input``; its last dimension is the request's length, the
cost the scheduler plans with), the optional SLA input (``SLA_MS``), every other input
(passed through to the inner model, batched along the first dimension) and the outputs
(requested from the inner model and returned per request, unchanged). The inner model is
called through BLS with one batch: the sequences padded to the longest with
``pad_value``, the other inputs concatenated; its outputs are split back along the first
dimension. The MiniLM/emulated contract (INPUT_IDS -> EMBEDDING) is one such
configuration; the in-process executors keep their own fixed one.

At load, ``check_inner_config`` compares the contract with the inner model's
``config.pbtxt``: every tensor the plugin sends or asks for must exist there with the same
data type and compatible dims, or the load is refused naming the mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np


from .request_decoding import RequestError, decode_sla

SLA_INPUT = "SLA_MS"
NUMPY_TYPES = {
    "TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32, "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16, "TYPE_INT32": np.int32, "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


class ContractError(ValueError):
    """The model config (or the inner model's) cannot serve this contract."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    data_type: str  # Triton's, e.g. "TYPE_INT32"
    dims: tuple[int, ...]  # without the batch dimension; -1 = variable
    optional: bool = False

    @property
    def numpy_type(self):
        return NUMPY_TYPES[self.data_type]


@dataclass(frozen=True)
class Contract:
    sequence: TensorSpec
    pass_through: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    pad_value: float = 0
    max_sequence_length: int = 512

    @classmethod
    def from_model_config(cls, config: Mapping[str, Any], params: Mapping[str, str]
                          ) -> "Contract":
        """From the explicit model's own config (the JSON Triton hands ``initialize``) and
        its parameters ``sequence_input``, ``pad_value`` and ``max_sequence_length``."""
        inputs = [_spec(t) for t in config.get("input", [])]
        outputs = tuple(_spec(t) for t in config.get("output", []))
        name = params.get("sequence_input", "") or "INPUT_IDS"
        by_name = {t.name: t for t in inputs}
        if name not in by_name:
            raise ContractError(f"parameter sequence_input={name!r} names no input of this "
                                f"model (inputs: {sorted(by_name)})")
        sequence = by_name[name]
        if sequence.data_type not in NUMPY_TYPES or sequence.numpy_type is np.object_:
            raise ContractError(f"sequence input {name!r} must be numeric, "
                                f"got {sequence.data_type}")
        if not outputs:
            raise ContractError("the model config declares no output")
        try:
            pad = float(params.get("pad_value", "") or 0)
            max_len = int(params.get("max_sequence_length", "") or 512)
        except ValueError as exc:
            raise ContractError(f"parameter pad_value / max_sequence_length: {exc}") from None
        if max_len < 1:
            raise ContractError(f"parameter max_sequence_length must be >= 1, got {max_len}")
        others = tuple(t for t in inputs if t.name not in (name, SLA_INPUT))
        return cls(sequence, others, outputs, pad, max_len)

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]


def _spec(t: Mapping[str, Any]) -> TensorSpec:
    return TensorSpec(str(t["name"]), str(t.get("data_type", "")),
                      tuple(int(d) for d in t.get("dims", [])), bool(t.get("optional", False)))


# -- one request ----------------------------------------------------------------------------

@dataclass(frozen=True)
class GenericRequest:
    sequence: np.ndarray  # 1-D, the model's dtype
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # each [1, ...]
    sla_ms: float | None = None
    timeout_ms: float = 0.0  # Triton's per-request timeout (0: none); intake hold enforces it

    @property
    def input_ids(self) -> np.ndarray:  # the name the adapter's queue uses
        return self.sequence


def decode_generic(contract: Contract, tensors: Mapping[str, np.ndarray | None],
                   parameters: Mapping[str, Any], timeout_us: int = 0) -> GenericRequest:
    """Validate one request: one sequence ([1, L] or [L]), every non-optional pass-through
    input with one row ([1, ...]) of its declared type, and the SLA (SLA_MS, ``sla_ms``, or
    Triton's timeout, as for the MiniLM contract)."""
    spec = contract.sequence
    seq = tensors.get(spec.name)
    if seq is None:
        raise RequestError(f"missing required input {spec.name}")
    if seq.ndim == 2 and seq.shape[0] == 1:
        seq = seq[0]
    if seq.ndim != 1:
        raise RequestError(f"{spec.name} must hold one sequence (shape [1, L]), "
                           f"got shape {list(seq.shape)}")
    if seq.dtype != spec.numpy_type:
        raise RequestError(f"{spec.name} must be {spec.data_type[5:]}, got {seq.dtype}")
    if seq.size == 0:
        raise RequestError(f"{spec.name} is empty: a sequence needs at least one element")
    if seq.size > contract.max_sequence_length:
        raise RequestError(f"{spec.name} has {seq.size} elements; the limit is "
                           f"{contract.max_sequence_length}")
    extras = {}
    for t in contract.pass_through:
        value = tensors.get(t.name)
        if value is None:
            if t.optional:
                continue
            raise RequestError(f"missing required input {t.name}")
        if value.dtype != t.numpy_type:
            raise RequestError(f"{t.name} must be {t.data_type[5:]}, got {value.dtype}")
        if value.ndim == len(t.dims):  # sent without the batch dimension
            value = value[np.newaxis]
        if value.ndim != len(t.dims) + 1 or value.shape[0] != 1:
            raise RequestError(f"{t.name} must have shape [1, {', '.join(map(str, t.dims))}]"
                               f", got {list(value.shape)}")
        extras[t.name] = value
    return GenericRequest(np.ascontiguousarray(seq), extras,
                          decode_sla(tensors.get(SLA_INPUT), parameters, timeout_us),
                          timeout_us / 1000.0)


# -- one batch ------------------------------------------------------------------------------

def batch_groups(requests: Sequence[GenericRequest]) -> list[list[int]]:
    """The indices of ``requests`` split into groups that can share one inner batch: the
    same optional inputs present, each with the same row shape. In order of first
    appearance; one group when the batch is uniform (the common case)."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        key = tuple(sorted((name, value.shape[1:]) for name, value in r.extras.items()))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def batch_inputs(contract: Contract, requests: Sequence[GenericRequest]
                 ) -> dict[str, np.ndarray]:
    """The inner model's inputs for ``requests``: sequences padded to the longest,
    pass-through inputs concatenated along the first dimension (all requests must carry
    the same optional inputs, else ``RequestError``)."""
    spec = contract.sequence
    longest = max(r.sequence.size for r in requests)
    padded = np.full((len(requests), longest), contract.pad_value, dtype=spec.numpy_type)
    for i, r in enumerate(requests):
        padded[i, :r.sequence.size] = r.sequence
    batch = {spec.name: padded}
    for t in contract.pass_through:
        rows = [r.extras.get(t.name) for r in requests]
        present = [row is not None for row in rows]
        if not any(present):
            continue
        if not all(present):
            raise RequestError(f"optional input {t.name} sent by some requests of a batch "
                               "and not by others")
        shapes = {row.shape[1:] for row in rows}
        if len(shapes) > 1:
            raise RequestError(f"input {t.name}: rows of different shapes {sorted(shapes)} "
                               "cannot be batched")
        batch[t.name] = np.concatenate(rows, axis=0)
    return batch


def split_outputs(outputs: Mapping[str, np.ndarray], count: int
                  ) -> list[dict[str, np.ndarray]]:
    """Each request's rows of the inner model's outputs (first dimension), as [1, ...]."""
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != count:
            raise RequestError(f"inner model output {name} has shape {list(value.shape)}; "
                               f"expected {count} rows, one per request")
    return [{name: value[i:i + 1] for name, value in outputs.items()} for i in range(count)]


# -- the inner model's config ---------------------------------------------------------------

@dataclass(frozen=True)
class InnerConfig:
    """What the load-time check reads from an inner model's ``config.pbtxt``. An empty
    ``inputs`` or ``outputs`` (and ``max_batch_size`` 0 with both empty) means the file
    leaves them to Triton's auto-complete (ONNX, TensorRT, a Python model's
    ``auto_complete_config``): they are not known on disk and not checked."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int

    @property
    def auto_completed(self) -> bool:
        return not self.inputs and not self.outputs


def parse_inner_config(text: str) -> InnerConfig:
    """An inner model's ``config.pbtxt``, read as Triton reads it: protobuf text format into
    Triton 2.51's ``ModelConfig`` (any valid form: ``input [ {...}, {...} ]`` or repeated
    ``input {...}``, fields in any order, comments). Fields newer than 2.51's are skipped.
    Raises ``ContractError`` on text that is not a model config."""
    try:
        from google.protobuf import text_format  # noqa: PLC0415 - only models with BLS
        from . import model_config_pb2 as mc  # noqa: PLC0415
    except ImportError as exc:
        raise ContractError(f"the server's Python lacks protobuf ({exc}): pip install "
                            "protobuf, or set parameter inner_model_check=off") from None
    try:
        model = text_format.Parse(text, mc.ModelConfig(), allow_unknown_field=True)
    except text_format.ParseError as exc:
        raise ContractError(str(exc)) from None

    def specs(tensors) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(t.name, mc.DataType.Name(t.data_type), tuple(t.dims),
                                getattr(t, "optional", False)) for t in tensors)

    return InnerConfig(specs(model.input), specs(model.output), model.max_batch_size)


def _dims_fit(ours: tuple[int, ...], theirs: tuple[int, ...]) -> bool:
    return len(ours) == len(theirs) and all(a == b or -1 in (a, b) for a, b in zip(ours, theirs))


def _mismatches(kind: str, ours: Sequence[TensorSpec], theirs: Sequence[TensorSpec],
                inner_name: str) -> list[str]:
    """How ``ours`` (the tensors this model sends or asks for) differ from the inner
    model's ``theirs`` of the same kind: missing, another data type, other dims."""
    by_name = {t.name: t for t in theirs}
    problems = []
    for mine in ours:
        t = by_name.get(mine.name)
        if t is None:
            problems.append(f"{kind} {mine.name} is not an {kind} of '{inner_name}' "
                            f"(its {kind}s: {sorted(by_name)})")
        elif t.data_type != mine.data_type:
            problems.append(f"{kind} {mine.name} is {mine.data_type} here but {t.data_type} "
                            f"in '{inner_name}'")
        elif not _dims_fit(mine.dims, t.dims):
            problems.append(f"{kind} {mine.name} has dims {list(mine.dims)} here but "
                            f"{list(t.dims)} in '{inner_name}'")
    return problems


def check_inner_config(contract: Contract, inner_name: str, config_text: str,
                       max_batch_size: int = 1) -> list[str]:
    """Every mismatch between this contract and the inner model's config (empty: fits).
    The inner model receives batches of up to ``max_batch_size`` requests (the profile's
    ``scheduler.max_batch_size``): its own ``max_batch_size`` must hold them, the sequence
    as [-1] (or a fixed length) and each pass-through input with our dims. What the file
    leaves to Triton's auto-complete is not checked (``InnerConfig``)."""
    inner = parse_inner_config(config_text)
    problems = []
    if inner.max_batch_size < max_batch_size and not (
            inner.auto_completed and inner.max_batch_size == 0):
        problems.append(f"inner model '{inner_name}' has max_batch_size "
                        f"{inner.max_batch_size}, but this model sends it batches of up to "
                        f"{max_batch_size} (scheduler.max_batch_size): raise its "
                        "max_batch_size to that, or lower scheduler.max_batch_size")
    ours_in = (contract.sequence, *contract.pass_through)
    if inner.inputs:
        problems += _mismatches("input", ours_in, inner.inputs, inner_name)
    declared = {s.name for s in ours_in}
    for t in inner.inputs:
        if not t.optional and t.name not in declared:
            problems.append(f"'{inner_name}' requires input {t.name}, which this model does "
                            "not declare")
    if inner.outputs:
        problems += _mismatches("output", contract.outputs, inner.outputs, inner_name)
    return problems
