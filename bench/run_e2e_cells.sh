#!/usr/bin/env bash
# bench/run_e2e_cells.sh: some cells of the end-to-end matrix, re-run on their own
# (after a change that touches only them: the small-request path and the LSTM cells,
# say), into a section of bench/RESULTS.md of their own; the full matrix's section is
# kept. The same runner, allocators and table as bench/run_all.sh's e2e part
# (bench/e2e/run_e2e.py).
#
# Usage: bench/run_e2e_cells.sh ROUNDS CELLS NAME TITLE
#   e.g. bench/run_e2e_cells.sh 5 lstm:1:8:16,lstm:2:8:12,lstm:4:8:8 e2e-lstm "the LSTM cells"
#   CELLS as bench/e2e/run_e2e.py --cells (MODEL:THREADS:WARMUP:ITERATIONS, comma-separated);
#   NAME the section (<!-- section: NAME -->), replaced in place or appended.
# Environment: BUILD_DIR (default <repo>/build). Exits non-zero when a run fails or an
# output differs from glibc's.
# shellcheck source=lib.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
(($# == 4)) || die "usage: bench/run_e2e_cells.sh ROUNDS CELLS NAME TITLE"
rounds=$1 cells=$2 name=$3 title=$4
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number (got '$rounds')"
[[ $name =~ ^[a-z0-9-]+$ ]] || die "NAME must be lower-case letters, digits and dashes (got '$name')"
build=${BUILD_DIR:-$root/build}
cmake --build "$build" --target e2e_driver replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
scratch_dir
run_e2e_section "$build" "$py" "$rounds" "$cells" "$name" "$title" \
  "bench/run_e2e_cells.sh $rounds $cells $name '$title'"
