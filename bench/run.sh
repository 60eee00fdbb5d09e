#!/usr/bin/env bash
# bench/run.sh - builds shmbox with the benchmarks enabled and runs the
# throughput benchmark; arguments are passed through, e.g.
#   bench/run.sh --messages 4000000 --reps 7
# The build directory is $SHMBOX_BUILD_DIR, or build/ at the top of the tree.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SHMBOX_BUILD_DIR:-$root/build}"

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$root" -Dbench=true
elif ! grep -q 'shmbox-bench-throughput' "$build/build.ninja"; then
  meson configure "$build" -Dbench=true
fi
ninja -C "$build"

exec "$build/bench/shmbox-bench-throughput" "$@"
