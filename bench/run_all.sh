#!/usr/bin/env bash
# bench/run_all.sh: the whole benchmark suite in one command: the micro benchmarks
# (bench/run_micro.sh: the malloc+free pair under glibc, jemalloc, tcmalloc, mimalloc
# and replayalloc, callgrind counts) and the end-to-end models (bench/e2e/run_e2e.py:
# TorchScript models under seven allocators), then the "micro" and "e2e" sections of
# bench/RESULTS.md (the other sections are kept).
#
# Usage: bench/run_all.sh            full run (about 25 minutes on a 2-core machine)
#        QUICK=1 bench/run_all.sh    quick run (about 5 minutes on 2 idle cores; 9 measured
#                                    with other builds running)
# Environment: BUILD_DIR (default <repo>/build-bench; configured with libtorch on),
#   E2E_ROUNDS, E2E_CELLS (see bench/e2e/run_e2e.py) to override the e2e matrix.
# The first run also makes the models (scripts/make_models.py, a few minutes; kept
# in BUILD_DIR/models). Exits non-zero when a run fails or an output is wrong.
set -euo pipefail
export LC_ALL=C
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build-bench}
quick=${QUICK:-0}
started=$SECONDS

configure_build "$build" -DREPLAYALLOC_BUILD_BENCH=ON -DREPLAYALLOC_WITH_TORCH=ON \
  -DREPLAYALLOC_BUILD_TESTS=OFF -DREPLAYALLOC_SANITIZER_TESTS=OFF
py=$(torch_python)  # before the long runs: a missing torch fails here
cmake --build "$build" --target pair_bench hotpath_callgrind demo_inference replayalloc_preload \
  replayalloc_torch_shared e2e_driver

# ---- micro ------------------------------------------------------------------------------
micro_status=0
if [[ $quick == 1 ]]; then
  BUILD_DIR=$build "$root/bench/run_micro.sh" --quick --no-demo || micro_status=$?
else
  BUILD_DIR=$build "$root/bench/run_micro.sh" || micro_status=$?
fi

# ---- e2e --------------------------------------------------------------------------------
scratch_dir
meta=$tmp/meta
e2e_args=(--build "$(rel "$build")" --out "$(rel "$build")/e2e-runs.jsonl")
[[ $quick == 1 ]] && e2e_args+=(--quick)
[[ -n ${E2E_ROUNDS:-} ]] && e2e_args+=(--rounds "$E2E_ROUNDS")
[[ -n ${E2E_CELLS:-} ]] && e2e_args+=(--cells "$E2E_CELLS")
{
  machine_meta "$build"
  echo "torch_version=$(dpkg-query -W -f='${Version}' libtorch1.13 2> /dev/null || echo 1.13)"
  echo "blas=$(blas_name)"
  echo "e2e_cmd=$([[ $quick == 1 ]] && echo "QUICK=1 ")bench/run_all.sh, i.e. bench/e2e/run_e2e.py ${e2e_args[*]}"
} > "$meta"
status=0
(cd "$root" && "$py" bench/e2e/run_e2e.py "${e2e_args[@]}") || status=$?
echo "load_after=$(load_average)" >> "$meta"
update_results e2e "$results" --meta "$meta" --e2e-runs "$build/e2e-runs.jsonl"
echo "== run_all.sh: done in $((SECONDS - started)) s$([[ $status != 0 ]] && echo ", with FAILED runs (see RESULTS.md)")"
[[ $micro_status != 0 ]] && echo "== run_all.sh: a micro run failed (see the micro section)" && status=1
exit "$status"
