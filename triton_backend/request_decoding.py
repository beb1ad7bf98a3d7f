"""Decoding and validating one request's inputs (no Triton import: testable alone).

The explicit models must validate everything themselves: Triton lets a request with a
missing optional input, or a malformed one, reach a Python model.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from scheduler_core.safe_repr import short_repr

# Above an hour an "SLA" is a typo, not a latency target.
MAX_SLA_MS = 3_600_000.0
# Token id 0 is [PAD] in the BERT vocabulary: padded batches mark padding with it.
PAD_TOKEN_ID = 0


class RequestError(ValueError):
    """The request is malformed; the message names the problem (sent as INVALID_ARG)."""


class DecodedRequest(NamedTuple):
    """One request's inputs, validated (immutable; a named tuple, the cheapest immutable
    record to make, once per request on every call's path)."""

    input_ids: np.ndarray  # int64, shape [seq_len]
    sla_ms: float | None  # None = use the profile's default
    timeout_ms: float = 0.0  # Triton's per-request timeout (0: none); intake hold enforces it


def sla_value(value: Any, where: str) -> float:
    if type(value) is float and 0.0 < value <= MAX_SLA_MS:  # the usual one, valid as it is
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise RequestError(f"{where} must be a number of milliseconds, got {short_repr(value)}")
    try:
        value = float(value)
    except OverflowError:
        raise RequestError(f"{where} is too large to be milliseconds") from None
    if not math.isfinite(value) or value <= 0:
        raise RequestError(f"{where} must be a positive finite number of milliseconds, got {value!r}")
    if value > MAX_SLA_MS:
        raise RequestError(f"{where}={value!r} exceeds the maximum of {MAX_SLA_MS:.0f} ms")
    return value


def check_sequence(ids: np.ndarray, max_seq_len: int, vocab_size: int,
                   where: str = "INPUT_IDS", token_range: bool = True) -> None:
    """Raise ``RequestError`` unless ``ids`` is a valid 1-D INT64 token sequence
    (``token_range`` False: all but its token ids' range, which ``decode_requests``
    checks once for a whole call)."""
    if ids.dtype != np.int64:
        raise RequestError(f"{where} must be INT64, got {ids.dtype}")
    if ids.size == 0:
        raise RequestError(f"{where} is empty: a sequence needs at least one token")
    if ids.size > max_seq_len:
        raise RequestError(f"{where} has {ids.size} tokens; the model's limit is {max_seq_len}")
    if not token_range:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 1 or hi >= vocab_size:
        raise RequestError(
            f"{where} holds token ids in [{lo}, {hi}]; valid ids are 1..{vocab_size - 1} "
            f"(0 is padding)")


def decode_padded_batch(input_ids: np.ndarray | None, max_seq_len: int,
                        vocab_size: int) -> list[np.ndarray]:
    """Split a padded [B, L] INPUT_IDS tensor (0 = padding at the end of a row) into its
    B sequences, validating each. Used by the inner models, which BLS callers and Triton's
    own dynamic batcher feed with padded batches."""
    if input_ids is None:
        raise RequestError("missing required input INPUT_IDS")
    if input_ids.ndim != 2:
        raise RequestError(f"INPUT_IDS must have shape [B, L], got shape {list(input_ids.shape)}")
    if input_ids.dtype != np.int64:  # before looking inside the rows
        raise RequestError(f"INPUT_IDS must be INT64, got {input_ids.dtype}")
    sequences = []
    for i, row in enumerate(input_ids):
        nonzero = np.flatnonzero(row)
        seq = row[: nonzero[-1] + 1] if nonzero.size else row[:0]
        check_sequence(seq, max_seq_len, vocab_size, where=f"INPUT_IDS row {i}")
        sequences.append(seq)
    return sequences


def decode_request(input_ids: np.ndarray | None, sla_input: np.ndarray | None,
                   parameters: Mapping[str, Any], max_seq_len: int,
                   vocab_size: int, timeout_us: int = 0,
                   token_range: bool = True) -> DecodedRequest:
    """Validate one request of one sequence.

    ``input_ids`` is the INPUT_IDS tensor as received ([1, L] or [L]); ``sla_input`` the
    optional SLA_MS tensor; ``parameters`` the request parameters. When both SLA_MS and
    the ``sla_ms`` parameter are given and disagree, the request is rejected: a silent
    winner would hide a client bug. ``timeout_us`` is Triton's own per-request ``timeout``
    (microseconds, 0 = none): the SLA when neither SLA_MS nor ``sla_ms`` gives one, or a
    shorter one than they give (capped at ``MAX_SLA_MS``; a client's timeout is a bound it
    set, not a typo, and an answer after it reaches nobody). ``token_range`` False leaves
    the token ids' range to the caller (``decode_requests``).
    """
    return DecodedRequest(sequence_of(input_ids, max_seq_len, vocab_size, token_range),
                          decode_sla(sla_input, parameters, timeout_us), timeout_us / 1000.0)


