#!/usr/bin/env bash
# bench/run_first_replay.sh: the first replayed inference against the next (issue 45,
# item 2: the first replay costs no more than the next). Runs bench/e2e/first_replay.py
# (a fresh process's first inferences of each model at T = 1, no warm-up, under glibc,
# jemalloc, tcmalloc, mimalloc and replayalloc preloaded, auto and explicit; each
# inference's thread CPU time, page faults and slab hits) and rewrites the "First
# replayed inference" section of bench/RESULTS.md.
# Usage: bench/run_first_replay.sh [ROUNDS] [MODELS]   (default 5 rounds of resnet50,bert_b1)
# Environment: BUILD_DIR (default <repo>/build); BEFORE_LIB (the preload library of
# another build, run beside this one's as replay-auto-before and replay-explicit-before).
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
rounds=${1:-5}
models=${2:-resnet50,bert_b1}
cmake --build "$build" --target e2e_driver replayalloc_preload > /dev/null || die "build failed"
[[ -z ${BEFORE_LIB:-} ]] || require_file "$BEFORE_LIB" "BEFORE_LIB: the preload library of another build"
scratch_dir
load_before=$(load_average)
status=0
"$(dirname "${BASH_SOURCE[0]}")/e2e/first_replay.py" --build "$build" --out "$tmp/table" --rounds "$rounds" \
  --models "$models" ${BEFORE_LIB:+--before-lib "$BEFORE_LIB"} || status=$?
{
  echo "## The first replayed inference against the next"
  echo
  echo "- Date: $(utc_now); machine: $(cpu_model), \`nproc\` = $(nproc); load before: $load_before, after: $(load_average)"
  echo "- Source: commit $(source_commit); libtorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2> /dev/null || echo '?') ($(blas_name))"
  echo "- Command: \`${BEFORE_LIB:+BEFORE_LIB=$BEFORE_LIB }bench/run_first_replay.sh $rounds $models\` ($rounds rounds; \`bench/e2e/first_replay.py\`)"
  echo
  echo "Each model at T = 1 with no warm-up: a fresh process's first 10 inferences, one process per allocator and round, the order rotated. **first replayed inference**: the first with slab hits (1-based; auto mode finds its iterations itself, so its first may straddle two inferences); for glibc, jemalloc, tcmalloc and mimalloc the inference at replay-explicit's first position, as a control (what that position costs where nothing is planned). **first ÷ next**: that inference's thread CPU time (\`CLOCK_THREAD_CPUTIME_ID\`) over the median of the next three's, median over the rounds (range); goal (issue 45): at most the control's. **the one before**: the same for the inference before it (replayalloc: the last recorded one). Page faults: the thread's minor faults in that inference (\`RUSAGE_THREAD\`). A TorchScript module's first two inferences run its profiling executor, so explicit iterations record four times (two recordings alike are needed) and replay from the fifth."
  echo
  cat "$tmp/table"
  echo
} > "$tmp/section"
cat "$tmp/section"
update_results text "$results" --name first-replay --body "$tmp/section"
exit $status
