"""Building, reading and sending Triton's request and response objects: the small pieces
of ``triton_python_backend_utils`` that both model classes use."""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from .executors import MINILM_MAX_SEQ_LEN, MINILM_VOCAB_SIZE
from .request_decoding import RequestError, decode_request, decode_requests
from .tensor_contract import decode_generic

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def error(message: str, code) -> "pb_utils.InferenceResponse":
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


def embedding_response(embedding: np.ndarray) -> "pb_utils.InferenceResponse":
    tensor = pb_utils.Tensor("EMBEDDING", embedding.reshape(1, -1).astype(np.float32))
    return pb_utils.InferenceResponse(output_tensors=[tensor])


def outputs_response(outputs: dict[str, np.ndarray]) -> "pb_utils.InferenceResponse":
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()])


def built(response) -> "pb_utils.InferenceResponse":
    """The response to send or return for one request: ``response``, or the one its
    builder makes; never nothing (INTERNAL if building fails or, a bug, intake hold's
    call holds no answer for it)."""
    if response is None:
        return error("request left unanswered (a bug)", pb_utils.TritonError.INTERNAL)
    try:
        return response() if callable(response) else response
    except Exception as exc:  # never leave a request without its answer
        return error(f"could not build the response: {exc}", pb_utils.TritonError.INTERNAL)


def send(sender, response) -> None:
    """Send one final response; a failure (the client may be gone) is logged, not raised."""
    try:
        sender.send(response, flags=FINAL)
    except Exception as exc:  # never let that kill the loop
        pb_utils.Logger.log_warn(f"could not send a response: {exc}")


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


def input_array(request, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _arrays(request, names) -> dict:
    """``request``'s input arrays by name (None where absent), from one list of its
    tensors (one call to the stub, not one a name)."""
    tensors = {t.name(): t for t in request.inputs()}
    return {name: (None if (t := tensors.get(name)) is None else t.as_numpy())
            for name in names}


def _embedding_inputs(request) -> tuple:
    """What ``decode_request`` reads of a request of the INPUT_IDS -> EMBEDDING contract:
    INPUT_IDS, SLA_MS, its parameters and its timeout (us)."""
    arrays = _arrays(request, ("INPUT_IDS", "SLA_MS"))
    return (arrays["INPUT_IDS"], arrays["SLA_MS"], request_parameters(request),
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
