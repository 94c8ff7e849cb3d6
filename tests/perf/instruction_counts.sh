#!/usr/bin/env bash
# tests/perf/instruction_counts.sh: the hot path's instructions per malloc+free pair,
# counted by callgrind (deterministic: the same build gives the same count on every run
# and machine), against the figures of tests/perf/instruction_budget.txt (issue 15).
#
# For each case of the budget file it runs bench/'s callgrind programs (the same
# commands as bench/run_micro.sh: 100 iterations of 256 pairs, collected only around
# the pairs), divides callgrind's `totals:` by the pair count, and
#   * fails (exit 1) when a count is more than 5% above its figure;
#   * prints a note, and passes, when it is more than 5% below (lower the figure);
#   * skips (exit 77) without valgrind, or when the build is not the one the figures
#     are for (the budget file's `build:` line; CI's RelWithDebInfo build).
# jemalloc's own pair and the bare loop are printed for reference, not checked.
# About 5 s. Registered with ctest as perf.instruction_counts (label perf); by hand:
#   ctest --test-dir build -R perf.instruction_counts -V
#
# The device_* cases (issue 42, item 4) run bench/'s device_callgrind, the CUDA domain
# over the simulated runtime of tests/cuda_fake, and are checked by replayalloc's own
# instructions per pair ("own"): the simulated runtime's cost is not what a GPU's
# runtime costs. Built only with the CUDA toolkit: without --device-program they are
# listed as not measured, and the rest is checked.
#
# Usage: instruction_counts.sh --hotpath FILE --preload-program FILE --preload-library FILE
#                              --build 'type=... compiler=... jemalloc=... debug=...'
#                              [--device-program FILE] [--budget FILE]
#        instruction_counts.sh --skip REASON   (the programs were not built: says so, exits 77)
set -uo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
budget=$here/instruction_budget.txt
hotpath='' program='' library='' build='' skip_reason='' device=''
while (($#)); do
  case $1 in
    --hotpath) hotpath=$2; shift 2 ;;
    --preload-program) program=$2; shift 2 ;;
    --preload-library) library=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --device-program) device=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --skip) skip_reason=$2; shift 2 ;;
    *) echo "instruction_counts.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[[ -z $skip_reason ]] || skip "$skip_reason"
command -v valgrind > /dev/null || skip "valgrind is not installed (scripts/setup.sh installs it)"
for f in "$hotpath" "$program" "$library"; do
  [[ -n $f && -e $f ]] || fail "missing program or library '$f' (build the default target first)"
done

