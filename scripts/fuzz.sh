#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [BUILD_DIR]
# Builds the libFuzzer harnesses (fuzz/) with clang, ASan and UBSan in
# BUILD_DIR (default build-fuzz), then runs each for SECONDS (default 60)
# from a copy of its seed corpus (fuzz/corpus/<name>/; the repository's
# corpus is never grown). Prints executions, exec/s and time per fuzzer.
# Exits non-zero if a fuzzer found a crash, a sanitizer report, a hang
# (-timeout=5) or excessive memory use; the input that did it is kept under
# BUILD_DIR/fuzz-artifacts/ and its path printed. See fuzz/README.md.
# Installs what it needs from Debian (only what is missing; sudo if not root).
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
build="${2:-build-fuzz}"
case "$secs" in '' | *[!0-9]*) echo "fuzz: SECONDS must be a number, not '$secs'" >&2; exit 2 ;; esac

# shellcheck source=packages.sh
source scripts/packages.sh
install_missing fuzz meson ninja-build g++ pkg-config python3 libcli11-dev nlohmann-json3-dev clang libclang-rt-14-dev

fuzz_opts=(-Dfuzz=true -Dtests=false -Dbench=false -Dbridge=disabled -Dfault_injection=false
           -Doptimization=1 -Ddebug=false -Db_ndebug=false -Dcpp_args=-g1
           -Db_sanitize=address,undefined -Db_lundef=false)
if [ ! -f "$build/build.ninja" ]; then
  CXX=clang++ meson setup "$build" "${fuzz_opts[@]}" >/dev/null
else
  if ! grep -q '"command": "clang++ ' "$build/compile_commands.json" 2>/dev/null; then
    echo "fuzz: $build was configured with another compiler than clang; pick another BUILD_DIR" >&2
    exit 2
  fi
  meson configure "$build" "${fuzz_opts[@]}" >/dev/null
fi
ninja -C "$build" >/dev/null

# Removes the segments of segment_fuzz processes that are gone: /dev/shm/shmbox.fuzz-<pid>[.*]
# (a crashing or timed-out fuzzer exits without running its cleanup).
clean_shm() {
  local f pid
  for f in /dev/shm/shmbox.fuzz-*; do
    [ -e "$f" ] || continue
    pid="${f#/dev/shm/shmbox.fuzz-}"
    pid="${pid%%.*}"
    case "$pid" in '' | *[!0-9]*) continue ;; esac
    [ -d "/proc/$pid" ] || rm -f "$f"
  done
}

work="$(mktemp -d /tmp/shmbox-fuzz.XXXXXX)"
watchdog=""
fuzzer_pid=""
on_exit() {
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null || true
  [ -n "$fuzzer_pid" ] && kill "$fuzzer_pid" 2>/dev/null || true
  [ -n "$fuzzer_pid" ] && wait "$fuzzer_pid" 2>/dev/null || true
  clean_shm
  rm -rf "$work"
}
trap on_exit EXIT
trap 'exit 130' INT TERM
clean_shm

artifacts="$(cd "$build" && pwd)/fuzz-artifacts"
failed=0
summary=()
for name in segment cli; do
  bin="$build/fuzz/${name}_fuzz"
  corpus="$work/$name-corpus"
  log="$work/$name.log"
  mkdir -p "$corpus" "$artifacts/$name"
  cp fuzz/corpus/"$name"/* "$corpus"/
  echo "== ${name}_fuzz: $secs s (seeds: $(ls fuzz/corpus/"$name" | wc -l)) =="
  start=$(date +%s%N)
  set +e
  "$bin" -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$name/" "$corpus" >"$log" 2>&1 &
  fuzzer_pid=$!
  # -max_total_time stops libFuzzer; this only guards against a stuck fuzzer process.
  ( sleep $((secs + 120)); kill -9 "$fuzzer_pid" 2>/dev/null ) &
  watchdog=$!
  wait "$fuzzer_pid"
  rc=$?
  kill "$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null
  set -e
  watchdog=""
  fuzzer_pid=""
  clean_shm
  elapsed=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  line=$(printf '%-12s %10s execs  %7s exec/s  %6s s  peak RSS %s MB  corpus %s -> %s files' "${name}_fuzz" \
    "${execs:-?}" "${rate:-?}" "$elapsed" "${rss:-?}" "$(ls fuzz/corpus/"$name" | wc -l)" "$(ls "$corpus" | wc -l)")
  if [ "$rc" -ne 0 ]; then
    failed=1
    echo "fuzz: ${name}_fuzz FAILED (exit $rc); the end of its log:" >&2
    grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse)' "$log" | tail -60 >&2
    crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    if [ -n "$crash" ]; then
      cp "$log" "$crash.log"
      line="$line  FAILED: $crash"
      echo "fuzz: input: $crash (log: $crash.log)" >&2
      echo "fuzz: reproduce: $bin $crash" >&2
    else
      line="$line  FAILED (exit $rc, no input written)"
    fi
  fi
  summary+=("$line")
done

echo "== fuzz summary =="
printf '%s\n' "${summary[@]}"
if ls /dev/shm/shmbox.fuzz-* >/dev/null 2>&1; then
  echo "fuzz: segments left in /dev/shm:" >&2
  ls /dev/shm/shmbox.fuzz-* >&2
fi
exit "$failed"
