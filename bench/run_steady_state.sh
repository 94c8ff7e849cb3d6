#!/usr/bin/env bash
# bench/run_steady_state.sh: time to steady state (issue 15). A service that scales out
# starts replicas all day, and each pays whatever an allocator costs before it serves
# at its best: replayalloc's recordings, plans and slabs, the others' first page faults.
# Runs cells with NO warm-up (MODEL:1:0:20: the process's first 20 inferences, timed)
# under every allocator of bench/e2e/run_e2e.py, side by side, and writes the RESULTS.md
# section "End to end: the first 20 inferences". The goal: replayalloc's p99 over them
# within 5% of the best general-purpose allocator's.
# Usage: bench/run_steady_state.sh [ROUNDS] [CELLS]   (default 5 rounds of
#        resnet50:1:0:20,mobilenet_v3_large:1:0:20)
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-5}
cells=${2:-resnet50:1:0:20,mobilenet_v3_large:1:0:20}
build=$root/build
cmake --build "$build" --target e2e_driver replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
scratch_dir
status=0
run_e2e_section "$build" "$py" "$rounds" "$cells" e2e-steady \
  "the first 20 inferences of a fresh process (no warm-up: time to steady state)" \
  "bench/run_steady_state.sh $rounds $cells" || status=$?
exit $status
