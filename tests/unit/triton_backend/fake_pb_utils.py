"""A fake ``triton_python_backend_utils`` for the adapter's unit tests (no tritonserver).

``conftest.py`` in this folder installs this file as ``sys.modules[
"triton_python_backend_utils"]`` before any adapter module (``explicit_model``,
``runner``, ``answers`` ...) is imported, so they bind to it.

It mirrors what the adapter uses of python_backend r24.10: ``InferenceResponse``,
``TritonError`` (codes as class attributes, ``message()``/``code()``), ``Tensor``,
``get_input_tensor_by_name``/``get_output_tensor_by_name``,
``TRITONSERVER_RESPONSE_COMPLETE_FINAL``, ``Logger``, ``TritonModelException``,
``MetricFamily``/``Metric``, ``triton_string_to_numpy``, ``is_model_ready`` and
``InferenceRequest(...).exec()`` (BLS; answered by ``bls_handler``, NOT_FOUND by default).
Where the real one refuses (a second response of a non-decoupled request, a send after the
final flag, a counter decremented, a histogram without buckets), this one refuses too.

Test side (not in the real module): ``FakeRequest``/``FakeSender``, which record every
answer; ``answers()``, the answers one request got from its sender and from execute()'s
returned list together; ``metric_value()``, what a metric series holds; ``LOG``; ``reset()``.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Sequence

import numpy as np

from triton_backend.tensor_contract import NUMPY_TYPES

FAKE = True  # marks this module (conftest checks it is the one installed)

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

_lock = threading.Lock()


class TritonModelException(Exception):
    """What the real stub raises for a model error (and initialize() raises to refuse)."""


class TritonError:
    """An error carried by a response (not an exception, as in the real module)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL):
        self._message = str(message)
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {CODE_NAMES.get(self._code, self._code)})"


CODE_NAMES = {v: k for k, v in vars(TritonError).items() if k.isupper()}


class Tensor:
    def __init__(self, name: str, value: np.ndarray):
        if not isinstance(value, np.ndarray):
            raise TritonModelException(f"Tensor {name!r}: a numpy array is required, "
                                       f"got {type(value).__name__}")
        self._name = name
        self._value = value

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._value

    def shape(self) -> list[int]:
        return list(self._value.shape)

    def is_cpu(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._value.shape)}, {self._value.dtype})"


class InferenceResponse:
    def __init__(self, output_tensors: Sequence[Tensor] | None = None,
                 error: TritonError | None = None, parameters: Any = None):
        if output_tensors is None:
            output_tensors = []
        if not all(isinstance(t, Tensor) for t in output_tensors):
            raise TritonModelException("output_tensors must be pb_utils.Tensor objects")
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException("error must be a pb_utils.TritonError")
        self._tensors = list(output_tensors)
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return list(self._tensors)

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def __repr__(self) -> str:
        return (f"InferenceResponse(error={self._error!r})" if self._error is not None
                else f"InferenceResponse({self._tensors!r})")


def get_input_tensor_by_name(request, name: str) -> Tensor | None:
    for tensor in request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


_NUMPY_TYPES = NUMPY_TYPES  # the real mapping Triton's config names use


def triton_string_to_numpy(type_string: str):
    return _NUMPY_TYPES.get(type_string)


# -- logging ----------------------------------------------------------------------------
LOG: list[tuple[str, str]] = []  # (level, message), every level


class Logger:
    @staticmethod
    def _add(level: str, message: str) -> None:
        with _lock:
            LOG.append((level, str(message)))

    @staticmethod
    def log_info(message: str) -> None:
        Logger._add("info", message)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger._add("warn", message)

    @staticmethod
    def log_error(message: str) -> None:
        Logger._add("error", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger._add("verbose", message)

    @staticmethod
    def log(message: str, level: int = 0) -> None:
        Logger._add(str(level), message)


def logged(level: str) -> list[str]:
    with _lock:
        return [m for lv, m in LOG if lv == level]


# -- metrics ----------------------------------------------------------------------------
FAMILIES: list["MetricFamily"] = []  # every family created since the last reset()


class Metric:
    def __init__(self, family: "MetricFamily", labels: dict, buckets: list | None):
        self.family = family
        self.labels = dict(labels)
        self.buckets = buckets
        self._value = 0.0
        self.observations: list[float] = []

    def increment(self, value: float) -> None:
        if self.family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("a histogram metric has no increment()")
        if self.family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be decremented")
        with _lock:
            self._value += value

    def set(self, value: float) -> None:
        if self.family.kind != MetricFamily.GAUGE:
            raise TritonModelException("only a gauge metric can be set")
        with _lock:
            self._value = float(value)

    def observe(self, value: float) -> None:
        if self.family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only a histogram metric can observe")
        with _lock:
            self.observations.append(float(value))

    def value(self) -> float:
        if self.family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("a histogram metric has no single value")
        with _lock:
            return self._value


class MetricFamily:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int):
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(f"unknown metric kind {kind!r}")
        self.name = name
        self.description = description
        self.kind = kind
        self.metrics: list[Metric] = []
        with _lock:
            FAMILIES.append(self)

    def Metric(self, labels: dict | None = None, buckets: list | None = None):  # noqa: N802
        if (buckets is None) == (self.kind == self.HISTOGRAM):
            raise TritonModelException(
                "buckets are required for a histogram and refused for any other kind")
        metric = Metric(self, labels or {}, buckets)
        with _lock:
            self.metrics.append(metric)
        return metric


