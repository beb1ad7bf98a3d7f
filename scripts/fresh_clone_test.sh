#!/usr/bin/env bash
# `make test` as a new user runs it: a fresh clone of this checkout's HEAD, `make setup`,
# then the README's test command, timed. MODE says what runs beside it:
#   idle     nothing
#   busy     two busy loops (one per core) for the whole run, setup included
#   offline  the tests in a network namespace with loopback only (`unshare -n`, as root):
#            no package registry is reachable after `make setup`
# The last lines give pytest's counts and the times; the clone is left in the printed folder.
set -euo pipefail
MODE=${1:?usage: scripts/fresh_clone_test.sh idle|busy|offline}
SRC=$(cd "$(dirname "$0")/.." && pwd)
DEST=$(mktemp -d "/tmp/fresh-${MODE}-XXXX")
git clone -q "$SRC" "$DEST/repo"
cd "$DEST/repo"
LOOPS=()
cleanup() { for pid in "${LOOPS[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
if [ "$MODE" = busy ]; then
  for _ in 1 2; do (while :; do :; done) & LOOPS+=($!); done
fi
t0=$(date +%s)
make setup > "$DEST/setup.log" 2>&1
t1=$(date +%s)
case "$MODE" in
  offline) unshare -n sh -c 'ip link set lo up && exec make test' > "$DEST/test.log" 2>&1 || true ;;
  idle|busy) make test > "$DEST/test.log" 2>&1 || true ;;
  *) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
t2=$(date +%s)
echo "fresh clone of $(git rev-parse --short HEAD), mode $MODE, in $DEST"
echo "setup $((t1 - t0)) s, tests $((t2 - t1)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
tail -n 1 "$DEST/test.log"
grep -E "^(FAILED|ERROR) " "$DEST/test.log" || true
