#!/usr/bin/env bash
# bench/run_bursts.sh: bursts of large blocks allocated and then all freed, again and
# again (bench/micro/bursts.cc; Note [The fallback's dirty extents] in
# allocator/backend/jemalloc_backend.cc), under glibc, jemalloc, tcmalloc, mimalloc and
# replayalloc preloaded (its default auto mode; and replayalloc-before, the same library
# with BEFORE_ENV, by default jemalloc's own lg_extent_max_active_fit of 6), each in its
# own process, the order rotated every round. CPU per pair and peak RSS are medians;
# checksums must agree. Rewrites the "bursts" section of bench/RESULTS.md.
# Usage: bench/run_bursts.sh [ROUNDS]   (default 5)
# Environment: BUILD_DIR (default <repo>/build); BEFORE_ENV (VAR=VALUE ...), RESULTS_FILE.
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-5}
build_targets "$build" bursts replayalloc_preload
prog=$build/bench/bursts
pre=$(preload_library "$build")
before_env=${BEFORE_ENV:-MALLOC_CONF=lg_extent_max_active_fit:6}
# COUNT SIZE ROUNDS: 200 MB of 20 KB blocks (the front cache's classes), 200 MB of
# 100 KB blocks (jemalloc's thread cache), 320 MB of 8 KiB, 100 MB of 1 KiB.
cases=("10000 20000 20" "2000 100000 20" "40000 8192 10" "100000 1024 10")
names=(glibc jemalloc tcmalloc mimalloc replayalloc replayalloc-before)
general=(glibc jemalloc tcmalloc mimalloc)
setup() {  # name -> envs
  envs=()
  case $1 in
    glibc) ;;
    jemalloc|tcmalloc|mimalloc) envs=("LD_PRELOAD=$(allocator_library "$1")") ;;
    replayalloc) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0) ;;
    replayalloc-before) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0)
      read -r -a more <<<"$before_env"; envs+=("${more[@]}") ;;
  esac
}
scratch_dir
for ((r = 0; r < rounds; ++r)); do
  for c in "${!cases[@]}"; do
    n=${#names[@]}
    for ((k = 0; k < n; ++k)); do
      name=${names[$(((k + r) % n))]}
      setup "$name"
      # shellcheck disable=SC2086  # the case's three numbers
      out=$(env "${envs[@]}" /usr/bin/time -f 'maxrss_kib %M' "$prog" ${cases[$c]} 2>&1)
      echo "$(sed -n 's/^cpu_us_per_pair //p' <<<"$out") $(sed -n 's/^maxrss_kib //p' <<<"$out") $(sed -n 's/^faults_per_round //p' <<<"$out") $(sed -n 's/^checksum //p' <<<"$out") $(sed -n 's/^later_rounds_ns_per_malloc //p' <<<"$out") $(sed -n 's/^later_rounds_ns_per_free //p' <<<"$out")" \
        >> "$tmp/$c.$name"
    done
  done
done
{
  echo "## Bursts: large blocks allocated and freed together"
  echo
  echo "$(utc_now), $(nproc) cores ($(cpu_model)), load before $(load_average); commit $(git -C "$root" rev-parse --short HEAD)."
  echo "Command: \`${BEFORE_ENV:+BEFORE_ENV=\"$BEFORE_ENV\" }bench/run_bursts.sh $rounds\` ($rounds rounds, one process per case, allocator and round, order rotated). \`bench/micro/bursts.cc COUNT SIZE ROUNDS\`: each round allocates COUNT blocks of SIZE bytes, writes the first byte of each, and frees them all. **CPU**: user + system microseconds per malloc+free pair (the page faults' included), median; **÷ best**: over the lowest median of glibc, jemalloc, tcmalloc and mimalloc; **faults**: page faults per round, median; **peak RSS**: median; **malloc / free ns, later rounds**: the thread's CPU nanoseconds per malloc and per free in the rounds after the first (their pages made), medians. replayalloc-before: the same library with \`$before_env\`."
  echo
  echo "| case | allocator | CPU us/pair | ÷ best | faults/round | peak RSS MiB | RSS ÷ leanest | malloc / free ns, later rounds | checksum agrees |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---|"
  for c in "${!cases[@]}"; do
    read -r count size _ <<<"${cases[$c]}"
    want=$(cut -d' ' -f4 "$tmp/$c.glibc" | sort -u | paste -sd/)
    best=$(for g in "${general[@]}"; do cut -d' ' -f1 "$tmp/$c.$g" | median; done | sort -g | head -1)
    leanest=$(for g in "${general[@]}"; do cut -d' ' -f2 "$tmp/$c.$g" | median; done | sort -g | head -1)
    for name in "${names[@]}"; do
      cpu=$(cut -d' ' -f1 "$tmp/$c.$name" | median)
      rss=$(cut -d' ' -f2 "$tmp/$c.$name" | median)
      faults=$(cut -d' ' -f3 "$tmp/$c.$name" | median)
      sums=$(cut -d' ' -f4 "$tmp/$c.$name" | sort -u | paste -sd/)
      later=$(printf '%.1f / %.1f' "$(cut -d' ' -f5 "$tmp/$c.$name" | median)" "$(cut -d' ' -f6 "$tmp/$c.$name" | median)")
      printf '| %s x %s B | %s | %.3f | %.2f | %.0f | %.1f | %.2f | %s | %s |\n' "$count" "$size" "$name" "$cpu" \
        "$(awk -v a="$cpu" -v b="$best" 'BEGIN { print a / b }')" "$faults" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" \
        "$(awk -v a="$rss" -v b="$leanest" 'BEGIN { print a / b }')" "$later" "$([ "$sums" = "$want" ] && echo yes || echo "NO ($sums vs $want)")"
    done
  done
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "${RESULTS_FILE:-$results}" --name bursts --body "$tmp/section"
