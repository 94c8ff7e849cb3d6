#!/bin/bash
# bench/planner/run.sh: every planner on traces recorded from real models and on
# synthetic ones; writes the "planner" section of bench/RESULTS.md.
#
#   bash bench/planner/run.sh [BUILD_DIR] [TORCH_BUILD_DIR]
#
# BUILD_DIR (default build) must have planner_bench (configure with
# -DREPLAYALLOC_BUILD_BENCH=ON); TORCH_BUILD_DIR (default: BUILD_DIR) must have
# libreplayalloc_torch.so, used to record the traces with scripts/record_trace.py into
# BUILD_DIR/planner_traces (not committed; recorded once, delete them to re-record).
set -euo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
BUILD=$(cd "${1:-$root/build}" && pwd)
TORCH_BUILD=$(cd "${2:-$BUILD}" && pwd)
LIB=$(torch_library "$TORCH_BUILD")
BENCH=$BUILD/bench/planner/planner_bench
TRACES=$BUILD/planner_traces
RUNS=${RUNS:-7}
[ -x "$BENCH" ] || die "$BENCH not built (ninja -C $BUILD planner_bench)"
require_file "$LIB" "ninja -C $TORCH_BUILD replayalloc_torch_shared"
mkdir -p "$TRACES"
MODELS="resnet50:1 mobilenet_v3_large:1 densenet121:1 bert:1 bert:8 lstm:1 unet:1"
FILES=()
for mb in $MODELS; do
  m=${mb%%:*}; b=${mb##*:}
  f=$TRACES/${m}_bs$b.csv
  if [ ! -s "$f" ]; then
    py=${py:-$(torch_python)}  # looked for once, and only when a trace is missing
    "$py" "$root/scripts/record_trace.py" --model "$m" --batch "$b" -o "$f" --library "$LIB" >&2
  fi
  FILES+=("$f")
done
scratch_dir
"$BENCH" --runs "$RUNS" "${FILES[@]}" | tee "$tmp/out"

LOAD=$(load_average)  # when the runs end
{
  echo "## Planner: slab / lower bound and plan time"
  echo
  echo "$(date +%F), commit $(source_commit), $(cpu_model) ($(nproc) CPUs, load average ${LOAD%% *} when run:"
  cat <<TEXT
the machine is shared, so times are this thread's CPU time, median of $RUNS runs;
the large traces also give the fastest run).
Command: \`bash bench/planner/run.sh $(basename "$BUILD") $(basename "$TORCH_BUILD")\` (traces recorded by
\`scripts/record_trace.py\`: random weights, eval, no_grad, one steady-state iteration).
Traces already in the build folder's planner_traces/ are reused (delete them to
re-record). Every plan passed \`validate()\`. The lower bound is the peak of live slot
footprints (64-byte slots); no plan can be smaller. Targets (issue #6): slab/LB median
<= 1.02 and worst <= 1.05 on the recorded models; 10k allocations planned in <= 5 ms,
100k in <= 100 ms.

TEXT
  cat "$tmp/out"
} > "$tmp/section"
update_results text "$results" --name planner --body "$tmp/section"
echo "run.sh: wrote the planner section of $results" >&2
