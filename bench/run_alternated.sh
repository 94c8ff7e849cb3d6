#!/usr/bin/env bash
# bench/run_alternated.sh: one threaded_stress program under two or more preloaded
# libraries in turn, round after round, and the medians of each: the way to tell a
# change of a few percent from this shared machine's drift, which moves every library
# of a round alike (run_threaded_stress.sh runs each program's allocators once a round
# too, but at 8 rounds its spread is ~3%).
#
# Usage: bench/run_alternated.sh ROUNDS PROGRAM LIBRARY...
#   PROGRAM: larson, rptest, prodcons, small or aligned (bench/micro/threaded_stress.cc)
#   LIBRARY: a path to a preload library (another build's libreplayalloc_preload.so), or
#            one of glibc, jemalloc, tcmalloc, mimalloc, replayalloc (this build's)
# Environment: BUILD (default build), THREADS (8), OPS (200000).
# Prints, per library, the median of the program's own cpu_s, its ratio to the first
# library's, and the medians of its page faults (/usr/bin/time) and peak RSS. Nothing is
# written to RESULTS.md: quote the table by hand, with the command.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

(($# >= 3)) || die "usage: bench/run_alternated.sh ROUNDS PROGRAM LIBRARY..."
rounds=$1 program=$2
shift 2
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive count, not '$rounds'"
build=${BUILD:-$here/../build}
stress=$build/bench/threaded_stress
require_file "$stress" "build the default target first"
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing (scripts/setup.sh installs it)"

names=() paths=()
for lib in "$@"; do
  case $lib in
    glibc) path='' ;;
    jemalloc | tcmalloc | mimalloc) path=$(allocator_library "$lib") ;;
    replayalloc) path=$(preload_library "$build") ;;
    *) path=$lib ;;
  esac
  [[ -z $path ]] || require_file "$path" "library '$lib'"
  names+=("$lib") paths+=("$path")
done

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for i in "${!names[@]}"; do
    out=$( { /usr/bin/time -f "TIME %R" env ${paths[i]:+"LD_PRELOAD=${paths[i]}"} \
      "$stress" "$program" "${THREADS:-8}" "${OPS:-200000}"; } 2>&1 < /dev/null) ||
      die "${names[i]}: threaded_stress $program failed: $out"
    awk -v n="$i" '/^cpu_s/ { c = $2 } /^maxrss_kib/ { m = $2 } /^TIME/ { f = $2 }
                   END { print n, c, m, f }' <<< "$out" >> "$raw"
  done
done

echo "| library | rounds | CPU s | ÷ first | faults | peak RSS MiB |"
echo "|---|---:|---:|---:|---:|---:|"
first=''
for i in "${!names[@]}"; do
  col() { awk -v n="$i" -v c="$1" '$1 == n { print $c }' "$raw" | median; }
  cpu=$(col 2)
  first=${first:-$cpu}
  printf '| %s | %d | %.4f | %.3f | %.0f | %.1f |\n' "${names[i]}" "$rounds" "$cpu" \
    "$(awk -v a="$cpu" -v b="$first" 'BEGIN { print a / b }')" "$(col 4)" "$(awk -v k="$(col 3)" 'BEGIN { print k / 1024 }')"
done