def metric_series(name: str, **labels: str) -> list[Metric]:
    """The series of family ``name`` whose labels include ``labels``."""
    with _lock:
        families = [f for f in FAMILIES if f.name == name]
    return [m for f in families for m in f.metrics
            if all(m.labels.get(k) == v for k, v in labels.items())]


def metric_value(name: str, **labels: str) -> float:
    """The summed value of family ``name``'s series whose labels include ``labels``."""
    return sum(m.value() for m in metric_series(name, **labels))


# -- BLS --------------------------------------------------------------------------------
READY_MODELS: set[str] = set()
# Answers a BLS request: (InferenceRequest) -> InferenceResponse; None: NOT_FOUND.
bls_handler: Callable[["InferenceRequest"], InferenceResponse] | None = None


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return model_name in READY_MODELS


class InferenceRequest:
    """A BLS request (``exec()`` answers it through ``bls_handler``)."""

    def __init__(self, model_name: str, inputs: Sequence[Tensor] = (),
                 requested_output_names: Sequence[str] = (), request_id: str = "",
                 correlation_id: int = 0, model_version: int = -1, flags: int = 0,
                 timeout: int = 0, parameters: Any = None, **_ignored):
        self.model_name = model_name
        self._inputs = list(inputs)
        self.requested_output_names = list(requested_output_names)
        self._request_id = request_id
        self._timeout = timeout
        self._parameters = parameters

    def inputs(self) -> list[Tensor]:
        return list(self._inputs)

    def request_id(self) -> str:
        return self._request_id

    def timeout(self) -> int:
        return self._timeout

    def exec(self, decoupled: bool = False) -> InferenceResponse:
        handler = bls_handler
        if handler is None:
            return InferenceResponse(error=TritonError(
                f"Failed for execute the inference request. Model '{self.model_name}' is "
                "not ready.", TritonError.NOT_FOUND))
        return handler(self)


# -- the requests Triton hands execute() (test side) --------------------------------------
class FakeSender:
    """A non-decoupled request's response sender: records every send (also the refused
    ones), and refuses, as the real one does, a second response or a send after the final
    flag."""

    def __init__(self):
        self.sends: list[tuple[Any, int]] = []
        self._lock = threading.Lock()
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        with self._lock:
            self.sends.append((response, flags))
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed.")
            if response is not None and len(self.sends) > 1:
                raise TritonModelException(
                    "Non-decoupled model cannot send more than one response.")
            if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True


class FakeRequest:
    """One request as execute() receives it: one sequence ``ids`` (INPUT_IDS [1, L] INT64;
    an ndarray is passed as is; None: no INPUT_IDS), optional SLA_MS ``sla_ms`` ([1, 1]
    FP32), request parameters ``params`` and Triton's ``timeout_us``. Set ``cancelled`` to
    say that its client cancelled it; ``cancel_checks`` counts the is_cancelled() calls."""

    def __init__(self, ids: Sequence[int] | np.ndarray | None, sla_ms: float | None = None,
                 params: dict | None = None, timeout_us: int = 0, request_id: str = "",
                 inputs: Sequence[Tensor] | None = None):
        tensors = []
        if ids is not None:
            value = ids if isinstance(ids, np.ndarray) else np.asarray(
                ids, dtype=np.int64).reshape(1, -1)
            tensors.append(Tensor("INPUT_IDS", value))
        if sla_ms is not None:
            tensors.append(Tensor("SLA_MS", np.array([[sla_ms]], dtype=np.float32)))
        self._inputs = list(inputs) if inputs is not None else tensors
        self.ids = None if ids is None else tuple(np.asarray(ids).reshape(-1).tolist())
        self._params = json.dumps(params) if params else "{}"
        self._timeout_us = int(timeout_us)
        self._request_id = request_id
        self.cancelled = False
        self.cancel_checks = 0
        self.sender = FakeSender()

    def inputs(self) -> list[Tensor]:
        return list(self._inputs)

    def request_id(self) -> str:
        return self._request_id

    def parameters(self) -> str:
        return self._params

    def timeout(self) -> int:
        return self._timeout_us

    def is_cancelled(self) -> bool:
        self.cancel_checks += 1
        return self.cancelled

    def get_response_sender(self) -> FakeSender:
        return self.sender

    def __repr__(self) -> str:
        return f"FakeRequest(ids={self.ids}, cancelled={self.cancelled})"


def answers(request: FakeRequest, returned: Sequence | None = None, index: int = -1) -> list:
    """Every answer ``request`` got: each send on its sender (final or not, refused or
    not) and, when ``returned`` (execute()'s list) and ``index`` (its place in the call)
    are given, a non-None slot of that list. A correct adapter gives exactly one, final."""
    got = [response if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL else ("NOT FINAL", response)
           for response, flags in list(request.sender.sends)]
    if returned is not None and returned[index] is not None:
        got.append(returned[index])
    return got


def answered(requests: Sequence[FakeRequest]) -> bool:
    """Whether every request has at least one answer through its sender."""
    return all(r.sender.sends for r in requests)


def error_code(response: InferenceResponse) -> int | None:
    return response.error().code() if response.has_error() else None


def reset() -> None:
    """Forget every metric family, log line and BLS setting (between tests)."""
    global bls_handler
    with _lock:
        FAMILIES.clear()
        LOG.clear()
        READY_MODELS.clear()
    bls_handler = None
