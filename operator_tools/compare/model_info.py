"""What ``compare`` reads of the two models on the server: their configs, profiles and
batch limits (``ModelInfo``).
"""

from __future__ import annotations

import os
import urllib.error
from dataclasses import dataclass

import click

from .. import resources
from ..measure import get_json
from scheduler_core.profile import ProfileError
from scheduler_core.profile_files import load_profile, profile_path


# From the package when installed as a wheel, else the checkout (operator_tools.resources).
LOCAL_REPOSITORY = resources.model_templates_dir()


def http_base(url: str) -> str:
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


@dataclass(frozen=True)
class ModelInfo:
    """What the model config says about the device (``GET /v2/models/<m>/config``)."""

    name: str
    executor: str | None
    hardware_profile: str | None
    time_scale: float
    time_scale_source: str
    cost_mode: str | None
    max_batch_size: int
    max_queue_delay_us: int | None  # Triton's dynamic batcher, when configured
    declares_sla: bool

    @property
    def emulated(self) -> bool:
        return self.executor == "emulated"

    def device_text(self) -> str:
        if self.emulated:
            return (f"**EMULATED** device (executor `emulated`, hardware profile "
                    f"`{self.hardware_profile or '?'}`, time scale {self.time_scale:g} "
                    f"from {self.time_scale_source})")
        return (f"real executor `{self.executor or '?'}` (not emulated; time scale "
                f"{self.time_scale:g})")


def local_profile(params: dict[str, str]):
    """The model's profile from this checkout's model repository, if there is one."""
    name = params.get("hardware_profile")
    folder = params.get("profile_dir", "emulated_explicit/profiles")
    if not name:
        return None
    try:
        return load_profile(profile_path(os.path.join(LOCAL_REPOSITORY, folder), name))
    except ProfileError:
        return None


def model_info(http_base: str, model: str) -> ModelInfo:
    try:
        config = get_json(f"{http_base}/v2/models/{model}/config")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read the config of model {model!r} at "
                                   f"{http_base}: {exc}") from None
    params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
    scale_text = params.get("time_scale")
    if scale_text is not None:
        try:
            scale, source = float(scale_text), "model-config parameter `time_scale`"
        except ValueError:
            raise click.ClickException(f"model {model}: parameter time_scale {scale_text!r} "
                                       f"is not a number") from None
    else:
        profile = local_profile(params)
        if profile is not None:
            scale = profile.emulation.time_scale
            source = f"profile `{profile.name}` (emulation.time_scale; no model parameter)"
        else:
            scale, source = 1.0, "default (no `time_scale` parameter, profile not found here)"
    batching = config.get("dynamic_batching")
    delay = int(batching.get("max_queue_delay_microseconds", 0)) if batching else None
    return ModelInfo(name=model, executor=params.get("executor"),
                     hardware_profile=params.get("hardware_profile"), time_scale=scale,
                     time_scale_source=source, cost_mode=params.get("cost_mode"),
                     max_batch_size=int(config.get("max_batch_size", 0)),
                     max_queue_delay_us=delay,
                     declares_sla=any(i.get("name") == "SLA_MS" for i in config.get("input", [])))
