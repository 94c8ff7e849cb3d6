#!/usr/bin/env bash
# bench/run_micro.sh: measures the malloc+free pair and refreshes bench/RESULTS.md.
#
# Builds pair_bench, hotpath_callgrind, demo_inference and the preload library if
# needed (configuring the build with -DREPLAYALLOC_BUILD_BENCH=ON when it is off), then
#   1. runs pair_bench once per allocator and round, each in a process of its own
#      (glibc; LD_PRELOAD jemalloc, tcmalloc, mimalloc; replayalloc preloaded, replay
#      hit and replay miss), the order rotated every round; medians over the rounds,
#      JSON kept in $BUILD_DIR/bench/pair/;
#   2. counts instructions per pair under callgrind for each allocator and size;
#   3. runs demo_inference;
# and rewrites the "Micro: malloc+free pair" and "Demo (inference-shaped pattern)"
# sections of bench/RESULTS.md (bench/update_results.py), keeping everything else.
# About 4 minutes on a 2-core machine (--quick: about 1.5).
#
# Usage: bench/run_micro.sh [--quick] [--no-demo]
#   --quick    0.01 s per benchmark instead of 0.05 s, 3 rounds instead of 5 (noisier)
#   --no-demo  leave the demo section alone
# Environment: BUILD_DIR (default <repo>/build).
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

build=${BUILD_DIR:-$root/build}
min_time=0.05
rounds=5
run_demo=1
for arg in "$@"; do
  case $arg in
    --quick) min_time=0.01; rounds=3 ;;
    --no-demo) run_demo=0 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "run_micro.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
started=$SECONDS

# ---- Build ------------------------------------------------------------------------------
configure_build "$build" -DREPLAYALLOC_BUILD_BENCH=ON
targets=(pair_bench demo_inference replayalloc_preload)
have_cg=0
if [[ $(cache_value "$build" REPLAYALLOC_HAVE_CALLGRIND_H) == 1 ]] && command -v valgrind > /dev/null; then
  have_cg=1
  targets+=(hotpath_callgrind preload_callgrind)
else
  echo "run_micro.sh: valgrind or valgrind/callgrind.h missing: no instruction counts" >&2
fi
cmake --build "$build" --target "${targets[@]}"

build_type=$(cache_value "$build" CMAKE_BUILD_TYPE)
case $build_type in
  Release|RelWithDebInfo) ;;
  *) echo "run_micro.sh: warning: CMAKE_BUILD_TYPE is '$build_type'; numbers from an optimised build only mean something" >&2 ;;
esac

# ---- What the numbers were measured on --------------------------------------------------
scratch_dir
meta=$tmp/meta
gbench_dir=$(cache_value "$build" benchmark_DIR)
gbench_version=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$gbench_dir/benchmarkConfigVersion.cmake" 2> /dev/null || true)
{
  machine_meta "$build"
  echo "gbench_version=${gbench_version:-?}"
} > "$meta"

# ---- 1. pair_bench, one process per allocator ----------------------------------------
preload=$(preload_library "$build")
pair_dir=$build/bench/pair
rm -rf "$pair_dir" && mkdir -p "$pair_dir"
allocators=(glibc jemalloc tcmalloc mimalloc replay_hit replay_miss)
# REPLAYALLOC_MAX_PLANS=4096: pair_bench makes 48 keys, more than the default bound.
alloc_env() {  # allocator -> the environment of its process
  case $1 in
    glibc) echo "" ;;
    jemalloc|tcmalloc|mimalloc) echo "LD_PRELOAD=$(allocator_library "$1")" ;;
    replay_hit) echo "LD_PRELOAD=$preload PAIR_BENCH_REPLAY=hit REPLAYALLOC_MIN_SIZE=0 REPLAYALLOC_REPLAN_AFTER=0 REPLAYALLOC_MAX_PLANS=4096" ;;
    replay_miss) echo "LD_PRELOAD=$preload PAIR_BENCH_REPLAY=miss REPLAYALLOC_MIN_SIZE=0 REPLAYALLOC_REPLAN_AFTER=0 REPLAYALLOC_MAX_PLANS=4096" ;;
  esac
}
for a in "${allocators[@]}"; do
  for lib in $(alloc_env "$a" | tr ' ' '\n' | sed -n 's/^LD_PRELOAD=//p'); do
    require_file "$lib" "$a needs it; scripts/setup.sh installs it"
  done
done
bench_args=("--benchmark_min_time=$min_time" --benchmark_out_format=json)
echo "rounds=$rounds" >> "$meta"
echo "bench_cmd=[ENV] $(rel "$build")/bench/pair_bench ${bench_args[*]} --benchmark_out=$(rel "$pair_dir")/ALLOCATOR.ROUND.json" >> "$meta"
echo "== pair_bench: ${#allocators[@]} allocators x $rounds rounds (min_time $min_time s)"
micro_failed=0
for ((r = 0; r < rounds; r++)); do
  order=("${allocators[@]:r % ${#allocators[@]}}" "${allocators[@]:0:r % ${#allocators[@]}}")
  for a in "${order[@]}"; do
    t0=$SECONDS
    # shellcheck disable=SC2046
    if ! env $(alloc_env "$a") "$build/bench/pair_bench" "${bench_args[@]}" \
        --benchmark_out="$pair_dir/$a.$((r + 1)).json" > "$pair_dir/$a.$((r + 1)).log" 2>&1; then
      # Keep going: the other allocators' figures still mean something; the section
      # lists the failed run (update_results.py reads the .failed marker).
      echo "run_micro.sh: pair_bench under $a failed (round $((r + 1))):" >&2
      tail -n 5 "$pair_dir/$a.$((r + 1)).log" >&2
      rm -f "$pair_dir/$a.$((r + 1)).json"
      tail -n 3 "$pair_dir/$a.$((r + 1)).log" > "$pair_dir/$a.$((r + 1)).failed"
      micro_failed=1
    fi
    echo "  round $((r + 1)) $a ($((SECONDS - t0)) s)"
  done
