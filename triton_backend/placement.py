"""Where one model instance runs, and which GPU NVML should watch for it.

Triton tells each Python-backend instance its placement in ``initialize(args)``:
``args["model_instance_kind"]`` ("CPU", "GPU" or "MODEL") and
``args["model_instance_device_id"]`` (a string such as "1"). This module turns that, plus
the model-config parameter ``device`` (``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``), into a
torch device string and an NVML index. It imports neither Triton nor torch, so every rule
is unit-tested here; the adapter passes ``torch.cuda.is_available()`` in.

The rules:

- ``auto`` (the default) follows the instance kind. ``KIND_GPU`` runs on ``cuda:<id>`` and
  NVML watches that GPU. ``KIND_CPU`` stays on the CPU even where CUDA exists, and NVML is
  not read (a GPU's load says nothing about work on the CPU). To use a GPU, set
  ``kind: KIND_GPU`` in the instance_group: Triton then places and counts the instances
  per GPU. ``KIND_MODEL`` ("the model decides") uses ``cuda:<id>`` when CUDA is available,
  else the CPU.
- ``cpu`` forces the CPU. ``cuda`` forces ``cuda:<id>`` for a ``KIND_GPU`` instance and
  ``cuda:0`` otherwise; ``cuda:N`` forces GPU N. An explicit model that only forwards
  batches to an inner model (BLS) can say ``cuda:N`` to watch the GPU the inner model uses.
- A GPU asked for where torch sees no CUDA is an error, not a silent CPU fallback: a GPU
  cost profile on a CPU would mis-schedule every batch.

CUDA ordinals and NVML indices differ when ``CUDA_VISIBLE_DEVICES`` selects GPUs: CUDA
device 0 is the first listed GPU, NVML counts every GPU on the host. When that variable is
a list of integers, the NVML index is the listed entry; a list of UUIDs (``GPU-...``) or
MIG instances cannot be mapped without NVML, and the CUDA ordinal is used with a warning in
``why``. NVML also orders GPUs by PCI bus; CUDA does too with
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (its default, fastest first, differs only on hosts that
mix GPU models).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")


class PlacementError(ValueError):
    """The instance's kind, device id or ``device`` parameter cannot be honoured."""


@dataclass(frozen=True)
class Placement:
    device: str  # torch device: "cpu" or "cuda:N"
    nvml_index: int | None  # the GPU NVML reads for this instance; None: do not read NVML
    why: str  # one line for the load log

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")


def _device_id(raw: str | int | None) -> int:
    if raw is None or raw == "":
        return 0
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise PlacementError(f"model_instance_device_id must be an integer, got {raw!r}") from None
    if value < 0:
        raise PlacementError(f"model_instance_device_id must be >= 0, got {value}")
    return value


def _parse_device(requested: str | None) -> tuple[str, int | None]:
    """``device`` parameter -> (mode, explicit ordinal or None)."""
    text = (requested or "auto").strip().lower()
    if text in ("auto", "cpu", "cuda"):
        return text, None
    if text.startswith("cuda:"):
        ordinal = text[len("cuda:"):]
        if ordinal.isdigit():
            return "cuda", int(ordinal)
    raise PlacementError(f"parameter 'device' must be one of {', '.join(DEVICE_CHOICES)}; "
                         f"got {requested!r}")


def nvml_index_for(cuda_ordinal: int, visible_devices: str | None) -> tuple[int, str]:
    """The NVML index of CUDA device ``cuda_ordinal`` given ``CUDA_VISIBLE_DEVICES``, and a
    note for the log ("" when nothing needs saying)."""
    if visible_devices is None or not visible_devices.strip():
        return cuda_ordinal, ""
    entries = [e.strip() for e in visible_devices.split(",") if e.strip()]
    if all(e.isdigit() for e in entries):
        if cuda_ordinal >= len(entries):
            raise PlacementError(f"CUDA device {cuda_ordinal} is not visible: "
                                 f"CUDA_VISIBLE_DEVICES={visible_devices!r} lists {len(entries)}")
        index = int(entries[cuda_ordinal])
        return index, f"CUDA_VISIBLE_DEVICES={visible_devices}: CUDA {cuda_ordinal} is NVML {index}"
    return cuda_ordinal, (f"CUDA_VISIBLE_DEVICES={visible_devices!r} is not a list of indices: "
                          f"NVML reads device {cuda_ordinal}, which may be another GPU")


def placement(model_instance_kind: str, model_instance_device_id: str | int | None,
              cuda_available: bool | Callable[[], bool], requested: str | None = "auto",
              visible_devices: str | None = None) -> Placement:
    """Where an instance runs: ``model_instance_kind`` and ``model_instance_device_id`` as
    Triton passes them in ``args``; ``cuda_available`` from torch (or a function asked only
    when the answer matters, so a KIND_CPU instance never imports torch for it);
    ``requested`` the model-config parameter ``device``; ``visible_devices`` the
    ``CUDA_VISIBLE_DEVICES`` environment variable. Raises ``PlacementError`` naming the bad
    value."""
    kind = (model_instance_kind or "").strip().upper()
    if kind.startswith("KIND_"):
        kind = kind[len("KIND_"):]
    if kind not in ("CPU", "GPU", "MODEL", "AUTO"):
        raise PlacementError(f"model_instance_kind must be CPU, GPU or MODEL, "
                             f"got {model_instance_kind!r}")
    device_id = _device_id(model_instance_device_id)
    mode, ordinal = _parse_device(requested)
    cuda = functools.cache(cuda_available if callable(cuda_available)
                           else lambda: bool(cuda_available))  # asked at most once

    if mode == "cpu":
        return Placement("cpu", None, f"parameter device=cpu (instance KIND_{kind})")
    if mode == "cuda":
        if ordinal is None:
            ordinal = device_id if kind == "GPU" else 0
        source = f"parameter device={(requested or '').strip()} (instance KIND_{kind})"
    elif kind == "GPU":
        ordinal, source = device_id, f"instance KIND_GPU on device {device_id}"
    elif kind == "CPU":
        return Placement("cpu", None, "instance KIND_CPU: runs on the CPU, NVML not read "
                                      "(set KIND_GPU in instance_group to use a GPU)")
    elif cuda():  # KIND_MODEL (or AUTO): the model decides, and CUDA is here
        ordinal, source = device_id, f"instance KIND_{kind} with CUDA available"
    else:
        return Placement("cpu", None, f"instance KIND_{kind} without CUDA: runs on the CPU")

    if not cuda():
        raise PlacementError(f"{source} asks for cuda:{ordinal}, but torch sees no CUDA "
                             f"device (a CPU-only torch build, or no driver)")
    index, note = nvml_index_for(ordinal, visible_devices)
    why = f"{source}: cuda:{ordinal}, NVML device {index}"
    return Placement(f"cuda:{ordinal}", index, f"{why}; {note}" if note else why)
