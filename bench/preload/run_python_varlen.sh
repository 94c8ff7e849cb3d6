#!/usr/bin/env bash
# An unmodified Python loop serving a BERT-like encoder (2 layers, hidden 256) at a
# random sequence length per request (16..256; tests/preload/auto_varlen.py, Debian's
# python3) under glibc, jemalloc, tcmalloc, mimalloc and replayalloc (LD_PRELOAD, auto
# mode, nothing marked), each in its own process, the order rotated every round.
# Medians over the rounds of the serving thread's CPU time for the requests after the warm-up, its ratio to
# jemalloc (replayalloc's fallback) and to the best general-purpose allocator, minor
# faults per request and peak RSS; every run's output digest must equal glibc's.
# Rewrites the "preload-python-varlen" section of bench/RESULTS.md.
# Usage: bench/preload/run_python_varlen.sh [ROUNDS] [REQUESTS] [WARMUP]   (default 5 300 100)
# Environment: BUILD_DIR (default <repo>/build).
set -euo pipefail
export LC_ALL=C
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-5}
requests=${2:-300}
warmup=${3:-100}
py=$(torch_python) || exit 1
cmake --build "$build" --target replayalloc_preload > /dev/null
pre=$(preload_library "$build")
prog=$root/tests/preload/auto_varlen.py
names=(glibc jemalloc tcmalloc mimalloc replayalloc)
scratch_dir
run_one() {  # name -> "seconds faults_per_request rss_mib digest slab_share"
  local lib="" out
  case $1 in
    jemalloc|tcmalloc|mimalloc) lib=$(allocator_library "$1") ;;
    replayalloc) lib=$pre ;;
  esac
  out=$(LD_PRELOAD=$lib REPLAYALLOC_VERBOSE=0 /usr/bin/time -f "rss_kib %M" "$py" "$prog" "$requests" "$warmup" 2>&1)
  local secs faults rss digest share
  secs=$(sed -n 's/^timed [0-9.]* s, cpu \([0-9.]*\) s, .*/\1/p' <<<"$out")
  faults=$(sed -n 's/^timed .* s, \([0-9]*\) minor.*/\1/p' <<<"$out")
  rss=$(sed -n 's/^rss_kib //p' <<<"$out")
  digest=$(sed -n 's/^digest //p' <<<"$out")
  share=$(sed -n 's/^slab share //p' <<<"$out")
  [ -n "$secs" ] || { echo "run failed ($1): $out" >&2; exit 1; }
  echo "$secs $(awk -v f="$faults" -v n="$((requests - warmup))" 'BEGIN { printf "%.1f", f / n }') $((rss / 1024)) $digest ${share:--}"
}
for ((r = 0; r < rounds; ++r)); do
  n=${#names[@]}
  for ((k = 0; k < n; ++k)); do
    name=${names[$(((k + r) % n))]}
    run_one "$name" >> "$tmp/$name"
  done
done
ref=$(cut -d' ' -f4 "$tmp/glibc" | head -n 1)
identical=yes
for name in "${names[@]}"; do
  cut -d' ' -f4 "$tmp/$name" | grep -qv "^$ref\$" && identical=no
done
je=$(cut -d' ' -f1 "$tmp/jemalloc" | median)
best=""; best_name=""
for name in glibc jemalloc tcmalloc mimalloc; do
  m=$(cut -d' ' -f1 "$tmp/$name" | median)
  if [ -z "$best" ] || awk -v a="$m" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$m; best_name=$name; fi
done
spread() {  # (max - min) / median of column 1
  cut -d' ' -f1 "$1" | sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.0f%%", 100 * (a[NR] - a[1]) / m }'
}
{
  echo "## Preload: an unmodified Python loop whose requests change shape"
  echo
  echo "$(utc_now), $(nproc) cores ($(cpu_model)), load before $(load_average)."
  echo "Command: \`bench/preload/run_python_varlen.sh $rounds $requests $warmup\` ($rounds rounds, one process per allocator and round, order rotated)."
  echo "What runs: \`tests/preload/auto_varlen.py\`: a BERT-like encoder (2 layers, hidden 256, 4 heads, random weights, one intra-op thread) through Debian's python3 and torch 1.13, $requests requests of a random sequence length 16..256 (seed 7), timed after $warmup of warm-up; replayalloc in its preload default (auto mode, 4 KiB minimum), nothing marked. PyTorch's kernels take more workspaces past lengths 64 and 125, so the allocation sequence itself changes with the shape."
  echo "CPU time of the serving thread (user + system, \`time.thread_time()\`; the machine is shared, and wall time swung by up to 40% between runs) of the $((requests - warmup)) timed requests, median over the rounds (lower is better), its ratio to jemalloc alone (replayalloc's fallback) and to the best general-purpose allocator of this run ($best_name); spread = (max - min) / median."
  echo
  echo "| allocator | CPU seconds | ratio to jemalloc | ratio to best ($best_name) | spread | minor faults / request | peak RSS MiB | from a slab (after warm-up) |"
  echo "|---|---|---|---|---|---|---|---|"
  for name in "${names[@]}"; do
    s=$(cut -d' ' -f1 "$tmp/$name" | median)
    printf '| %s | %.3f | %.3f | %.3f | %s | %s | %s | %s |\n' "$name" "$s" \
      "$(awk -v a="$s" -v b="$je" 'BEGIN { print a / b }')" "$(awk -v a="$s" -v b="$best" 'BEGIN { print a / b }')" \
      "$(spread "$tmp/$name")" "$(cut -d' ' -f2 "$tmp/$name" | median)" "$(cut -d' ' -f3 "$tmp/$name" | median)" \
      "$(cut -d' ' -f5 "$tmp/$name" | sort | uniq | paste -sd/)"
  done
  echo
  echo "Outputs identical to glibc's in every run: $identical."
  echo
} > "$tmp/section"
cat "$tmp/section"
[ "$identical" = yes ] || { echo "outputs differ" >&2; exit 1; }
update_results text "$results" --name preload-python-varlen --body "$tmp/section"
