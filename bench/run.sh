#!/usr/bin/env bash
# bench/run.sh - the whole benchmark suite in one command: installs what it
# needs (Debian packages, only what is missing), builds shmbox with the
# benchmarks, runs every benchmark (separate processes, every mechanism in
# the same run) and prints one table (bench/table.cpp), with the targets of
# the performance issue checked in the last section.
#
#   bash bench/run.sh            # the full suite (about 10 minutes on 2 cores)
#   bash bench/run.sh --quick    # every benchmark, tiny counts: a smoke test (CI)
#   bash bench/run.sh --reps 7   # more repetitions
#   bash bench/run.sh --curves   # how cost grows instead (about 2.5-6 minutes on 2 cores):
#                                # throughput and round trip vs message size (16 B .. 1 MiB),
#                                # throughput vs capacity (16 .. 1 Mi slots), vs producer
#                                # processes (1 .. 64), and throughput and wake-up vs boxes per
#                                # owner process (1 .. 10000, shmbox-bench-boxes); points in
#                                # $build/curves/*.tsv, SVG plots (gnuplot-nox) next to them.
#                                # bench/curves.sh says how. --curves --quick: a smoke test.
#
# The raw rows go to $build/bench-rows.tsv, the benchmarks' own logs to
# $build/bench-log.txt, the table to $build/bench-table.txt (and stdout).
# The build directory is $SHMBOX_BUILD_DIR, or build/ at the top of the tree.
# A mechanism that cannot be measured here (iceoryx not installable, say)
# appears as "skipped: why" in the table; it is never left out silently.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SHMBOX_BUILD_DIR:-$root/build}"
quick=0
curves=0
reps=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --reps) reps="$2"; shift ;;
    --curves) curves=1 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "bench/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# shellcheck source=../scripts/packages.sh
source "$root/scripts/packages.sh"
# shellcheck source=../scripts/shm_names.sh
source "$root/scripts/shm_names.sh"
# The benchmarks fork owners that leave by _exit or SIGKILL: their notify
# doorbells are swept at the end, pass or fail.
trap shm_sweep_bells EXIT
if [ "$curves" = 1 ]; then
  # The plots need gnuplot; without it the points are still written.
  install_missing bench gnuplot-nox || echo "bench: gnuplot-nox not installed: points only, no plots" >&2
  bash "$root/scripts/setup.sh" "$build" -Dbench=true
  args=()
  [ "$quick" = 1 ] && args+=(--quick)
  [ -n "$reps" ] && args+=(--reps "$reps")
  start=$SECONDS
  bash "$root/bench/curves.sh" "$build" "${args[@]}"
  echo "bench: curves done in $((SECONDS - start)) s" >&2
  exit 0
fi
# iceoryx is a baseline: if it cannot be installed, its rows say so.
iceoryx_note=""
if ! install_missing bench cmake iceoryx libiceoryx-posh-dev; then
  iceoryx_note="not installed (apt-get install iceoryx libiceoryx-posh-dev cmake failed)"
fi
# A build configured before iceoryx was installed has not looked for it.
if [ -z "$iceoryx_note" ] && [ -f "$build/build.ninja" ] && [ ! -x "$build/bench/shmbox-bench-iceoryx" ]; then
  meson setup --reconfigure "$build" >/dev/null
fi
bash "$root/scripts/setup.sh" "$build" -Dbench=true

rows="$build/bench-rows.tsv"
log="$build/bench-log.txt"
: >"$rows"
: >"$log"
b="$build/bench"
common=()
[ "$quick" = 1 ] && common+=(--quick)
[ -n "$reps" ] && common+=(--reps "$reps")

run() {  # run NAME COMMAND...: rows to $rows, its own output to $log
  local name="$1"
  shift
  echo "bench: $name ..." >&2
  local start=$SECONDS
  if ! "$@" >>"$rows" 2>>"$log"; then
    echo "bench: $name FAILED (see $log)" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  echo "bench: $name done in $((SECONDS - start)) s" >&2
}

