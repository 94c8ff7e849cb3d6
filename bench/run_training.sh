#!/usr/bin/env bash
# bench/run_training.sh: the end-to-end matrix's training cells (Note [Training cells] in
# bench/e2e/e2e_driver.cc): a training step (forward, loss, backward, optimizer step,
# zero_grad) of torchvision ResNet-18 (batch 8, 112x112) and MobileNetV3-Small (batch 8,
# 224x224), both SGD with momentum, and of the BERT-like encoder (2 layers of BERT-base's
# width, sequence 128, batch 8; Adam), T = 1, under every allocator of
# bench/e2e/run_e2e.py, one replayalloc iteration per step. Writes the RESULTS.md section
# "End to end: training steps" (update_results.py e2e --name e2e-training).
#
#   bench/run_training.sh [ROUNDS]          (default 3 rounds, about 20 minutes here)
#
# CELLS (run_e2e.py's MODEL:THREADS:WARMUP:STEPS, comma-separated) replaces the cells,
# RESULTS_MD the file written (default bench/RESULTS.md), e.g. a quick check that the
# script works without touching the results:
#   CELLS=train_mobilenet_v3_small:1:8:2 RESULTS_MD=/tmp/r.md bench/run_training.sh 1
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-3}
build=$root/build
results_md=${RESULTS_MD:-$results}
cmake --build "$build" --target e2e_driver replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
scratch_dir
# Steps per run: warm-up enough for replay-auto to find the step and plan it before the
# timed phase (in a 10-step check it replayed from about step 6 for ResNet-18 and the
# encoder, from about step 8 for MobileNetV3-Small); about 10 s of timed steps per run
# on one core here (ResNet-18 ~0.27 s a step, MobileNetV3-Small ~0.15 s, the encoder
# ~1.1 s).
cells=${CELLS:-train_resnet18:1:12:30,train_mobilenet_v3_small:1:16:50,train_bert:1:10:10}
status=0
run_e2e_section "$build" "$py" "$rounds" "$cells" e2e-training "training steps" \
  "bench/run_training.sh $rounds" "$results_md" || status=$?
echo "run_training.sh: wrote the section \"End to end: training steps\" of $(rel "$results_md")"
exit $status
