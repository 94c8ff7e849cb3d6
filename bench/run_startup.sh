#!/usr/bin/env bash
# bench/run_startup.sh: what a process's start and exit cost under each allocator
# preloaded (issue 41, programs nobody tuned on: a build or a shell script runs
# thousands of short processes). bench/programs/spawn.c spawns /bin/true N times a
# sample with LD_PRELOAD set, each waited for; ROUNDS samples per allocator, the order
# rotated every round; medians of the mean wall time of one process, its CPU time and its
# minor page faults (a page's first touch is most of a start's cost). Beside it, fork():
# bench/programs/forks.c, preloaded, forks N times a sample (a shell forks for every
# pipeline stage), each child exiting at once: the mean time of a fork and wait, its CPU
# time (the page tables fork copies are most of it), and the child's page faults (the
# pages the allocator's fork handlers write are copied).
# Rewrites the "startup" section of bench/RESULTS.md.
# Usage: bench/run_startup.sh [ROUNDS] [N]   (default 11 300)
# Environment: BUILD_DIR (default <repo>/build); BENCH_PREBUILT=1 (no build); BEFORE_LIB
# (another build's preload library: a column "replayalloc-before"); PROGRAM (default
# /bin/true; a path and its arguments, split at spaces, its output to /dev/null); RESULTS_FILE, RESULTS_SECTION (default bench/RESULTS.md, startup).
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-11}
n=${2:-300}
program=${PROGRAM:-/bin/true}
build_targets "$build" replayalloc_preload
pre=$(preload_library "$build")
require_file "$pre" "the preload library (cmake --build $build --target replayalloc_preload)"
[[ -z ${BEFORE_LIB:-} ]] || require_file "$BEFORE_LIB" "BEFORE_LIB: the preload library of another build"
names=(glibc) libs=(none)
for a in jemalloc tcmalloc mimalloc; do
  lib=$(allocator_library "$a")
  require_file "$lib" "$a (scripts/setup.sh installs it)"
  names+=("$a") libs+=("$lib")
done
names+=(replayalloc) libs+=("$pre")
[[ -z ${BEFORE_LIB:-} ]] || { names+=(replayalloc-before); libs+=("$BEFORE_LIB"); }
scratch_dir
# Every library a fresh copy in one directory: a process's start under the linker's own
# output of the preload library took ~30 us more than under a copy of it (the same bytes;
# bench/RESULTS.md, "Fork in a process of one thread"), which favoured BEFORE_LIB.
for i in "${!libs[@]}"; do
  [[ ${libs[$i]} == none ]] && continue
  mkdir -p "$tmp/libs/${names[$i]}"
  cp "${libs[$i]}" "$tmp/libs/${names[$i]}/"
  libs[$i]=$tmp/libs/${names[$i]}/$(basename "${libs[$i]}")
done
gcc -O2 -Wall -o "$tmp/spawn" "$root/bench/programs/spawn.c"
gcc -O2 -Wall -o "$tmp/forks" "$root/bench/programs/forks.c"
k=${#names[@]}
for r in $(seq 1 "$rounds"); do
  for j in $(seq 0 $((k - 1))); do
    i=$(((j + r) % k))
    lib=${libs[$i]}
    [[ $lib == none ]] && lib=
    echo "${names[$i]} $("$tmp/spawn" "${libs[$i]}" "$n" $program) $(env LD_PRELOAD="$lib" "$tmp/forks" "$n")"
  done
done > "$tmp/samples"
{
  echo "## Start-up: a process's start and exit under each allocator preloaded"
  echo
  echo "- $(utc_now), $(nproc) cores ($(cpu_model)), load before $(load_average); commit $(git -C "$root" rev-parse --short HEAD)."
  echo "- Command: \`${BEFORE_LIB:+BEFORE_LIB=$BEFORE_LIB }bench/run_startup.sh $rounds $n\` (\`$program\` spawned and waited $n times a sample, $rounds samples per allocator, the order rotated every round; bench/programs/spawn.c)."
  echo "- **µs a process**: the median over the samples of the mean wall time of one spawn and wait (range in brackets); **CPU µs**: of the mean CPU time (user + system) of one process, which the host's other work moves less; **faults**: the median of the mean minor page faults of one."
  echo "- **µs a fork**: bench/programs/forks.c preloaded, after 5,000 small allocations, forking $n times a sample, each child exiting at once: the median of the mean time of one fork and wait; **CPU µs**: of the mean CPU time of one fork and exit (the parent's and the child's); **child's faults**: of the children's mean minor page faults."
  echo
  python3 - "$tmp/samples" <<'PY'
import collections, statistics, sys
samples, faults, cpu = collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(list)
fork_us, fork_faults, fork_cpu = collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, us, f, c, fu, ff, fc = line.split()
    samples[name].append(float(us))
    faults[name].append(float(f))
    cpu[name].append(float(c))
    fork_us[name].append(float(fu))
    fork_faults[name].append(float(ff))
    fork_cpu[name].append(float(fc))
med = statistics.median
base, cpu_base = med(samples["glibc"]), med(cpu["glibc"])
fork_base, fork_cpu_base = med(fork_us["glibc"]), med(fork_cpu["glibc"])
best = min(med(samples[a]) for a in ("glibc", "jemalloc", "tcmalloc", "mimalloc") if a in samples)
print("| allocator | µs a process | ÷ glibc | ÷ best | CPU µs | ÷ glibc | faults | µs a fork | ÷ glibc | CPU µs | ÷ glibc | child's faults |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, v in samples.items():
    m, c = med(v), med(cpu[name])
    fm, fc = med(fork_us[name]), med(fork_cpu[name])
    print(f"| {name} | {m:.0f} ({min(v):.0f}-{max(v):.0f}) | {m / base:.2f} | {m / best:.2f} | {c:.0f} | {c / cpu_base:.2f} "
          f"| {med(faults[name]):.0f} | {fm:.0f} | {fm / fork_base:.2f} | {fc:.0f} | {fc / fork_cpu_base:.2f} | {med(fork_faults[name]):.0f} |")
PY
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "${RESULTS_FILE:-$results}" --name "${RESULTS_SECTION:-startup}" --body "$tmp/section"
