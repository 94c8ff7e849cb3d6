#!/usr/bin/env bash
# bench/run_contention.sh: the allocator alone under many threads (issue 15), side by
# side: bench/micro/contention.cc (an inference-shaped stream of 64 KiB-16 MiB blocks,
# 97 allocations per inference, no compute) at T threads under glibc, jemalloc,
# tcmalloc, mimalloc and replayalloc preloaded (auto mode; explicit iterations of one
# key shared by all threads), one process per allocator, T and round, the order
# rotated every round; rewrites the "contention" section of bench/RESULTS.md with the
# medians and the ratio to the best general-purpose allocator of each T.
# Usage: bench/run_contention.sh [ROUNDS] [THREADS...]   (default 3 rounds; T = 1 2 8 32)
# Each run makes about 160 timed inferences in all (160 / T per thread), after 10
# untimed ones per thread. Environment: BUILD_DIR (default <repo>/build); BENCH_PREBUILT=1
# (no build: BUILD_DIR holds the binaries), RESULTS_FILE and RESULTS_SECTION (default
# bench/RESULTS.md, contention).
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-3}
shift || true
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2 8 32)
build_targets "$build" contention replayalloc_preload
prog=$build/bench/contention
pre=$(preload_library "$build")
names=(glibc jemalloc tcmalloc mimalloc replay-auto replay-explicit)
general=(glibc jemalloc tcmalloc mimalloc)
run_one() {  # name threads -> "inferences_per_s cpu_us faults"
  local n=$(( 160 / $2 )) out
  (( n >= 2 )) || n=2
  case $1 in
    glibc) out=$("$prog" "$2" "$n") ;;
    jemalloc|tcmalloc|mimalloc) out=$(LD_PRELOAD=$(allocator_library "$1") "$prog" "$2" "$n") ;;
    replay-auto) out=$(LD_PRELOAD=$pre REPLAYALLOC_VERBOSE=0 "$prog" "$2" "$n") ;;
    replay-explicit) out=$(LD_PRELOAD=$pre REPLAYALLOC_VERBOSE=0 "$prog" "$2" "$n" explicit) ;;
  esac
  echo "$(sed -n 's/^inferences_per_s //p' <<<"$out") $(sed -n 's/^cpu_us_per_inference //p' <<<"$out") $(sed -n 's/^faults_per_inference //p' <<<"$out")"
}
scratch_dir
load_before=$(load_average)
for ((r = 0; r < rounds; ++r)); do
  for t in "${threads[@]}"; do
    n=${#names[@]}
    for ((k = 0; k < n; ++k)); do
      name=${names[$(((k + r) % n))]}
      run_one "$name" "$t" >> "$tmp/$name.$t"
    done
  done
done
{
  echo "## Contention: the allocator alone under many threads"
  echo
  echo "$(utc_now), $(nproc) cores ($(cpu_model)), load before $load_before, after $(load_average); commit $(source_commit)."
  echo "Command: \`bench/run_contention.sh $rounds ${threads[*]}\` ($rounds rounds, one process per allocator, T and round, order rotated)."
  echo "What runs: \`bench/micro/contention.cc\`: T threads, each 10 untimed then 160/T timed inferences of one fixed stream (24 layers: an activation of 64 KiB-4 MiB, a workspace of 256 KiB-16 MiB and two 64 KiB temporaries each; one byte written per 4 KiB page; no compute), started together. replay-auto: the preload library's default; replay-explicit: every inference an iteration of one key all threads share."
  echo "Inferences per second (all threads, wall time), median over the rounds; ÷best: against the best general-purpose allocator at that T (higher is better); CPU: the process's user + system microseconds per inference; faults: minor page faults per inference. This machine has $(nproc) cores: T above that measures the allocators' behaviour under oversubscription, not parallel speed-up (the many-core study is bench/gpu/run_manycore.sh)."
  echo
  echo "| T | allocator | inferences/s | ÷best | CPU us / inference | faults / inference |"
  echo "|---|---|---:|---:|---:|---:|"
  for t in "${threads[@]}"; do
    best=0
    for name in "${general[@]}"; do
      m=$(cut -d' ' -f1 "$tmp/$name.$t" | median)
      best=$(awk -v a="$m" -v b="$best" 'BEGIN { print (a > b) ? a : b }')
    done
    for name in "${names[@]}"; do
      thr=$(cut -d' ' -f1 "$tmp/$name.$t" | median)
      printf '| %s | %s | %.1f | %.2f | %.0f | %.1f |\n' "$t" "$name" "$thr" \
        "$(awk -v a="$thr" -v b="$best" 'BEGIN { print a / b }')" \
        "$(cut -d' ' -f2 "$tmp/$name.$t" | median)" "$(cut -d' ' -f3 "$tmp/$name.$t" | median)"
    done
  done
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "${RESULTS_FILE:-$results}" --name "${RESULTS_SECTION:-contention}" --body "$tmp/section"
