#!/usr/bin/env bash
# The thread tests (tests/threads: the ring, wake and lease code with threads
# standing in for processes) under ThreadSanitizer, with no suppressions.
#   scripts/tsan.sh [BUILD_DIR]        (default build-tsan)
# -mstringop-strategy=libcall: GCC expands small memcpy/memset inline, where
# TSan does not see them; as calls, TSan intercepts them (x86 only).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-tsan}"
# -O1 -g1 (-O0 for the test program: tests/meson.build): what TSan needs, in
# less compile time than debugoptimized's -O2 -g (.ci/run says how much less).
cpp_args="-g1"
[[ "$(uname -m)" == x86_64 ]] && cpp_args+=" -mstringop-strategy=libcall"
opts=(-Db_sanitize=thread -Dbench=false -Doptimization=1 -Ddebug=false -Db_ndebug=false "-Dcpp_args=$cpp_args")
SHMBOX_TARGETS=tests/threads/test-threads bash scripts/setup.sh "$build" "${opts[@]}"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
log="$build/tsan-threads.log"
if ! meson test -C "$build" --suite threads --print-errorlogs --no-rebuild >"$log" 2>&1; then
  # GCC 12's TSan needs a low-entropy address layout; kernels with large
  # mmap_rnd_bits trip it ("unexpected memory mapping"): run without ASLR.
  if grep -q "unexpected memory mapping" "$log" "$build/meson-logs/testlog.txt" 2>/dev/null; then
    echo "tsan: retrying without ASLR (setarch -R)" >&2
    setarch "$(uname -m)" -R meson test -C "$build" --suite threads --print-errorlogs --no-rebuild
  else
    cat "$log"
    exit 1
  fi
else
  cat "$log"
fi
if grep -q "WARNING: ThreadSanitizer" "$build/meson-logs/testlog.txt"; then
  echo "tsan: ThreadSanitizer reported a race (see $build/meson-logs/testlog.txt)" >&2
  exit 1
fi
echo "tsan: no reports"
