#!/usr/bin/env bash
# bench/run_micro.sh: measures the malloc+free pair and refreshes bench/RESULTS.md.
#
# Builds replay_bench, hotpath_callgrind and demo_inference if needed (configuring the
# build with -DREPLAYALLOC_BUILD_BENCH=ON when it is off), then
#   1. runs replay_bench: 5 repetitions, medians, JSON kept in $BUILD_DIR/bench/;
#   2. counts instructions per pair under callgrind for each allocator and size;
#   3. runs demo_inference;
# and rewrites the "Micro: malloc+free pair" and "Demo (inference-shaped pattern)"
# sections of bench/RESULTS.md (bench/update_results.py), keeping everything else.
# About 3 minutes on a 2-core machine.
#
# Usage: bench/run_micro.sh [--quick] [--no-demo]
#   --quick    0.01 s per benchmark instead of 0.1 s (to try the script; noisier)
#   --no-demo  leave the demo section alone
# Environment: BUILD_DIR (default <repo>/build).
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
build=${BUILD_DIR:-$root/build}
results=$here/RESULTS.md
min_time=0.1
run_demo=1
for arg in "$@"; do
  case $arg in
    --quick) min_time=0.01 ;;
    --no-demo) run_demo=0 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "run_micro.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
started=$SECONDS

# ---- Build ------------------------------------------------------------------------------
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREPLAYALLOC_BUILD_BENCH=ON
elif ! grep -q '^REPLAYALLOC_BUILD_BENCH:BOOL=ON' "$build/CMakeCache.txt"; then
  cmake -DREPLAYALLOC_BUILD_BENCH=ON "$build"
fi
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n1; }
targets=(replay_bench demo_inference)
have_cg=0
if [[ $(cache_value REPLAYALLOC_HAVE_CALLGRIND_H) == 1 ]] && command -v valgrind > /dev/null; then
  have_cg=1
  targets+=(hotpath_callgrind)
else
  echo "run_micro.sh: valgrind or valgrind/callgrind.h missing: no instruction counts" >&2
fi
cmake --build "$build" --target "${targets[@]}"

build_type=$(cache_value CMAKE_BUILD_TYPE)
case $build_type in
  Release|RelWithDebInfo) ;;
  *) echo "run_micro.sh: warning: CMAKE_BUILD_TYPE is '$build_type'; numbers from an optimised build only mean something" >&2 ;;
esac

# ---- What the numbers were measured on --------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meta=$tmp/meta
rel() { echo "${1#"$root"/}"; }
commit=$(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)
if ! git -C "$root" diff --quiet HEAD 2> /dev/null; then commit="$commit + uncommitted changes"; fi
cxx=$(cache_value CMAKE_CXX_COMPILER)
gbench_dir=$(cache_value benchmark_DIR)
gbench_version=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$gbench_dir/benchmarkConfigVersion.cmake" 2> /dev/null || true)
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "nproc=$(nproc)"
  echo "cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  echo "kernel=$(uname -r)"
  echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit=$commit"
  echo "build_type=$build_type"
  echo "compiler=$("$cxx" --version | head -n1)"
  echo "gbench_version=${gbench_version:-?}"
} > "$meta"

# ---- 1. replay_bench --------------------------------------------------------------------
json=$build/bench/replay_bench.json
bench_args=(--benchmark_repetitions=5 --benchmark_report_aggregates_only=true
            --benchmark_enable_random_interleaving=true
            --benchmark_min_time=$min_time --benchmark_out_format=json)
echo "bench_cmd=$(rel "$build")/bench/replay_bench ${bench_args[*]} --benchmark_out=$(rel "$json")" >> "$meta"
echo "== replay_bench (min_time $min_time s, 5 repetitions)"
"$build/bench/replay_bench" "${bench_args[@]}" --benchmark_out="$json"

# ---- 2. callgrind -----------------------------------------------------------------------
cg_pairs=256
cg_iterations=100
tsv=$tmp/callgrind.tsv
echo "allocator size scope ir pairs" > "$tsv"
echo "cg_pairs=$cg_pairs" >> "$meta"
echo "cg_cmd=valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file=OUT $(rel "$build")/bench/hotpath_callgrind ALLOCATOR SIZE $cg_pairs $cg_iterations pairs|iteration" >> "$meta"
count_instructions() {  # allocator size scope
  local out=$tmp/cg.$1.$2.$3
  if ! valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
      "$build/bench/hotpath_callgrind" "$1" "$2" "$cg_pairs" "$cg_iterations" "$3" > "$out.log" 2>&1; then
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
if (( have_cg )); then
  echo "== callgrind: instructions per malloc+free pair"
  for size in 64 4096 262144 16777216; do
    for allocator in baseline replay miss jemalloc glibc; do count_instructions "$allocator" "$size" pairs; done
    count_instructions replay "$size" iteration
  done
fi

echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$meta"
python3 "$here/update_results.py" micro "$results" --meta "$meta" --bench-json "$json" --callgrind-tsv "$tsv"

# ---- 3. demo ------------------------------------------------------------------------------
if (( run_demo )); then
  echo "== demo_inference"
  echo "demo_cmd=$(rel "$build")/bench/demo_inference" >> "$meta"
  "$build/bench/demo_inference" | tee "$tmp/demo.txt"
  python3 "$here/update_results.py" demo "$results" --meta "$meta" --demo-output "$tmp/demo.txt"
fi

echo "== wrote $(rel "$results") in $((SECONDS - started)) s"
