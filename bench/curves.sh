#!/usr/bin/env bash
# bench/curves.sh BUILD_DIR [--quick] [--reps R] [--plots-only] - how cost grows: the curves
# of `bash bench/run.sh --curves` (run.sh installs gnuplot-nox and builds,
# then calls this). Each curve is a series of points; every point measures
# shmbox and, where it is cheap, the spin ring of bench/spin_ring.hpp in the
# same round, and the repetitions are interleaved across all points of a
# curve (the benchmarks do that: rep 1 of every point, then rep 2, ...), so
# a slow phase of the VM shows in both and not in one point. Medians, with
# min-max bars.
#   1. message size 16 B .. 1 MiB: throughput (Mmsg/s, MB/s) and busy
#      round trip p50           shmbox-bench-throughput --sizes, shmbox-bench-rtt --sizes
#   2. capacity 16 .. 1 Mi slots, 64 B            shmbox-bench-throughput --capacity
#   3. producer processes 1 .. 64, 64 B           shmbox-bench-throughput --producers
#   4. boxes per owner process 1 .. 10000: round-robin throughput and
#      wake-up latency (one epoll set over notify_fd)  shmbox-bench-boxes --boxes
#      (one run per N: the set-up of N boxes is the measurement; not interleaved)
# Raw rows: $build/curves/rows-*.tsv; points: $build/curves/*.tsv; plots:
# $build/curves/*.svg and *.png (gnuplot, when it is installed).
# --plots-only: measure nothing, draw again from the rows of the last run.
set -euo pipefail

build="$1"
shift
quick=0
reps=5
plots_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --reps) reps="$2"; shift ;;
    --plots-only) plots_only=1 ;;
    *) echo "bench/curves.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

b="$build/bench"
out="$build/curves"
mkdir -p "$out"
log="$out/log.txt"
[ "$plots_only" = 1 ] || : >"$log"

sizes="16,64,256,1024,4096,16384,65536,262144,1048576"
caps="16,64,256,1024,4096,16384,65536,262144,1048576"
producers="1,2,4,8,16,32,64"
boxes_list="1 10 100 1000 10000"
if [ "$quick" = 1 ]; then
  reps=1
  tput_msgs=(--messages 20000 --laps 1)
  prod_msgs=(--messages 20000)
  rtt_counts=(--count 200 --warmup 20)
  boxes_opts=(--quick)
  boxes_list="1 10 100"
else
  tput_msgs=(--messages 4000000)
  prod_msgs=(--messages 2000000)
  rtt_counts=(--count 20000 --warmup 2000)
  boxes_opts=(--samples 400 --idle-seconds 2 --tput-seconds 2)
fi

step() {  # step NAME ROWS COMMAND...: rows to ROWS, the readable output to the log
  local name="$1" rows="$2"
  shift 2
  [ "$plots_only" = 1 ] && return 0
  echo "curves: $name ..." >&2
  local start=$SECONDS
  if ! "$@" >"$rows" 2>>"$log"; then
    echo "curves: $name FAILED (see $log)" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  echo "curves: $name done in $((SECONDS - start)) s" >&2
}

step "1. size: throughput" "$out/rows-size-tput.tsv" \
  "$b/shmbox-bench-throughput" --only shmbox-copy,shmbox-zero-copy,spin-ring --sizes "$sizes" --producers 1 \
  --reps "$reps" "${tput_msgs[@]}"
step "1. size: round trips" "$out/rows-size-rtt.tsv" \
  "$b/shmbox-bench-rtt" --sizes "$sizes" --reps "$reps" "${rtt_counts[@]}"
step "2. capacity" "$out/rows-capacity.tsv" \
  "$b/shmbox-bench-throughput" --only shmbox-copy,spin-ring --sizes 64 --producers 1 --capacity "$caps" \
  --reps "$reps" "${tput_msgs[@]}"
step "3. producers" "$out/rows-producers.tsv" \
  "$b/shmbox-bench-throughput" --only shmbox-copy,spin-ring --sizes 64 --producers "$producers" \
  --reps "$reps" "${prod_msgs[@]}"
[ "$plots_only" = 1 ] || : >"$out/rows-boxes.tsv"
for n in $boxes_list; do
  step "4. boxes: $n" "$out/rows-boxes-$n.tsv" "$b/shmbox-bench-boxes" --boxes "$n" "${boxes_opts[@]}"
  [ "$plots_only" = 1 ] || cat "$out/rows-boxes-$n.tsv" >>"$out/rows-boxes.tsv"
done

