"""Validation of one request's inputs and of padded inner-model batches."""

from __future__ import annotations

import numpy as np
import pytest

from hypothesis import given, settings, strategies as st

from triton_backend.request_decoding import (MAX_SLA_MS, DecodedRequest, RequestError,
                                             decode_padded_batch, decode_request,
                                             decode_requests)

MAX_LEN = 8
VOCAB = 100


def ids(*values, dtype=np.int64):
    return np.array(values, dtype=dtype)


def decode(input_ids, sla=None, params=None):
    return decode_request(input_ids, sla, params or {}, MAX_LEN, VOCAB)


def rejects(fragment, input_ids, sla=None, params=None):
    with pytest.raises(RequestError) as info:
        decode(input_ids, sla, params)
    assert fragment in str(info.value), str(info.value)
    return str(info.value)


# -- accepted shapes ------------------------------------------------------------------------

def test_accepts_1_by_L():
    out = decode(np.array([[5, 6, 7]], dtype=np.int64))
    assert isinstance(out, DecodedRequest)
    assert out.input_ids.dtype == np.int64
    assert out.input_ids.shape == (3,)
    assert out.input_ids.tolist() == [5, 6, 7]
    assert out.sla_ms is None


def test_accepts_flat_L():
    out = decode(ids(1, 99))
    assert out.input_ids.tolist() == [1, 99]
    assert out.input_ids.shape == (2,)


def test_accepts_max_length_and_id_bounds():
    out = decode(ids(*([1] * (MAX_LEN - 1) + [VOCAB - 1])))
    assert len(out.input_ids) == MAX_LEN


def test_output_is_contiguous_even_for_strided_input():
    strided = np.arange(1, 21, dtype=np.int64)[::3]
    out = decode(strided)
    assert out.input_ids.flags["C_CONTIGUOUS"]
    assert out.input_ids.tolist() == [1, 4, 7, 10, 13, 16, 19]


# -- rejected INPUT_IDS -------------------------------------------------------------------------

def test_rejects_missing_input():
    rejects("missing required input INPUT_IDS", None)


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.uint64])
def test_rejects_wrong_dtype(dtype):
    msg = rejects("must be INT64", ids(1, 2, dtype=dtype))
    assert np.dtype(dtype).name in msg


def test_rejects_rank_3():
    rejects("got shape [1, 1, 3]", np.ones((1, 1, 3), dtype=np.int64))


def test_rejects_rank_0():
    rejects("must have shape [1, L]", np.array(5, dtype=np.int64))


def test_rejects_batch_dim_2():
    msg = rejects("must hold one sequence", np.ones((2, 3), dtype=np.int64))
    assert "[2, 3]" in msg


@pytest.mark.parametrize("shape", [(0,), (1, 0)])
def test_rejects_empty(shape):
    rejects("is empty", np.zeros(shape, dtype=np.int64))


def test_rejects_too_long():
    msg = rejects(f"the model's limit is {MAX_LEN}", np.ones(MAX_LEN + 1, dtype=np.int64))
    assert f"has {MAX_LEN + 1} tokens" in msg


@pytest.mark.parametrize("bad", [0, -1, VOCAB, VOCAB + 1000])
def test_rejects_out_of_vocab_ids(bad):
    msg = rejects(f"valid ids are 1..{VOCAB - 1}", ids(3, bad, 4))
    assert "(0 is padding)" in msg
    assert str(bad) in msg


# -- SLA_MS input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("sla", [
    np.array([150.0], dtype=np.float32),
    np.array([[150.0]], dtype=np.float32),
    np.array([150], dtype=np.int32),
    np.array([150.0], dtype=np.float64),
])
def test_sla_input_accepted(sla):
    assert decode(ids(1, 2), sla).sla_ms == 150.0


def test_sla_input_maximum_is_allowed():
    assert decode(ids(1), np.array([MAX_SLA_MS])).sla_ms == MAX_SLA_MS


@pytest.mark.parametrize("value,fragment", [
    (0.0, "positive finite"),
    (-5.0, "positive finite"),
    (float("nan"), "positive finite"),
    (float("inf"), "positive finite"),
    (-float("inf"), "positive finite"),
    (MAX_SLA_MS * 2, "exceeds the maximum of 3600000 ms"),
])
def test_sla_input_bad_value(value, fragment):
    msg = rejects(fragment, ids(1, 2), np.array([value], dtype=np.float64))
    assert "SLA_MS" in msg


