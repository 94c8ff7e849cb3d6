#!/usr/bin/env bash
# bench/run_threaded_stress.sh: auto mode where nothing repeats, on the multi-threaded
# stress programs of classic allocator suites (issue 34, part 3; invariant 8 of
# allocator/DESIGN.md): bench/micro/threaded_stress.cc's larson (short-lived threads
# inheriting each other's blocks), rptest (batches freed by another thread), prodcons
# (producer/consumer pairs), small (a small-object loop) and aligned (posix_memalign(64),
# as libtorch's and ONNX Runtime's tensors), under glibc, jemalloc,
# tcmalloc, mimalloc and replayalloc preloaded (auto mode, its default; and
# REPLAYALLOC_MODE=off: the interposition alone), each in its own process, the order
# rotated every round; then one run of each under callgrind (user-space instructions,
# deterministic up to the threads' interleaving, about 1%). Checksums must agree.
# Rewrites the "threaded-stress" section of bench/RESULTS.md.
# Usage: bench/run_threaded_stress.sh [ROUNDS] [THREADS] [OPS]   (default 5 2 400000)
# Environment: BUILD_DIR (default <repo>/build); BENCH_PREBUILT=1 (no build: BUILD_DIR
# holds the binaries), RESULTS_FILE and RESULTS_SECTION (default bench/RESULTS.md, threaded-stress).
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-5}
threads=${2:-2}
ops=${3:-400000}
build_targets "$build" threaded_stress replayalloc_preload
prog=$build/bench/threaded_stress
pre=$(preload_library "$build")
[[ -z ${BEFORE_LIB:-} ]] || require_file "$BEFORE_LIB" "BEFORE_LIB: the preload library of another build"
kinds=(larson rptest prodcons small aligned)
names=(glibc jemalloc tcmalloc mimalloc replayalloc-auto replayalloc-off replayalloc-before)
general=(glibc jemalloc tcmalloc mimalloc)
# replayalloc-before: the same library with other jemalloc settings for its fallback:
# BEFORE_CONF (MALLOC_CONF's syntax), by default those before Note [The fallback's
# thread cache] (jemalloc's default thread cache, 32 KiB).
# BEFORE_ENV (VAR=VALUE ..., e.g. REPLAYALLOC_FRONT_CACHE=0), when set, gives
# replayalloc-before those variables instead of BEFORE_CONF. BEFORE_LIB (the preload
# library of another build, e.g. of an earlier commit), when set, is replayalloc-before's
# library, with its own defaults (and BEFORE_ENV's variables, if set).
before_conf=${BEFORE_CONF:-oversize_threshold:0,tcache_max:32768}
setup() {  # name -> envs
  envs=()
  case $1 in
    glibc) ;;
    jemalloc|tcmalloc|mimalloc) envs=("LD_PRELOAD=$(allocator_library "$1")") ;;
    replayalloc-auto) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0) ;;
    replayalloc-off) envs=("LD_PRELOAD=$pre" REPLAYALLOC_VERBOSE=0 REPLAYALLOC_MODE=off) ;;
    replayalloc-before) envs=("LD_PRELOAD=${BEFORE_LIB:-$pre}" REPLAYALLOC_VERBOSE=0)
      if [[ -n ${BEFORE_ENV:-} ]]; then read -r -a more <<<"$BEFORE_ENV"; envs+=("${more[@]}");
      elif [[ -z ${BEFORE_LIB:-} ]]; then envs+=("MALLOC_CONF=$before_conf"); fi ;;
  esac
}
scratch_dir
for ((r = 0; r < rounds; ++r)); do
  for kind in "${kinds[@]}"; do
    n=${#names[@]}
    for ((k = 0; k < n; ++k)); do
      name=${names[$(((k + r) % n))]}
      setup "$name"
      out=$(env "${envs[@]}" "$prog" "$kind" "$threads" "$ops")
      echo "$(sed -n 's/^cpu_s //p' <<<"$out") $(sed -n 's/^maxrss_kib //p' <<<"$out") $(sed -n 's/^checksum //p' <<<"$out")" \
        >> "$tmp/$kind.$name"
    done
  done
done
instructions() {  # kind name
  command -v valgrind > /dev/null || { echo -; return; }
  setup "$2"
  env "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$prog" "$1" "$threads" "$((ops / 2))" 2>&1 > /dev/null |
    sed -n 's/^==[0-9]*== I *refs: *//p' | tr -d ,
}
for kind in "${kinds[@]}"; do
  for name in "${names[@]}"; do instructions "$kind" "$name" > "$tmp/$kind.$name.ir"; done
done
if [[ -n ${BEFORE_LIB:-} ]]; then
  before_what="the library $BEFORE_LIB${BEFORE_ENV:+ with $BEFORE_ENV}"
else
  before_what=${BEFORE_ENV:-MALLOC_CONF=$before_conf}
fi
{
  if [[ ${RESULTS_SECTION:-threaded-stress} == threaded-stress ]]; then
    echo "## Threaded stress: auto mode where nothing repeats, many threads"
  else
    echo "## Threaded stress: auto mode where nothing repeats, $threads threads on $(nproc) cores"
  fi
  echo
  echo "$(utc_now), $(nproc) cores ($(cpu_model)), load before $(load_average); commit $(git -C "$root" rev-parse --short HEAD)."
  echo "Command: \`${BEFORE_LIB:+BEFORE_LIB=$BEFORE_LIB }${BEFORE_ENV:+BEFORE_ENV=$BEFORE_ENV }bench/run_threaded_stress.sh $rounds $threads $ops\` ($rounds rounds, one process per program, allocator and round, order rotated; then one run of each under callgrind at half the operations)."
  echo "Programs (\`bench/micro/threaded_stress.cc\`, $threads threads, $ops operations per thread, sizes log-uniform 16 B-64 KiB, so a third of them at or above REPLAYALLOC_MIN_SIZE and seen by auto mode's watcher): **larson** (each round of 10,000 operations run by new threads that take over their predecessors' blocks), **rptest** (batches of 64 freed by the next thread), **prodcons** (producer/consumer pairs through a queue), **small** (16-256 B blocks in a ring, one thread each), **aligned** (posix_memalign(64) of the same sizes in a window of 256 per thread, one replaced a step: libtorch's and ONNX Runtime's tensors are all so aligned)."
  echo "**CPU**: user + system seconds, median over the rounds, over jemalloc's (replayalloc's fallback). **Instructions**: callgrind's user-space instructions over jemalloc's (deterministic up to the threads' interleaving, about 1%). **RSS**: peak resident set, median. replayalloc-off is the preload library with REPLAYALLOC_MODE=off: the cost of interposing alone; replayalloc-before is auto mode as it was before a change (\`$before_what\`). **÷ best**: CPU over the lowest median of glibc, jemalloc, tcmalloc and mimalloc; **RSS ÷ leanest**: peak RSS over their lowest. Goal (issue 41): auto mode at most 1.03x the best general-purpose allocator's CPU, within 3% of its time where nothing repeats."
  echo
  echo "| program | allocator | CPU s | CPU ÷ jemalloc | CPU ÷ best | instructions ÷ jemalloc | peak RSS MiB | RSS ÷ leanest | checksum agrees |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---|"
  for kind in "${kinds[@]}"; do
    je=$(cut -d' ' -f1 "$tmp/$kind.jemalloc" | median)
    je_ir=$(cat "$tmp/$kind.jemalloc.ir")
    want=$(cut -d' ' -f3 "$tmp/$kind.glibc" | sort -u | paste -sd/)
    best=$(for g in "${general[@]}"; do cut -d' ' -f1 "$tmp/$kind.$g" | median; done | sort -g | head -1)
    leanest=$(for g in "${general[@]}"; do cut -d' ' -f2 "$tmp/$kind.$g" | median; done | sort -g | head -1)
    for name in "${names[@]}"; do
      cpu=$(cut -d' ' -f1 "$tmp/$kind.$name" | median)
      rss=$(cut -d' ' -f2 "$tmp/$kind.$name" | median)
      sums=$(cut -d' ' -f3 "$tmp/$kind.$name" | sort -u | paste -sd/)
      ir=$(cat "$tmp/$kind.$name.ir")
      if [[ $ir =~ ^[0-9]+$ && $je_ir =~ ^[0-9]+$ ]]; then
        ir=$(awk -v a="$ir" -v b="$je_ir" 'BEGIN { printf "%.3f (%.0f M)", a / b, a / 1e6 }')
      fi
      printf '| %s | %s | %.3f | %.3f | %.3f | %s | %.1f | %.2f | %s |\n' "$kind" "$name" "$cpu" \
        "$(awk -v a="$cpu" -v b="$je" 'BEGIN { print a / b }')" "$(awk -v a="$cpu" -v b="$best" 'BEGIN { print a / b }')" \
        "$ir" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" "$(awk -v a="$rss" -v b="$leanest" 'BEGIN { print a / b }')" \
        "$([ "$sums" = "$want" ] && echo yes || echo "NO ($sums vs $want)")"
    done
  done
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "${RESULTS_FILE:-$results}" --name "${RESULTS_SECTION:-threaded-stress}" --body "$tmp/section"
