"""The plugin's model-config parameters as one typed, frozen, validated object.

``parameters { key: "..." value: { string_value: "..." } }`` in a ``config.pbtxt`` reach
the model as strings. ``ModelSettings.from_parameters`` reads them once, in
``initialize``: each key must be one this table knows (or a dotted ``section.key``
profile override, which the profile validates), each value must fit its type, choices and
bounds, and a refusal names the model, the key, the value and, for an unknown key, the
nearest known one. A typo therefore refuses the load instead of silently doing nothing;
so does a renamed key, naming its new name (RENAMED). Durations are in ms, named ``_ms``.

This module imports no ``triton_python_backend_utils``: tests build settings without a
server, and the adapter turns a ``SettingsError`` into Triton's load error.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Mapping

from scheduler_core.profile_limits import RENAMED_KEYS

from .intake import GATHER_GRACE_MS, INTAKES
from .waker import WAKE_AFTER_MS

# Threads that build and send responses (threaded intakes). Each send is a round trip to
# the server that blocks its thread, so one thread caps the model's responses a second
# whatever the batching (docs/defaults.md).
RESPONDER_THREADS = 4
# At unload, finalize() waits at most this long for the scheduler thread to serve what is
# queued, and as long for the responders: below Triton's default --exit-timeout-secs of 30
# (a deployment's grace period must cover it: deploy/kubernetes/base/deployment.yaml).
SHUTDOWN_DRAIN_S = 20.0
# Before a batch runs (runner.py), only members that waited at least this long are asked
# whether their client cancelled: each question is a round trip to the server, and a client
# rarely gives up within a few ms of sending (docs/defaults.md). Those that waited less are
# computed even if cancelled.
CANCEL_CHECK_MIN_WAIT_S = 0.1
# A finished batch's feedback (runner.py: metrics, latency windows, cost refit) waits for
# up to this many batches, or a quarter of a perception period, and runs with the others
# (deferred.py): alone it runs cold, once a call (results/batched_feedback/).
FEEDBACK_BATCHES = 8
FEEDBACK_MAX_AGE_PERIODS = 0.25  # of a perception period (perception_period_ms)
EXECUTORS = ("minilm", "bert_large_random", "emulated")
# The executors that compute for real (torch, on the instance's device): their cost table
# is measured at load, and a GPU placement asks torch whether CUDA is there.
REAL_EXECUTORS = ("minilm", "bert_large_random")
INNER_MODEL_CHECKS = ("repository", "off")
SIDECAR_MODES = ("thread", "off", "file:PATH")
# Keys the Python backend itself reads from the same parameters (python_be.cc r24.09);
# known, and left to it.
BACKEND_KEYS = ("EXECUTION_ENV_PATH", "FORCE_CPU_ONLY_INPUT_TENSORS")
# Keys whose value becomes a profile override (validated by the profile).
PROFILE_ALIASES = {"time_scale": "emulation.time_scale", "cost_mode": "emulation.cost_mode"}
# Keys that were renamed (one unit per kind: ms; the plugin's queue bound named apart from
# Triton's max_queue_size): the old spelling refuses the load, naming the new one.
RENAMED = {"gather_grace_us": "gather_grace_ms", "wake_after_us": "wake_after_ms",
           **RENAMED_KEYS}
# (low, high) inclusive bounds of the numeric settings; None = unbounded on that side.
BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "intra_op_threads": (0, 1024),
    "responder_threads": (1, 64),
    "gather_grace_ms": (0, 10_000),
    "wake_after_ms": (0, 10_000),
    "fault_injection_token": (0, None),
    "loop_fault_token": (0, None),
    "decode_fault_token": (0, None),
    "benchmark_mode_restore_max_queue_size": (0, None),
    "max_sequence_length": (1, 1_000_000),
    "bert_layers": (1, 48),
    "shape_bucket_tokens": (0, 512),
    "batch_timeout_floor_ms": (1, 3_600_000),
}
CHOICES: dict[str, tuple[str, ...]] = {
    "executor": EXECUTORS,
    "inner_model_check": INNER_MODEL_CHECKS,
    "intake": INTAKES,
}


class SettingsError(ValueError):
    """A model-config parameter this plugin refuses; the message names model, key, value."""


@dataclass(frozen=True)
class ModelSettings:
    """Every parameter the plugin reads, typed (strings left empty mean "not set")."""

    executor: str = ""  # one of EXECUTORS: the in-process executor
    inner_model: str = ""  # a model in this repository to run batches on, through BLS
    inner_model_check: str = "repository"  # "off": the inner model is elsewhere
    intake: str = ""  # "" = hold behind Triton's batcher, release without one
    hardware_profile: str = ""  # a profile name in profile_dir
    profile_dir: str = ""  # relative to the model repository; "" = <model>/profiles
    device: str = ""  # placement (see placement.py)
    sidecar: str = "thread"  # "thread" | "off" | "file:PATH"
    metrics_url: str = ""  # Triton's metrics page, for the in-process sidecar
    intra_op_threads: int = 1  # the real executors' torch threads
    bert_layers: int = 24  # bert_large_random's encoder layers (BERT-large has 24)
    # The real executors' batch shapes (executors.TorchEncoder): 0 pads to the longest; N
    # pads lengths to a multiple of N tokens and rows to a power of two, warmed at load.
    shape_bucket_tokens: int = 0
    responder_threads: int = RESPONDER_THREADS
    gather_grace_ms: float = GATHER_GRACE_MS
    wake_after_ms: float = WAKE_AFTER_MS
    sequence_input: str = ""  # tensor contract: the variable-length input ("" = INPUT_IDS)
    pad_value: float = 0.0
    max_sequence_length: int = 512
    # The watchdog (watchdog.Watchdog): a batch running longer than this, or than
    # BATCH_TIMEOUT_FACTOR x its estimate if that is longer, fails its requests INTERNAL.
    batch_timeout_floor_ms: int = 5000
    # Test hooks, off (0) unless configured: a request holding this token id fails the
    # emulated device / the scheduler step (proves failures strand nothing).
    fault_injection_token: int = 0
    loop_fault_token: int = 0
    decode_fault_token: int = 0  # ... decoding a request holding it raises (decode.py)
    # Test hook, off ("") unless configured: while this file exists the emulated device
    # holds each batch at its door (executors.DeviceGate), so a test can make "queued" a
    # fact instead of a guess.
    device_gate_file: str = ""
    # Written by the operator tools' benchmark mode: the queue bound it lifted, to put back
    # when it ends. The plugin does not act on it.
    benchmark_mode_restore_max_queue_size: int = 0
    # Dotted ``section.key`` -> text (and the aliases above): the profile validates them.
    profile_overrides: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_model_config(cls, model: str, config: Mapping) -> "ModelSettings":
        """Settings from the model config Triton hands ``initialize`` (parsed JSON)."""
        return cls.from_parameters(model, parameters_of(config))

    @classmethod
    def from_parameters(cls, model: str, params: Mapping[str, str]) -> "ModelSettings":
        """Settings from the model config's parameters (key -> string value)."""
        known = {f.name: f for f in fields(cls) if f.name != "profile_overrides"}
        values: dict = {}
        overrides: dict[str, str] = {}
        for key, text in params.items():
            if key in BACKEND_KEYS:
                continue
            if key in RENAMED:
                raise SettingsError(f"model '{model}': parameter '{key}' was renamed to "
                                    f"'{RENAMED[key]}' (value {text!r}; durations are in ms: "
                                    "docs/configuration.md)")
            if key in PROFILE_ALIASES:
                if text:
                    overrides[PROFILE_ALIASES[key]] = text
                continue
            if "." in key:
                if text:
                    overrides[key] = text
                continue
            if key not in known:
                raise SettingsError(_unknown(model, key, text))
            if text == "":
                continue  # unset: the default
            values[key] = _typed(model, key, text, type(known[key].default))
        sidecar = values.get("sidecar", "thread")
        if sidecar not in ("thread", "off") and not sidecar.startswith("file:"):
            raise SettingsError(f"model '{model}': parameter 'sidecar' must be one of "
                                f"{SIDECAR_MODES}, got {sidecar!r}")
        return cls(**values, profile_overrides=overrides)