# ---- The budget: `build: ...`, then `case figure what it measures` ----------------------
[[ -r $budget ]] || fail "cannot read the budget file $budget"
want_build=
cases=()
declare -A figure what
while read -r name fig rest; do
  [[ -z $name || $name == \#* ]] && continue
  if [[ $name == build: ]]; then
    want_build="$fig${rest:+ $rest}"
    continue
  fi
  [[ $fig =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail "$budget: '$name' has no figure (got '$fig')"
  cases+=("$name")
  figure[$name]=$fig
  what[$name]=$rest
done < "$budget"
((${#cases[@]})) || fail "$budget names no case"
[[ -n $want_build ]] || fail "$budget has no 'build:' line"
if [[ $build != "$want_build" ]]; then
  skip "the figures are for a '$want_build' build, this one is '$build'" \
    "(instruction counts depend on the build type, compiler and jemalloc)"
fi

# The cases run with replayalloc's defaults, whatever the caller's environment says.
while read -r var; do
  [[ $var == REPLAYALLOC_* ]] && unset "$var"
done < <(compgen -e)
unset LD_PRELOAD

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pairs=256       # per iteration: the plan's slots (replay), the loop's length
iterations=100  # collected iterations
# Callgrind's exclusive Ir of an output file that is replayalloc's own: in its
# libraries (the preload library), or in its functions (replayalloc_*,
# replayalloc::*) where a program links it statically. The cost line after a `calls=`
# line is the call's inclusive cost, which belongs to the callee, so it is skipped.
own_ir() {
  awk '
    function named(s, table,   id, rest) {
      if (!match(s, /^\([0-9]+\)/)) return s
      id = substr(s, RSTART, RLENGTH); rest = substr(s, RLENGTH + 2)
      if (rest != "") table[id] = rest
      return table[id]
    }
    function mine() { return ob ~ /\/libreplayalloc[^\/]*$/ || fn ~ /^replayalloc(_|::)/ }
    /^ob=/ { ob = named(substr($0, 4), obs); next }
    /^cob=/ { named(substr($0, 5), obs); next }
    /^fn=/ { fn = named(substr($0, 4), fns); next }
    /^cfn=/ { named(substr($0, 5), fns); next }
    /^calls=/ { skip = 1; next }
    /^[0-9+*-]/ { if (skip) { skip = 0; next } if (mine()) n += $2 }
    END { print n + 0 }' "$1"
}
# Runs one case under callgrind: sets ir, own (the Ir of replayalloc's own libraries:
# what it adds to the backend's and the loop's), npairs, in_slab. Arguments: NAME
# PRELOAD PROGRAM ARGS...
run_case() {
  local name=$1 preload=$2
  shift 2
  local out=$tmp/$name.cg
  if ! LD_PRELOAD=$preload valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
      "$@" > "$out.log" 2> "$out.err"; then
    echo "$name: $* failed under callgrind:"
    cat "$out.log" "$out.err"
    fail "$name could not be measured"
  fi
  ir=$(awk '/^totals:/ { print $2; exit }' "$out")
  own=$(own_ir "$out")
  npairs=$(sed -n 's/^pairs=//p' "$out.log")
  in_slab=$(sed -n 's/^in_slab=//p' "$out.log")
  if ! [[ $ir =~ ^[0-9]+$ && $npairs =~ ^[0-9]+$ ]] || ((npairs == 0)); then
    fail "$name: no instruction total or pair count in callgrind's output"
  fi
}

# What each case runs (hotpath_callgrind checks by itself that every pair took the path
# named: slab hits, or requests below the minimum).
measure() {  # NAME
  case $1 in
    replay_capi_4096) run_case "$1" "" "$hotpath" replay 4096 $pairs $iterations pairs ;;
    below_min_capi_64) run_case "$1" "" "$hotpath" below 64 $pairs $iterations pairs ;;
    replay_preload_4096)
      run_case "$1" "$library" "$program" 4096 $pairs $iterations
      [[ $in_slab == "$npairs" ]] || fail "$1: only ${in_slab:-?} of $npairs pairs were slab hits" ;;
    below_min_preload_64 | below_min_preload_8)
      run_case "$1" "$library" "$program" "${1##*_}" $pairs $iterations
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    below_min_preload_calloc_64)  # Note [Small callocs zeroed by memset]
      run_case "$1" "$library" "$program" 64 $pairs $iterations calloc
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    realloc_preload_64)  # a malloc, a realloc to twice the size (another class: the block moves), a free; unmarked
      run_case "$1" "$library" "$program" 64 $pairs $iterations realloc unmarked
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    below_min_preload_memalign_64)  # Note [Aligned requests in the front cache]
      run_case "$1" "$library" "$program" 64 $pairs $iterations memalign
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    below_min_preload_new_64)
      run_case "$1" "$library" "$program" 64 $pairs $iterations new
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    watched_below_min_64)  # Note [A dormant watcher]: 1,000 iterations, most of them after it went dormant
      run_case "$1" "$library" "$program" 64 $pairs 1000 malloc unmarked
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    watched_below_min_new_64)  # a watched thread's small sized deletes (entry_free_sized)
      run_case "$1" "$library" "$program" 64 $pairs $iterations new unmarked
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    watched_one_size_4096)
      run_case "$1" "$library" "$program" 4096 $pairs $iterations malloc unmarked ;;
    passed_memalign_4096)  # auto mode off: posix_memalign(64) pairs passed through (Note [Aligned requests in the front cache])
      REPLAYALLOC_MODE=off run_case "$1" "$library" "$program" 4096 $pairs $iterations memalign unmarked
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    passed_4096 | passed_262144)  # auto mode off: every pair passed through (Note [Passes granted ahead])
      REPLAYALLOC_MODE=off run_case "$1" "$library" "$program" "${1##*_}" $pairs $iterations malloc unmarked
      [[ $in_slab == 0 ]] || fail "$1: ${in_slab:-?} of $npairs pairs came from a slab (expected none)" ;;
    jemalloc_64) run_case "$1" "" "$hotpath" jemalloc 64 $pairs $iterations pairs ;;
    jemalloc_preload_64)  # jemalloc's own library preloaded under the preload cases' program
      local je
      je=$(ldconfig -p 2> /dev/null | awk '/libjemalloc\.so\.2 .*x86-64/ { print $NF; exit }')
      [[ -n $je ]] || je=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
      run_case "$1" "$je" "$program" 64 $pairs $iterations ;;
    jemalloc_4096) run_case "$1" "" "$hotpath" jemalloc 4096 $pairs $iterations pairs ;;
    loop_baseline) run_case "$1" "" "$hotpath" baseline 4096 $pairs $iterations pairs ;;
    device_replay_4096 | device_miss_4096 | device_passed_4096 | device_native_4096)  # checked by "own"
      local p=${1#device_}
      run_case "$1" "" "$device" "${p%_*}" 4096 $pairs $iterations ;;
    *) fail "$budget names case '$1', which this script does not know (see measure())" ;;
  esac
}

