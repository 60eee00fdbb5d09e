# scripts/shm_names.sh (sourced by scripts/test.sh and .ci/run): which
# segments in /dev/shm are this test run's.
#
# The tests name their boxes t-<run>-... (tests/support/support.hpp test_prefix,
# from SHMBOX_TEST_RUN). Only those names are compared before and after a
# run, so boxes of other users, or of other test runs going on at the same
# time, do not count. (The README example's fixed name 'readme-example' is not
# among them; it removes its box itself.)
export SHMBOX_TEST_RUN="${SHMBOX_TEST_RUN:-r$$}"

# This run's segment names (boxes shmbox.t-<run>-..., pools shmbox-pool.t-<run>-...,
# NATS bridge counters shmbox-bridge.t-<run>-...), sorted.
shm_test_names() {
  ls /dev/shm | awk -v b="shmbox.t-$SHMBOX_TEST_RUN-" -v p="shmbox-pool.t-$SHMBOX_TEST_RUN-" \
    -v g="shmbox-bridge.t-$SHMBOX_TEST_RUN-" 'index($0, b) == 1 || index($0, p) == 1 || index($0, g) == 1' | sort
}

# shm_left BEFORE AFTER: the names in AFTER that were not in BEFORE.
shm_left() {
  comm -13 <(printf '%s\n' "$1") <(printf '%s\n' "$2") | grep . || true
}

# Removes the notify doorbells (/dev/shm/shmbox-bell.*, lib/wake/notify_hub.hpp)
# that no process reads any more: an owner process that was SIGKILLed or left
# by _exit (the tests' and benchmarks' forked owners) cannot unlink its own.
# Opening one for writing without a reader fails with ENXIO: only those go, so
# a live process's doorbell (of any user or run) is never touched.
shm_sweep_bells() {
  python3 - <<'PY'
import errno, glob, os, stat
for p in glob.glob("/dev/shm/shmbox-bell.*"):
    try:
        if not stat.S_ISFIFO(os.lstat(p).st_mode):
            continue
        os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW))
    except OSError as e:
        if e.errno == errno.ENXIO:
            try:
                os.unlink(p)
            except OSError:
                pass
PY
}
