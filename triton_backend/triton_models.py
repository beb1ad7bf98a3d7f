"""The Triton adapter: the only module that imports ``triton_python_backend_utils``.

Two model classes, selected by each model folder's one-line ``model.py``:

``InnerModel``
    ``minilm``, ``emulated_device`` and the native baselines ``*_native``: an ordinary
    Triton model. Triton (or a BLS caller) hands it requests; it runs them as one batch.
``ExplicitModel``
    ``*_explicit``: owns its queue. ``execute()`` validates each request, keeps its
    response sender, queues it and returns ``None``; a scheduler thread asks
    ``scheduler_core`` for batches, runs them (in process, or through BLS on another
    model) and responder threads send exactly one final response, or one error, per
    request. With ``intake: hold`` the calling thread does all of it for its own requests
    and returns their responses.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

from scheduler_core.cost_model import batch_shape
from scheduler_core.profile import HardwareProfile, ProfileError, parse_override, with_overrides
from scheduler_core.profile_files import load_profile_dir, select_profile
from scheduler_core.request import QueuedRequest
from scheduler_core.policy import ZONE_NAMES, QueueFull, decide, refusal_message, wake_time
from scheduler_core.scheduler import Scheduler
from sidecar.nvml import detect_device_name
from sidecar.sampler import HEALTH_VALUE, SampleFile, Sidecar, usable

from .control_metrics import SIDECAR_DISABLED, ControlMetrics

from .tensor_contract import (Contract, ContractError, GenericRequest, batch_inputs,
                              check_inner_config, decode_generic, split_outputs)
from .intake import DEFAULT_INTAKE, GATHER_GRACE_US, INTAKES, WAKE_AFTER_US, Waker, make_intake
from .load_calibration import calibrate_at_load
from .executors import (MINILM_MAX_SEQ_LEN, MINILM_VOCAB_SIZE, EmulatedDevice, MiniLMEncoder,
                        pad_batch)
from .placement import Placement, PlacementError, placement
from .request_decoding import RequestError, decode_padded_batch, decode_request

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
STATS_LOG_PERIOD_S = 5.0
SHUTDOWN_DRAIN_S = 20.0  # below Triton's default --exit-timeout-secs of 30
CANCEL_SWEEP_PERIOD_S = 1.0
CANCEL_SWEEP_MAX = 256  # each is_cancelled() is a message to the server
# Before a batch runs, only members that waited at least this long are asked whether their
# client cancelled: each question is a round trip to the server (~0.1 ms, measured with
# cProfile at 300 req/s), and a client rarely gives up within a few ms of sending. It was
# 20 ms; at the closed-loop peak (64 in flight) most members wait longer than that, and the
# questions cost ~40 us of stub CPU per request (cProfile, time scale 0.01: 7,135 questions
# of 0.23 ms for 42,872 requests). Those that waited less are computed even if cancelled.
CANCEL_CHECK_MIN_WAIT_S = 0.1
# Operators' hot-path profiling: with this environment variable naming a folder, an explicit
# model profiles its execute() calls, its scheduler thread and its responder thread
# (cProfile, on each thread's CPU clock) and writes <folder>/<model>.<execute|loop|respond>
# .pstats when it unloads.
# Off unless set: it slows the stub.
CPROFILE_ENV = "EXPLICIT_BATCHING_CPROFILE_DIR"
# Threads that build and send responses. Each send is a round trip to the server that
# blocks its thread (~0.45 ms here under load, measured with cProfile): one thread caps
# the model at ~2,100 responses/s whatever the batching. Parameter responder_threads.
RESPONDER_THREADS = 4


def _parameters(model_config: dict) -> dict[str, str]:
    return {k: v.get("string_value", "") for k, v in model_config.get("parameters", {}).items()}


def _int_parameter(params: dict[str, str], key: str, default: int, model: str) -> int:
    raw = params.get(key, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise pb_utils.TritonModelException(
            f"model '{model}': parameter '{key}' must be an integer, got {raw!r}") from None
    if value < 0:
        raise pb_utils.TritonModelException(
            f"model '{model}': parameter '{key}' must be >= 0, got {value}")
    return value


def _request_parameters(request) -> dict:
    """The request's parameters (``sla_ms`` ...); {} when none or unreadable."""
    text = request.parameters()
    try:
        return json.loads(text) if text and text != "{}" else {}
    except ValueError:
        return {}


def _timeout_us(request) -> int:
    """Triton's per-request ``timeout`` in microseconds (0: none given)."""
    try:
        return int(request.timeout())
    except Exception:  # an older backend without the accessor: no timeout
        return 0


def _inner_folder(args: dict, inner: str) -> str | None:
    """The folder of model ``inner`` in this model's repository; None when ``inner`` is not
    a plain model name (no path may leave the repository) or has no folder there."""
    if inner in (".", "..") or not all(c.isalnum() or c in "_-." for c in inner):
        return None
    folder = os.path.join(os.path.dirname(os.path.abspath(args["model_repository"])), inner)
    return folder if os.path.isdir(folder) else None


def _check_inner_model(args: dict, params: dict[str, str], inner: str) -> None:
    """Refuse to load, naming the problem, when the BLS inner model has no model folder in
    this repository (a typo, a model that does not exist): a bad reload then fails and
    Triton keeps the working version serving. ``inner_model_check: off`` skips it, for an
    inner model in another repository.

    Checked on disk, not by asking Triton: ``pb_utils.is_model_ready`` while the server is
    still starting (it loads this model and the inner one side by side) aborted the whole
    tritonserver with boost::interprocess::lock_exception in 2 of 4 starts here."""
    model = args["model_name"]
    check = params.get("inner_model_check", "") or "repository"
    if check == "off":
        return
    if check != "repository":
        raise pb_utils.TritonModelException(
            f"model '{model}': parameter inner_model_check must be 'repository' or 'off', "
            f"got {check!r}")
    if _inner_folder(args, inner) is None:
        raise pb_utils.TritonModelException(
            f"model '{model}': parameter inner_model={inner!r}: no model folder of that name "
            "in this model repository (inner_model_check=off for one in another repository)")