@pytest.mark.parametrize("sla", [np.array(["fast"]), np.array([b"10"]),
                                 np.array([None], dtype=object), np.array([True])])
def test_sla_input_non_numeric(sla):
    rejects("SLA_MS must be FP32", ids(1, 2), sla)


@pytest.mark.parametrize("shape", [(2,), (0,), (1, 2)])
def test_sla_input_wrong_size(shape):
    msg = rejects("SLA_MS must hold one value", ids(1, 2), np.ones(shape, dtype=np.float32))
    assert str(list(shape)) in msg


# -- sla_ms parameter ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", [250, 250.0, np.float32(250.0), np.int64(250)])
def test_sla_parameter_accepted(value):
    out = decode(ids(1, 2), params={"sla_ms": value})
    assert out.sla_ms == 250.0
    assert isinstance(out.sla_ms, float)


@pytest.mark.parametrize("value", ["250", True, False, None, [250]])
def test_sla_parameter_wrong_type(value):
    msg = rejects("parameter sla_ms must be a number of milliseconds", ids(1, 2),
                  params={"sla_ms": value})
    assert repr(value) in msg


@pytest.mark.parametrize("value,fragment", [(0, "positive finite"), (-1.0, "positive finite"),
                                            (float("nan"), "positive finite"),
                                            (4e6, "exceeds the maximum")])
def test_sla_parameter_bad_value(value, fragment):
    msg = rejects(fragment, ids(1, 2), params={"sla_ms": value})
    assert "parameter sla_ms" in msg


def test_other_parameters_ignored():
    assert decode(ids(1, 2), params={"priority": "high"}).sla_ms is None


def test_sla_input_and_parameter_agreeing():
    out = decode(ids(1, 2), np.array([150.1], dtype=np.float32), {"sla_ms": 150.1})
    assert out.sla_ms == pytest.approx(150.1)
    out = decode(ids(1, 2), np.array([300.0], dtype=np.float32), {"sla_ms": 300})
    assert out.sla_ms == 300.0


def test_sla_input_and_parameter_disagreeing():
    msg = rejects("disagree", ids(1, 2), np.array([100.0], dtype=np.float32), {"sla_ms": 200.0})
    assert "SLA_MS input (100)" in msg and "parameter sla_ms (200)" in msg


def test_invalid_parameter_rejected_even_with_valid_input():
    rejects("parameter sla_ms must be a number", ids(1, 2), np.array([100.0], dtype=np.float32),
            {"sla_ms": "100"})


# -- padded batches -------------------------------------------------------------------------------

def test_padded_batch_split_into_rows():
    batch = np.array([[5, 6, 7, 0], [9, 0, 0, 0], [1, 2, 3, 4]], dtype=np.int64)
    rows = decode_padded_batch(batch, MAX_LEN, VOCAB)
    assert [r.tolist() for r in rows] == [[5, 6, 7], [9], [1, 2, 3, 4]]
    assert all(r.dtype == np.int64 for r in rows)


def test_padded_batch_rejects_all_padding_row():
    batch = np.array([[5, 6], [0, 0]], dtype=np.int64)
    with pytest.raises(RequestError) as info:
        decode_padded_batch(batch, MAX_LEN, VOCAB)
    assert "INPUT_IDS row 1 is empty" in str(info.value)


def test_padded_batch_rejects_interior_padding():
    batch = np.array([[5, 0, 7, 0]], dtype=np.int64)
    with pytest.raises(RequestError) as info:
        decode_padded_batch(batch, MAX_LEN, VOCAB)
    assert "INPUT_IDS row 0 holds token ids in [0, 7]" in str(info.value)