run throughput "$b/shmbox-bench-throughput" "${common[@]}"
run "round trips" "$b/shmbox-bench-rtt" "${common[@]}"
# Pools (issue 16): take + give_back against a box round trip (about 12 s here; --quick: 2 s).
run pool "$b/shmbox-bench-pool" "${common[@]}"
# Priority boxes (issue 17): against a FIFO box at 1 Ki and 64 Ki (about 20 s; --quick: 1 s).
run priority "$b/shmbox-bench-priority" "${common[@]}"
# Request/reply (issue 35): the round trip against two boxes by hand (about 5 s; --quick: 1 s).
run request "$b/shmbox-bench-request" "${common[@]}"
# The C API and Python next to C++ (issue 18): about 10 s; --quick: 1 s.
SHMBOX_SOURCE_ROOT="$root" SHMBOX_PY_DIR="$build/python" run api "$b/shmbox-bench-api" "${common[@]}"
# Python between two processes (issue 31, item 7): the shmbox package against
# multiprocessing.Queue, multiprocessing.Pipe and pyzmq (about 3 minutes; --quick:
# 15 s). The package is the one built in $build/python (-Dpython=enabled, as
# setup.sh builds); without it the shmbox rows are skips. The interpreter is
# $SHMBOX_PYTHON, else Debian's /usr/bin/python3 (where python3-zmq is); without
# pyzmq its rows are skips.
py_pkg="$build/python"
py="${SHMBOX_PYTHON:-}"
if [ -z "$py" ]; then
  py=python3
  [ -x /usr/bin/python3 ] && py=/usr/bin/python3
fi
install_missing bench python3-zmq || echo "bench: python3-zmq not installed: the pyzmq rows are skipped" >&2
run "python ipc" \
  "$py" "$root/bench/python_ipc.py" --pkg "$py_pkg" --build "$build" "${common[@]}"
# The NATS bridge (issue 19) next to core NATS and JetStream on a nats-server
# it starts (about 30 s; --quick: 1 s). setup.sh installs libnats-dev and nats-server.
if [ -x "$b/shmbox-bench-bridge" ]; then
  SHMBOX_BRIDGE="$build/tools/shmbox-bridge" run bridge "$b/shmbox-bench-bridge" "${common[@]}"
else
  for m in nats-core nats-core-asap jetstream-sync jetstream-async jetstream-pull shmbox-bridge; do
    printf 'skip\tbridge-64\t%s\t%s\n' "$m" "not built (libnats-dev not found at configure time)" >>"$rows"
  done
fi
if [ -x "$b/shmbox-bench-iceoryx" ]; then
  run iceoryx "$b/shmbox-bench-iceoryx" "${common[@]}"
else
  why="${iceoryx_note:-not built (its development files were not found at configure time)}"
  for g in tput-64-1p tput-64-4p tput-1k-1p tput-1k-4p rtt-busy-64 rtt-busy-1k; do
    printf 'skip\t%s\ticeoryx\t%s\n' "$g" "$why" >>"$rows"
  done
  printf 'skip\trtt-sleep-64\ticeoryx-waitset\t%s\n' "$why" >>"$rows"
fi
if [ "$quick" = 1 ]; then
  run wake "$b/shmbox-bench-wake" --runs 20
  run failover "$b/shmbox-bench-failover" --runs 10
  run memory "$b/shmbox-bench-memory" --quick
  run boxes "$b/shmbox-bench-boxes" --boxes 100 --quick
  run boxes "$b/shmbox-bench-boxes" --boxes 100 --quick --group
  run scrape "$b/shmbox-bench-scrape" --quick --cli "$build/tools/shmbox"
else
  run wake "$b/shmbox-bench-wake" --runs 200
  # 400 kills (about 10 s): the p99 is then the 4th worst, not the 1st-2nd
  # worst of 100, which made one run in two miss its target by one sample.
  run failover "$b/shmbox-bench-failover" --runs 400
  run memory "$b/shmbox-bench-memory"
  run boxes "$b/shmbox-bench-boxes" --boxes 1000 --idle-seconds 2 --tput-seconds 2
  # 10,000 boxes in one NotifyGroup: one descriptor per box (about 40 s).
  run boxes "$b/shmbox-bench-boxes" --boxes 10000 --group --idle-seconds 3 --tput-seconds 2
  # A scrape of 10000 boxes (about 20 s; --quick: 500 boxes, 2 s).
  run scrape "$b/shmbox-bench-scrape" --boxes 10000 --cli "$build/tools/shmbox"
fi

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
title="shmbox benchmark suite, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($cpu), Linux $(uname -r)"
[ "$quick" = 1 ] && title="$title -- QUICK SMOKE RUN: figures are not meaningful"
"$b/shmbox-bench-table" --title "$title" <"$rows" | tee "$build/bench-table.txt"
