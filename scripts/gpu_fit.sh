#!/usr/bin/env bash
# Here, after `bash ../shared/gpu/pack.sh`: make .gpu/ fit the device tool's 64 MiB with
# the working tree. pack.sh's numpy wheel (18 MB, zip) is repacked as .gpu/np.tar.xz
# (about 9 MB); scripts/gpu_remote.sh installs it on the host. Prints what will travel.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
shopt -s nullglob
wheels=(.gpu/np/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && unzip -q "$OLDPWD/${wheels[0]}")
  tar -C "$tmp" -cJf .gpu/np.tar.xz .
  rm -rf "$tmp" "${wheels[@]}"
fi
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
gpu=$(du -sb .gpu | cut -f1)
echo "travels: tracked files $((tree / 1048576)) MiB + .gpu $((gpu / 1048576)) MiB" \
     "= $(((tree + gpu) / 1048576)) MiB (limit 64)"