done

# ---- 2. callgrind -----------------------------------------------------------------------
cg_pairs=256
cg_iterations=100
tsv=$tmp/callgrind.tsv
echo "allocator size scope ir pairs" > "$tsv"
echo "cg_pairs=$cg_pairs" >> "$meta"
echo "cg_cmd=valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file=OUT $(rel "$build")/bench/hotpath_callgrind ALLOCATOR SIZE $cg_pairs $cg_iterations pairs|iteration (tcmalloc, mimalloc: ALLOCATOR=jemalloc with the library in LD_PRELOAD)" >> "$meta"
count_instructions() {  # allocator size scope
  local out=$tmp/cg.$1.$2.$3
  # tcmalloc and mimalloc: the plain malloc/free loop ("jemalloc" mode) with the
  # library preloaded, so it serves malloc instead of the jemalloc the binary links.
  local mode=$1 pre=
  case $1 in
    tcmalloc|mimalloc) mode=jemalloc; pre=$(allocator_library "$1") ;;
  esac
  if ! LD_PRELOAD=$pre valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
      "$build/bench/hotpath_callgrind" "$mode" "$2" "$cg_pairs" "$cg_iterations" "$3" > "$out.log" 2>&1; then
    echo "run_micro.sh: hotpath_callgrind $1 $2 $3 failed:" >&2
    cat "$out.log" >&2
    exit 1
  fi
  local pairs ir
  pairs=$(sed -n 's/^pairs=//p' "$out.log")
  ir=$(awk '/^totals:/ { print $2; exit }' "$out")
  echo "$1 $2 $3 $ir $pairs" >> "$tsv"
  printf '  %-9s %9s %-9s %6.1f instructions per pair\n' "$1" "$2" "$3" "$(awk -v i="$ir" -v p="$pairs" 'BEGIN { print i / p }')"
}
# The pair as an unmodified program sees it: plain malloc/free with each allocator's
# library preloaded (replayalloc: iterations marked through the symbols it exports).
count_preloaded() {  # allocator size
  local out=$tmp/cgp.$1.$2 pre=
  case $1 in
    jemalloc|tcmalloc|mimalloc) pre=$(allocator_library "$1") ;;
    replayalloc) pre=$preload ;;
  esac
  if ! LD_PRELOAD=$pre valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
      "$build/bench/preload_callgrind" "$2" "$cg_pairs" "$cg_iterations" > "$out.log" 2>&1; then
    echo "run_micro.sh: preload_callgrind $1 $2 failed:" >&2
    cat "$out.log" >&2
    exit 1
  fi
  local pairs ir in_slab
  pairs=$(sed -n 's/^pairs=//p' "$out.log")
  in_slab=$(sed -n 's/^in_slab=//p' "$out.log")
  # replayalloc at or above its 4 KiB minimum: every measured pair must be a slab hit
  if [[ $1 == replayalloc ]] && (( $2 >= 4096 )) && [[ $in_slab != "$pairs" ]]; then
    echo "run_micro.sh: preload_callgrind replayalloc $2: $in_slab of $pairs pairs from the slab" >&2
    exit 1
  fi
  ir=$(awk '/^totals:/ { print $2; exit }' "$out")
  echo "$1 $2 preload $ir $pairs" >> "$tsv"
  printf '  %-11s %9s preload   %6.1f instructions per pair\n' "$1" "$2" "$(awk -v i="$ir" -v p="$pairs" 'BEGIN { print i / p }')"
}
if (( have_cg )); then
  echo "== callgrind: instructions per malloc+free pair"
  for size in 64 4096 262144 16777216; do
    for allocator in baseline replay miss jemalloc tcmalloc mimalloc glibc; do count_instructions "$allocator" "$size" pairs; done
    count_instructions replay "$size" iteration
  done
  echo "== callgrind: the same pair through LD_PRELOAD"
  for size in 64 1024 4096 262144; do
    for allocator in glibc jemalloc tcmalloc mimalloc replayalloc; do count_preloaded "$allocator" "$size"; done
  done
fi

echo "load_after=$(load_average)" >> "$meta"
update_results micro "$results" --meta "$meta" --pair-dir "$pair_dir" --callgrind-tsv "$tsv"

# ---- 3. demo ------------------------------------------------------------------------------
if (( run_demo )); then
  echo "== demo_inference"
  echo "demo_cmd=$(rel "$build")/bench/demo_inference" >> "$meta"
  "$build/bench/demo_inference" | tee "$tmp/demo.txt"
  update_results demo "$results" --meta "$meta" --demo-output "$tmp/demo.txt"
fi

echo "== wrote $(rel "$results") in $((SECONDS - started)) s"
exit "$micro_failed"
