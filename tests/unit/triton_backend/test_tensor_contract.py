"""The tensor contract of a plugin fronting any model: decoding one request, batching
and splitting, and checking the inner model's config."""

from __future__ import annotations

import numpy as np
import pytest

from triton_backend.request_decoding import RequestError
from triton_backend.tensor_contract import (Contract, ContractError, batch_inputs,
                                            check_inner_config, decode_generic,
                                            parse_inner_config, split_outputs)

FRONT = {
    "input": [{"name": "TOKENS", "data_type": "TYPE_INT32", "dims": [-1]},
              {"name": "WEIGHT", "data_type": "TYPE_FP64", "dims": [2]},
              {"name": "SLA_MS", "data_type": "TYPE_FP32", "dims": [1], "optional": True}],
    "output": [{"name": "SCORE", "data_type": "TYPE_FP16", "dims": [2]}],
}
INNER = '''
name: "scorer"  # a comment with input [ in it
max_batch_size: 64
input [
  { name: "TOKENS" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "WEIGHT" data_type: TYPE_FP64 dims: [ 2 ] }
]
output [ { name: "SCORE" data_type: TYPE_FP16 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU } ]
'''


def contract(**params):
    return Contract.from_model_config(FRONT, {"sequence_input": "TOKENS", **params})


def test_the_config_names_the_sequence_the_pass_through_and_the_outputs():
    c = contract()
    assert c.sequence.name == "TOKENS" and [t.name for t in c.pass_through] == ["WEIGHT"]
    assert c.output_names == ["SCORE"]
    with pytest.raises(ContractError, match="sequence_input='IDS' names no input"):
        Contract.from_model_config(FRONT, {"sequence_input": "IDS"})


def test_decoding_validates_each_tensor_and_names_the_problem():
    c = contract(max_sequence_length="4")
    w = np.zeros((1, 2))
    got = decode_generic(c, {"TOKENS": np.array([[3, 4]], np.int32), "WEIGHT": w}, {},
                         timeout_us=50_000)
    assert got.sequence.tolist() == [3, 4] and got.sla_ms == 50.0
    for tensors, needle in (({"WEIGHT": w}, "missing required input TOKENS"),
                            ({"TOKENS": np.array([[3]], np.int64), "WEIGHT": w}, "INT32"),
                            ({"TOKENS": np.ones((1, 5), np.int32), "WEIGHT": w}, "limit is 4"),
                            ({"TOKENS": np.ones((1, 2), np.int32)}, "missing required input"),
                            ({"TOKENS": np.ones((1, 2), np.int32),
                              "WEIGHT": np.zeros((2, 2))}, "must have shape [1, 2]")):
        with pytest.raises(RequestError, match=needle.replace("[", r"\[")):
            decode_generic(c, tensors, {})


def test_a_batch_pads_sequences_concatenates_the_rest_and_splits_back():
    c = contract(pad_value="0")
    reqs = [decode_generic(c, {"TOKENS": np.array([[1, 2, 3]], np.int32),
                               "WEIGHT": np.array([[1.0, 2.0]])}, {}),
            decode_generic(c, {"TOKENS": np.array([[9]], np.int32),
                               "WEIGHT": np.array([[3.0, 4.0]])}, {})]
    batch = batch_inputs(c, reqs)
    assert batch["TOKENS"].tolist() == [[1, 2, 3], [9, 0, 0]]
    assert batch["TOKENS"].dtype == np.int32 and batch["WEIGHT"].shape == (2, 2)
    rows = split_outputs({"SCORE": np.arange(4, dtype=np.float16).reshape(2, 2)}, 2)
    assert [r["SCORE"].tolist() for r in rows] == [[[0, 1]], [[2, 3]]]
    with pytest.raises(RequestError, match="expected 3 rows"):
        split_outputs({"SCORE": np.zeros((2, 2))}, 3)