# --- Points: one line per x, "?" where a mechanism has no row (skipped) ----
# Throughput rows: group tput-<S>-<P>p[-c<C>] (S "1k" is 1024), metric rate.
# awk: x_of(group) picks the curve's x; cols are "mechanism:metric" triples.
points() {  # points ROWS XFIELD COLS... > TSV
  local rows="$1" xfield="$2"
  shift 2
  awk -F'\t' -v xfield="$xfield" -v cols="$*" '
    function x_of(g,   p, n) {
      n = split(g, p, "-")
      if (xfield == "size") return p[2] == "1k" ? 1024 : p[2]
      if (xfield == "producers") { sub(/p$/, "", p[3]); return p[3] }
      if (xfield == "capacity") { sub(/^c/, "", p[4]); return p[4] }
      if (xfield == "rtt-size") return p[3]
      if (xfield == "boxes") return 0
    }
    $1 == "row" {
      x = (xfield == "boxes") ? $3 + 0 : x_of($2)
      key = $3 ":" $4
      med[x, key] = $5; lo[x, key] = $6; hi[x, key] = $7
      if (!(x in seen)) { seen[x] = 1; xs[++nx] = x + 0 }
    }
    END {
      nc = split(cols, c, " ")
      printf "# x"
      for (i = 1; i <= nc; i++) printf "\t%s median\tmin\tmax", c[i]
      printf "\n"
      # sort the x values numerically (insertion sort: a handful of points)
      for (i = 2; i <= nx; i++) { v = xs[i]; j = i - 1; while (j > 0 && xs[j] > v) { xs[j + 1] = xs[j]; j-- } xs[j + 1] = v }
      for (i = 1; i <= nx; i++) {
        x = xs[i]
        printf "%s", x
        for (k = 1; k <= nc; k++) {
          if ((x, c[k]) in med) printf "\t%s\t%s\t%s", med[x, c[k]], lo[x, c[k]], hi[x, c[k]]
          else printf "\t?\t?\t?"
        }
        printf "\n"
      }
    }' "$rows"
}

points "$out/rows-size-tput.tsv" size "shmbox-copy:rate" "shmbox-zero-copy:rate" "spin-ring:rate" >"$out/size-throughput.tsv"
points "$out/rows-size-rtt.tsv" rtt-size "shmbox-copy:p50" "shmbox-zero-copy:p50" "spin-ring:p50" "shmbox-copy:p99" "spin-ring:p99" \
  >"$out/size-rtt.tsv"
points "$out/rows-capacity.tsv" capacity "shmbox-copy:rate" "spin-ring:rate" >"$out/capacity.tsv"
points "$out/rows-producers.tsv" producers "shmbox-copy:rate" "spin-ring:rate" >"$out/producers.tsv"
# boxes: x = N (the mechanism "<N> boxes"); a skip row (fd limit) is kept as a comment
# the boxes rows are keyed "<N> boxes:<metric>": rebuild with that key
awk -F'\t' '$1 == "row" { sub(/ boxes$/, "", $3); print $3 "\t" $4 "\t" $5 }' "$out/rows-boxes.tsv" |
  awk -F'\t' '
    { v[$1, $2] = $3; if (!($1 in seen)) { seen[$1] = 1; ns[++nn] = $1 + 0 } }
    END {
      split("tput wake-first-p50 wake-first-p99 wake-last-p50 wake-last-p99 setup threads idle rss-per-box shm-per-box ls gc first-lap", m, " ")
      printf "# boxes"; for (k = 1; k <= 13; k++) printf "\t%s", m[k]; printf "\n"
      for (i = 2; i <= nn; i++) { t = ns[i]; j = i - 1; while (j > 0 && ns[j] > t) { ns[j + 1] = ns[j]; j-- } ns[j + 1] = t }
      for (i = 1; i <= nn; i++) {
        printf "%s", ns[i]
        for (k = 1; k <= 13; k++) printf "\t%s", ((ns[i], m[k]) in v) ? v[ns[i], m[k]] : "?"
        printf "\n"
      }
    }' >"$out/boxes.tsv"
awk -F'\t' '$1 == "skip" { print "# skipped: " $3 ": " $4 }' "$out/rows-boxes.tsv" >>"$out/boxes.tsv"

echo "curves: points in $out/*.tsv" >&2
if ! command -v gnuplot >/dev/null; then
  echo "curves: gnuplot is not installed (apt-get install gnuplot-nox): no plots" >&2
  exit 0
fi