per_pair() { awk -v i="$1" -v p="$2" 'BEGIN { printf "%.1f", i / p }'; }

echo "== instructions per malloc+free pair (callgrind, $iterations x $pairs pairs; budget: ${budget#"$here"/})"
printf '  %-24s %9s %9s %9s  %-6s %5s  %s\n' case measured budget "+5%" "" own "(Ir / pairs)"
failures=()
notes=()
unmeasured=()
for name in "${cases[@]}"; do
  if [[ $name == device_* && -z $device ]]; then
    unmeasured+=("$name")
    continue
  fi
  measure "$name"
  # The device cases: replayalloc's own instructions (the simulated runtime's are not a GPU's).
  [[ $name == device_* ]] && ir=$own
  got=$(per_pair "$ir" "$npairs")
  fig=${figure[$name]}
  limit=$(awk -v f="$fig" 'BEGIN { printf "%.1f", f * 1.05 }')
  verdict=ok
  if awk -v i="$ir" -v p="$npairs" -v f="$fig" 'BEGIN { exit !(i / p > f * 1.05) }'; then
    verdict=OVER
    failures+=("$name: $got instructions per pair, above its budget of $fig + 5% = $limit; it measures: ${what[$name]}")
  elif awk -v i="$ir" -v p="$npairs" -v f="$fig" 'BEGIN { exit !(i / p < f * 0.95) }'; then
    verdict=below
    notes+=("$name: $got instructions per pair, more than 5% below its budget of $fig: lower the figure")
  fi
  printf '  %-24s %9s %9s %9s  %-6s %5s  (%s / %s)\n' "$name" "$got" "$fig" "$limit" "$verdict" \
    "$(per_pair "$own" "$npairs")" "$ir" "$npairs"
done
echo "  (own: the instructions of replayalloc's own code alone, per pair; the rest is the"
echo "   backend's and the loop's. Below the minimum, with the front cache on, it is the whole pair's but the loop's."
echo "   The device_* cases are checked by it: the simulated CUDA runtime's cost is not a GPU's.)"
((${#unmeasured[@]})) && echo "not measured (no device_callgrind: built with the CUDA toolkit only): ${unmeasured[*]}"
echo "reference, not checked:"
for name in jemalloc_64 jemalloc_preload_64 jemalloc_4096 loop_baseline; do
  measure "$name"
  printf '  %-24s %9s %26s(%s / %s)\n' "$name" "$(per_pair "$ir" "$npairs")" "" "$ir" "$npairs"
done

for n in "${notes[@]}"; do
  echo "NOTE: $n in ${budget#"$here"/} (and the cost comments in allocator/replay/fast_path.h, allocator/runtime/entry.h)"
done
if ((${#failures[@]})); then
  for f in "${failures[@]}"; do echo "FAIL: $f"; done
  echo "A change made the hot path dearer. Make it cheap again; or, if the cost is deliberate,"
  echo "raise the figure in tests/perf/instruction_budget.txt (and the cost comments in"
  echo "allocator/replay/fast_path.h, allocator/runtime/entry.h), saying why."
  exit 1
fi
echo "ok: every count within 5% above its budget"