def test_padded_batch_rejects_bad_rows_and_shapes():
    with pytest.raises(RequestError, match="missing required input"):
        decode_padded_batch(None, MAX_LEN, VOCAB)
    with pytest.raises(RequestError, match=r"shape \[B, L\], got shape \[3\]"):
        decode_padded_batch(ids(1, 2, 3), MAX_LEN, VOCAB)
    with pytest.raises(RequestError, match="INPUT_IDS must be INT64"):
        decode_padded_batch(np.array([[1, 2]], dtype=np.int32), MAX_LEN, VOCAB)
    with pytest.raises(RequestError, match="row 1 has 9 tokens"):
        decode_padded_batch(np.array([[1] + [0] * 8, [1] * 9], dtype=np.int64), MAX_LEN, VOCAB)
    with pytest.raises(RequestError, match=r"row 0 holds token ids in \[1, 100\]"):
        decode_padded_batch(np.array([[1, VOCAB]], dtype=np.int64), MAX_LEN, VOCAB)


def test_padded_batch_trailing_padding_beyond_max_len_is_fine():
    # the padded width may exceed max_seq_len as long as each real sequence fits
    batch = np.zeros((2, MAX_LEN + 4), dtype=np.int64)
    batch[0, :MAX_LEN] = 3
    batch[1, :2] = 4
    rows = decode_padded_batch(batch, MAX_LEN, VOCAB)
    assert [len(r) for r in rows] == [MAX_LEN, 2]


# -- Triton's own per-request timeout ------------------------------------------------------

def test_the_request_timeout_is_the_sla_when_none_is_given():
    ids = np.array([[5, 6]], dtype=np.int64)
    assert decode_request(ids, None, {}, MAX_LEN, VOCAB, timeout_us=250_000).sla_ms == 250.0
    assert decode_request(ids, None, {}, MAX_LEN, VOCAB, timeout_us=0).sla_ms is None


def test_the_shorter_of_an_explicit_sla_and_the_timeout_is_the_deadline():
    """An answer after the client's timeout reaches nobody; one before its SLA is on time."""
    ids = np.array([[5, 6]], dtype=np.int64)
    sla = np.array([[40.0]], dtype=np.float32)
    assert decode_request(ids, sla, {}, MAX_LEN, VOCAB, timeout_us=900_000).sla_ms == 40.0
    assert decode_request(ids, None, {"sla_ms": 75}, MAX_LEN, VOCAB,
                          timeout_us=900_000).sla_ms == 75.0
    assert decode_request(ids, np.array([[400.0]], dtype=np.float32), {}, MAX_LEN, VOCAB,
                          timeout_us=250_000).sla_ms == 250.0


def test_a_timeout_beyond_an_hour_is_capped():
    ids = np.array([[5, 6]], dtype=np.int64)
    got = decode_request(ids, None, {}, MAX_LEN, VOCAB, timeout_us=10 ** 13)
    assert got.sla_ms == MAX_SLA_MS


# -- a whole call at once (decode_requests) ------------------------------------------------
def test_a_calls_bad_requests_fail_alone_and_are_named():
    """One token-range check for the call; where it fails, each request is looked at alone:
    the ones out of range and the malformed ones get their own error, the rest decode."""
    calls = [(ids(5, 6), None, {}, 0),
             (ids(5, VOCAB), None, {}, 0),          # an id past the vocabulary
             (ids(7), np.array([40.0], dtype=np.float32), {}, 0),
             (None, None, {}, 0),                   # no INPUT_IDS
             (ids(0, 3), None, {}, 0)]              # padding inside a request
    out = decode_requests(calls, MAX_LEN, VOCAB)
    assert [type(d) for d in out] == [DecodedRequest, RequestError, DecodedRequest,
                                      RequestError, RequestError]
    assert "valid ids are 1..99" in str(out[1]) and "missing" in str(out[3])
    assert out[2].sla_ms == 40.0 and list(out[0].input_ids) == [5, 6]


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-2, VOCAB + 1), min_size=0, max_size=MAX_LEN + 1),
                min_size=1, max_size=6))
def test_a_call_decodes_as_its_requests_decode_alone(rows):
    """decode_requests agrees with decode_request on every request, whatever its
    neighbours: the same sequence where one decodes, the same error where one fails."""
    calls = [(np.array(r, dtype=np.int64), None, {}, 0) for r in rows]
    for d, (input_ids, *_rest) in zip(decode_requests(calls, MAX_LEN, VOCAB), calls):
        try:
            alone = decode(input_ids)
        except RequestError as exc:
            assert isinstance(d, RequestError) and str(d) == str(exc)
        else:
            assert isinstance(d, DecodedRequest)
            assert list(d.input_ids) == list(alone.input_ids)