def _intake(config: dict, params: dict[str, str], model: str) -> str:
    """Parameter ``intake`` (see ``intake.py``): "gather" (Triton's batcher in front;
    execute() queues its requests and, while a batch is in flight, returns when it has
    finished, so arrivals meanwhile come over in one call), "release" (execute() queues
    its requests and returns at once) or "hold" (execute() returns only once its requests
    are answered: a stub crash fails them instead of losing them). Gather and hold need
    ``dynamic_batching`` and ``max_batch_size`` >= 2 in the model config, or Triton would
    hand over one request per call. Unset: "hold" (DEFAULT_INTAKE) where the config has
    that front, else "release"."""
    batcher_in_front = "dynamic_batching" in config and config.get("max_batch_size", 0) >= 2
    intake = params.get("intake", "") or (DEFAULT_INTAKE if batcher_in_front else "release")
    if intake not in INTAKES:
        raise pb_utils.TritonModelException(
            f"model '{model}': parameter intake must be one of {INTAKES}, got {intake!r}")
    if intake != "release" and not batcher_in_front:
        raise pb_utils.TritonModelException(
            f"model '{model}': intake '{intake}' needs dynamic_batching and max_batch_size "
            ">= 2 in the model config (Triton queues arrivals while execute() is parked); "
            "set parameter intake to 'release' for a config without them")
    return intake


PROFILE_ENV = "EXPLICIT_BATCHING_PROFILE"
METRICS_URL_ENV = "EXPLICIT_BATCHING_METRICS_URL"


def _load_profile(args: dict, params: dict[str, str], default_name: str,
                  nvml_index: int | None) -> tuple[HardwareProfile, str]:
    """The hardware profile for this model and why it was chosen.

    Profiles live in ``profile_dir`` (relative to the model repository; default
    ``<model>/profiles``). Choice: the EXPLICIT_BATCHING_PROFILE environment variable, else
    the model config parameter ``hardware_profile``, else the name of NVML device
    ``nvml_index`` (the instance's GPU; None: no GPU), else the generic ``gpu`` profile
    for a GPU no profile matches, else ``default_name``."""
    model = args["model_name"]
    model_dir = args["model_repository"]  # this model's own folder
    repo_root = os.path.dirname(os.path.abspath(model_dir))
    profile_dir = params.get("profile_dir") or os.path.join(os.path.basename(model_dir), "profiles")
    directory = os.path.normpath(os.path.join(repo_root, profile_dir))
    if os.path.commonpath([directory, repo_root]) != repo_root:
        raise pb_utils.TritonModelException(
            f"model '{model}': parameter profile_dir={profile_dir!r} leaves the model repository")
    env_choice = os.environ.get(PROFILE_ENV, "")
    config_choice = params.get("hardware_profile", "")
    try:
        # Real paths (symlinks resolved) must stay in the repository or the model's own
        # folder: nothing outside is read, or quoted in an error.
        profiles = load_profile_dir(directory, allowed_roots=(repo_root, model_dir))
        # Ask NVML only when nothing names a profile: it is slow to start and absent here.
        device = None if (env_choice or config_choice) else detect_device_name(nvml_index)
        name, why = select_profile(profiles, device, config_choice, env_choice, default_name)
        if device and why.startswith("no profile matches"):
            # An unmatched GPU: name it, so the operator calibrates a profile for it.
            pb_utils.Logger.log_warn(f"model '{model}': {why}; calibrate one for this "
                                     "device with `explicit-batching calibrate`")
        return _with_emulation_overrides(profiles[name], params, model), why
    except ProfileError as exc:
        raise pb_utils.TritonModelException(f"model '{model}': {exc}") from None


def _with_emulation_overrides(profile: HardwareProfile, params: dict[str, str],
                              model: str) -> HardwareProfile:
    """Model-config parameters override profile keys per deployment, without editing the
    hardware profile: ``time_scale`` and ``cost_mode`` (the emulated device's slow-down and
    padded/ragged cost), and any dotted ``section.key`` (``scheduler.alpha``,
    ``control.enabled``, ...), which the operator tools use to step parameters on a live
    server through Triton's model-load API."""
    source = f"model '{model}' parameters"
    dotted = {"emulation.time_scale": params.get("time_scale", ""),
              "emulation.cost_mode": params.get("cost_mode", "")}
    dotted.update({k: v for k, v in params.items() if "." in k})
    overrides: dict[str, dict[str, Any]] = {}
    for key, text in dotted.items():
        if text:
            section, name, value = parse_override(key, text, source)
            overrides.setdefault(section, {})[name] = value
    return with_overrides(profile, overrides, source)


def _placement(args: dict, params: dict[str, str]) -> Placement:
    """Where this instance runs (torch device) and which GPU NVML watches: Triton's
    instance kind and device id, and the parameter ``device`` (see ``placement``)."""
    def cuda_available() -> bool:  # asked only when a GPU is wanted
        if params.get("executor") != "minilm" or params.get("inner_model"):
            return True  # no CUDA code runs here: the GPU only names what NVML watches
        import torch  # noqa: PLC0415 - only MiniLM on a GPU needs it here
        return torch.cuda.is_available()

    try:
        return placement(args.get("model_instance_kind", "CPU"),
                         args.get("model_instance_device_id", "0"), cuda_available,
                         params.get("device", ""), os.environ.get("CUDA_VISIBLE_DEVICES"))
    except PlacementError as exc:
        raise pb_utils.TritonModelException(f"model '{args['model_name']}': {exc}") from None


