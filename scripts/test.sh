#!/usr/bin/env bash
# Quick start, command 2: build shmbox and run every test (unit, multi-process, CLI).
#   scripts/test.sh [BUILD_DIR] [meson options...]   e.g. scripts/test.sh build-asan -Db_sanitize=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
shift || true
bash scripts/setup.sh "$build" "$@"
before=$(ls /dev/shm | grep -c '^shmbox\.' || true)
meson test -C "$build" --print-errorlogs --num-processes 2
after=$(ls /dev/shm | grep -c '^shmbox\.' || true)
if [ "$after" -gt "$before" ]; then
  echo "test: the tests left $((after - before)) segment(s) in /dev/shm:" >&2
  ls /dev/shm | grep '^shmbox\.' >&2
  exit 1
fi
