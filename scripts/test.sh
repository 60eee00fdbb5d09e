#!/usr/bin/env bash
# Quick start, command 2: build shmbox and run every test (unit, multi-process, CLI).
#   scripts/test.sh [BUILD_DIR] [meson options...]   e.g. scripts/test.sh build-asan -Db_sanitize=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
shift || true
bash scripts/setup.sh "$build" "$@"
# Every test must leave /dev/shm as it found it: this run's names only
# (t-<run>-..., see scripts/shm_names.sh).
# shellcheck source=shm_names.sh
source scripts/shm_names.sh
# The doorbells of the tests' killed owner processes go too, pass or fail.
trap shm_sweep_bells EXIT
before=$(shm_test_names)
meson test -C "$build" --print-errorlogs --num-processes 2
after=$(shm_test_names)
left=$(shm_left "$before" "$after")
if [ -n "$left" ]; then
  echo "test: the tests left segment(s) in /dev/shm:" >&2
  echo "$left" >&2
  exit 1
fi