def _make_executor(args: dict, params: dict[str, str], where: Placement):
    """Build the in-process executor named by the ``executor`` parameter, on ``where``."""
    model = args["model_name"]
    kind = params.get("executor", "")
    if kind == "minilm":
        threads = _int_parameter(params, "intra_op_threads", 1, model)
        return MiniLMEncoder(intra_op_threads=threads, device=where.device), None
    if kind == "emulated":
        profile, _ = _load_profile(args, params, "t4", where.nvml_index)
        fault = _int_parameter(params, "fault_injection_token", 0, model)
        return EmulatedDevice(profile.cost_model, profile.emulation, fault), profile
    raise pb_utils.TritonModelException(
        f"model '{model}': parameter 'executor' must be 'minilm' or 'emulated', got {kind!r}")


def _error(message: str, code) -> "pb_utils.InferenceResponse":
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


def _embedding_response(embedding: np.ndarray) -> "pb_utils.InferenceResponse":
    tensor = pb_utils.Tensor("EMBEDDING", embedding.reshape(1, -1).astype(np.float32))
    return pb_utils.InferenceResponse(output_tensors=[tensor])


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


class InnerModel:
    """An ordinary Triton model around one executor (real MiniLM or the emulated device)."""

    def initialize(self, args):
        check_numpy(args["model_name"])
        self.config = json.loads(args["model_config"])
        self.params = _parameters(self.config)
        self.placement = _placement(args, self.params)
        self.executor, _ = _make_executor(args, self.params, self.placement)
        pb_utils.Logger.log_info(f"{args['model_name']}: {self.placement.why}")

    def execute(self, requests):
        responses: list[Any] = [None] * len(requests)
        sequences: list[np.ndarray] = []
        owners: list[tuple[int, int]] = []  # (request index, number of rows)
        for i, request in enumerate(requests):
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS")
            try:
                rows = decode_padded_batch(None if tensor is None else tensor.as_numpy(),
                                           MINILM_MAX_SEQ_LEN, MINILM_VOCAB_SIZE)
            except RequestError as exc:
                responses[i] = _error(str(exc), pb_utils.TritonError.INVALID_ARG)
                continue
            sequences.extend(rows)
            owners.append((i, len(rows)))
        if sequences:
            try:
                embeddings = self.executor.run(sequences)
            except Exception as exc:  # one failed batch fails its requests, not the model
                for i, _ in owners:
                    responses[i] = _error(f"inference failed: {exc}", pb_utils.TritonError.INTERNAL)
            else:
                offset = 0
                for i, n in owners:
                    out = pb_utils.Tensor("EMBEDDING", embeddings[offset:offset + n].astype(np.float32))
                    responses[i] = pb_utils.InferenceResponse(output_tensors=[out])
                    offset += n
        return responses


class BLSExecutor:
    """Runs a batch on another Triton model (by name) through BLS, as one padded request."""

    def __init__(self, model_name: str):
        self.model_name = model_name

    def run(self, sequences: Sequence[np.ndarray]) -> np.ndarray:
        request = pb_utils.InferenceRequest(
            model_name=self.model_name,
            inputs=[pb_utils.Tensor("INPUT_IDS", pad_batch(sequences))],
            requested_output_names=["EMBEDDING"],
        )
        response = request.exec()
        if response.has_error():
            raise RuntimeError(f"BLS call to '{self.model_name}' failed: {response.error().message()}")
        return pb_utils.get_output_tensor_by_name(response, "EMBEDDING").as_numpy()


class GenericBLSExecutor:
    """Runs a batch on another Triton model through BLS under any tensor contract
    (``tensor_contract``): sequences padded, other inputs concatenated, the outputs split
    back into one set per request."""

    def __init__(self, model_name: str, contract: Contract):
        self.model_name = model_name
        self.contract = contract

    def run(self, requests: Sequence[GenericRequest]) -> list[dict[str, np.ndarray]]:
        inputs = batch_inputs(self.contract, requests)
        request = pb_utils.InferenceRequest(
            model_name=self.model_name,
            inputs=[pb_utils.Tensor(name, value) for name, value in inputs.items()],
            requested_output_names=self.contract.output_names)
        response = request.exec()
        if response.has_error():
            raise RuntimeError(f"BLS call to '{self.model_name}' failed: "
                               f"{response.error().message()}")
        outputs = {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy()
                   for name in self.contract.output_names}
        return split_outputs(outputs, len(requests))


# intake hold: a slot of the call's response list whose answer was already sent.
_SENT = object()
WAKE_REQUEST_ID = "explicit-batching-wake"  # intake.Waker's requests
WAKE_STOP_WAIT_S = 2.0  # at unload, for the wake requests still under way


def _queue_prefetches(config: dict) -> bool:
    """Whether Triton's dynamic batcher for ``config`` prefetches the next batch while
    one runs: only with no queue policy and no priority levels (core r24.10,
    ``PriorityQueue``'s ``support_prefetching_``). Without it intake hold needs its Waker."""
    batcher = config.get("dynamic_batching") or {}
    policy = batcher.get("default_queue_policy") or {}
    return (int(batcher.get("priority_levels", 0) or 0) == 0
            and int(policy.get("default_timeout_microseconds", 0) or 0) == 0
            and not policy.get("allow_timeout_override", False)
            and int(policy.get("max_queue_size", 0) or 0) == 0)


def _wake_inputs(config: dict) -> list:
    """One batch row of each required input of ``config``, zeros (empty strings): a wake
    request is never decoded, it only has to pass Triton's checks."""
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


def _built(response) -> "pb_utils.InferenceResponse":
    """The response to send or return for one request: ``response``, or the one its
    builder makes; never nothing (INTERNAL if building fails or, a bug, intake hold's
    call holds no answer for it)."""
    if response is None:
        return _error("request left unanswered (a bug)", pb_utils.TritonError.INTERNAL)
    try:
        return response() if callable(response) else response
    except Exception as exc:  # never leave a request without its answer
        return _error(f"could not build the response: {exc}", pb_utils.TritonError.INTERNAL)


