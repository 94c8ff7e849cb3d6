#!/usr/bin/env bash
# Runs on the GPU machine, in one call, over what bench/gpu/prepare.sh built:
#   1. the real-GPU tests (.gpu/gpu_tests);
#   2. the Python package's use_for_cuda on the real PyTorch there;
#   3. the benchmark: torchvision ResNet-50 and a BERT-base-like encoder, batch 1 and
#      8, under PyTorch's caching allocator, backend:cudaMallocAsync and replayalloc's
#      pluggable and native routes, each in its own process, alternated round by round;
#   4. training steps of both models at batch 8 (issue 16) under the caching allocator
#      and replayalloc's, parameters after the last step compared.
# Results go to $OUT (or bench/gpu/out): gpu_tests.log, gpu_results.jsonl,
# gpu_results.md.  ROUNDS (default 2), ITERS (default 200), TRAIN_ROUNDS (default ROUNDS)
# and TRAIN_ITERS (default 50) set the size; ALLOCATORS, MODELS and BATCHES the cells;
# TESTS=0 skips steps 1 and 2.
set -uo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$root" || exit 1
# The image's python3 (PATH) has the GPU build of torch; Debian's, if any, would not.
PY=$(torch_python python3 /usr/bin/python3) || exit 1
OUT=${OUT:-bench/gpu/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$PWD/integrations/pytorch/python:${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1
LIB="$PWD/.gpu/libreplayalloc_cuda.so"
ROUNDS=${ROUNDS:-2}
ITERS=${ITERS:-200}
TRAIN_ITERS=${TRAIN_ITERS:-50}
TRAIN_ROUNDS=${TRAIN_ROUNDS:-$ROUNDS}  # 0: no training cells
# replayalloc: the pluggable route; native: replayalloc's own c10 CUDAAllocator (built
# against this torch on first use: the first native cell pays it, outside its timing).
ALLOCATORS=${ALLOCATORS:-default async replayalloc native}
MODELS=${MODELS:-resnet50 bert}
BATCHES=${BATCHES:-1 8}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/device.txt"

if [ "${TESTS:-1}" = 1 ]; then
  echo "== gpu tests"
  .gpu/gpu_tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 25

  echo "== use_for_cuda"
  "$PY" bench/gpu/bench_torch.py --check-package --library "$LIB" 2>&1 | tee "$OUT/package.log"
fi

echo "== benchmark"
: > "$OUT/gpu_results.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for model in $MODELS; do
    for batch in $BATCHES; do
      ref="$OUT/ref_${model}_${batch}.pt"
      order=$ALLOCATORS
      [ $((round % 2)) -eq 0 ] && order=$(echo "$ALLOCATORS" | tr ' ' '\n' | tac | tr '\n' ' ')
      for alloc in $order; do
        env_conf=""
        [ "$alloc" = async ] && env_conf="backend:cudaMallocAsync"
        PYTORCH_CUDA_ALLOC_CONF=$env_conf timeout 300 "$PY" bench/gpu/bench_torch.py \
          --allocator "$alloc" --model "$model" --batch "$batch" --iters "$ITERS" \
          --round "$round" --reference "$ref" --library "$LIB" >> "$OUT/gpu_results.jsonl" \
          || echo "{\"allocator\": \"$alloc\", \"model\": \"$model\", \"batch\": $batch, \"round\": $round, \"error\": \"exit $?\"}" >> "$OUT/gpu_results.jsonl"
        tail -n 1 "$OUT/gpu_results.jsonl"
      done
    done
  done
done
echo "== training steps (issue 16): forward, loss, backward, optimizer step, zero_grad; batch 8"
for round in $(seq 1 "$TRAIN_ROUNDS"); do
  for model in resnet50 bert; do
    ref="$OUT/ref_${model}_train.pt"
    order="default replayalloc"
    [ $((round % 2)) -eq 0 ] && order="replayalloc default"
    for alloc in $order; do
      timeout 300 "$PY" bench/gpu/bench_torch.py --train --allocator "$alloc" --model "$model" --batch 8 \
        --iters "$TRAIN_ITERS" --round "$round" --reference "$ref" --library "$LIB" >> "$OUT/gpu_results.jsonl" \
        || echo "{\"allocator\": \"$alloc\", \"model\": \"$model\", \"mode\": \"train\", \"round\": $round, \"error\": \"exit $?\"}" >> "$OUT/gpu_results.jsonl"
      tail -n 1 "$OUT/gpu_results.jsonl"
    done
  done
done
"$PY" bench/gpu/summarize.py "$OUT/gpu_results.jsonl" "$OUT/device.txt" > "$OUT/gpu_results.md"
cat "$OUT/gpu_results.md"
