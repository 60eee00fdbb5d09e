#!/usr/bin/env bash
# The kill storm's long form, for soak testing:
#   scripts/soak.sh [SECONDS] [BUILD_DIR]      (default 600 s, build)
# 4 producers, an owner and 2 heirs per phase, SIGKILL to a random one every
# 5-60 ms, phases cycling through every policy (with and without a lease);
# every phase ends with the ledger and counter checks (tests/ownership/storm.cpp).
# Then the generative checker as long (random boxes and steps, kills at
# random moments and at crash points, every step checked against a model of
# the box: tests/gencheck, docs/tests.md); it prints each run's seed, and a
# failure's replay line. SHMBOX_GENCHECK_ARGS adds to its arguments (e.g.
# "--tolerate priority-read-gate,..." to look past bugs already known).
# Then the adversary suite's long form (a second user, uid 65534 when run as
# root, against every surface while root's processes work: tests/adversary,
# docs/tests.md), each of its 8 surfaces for a quarter of SECONDS, at least a
# minute (SHMBOX_ADVERSARY_SECONDS chooses); it prints its seed (--seed
# replays the attacker's choices: SHMBOX_ADVERSARY_SEED).
# Then the pool's kill storm as long (takers and workers SIGKILLed at
# random, then the pool's ledger checked exactly: tests/pool/pool_leases.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
build="${2:-build}"
bash scripts/setup.sh "$build"
"./$build/tests/shmbox-storm" --seconds "$seconds" --phase-seconds 10
# shellcheck disable=SC2086
"./$build/tests/shmbox-gencheck" --seconds "$seconds" --keep-going ${SHMBOX_GENCHECK_ARGS:-}
adversary_seconds="${SHMBOX_ADVERSARY_SECONDS:-$(( seconds / 4 > 60 ? seconds / 4 : 60 ))}"
SHMBOX_HELPER="$PWD/$build/tests/shmbox-test-helper" SHMBOX_CLI="$PWD/$build/tests/shmbox" \
  SHMBOX_BRIDGE="$PWD/$build/bridge/shmbox-bridge" "./$build/tests/shmbox-adversary" --seconds "$adversary_seconds"
SHMBOX_HELPER="$PWD/$build/tests/shmbox-test-helper" SHMBOX_POOL_STORM_SECONDS="$seconds" \
  exec "./$build/tests/test-pool-leases" --test-case='pool ledger: after a kill storm*'

