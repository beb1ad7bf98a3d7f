"""The pinned wheelhouse that tests building a throwaway venv install from, offline.

``make setup`` (scripts/setup_env.sh) fills ``.wheelhouse/`` at the repository root with
wheels and one pin list per test venv (``server.txt``: the ``server`` extra at the dev
venv's versions; ``numpy2.txt``: numpy 2 and the other server dependencies), every pin
exact (``==``) and closed over dependencies. pip runs here with ``--no-index``, no config
file and no ``PIP_*`` variable from the caller, so it can never reach a package index: a
missing wheelhouse or wheel skips the test, naming ``make setup``.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from tests.conftest import REPO_ROOT

WHEELHOUSE = os.path.join(REPO_ROOT, ".wheelhouse")
REBUILD = ("run `make setup` to build it (where make finds .venv/.setup-stamp up to date, "
           "`bash scripts/setup_env.sh`)")
NOT_IN_WHEELHOUSE = ("No matching distribution found", "Could not find a version")


def read_pins(path: str) -> dict[str, str]:
    """``{canonical name: version}`` from a list of ``name==version`` lines."""
    pins = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            if line:
                name, sep, version = line.partition("==")
                assert sep, f"{path}: not an exact pin: {line!r}"
                pins[canonicalize_name(name.strip())] = version.strip()
    return pins


def pin_file(name: str, covers: tuple[str, ...] = ()) -> str:
    """The path of pin list ``name`` once the wheelhouse holds a wheel for each of its pins
    (and it pins every distribution in ``covers``); skips the test otherwise."""
    path = os.path.join(WHEELHOUSE, f"{name}.txt")
    if not os.path.isfile(path):
        pytest.skip(f"no pinned wheelhouse list {path}: {REBUILD}")
    pins = read_pins(path)
    stale = sorted({canonicalize_name(c) for c in covers} - pins.keys())
    if stale:
        pytest.skip(f"{path} pins none of {stale} (the wheelhouse predates them): {REBUILD}")
    have = set()
    for wheel in os.listdir(WHEELHOUSE):
        if wheel.endswith(".whl"):
            dist, version, *_ = parse_wheel_filename(wheel)
            have.add((dist, version))
    missing = [f"{d}=={v}" for d, v in sorted(pins.items()) if (d, Version(v)) not in have]
    if missing:
        pytest.skip(f"no wheel for {', '.join(missing)} in {WHEELHOUSE}: {REBUILD}")
    return path


def offline_pip_env() -> dict[str, str]:
    """The caller's environment without its ``PIP_*`` settings, and no pip config file
    (a user's or the machine's could add an index or find-links)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def install(python: str, pins_path: str, *specs: str,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """``pip install`` into ``python``'s environment from the wheelhouse only: the pins in
    ``pins_path`` plus ``specs`` (which pip must find satisfied by those pins)."""
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index",
                          "--find-links", WHEELHOUSE, "--only-binary=:all:",
                          "-r", pins_path, *specs],
                         capture_output=True, text=True, timeout=timeout,
                         env=offline_pip_env())
    if pip.returncode != 0 and any(s in pip.stderr for s in NOT_IN_WHEELHOUSE):
        pytest.skip(f"the wheelhouse lacks a wheel pip needs: {REBUILD}\n{pip.stderr[-500:]}")
    return pip
