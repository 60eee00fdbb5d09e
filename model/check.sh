#!/usr/bin/env bash
# model/check.sh - model-checks the slot protocol (model/ring.pml) and the
# owner lease (model/lease.pml) with spin. See model/README.md.
#
#   bash model/check.sh            every run (about 2 minutes on 2 cores)
#   JOBS=1 bash model/check.sh     one run at a time
#   KEEP=1 bash model/check.sh     keep the work directory (trails, pan output)
#
# Each run: spin -a, gcc pan.c, ./pan; the run's line shows the states stored,
# transitions, depth reached and time. Kinds of runs:
#   verify  must finish with no error (assertions, invalid end states; -DNP
#           runs: no non-progress cycle, i.e. no infinite execution at all)
#   mutant  a deliberately broken model, or the C++ before a fix of a problem
#           spin found (README): spin must find an error (with PATTERN: that
#           very violation)
#   known   an assertion stronger than the protocol promises, which the C++
#           does not meet by design (README, "known runs"): spin must find
#           exactly that violation. If one starts to pass, the C++ (or the
#           model) changed: update the README.
# Exits 1 if any run does not behave as expected, or if spin/gcc are missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v spin >/dev/null 2>&1; then
  echo "check.sh: spin is not installed (Debian/Ubuntu: apt-get install -y spin)" >&2
  exit 1
fi
CC="${CC:-gcc}"
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "check.sh: no C compiler '$CC' (set CC, or apt-get install -y gcc)" >&2
  exit 1
fi

JOBS="${JOBS:-2}"
work="$(mktemp -d "${TMPDIR:-/tmp}/shmbox-model.XXXXXX")"
if [[ "${KEEP:-0}" == 1 ]]; then
  echo "work directory: $work"
else
  trap 'rm -rf "$work"' EXIT
fi

# run NAME KIND MODEL MODE HASHBITS OPT PATTERN -- SPIN_DEFINES...
#   KIND verify|mutant|known; MODE safety|np; HASHBITS: pan -w; OPT: gcc -O
#   level for pan (0 for small runs: compiling pan.c at -O1 costs more than
#   it saves); PATTERN: text that the reported violation must contain ("" for
#   any error; verify runs: "").
run_one() {
  local name="$1" kind="$2" model="$3" mode="$4" wbits="$5" opt="$6" pattern="$7"
  shift 8
  local dir="$work/$name"
  mkdir -p "$dir"
  cp "$here/$model" "$dir/"
  local cflags=("-O$opt" -DCOLLAPSE -DVECTORSZ=2048) panflags=(-m100000 "-w$wbits")
  if [[ "$mode" == np ]]; then cflags+=(-DNP); panflags+=(-l); else cflags+=(-DSAFETY); fi
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  {
    (cd "$dir" && spin -a "$@" "$model" >spin.out 2>&1) &&
      (cd "$dir" && "$CC" "${cflags[@]}" -o pan pan.c >cc.out 2>&1) &&
      (cd "$dir" && ./pan "${panflags[@]}" >pan.out 2>&1)
  } || rc=$?
  t1=$(date +%s.%N)
  local total
  total=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  local out="$dir/pan.out" result
  if [[ ! -s "$out" ]]; then
    result="FAIL $name: spin/gcc/pan failed (rc $rc); see $dir (KEEP=1)"
    cat "$dir"/spin.out "$dir"/cc.out 2>/dev/null | head -20 >"$dir/why"
    echo "$result" >"$dir/result"
    return
  fi
  local errors states trans depth ptime violation
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | tail -1)
  trans=$(sed -n 's/^ *\([0-9.e+]*\) transitions.*/\1/p' "$out" | tail -1)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | tail -1)
  ptime=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds/\1/p' "$out" | tail -1)
  violation=$(grep -m1 -E '^pan:1: |^pan: (acceptance|non-progress) cycle' "$out" | sed 's/ (at depth [0-9]*)//' || true)
  local figures="states=${states:-?} transitions=${trans:-?} depth=${depth:-?} pan=${ptime:-?}s total=${total}s"
  local ok=1 why=""
  if [[ -z "$errors" ]]; then ok=0; why="no result from pan"; fi
  if grep -q -E 'max search depth too small|out of memory|hash table is full' "$out"; then
    ok=0; why="incomplete search: $(grep -m1 -E 'max search depth too small|out of memory|hash table is full' "$out")"
  fi
  case "$kind" in
    verify)
      if [[ "$ok" == 1 && "$errors" != 0 ]]; then ok=0; why="$violation"; fi
      if [[ "$ok" == 1 ]]; then result="ok   $name: verified, $figures"
      else result="FAIL $name: $why ($figures)"; fi ;;
    mutant|known)
      if [[ -n "$errors" && "$errors" != 0 ]]; then
        if [[ -n "$pattern" ]] && ! grep -q -F -- "$pattern" <<<"$violation"; then
          result="FAIL $name: expected a violation containing '$pattern', got: $violation"
        else
          local what="mutant caught"; [[ "$kind" == known ]] && what="reproduced"
          result="ok   $name: $what: ${violation#pan:1: } ($figures)"
        fi
      else
        result="FAIL $name: expected spin to find an error, it found none ($figures)"
      fi ;;
  esac
  echo "$result" >"$dir/result"
}

