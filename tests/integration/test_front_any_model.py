"""The plugin fronts an unrelated model: other tensor names and dtypes, an extra input
passed through, several outputs - each request's outputs byte-identical to calling the
inner model directly, over HTTP and gRPC; a front whose tensors do not fit the inner
model, or that sends batches larger than the inner model's max_batch_size, is refused at
load, naming the mismatch."""

from __future__ import annotations

import os
import queue
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import SHIPPED_REPOSITORY

pytestmark = pytest.mark.integration
INNER, FRONT, BAD_FRONT = "scorer", "scorer_explicit", "scorer_explicit_bad"
BIG_FRONT = "scorer_explicit_big"  # batches of 128 for an inner max_batch_size of 64

INNER_MODEL_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Scores padded token batches; padding (0) changes nothing."""

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS").as_numpy()
            weight = pb_utils.get_input_tensor_by_name(request, "WEIGHT").as_numpy()
            bias = pb_utils.get_input_tensor_by_name(request, "BIAS")  # optional
            valid = tokens != 0
            total = (tokens.astype(np.float64) * valid).sum(axis=1, keepdims=True)
            if bias is not None:
                total = total + bias.as_numpy()
            score = (total * weight).astype(np.float16)
            count = valid.sum(axis=1, keepdims=True).astype(np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SCORE", score), pb_utils.Tensor("COUNT", count)]))
        return responses
'''

IO = '''input [
  {{ name: "TOKENS" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "WEIGHT" data_type: {weight} dims: [ 2 ] }},
  {{ name: "BIAS" data_type: TYPE_FP64 dims: [ 1 ] optional: true }}{sla}
]
output [
  {{ name: "SCORE" data_type: TYPE_FP16 dims: [ 2 ] }},
  {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }}
]
'''
SLA = ''',
  { name: "SLA_MS" data_type: TYPE_FP32 dims: [ 1 ] optional: true }'''


def _param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


def _front(repo: str, name: str, weight_type: str, extra: str = "") -> None:
    os.makedirs(os.path.join(repo, name))
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, "emulated_explicit", "1"),
                    os.path.join(repo, name, "1"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(os.path.join(SHIPPED_REPOSITORY, "emulated_explicit", "profiles"),
                    os.path.join(repo, name, "profiles"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as fh:
        fh.write(f'name: "{name}"\nbackend: "python"\nmax_batch_size: 1\n'
                 + IO.format(weight=weight_type, sla=SLA)
                 + "instance_group [ { kind: KIND_CPU, count: 1 } ]\n"
                 + _param("inner_model", INNER) + _param("sequence_input", "TOKENS")
                 + _param("hardware_profile", "t4")
                 # no SLA sent: the default, a minute, so no loaded machine refuses one
                 + _param("scheduler.default_sla_ms", "60000")
                 + _param("profile_dir", f"{name}/profiles") + extra)


@pytest.fixture(scope="module")
def front_server(tmp_path_factory):
    from server_ops.launcher import TritonServer

    base = tmp_path_factory.mktemp("front")
    repo = str(base / "repo")
    os.makedirs(os.path.join(repo, INNER, "1"))
    with open(os.path.join(repo, INNER, "1", "model.py"), "w") as fh:
        fh.write(INNER_MODEL_PY)
    with open(os.path.join(repo, INNER, "config.pbtxt"), "w") as fh:
        fh.write(f'name: "{INNER}"\nbackend: "python"\nmax_batch_size: 64\n'
                 + IO.format(weight="TYPE_FP64", sla="")
                 + "instance_group [ { kind: KIND_CPU, count: 1 } ]\n")
    _front(repo, FRONT, "TYPE_FP64")
    _front(repo, BAD_FRONT, "TYPE_FP32")
    _front(repo, BIG_FRONT, "TYPE_FP64", _param("scheduler.max_batch_size", "128"))
    srv = TritonServer(repo, log_path=str(base / "tritonserver.log"), exit_timeout_s=10,
                       extra_args=("--model-control-mode=explicit", f"--load-model={INNER}",
                                   f"--load-model={FRONT}"))
    with srv:
        yield srv


def _requests(n: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        tokens = rng.integers(1, 1000, size=(1, int(rng.integers(3, 40))), dtype=np.int32)
        weight = rng.standard_normal((1, 2))
        yield tokens, weight


def _inputs(module, tokens, weight):
    inputs = [module.InferInput("TOKENS", list(tokens.shape), "INT32"),
              module.InferInput("WEIGHT", list(weight.shape), "FP64")]
    inputs[0].set_data_from_numpy(tokens)
    inputs[1].set_data_from_numpy(weight)
    return inputs, [module.InferRequestedOutput("SCORE"), module.InferRequestedOutput("COUNT")]


def _infer_many(module, client, model, cases):
    """All ``cases`` in flight at once (so the front forms real batches of mixed lengths);
    (SCORE, COUNT) per case, in order."""
    if module is httpclient:
        pending = []
        for c in cases:
            inputs, outputs = _inputs(module, *c)
            pending.append(client.async_infer(model, inputs, outputs=outputs))
        results = [p.get_result() for p in pending]
    else:
        done: "queue.Queue" = queue.Queue()
        for i, c in enumerate(cases):
            inputs, outputs = _inputs(module, *c)
            client.async_infer(model, inputs, outputs=outputs,
                               callback=lambda result, error, i=i:
                               done.put((i, result, error)))
        results = [None] * len(cases)
        for _ in cases:
            i, r, e = done.get(timeout=60)
            assert e is None, e
            results[i] = r
    return [(r.as_numpy("SCORE"), r.as_numpy("COUNT")) for r in results]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_outputs_are_byte_identical_to_calling_the_model_directly(front_server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = front_server.http_url if protocol == "http" else front_server.grpc_url
    client = module.InferenceServerClient(url, **({"concurrency": 16}
                                                  if protocol == "http" else {}))
    try:
        cases = list(_requests(48, seed=7 if protocol == "http" else 8))
        fronted = _infer_many(module, client, FRONT, cases)
        direct = [_infer_many(module, client, INNER, [c])[0] for c in cases]  # one by one
        for (score, count), (want_score, want_count) in zip(fronted, direct):
            assert score.dtype == np.float16 and count.dtype == np.int32
            assert score.shape == want_score.shape == (1, 2)
            assert score.tobytes() == want_score.tobytes()
            assert count.tobytes() == want_count.tobytes()
    finally:
        client.close()


def test_a_front_whose_tensors_do_not_fit_is_refused_naming_the_mismatch(front_server):
    client = httpclient.InferenceServerClient(front_server.http_url)
    try:
        with pytest.raises(InferenceServerException) as err:
            client.load_model(BAD_FRONT)
        assert "input WEIGHT is TYPE_FP32 here but TYPE_FP64 in 'scorer'" in str(err.value)
        assert not client.is_model_ready(BAD_FRONT)
    finally:
        client.close()


def test_a_front_sending_batches_above_the_inner_max_batch_size_is_refused(front_server):
    client = httpclient.InferenceServerClient(front_server.http_url)
    try:
        with pytest.raises(InferenceServerException) as err:
            client.load_model(BIG_FRONT)
        assert (f"model '{BIG_FRONT}': inner_model '{INNER}' does not fit this model: inner "
                f"model '{INNER}' has max_batch_size 64, but this model sends it batches of "
                "up to 128 (scheduler.max_batch_size)") in str(err.value), err.value
        assert not client.is_model_ready(BIG_FRONT)
    finally:
        client.close()


def test_a_request_with_an_optional_input_the_others_lack_is_served_beside_them(front_server):
    """31 plain requests and one that sends the optional BIAS, all in flight at once: the
    front cannot put them in one inner batch, so it runs them in two; all 32 are answered
    as the inner model answers each alone."""
    client = grpcclient.InferenceServerClient(front_server.grpc_url)
    cases = list(_requests(32, seed=31))
    done: "queue.Queue" = queue.Queue()
    try:
        for i, (tokens, weight) in enumerate(cases):
            inputs, outputs = _inputs(grpcclient, tokens, weight)
            if i == 7:
                bias = grpcclient.InferInput("BIAS", [1, 1], "FP64")
                bias.set_data_from_numpy(np.array([[5.0]]))
                inputs.append(bias)
            client.async_infer(FRONT, inputs, outputs=outputs,
                               callback=lambda result, error, i=i: done.put((i, result, error)))
        answers = dict((i, (r, e)) for i, r, e in (done.get(timeout=60) for _ in cases))
    finally:
        client.close()
    for i, (tokens, weight) in enumerate(cases):
        result, error = answers[i]
        assert error is None, (i, error)
        total = float(tokens.sum()) + (5.0 if i == 7 else 0.0)
        expected = (np.array([[total]]) * weight).astype(np.float16)
        np.testing.assert_array_equal(result.as_numpy("SCORE"), expected)
