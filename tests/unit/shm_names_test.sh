#!/usr/bin/env bash
# scripts/shm_names.sh: the check that a test run left nothing in /dev/shm
# counts only this run's names (t-<run>-...). Boxes that other users or other
# test runs make during the run must not count (before: every shmbox.* name
# was compared, and scripts/test.sh failed whenever anyone else used
# /dev/shm); a name of this run that is left must.
#   tests/unit/shm_names_test.sh scripts/shm_names.sh
set -euo pipefail
export SHMBOX_TEST_RUN="names$$"
# shellcheck source=../scripts/shm_names.sh
source "$1"
ours="/dev/shm/shmbox.t-$SHMBOX_TEST_RUN-left"
others=("/dev/shm/shmbox.someone-else-$$" "/dev/shm/shmbox.t-other$$-run" "/dev/shm/shmbox.t-${SHMBOX_TEST_RUN}x-near")
trap 'rm -f "$ours" "${others[@]}"' EXIT
before=$(shm_test_names)
touch "$ours" "${others[@]}"
after=$(shm_test_names)
left=$(shm_left "$before" "$after")
if [ "$left" != "shmbox.t-$SHMBOX_TEST_RUN-left" ]; then
  echo "FAIL: expected exactly shmbox.t-$SHMBOX_TEST_RUN-left to be left, got: [$left]" >&2
  exit 1
fi
rm -f "$ours"
left=$(shm_left "$before" "$(shm_test_names)")
if [ -n "$left" ]; then
  echo "FAIL: nothing of this run is left, but got: [$left]" >&2
  exit 1
fi
echo "ok: only this run's names count ($SHMBOX_TEST_RUN)"
