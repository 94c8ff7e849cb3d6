#!/usr/bin/env bash
# The malloc contract under the LD_PRELOAD library, against glibc: contract_probe runs
# without the library (glibc must pass its checks: the expectations are glibc's) and
# with it, in each run mode, and in each mode that serves from slabs under check mode
# (REPLAYALLOC_CHECK=1, which must never stop a correct program); every run must pass
# and print the same lines.
# Usage: run_contract.sh CONTRACT_PROBE PRELOAD_LIBRARY
set -uo pipefail
probe=$1 lib=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

"$probe" > "$work/glibc.out" 2> "$work/glibc.err"
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL  glibc itself fails the probe's expectations (rc $rc):"
  grep FAIL "$work/glibc.out"
  fail=1
else
  echo "ok    glibc: $(grep -c ' ok$' "$work/glibc.out") checks pass"
fi

# +nofront: the fallback without its front cache (REPLAYALLOC_FRONT_CACHE=0), whose plain
# malloc is jemalloc's, which the inline path gives requests under 16 bytes too (Note
# [Below the minimum, inline]: rounded up there, jemalloc's 8-byte class being aligned
# to 8).
for mode in replay auto record off replay+check auto+check record+check auto+nofront off+nofront; do
  check=0 front=1
  case $mode in *+check) check=1 ;; *+nofront) front=0 ;; esac
  LD_PRELOAD="$lib" REPLAYALLOC_MODE=${mode%+*} REPLAYALLOC_CHECK=$check REPLAYALLOC_FRONT_CACHE=$front \
    "$probe" > "$work/$mode.out" 2> "$work/$mode.err"
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL  [$mode] the probe fails under replayalloc (rc $rc):"
    grep FAIL "$work/$mode.out"
    sed 's/^/  stderr: /' "$work/$mode.err" | head -20
    fail=1
  elif ! diff -u "$work/glibc.out" "$work/$mode.out" > "$work/$mode.diff"; then
    echo "FAIL  [$mode] the output differs from glibc's:"
    head -40 "$work/$mode.diff"
    fail=1
  else
    echo "ok    [$mode] the same $(wc -l < "$work/$mode.out") lines as glibc; $(grep 'slab hits' "$work/$mode.err" || true)"
  fi
done
exit $fail
