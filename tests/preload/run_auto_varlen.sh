#!/usr/bin/env bash
# Auto mode on services whose requests change shape (Note [Periods whose sizes change],
# runtime/auto_detect.h), under the LD_PRELOAD library, marking nothing:
#  1. a native service (varlen_service.cc: an encoder-shaped pass at a random sequence
#     length 16..256 per request, every block pattern-checked): no corruption, and over
#     the second half of the requests at least 90% of the allocations of at least 4 KiB
#     served from a slab, from a bounded number of plans;
#  2. the same kind of model in an unmodified Python loop (auto_varlen.py, a BERT-like
#     encoder through libtorch, Debian's python3): outputs identical with and without
#     the library; the share served from a slab is printed, not asserted (PyTorch's
#     structure changes with the shape: its iterations are found between quiet points,
#     Note [Iterations between quiet points], but replay still deviates from the
#     recordings, README "Dynamic shapes"). Skipped without torch.
# Usage: run_auto_varlen.sh PRELOAD_LIBRARY VARLEN_SERVICE
set -uo pipefail
lib=$1 prog=$2
here=$(cd "$(dirname "$0")" && pwd)
fail=0
. "$here/plan_checks.sh"

out=$(LD_PRELOAD="$lib" "$prog" 400 2>&1); rc=$?
clean native "$out" $rc
share=$(awk '/^slab share/ {print $3}' <<<"$out")
echo "native: $(grep '^slab share' <<<"$out")"
awk -v s="${share:-0}" 'BEGIN { exit !(s >= 0.90) }' && echo "ok    native: slab share $share >= 0.90" \
  || { echo "FAIL  native: slab share $share < 0.90"; echo "$out"; fail=1; }
expect native "$out" plans -le 8
expect native "$out" recordings -le 12

py=/usr/bin/python3
if $py -c 'import torch' 2>/dev/null; then
  plain=$($py "$here/auto_varlen.py" 40 20) || { echo "FAIL  python: the plain run failed"; fail=1; }
  pre=$(LD_PRELOAD="$lib" $py "$here/auto_varlen.py" 40 20) || { echo "FAIL  python: the preloaded run failed"; fail=1; }
  if [ "$(grep '^digest' <<<"$plain")" = "$(grep '^digest' <<<"$pre")" ]; then
    echo "ok    python: outputs identical"
  else
    echo "FAIL  python: outputs differ"; fail=1
  fi
  echo "python: $(grep '^after' <<<"$pre")"
else
  echo "skip  python: torch not importable by $py"
fi
exit $fail
