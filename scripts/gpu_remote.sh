#!/usr/bin/env bash
# There, on the GPU host, from the project root (with .gpu carried):
#   bash scripts/gpu_remote.sh CMD...
# Installs the numpy that scripts/gpu_fit.sh repacked (numpy 1.26 in place of the image's
# numpy 2, which Triton 24.10's Python backend cannot use), then runs CMD through
# .gpu/remote.sh (tritonserver, perf_analyzer, the project importable).
set -u
site=$(python3 -c 'import site;print(site.getsitepackages()[0])')
if [ -f .gpu/np.tar.xz ]; then
  rm -rf "$site"/numpy "$site"/numpy-*.dist-info "$site"/numpy.libs
  tar -xJf .gpu/np.tar.xz -C "$site" || exit 1
  mkdir -p .gpu/np  # remote.sh's own numpy step then finds no wheel and installs nothing
fi
exec bash .gpu/remote.sh "$@"
