"""Decode: a Triton request in, a queued request for the engine or an input error out.

``decode_call`` turns one ``execute()`` call's requests into ``QueuedRequest``s, each with
its ``answers.Ticket`` as the core's ``handle``, and sorts out the ones that end at once: a
malformed one (INVALID_ARG, naming the problem: a bad request fails alone), one whose
client ``timeout`` passed while it waited in Triton's queue, and the waker's own wake
requests. The pure parsing and validation is ``request_decoding`` (and
``tensor_contract`` for any other model's tensors); this module reads Triton's objects.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

from scheduler_core.request import QueuedRequest

from .answers import Ticket
from .executors import MINILM_MAX_SEQ_LEN, MINILM_VOCAB_SIZE
from .request_decoding import (MAX_SLA_MS, DecodedRequest, RequestError, decode_request,
                               decode_requests, decode_sla, in_range, sequence_of)
from .tensor_contract import decode_generic


@dataclass
class DecodedCall:
    """One call's requests, decoded: ``queued`` for the engine, and those that end now,
    each ticket with its message: ``invalid`` (INVALID_ARG), ``failed`` (decoding raised
    something other than an input error: INTERNAL, naming it) and ``expired`` (their client
    timeout passed in Triton's queue); ``timed``: the queued ones that carry a client
    timeout, as ``(ticket, deadline_s, timeout_ms)`` for ``timeout_guard.TimeoutGuard``;
    ``wakes``: the waker's requests (answered empty)."""

    queued: list[QueuedRequest] = field(default_factory=list)
    timed: list[tuple[Ticket, float, float]] = field(default_factory=list)
    invalid: list[tuple[Ticket, str]] = field(default_factory=list)
    failed: list[tuple[Ticket, str]] = field(default_factory=list)  # decode raised (INTERNAL)
    expired: list[tuple[Ticket, str]] = field(default_factory=list)
    expired_sla_ms: float = math.inf  # the smallest SLA among ``expired``
    wakes: int = 0

    @property
    def min_sla_ms(self) -> float:
        return min((q.sla_ms for q in self.queued), default=math.inf)


def decode_call(requests: Sequence, contract, tickets: Sequence[Ticket], arrival_s: float,
                now_s: float, default_sla_ms: float, ids: itertools.count,
                is_wake: Callable | None = None, fault_token: int = 0,
                read: Sequence[tuple] | None = None) -> DecodedCall:
    """Decode a call's ``requests`` (``tickets[i]`` is request i's, its outbox chosen by the
    driver), all arrived at ``arrival_s``. A request's deadline is its SLA (the profile's
    ``default_sla_ms`` if it gives none), or its client ``timeout`` if that is shorter
    (``request_decoding.decode_sla``); one whose timeout already passed at ``now_s``
    ends now. The call is decoded at once (``decode_all``: one token-range check).
    ``fault_token`` (a test hook, 0 = off): decoding a request holding this token id
    raises, as a bug or a broken input would. ``read``: the call's inputs as
    ``read_launchable`` read them (every request one to decode, in range: ``_decode_read``)."""
    call = DecodedCall()
    waited_s = now_s - arrival_s
    if read is not None:
        _decode_read(call, requests, tickets, read, waited_s, arrival_s, default_sla_ms, ids)
        return call
    slots = []  # the requests to decode: all but the waker's
    for i, request in enumerate(requests):
        if is_wake is not None and is_wake(request):
            call.wakes += 1
            tickets[i].answer(pb_utils.InferenceResponse())
        else:
            slots.append(i)
    try:
        decoded_all = decode_all([requests[i] for i in slots], contract)
        if fault_token:  # the test hook, off in service: no pass over the call then
            decoded_all = [_injected(d, fault_token) for d in decoded_all]
    except Exception:  # one request broke the call's decode: each alone, so it fails alone
        decoded_all = [_decode_alone(requests[i], contract, fault_token) for i in slots]
    for i, decoded in zip(slots, decoded_all):
        _sort(call, tickets[i], decoded, contract, waited_s, arrival_s, default_sla_ms, ids)
    return call


def _sort(call: DecodedCall, ticket: Ticket, decoded, contract, waited_s: float,
          arrival_s: float, default_sla_ms: float, ids: itertools.count) -> None:
    """One decoded request (or its error) into ``call``: invalid, failed, expired (its
    client timeout passed in the ``waited_s`` it waited), or queued (timed where it
    carries a timeout)."""
    if isinstance(decoded, RequestError):
        call.invalid.append((ticket, str(decoded)))
        return
    if isinstance(decoded, DecodeFailure):
        call.failed.append((ticket, str(decoded)))
        return
    timeout_ms = decoded.timeout_ms
    if timeout_ms and waited_s >= timeout_ms / 1000.0:
        if decoded.sla_ms is not None:  # its deadline, for the SLA floor
            call.expired_sla_ms = min(call.expired_sla_ms, decoded.sla_ms)
        call.expired.append((ticket, (
            f"request timed out: its timeout of {timeout_ms:.1f} ms passed while it "
            f"waited in Triton's queue (waited at least {waited_s * 1000.0:.1f} ms)")))
        return
    if timeout_ms:
        call.timed.append((ticket, arrival_s + timeout_ms / 1000.0, timeout_ms))
    ticket.input_ids = decoded.input_ids
    ticket.decoded = decoded if contract is not None else None
    call.queued.append(QueuedRequest(next(ids), int(decoded.input_ids.size), arrival_s,
                                     decoded.sla_ms or default_sla_ms, ticket))


def _decode_read(call: DecodedCall, requests: Sequence, tickets: Sequence[Ticket],
                 read: Sequence[tuple], waited_s: float, arrival_s: float,
                 default_sla_ms: float, ids: itertools.count) -> None:
    """``decode_call`` of a call ``read_launchable`` read (every sequence valid and in
    range). The usual request (no parameters, no client timeout, and no SLA_MS or one FP32
    value ``sla_value`` takes as it is) is queued in the loop, with no call: it runs on
    every launched call. Any other has its SLA decoded as ``decode_call`` decodes it
    (``decode_sla``, then ``_sort``)."""
    queued = call.queued
    for request, ticket, (sequence, sla_input) in zip(requests, tickets, read):
        try:
            text, timeout = request.parameters(), request.timeout()
            usual = not timeout and (not text or text == "{}") and (sla_input is None or (
                sla_input.size == 1 and sla_input.dtype is _FP32))
        except Exception:  # decoded below, which names what fails
            usual = False
        if usual:
            sla_ms = default_sla_ms if sla_input is None else sla_input.item()
            if 0.0 < sla_ms <= MAX_SLA_MS:
                ticket.input_ids = sequence
                queued.append(QueuedRequest(next(ids), sequence.size, arrival_s, sla_ms,
                                            ticket))
                continue
        try:  # its sequence is read and checked: only its SLA is left to decode
            parameters, timeout = request_parameters(request), timeout_us(request)
            decoded = DecodedRequest(sequence, decode_sla(sla_input, parameters, timeout),
                                     timeout / 1000.0)
        except RequestError as exc:
            decoded = exc
        except Exception as exc:
            decoded = _failure(exc)
        _sort(call, ticket, decoded, None, waited_s, arrival_s, default_sla_ms, ids)


class DecodeFailure(Exception):
    """Decoding one request raised something other than a ``RequestError``: a bug, or an
    object Triton handed over broken. Its message names the exception's type, never the
    request's content."""


def _injected(decoded, fault_token: int):
    """``decoded``, unless the test hook ``fault_token`` is in it: then decoding raises."""
    if (fault_token and not isinstance(decoded, RequestError)
            and fault_token in decoded.input_ids):
        raise RuntimeError(f"injected decode fault (decode_fault_token {fault_token})")
    return decoded


def _decode_alone(request, contract, fault_token: int = 0):
    """``decode`` of one request: the decoded request, its ``RequestError``, or a
    ``DecodeFailure`` naming what else it raised."""
    try:
        return _injected(decode(request, contract), fault_token)
    except RequestError as exc:
        return exc
    except Exception as exc:
        return _failure(exc)


def _failure(exc: Exception) -> DecodeFailure:
    """What decoding one request raised, other than a ``RequestError``, named by type."""
    return DecodeFailure(f"could not decode this request: {type(exc).__name__} while "
                         "reading its inputs (the rest of its call is served)")


def request_parameters(request) -> dict:
    """The request's parameters (``sla_ms`` ...); {} when none or unreadable."""
    text = request.parameters()
    try:
        return json.loads(text) if text and text != "{}" else {}
    except ValueError:
        return {}


def timeout_us(request) -> int:
    """Triton's per-request ``timeout`` in microseconds (0: none given)."""
    try:
        return int(request.timeout())
    except Exception:  # an older backend without the accessor: no timeout
        return 0


INPUT_IDS, SLA_MS = "INPUT_IDS", "SLA_MS"
_INT64, _FP32 = np.dtype(np.int64), np.dtype(np.float32)  # read_launchable's usual dtypes
_EMBEDDING_INPUTS = (INPUT_IDS, SLA_MS)  # what a request of that contract may carry


def input_array(request, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _arrays(request, names) -> dict:
    """``request``'s input arrays by name (None where absent), from one list of its
    tensors (one call to the stub, not one a name; it runs once per request of every
    call, so it builds no dict but the one it returns)."""
    arrays = dict.fromkeys(names)
    for tensor in request.inputs():
        name = tensor.name()
        if name in arrays:
            arrays[name] = tensor.as_numpy()
    return arrays


def _embedding_inputs(request) -> tuple:
    """What ``decode_request`` reads of a request of the INPUT_IDS -> EMBEDDING contract:
    INPUT_IDS, SLA_MS, its parameters and its timeout (us)."""
    arrays = _arrays(request, _EMBEDDING_INPUTS)
    return (arrays[INPUT_IDS], arrays[SLA_MS], request_parameters(request),
            timeout_us(request))


def decode(request, contract=None):
    """One request's inputs, validated: ``DecodedRequest`` for the INPUT_IDS -> EMBEDDING
    contract (``contract`` None), else ``GenericRequest`` of ``contract``; raises
    ``RequestError`` naming the problem."""
    if contract is not None:
        names = [contract.sequence.name, *(t.name for t in contract.pass_through), "SLA_MS"]
        return decode_generic(contract, _arrays(request, names),
                              request_parameters(request), timeout_us(request))
    input_ids, sla_input, parameters, timeout = _embedding_inputs(request)
    return decode_request(input_ids, sla_input, parameters, MINILM_MAX_SEQ_LEN,
                          MINILM_VOCAB_SIZE, timeout)


def decode_all(requests, contract=None) -> list:
    """``decode`` for each of a call's requests, in order: the decoded request, or the
    ``RequestError`` naming its problem (a bad request fails alone). For the INPUT_IDS ->
    EMBEDDING contract the token ids are range-checked once for the whole call
    (``request_decoding.decode_requests``)."""
    if contract is not None:
        out = []
        for request in requests:
            try:
                out.append(decode(request, contract))
            except RequestError as exc:
                out.append(exc)
        return out
    return decode_requests([_embedding_inputs(r) for r in requests], MINILM_MAX_SEQ_LEN,
                           MINILM_VOCAB_SIZE)


def read_launchable(requests) -> tuple[list[tuple], list[np.ndarray]] | None:
    """Intake hold's launch first, for the INPUT_IDS -> EMBEDDING contract: each request's
    (token sequence, SLA_MS array or None), the sequence checked as ``decode_request``
    checks it (the range once for the call), where every request's is valid; None where
    one is not, or cannot be read (the call is then decoded whole first, which names the
    problem). Nothing else of a request is read: its SLA, parameters and timeout are
    decoded later (``decode_call`` with ``read``), beside the device.

    One loop and no call a request for the usual one ([1, L] INT64 and contiguous, L within
    the model's limit: ``sequence_of``'s checks, and its result); any other goes through
    ``sequence_of``, which takes or refuses it. It runs first on every launched call."""
    read, sequences = [], []
    try:
        for request in requests:
            ids = sla = None
            for tensor in request.inputs():
                name = tensor.name()
                if name == INPUT_IDS:
                    ids = tensor.as_numpy()
                elif name == SLA_MS:
                    sla = tensor.as_numpy()
            shape = None if ids is None else ids.shape
            if (shape is not None and len(shape) == 2 and shape[0] == 1
                    and 0 < shape[1] <= MINILM_MAX_SEQ_LEN and ids.dtype is _INT64
                    and ids.flags.c_contiguous):
                ids = ids[0]  # a view, contiguous as its array is
            else:
                ids = sequence_of(ids, MINILM_MAX_SEQ_LEN, MINILM_VOCAB_SIZE,
                                  token_range=False)
            sequences.append(ids)  # checked: decode_call takes it as it is
            read.append((ids, sla))
    except Exception:  # an input error, or a request that breaks reading: named there
        return None
    return (read, sequences) if sequences and in_range(sequences, MINILM_VOCAB_SIZE) else None


def placeholder_inputs(config: dict) -> list:
    """One batch row of each required input of ``config``, zeros (empty strings): for a
    request that is never decoded (intake hold's wake request) and only has to pass
    Triton's checks."""
    batch = [1] if int(config.get("max_batch_size", 0)) > 0 else []
    tensors = []
    for spec in config.get("input", []):
        if spec.get("optional"):
            continue
        shape = batch + [1 if int(d) < 0 else int(d) for d in spec.get("dims", [])]
        dtype = pb_utils.triton_string_to_numpy(spec["data_type"])
        value = (np.full(shape, b"", dtype=np.object_) if dtype == np.object_
                 else np.zeros(shape, dtype=dtype))
        tensors.append(pb_utils.Tensor(spec["name"], value))
    return tensors


def check_numpy(model: str) -> None:
    """Refuse to load, naming numpy's version and the cause, where this Python's numpy
    would make the model serve garbage.

    Triton 24.10's Python backend predates numpy 2: with numpy 2 its output tensors reach
    the server empty or mis-sized ('output tensor shape does not match size of output',
    measured here with numpy 2.4.6; silently empty EMBEDDINGs on a GPU host with 2.5).
    The corruption happens where a response crosses to the server, which initialize()
    cannot exercise - a tensor round trip inside the stub comes back intact even under
    numpy 2 - so the version is the test; the round trip still guards the stub's own
    tensor path."""
    major = int(np.__version__.split(".", 1)[0])
    if major >= 2:
        raise pb_utils.TritonModelException(
            f"model '{model}': numpy {np.__version__} in the server's Python: Triton "
            "24.10's Python backend returns empty or mis-sized output tensors with numpy 2 "
            "(it predates it); install numpy<2 in the Python that runs the backend stub "
            "(pip install 'numpy<2')")
    probe = np.arange(12, dtype=np.float32).reshape(3, 4)
    back = pb_utils.Tensor("PROBE", probe).as_numpy()
    if back.shape != probe.shape or back.dtype != probe.dtype or not (back == probe).all():
        raise pb_utils.TritonModelException(
            f"model '{model}': a tensor did not survive a round trip through "
            f"triton_python_backend_utils with numpy {np.__version__} (got shape "
            f"{list(back.shape)} {back.dtype}); the backend would serve garbage")
