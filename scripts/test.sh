#!/usr/bin/env bash
# Quick start, command 2: build shmbox and run every test (unit, multi-process, CLI).
#   scripts/test.sh [BUILD_DIR] [meson options...]   e.g. scripts/test.sh build-asan -Db_sanitize=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
shift || true
bash scripts/setup.sh "$build" "$@"
# Every test and the demo must leave /dev/shm as they found it.
before=$(ls /dev/shm | grep '^shmbox\.' | sort || true)
meson test -C "$build" --print-errorlogs --num-processes 2
after=$(ls /dev/shm | grep '^shmbox\.' | sort || true)
left=$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | grep . || true)
if [ -n "$left" ]; then
  echo "test: the tests left segment(s) in /dev/shm:" >&2
  echo "$left" >&2
  exit 1
fi