KNOWN_KEYS = tuple(sorted([f.name for f in fields(ModelSettings) if f.name != "profile_overrides"]
                          + list(PROFILE_ALIASES) + list(BACKEND_KEYS)))


def parameters_of(config: Mapping) -> dict[str, str]:
    """A model config's ``parameters`` as key -> string value."""
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def _unknown(model: str, key: str, text: str) -> str:
    nearest = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.6)
    hint = f"; nearest known key: '{nearest[0]}'" if nearest else ""
    return (f"model '{model}': unknown parameter '{key}' (value {text!r}){hint}. Known: "
            f"{', '.join(KNOWN_KEYS)}, or a profile key as 'section.key'")


def _typed(model: str, key: str, text: str, kind: type):
    """``text`` as ``kind``, inside the key's bounds and choices."""
    if kind is str:
        choices = CHOICES.get(key)
        if choices and text not in choices:
            raise SettingsError(f"model '{model}': parameter '{key}' must be one of "
                                f"{choices}, got {text!r}")
        return text
    try:
        value = kind(text)
    except ValueError:
        raise SettingsError(f"model '{model}': parameter '{key}' must be "
                            f"{'an integer' if kind is int else 'a number'}, "
                            f"got {text!r}") from None
    low, high = BOUNDS.get(key, (None, None))
    if (low is not None and value < low) or (high is not None and value > high):
        raise SettingsError(f"model '{model}': parameter '{key}' must be in "
                            f"[{low}, {'' if high is None else high}], got {value}")
    return value
