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
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
TORCH_BUILD=$(cd "${2:-$BUILD}" && pwd)
LIB=$TORCH_BUILD/integrations/pytorch/libreplayalloc_torch.so
BENCH=$BUILD/bench/planner/planner_bench
TRACES=$BUILD/planner_traces
RUNS=${RUNS:-7}
[ -x "$BENCH" ] || { echo "run.sh: $BENCH not built (ninja -C $BUILD planner_bench)" >&2; exit 1; }
[ -f "$LIB" ] || { echo "run.sh: $LIB not built (ninja -C $TORCH_BUILD replayalloc_torch_shared)" >&2; exit 1; }
mkdir -p "$TRACES"
MODELS="resnet50:1 mobilenet_v3_large:1 densenet121:1 transformer:1 transformer:8 lstm:1 unet:1"
FILES=()
for mb in $MODELS; do
  m=${mb%%:*}; b=${mb##*:}
  f=$TRACES/${m}_bs$b.csv
  [ -s "$f" ] || /usr/bin/python3 "$ROOT/scripts/record_trace.py" --model "$m" --batch "$b" -o "$f" --library "$LIB" >&2
  FILES+=("$f")
done
OUT=$(mktemp)
"$BENCH" --runs "$RUNS" "${FILES[@]}" | tee "$OUT"

CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
LOAD=$(cut -d' ' -f1 /proc/loadavg)  # when the runs end
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
/usr/bin/python3 - "$ROOT/bench/RESULTS.md" "$OUT" "$CPU" "$(nproc)" "$LOAD" "$COMMIT" "$RUNS" \
  "$(basename "$BUILD") $(basename "$TORCH_BUILD")" <<'PY'
import datetime, sys
path, out, cpu, ncpu, load, commit, runs, dirs = sys.argv[1:]
body = open(out).read().strip()
section = f"""<!-- planner:begin -->
## Planner: slab / lower bound and plan time

{datetime.date.today()}, commit {commit}, {cpu} ({ncpu} CPUs, load average {load} when run:
the machine is shared, so times are this thread's CPU time, median of {runs} runs;
the large traces also give the fastest run).
Command: `bash bench/planner/run.sh {dirs}` (traces recorded by
`scripts/record_trace.py`: random weights, eval, no_grad, one steady-state iteration).
Traces already in the build folder's planner_traces/ are reused (delete them to
re-record). Every plan passed `validate()`. The lower bound is the peak of live slot
footprints (64-byte slots); no plan can be smaller. Targets (issue #6): slab/LB median
<= 1.02 and worst <= 1.05 on the recorded models; 10k allocations planned in <= 5 ms,
100k in <= 100 ms.

{body}
<!-- planner:end -->"""
text = open(path).read()
if "<!-- planner:begin -->" in text and "<!-- planner:end -->" in text:
    a, b = text.index("<!-- planner:begin -->"), text.index("<!-- planner:end -->") + len("<!-- planner:end -->")
    text = text[:a] + section + text[b:]
else:  # first run: the section goes at the end
    text = text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
print(f"run.sh: wrote the planner section of {path}", file=sys.stderr)
PY
rm -f "$OUT"