nruns=0
add() {  # one run: its arguments are kept as an array run_<n>
  declare -g -a "run_$nruns"
  local -n spec="run_$nruns"
  spec=("$@")
  nruns=$((nruns + 1))
}

# The longest runs first: with 2 jobs they then finish at about the same time.
# ---- ring.pml: the slot protocol (POST/EVICT/TAKE/repairs/wake) ----------
#   name                            kind   model     mode   w  O pattern -- defines
add "ring-drop_oldest-cap2-np"      verify ring.pml  np     24 1 "" -- -DPOLICY=1 -DCAP=2 -DN1=2 -DN2=2 -DMAXDEAD=3
add "ring-drop_oldest-cap1"         verify ring.pml  safety 24 1 "" -- -DPOLICY=1 -DCAP=1 -DN1=2 -DN2=2 -DMAXDEAD=3
add "ring-drop_oldest-cap2"         verify ring.pml  safety 23 1 "" -- -DPOLICY=1 -DCAP=2 -DN1=2 -DN2=2 -DMAXDEAD=3
add "ring-drop_oldest-3prod"        verify ring.pml  safety 23 1 "" -- -DPOLICY=1 -DCAP=1 -DN1=1 -DN2=1 -DN3=1 -DMAXDEAD=3
add "ring-reject-cap2-np"           verify ring.pml  np     22 1 "" -- -DPOLICY=0 -DCAP=2 -DN1=2 -DN2=2 -DMAXDEAD=3
# ---- lease.pml: ownership, heirs, lease expiry, two-phase receive -------
add "lease-expiry-m3"               verify lease.pml safety 23 1 "" -- -DLEASE=1 -DM=3 -DCAP=3
add "lease-expiry-m3-read"          verify lease.pml safety 23 1 "" -- -DLEASE=1 -DM=3 -DCAP=3 -DREAD_MODE
add "lease-expiry-m3-batch1-read"   verify lease.pml safety 23 1 "" -- -DLEASE=1 -DM=3 -DCAP=3 -DBATCH=1 -DREAD_MODE
add "lease-expiry-m2-3deaths"       verify lease.pml safety 21 1 "" -- -DLEASE=1 -DMAXDEAD=3
add "lease-expiry-1heir-m3"         verify lease.pml safety 20 0 "" -- -DLEASE=1 -DHEIRS=1 -DM=3 -DCAP=3 -DMAXDEAD=3
add "lease-expiry-1heir-m3-read"    verify lease.pml safety 20 0 "" -- -DLEASE=1 -DHEIRS=1 -DM=3 -DCAP=3 -DMAXDEAD=3 -DREAD_MODE
add "lease-expiry-m3-mix"           verify lease.pml safety 23 1 "" -- -DLEASE=1 -DM=3 -DCAP=3 -DMIX
add "lease-expiry-1heir-m3-mix"     verify lease.pml safety 20 0 "" -- -DLEASE=1 -DHEIRS=1 -DM=3 -DCAP=3 -DMAXDEAD=3 -DMIX
STRICT=(-DCHECK_ADOPT -DCHECK_HEAD -DSTRICT_FENCE -DREAD_MODE)
add "lease-deaths-m2"               verify lease.pml safety 20 0 "" -- -DLEASE=0 -DM=2 -DCAP=2 -DMAXDEAD=3 "${STRICT[@]}"
add "lease-deaths-m3"               verify lease.pml safety 20 0 "" -- -DLEASE=0 -DM=3 -DCAP=3 -DMAXDEAD=3 "${STRICT[@]}"
add "lease-deaths-m3-batch1"        verify lease.pml safety 20 0 "" -- -DLEASE=0 -DM=3 -DCAP=3 -DMAXDEAD=3 -DBATCH=1 "${STRICT[@]}"
add "lease-deaths-m3-np"            verify lease.pml np     20 0 "" -- -DLEASE=0 -DM=3 -DCAP=3 -DMAXDEAD=3
add "lease-deaths-m3-mix"           verify lease.pml safety 20 0 "" -- -DLEASE=0 -DM=3 -DCAP=3 -DMAXDEAD=3 -DMIX -DCHECK_ADOPT -DCHECK_HEAD -DSTRICT_FENCE
# ---- ring.pml, smaller runs ---------------------------------------------
add "ring-reject-cap2"              verify ring.pml  safety 21 0 "" -- -DPOLICY=0 -DCAP=2 -DN1=2 -DN2=2 -DMAXDEAD=3
add "ring-reject-cap1"              verify ring.pml  safety 21 0 "" -- -DPOLICY=0 -DCAP=1 -DN1=2 -DN2=2 -DMAXDEAD=3
#     the C++ before the fixes of the problems spin found (README): must fail
add "ring-mutant-NO_SLICE-drop_oldest" mutant ring.pml safety 20 0 "pub[p]" -- -DPOLICY=1 -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_NO_SLICE
add "ring-mutant-NO_SLICE-reject"   mutant ring.pml  safety 20 0 "pub[p]" -- -DPOLICY=0 -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_NO_SLICE
add "ring-mutant-SKIP_HELD"         mutant ring.pml  safety 20 0 "(fate[p]!=0)" -- -DPOLICY=1 -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_SKIP_HELD
add "ring-mutant-SKIP_HELD-evict"   mutant ring.pml  safety 20 0 "pub[p]" -- -DPOLICY=1 -DCAP=1 -DN1=2 -DN2=1 -DMAXDEAD=1 -DMUTANT_SKIP_HELD
add "ring-mutant-DEPTH_GHOST"       mutant ring.pml  safety 20 0 "(scan==depth)" -- -DPOLICY=0 -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_DEPTH_GHOST
#     deliberately broken protocol steps: must fail
add "ring-mutant-R1_NOCOUNT"        mutant ring.pml  safety 20 0 "" -- -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_R1_NOCOUNT
add "ring-mutant-T3_STORE"          mutant ring.pml  safety 20 0 "" -- -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_T3_STORE
add "ring-mutant-R2_NOCAS"          mutant ring.pml  safety 20 0 "" -- -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_R2_NOCAS
add "ring-mutant-R1_NOCHECK"        mutant ring.pml  safety 20 0 "" -- -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_R1_NOCHECK
add "ring-mutant-NO_WITHDRAW"       mutant ring.pml  safety 20 0 "invalid end state" -- -DCAP=1 -DN1=2 -DN2=2 -DMAXDEAD=3 -DMUTANT_NO_WITHDRAW
# ---- lease.pml, mutants and known runs ----------------------------------
#     the C++ before the fixes of the problems spin found (README): must fail
add "lease-mutant-STALE_ADOPT"      mutant lease.pml safety 20 0 "((sa-1)<myep)" -- -DLEASE=1 -DMUTANT_STALE_ADOPT -DCHECK_ADOPT
add "lease-mutant-STALE_ADOPT-lost" mutant lease.pml safety 20 0 "acting[okey]" -- -DLEASE=1 -DMUTANT_STALE_ADOPT
add "lease-mutant-STALE_HEAD"       mutant lease.pml safety 20 0 "(p>=head)" -- -DLEASE=1 -DMUTANT_STALE_HEAD
add "lease-mutant-EPOCH_FETCH_ADD"  mutant lease.pml safety 20 0 "taking[okey]" -- -DLEASE=1 -DMUTANT_EPOCH_FETCH_ADD
add "lease-mutant-READ_GIVEBACK"    mutant lease.pml safety 20 0 "seen_app" -- -DLEASE=1 -DREAD_MODE -DMUTANT_READ_GIVEBACK
add "lease-mutant-GIVEBACK_READS"   mutant lease.pml safety 20 0 "seen_app" -- -DLEASE=1 -DMIX -DMUTANT_GIVEBACK_READS
#     deliberately broken protocol steps: must fail
add "lease-mutant-NO_ADOPT"         mutant lease.pml safety 20 0 "" -- -DLEASE=1 -DMUTANT_NO_ADOPT
add "lease-mutant-LOCK_AFTER_CAS"   mutant lease.pml safety 20 0 "((k==0)||dead[k])" -- -DLEASE=0 -DM=2 -DCAP=2 -DMAXDEAD=3 -DMUTANT_LOCK_AFTER_CAS
add "lease-mutant-HEAD_NOMIN"       mutant lease.pml safety 20 0 "" -- -DLEASE=0 -DM=3 -DCAP=3 -DMAXDEAD=3 -DMUTANT_HEAD_NOMIN
add "lease-mutant-FDC_NOCAS"        mutant lease.pml safety 20 0 "" -- -DLEASE=0 -DM=3 -DCAP=3 -DMAXDEAD=3 -DMUTANT_FDC_NOCAS
add "lease-mutant-C2_STORE"         mutant lease.pml safety 20 0 "" -- -DLEASE=1 -DHEIRS=1 -DM=3 -DCAP=3 -DMAXDEAD=3 -DMUTANT_C2_STORE
#     documented behaviours of the C++ that are not errors (README): must fail
add "lease-known-stale-commit"      known  lease.pml safety 20 0 "((okey==me)&&(epoch==myep))" -- -DLEASE=1 -DSTRICT_FENCE
add "lease-known-head-passes-held"  known  lease.pml safety 20 0 "head>" -- -DLEASE=1 -DCHECK_HEAD

echo "spin: $(spin -V 2>&1 | head -1); $JOBS job(s); work in $work"
start=$(date +%s)
names=()
running=0
for ((i = 0; i < nruns; i++)); do
  declare -n spec="run_$i"
  names+=("${spec[0]}")
  run_one "${spec[@]}" &
  unset -n spec
  running=$((running + 1))
  if (( running >= JOBS )); then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=0
for n in "${names[@]}"; do
  if [[ -f "$work/$n/result" ]]; then
    line="$(cat "$work/$n/result")"
  else
    line="FAIL $n: no result"
  fi
  echo "$line"
  if [[ "$line" == FAIL* ]]; then
    failed=$((failed + 1))
    [[ -f "$work/$n/why" ]] && sed 's/^/    /' "$work/$n/why"
  fi
done
echo "total: ${#names[@]} runs, $failed unexpected, $(( $(date +%s) - start ))s"
if (( failed > 0 )); then
  echo "check.sh: $failed run(s) did not behave as expected (KEEP=1 keeps trails; replay with spin -t -p)" >&2
  exit 1
fi
echo "check.sh: all models behave as expected"
