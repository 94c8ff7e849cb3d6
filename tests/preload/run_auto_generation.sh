#!/usr/bin/env bash
# Auto mode on LLM generation (Note [Requests of repeated steps], allocator/runtime/
# auto_detect.cc), under the LD_PRELOAD library, marking nothing: an unmodified Python
# loop (auto_generation.py: a GPT-2-shaped decoder, prompts of 8..64 tokens and 8..32
# new tokens drawn per request, Debian's python3) generates the same tokens with and
# without the library, and over the 40 requests after a warm-up of 20 at least 80% of
# the allocations of at least 4 KiB are served from a slab (92.4% measured; 0.0%
# before the detector took requests made of decode steps for iterations). Skipped
# (77) without torch.
# Usage: run_auto_generation.sh PRELOAD_LIBRARY
set -uo pipefail
lib=$1
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "skip: torch not importable by $py"; exit 77; }
fail=0
plain=$($py "$here/auto_generation.py" 60 20) || { echo "FAIL  the plain run failed"; exit 1; }
pre=$(LD_PRELOAD="$lib" $py "$here/auto_generation.py" 60 20) || { echo "FAIL  the preloaded run failed"; exit 1; }
if [ "$(grep '^digest' <<<"$plain")" = "$(grep '^digest' <<<"$pre")" ]; then
  echo "ok    tokens identical"
else
  echo "FAIL  tokens differ"; fail=1
fi
echo "$(grep '^after' <<<"$pre")"
share=$(awk '/^slab share/ {print $3}' <<<"$pre")
if awk -v s="${share:-0}" 'BEGIN { exit !(s >= 0.80) }'; then
  echo "ok    slab share $share >= 0.80"
else
  echo "FAIL  slab share ${share:-none} < 0.80"; echo "$pre"; fail=1
fi
exit $fail