# --- Plots -------------------------------------------------------------------
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
machine="$(nproc) CPUs ($cpu), Linux $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC')"
[ "$quick" = 1 ] && machine="$machine -- QUICK SMOKE RUN: not meaningful"
what="median of $reps interleaved runs, bars min-max"
fdnote="$(sed -n 's/^# skipped: \(.*\)/\1/p' "$out/boxes.tsv" | head -1 | sed 's/ (cannot raise it: [^)]*)//')"

plot() {  # plot NAME: gnuplot commands on stdin, drawn to $out/NAME.svg and $out/NAME.png
  local body term
  body="$(cat)"
  for term in 'svg size 900,560 dynamic noenhanced font "sans,12" background "white"|svg' \
              'pngcairo size 900,560 noenhanced font "sans,10" background "white"|png'; do
    {
      printf 'set terminal %s\n' "${term%|*}"
      printf 'set output "%s/%s.%s"\n' "$out" "$1" "${term#*|}"
      printf 'set datafile missing "?"\nset datafile separator "\\t"\n'
      printf 'set logscale x 2\nset grid\nset key top right\nset bmargin 6\nset offsets graph 0.02, graph 0.02, 0, 0\n'
      printf 'set label 1 "%s" at screen 0.01,0.03 font "sans,9"\n' "$machine; $what"
      printf '%s\n' "$body"
    } | gnuplot 2>>"$log"
  done
}

plot size-throughput <<EOF
set title "Throughput vs message size: 1 producer process -> 1 consumer process\nshmbox-copy: Producer::post -> Owner::receive_batch;  zero-copy: loan + commit -> receive_in_place;  spin ring: push/pop"
set xlabel "message size (bytes) = slot size"
set ylabel "million messages per second"
set logscale y
set xtics ("16 B" 16, "64 B" 64, "256 B" 256, "1 KiB" 1024, "4 KiB" 4096, "16 KiB" 16384, "64 KiB" 65536, "256 KiB" 262144, "1 MiB" 1048576)
set label 2 "capacity 1024 slots, fewer above 128 KiB so a segment stays <= 256 MiB (512 slots of 256 KiB, 128 of 1 MiB)" at screen 0.01,0.065 font "sans,9"
plot "$out/size-throughput.tsv" using 1:2:3:4 with yerrorlines title "shmbox-copy", \
     "" using 1:5:6:7 with yerrorlines title "shmbox-zero-copy", \
     "" using 1:8:9:10 with yerrorlines title "spin-ring"
EOF
plot size-bandwidth <<EOF
set title "Bandwidth vs message size (messages per second x size): 1 producer -> 1 consumer process\nshmbox-copy: Producer::post -> Owner::receive_batch;  zero-copy: loan + commit -> receive_in_place;  spin ring: push/pop"
set xlabel "message size (bytes) = slot size"
set ylabel "MB/s (million bytes per second)"
set logscale y
set xtics ("16 B" 16, "64 B" 64, "256 B" 256, "1 KiB" 1024, "4 KiB" 4096, "16 KiB" 16384, "64 KiB" 65536, "256 KiB" 262144, "1 MiB" 1048576)
set key bottom right
set label 2 "capacity 1024 slots, fewer above 128 KiB so a segment stays <= 256 MiB (512 slots of 256 KiB, 128 of 1 MiB)" at screen 0.01,0.065 font "sans,9"
plot "$out/size-throughput.tsv" using 1:(\$2*\$1):(\$3*\$1):(\$4*\$1) with yerrorlines title "shmbox-copy", \
     "" using 1:(\$5*\$1):(\$6*\$1):(\$7*\$1) with yerrorlines title "shmbox-zero-copy", \
     "" using 1:(\$8*\$1):(\$9*\$1):(\$10*\$1) with yerrorlines title "spin-ring"
EOF
plot size-rtt <<EOF
set title "Round trip (ping-pong, busy-polling) vs message size, p50 and p99\nshmbox-copy: post -> try_receive;  zero-copy: loan + commit -> receive_in_place(max 1, 0 ns);  spin ring: push/pop"
set xlabel "message size (bytes) = slot size"
set ylabel "microseconds"
set logscale y
set xtics ("16 B" 16, "64 B" 64, "256 B" 256, "1 KiB" 1024, "4 KiB" 4096, "16 KiB" 16384, "64 KiB" 65536, "256 KiB" 262144, "1 MiB" 1048576)
set key top left
set label 2 "boxes of 1024 slots up to 1 KiB, 16 slots above (one message in flight); fewer round trips above 1 KiB" at screen 0.01,0.065 font "sans,9"
plot "$out/size-rtt.tsv" using 1:2:3:4 with yerrorlines title "shmbox-copy p50", \
     "" using 1:5:6:7 with yerrorlines title "shmbox-zero-copy p50", \
     "" using 1:8:9:10 with yerrorlines title "spin-ring p50", \
     "" using 1:11 with linespoints dashtype 2 title "shmbox-copy p99", \
     "" using 1:14 with linespoints dashtype 2 title "spin-ring p99"