def test_the_inner_config_is_read_and_checked():
    inner = parse_inner_config(INNER)
    assert [t.name for t in inner.inputs] == ["TOKENS", "WEIGHT"] and inner.max_batch_size == 64
    assert inner.outputs[0].dims == (2,) and inner.inputs[0].data_type == "TYPE_INT32"
    assert check_inner_config(contract(), "scorer", INNER) == []
    bad = INNER.replace("TYPE_FP64", "TYPE_FP32").replace("max_batch_size: 64",
                                                          "max_batch_size: 0")
    problems = check_inner_config(contract(), "scorer", bad, max_batch_size=16)
    assert any("max_batch_size 0, but this model sends it batches of up to 16" in p
               for p in problems)
    assert "input WEIGHT is TYPE_FP64 here but TYPE_FP32 in 'scorer'" in problems
    renamed = INNER.replace('"SCORE"', '"LOGITS"')
    assert any("output SCORE is not an output of 'scorer'" in p
               for p in check_inner_config(contract(), "scorer", renamed))


def test_requests_that_cannot_share_a_batch_are_grouped_apart():
    """Optional inputs present in some requests only, or rows of another shape: each kind
    its own group, in order of first appearance; a uniform batch is one group."""
    import numpy as np  # noqa: PLC0415

    from triton_backend.tensor_contract import GenericRequest, batch_groups  # noqa: PLC0415

    def req(**extras):
        return GenericRequest(np.array([1, 2], dtype=np.int32),
                              {k: np.zeros(v, dtype=np.float32) for k, v in extras.items()})

    plain, biased, wide = req(W=(1, 2)), req(W=(1, 2), B=(1, 1)), req(W=(1, 3))
    assert batch_groups([plain, plain, plain]) == [[0, 1, 2]]
    assert batch_groups([plain, biased, plain, wide, biased]) == [[0, 2], [1, 4], [3]]


# Valid config.pbtxt text the former regular-expression reader refused ("no inputs"):
# repeated ``input { ... }`` fields instead of a list, ``dims: -1`` without brackets,
# fields in another order, comments between fields.
REPEATED_FORM = '''
# the scorer, written the other valid way
input { data_type: TYPE_INT32 name: "TOKENS" dims: -1 }  # the sequence
input {
  dims: 2
  # a comment inside a tensor
  name: "WEIGHT"
  data_type: TYPE_FP64
}
output { dims: [ 2 ], name: "SCORE", data_type: TYPE_FP16 }
max_batch_size: 64
name: "scorer"
'''
# An ONNX model's minimal config: Triton auto-completes its tensors and max_batch_size.
AUTO_COMPLETED = 'name: "scorer"\nbackend: "onnxruntime"\n'


@pytest.mark.parametrize("text", [REPEATED_FORM, AUTO_COMPLETED])
def test_valid_forms_the_regular_expressions_refused_are_accepted(text):
    assert check_inner_config(contract(), "scorer", text, max_batch_size=32) == []


def test_an_inner_max_batch_size_below_the_batches_sent_is_a_problem_naming_both():
    small = INNER.replace("max_batch_size: 64", "max_batch_size: 8")
    assert check_inner_config(contract(), "scorer", small, max_batch_size=8) == []
    [problem] = check_inner_config(contract(), "scorer", small, max_batch_size=32)
    assert ("inner model 'scorer' has max_batch_size 8, but this model sends it batches of "
            "up to 32 (scheduler.max_batch_size)") in problem


def test_text_that_is_not_a_model_config_is_refused_naming_the_place():
    with pytest.raises(ContractError, match="1:17"):
        parse_inner_config("input [ { name: ")


def test_the_stubs_model_config_protobuf_is_tritonclients():
    """``triton_backend/model_config_pb2.py`` is a copy (the stub has no tritonclient):
    the same descriptor as the one the launcher and the config writers use."""
    from tritonclient.grpc import model_config_pb2 as theirs  # noqa: PLC0415

    from triton_backend import model_config_pb2 as ours  # noqa: PLC0415

    assert ours.DESCRIPTOR.serialized_pb == theirs.DESCRIPTOR.serialized_pb
