#!/usr/bin/env bash
# bench/predict/run.sh: how well `replayalloc predict` estimates the footprint at a
# batch size never recorded.
#
# For each model, records one inference iteration at batch 1, 8, 16 and 32 with
# scripts/record_trace.py (libtorch's CPU allocator, ops tagged), predicts 16 and 32
# from 1 and 8, and 32 from 8 and 16, with both methods (per-allocation fit, linear
# peak), and prints a Markdown table of the predicted and recorded lower bound and
# slab, with the relative errors.
#
#   bench/predict/run.sh BUILD_DIR TORCH_BUILD_DIR [OUT_DIR] [MODEL...]
#
# BUILD_DIR holds allocator/cli/replayalloc, TORCH_BUILD_DIR the libtorch integration
# (integrations/pytorch/libreplayalloc_torch.so; configure with
# -DREPLAYALLOC_WITH_TORCH=ON, build replayalloc_torch_shared). Recordings already in
# OUT_DIR (default /tmp/replayalloc-predict) are reused. BATCHES and EXPERIMENTS (each
# "IN,IN:TARGET,TARGET") change what is recorded and predicted, e.g. for models too slow
# to record at batch 32 on a small machine:
#   BATCHES="1 2 4 8" EXPERIMENTS="1,2:4,8 2,4:8" bench/predict/run.sh ...
set -euo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
[[ $# -ge 2 && $1 != -h && $1 != --help ]] || { sed -n '2,19p' "$0"; exit 2; }
cli="$1/allocator/cli/replayalloc"
lib=$(torch_library "$2")
out="${3:-/tmp/replayalloc-predict}"
shift $(( $# >= 3 ? 3 : 2 ))
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(resnet50 mobilenet_v3_large densenet121 bert lstm unet)
[[ -x "$cli" ]] || die "no $cli: build the target replayalloc_cli"
require_file "$lib" "build replayalloc_torch_shared with -DREPLAYALLOC_WITH_TORCH=ON"
mkdir -p "$out"

# Experiments: "INPUT,INPUT:TARGET,TARGET".
read -r -a batches <<< "${BATCHES:-1 8 16 32}"
read -r -a experiments <<< "${EXPERIMENTS:-1,8:16,32 8,16:32}"
for m in "${models[@]}"; do
  for b in "${batches[@]}"; do
    f="$out/${m}_b$b.csv"
    if [[ ! -s "$f" ]]; then
      py=${py:-$(torch_python)}  # looked for once, and only when a recording is missing
      "$py" "$root/scripts/record_trace.py" --model "$m" --batch "$b" --library "$lib" -o "$f" >&2
    fi
    "$cli" report "$f" --json > "$out/${m}_b$b.report.json"
  done
  for e in "${experiments[@]}"; do
    IFS=, read -r -a ins <<< "${e%%:*}"
    IFS=, read -r -a targets <<< "${e##*:}"
    args=()
    for b in "${ins[@]}"; do args+=(--trace "$b=$out/${m}_b$b.csv"); done
    for b in "${targets[@]}"; do args+=(--at "$b"); done
    for method in per_allocation linear_peak; do
      "$cli" predict "${args[@]}" --method "$method" --json \
        > "$out/${m}.from$(IFS=_; echo "${ins[*]}").$method.jsonl" || true
    done
  done
done
/usr/bin/python3 "$root/bench/predict/summarize.py" "$out" "${models[@]}"
