#!/usr/bin/env bash
# A post makes no system call when nobody sleeps: trace a producer process
# posting 50 000 messages and count its futex calls and total system calls.
# Skipped (77) when strace is missing or cannot trace here.
set -u
helper="$1"; cli="$2"
command -v strace >/dev/null || { echo "strace not installed"; exit 77; }
name="t-${SHMBOX_TEST_RUN:+$SHMBOX_TEST_RUN-}strace-$$"  # the tests' prefix (tests/support/support.hpp test_prefix)
trap '"$cli" rm "$name" >/dev/null 2>&1' EXIT
"$cli" create "$name" --capacity 65536 --slot-size 64 >/dev/null || exit 1
out=$(mktemp); trap '"$cli" rm "$name" >/dev/null 2>&1; rm -f "$out"' EXIT
strace -f -c -o "$out" "$helper" produce "$name" 1 50000 --no-wait >/dev/null 2>&1 || { echo "strace cannot trace here"; exit 77; }
cat "$out"
futex=$(awk '$NF=="futex"{print $4}' "$out"); futex=${futex:-0}
total=$(awk '$NF=="total"{print $4}' "$out")
posted=$("$cli" stat "$name" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"]["stored"])')
echo "posted=$posted futex_calls=$futex total_syscalls=$total"
[ "$posted" = 50000 ] || { echo "FAIL: expected 50000 stored"; exit 1; }
# Process start-up and exit make a few hundred calls; 50 000 posts must add none.
[ "$futex" -le 5 ] || { echo "FAIL: $futex futex calls for 50000 posts"; exit 1; }
[ "$total" -lt 1000 ] || { echo "FAIL: $total system calls for 50000 posts"; exit 1; }
