#!/usr/bin/env bash
# What a lent GPU machine is spent on, in one call of under 10 minutes (issue 34, part 7),
# over what bench/gpu/prepare.sh built here and carried in .gpu/ (name .gpu in the
# call's carry). Each step has its own time cap, so that the call ends inside the
# device's limit with what finished; the order is what only that machine can show first:
#   1. tests     the real-GPU tests (.gpu/gpu_tests): the CUDA paths (30 s);
#   2. manycore  bench/gpu/run_manycore.sh, the e2e models at T = 1, 4, 16 on 16 cores
#                (the seed's contention claim; cap 260 s);
#   3. gpu       bench/gpu/run.sh, inference only, one round: the CUDA pluggable
#                allocator against PyTorch's caching allocator and cudaMallocAsync
#                (cap 170 s);
#   4. stress    bench/run_threaded_stress.sh at 16 threads: auto mode where nothing
#                repeats (cap 45 s);
#   5. contention bench/run_contention.sh at T = 16, the allocator alone (the rest).
# Two more steps run only when STEPS names them: package (the Python package's
# use_for_cuda check alone) and generation (a 12-layer GPT-2-shaped decoder on the GPU,
# one iteration per request, PyTorch's caching allocator against replayalloc's pluggable
# allocator, twice each: bench_torch.py --generate).
# Results come back in $OUT (at most 8 files): the RESULTS.md section each step wrote
# (lent_*.md), the log, and lent_raw.tar.gz with the raw runs (jsonl, logs), from
# which bench/update_results.py writes a section here when a step ran out of time.
# Environment: STEPS (default: every step, e.g. STEPS="tests manycore"), and the sizes
# of run_manycore.sh (MODELS, THREADS, ROUNDS, WARMUP, ITERS) for step 2.
set -uo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$root" || exit 1
OUT=${OUT:-bench/gpu/out}
mkdir -p "$OUT"
[ -f .gpu/libreplayalloc_preload.so ] || die "run bench/gpu/prepare.sh here first and carry .gpu"
raw=$(mktemp -d)
exec > >(tee -a "$OUT/lent.log") 2>&1
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
want() {
  case $1 in package | generation) [[ " ${STEPS:-} " == *" $1 "* ]] ;; *) [[ -z ${STEPS:-} || " $STEPS " == *" $1 "* ]] ;; esac
}
export LD_LIBRARY_PATH="$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}"
export ALLOCATOR_LIBDIR="$PWD/.gpu/lib" PYTHONUNBUFFERED=1
# The micro benchmarks as a build folder (BENCH_PREBUILT: the scripts run no cmake).
mc=$PWD/.gpu/mc
mkdir -p "$mc/bench" "$mc/hooks"
cp .gpu/libreplayalloc_preload.so "$mc/hooks/"
cp .gpu/bench/* "$mc/bench/" 2> /dev/null
cp bench/RESULTS.md "$raw/RESULTS.md"

echo "== run_lent.sh: $(nproc) cores, $(cpu_model); $(cat .gpu/commit)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# section NAME HEADING_SUFFIX: the section NAME of $raw/RESULTS.md into $OUT/lent_NAME.md,
# its heading marked as this machine's.
section() {
  sed -n "/<!-- section: $1 -->/,/<!-- end: $1 -->/p" "$raw/RESULTS.md" |
    sed "0,/^## /s/^\(## .*\)$/\1 $2/" > "$OUT/lent_$1.md"
  [ -s "$OUT/lent_$1.md" ] && echo "wrote $OUT/lent_$1.md"
}

if want tests; then
  echo "== [$(elapsed) s] real-GPU tests"
  timeout 90 .gpu/gpu_tests > "$raw/gpu_tests.log" 2>&1
  echo "gpu_tests exit $?"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|FAILED' "$raw/gpu_tests.log" | tail -n 20
fi
if want package; then
  echo "== [$(elapsed) s] the Python package's use_for_cuda"
  PY=$(torch_python python3 /usr/bin/python3)
  PYTHONPATH="$PWD/integrations/pytorch/python" timeout 120 "$PY" bench/gpu/bench_torch.py --check-package \
    --library "$PWD/.gpu/libreplayalloc_cuda.so" 2>&1 | tail -n 3 | tee "$raw/package.log"
fi
if want generation; then
  echo "== [$(elapsed) s] generation on the GPU, one iteration per request (issue 31)"
  PY=$(torch_python python3 /usr/bin/python3)
  for alloc in default replayalloc replayalloc default; do
    PYTHONPATH="$PWD/integrations/pytorch/python" timeout 150 "$PY" bench/gpu/bench_torch.py --generate \
      --allocator "$alloc" --warmup 12 --iters 24 --library "$PWD/.gpu/libreplayalloc_cuda.so" \
      2>> "$raw/generation.err" | tail -n 1 | tee -a "$raw/gpu_generation.jsonl"
  done
  tail -n 5 "$raw/generation.err"
  cp "$raw/gpu_generation.jsonl" "$OUT/lent_gpu_generation.jsonl" 2> /dev/null
fi
if want manycore; then
  echo "== [$(elapsed) s] many-core e2e"
  OUT=$raw MODELS=${MODELS:-resnet50 lstm} THREADS=${THREADS:-1 4 16} ROUNDS=${ROUNDS:-2} \
    WARMUP=${WARMUP:-5} ITERS=${ITERS:-10} timeout 260 bench/gpu/run_manycore.sh > "$raw/manycore.log" 2>&1
  echo "exit $?"; grep -E '^\| [a-z0-9_]+/T[0-9]+ \|' "$raw/manycore.md" 2> /dev/null | cut -c1-110
  cp "$raw/manycore.md" "$OUT/lent_manycore.md" 2> /dev/null
fi
if want gpu; then
  echo "== [$(elapsed) s] GPU benchmark (inference, one round)"
  OUT=$raw ROUNDS=1 ITERS=100 TRAIN_ROUNDS=0 timeout 170 bench/gpu/run.sh > "$raw/gpu_run.log" 2>&1
  echo "exit $?"; grep -E '^== |ok|Error|error' "$raw/gpu_run.log" | head -n 20
  cp "$raw/gpu_results.md" "$OUT/lent_gpu_results.md" 2> /dev/null
  grep -h '^| ' "$raw/gpu_results.md" 2> /dev/null
fi
if want stress; then
  echo "== [$(elapsed) s] threaded stress, 16 threads"
  BENCH_PREBUILT=1 BUILD_DIR=$mc RESULTS_FILE=$raw/RESULTS.md RESULTS_SECTION=threaded-stress-manycore \
    timeout 45 bench/run_threaded_stress.sh 3 16 200000 > "$raw/stress.log" 2>&1
  echo "exit $?"; section threaded-stress-manycore "(the GPU machine's host, 16 threads on $(nproc) cores)"
fi
if want contention; then
  left=$((565 - $(elapsed)))
  echo "== [$(elapsed) s] contention, T = 16 (${left} s left)"
  BENCH_PREBUILT=1 BUILD_DIR=$mc RESULTS_FILE=$raw/RESULTS.md RESULTS_SECTION=contention-manycore \
    timeout "$left" bench/run_contention.sh 2 16 > "$raw/contention.log" 2>&1
  echo "exit $?"; section contention-manycore "(the GPU machine's host, $(nproc) cores)"
fi
rm -f "$raw"/*.pt "$raw/RESULTS.md"
tar -C "$raw" -czf "$OUT/lent_raw.tar.gz" .
echo "== [$(elapsed) s] done: $(ls "$OUT" | tr '\n' ' ')"
