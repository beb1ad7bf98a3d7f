"""Where the CLI finds its data files and tools, in a checkout and in an installed wheel.

In a wheel, ``perf_analyzer_configs/`` and the model templates (``model_repository/``'s
configs and profiles) are package data inside ``operator_tools`` (``pyproject.toml`` maps
them there); in a checkout or an editable install they are the checkout's own folders.
perf_analyzer is found on ``PATH`` or beside the running Python (a venv not activated),
with the CUDA runtime library it links against put on its ``LD_LIBRARY_PATH`` only.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import sys

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _data_dir(packaged: str, checkout: str) -> str:
    """The installed package-data folder ``operator_tools/<packaged>`` if there is one,
    else the checkout's ``<checkout>`` folder (path on disk either way)."""
    try:
        installed = importlib.resources.files("operator_tools").joinpath(packaged)
        if installed.is_dir():
            return str(installed)
    except (ModuleNotFoundError, NotADirectoryError, TypeError):
        pass  # not a plain filesystem install: use the checkout
    return os.path.join(_CHECKOUT, checkout)


def configs_dir() -> str:
    """``perf_analyzer_configs/``: input data, traces, workloads, sweeps."""
    return _data_dir("perf_analyzer_configs", "perf_analyzer_configs")


def model_templates_dir() -> str:
    """The shipped model repository (configs, model.py, profiles) used as templates."""
    return _data_dir("model_templates", "model_repository")


class ToolNotFound(RuntimeError):
    """An external program the CLI runs is not installed."""


def find_perf_analyzer() -> str:
    """perf_analyzer 2.51 (from ``tritonclient[all]==2.51.0``): on ``PATH``, else in the
    running Python's ``bin/`` (a venv used without activating it)."""
    beside = os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
    found = shutil.which("perf_analyzer") or (beside if os.access(beside, os.X_OK) else None)
    if not found:
        raise ToolNotFound("perf_analyzer not found on PATH nor beside "
                           f"{sys.executable}: pip install 'explicit-batching[cli]' "
                           "(it ships in tritonclient[all]==2.51.0)")
    return found


def cuda_runtime_lib_dir() -> str | None:
    """The folder of libcudart.so.12 from the ``nvidia-cuda-runtime-cu12`` package, or
    None when that package is not installed (a GPU host may have it system-wide)."""
    try:
        import nvidia.cuda_runtime as cuda_runtime
    except ImportError:
        return None
    return os.path.join(list(cuda_runtime.__path__)[0], "lib")


def perf_analyzer_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to run perf_analyzer in: ``base`` (default: this process's) with
    the CUDA runtime library's folder first on ``LD_LIBRARY_PATH``."""
    env = dict(os.environ if base is None else base)
    lib = cuda_runtime_lib_dir()
    if lib:
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = lib + (os.pathsep + old if old else "")
    return env
