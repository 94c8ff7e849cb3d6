#!/usr/bin/env bash
# bench/run_never_repeats.sh: where nothing repeats, replayalloc must cost no more than
# jemalloc alone (invariant 8, allocator/DESIGN.md). Runs bench/micro/never_repeats.cc
# (requests of random blocks, never the same twice) under glibc, jemalloc, tcmalloc,
# mimalloc and replayalloc preloaded (one key marked per request, with and without
# setting aside; auto mode), each in its own process, the order rotated every round, and
# rewrites the "Never repeats" section of bench/RESULTS.md with the medians and the
# ratio to jemalloc.
# Usage: bench/run_never_repeats.sh [ROUNDS] [REQUESTS]   (default 5 rounds of 2000)
# Environment: BUILD_DIR (default <repo>/build); BEFORE_LIB (the preload library of
# another build: replayalloc-auto-before runs it, with its own settings, instead of
# this build's library with BEFORE_CONF).
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
[[ -z ${BEFORE_LIB:-} ]] || require_file "$BEFORE_LIB" "BEFORE_LIB: the preload library of another build"
names=(glibc jemalloc tcmalloc mimalloc replayalloc-explicit replayalloc-explicit-no-set-aside replayalloc-auto
  replayalloc-auto-before)
general=(glibc jemalloc tcmalloc mimalloc)
# replayalloc-auto-before: the same library with other jemalloc settings for its fallback:
# BEFORE_CONF (MALLOC_CONF's syntax), by default those before Note [The fallback's
# thread cache] (jemalloc's default thread cache, 32 KiB).
before_conf=${BEFORE_CONF:-oversize_threshold:0,tcache_max:32768}
setup() {  # name -> envs (assignments for env) and args (the program's), of its run
  envs=() args=("$requests")
  case $1 in
    glibc) ;;
    jemalloc|tcmalloc|mimalloc) envs=("LD_PRELOAD=$(allocator_library "$1")") ;;
    replayalloc-explicit) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0) args+=(explicit) ;;
    replayalloc-explicit-no-set-aside)
      envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0 REPLAYALLOC_SET_ASIDE=0) args+=(explicit) ;;
    replayalloc-auto) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0) ;;
    replayalloc-auto-before)
      if [[ -n ${BEFORE_LIB:-} ]]; then envs=("LD_PRELOAD=$BEFORE_LIB" REPLAYALLOC_VERBOSE=0)
      else envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0 "MALLOC_CONF=$before_conf"); fi ;;
  esac
}
run_one() {  # name -> prints "cpu faults plans iterations_set_aside peak_rss_kib"
  local out cpu faults plans aside rss
  setup "$1"
  out=$(env "${envs[@]}" "$prog" "${args[@]}")
  cpu=$(sed -n 's/^cpu_us_per_request //p' <<<"$out")
  faults=$(sed -n 's/^faults_per_request //p' <<<"$out")
  plans=$(sed -n 's/.*"plans":\([0-9]*\).*/\1/p' <<<"$out"); plans=${plans:--}
  aside=$(sed -n 's/.*"iterations_set_aside":\([0-9]*\).*/\1/p' <<<"$out"); aside=${aside:--}
  rss=$(sed -n 's/^peak_rss_kib //p' <<<"$out")
  echo "$cpu $faults $plans $aside $rss"
}
# User-space instructions of one run under callgrind: deterministic (the same binaries
# give the same count within 0.1% whatever the machine's load), so it shows what time
# on a shared machine cannot; the kernel's work (glibc's mmap and page faults) is not
# in it. "-" without valgrind.
instructions() {  # name
  command -v valgrind > /dev/null || { echo -; return; }
  setup "$1"
  env "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$prog" "${args[@]}" 2>&1 > /dev/null |
    sed -n 's/^==[0-9]*== I *refs: *//p' | tr -d ,
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
lean=$(for g in "${general[@]}"; do cut -d' ' -f5 "$tmp/$g" | median; done | sort -g | head -1)
if [[ -n ${BEFORE_LIB:-} ]]; then before_what="the library $BEFORE_LIB"
else before_what="with the fallback's jemalloc settings before a change (\`MALLOC_CONF=$before_conf\`)"; fi
best=$(for g in "${general[@]}"; do cut -d' ' -f1 "$tmp/$g" | median; done | sort -g | head -1)
for name in "${names[@]}"; do instructions "$name" > "$tmp/$name.ir"; done
je_ir=$(cat "$tmp/jemalloc.ir")
{
  echo "## Never repeats: the cost where nothing can be replayed"
  echo
  echo "$(utc_now), $(nproc) cores ($(cpu_model)), load before $(load_average)."
  echo "Command: \`${BEFORE_LIB:+BEFORE_LIB=$BEFORE_LIB }bench/run_never_repeats.sh $rounds $requests\` ($rounds rounds of $requests requests, one process per allocator and round, order rotated; then one run of each under callgrind)."
  echo "Each request: 20-60 blocks of 4 KiB-1 MiB, random sizes and lifetimes, one byte written per 4 KiB; never the same twice (\`bench/micro/never_repeats.cc\`)."
  echo "CPU time per request (user + system), median over the rounds, and its ratio to jemalloc alone (replayalloc's fallback); **paired**: each round's CPU time over the same round's jemalloc run, median and range over the rounds (runs of the same binaries differ by a few percent here, so a difference within that range is not resolved). **Instructions**: user-space instructions of the whole run under callgrind, deterministic, over jemalloc's (the kernel's work, most of glibc's cost, is not in them). **÷ best**: CPU over the lowest median of glibc, jemalloc, tcmalloc and mimalloc (goal, issue 41: at most 1.03). replayalloc-auto-before: auto mode, $before_what. **Peak RSS**: the process's (getrusage), median, over the leanest general-purpose allocator's. Lower is better."
  echo
  echo "| allocator | CPU us / request | ratio to jemalloc | ÷ best | paired ratio (range) | instructions ÷ jemalloc | minor faults / request | peak RSS MiB (÷ leanest) | plans made | iterations passed through (set aside) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for name in "${names[@]}"; do
    cpu=$(cut -d' ' -f1 "$tmp/$name" | median)
    faults=$(cut -d' ' -f2 "$tmp/$name" | median)
    plans=$(cut -d' ' -f3 "$tmp/$name" | sort | uniq | paste -sd/)
    aside=$(cut -d' ' -f4 "$tmp/$name" | sort | uniq | paste -sd/)
    rss=$(cut -d' ' -f5 "$tmp/$name" | median)
    rss=$(awk -v a="$rss" -v b="$lean" 'BEGIN { printf "%.1f (%.2f)", a / 1024, a / b }')
    paste -d' ' "$tmp/$name" "$tmp/jemalloc" | awk '{ print $1 / $6 }' > "$tmp/$name.paired"
    paired=$(printf '%.3f (%.3f-%.3f)' "$(median < "$tmp/$name.paired")" "$(sort -g "$tmp/$name.paired" | head -1)" \
      "$(sort -g "$tmp/$name.paired" | tail -1)")
    ir=$(cat "$tmp/$name.ir")
    if [[ $ir =~ ^[0-9]+$ && $je_ir =~ ^[0-9]+$ ]]; then
      ir=$(awk -v a="$ir" -v b="$je_ir" 'BEGIN { printf "%.3f (%.1f M)", a / b, a / 1e6 }')
    fi
    printf '| %s | %.1f | %.3f | %.3f | %s | %s | %.1f | %s | %s | %s |\n' "$name" "$cpu" \
      "$(awk -v a="$cpu" -v b="$je" 'BEGIN { print a / b }')" "$(awk -v a="$cpu" -v b="$best" 'BEGIN { print a / b }')" \
      "$paired" "$ir" "$faults" "$rss" "$plans" "$aside"
  done
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "$results" --name never-repeats --body "$tmp/section"
