#!/usr/bin/env bash
# A request stream that never repeats (bench/micro/never_repeats.cc) under the
# LD_PRELOAD library steps aside (invariant 8, allocator/DESIGN.md): with one key marked
# per request the key is given up (Note [Setting aside]) after a bounded number of
# plans; in auto mode the thread stops watching (Note [Auto mode rests]). The output is
# the same as without the library. Speed is measured in bench/run_never_repeats.sh, not
# here.
# Usage: run_never_repeats.sh PRELOAD_LIBRARY PROGRAM
set -uo pipefail
lib=$1 prog=$2
fail=0
. "$(dirname "$0")/plan_checks.sh"
want=$(LD_PRELOAD="$lib" REPLAYALLOC_MODE=off "$prog" 3000 | grep "^checksum")  # jemalloc alone

out=$(LD_PRELOAD="$lib" REPLAYALLOC_VERBOSE=0 "$prog" 3000 explicit 2>&1)
[ "$(grep '^checksum' <<<"$out")" = "$want" ] && echo "ok    explicit: same output" || { echo "FAIL  explicit: output differs"; fail=1; }
expect explicit "$out" keys_given_up -ge 1
expect explicit "$out" plans -le 6
expect explicit "$out" iterations_set_aside -ge 2500

out=$(LD_PRELOAD="$lib" REPLAYALLOC_VERBOSE=0 "$prog" 3000 2>&1)
[ "$(grep '^checksum' <<<"$out")" = "$want" ] && echo "ok    auto: same output" || { echo "FAIL  auto: output differs"; fail=1; }
# ~120,000 allocations in which no size recurs: the watcher rests after the first 512
# of its watch (Note [Rare sizes said early]) and after each glance of 512 that follows
# a rest (16,384, then 32,768 and 65,536: Note [A glance after a rest]), not once after
# 65,536.
expect auto "$out" auto_rests -ge 3
expect auto "$out" plans -eq 0
exit $fail