EOF
plot capacity <<EOF
set title "Throughput vs capacity (slots), 64-byte messages, 1 producer -> 1 consumer process\nshmbox-copy: Producer::post -> Owner::receive_batch (policy block);  spin ring: push/pop"
set xlabel "capacity (slots)"
set ylabel "million messages per second"
set xtics ("16" 16, "64" 64, "256" 256, "1 Ki" 1024, "4 Ki" 4096, "16 Ki" 16384, "64 Ki" 65536, "256 Ki" 262144, "1 Mi" 1048576)
set yrange [0:*]
set label 2 "queues above 1024 slots send at least 8 laps (the first lap's page faults are in the time)" at screen 0.01,0.065 font "sans,9"
plot "$out/capacity.tsv" using 1:2:3:4 with yerrorlines title "shmbox-copy", \
     "" using 1:5:6:7 with yerrorlines title "spin-ring"
EOF
plot producers <<EOF
set title "Throughput vs producer processes, 64-byte messages, 1 consumer process, 1024 slots\nshmbox-copy: Producer::post (policy block) -> Owner::receive_batch;  spin ring (single producer): push/pop"
set xlabel "producer processes ($(nproc) CPUs)"
set arrow 1 from $(nproc), graph 0 to $(nproc), graph 1 nohead dashtype 3
set label 3 "$(nproc) CPUs" at $(nproc), graph 0.95 offset 0.5,0
set ylabel "million messages per second"
set yrange [0:*]
plot "$out/producers.tsv" using 1:2:3:4 with yerrorlines title "shmbox-copy", \
     "" using 1:5:6:7 with yerrorlines title "spin-ring"
EOF
plot boxes-throughput <<EOF
set title "Boxes per owner process: round-robin throughput, 1 producer process -> 1 owner process\nowner: epoll_wait over every box's Owner::notify_fd(), then wait(d, 0), try_receive until empty, notify()"
set xlabel "boxes owned by one process"
set logscale x 10
set ylabel "million messages per second"
set logscale y
set label 1 "$machine; one run per N (not interleaved)" at screen 0.01,0.03 font "sans,9"
set label 2 "${fdnote:-}" at screen 0.01,0.065 font "sans,9"
set datafile separator "\t"
plot "$out/boxes.tsv" using 1:2 with linespoints title "shmbox, round-robin post"
EOF
plot boxes-wake <<EOF
set title "Boxes per owner process: wake-up latency, post -> owner has the message (owner asleep in epoll_wait)\nepoll over every box's Owner::notify_fd(); Producer::post with a CLOCK_MONOTONIC stamp; box 1 and box N interleaved"
set xlabel "boxes owned by one process"
set logscale x 10
set ylabel "microseconds"
set logscale y
set key top left
set label 1 "$machine; one run per N (not interleaved)" at screen 0.01,0.03 font "sans,9"
set label 2 "${fdnote:-}" at screen 0.01,0.065 font "sans,9"
plot "$out/boxes.tsv" using 1:3 with linespoints title "box 1 p50", \
     "" using 1:5 with linespoints title "box N p50", \
     "" using 1:4 with linespoints dashtype 2 title "box 1 p99", \
     "" using 1:6 with linespoints dashtype 2 title "box N p99"
EOF
plot boxes-cost <<EOF
set title "Boxes per owner process: what owning N boxes costs\nOwner::acquire + notify_fd + epoll_ctl + notify per box; idle CPU from /proc/<pid>/task/*/schedstat"
set xlabel "boxes owned by one process"
set logscale x 10
set logscale y
set key top left
set label 1 "$machine; one run per N (not interleaved)" at screen 0.01,0.03 font "sans,9"
set label 2 "${fdnote:-}" at screen 0.01,0.065 font "sans,9"
plot "$out/boxes.tsv" using 1:7 with linespoints title "set-up, ms", \
     "" using 1:8 with linespoints title "threads of the owner", \
     "" using 1:(\$9 > 0 ? \$9 : 0.001) with linespoints title "idle CPU, ms per s (0 drawn as 0.001)", \
     "" using 1:12 with linespoints title "shmbox ls, ms", \
     "" using 1:(\$10/1024) with linespoints title "owner RSS per box, KiB"
EOF
echo "curves: plots in $out/*.svg (and .png)" >&2
