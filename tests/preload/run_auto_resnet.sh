#!/usr/bin/env bash
# Auto mode on an unmodified Python ResNet-50 inference loop (Debian's python3):
# outputs bit-identical with and without the preloaded library, and after at most 5
# warm-up iterations at least 95% of the allocations of at least REPLAYALLOC_MIN_SIZE
# served from a slab. Prints the figures. Exits 77 (skipped) without torch/torchvision.
# Usage: run_auto_resnet.sh PRELOAD_LIBRARY
set -uo pipefail
lib=$1
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! $py -c 'import torch, torchvision' 2>/dev/null; then
  echo "SKIP: torch/torchvision not importable by $py (apt install python3-torch python3-torchvision)"
  exit 77
fi
plain=$($py "$here/auto_resnet.py" 12 5) || { echo "FAIL: the plain run failed"; exit 1; }
pre=$(LD_PRELOAD="$lib" $py "$here/auto_resnet.py" 12 5) || { echo "FAIL: the preloaded run failed"; exit 1; }
echo "$pre" | grep -v '^slab share'
want=$(echo "$plain" | grep '^digest')
got=$(echo "$pre" | grep '^digest')
if [ "$want" != "$got" ]; then
  echo "FAIL: outputs differ: without $want, with $got"
  exit 1
fi
echo "outputs bit-identical ($want)"
share=$(echo "$pre" | awk '/^slab share/ {print $3}')
if ! awk -v s="$share" 'BEGIN { exit !(s >= 0.95) }'; then
  echo "FAIL: only $share of the allocations >= REPLAYALLOC_MIN_SIZE came from a slab (want >= 0.95)"
  exit 1
fi
echo "ok: slab share $share >= 0.95 after 5 warm-up iterations"