def sequence_of(input_ids: np.ndarray | None, max_seq_len: int, vocab_size: int,
                token_range: bool = True) -> np.ndarray:
    """A request's INPUT_IDS tensor ([1, L] or [L]) as its validated 1-D token sequence
    (``check_sequence``); raises ``RequestError`` naming the problem."""
    if input_ids is None:
        raise RequestError("missing required input INPUT_IDS")
    if input_ids.ndim == 2:
        if input_ids.shape[0] != 1:
            raise RequestError(
                f"INPUT_IDS must hold one sequence (shape [1, L]), got shape {list(input_ids.shape)}")
        ids = input_ids[0]
    elif input_ids.ndim == 1:
        ids = input_ids
    else:
        raise RequestError(f"INPUT_IDS must have shape [1, L], got shape {list(input_ids.shape)}")
    check_sequence(ids, max_seq_len, vocab_size, token_range=token_range)
    return np.ascontiguousarray(ids, dtype=np.int64)


def decode_requests(inputs: Sequence[tuple[np.ndarray | None, np.ndarray | None,
                                           Mapping[str, Any], int]],
                    max_seq_len: int, vocab_size: int) -> list[DecodedRequest | RequestError]:
    """``decode_request`` for each of a call's requests (``inputs``: INPUT_IDS, SLA_MS,
    parameters, timeout in us), in order: the decoded request, or the ``RequestError``
    naming its problem. The token ids' range is checked once over the whole call (two
    reductions instead of two per request); only where that fails is each request looked
    at alone, so the bad one is named and fails alone."""
    out: list[DecodedRequest | RequestError] = []
    for input_ids, sla_input, parameters, timeout in inputs:
        try:
            out.append(decode_request(input_ids, sla_input, parameters, max_seq_len,
                                      vocab_size, timeout, token_range=False))
        except RequestError as exc:
            out.append(exc)
    sequences = [d.input_ids for d in out if isinstance(d, DecodedRequest)]
    if not sequences or in_range(sequences, vocab_size):
        return out
    for i, d in enumerate(out):
        if isinstance(d, DecodedRequest):
            try:
                check_sequence(d.input_ids, max_seq_len, vocab_size)
            except RequestError as exc:
                out[i] = exc
    return out


def in_range(sequences: Sequence[np.ndarray], vocab_size: int) -> bool:
    """Whether every token id of ``sequences`` (one or more) is a valid id, 1..vocab_size-1:
    two reductions over the call, not two a request."""
    ids = np.concatenate(sequences) if len(sequences) > 1 else sequences[0]
    # The ufuncs' reductions themselves: ndarray.min and max go through a Python wrapper.
    return int(np.minimum.reduce(ids)) >= 1 and int(np.maximum.reduce(ids)) < vocab_size


def decode_sla(sla_input: np.ndarray | None, parameters: Mapping[str, Any],
               timeout_us: int = 0) -> float | None:
    """A request's SLA in ms: the SLA_MS input, or the ``sla_ms`` parameter (both: they
    must agree), or Triton's ``timeout`` (microseconds; capped at ``MAX_SLA_MS``) where
    none is given or the timeout is shorter; None: the profile's default."""
    sla_ms = None
    if sla_input is not None:
        if sla_input.size != 1:
            raise RequestError(f"SLA_MS must hold one value, got shape {list(sla_input.shape)}")
        if sla_input.dtype.kind not in "fiu":
            raise RequestError(f"SLA_MS must be FP32, got {sla_input.dtype}")
        sla_ms = sla_value(sla_input.item(), "SLA_MS")  # one value, whatever its shape
    if "sla_ms" in parameters:
        param = sla_value(parameters["sla_ms"], "parameter sla_ms")
        if sla_ms is not None and not math.isclose(param, sla_ms, rel_tol=1e-6):
            raise RequestError(
                f"SLA_MS input ({sla_ms:g}) and parameter sla_ms ({param:g}) disagree; send one")
        sla_ms = param
    if timeout_us > 0:
        timeout_ms = min(timeout_us / 1000.0, MAX_SLA_MS)
        sla_ms = timeout_ms if sla_ms is None else min(sla_ms, timeout_ms)
    return sla_ms
