#!/usr/bin/env bash
# The native CUDA route on a lent GPU machine, in one call (issue 42), over what
# bench/gpu/prepare.sh built here and carried in .gpu/ (name .gpu in the call's carry):
#   1. headers   the installed torch's CUDAAllocator interface, for the record
#                (torch_interface.txt: every pure virtual it declares);
#   2. check     bench/gpu/native_check.py: the extension built against that torch, then
#                the memory API, replay, snapshot, recordStream, OOM, raw, cuDNN
#                benchmark mode and CUDA graph checks (native_check.log);
#   3. bench     bench/gpu/run.sh's inference cells under the caching allocator,
#                cudaMallocAsync, the pluggable route and the native route
#                (gpu_results.jsonl/.md);
#   4. generation the GPT-2-shaped decoder, the caching allocator against both routes
#                (gpu_generation.jsonl), when STEPS names it.
# STEPS (default "headers check bench"), and run.sh's ROUNDS, ITERS, MODELS, BATCHES.
set -uo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$root" || exit 1
OUT=${OUT:-bench/gpu/out}
mkdir -p "$OUT"
[ -f .gpu/libreplayalloc_cuda.so ] || die "run bench/gpu/prepare.sh here first and carry .gpu"
export LD_LIBRARY_PATH="$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/integrations/pytorch/python:$PWD/scripts:${PYTHONPATH:-}"
PY=$(torch_python python3 /usr/bin/python3) || exit 1
STEPS=${STEPS:-headers check bench}
want() { [[ " $STEPS " == *" $1 "* ]]; }
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
echo "== run_native.sh: $(cat .gpu/commit 2> /dev/null); $(nproc) cores"
if want headers; then
  TORCH=$("$PY" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
  {
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    for h in c10/cuda/CUDACachingAllocator.h c10/core/CachingDeviceAllocator.h c10/core/Allocator.h; do
      echo "== $h"
      # every virtual declaration, default arguments ({0, 0}) included
      "$PY" -c 'import re, sys; t = " ".join(open(sys.argv[1]).read().split())
for m in re.finditer(r"virtual [^;]*?\)\s*(?:const\s*)?(?:override\s*)?(?:= 0;|\{)", t): print(m.group(0))' "$TORCH/include/$h"
    done
  } > "$OUT/torch_interface.txt" 2>&1
  cat "$OUT/torch_interface.txt" | head -n 3
fi
if want check; then
  echo "== [$(elapsed) s] the native route's checks"
  timeout 400 "$PY" bench/gpu/native_check.py --library "$PWD/.gpu/libreplayalloc_cuda.so" \
    > "$OUT/native_check.log" 2>&1
  echo "exit $?"
  grep -E '^\{' "$OUT/native_check.log" | cut -c1-400
  grep -E 'error|Error' "$OUT/native_check.log" | grep -v '^{' | head -n 30
fi
if want check && ! grep -q '"check": "route", "ok": true' "$OUT/native_check.log"; then
  echo "the native route did not install: no benchmark (the log says why)"
  grep -E 'error' "$OUT/native_check.log" | head -n 40
  STEPS=""
fi
if want bench; then
  echo "== [$(elapsed) s] inference, the four allocators"
  OUT=$OUT TESTS=0 TRAIN_ROUNDS=0 ROUNDS=${ROUNDS:-1} ITERS=${ITERS:-100} bench/gpu/run.sh > "$OUT/gpu_run.log" 2>&1
  echo "exit $?"
  grep -h '^| \|FAILED' "$OUT/gpu_results.md" 2> /dev/null
  rm -f "$OUT"/ref_*.pt
fi
if want generation; then
  echo "== [$(elapsed) s] generation"
  for alloc in default native replayalloc native default replayalloc; do
    timeout 150 "$PY" bench/gpu/bench_torch.py --generate --allocator "$alloc" --warmup 12 --iters 24 \
      --library "$PWD/.gpu/libreplayalloc_cuda.so" 2>> "$OUT/generation.err" | tail -n 1 | tee -a "$OUT/gpu_generation.jsonl"
  done
  tail -n 3 "$OUT/generation.err"
fi
echo "== [$(elapsed) s] done: $(ls "$OUT" | tr '\n' ' ')"
