#!/usr/bin/env bash
# bench/run_training_predict.sh: `replayalloc predict` for training: the footprint of a
# training step at a batch size not recorded, from recordings at two others, compared
# with a recording at that batch size.
#
#   bench/run_training_predict.sh [OUT_DIR]      (default /tmp/replayalloc-training-predict)
#
# Records one steady-state training step (scripts/record_trace.py --train: forward, loss,
# backward, optimizer step, zero_grad(set_to_none=True), after 2 warm-up steps; libtorch's
# CPU allocator, ops tagged) of MODEL at each of BATCHES and at AT; predicts AT from
# BATCHES with `replayalloc predict` (per-allocation fit, and linear peak); prints a
# Markdown table of predicted and recorded peak, lower bound and slab with the errors,
# plus what lives between steps (parameters, buffers, optimizer state: the same at every
# batch size, which record_trace.py --state-json measures), and answers "does batch AT
# fit in GIB GiB". Writes the RESULTS.md section "Training footprint prediction"
# (update_results.py text --name training-predict). Takes about 1 minute of one core
# with the defaults, most of it the recording at batch 64; runs nothing in parallel.
#
# Environment (defaults): MODEL (resnet18: torchvision ResNet-18 at 224x224, SGD with
# momentum; bert: the BERT-like encoder, Adam; see scripts/models.py training()),
# MODEL_ARGS (record_trace.py options, e.g. "--layers 2" for bert, "--image 112"),
# BATCHES ("8 16"), AT (64), GIB (2), RESULTS_MD (bench/RESULTS.md; "-" writes nothing).
#   MODEL=bert MODEL_ARGS="--layers 2" bench/run_training_predict.sh
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,23p' "$0"; exit 2; }
build=$root/build
out=${1:-/tmp/replayalloc-training-predict}
model=${MODEL:-resnet18}
read -r -a model_args <<< "${MODEL_ARGS:-}"
read -r -a batches <<< "${BATCHES:-8 16}"
at=${AT:-64}
gib=${GIB:-2}
results_md=${RESULTS_MD:-$results}
(( ${#batches[@]} >= 2 )) || die "BATCHES needs two batch sizes or more"
cmake --build "$build" --target replayalloc_cli replayalloc_torch_shared > /dev/null || die "build failed"
cli=$build/allocator/cli/replayalloc
lib=$(torch_library "$build")
require_file "$cli" "build the target replayalloc_cli"
require_file "$lib" "build replayalloc_torch_shared (configure with libtorch found)"
py=$(torch_python) || exit 1
mkdir -p "$out"
scratch_dir
machine_meta "$build" > "$tmp/meta"

# Every recording is made afresh (one process each, one intra-op thread).
for b in "${batches[@]}" "$at"; do
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$py" "$root/scripts/record_trace.py" --model "$model" "${model_args[@]}" \
    --batch "$b" --train --library "$lib" -o "$out/${model}_train_b$b.csv" \
    --state-json "$out/${model}_train_b$b.state.json" >&2
done
args=()
for b in "${batches[@]}"; do args+=(--trace "$b=$out/${model}_train_b$b.csv"); done
# One JSON line: the auto method's prediction, and the linear peak's beside it.
"$cli" predict "${args[@]}" --at "$at" --json > "$out/predict.json"
"$cli" report "$out/${model}_train_b$at.csv" --json > "$out/recorded.json"

cmd="bench/run_training_predict.sh"
[[ -n ${MODEL:-}${MODEL_ARGS:-}${BATCHES:-}${AT:-}${GIB:-} ]] &&
  cmd="MODEL=$model MODEL_ARGS=\"${model_args[*]}\" BATCHES=\"${batches[*]}\" AT=$at GIB=$gib $cmd"
python3 - "$out" "$model" "${model_args[*]}" "${batches[*]}" "$at" "$gib" "$tmp/meta" "$cmd" > "$tmp/section" <<'PY'
import json, os, sys
out, model, margs, batches, at, gib, meta_path, cmd = sys.argv[1:]
batches, at, gib = batches.split(), int(at), float(gib)
meta = dict(l.rstrip("\n").split("=", 1) for l in open(meta_path) if "=" in l)
load = lambda name: json.load(open(os.path.join(out, name)))
pred, rec = load("predict.json"), load("recorded.json")
state = {b: load(f"{model}_train_b{b}.state.json") for b in batches + [str(at)]}
inputs = {str(int(i["batch"])): i["measured"] for i in pred["inputs"]}
mib = lambda v: f"{v / 2**20:,.1f}"
def err(p, r):
    if p == r:
        return "exact"
    e = 100.0 * (p - r) / r if r else None
    return "-" if e is None else f"{e:+.2f}%" if abs(e) < 0.1 else f"{e:+.1f}%"
per_alloc = pred["method"] == "per_allocation"
P, L = pred["predicted"], pred["linear_peak"]

def total(fp, st):  # what a step at this batch size needs: the slab, what outlives it, and the state
    return fp["slab_bytes"] + fp["persistent_bytes"] + st["total_bytes"]

print("## Training footprint prediction")
print()
print(f"Written by `bench/run_training_predict.sh` (`scripts/record_trace.py --train`, `replayalloc predict`).")
print()
print(f"- Date: {meta['date']}; machine: {meta['cpu']}, `nproc` = {meta['nproc']}; commit {meta['commit']}")
print(f"- Command: `{cmd}`")
desc = {"resnet18": "torchvision ResNet-18, 224×224, cross entropy, SGD with momentum",
        "bert": "the BERT-like encoder (BERT-base's layer), sequence 128, MSE, Adam"}.get(model, model)
print(f"- Model: {desc}{' (' + margs + ')' if margs else ''}; random weights; libtorch 1.13 CPU, one intra-op thread")
print()
print(f"One training step (forward, loss, backward, optimizer step, `zero_grad(set_to_none=True)`, after two "
      f"warm-up steps) recorded at batch {' and '.join(batches)} and at {at}; `replayalloc predict` estimates "
      f"batch {at} from the first {len(batches)} only, then the recording at {at} says how close it came. "
      "Error = (predicted − recorded) ÷ recorded. **State** is what lives between steps (parameters, buffers, "
      "optimizer state; gradients are set to None), measured in the recording process: it does not change with "
      "the batch size. **Total** = slab + persistent + state, the tensors' memory of a training loop at that batch "
      "size (the process adds libtorch's own code and caches).")
print()
method = "per-allocation fit" if per_alloc else f"linear peak ({pred.get('why_not_per_allocation', '')})"
print(f"Method (auto): {method}" + (f"; {pred['allocations']} allocations, {pred['scaling']} grow with the batch, "
                                    f"{pred['constant']} keep their size" if per_alloc else "") + ".")
print()
cols = [f"recorded b{b}" for b in batches] + [f"predicted b{at}", f"recorded b{at}", "error",
                                               f"linear peak b{at}", "error"]
print("| MiB | " + " | ".join(cols) + " |")
print("|---|" + "---:|" * len(cols))
for key, name in (("peak_live_bytes", "peak live"), ("lower_bound_bytes", "lower bound"),
                  ("slab_bytes", "slab"), ("persistent_bytes", "persistent")):
    row = [mib(inputs[b][key]) for b in batches]
    row += [mib(P[key]), mib(rec[key]), err(P[key], rec[key]), mib(L[key]), err(L[key], rec[key])]
    print(f"| {name} | " + " | ".join(row) + " |")
st = state[batches[0]]["total_bytes"]
row = [mib(state[b]["total_bytes"]) for b in batches]
row += [mib(st), mib(state[str(at)]["total_bytes"]), err(st, state[str(at)]["total_bytes"]), mib(st), "-"]
print("| state | " + " | ".join(row) + " |")
t_pred, t_lin, t_rec = total(P, state[batches[0]]), total(L, state[batches[0]]), total(rec, state[str(at)])
row = [mib(total(inputs[b], state[b])) for b in batches]
row += [mib(t_pred), mib(t_rec), err(t_pred, t_rec), mib(t_lin), err(t_lin, t_rec)]
print("| **total** | " + " | ".join(row) + " |")
print()
fits = lambda v: "yes" if v <= gib * 2**30 else "no"
print(f"**Does batch {at} fit in {gib:g} GiB?** Predicted total {t_pred / 2**30:.2f} GiB: **{fits(t_pred)}**; "
      f"the recording at {at} says {t_rec / 2**30:.2f} GiB: {fits(t_rec)} (the prediction is "
      + ("exact to the byte" if t_pred == t_rec else f"off by {err(t_pred, t_rec)}") + ").")
PY
cat "$tmp/section"
if [[ $results_md != - ]]; then
  update_results text "$results_md" --name training-predict --body "$tmp/section"
  echo "run_training_predict.sh: wrote the section \"Training footprint prediction\" of $(rel "$results_md")" >&2
fi
