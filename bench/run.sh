#!/usr/bin/env bash
# bench/run.sh - builds shmbox with the benchmarks enabled and runs the
# throughput benchmark; arguments are passed through, e.g.
#   bench/run.sh --messages 4000000 --reps 7
# The build directory is $SHMBOX_BUILD_DIR, or build/ at the top of the tree.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SHMBOX_BUILD_DIR:-$root/build}"

# Installs what is missing (apt-get), configures with the benchmarks on, builds.
bash "$root/scripts/setup.sh" "$build" -Dbench=true

exec "$build/bench/shmbox-bench-throughput" "$@"
