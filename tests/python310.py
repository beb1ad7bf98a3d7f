"""The Python 3.10 interpreter that stands in for the stock NGC Triton image's (24.10 runs
its Python backend on Python 3.10): the tests that prove an exported folder runs there.

Found as $PYTHON310, else ``python3.10`` on PATH, else pyenv's newest 3.10 under
$PYENV_ROOT (default ~/.pyenv, which this project's machine image carries). None of the
registries these machines reach ships a 3.10 interpreter (Debian bookworm packages 3.11
only; pyenv and python-build-standalone download from python.org and GitHub), so
``make setup`` cannot install one: a machine without it fails these tests with how to get
one, rather than skipping the only check that the folder runs on the NGC image's Python.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import pytest

HOW_TO_GET_IT = ("no Python 3.10 interpreter (the stock NGC Triton 24.10 image's Python): "
                 "set PYTHON310 to one, put python3.10 on PATH, or `pyenv install 3.10` "
                 "(built with PYTHON_CONFIGURE_OPTS=--enable-shared for the live-server test)")


def _candidates() -> list[str]:
    found = [os.environ.get("PYTHON310", ""), shutil.which("python3.10") or ""]
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    versions = {}
    for path in glob.glob(os.path.join(pyenv_root, "versions", "3.10.*", "bin", "python3.10")):
        patch = re.fullmatch(r"3\.10\.(\d+)", path.split(os.sep)[-3])
        if patch:
            versions[int(patch.group(1))] = path
    return [p for p in found if p] + [versions[k] for k in sorted(versions, reverse=True)]


def python310() -> str:
    """The path of a working Python 3.10; fails the calling test, saying how to get one,
    when there is none."""
    for path in _candidates():
        probe = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 10)":
            return path
    pytest.fail(HOW_TO_GET_IT, pytrace=False)


def libpython_dir(python: str) -> str:
    """The folder holding ``python``'s libpython3.10.so.1.0, which the 3.10 backend stub
    links; fails the calling test when ``python`` was built without a shared library."""
    probe = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
        capture_output=True, text=True, check=True, timeout=60)
    libdir = probe.stdout.strip()
    if not os.path.isfile(os.path.join(libdir, "libpython3.10.so.1.0")):
        pytest.fail(f"{python} has no libpython3.10.so.1.0 in {libdir} (built without "
                    "--enable-shared): the 3.10 backend stub cannot embed it; "
                    + HOW_TO_GET_IT, pytrace=False)
    return libdir
