"""Reading profile files: bounded, contained, validated.

A profile is operator input read at model load: a file may be huge, may be a symlink, or
may sit in a ``profile_dir`` that points out of the model repository. Every file is
checked before it is parsed - its real path (symlinks resolved) must lie inside one of the
allowed roots, and its size under ``MAX_PROFILE_BYTES`` - so nothing outside the
repository is ever read, quoted in an error, or allowed to keep the load busy.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

import yaml

from .profile import HardwareProfile, ProfileError

from .profile_parse import profile_from_mapping
from .safe_repr import short_repr

# A shipped profile is about 2 KB; this leaves room for comments, and parses in
# milliseconds (a 4 MB file took 1.3 s, a 100 MB one minutes).
MAX_PROFILE_BYTES = 256 * 1024


def _inside(path: str, roots: Iterable[str]) -> bool:
    real = os.path.realpath(path)
    return any(os.path.commonpath([real, root]) == root for root in roots)


def _check_contained(path: str, roots: tuple[str, ...] | None, what: str) -> None:
    """Refuse ``path`` whose real path leaves every root; the message names only ``path``
    as given (never where it points)."""
    if roots is not None and not _inside(path, roots):
        raise ProfileError(f"{what} {path}: resolves outside the model repository "
                           "(symlinks included); refused")


def _real_roots(roots: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if roots is None else tuple(os.path.realpath(r) for r in roots)


def load_profile(path: str, allowed_roots: Iterable[str] | None = None,
                 max_bytes: int = MAX_PROFILE_BYTES) -> HardwareProfile:
    """Read and validate one profile file (``yaml.safe_load`` only). With
    ``allowed_roots``, a file whose real path lies outside all of them is refused unread;
    a file over ``max_bytes`` is refused before it is parsed."""
    _check_contained(path, _real_roots(allowed_roots), "profile")
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise ProfileError(f"profile {path}: file not found") from None
    except OSError as exc:
        raise ProfileError(f"profile {path}: cannot be read: {type(exc).__name__}") from None
    if len(data) > max_bytes:
        raise ProfileError(f"profile {path}: {max(size, len(data))} bytes, over the "
                           f"{max_bytes}-byte limit for a profile file; refused unparsed")
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, ValueError, TypeError,
            AttributeError, IndexError, KeyError, RecursionError) as exc:
        # PyYAML's safe constructor raises plain ValueError & co. on malformed scalars
        # (2001-13-40, !!int 0x), and the composer recurses once per nesting level.
        raise ProfileError(f"profile {path}: cannot be read as YAML: "
                           f"{type(exc).__name__}: {str(exc)[:300]}") from None
    profile = profile_from_mapping(raw, source=path)
    stem = os.path.splitext(os.path.basename(path))[0]
    if profile.name != stem:
        raise ProfileError(f"profile {path}: key 'name': must match the file name '{stem}' "
                           f"(got {short_repr(profile.name)})")
    return profile


def profile_path(profile_dir: str, name: str) -> str:
    """Path of profile ``name`` inside ``profile_dir``; refuses names that leave the folder."""
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ProfileError(
            f"profile name {name!r} in {profile_dir}: use letters, digits, '_' or '-' only")
    return os.path.join(profile_dir, f"{name}.yaml")


def load_profile_dir(profile_dir: str, allowed_roots: Iterable[str] | None = None
                     ) -> dict[str, HardwareProfile]:
    """Every ``*.yaml`` profile in ``profile_dir``, validated (one bad file fails all: a
    deployment must not start on a half-valid set). With ``allowed_roots`` the folder and
    every file must really lie inside one of them (see ``load_profile``)."""
    roots = _real_roots(allowed_roots)
    _check_contained(profile_dir, roots, "profile folder")
    try:
        names = sorted(f for f in os.listdir(profile_dir) if f.endswith(".yaml"))
    except OSError as exc:
        raise ProfileError(f"profile folder {profile_dir}: cannot be listed: "
                           f"{type(exc).__name__}") from None
    if not names:
        raise ProfileError(f"profile folder {profile_dir}: holds no *.yaml profile")
    profiles = {}
    for fname in names:
        profile = load_profile(os.path.join(profile_dir, fname), roots)
        profiles[profile.name] = profile
    return profiles


def select_profile(profiles: Mapping[str, HardwareProfile], device_name: str | None,
                   config_choice: str = "", env_choice: str = "",
                   default: str = "cpu", gpu_fallback: str = "gpu") -> tuple[str, str]:
    """Pick a profile: the environment variable, then the model config parameter, then the
    NVML device name (first profile whose ``device_match`` substring it contains, the
    longest match winning: "H100" must not take an "H100 NVL" board's own profile). A GPU
    that NVML names but no profile matches (an L4, an A10G) gets ``gpu_fallback`` where the
    folder has it - a GPU cost model, not the CPU's - else ``default``; with no NVML device,
    ``default``. Returns (name, why) - the why is logged and exported as a label, and names
    an unmatched device so the operator can calibrate a profile for it."""
    for choice, why in ((env_choice, "environment variable"),
                        (config_choice, "model config parameter hardware_profile")):
        if choice:
            if choice not in profiles:
                raise ProfileError(f"{why} names profile {choice!r}, which is not one of "
                                   f"{sorted(profiles)}")
            return choice, why
    if device_name:
        best, best_len = None, 0
        for name, profile in sorted(profiles.items()):
            for pattern in profile.device_match:
                if pattern.lower() in device_name.lower() and len(pattern) > best_len:
                    best, best_len = name, len(pattern)
        if best is not None:
            return best, f"NVML device '{device_name}'"
        if gpu_fallback and gpu_fallback in profiles:
            return gpu_fallback, (f"no profile matches NVML device '{device_name}': "
                                  f"generic {gpu_fallback} profile")
    if default not in profiles:
        raise ProfileError(f"no profile matches device {device_name!r} and the default "
                           f"{default!r} is not one of {sorted(profiles)}")
    why = f"no profile matches NVML device '{device_name}'" if device_name else "no NVML device"
    return default, f"{why}: default"