def _outputs_response(outputs: dict[str, np.ndarray]) -> "pb_utils.InferenceResponse":
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()])


def _inner_contract(args: dict, config: dict, params: dict[str, str], inner: str) -> Contract:
    """This model's tensor contract, checked against the inner model's config.pbtxt (when
    it is in this repository): a mismatch refuses the load, naming it."""
    model = args["model_name"]
    try:
        contract = Contract.from_model_config(config, params)
    except ContractError as exc:
        raise pb_utils.TritonModelException(f"model '{model}': {exc}") from None
    folder = _inner_folder(args, inner)
    path = os.path.join(folder, "config.pbtxt") if folder else ""
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
        try:
            problems = check_inner_config(contract, inner, text)
        except ContractError as exc:
            problems = [f"its config.pbtxt cannot be read: {exc}"]
        if problems:
            raise pb_utils.TritonModelException(
                f"model '{model}': inner_model {inner!r} does not fit this model's tensors: "
                + "; ".join(problems))
    return contract


def _embedding_contract(contract: Contract) -> bool:
    """The MiniLM/emulated contract (INPUT_IDS -> EMBEDDING), whose requests keep the token
    checks of ``decode_request``."""
    return (contract.sequence.name == "INPUT_IDS" and not contract.pass_through
            and contract.output_names == ["EMBEDDING"])


@dataclass
class _Pending:
    """What the adapter keeps for one queued request (the core sees it as ``handle``)."""

    request: Any  # kept alive until answered
    sender: Any
    input_ids: np.ndarray
    answered: bool = False
    decoded: GenericRequest | None = None  # any other tensor contract: the whole request
    # intake: hold - the running execute() call's response list and this request's place
    # in it: its answer is returned from that call (none is sent from another thread).
    responses: list | None = None
    slot: int = -1


