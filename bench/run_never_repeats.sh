#!/usr/bin/env bash
# bench/run_never_repeats.sh: where nothing repeats, replayalloc must cost no more than
# jemalloc alone (DESIGN invariant 8). Runs bench/micro/never_repeats.cc (requests of
# random blocks, never the same twice) under glibc, jemalloc, tcmalloc, mimalloc and
# replayalloc preloaded (one key marked per request, with and without setting aside;
# auto mode), each in its own process, the order rotated every round, and rewrites the
# "Never repeats" section of bench/RESULTS.md with the medians and the ratio to jemalloc.
# Usage: bench/run_never_repeats.sh [ROUNDS] [REQUESTS]   (default 5 rounds of 2000)
# Environment: BUILD_DIR (default <repo>/build).
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-5}
requests=${2:-2000}
cmake --build "$build" --target never_repeats replayalloc_preload > /dev/null
prog=$build/bench/never_repeats
pre=$(preload_library "$build")
names=(glibc jemalloc tcmalloc mimalloc replayalloc-explicit replayalloc-explicit-no-set-aside replayalloc-auto)
run_one() {  # name -> prints "cpu faults slab_hits iterations_set_aside plans"
  local out
  case $1 in
    glibc) out=$("$prog" "$requests") ;;
    jemalloc|tcmalloc|mimalloc) out=$(LD_PRELOAD=$(allocator_library "$1") "$prog" "$requests") ;;
    replayalloc-explicit) out=$(LD_PRELOAD=$pre REPLAYALLOC_VERBOSE=0 "$prog" "$requests" explicit) ;;
    replayalloc-explicit-no-set-aside) out=$(LD_PRELOAD=$pre REPLAYALLOC_VERBOSE=0 REPLAYALLOC_SET_ASIDE=0 "$prog" "$requests" explicit) ;;
    replayalloc-auto) out=$(LD_PRELOAD=$pre REPLAYALLOC_VERBOSE=0 "$prog" "$requests") ;;
  esac
  local cpu faults plans aside
  cpu=$(sed -n 's/^cpu_us_per_request //p' <<<"$out")
  faults=$(sed -n 's/^faults_per_request //p' <<<"$out")
  plans=$(sed -n 's/.*"plans":\([0-9]*\).*/\1/p' <<<"$out"); plans=${plans:--}
  aside=$(sed -n 's/.*"iterations_set_aside":\([0-9]*\).*/\1/p' <<<"$out"); aside=${aside:--}
  echo "$cpu $faults $plans $aside"
}
scratch_dir
for ((r = 0; r < rounds; ++r)); do
  n=${#names[@]}
  for ((k = 0; k < n; ++k)); do
    name=${names[$(((k + r) % n))]}
    run_one "$name" >> "$tmp/$name"
  done
done
je=$(cut -d' ' -f1 "$tmp/jemalloc" | median)
{
  echo "## Never repeats: the cost where nothing can be replayed"
  echo
  echo "$(utc_now), $(nproc) cores ($(cpu_model)), load before $(load_average)."
  echo "Command: \`bench/run_never_repeats.sh $rounds $requests\` ($rounds rounds of $requests requests, one process per allocator and round, order rotated)."
  echo "Each request: 20-60 blocks of 4 KiB-1 MiB, random sizes and lifetimes, one byte written per 4 KiB; never the same twice (\`bench/micro/never_repeats.cc\`)."
  echo "CPU time per request (user + system), median over the rounds, and its ratio to jemalloc alone (replayalloc's fallback); lower is better."
  echo
  echo "| allocator | CPU us / request | ratio to jemalloc | minor faults / request | plans made | iterations passed through (set aside) |"
  echo "|---|---|---|---|---|---|"
  for name in "${names[@]}"; do
    cpu=$(cut -d' ' -f1 "$tmp/$name" | median)
    faults=$(cut -d' ' -f2 "$tmp/$name" | median)
    plans=$(cut -d' ' -f3 "$tmp/$name" | sort | uniq | paste -sd/)
    aside=$(cut -d' ' -f4 "$tmp/$name" | sort | uniq | paste -sd/)
    printf '| %s | %.1f | %.3f | %.1f | %s | %s |\n' "$name" "$cpu" "$(awk -v a="$cpu" -v b="$je" 'BEGIN { print a / b }')" "$faults" "$plans" "$aside"
  done
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "$results" --name never-repeats --body "$tmp/section"
