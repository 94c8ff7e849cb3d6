#!/usr/bin/env bash
# bench/run_e2e_varlen.sh: the end-to-end matrix's variable-length cells (Note
# [Envelope]): the BERT-like encoder (bert_varlen, 2 layers of BERT-base's width) with
# each inference's sequence length drawn from 16..256 (bench/e2e/e2e_driver.cc
# --lengths), T = 1, 2, 4, under every allocator of bench/e2e/run_e2e.py. Writes the
# RESULTS.md section "End to end: shapes that change". Usage: bench/run_e2e_varlen.sh [ROUNDS]
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-3}
build=$root/build
cmake --build "$build" --target e2e_driver replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
scratch_dir
cells="bert_varlen:1:10:30,bert_varlen:2:10:20,bert_varlen:4:8:10"
status=0
run_e2e_section "$build" "$py" "$rounds" "$cells" e2e-varlen \
  "shapes that change (a sequence length drawn per inference from 16..256)" \
  "bench/run_e2e_varlen.sh $rounds" || status=$?
exit $status
