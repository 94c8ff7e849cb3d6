#!/usr/bin/env bash
# bench/run_programs.sh: programs nobody tuned on (issue 41: "never worse than the best
# general-purpose allocator, measured where nothing repeats and on programs you did not
# tune on"): Perl, sqlite3, CPython, a shell script of short commands and g++ on
# workloads of their own
# (bench/programs/), each under glibc, jemalloc, tcmalloc, mimalloc and replayalloc
# preloaded (auto mode, its defaults), one process per program, allocator and round,
# the order rotated every round and reversed every other (bench/programs/measure.py).
# Outputs must agree.
# Rewrites the "programs" section of bench/RESULTS.md.
# Usage: bench/run_programs.sh [ROUNDS]   (default 7)
# Environment: BUILD_DIR (default <repo>/build); BENCH_PREBUILT=1 (no build); BEFORE_LIB
# (the preload library of another build: a column "replayalloc-before"); PROGRAMS_ONLY
# (a comma-separated subset of perl, sqlite, sqlite-8k, python, shell, g++, sort, awk, jq,
# git, clang, bc, cmake, node (Node.js), ld (this build's link command, from ninja), torch
# (Debian's python3-torch); those three left out, and said, where missing: the section then
# holds the subset's tables alone); RESULTS_FILE and RESULTS_SECTION (default
# bench/RESULTS.md, programs); COUNT=instructions (each program once under callgrind:
# instructions instead of the clock; section programs-counted; ROUNDS ignored).
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-7}
build_targets "$build" replayalloc_preload
pre=$(preload_library "$build")
for tool in perl sqlite3 g++ bc; do
  command -v "$tool" > /dev/null || die "$tool missing (scripts/setup.sh installs it)"
done
[[ -z ${BEFORE_LIB:-} ]] || require_file "$BEFORE_LIB" "BEFORE_LIB: the preload library of another build"
allocators=(glibc=-)
for a in jemalloc tcmalloc mimalloc; do
  lib=$(allocator_library "$a")
  require_file "$lib" "$a (scripts/setup.sh installs it)"
  allocators+=("$a=$lib")
done
require_file "$pre" "the preload library (cmake --build $build --target replayalloc_preload)"
allocators+=("replayalloc=$pre")
[[ -z ${BEFORE_LIB:-} ]] || allocators+=("replayalloc-before=$BEFORE_LIB")
scratch_dir
# Every library a fresh copy in one directory (as bench/run_startup.sh: a process's start
# under the linker's own output of the preload library took ~30 us more than under a copy).
for i in "${!allocators[@]}"; do
  name=${allocators[$i]%%=*} lib=${allocators[$i]#*=}
  [[ $lib == - ]] && continue
  mkdir -p "$tmp/libs/$name"
  cp "$lib" "$tmp/libs/$name/"
  allocators[$i]=$name=$tmp/libs/$name/$(basename "$lib")
done
python3 "$root/bench/programs/measure.py" "$rounds" "$tmp/tables" "${allocators[@]}"
if [[ ${COUNT:-} == instructions ]]; then
  {
    echo "## Programs nobody tuned on, counted: instructions under every allocator${PROGRAMS_ONLY:+ ($PROGRAMS_ONLY)}"
    echo
    echo "- $(utc_now), $(nproc) cores ($(cpu_model)), load before $(load_average); commit $(git -C "$root" rev-parse --short HEAD)."
    echo "- Command: \`COUNT=instructions ${BEFORE_LIB:+BEFORE_LIB=$BEFORE_LIB }${PROGRAMS_ONLY:+PROGRAMS_ONLY=$PROGRAMS_ONLY }bench/run_programs.sh\` (each program once per allocator under \`valgrind --tool=callgrind --trace-children=yes\`, the instructions of all its processes summed; bench/programs/measure.py)."
    echo "- Each allocator preloaded as in the timed tables (replayalloc: its defaults, auto mode). Instructions are deterministic where a shared host's clock is not; they do not show what costs time beside them (cache misses, page faults, system calls), which the timed tables do. The shell script is left out unless named (its ~700 processes each start valgrind)."
    echo
    cat "$tmp/tables"
    echo
  } > "$tmp/section"
  cat "$tmp/section"
  update_results text "${RESULTS_FILE:-$results}" --name "${RESULTS_SECTION:-programs-counted}" --body "$tmp/section"
  exit 0
fi
{
  if [[ -n ${PROGRAMS_ONLY:-} ]]; then
    echo "## Programs nobody tuned on ($PROGRAMS_ONLY) under every allocator"
  else
    echo "## Programs nobody tuned on: Perl, SQLite, CPython, a shell script and g++ under every allocator"
  fi
  echo
  echo "- $(utc_now), $(nproc) cores ($(cpu_model)), load before $(load_average); commit $(git -C "$root" rev-parse --short HEAD)."
  echo "- Command: \`${BEFORE_LIB:+BEFORE_LIB=$BEFORE_LIB }${PROGRAMS_ONLY:+PROGRAMS_ONLY=$PROGRAMS_ONLY }bench/run_programs.sh $rounds\` ($rounds rounds, one process per program, allocator and round, the order rotated each round and reversed every other; bench/programs/)."
  echo "- Each allocator preloaded into an unmodified program (replayalloc: \`libreplayalloc_preload.so\`, its defaults, auto mode${BEFORE_LIB:+; replayalloc-before: \`$BEFORE_LIB\`, another build, with its defaults}). Nothing in these programs repeats as an inference does: what they measure is the fallback (the front cache in front of jemalloc) and auto mode's watcher."
  echo "- From each run's rusage: **CPU s** user + system, **faults** minor page faults, **peak RSS**; medians over the rounds. **÷ best**: over the lowest median CPU of glibc, jemalloc, tcmalloc and mimalloc; **RSS ÷ leanest** likewise. Goal (issue 41): replayalloc at most 1.03x the best's CPU and never above glibc's."
  echo
  cat "$tmp/tables"
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "${RESULTS_FILE:-$results}" --name "${RESULTS_SECTION:-programs}" --body "$tmp/section"
