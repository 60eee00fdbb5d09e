#!/usr/bin/env bash
# The kill storm's long form, for soak testing:
#   scripts/soak.sh [SECONDS] [BUILD_DIR]      (default 600 s, build)
# 4 producers, an owner and 2 heirs per phase, SIGKILL to a random one every
# 5-60 ms, phases cycling through every policy (with and without a lease);
# every phase ends with the ledger and counter checks (tests/storm.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
build="${2:-build}"
bash scripts/setup.sh "$build"
exec "./$build/tests/shmbox-storm" --seconds "$seconds" --phase-seconds 10
