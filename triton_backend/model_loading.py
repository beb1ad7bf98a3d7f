"""What a model needs before it serves, chosen and checked at load: its hardware profile,
its placement, its executor, its inner model and tensor contract, and its intake.

Each function refuses with ``LoadRefused``, whose message names the model, the key and the
value; the lifecycle classes (``inner_model``, ``explicit_model``) raise it as Triton's
load error. No ``triton_python_backend_utils`` here: tests load profiles and choose intakes
without a server.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from scheduler_core.profile import HardwareProfile, ProfileError

from scheduler_core.profile_parse import with_dotted_overrides
from scheduler_core.profile_files import load_profile_dir, select_profile
from sidecar.nvml import detect_device_name

from .executors import DeviceGate, EmulatedDevice, MiniLMEncoder, RandomBertLargeEncoder
from .intake import DEFAULT_INTAKE
from .model_settings import EXECUTORS, REAL_EXECUTORS, ModelSettings
from .placement import Placement, PlacementError, placement
from .tensor_contract import Contract, ContractError, check_inner_config

PROFILE_ENV = "EXPLICIT_BATCHING_PROFILE"


class LoadRefused(ValueError):
    """This model cannot load as configured; the message says why, naming the value."""


def inner_folder(args: Mapping[str, Any], inner: str) -> str | None:
    """The folder of model ``inner`` in this model's repository; None when ``inner`` is not
    a plain model name (no path may leave the repository) or has no folder there."""
    if inner in (".", "..") or not all(c.isalnum() or c in "_-." for c in inner):
        return None
    folder = os.path.join(os.path.dirname(os.path.abspath(args["model_repository"])), inner)
    return folder if os.path.isdir(folder) else None


def check_inner_model(args: Mapping[str, Any], settings: ModelSettings) -> None:
    """Refuse to load, naming the problem, when the BLS inner model has no model folder in
    this repository (a typo, a model that does not exist): a bad reload then fails and
    Triton keeps the working version serving. ``inner_model_check: off`` skips it, for an
    inner model in another repository.

    Checked on disk, not by asking Triton: ``pb_utils.is_model_ready`` while the server is
    still starting (it loads this model and the inner one side by side) aborted the whole
    tritonserver with boost::interprocess::lock_exception in 2 of 4 starts here."""
    if settings.inner_model_check == "off":
        return
    if inner_folder(args, settings.inner_model) is None:
        raise LoadRefused(
            f"model '{args['model_name']}': parameter inner_model={settings.inner_model!r}: "
            "no model folder of that name in this model repository (inner_model_check=off "
            "for one in another repository)")


def choose_intake(config: Mapping[str, Any], settings: ModelSettings, model: str) -> str:
    """Parameter ``intake`` (see ``intake.py``): "gather", "release" or "hold". Gather and
    hold need ``dynamic_batching`` and ``max_batch_size`` >= 2 in the model config, or
    Triton would hand over one request per call. Unset: "hold" (DEFAULT_INTAKE) where the
    config has that front, else "release"."""
    batcher_in_front = "dynamic_batching" in config and config.get("max_batch_size", 0) >= 2
    intake = settings.intake or (DEFAULT_INTAKE if batcher_in_front else "release")
    if intake != "release" and not batcher_in_front:
        raise LoadRefused(
            f"model '{model}': intake '{intake}' needs dynamic_batching and max_batch_size "
            ">= 2 in the model config (Triton queues arrivals while execute() is parked); "
            "set parameter intake to 'release' for a config without them")
    return intake


def instance_index(args: Mapping[str, Any]) -> int:
    """This instance's index in its instance group (Triton names instances
    ``<model>_<group>_<index>``); 0 when the name does not say."""
    tail = str(args.get("model_instance_name", "")).rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def queue_prefetches(config: Mapping[str, Any]) -> bool:
    """Whether Triton's dynamic batcher for ``config`` prefetches the next batch while
    one runs: only with no queue policy and no priority levels (core r24.10,
    ``PriorityQueue``'s ``support_prefetching_``). Without it intake hold needs its Waker."""
    batcher = config.get("dynamic_batching") or {}
    policy = batcher.get("default_queue_policy") or {}
    return (int(batcher.get("priority_levels", 0) or 0) == 0
            and int(policy.get("default_timeout_microseconds", 0) or 0) == 0
            and not policy.get("allow_timeout_override", False)
            and int(policy.get("max_queue_size", 0) or 0) == 0)


def load_profile(args: Mapping[str, Any], settings: ModelSettings, default_name: str,
                 nvml_index: int | None, warn: Callable[[str], None]
                 ) -> tuple[HardwareProfile, str]:
    """The hardware profile for this model and why it was chosen.

    Profiles live in ``profile_dir`` (relative to the model repository; default
    ``<model>/profiles``). Choice: the EXPLICIT_BATCHING_PROFILE environment variable, else
    the parameter ``hardware_profile``, else the name of NVML device ``nvml_index`` (the
    instance's GPU; None: no GPU), else the generic ``gpu`` profile for a GPU no profile
    matches, else ``default_name``."""
    model = args["model_name"]
    model_dir = args["model_repository"]  # this model's own folder
    repo_root = os.path.dirname(os.path.abspath(model_dir))
    profile_dir = settings.profile_dir or os.path.join(os.path.basename(model_dir), "profiles")
    directory = os.path.normpath(os.path.join(repo_root, profile_dir))
    if os.path.commonpath([directory, repo_root]) != repo_root:
        raise LoadRefused(
            f"model '{model}': parameter profile_dir={profile_dir!r} leaves the model repository")
    env_choice = os.environ.get(PROFILE_ENV, "")
    try:
        # Real paths (symlinks resolved) must stay in the repository or the model's own
        # folder: nothing outside is read, or quoted in an error.
        profiles = load_profile_dir(directory, allowed_roots=(repo_root, model_dir))
        # Ask NVML only when nothing names a profile: it is slow to start and absent here.
        device = (None if (env_choice or settings.hardware_profile)
                  else detect_device_name(nvml_index))
        name, why = select_profile(profiles, device, settings.hardware_profile, env_choice,
                                   default_name)
        if device and why.startswith("no profile matches"):
            # An unmatched GPU: name it, so the operator calibrates a profile for it.
            warn(f"model '{model}': {why}; calibrate one for this device with "
                 "`explicit-batching calibrate`")
        return with_parameter_overrides(profiles[name], settings, model), why
    except ProfileError as exc:
        raise LoadRefused(f"model '{model}': {exc}") from None


def with_parameter_overrides(profile: HardwareProfile, settings: ModelSettings,
                             model: str) -> HardwareProfile:
    """Model-config parameters override profile keys per deployment, without editing the
    hardware profile: ``time_scale`` and ``cost_mode`` (the emulated device's slow-down and
    padded/ragged cost), and any dotted ``section.key`` (``scheduler.alpha``,
    ``control.enabled``, ...), which the operator tools use to step parameters on a live
    server through Triton's model-load API."""
    return with_dotted_overrides(profile, settings.profile_overrides,
                                 f"model '{model}' parameters")


def instance_placement(args: Mapping[str, Any], settings: ModelSettings) -> Placement:
    """Where this instance runs (torch device) and which GPU NVML watches: Triton's
    instance kind and device id, and the parameter ``device`` (see ``placement``)."""
    def cuda_available() -> bool:  # asked only when a GPU is wanted
        if settings.executor not in REAL_EXECUTORS or settings.inner_model:
            return True  # no CUDA code runs here: the GPU only names what NVML watches
        import torch  # noqa: PLC0415 - only real compute on a GPU needs it here
        return torch.cuda.is_available()

    try:
        return placement(args.get("model_instance_kind", "CPU"),
                         args.get("model_instance_device_id", "0"), cuda_available,
                         settings.device, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except PlacementError as exc:
        raise LoadRefused(f"model '{args['model_name']}': {exc}") from None


def make_executor(args: Mapping[str, Any], settings: ModelSettings, where: Placement,
                  warn: Callable[[str], None], profile: HardwareProfile | None = None):
    """The in-process executor named by the ``executor`` parameter, on ``where``, and the
    profile it runs (None for real compute). The emulated device runs ``profile`` when the
    caller has loaded it already, else the one ``load_profile`` chooses."""
    if settings.executor == "minilm":
        return MiniLMEncoder(intra_op_threads=settings.intra_op_threads,
                             device=where.device,
                             shape_bucket_tokens=settings.shape_bucket_tokens), None
    if settings.executor == "bert_large_random":
        return RandomBertLargeEncoder(intra_op_threads=settings.intra_op_threads,
                                      device=where.device, layers=settings.bert_layers,
                                      shape_bucket_tokens=settings.shape_bucket_tokens), None
    if settings.executor == "emulated":
        if profile is None:
            profile, _ = load_profile(args, settings, "t4", where.nvml_index, warn)
        gate = DeviceGate(settings.device_gate_file) if settings.device_gate_file else None
        return EmulatedDevice(profile.cost_model, profile.emulation,
                              settings.fault_injection_token, gate), profile
    raise LoadRefused(f"model '{args['model_name']}': parameter 'executor' must be one of "
                      f"{EXECUTORS} (or set inner_model), got {settings.executor!r}")


def check_embedding_width(model: str, config: Mapping[str, Any], executor: Any) -> None:
    """Refuse a config whose EMBEDDING output is not the executor's width (MiniLM and the
    emulated device answer 384 floats a request, bert_large_random 1024): Triton would
    otherwise fail every answer, or the client would read a wrong shape."""
    width = getattr(executor, "output_dim", None)
    dims = [o.get("dims") for o in config.get("output", []) if o.get("name") == "EMBEDDING"]
    if width is None or not dims:
        return
    have = [int(d) for d in dims[0]]
    if have != [int(width)]:
        raise LoadRefused(f"model '{model}': output EMBEDDING has dims {have}, but executor "
                          f"{type(executor).__name__} answers {width} floats a request: set "
                          f"dims: [ {width} ]")


def inner_contract(args: Mapping[str, Any], config: Mapping[str, Any],
                   settings: ModelSettings, max_batch_size: int) -> Contract:
    """This model's tensor contract, checked against the inner model's config.pbtxt (when
    it is in this repository): a mismatch refuses the load, naming it. The inner model
    must take batches of ``max_batch_size`` (the profile's ``scheduler.max_batch_size``,
    the largest batch this model sends it)."""
    model, inner = args["model_name"], settings.inner_model
    try:
        contract = Contract.from_model_config(config, _contract_parameters(settings))
    except ContractError as exc:
        raise LoadRefused(f"model '{model}': {exc}") from None
    folder = inner_folder(args, inner)
    path = os.path.join(folder, "config.pbtxt") if folder else ""
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
        try:
            problems = check_inner_config(contract, inner, text, max_batch_size)
        except ContractError as exc:
            problems = [f"its config.pbtxt cannot be read: {exc}"]
        if problems:
            raise LoadRefused(f"model '{model}': inner_model {inner!r} does not fit this "
                              "model: " + "; ".join(problems))
    return contract


def _contract_parameters(settings: ModelSettings) -> dict[str, str]:
    return {"sequence_input": settings.sequence_input, "pad_value": repr(settings.pad_value),
            "max_sequence_length": str(settings.max_sequence_length)}


def is_embedding_contract(contract: Contract) -> bool:
    """The MiniLM/emulated contract (INPUT_IDS -> EMBEDDING), whose requests keep the token
    checks of ``decode_request``."""
    return (contract.sequence.name == "INPUT_IDS" and not contract.pass_through
            and contract.output_names == ["EMBEDDING"])