class ExplicitModel:
    """A Python-backend model that owns its request queue (explicit-control batching)."""

    def initialize(self, args):
        check_numpy(args["model_name"])
        self.model_name = args["model_name"]
        self.config = json.loads(args["model_config"])
        self.params = _parameters(self.config)
        inner = self.params.get("inner_model", "")
        self.placement = _placement(args, self.params)
        default_profile = "cpu" if self.params.get("executor") == "minilm" else "t4"
        self.profile, why = _load_profile(args, self.params, default_profile,
                                          self.placement.nvml_index)
        self.contract: Contract | None = None  # None: the INPUT_IDS -> EMBEDDING contract
        if inner:
            _check_inner_model(args, self.params, inner)
            contract = _inner_contract(args, self.config, self.params, inner)
            if _embedding_contract(contract):
                self.executor = BLSExecutor(inner)
            else:
                self.contract = contract
                self.executor = GenericBLSExecutor(inner, contract)
        else:
            self.executor, _ = _make_executor(args, self.params, self.placement)
        # Real compute measures its own cost table before serving (the profile's cost
        # model is only the seed); see load_calibration.
        self.profile, _, cost_note = calibrate_at_load(
            self.profile, self.executor, self.placement.on_gpu,
            f"{self.placement.device}" + (f" ({why})" if self.placement.on_gpu else ""))
        pb_utils.Logger.log_info(f"{self.model_name}: {cost_note}")
        # Only the emulated device is slowed by the profile's time scale.
        time_scale = (self.profile.emulation.time_scale
                      if isinstance(self.executor, EmulatedDevice) else 1.0)
        self.scheduler = Scheduler.from_profile(self.profile, time_scale)
        self._control_period_s = self.profile.control.control_period_ms / 1000.0
        self._last_zone = None
        self._ids = itertools.count()
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # the scheduler thread waits on it
        # CPU seconds of the stub's threads (execute(), the scheduler loop, the
        # responders), logged at unload: where the per-request host cost goes.
        self._thread_cpu_s = {"execute": 0.0, "loop": 0.0, "respond": 0.0}
        self._stopping = False
        self._arrivals = 0
        self._loop_errors = 0
        self._last_stats_log = 0.0
        self._last_flush = 0.0
        self._flush_lock = threading.Lock()  # one metrics flush at a time
        self._last_cancel_sweep = 0.0
        # Test hook, off unless configured: a request holding this token id makes the
        # scheduler step fail after its batch was taken (proves nothing is stranded).
        self._loop_fault_token = _int_parameter(self.params, "loop_fault_token", 0,
                                                self.model_name)
        # The intake (intake.py): how execute() hands its requests over, a named part.
        self.intake = make_intake(
            _intake(self.config, self.params, self.model_name), lock, self._cond,
            grace_s=_int_parameter(self.params, "gather_grace_us", GATHER_GRACE_US,
                                   self.model_name) / 1e6,
            default_sla_ms=self.profile.scheduler.default_sla_ms)
        self.metrics = ControlMetrics(self.model_name, self.profile.name, why)
        self._profile_dir = os.environ.get(CPROFILE_ENV) or None
        self._profilers = {}
        if self._profile_dir:
            import cProfile  # noqa: PLC0415 - only when asked for
            # Each profiler runs on one thread: timed by that thread's CPU clock, so the
            # figures are CPU seconds (scripts/host_ledger.py), not wall time.
            self._profilers = {name: cProfile.Profile(time.thread_time)
                               for name in ("execute", "loop", "respond")}
        self._start_sidecar()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        responders = _int_parameter(self.params, "responder_threads", RESPONDER_THREADS,
                                    self.model_name) or 1
        # An intake that is not threaded (hold) decides, runs and answers inside execute()
        # (the calling thread): no scheduler thread, no responders, no hand-over.
        self._responders = [] if not self.intake.threaded else [
            threading.Thread(target=self._respond_loop, daemon=True,
                             name=f"explicit-responder-{k}") for k in range(responders)]
        for thread in self._responders:
            thread.start()
        self._thread = None if not self.intake.threaded else threading.Thread(
            target=self._run_loop, name="explicit-scheduler", daemon=True)
        if self._thread is not None:
            self._thread.start()
        self._metrics_stop = threading.Event()
        self._metrics_thread = None if self.intake.threaded else threading.Thread(
            target=self._metrics_loop, name="explicit-metrics", daemon=True)
        if self._metrics_thread is not None:
            self._metrics_thread.start()
        # intake hold, where Triton's queue cannot prefetch: wake requests end the batcher's
        # lost-wake-up stalls (intake.Waker; opt-in, see WAKE_AFTER_US).
        wake_after_us = _int_parameter(self.params, "wake_after_us", WAKE_AFTER_US,
                                       self.model_name)
        if wake_after_us > 0 and (self.intake.threaded or _queue_prefetches(self.config)):
            pb_utils.Logger.log_warn(
                f"{self.model_name}: parameter 'wake_after_us' ignored: it serves intake hold "
                "behind a queue that cannot prefetch (a default_queue_policy or priority levels)")
            wake_after_us = 0
        self._wakes_in_call = 0
        self._wake_inputs = _wake_inputs(self.config) if wake_after_us > 0 else []
        self._waker = (Waker(wake_after_us / 1e6, self._send_wake).start()
                       if wake_after_us > 0 and not self.intake.threaded else None)
        pb_utils.Logger.log_info(
            f"{self.model_name}: explicit batching on profile '{self.profile.name}' "
            f"(chosen by {why}; {self.profile.source}); executor={type(self.executor).__name__}"
            f"{' -> ' + inner if inner else ''}; intake={self.intake.name}; "
            f"sidecar={self._sidecar_mode}; "
            f"placement: {self.placement.why}")

    def _start_sidecar(self) -> None:
        """Parameter ``sidecar``: "thread" (default: in this process), "off", or
        "file:PATH" (samples from a separate ``python -m sidecar`` process)."""
        mode = self.params.get("sidecar", "thread") or "thread"
        self._sidecar = None
        self._sidecar_max_age_s = 5 * self.profile.control.perception_period_ms / 1000.0
        if mode == "thread":
            url = self.params.get("metrics_url") or os.environ.get(METRICS_URL_ENV, "")
            self._sidecar = Sidecar(url or None,
                                    self.profile.control.perception_period_ms / 1000.0,
                                    log=pb_utils.Logger.log_info,
                                    nvml_index=self.placement.nvml_index).start()
            mode = f"thread ({url or 'NVML only'})"
        elif mode.startswith("file:"):
            self._sidecar = SampleFile(mode[len("file:"):])
        elif mode != "off":
            raise pb_utils.TritonModelException(
                f"model '{self.model_name}': parameter 'sidecar' must be 'thread', 'off' or "
                f"'file:PATH', got {mode!r}")
        self._sidecar_mode = mode

    def _apply_perception(self, now: float) -> float:
        """Feed the latest sidecar sample to the scheduler (never blocks). Returns the
        sidecar health for the metric (-1 when there is no sidecar)."""
        if self._sidecar is None:
            return SIDECAR_DISABLED
        sample = self._sidecar.latest()
        ok = usable(sample, now, self._sidecar_max_age_s)
        self.scheduler.set_perception_health(ok)
        if ok and sample.utilization is not None:
            self.scheduler.set_external_utilization(sample.utilization, sample.taken_s, "nvml")
        return HEALTH_VALUE.get(sample.health, 0.0) if sample is not None else 0.0

    # -- arrivals (Triton's thread) ---------------------------------------------------
    def execute(self, requests):
        cpu0 = time.thread_time()
        profiler = self._profilers.get("execute")
        if profiler is not None:
            profiler.enable()
        try:
            return self._execute(requests)
        finally:
            if profiler is not None:
                profiler.disable()
            self._thread_cpu_s["execute"] += time.thread_time() - cpu0

    def _execute(self, requests):
        return (self._execute_queued(requests) if self.intake.threaded
                else self._execute_held(requests))

    def _decode_call(self, requests, arrival: float, responses: list | None = None
                     ) -> tuple[list[QueuedRequest], float]:
        """A call's valid requests as queued requests (``responses``: intake hold's list
        their answers go to); an invalid one is answered INVALID_ARG at once. Also the
        smallest SLA among them."""
        queued: list[QueuedRequest] = []
        min_sla_ms = math.inf
        self._wakes_in_call = 0
        for i, request in enumerate(requests):
            handle = _Pending(request, None if responses is not None
                              else request.get_response_sender(), None,
                              responses=responses, slot=i)
            if self._waker is not None and request.request_id() == WAKE_REQUEST_ID:
                self._wakes_in_call += 1
                self._reply(handle, pb_utils.InferenceResponse())
                continue
            try:
                decoded = self._decode(request)
            except RequestError as exc:
                self.metrics.on_rejected("invalid_input")
                self._reply(handle, _error(str(exc), pb_utils.TritonError.INVALID_ARG))
                continue
            handle.input_ids = decoded.input_ids
            handle.decoded = decoded if self.contract else None
            sla_ms = decoded.sla_ms or self.profile.scheduler.default_sla_ms
            min_sla_ms = min(min_sla_ms, sla_ms)
            queued.append(QueuedRequest(next(self._ids), int(decoded.input_ids.size),
                                        arrival, sla_ms, handle))
        return queued, min_sla_ms

    def _submit_call(self, queued: list[QueuedRequest], now: float) -> None:
        """Queue a call's requests with the scheduler (held lock: one wake-up for the whole
        call); the ones refused at the door are answered UNAVAILABLE."""
        refused: list[tuple[QueuedRequest, str, str]] = []
        with self._cond:
            if self._stopping:
                refused = [(q, "model is shutting down", "shutting_down") for q in queued]
            else:
                for q in queued:
                    try:
                        self.scheduler.submit(q, now)
                    except QueueFull as exc:
                        refused.append((q, f"queue full: {exc}", "queue_full"))
                self._arrivals += len(queued) - len(refused)
            self.intake.call_queued_locked()
            self._cond.notify()
        for q, message, reason in refused:
            self.metrics.on_rejected(reason)
            q.handle.answered = True
            self._reply(q.handle, _error(message, pb_utils.TritonError.UNAVAILABLE))

    def _execute_queued(self, requests):
        """A threaded intake (release, gather): queue the call's requests for the scheduler
        thread and return (gather: once the batch in flight has ended)."""
        now = time.monotonic()
        queued, min_sla_ms = self._decode_call(requests, self.intake.call_arrival(now))
        generation = self.intake.generation()  # a release from now on lets it return
        self._submit_call(queued, now)
        self.intake.after_queued(len(requests), min_sla_ms, generation)
        return None

    def _execute_held(self, requests):
        """intake hold: decide, run and answer this call's requests in this thread. None is
        released before it is answered, so a stub crash leaves the rest to Triton, which
        fails them (INTERNAL). Answers made while more of the call's work remains
        (refusals, every batch but the last) are sent at once through the request's
        response sender (Triton then counts that request closed: python_backend r24.09,
        ``ProcessRequests``); the last batch's are returned. Triton's dynamic batcher
        queues what arrives meanwhile and hands it over in the next call: one decision
        pass per batch, not per arrival, and no hand-over between threads."""
        now = time.monotonic()
        waker = self._waker
        if waker is not None:
            waker.call_started()
        responses: list = [None] * len(requests)
        queued, _ = self._decode_call(requests, self.intake.call_arrival(now), responses)
        self._submit_call(queued, now)
        while self.scheduler.queue_depth:  # flush: every pass ships or sheds something
            depth = self.scheduler.queue_depth
            try:
                self._dispatch_once(flush=True)
            except Exception:  # its requests were answered (INTERNAL); serve the rest
                self._step_failed()
                if self.scheduler.queue_depth >= depth:  # nothing left the queue: stop
                    with self._cond:
                        stuck = self.scheduler.drain()
                    for r in stuck:
                        self._answer(r, _error("scheduler failed before this request ran",
                                               pb_utils.TritonError.INTERNAL))
            if self.scheduler.queue_depth:
                self._send_ready(requests, responses)
        done = time.monotonic()
        self.intake.call_returned(now, done)
        if waker is not None:
            waker.call_returned(done, answered_real=self._wakes_in_call < len(requests))
        self._maybe_log_stats(done)
        return [None if response is _SENT else _built(response) for response in responses]

    def _send_wake(self) -> bool:
        """intake.Waker's wake request: into this model, answered (empty) by the next call;
        False when Triton refused it (a full queue) or it failed."""
        self.metrics.on_event("wake_requests_total")
        response = pb_utils.InferenceRequest(
            model_name=self.model_name, inputs=self._wake_inputs, requested_output_names=[],
            request_id=WAKE_REQUEST_ID).exec()
        return not response.has_error()

    def _send_ready(self, requests, responses: list) -> None:
        """intake hold: send the call's answers made so far; their slots become _SENT."""
        for i, response in enumerate(responses):
            if response is not None and response is not _SENT:
                responses[i] = _SENT
                self._send(requests[i].get_response_sender(), _built(response))

    def _decode(self, request):
        if self.contract is not None:
            c = self.contract
            names = [c.sequence.name, *(t.name for t in c.pass_through), "SLA_MS"]
            tensors = {}
            for name in names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                tensors[name] = None if tensor is None else tensor.as_numpy()
            return decode_generic(c, tensors, _request_parameters(request),
                                  _timeout_us(request))
        ids = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS")
        sla = pb_utils.get_input_tensor_by_name(request, "SLA_MS")
        return decode_request(None if ids is None else ids.as_numpy(),
                              None if sla is None else sla.as_numpy(),
                              _request_parameters(request), MINILM_MAX_SEQ_LEN,
                              MINILM_VOCAB_SIZE, _timeout_us(request))

    @staticmethod
    def _send(sender, response) -> None:
        try:
            sender.send(response, flags=FINAL)
        except Exception as exc:  # the client may be gone; never let that kill the loop
            pb_utils.Logger.log_warn(f"could not send a response: {exc}")

    def _reply(self, handle: _Pending, response) -> None:
        """Answer now, from this thread: into the running call's list (intake hold), or
        sent."""
        if handle.responses is not None:
            handle.responses[handle.slot] = response
        else:
            self._send(handle.sender, response)

    def _answer(self, req: QueuedRequest, response) -> None:
        """The one final response of a queued request (a second one is never sent).
        ``response`` is a response or a function that builds one: intake hold keeps it for
        the call's return; otherwise a responder thread builds and sends it, so the
        scheduler thread goes on to the next batch at once."""
        if not req.handle.answered:
            req.handle.answered = True
            if req.handle.responses is not None:
                req.handle.responses[req.handle.slot] = response
            else:
                self._outbox.put((req.handle, response))

    def _respond_loop(self) -> None:
        """The responder thread: builds and sends queued responses until the sentinel.

        Sending is a round trip to the server (~0.4 ms each, measured with cProfile at 300
        req/s); done on the scheduler thread, the device stood idle meanwhile."""
        profiler = None  # a cProfile object serves one thread: the first responder's
        if threading.current_thread() is self._responders[0]:
            profiler = self._profilers.get("respond")
        if profiler is not None:
            profiler.enable()  # this thread only
        try:
            self._respond()
        finally:
            if profiler is not None:
                profiler.disable()
            with self._cond:
                self._thread_cpu_s["respond"] += time.thread_time()

    def _respond(self) -> None:
        while True:
            item = self._outbox.get()
            if item is None:
                return
            handle, response = item
            self._send(handle.sender, _built(response))

    @staticmethod
    def _is_cancelled(req: QueuedRequest) -> bool:
        try:
            return bool(req.handle.request.is_cancelled())
        except Exception:  # asking costs a message to the server; a failure means "no"
            return False

    def _drop_cancelled(self, batch: Sequence[QueuedRequest], now: float
                        ) -> list[QueuedRequest]:
        """Answer requests the client cancelled (gRPC cancel) instead of computing them
        (asked of those that waited CANCEL_CHECK_MIN_WAIT_S or more)."""
        kept = []
        for r in batch:
            if now - r.arrival_s >= CANCEL_CHECK_MIN_WAIT_S and self._is_cancelled(r):
                self.metrics.on_event("cancelled_requests_total")
                self._answer(r, _error("request cancelled by the client",
                                       pb_utils.TritonError.CANCELLED))
            else:
                kept.append(r)
        return kept

    def _sweep_cancelled(self, now: float) -> None:
        """Once a second, take cancelled requests out of the queue (the oldest first)."""
        if now - self._last_cancel_sweep < CANCEL_SWEEP_PERIOD_S:
            return
        self._last_cancel_sweep = now
        with self._cond:
            oldest = self.scheduler.peek(CANCEL_SWEEP_MAX)
        cancelled = [r.request_id for r in oldest if self._is_cancelled(r)]
        if cancelled:
            with self._cond:
                removed = self.scheduler.remove(cancelled)
            self._drop_cancelled(removed, math.inf)

    # -- the scheduler thread ---------------------------------------------------------
    def _run_loop(self) -> None:
        """Supervised loop: an exception in one step is logged and counted, never fatal."""
        profiler = self._profilers.get("loop")
        if profiler is not None:
            profiler.enable()  # this thread only
        try:
            self._supervise()
        finally:
            if profiler is not None:
                profiler.disable()
            self._thread_cpu_s["loop"] += time.thread_time()

    def _supervise(self) -> None:
        while True:
            try:
                if not self._step():
                    return
            except Exception:
                self._step_failed()
                time.sleep(0.01)

    def _step_failed(self) -> None:
        """A scheduling step raised (its requests were answered): count and log it."""
        self._loop_errors += 1
        self.metrics.on_event("loop_errors_total")
        pb_utils.Logger.log_error(
            f"{self.model_name}: scheduler step failed (#{self._loop_errors}):\n"
            f"{traceback.format_exc()}")

    def _step(self) -> bool:
        """One step of the scheduler thread (intake release / gather); False once stopping
        and the queue is empty."""
        now, decision, arrivals_seen = self._dispatch_once(flush=self._stopping)
        if decision.batch:
            return True
        if self._stopping:
            return False
        self._sweep_cancelled(now)
        # Wake for the scheduler's own time, an arrival, or the next decision period.
        timeout = self._control_period_s
        wake_at = wake_time(decision, now)
        if wake_at is not None:
            timeout = min(timeout, wake_at - now)
        with self._cond:
            if self._arrivals == arrivals_seen:  # nothing arrived since the decision
                self.intake.idle_locked()  # gather: let parked calls go
                self._cond.wait(timeout=timeout)
        self._maybe_log_stats(time.monotonic())
        return True

    def _dispatch_once(self, flush: bool):
        """Ask the scheduler once, answer what it sheds and run the batch it forms (the
        scheduler thread, or intake hold's execute() with ``flush``: nothing arrives until
        that call has answered its requests, so waiting for arrivals cannot pay). Returns
        (now, the decision, the arrivals counted when it was made).

        Whatever fails inside, every request this step took out of the queue leaves with
        exactly one response (the ``finally`` answers the ones still owed)."""
        with self._cond:
            now = time.monotonic()
            sidecar_health = self._apply_perception(now)
            decision = decide(self.scheduler, now, flush=flush)
            arrivals_seen = self._arrivals
        owed = [*decision.batch, *(r for r, _ in decision.rejected)]
        started = None
        try:
            if decision.rejected:
                self.metrics.on_rejected("deadline_infeasible", len(decision.rejected))
            for req, reason in decision.rejected:
                self._answer(req, _error(refusal_message(reason),
                                         pb_utils.TritonError.UNAVAILABLE))
            self._log_zone_change(decision, now)
            if self.intake.threaded:  # intake hold: its metrics thread publishes instead
                self._flush_metrics_if_due(now, sidecar_health)
            if decision.batch:
                batch = self._drop_cancelled(decision.batch, now)
                with self._cond:
                    started = time.monotonic()
                    self.scheduler.batch_started(batch, started)
                if self._loop_fault_token and any(
                        self._loop_fault_token in r.handle.input_ids for r in batch):
                    raise RuntimeError("injected scheduler-loop fault (loop_fault_token)")
                self._run_batch(batch, started, decision.former)
                started = None
        finally:
            unanswered = [r for r in owed if not r.handle.answered]
            for r in unanswered:
                self._answer(r, _error("scheduler loop failed while handling this request",
                                       pb_utils.TritonError.INTERNAL))
            if started is not None:  # the batch never finished normally
                self._batch_finished(batch, started, succeeded=False)
        return now, decision, arrivals_seen


    def _flush_metrics_if_due(self, now: float, sidecar_health: float) -> None:
        """Publish the control metrics once per control period (from the scheduling step,
        or the metrics thread while intake hold has no call); a flush already running
        elsewhere is not waited for."""
        if now - self._last_flush < self._control_period_s:
            return
        if not self._flush_lock.acquire(blocking=False):
            return
        try:
            self._last_flush = now
            with self._cond:
                stats = self.scheduler.stats(now)
            self.metrics.flush(stats, sidecar_health)
        finally:
            self._flush_lock.release()

    def _metrics_loop(self) -> None:
        """intake hold: the control metrics are published here, every control period, and
        not from execute(): a flush (~90 messages to the server for the latency histograms)
        there was 12 % of execute()'s samples at the closed-loop peak (py-spy), time the
        call's requests waited for. Touches no request."""
        while not self._metrics_stop.wait(self._control_period_s):
            try:
                now = time.monotonic()
                with self._cond:
                    health = self._apply_perception(now)
                self._flush_metrics_if_due(now, health)
            except Exception:  # the metrics must never take the model down
                pb_utils.Logger.log_warn(f"{self.model_name}: metrics flush failed:\n"
                                         f"{traceback.format_exc()}")

    def _run_batch(self, batch: Sequence[QueuedRequest], started: float, former: str) -> None:
        if not batch:  # every member was cancelled
            self._batch_finished(batch, started, succeeded=False)
            return
        succeeded = False
        try:
            builders = self._run_executor(batch)
            succeeded = True
        except Exception as exc:  # fail this batch's requests, keep the loop
            pb_utils.Logger.log_error(f"{self.model_name}: batch of {len(batch)} failed: {exc}")
            for r in batch:
                self._answer(r, _error(f"inference failed: {exc}", pb_utils.TritonError.INTERNAL))
        lengths = [r.seq_len for r in batch]
        self.metrics.on_batch(len(batch), batch_shape(lengths).padding_waste, former)
        self.metrics.on_dispatch([(r.sla_ms, started - r.arrival_s) for r in batch])
        if succeeded:
            for r, build in zip(batch, builders):
                self._answer(r, build)
            done = time.monotonic()  # handed to the responder (sent within ~1 ms)
            for r in batch:
                self.metrics.on_response(r.sla_ms, done - r.arrival_s)
        else:
            self.metrics.on_event("batch_failures_total")
        self._batch_finished(batch, started, succeeded)

    def _batch_finished(self, batch: Sequence[QueuedRequest], started: float,
                        succeeded: bool) -> None:
        """The device is free again (gather: a parked call may return, see intake.py)."""
        with self._cond:
            self.scheduler.batch_finished(batch, started, time.monotonic(), succeeded)
            self.intake.batch_finished_locked(started)

    def _run_executor(self, batch: Sequence[QueuedRequest]) -> list:
        """Run ``batch``; one response builder per request (built on the responder)."""
        if self.contract is None:
            embeddings = self.executor.run([r.handle.input_ids for r in batch])
            return [functools.partial(_embedding_response, e) for e in embeddings]
        outputs = self.executor.run([r.handle.decoded for r in batch])
        return [functools.partial(_outputs_response, o) for o in outputs]

    def _log_zone_change(self, decision, now: float) -> None:
        zone = (decision.zone, decision.mode, decision.former)
        if zone != self._last_zone:
            self._last_zone = zone
            s = self.scheduler.stats(now)
            pb_utils.Logger.log_info(
                f"{self.model_name}: zone={ZONE_NAMES[decision.zone]} mode={decision.mode} "
                f"former={decision.former} "
                f"score={s.zone_score:.2f} utilization={s.utilization:.2f} "
                f"queue_depth={s.queue_depth} p99_cv={s.p99_cv:.2f} window_ms={s.window_ms:.2f}")

    def _maybe_log_stats(self, now: float) -> None:
        if now - self._last_stats_log < STATS_LOG_PERIOD_S:
            return
        self._last_stats_log = now
        s = self.scheduler.stats(now)
        if s.batches:
            pb_utils.Logger.log_info(
                f"{self.model_name}: zone={ZONE_NAMES[s.zone]} prewarmed={s.prewarmed} "
                f"window_ms={s.window_ms:.2f} utilization={s.utilization:.2f} "
                f"queue_depth={s.queue_depth} p99_ms={s.p99_ms:.1f} p99_cv={s.p99_cv:.2f} "
                f"observation_age_ms={s.observation_age_ms:.0f} batches={s.batches} "
                f"requests={s.requests} sla_met={s.sla_met} sla_missed={s.sla_missed} "
                f"rejected={s.rejected_infeasible} emergency={s.emergency_batches} "
                f"compensation={s.compensation_batches} cost_correction={s.cost_correction:.2f}"
                f"{self.intake.summary()}")

    def finalize(self):
        """Stop accepting, serve what is queued (flush), then fail anything left."""
        if self._waker is not None:  # no wake request may be under way at unload
            self._waker.stop(timeout_s=WAKE_STOP_WAIT_S)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self.intake.stop_locked()
        if self._thread is not None:  # intake hold has none: its calls answered everything
            self._thread.join(timeout=SHUTDOWN_DRAIN_S)
        self._metrics_stop.set()
        if self._metrics_thread is not None:
            self._metrics_thread.join(timeout=SHUTDOWN_DRAIN_S)
        if isinstance(self._sidecar, Sidecar):
            self._sidecar.stop()
        self.metrics.close()
        with self._cond:
            leftovers = self.scheduler.drain()
        for r in leftovers:
            self._answer(r, _error("model unloaded before the request ran",
                                   pb_utils.TritonError.UNAVAILABLE))
        # Each responder sends everything queued before its sentinel, then ends.
        for _ in self._responders:
            self._outbox.put(None)
        deadline = time.monotonic() + SHUTDOWN_DRAIN_S
        for thread in self._responders:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for name, profiler in self._profilers.items():
            os.makedirs(self._profile_dir, exist_ok=True)
            profiler.dump_stats(os.path.join(self._profile_dir, f"{self.model_name}.{name}.pstats"))
        cpu = " ".join(f"{k}={v:.2f}" for k, v in self._thread_cpu_s.items())
        pb_utils.Logger.log_info(
            f"{self.model_name}: unloading; thread CPU s: {cpu}; "
            f"requests={self._arrivals};{self.intake.summary()}"
            + (self._waker.summary() if self._waker is not None else ""))
