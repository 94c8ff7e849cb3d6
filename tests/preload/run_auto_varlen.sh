#!/usr/bin/env bash
# Auto mode on services whose requests change shape (Note [Periods whose sizes change],
# runtime/auto_detect.h), under the LD_PRELOAD library, marking nothing:
#  1. a native service (varlen_service.cc: an encoder-shaped pass at a random sequence
#     length 16..256 per request, every block pattern-checked): no corruption, and over
#     the second half of the requests at least 90% of the allocations of at least 4 KiB
#     served from a slab, from a bounded number of plans; and again shaped like
#     PyTorch's (1b below);
#  2. the same kind of model in an unmodified Python loop (auto_varlen.py, a BERT-like
#     encoder through libtorch, Debian's python3; PyTorch's structure changes with the
#     shape, so its iterations are found between quiet points, Note [Iterations between
#     quiet points], and their regime is chosen by their first request, Note [Regimes by
#     first size]): outputs identical with and without the library, and over the 40
#     requests after 40 of warm-up at least 80% of the allocations of at least 4 KiB
#     served from a slab (85.4% measured). Skipped without torch.
# Usage: run_auto_varlen.sh PRELOAD_LIBRARY VARLEN_SERVICE
set -uo pipefail
lib=$1 prog=$2
here=$(cd "$(dirname "$0")" && pwd)
fail=0
. "$here/plan_checks.sh"

out=$(LD_PRELOAD="$lib" "$prog" 400 2>&1); rc=$?
clean native "$out" $rc
echo "native: $(grep '^slab share' <<<"$out")"
share_at_least native 0.90 "$out"
expect native "$out" plans -le 8
expect native "$out" recordings -le 12

# 1b. The same service shaped like PyTorch's (varlen_service.cc "shifting"): weights
#     live, posix_memalign(64) blocks, a few bytes-long ones where a scaling slot is
#     next, one more workspace past lengths 64 and 128. 1.6% from a slab when such a
#     tiny block may take a scaling slot; 94% when first sizes do not choose regimes.
out=$(LD_PRELOAD="$lib" "$prog" 400 shifting 2>&1); rc=$?
clean shifting "$out" $rc
echo "shifting: $(grep '^slab share' <<<"$out")"
share_at_least shifting 0.95 "$out"
expect shifting "$out" recordings -le 24

py=/usr/bin/python3
if $py -c 'import torch' 2>/dev/null; then
  plain=$($py "$here/auto_varlen.py" 80 40) || { echo "FAIL  python: the plain run failed"; fail=1; }
  pre=$(LD_PRELOAD="$lib" $py "$here/auto_varlen.py" 80 40) || { echo "FAIL  python: the preloaded run failed"; fail=1; }
  if [ "$(grep '^digest' <<<"$plain")" = "$(grep '^digest' <<<"$pre")" ]; then
    echo "ok    python: outputs identical"
  else
    echo "FAIL  python: outputs differ"; fail=1
  fi
  echo "python: $(grep '^after' <<<"$pre")"
  share_at_least python 0.80 "$pre"
else
  echo "skip  python: torch not importable by $py"
fi
exit $fail
