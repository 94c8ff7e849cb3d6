#!/usr/bin/env bash
# bench/predict/run.sh: how well `replayalloc predict` estimates the footprint at a
# batch size never recorded.
#
# For each model, records one inference iteration at batch 1 and 8 (the inputs) and
# at 16 and 32 (the truth) with scripts/record_trace.py (libtorch's CPU allocator,
# ops tagged), predicts 16 and 32 from 1 and 8 with both methods (per-allocation fit,
# linear peak), and prints a Markdown table of the predicted and recorded lower bound
# and slab, with the relative errors.
#
#   bench/predict/run.sh BUILD_DIR TORCH_BUILD_DIR [OUT_DIR] [MODEL...]
#
# BUILD_DIR holds allocator/cli/replayalloc, TORCH_BUILD_DIR the libtorch integration
# (integrations/pytorch/libreplayalloc_torch.so; configure with
# -DREPLAYALLOC_WITH_TORCH=ON, build replayalloc_torch_shared). Recordings already in
# OUT_DIR (default /tmp/replayalloc-predict) are reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[[ $# -ge 2 ]] || { sed -n '2,17p' "$0"; exit 2; }
cli="$1/allocator/cli/replayalloc"
lib="$2/integrations/pytorch/libreplayalloc_torch.so"
out="${3:-/tmp/replayalloc-predict}"
shift $(( $# >= 3 ? 3 : 2 ))
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(resnet50 mobilenet_v3_large densenet121 transformer lstm unet)
[[ -x "$cli" ]] || { echo "no $cli: build the target replayalloc_cli" >&2; exit 1; }
[[ -f "$lib" ]] || { echo "no $lib: build replayalloc_torch_shared with -DREPLAYALLOC_WITH_TORCH=ON" >&2; exit 1; }
mkdir -p "$out"

inputs=(1 8)
targets=(16 32)
for m in "${models[@]}"; do
  for b in "${inputs[@]}" "${targets[@]}"; do
    f="$out/${m}_b$b.csv"
    [[ -s "$f" ]] || /usr/bin/python3 "$root/scripts/record_trace.py" --model "$m" --batch "$b" \
      --library "$lib" -o "$f" >&2
  done
  at_args=()
  for b in "${targets[@]}"; do at_args+=(--at "$b"); done
  for method in per_allocation linear_peak; do
    "$cli" predict --trace 1="$out/${m}_b1.csv" --trace 8="$out/${m}_b8.csv" "${at_args[@]}" \
      --method "$method" --json > "$out/${m}.predict.$method.jsonl"
  done
  for b in "${targets[@]}"; do
    "$cli" report "$out/${m}_b$b.csv" --json > "$out/${m}_b$b.report.json"
  done
done
/usr/bin/python3 "$here/summarize.py" "$out" "${models[@]}"
