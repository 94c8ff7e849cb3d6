#!/usr/bin/env bash
# Auto mode on a generation loop whose key/value cache a host language holds
# (host_held_generation.cc, shaped like ONNX Runtime's under Node.js: the decode step's
# sizes grow token by token, the prefill has another structure, the outputs are copied
# into calloc'd buffers that a collector thread frees in batches), under the LD_PRELOAD
# library, marking nothing (Note [Anchored iterations], runtime/auto_detect.cc): no
# corruption, every calloc'd block zero, and over the second half of the requests at
# least 80% of the allocations of at least 4 KiB served from a slab (81.8% measured;
# 0.0% before iterations were anchored: the period of one step was found, its
# boundaries drifted off the steps at the first prefill, and it was given up), from a
# bounded number of plans and recordings. The prefill, three times a step's requests,
# is served past the step's plan by the long piece's key (Note [Long pieces between
# anchors], runtime/auto_iteration.h), and its four layers alike, found first as a period of
# sizes, are given up at once (Note [A period of sizes that stops at once]): 2,184
# fallbacks, 13 recordings and 0 slab blocks freed by the collector; 43d7fab: 7,826
# fallbacks (78.3%, 5,871 of them past the step's plan), 64 recordings, 3 such frees.
# Usage: run_auto_host_held.sh PRELOAD_LIBRARY HOST_HELD_GENERATION
set -uo pipefail
lib=$1 prog=$2
here=$(cd "$(dirname "$0")" && pwd)
fail=0
. "$here/plan_checks.sh"
out=$(LD_PRELOAD="$lib" REPLAYALLOC_VERBOSE=2 "$prog" 120 2>&1); rc=$?
clean host_held "$out" $rc
echo "host_held: $(grep '^slab share' <<<"$out")"
share_at_least host_held 0.80 "$out"
must_say host_held "$out" "begin at each request of 7008 bytes"
must_say host_held "$out" "planned 'auto/[0-9a-f]*/p[0-9]*/long'"
must_say host_held "$out" "its sizes stopped repeating at once"
expect host_held "$out" fallbacks -le 4000
expect host_held "$out" plans -le 16
expect host_held "$out" recordings -le 16
expect host_held "$out" remote_frees -eq 0
exit $fail
