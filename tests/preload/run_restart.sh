#!/usr/bin/env bash
# REPLAYALLOC_PLAN_DIR across restarts: the first run records, plans and saves; a
# restarted run loads the plan and replays from its first iteration (no recording);
# a corrupt file, a plan of another version and a program that allocates differently
# under the same key are each refused with a message and the key recorded again,
# never a wrong byte.
# Usage: run_restart.sh PRELOAD_LIBRARY RESTART_PROGRAM
set -uo pipefail
lib=$1 prog=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

run() {  # run SCALE: the program's output, stderr included
  LD_PRELOAD="$lib" REPLAYALLOC_MODE=replay REPLAYALLOC_MIN_SIZE=0 REPLAYALLOC_VERBOSE=2 \
    REPLAYALLOC_PLAN_DIR="$dir/plans" "$prog" 6 "$1" 2>&1
}
. "$(dirname "$0")/plan_checks.sh"

out=$(run 1); rc=$?; clean first "$out" $rc
expect first "$out" recordings -ge 1
expect first "$out" plans -eq 1
n=$(ls "$dir/plans" | grep -c '\.raplan$')
[ "$n" -eq 1 ] && echo "ok    first: one plan file saved" || { echo "FAIL  first: $n plan files"; fail=1; }
first_hits=$(field slab_hits "$out")

out=$(run 1); rc=$?; clean restart "$out" $rc
expect restart "$out" plans_loaded -eq 1
expect restart "$out" recordings -eq 0
# Every iteration replayed: 6 iterations x 48 slab allocations (of 49: the output
# outlives the iteration and goes to the backend, as planned), none recorded.
expect restart "$out" slab_hits -eq 288
expect restart "$out" fallbacks -eq 0
must_say restart "$out" "plan loaded from"
echo "      (first run: $first_hits slab hits; restarted: $(field slab_hits "$out"))"

# The same program at a larger shape: the loaded plan serves what fits, the larger
# requests fall back (too_large), and the plan grows to the envelope of both shapes
# (Note [Envelope]); nothing is recorded from scratch.
out=$(run 3); rc=$?; clean larger-shape "$out" $rc
expect larger-shape "$out" plans_loaded -eq 1
# (grown, or re-recorded when the larger sizes happen to equal other slots' sizes)
g=$(( $(field plans_grown "$out") + $(field rerecords "$out") ))
[ "$g" -eq 1 ] && echo "ok    larger-shape: the plan grew or was recorded again" || { echo "FAIL  larger-shape: grown+rerecords=$g"; fail=1; }
# ... and then at the smaller shape again: every planned allocation from the slab.
out=$(run 1); rc=$?; clean smaller-again "$out" $rc
expect smaller-again "$out" plans_loaded -eq 1
expect smaller-again "$out" slab_hits -eq 288

# Another program under the same key (another allocation sequence): the loaded plan
# is refused after one iteration; the key is recorded and planned again.
out=$(RESTART_OTHER=1 run 1); rc=$?; clean other-program "$out" $rc
expect other-program "$out" plans_loaded -eq 1
expect other-program "$out" rerecords -eq 1
must_say other-program "$out" "does not match this program"

# The plan of the other program was saved over the file; put back a corrupt one.
f=$(ls "$dir"/plans/*.raplan)
printf 'garbage' | dd of="$f" bs=1 seek=100 conv=notrunc status=none
out=$(run 1); rc=$?; clean corrupt "$out" $rc
expect corrupt "$out" plans_loaded -eq 0
expect corrupt "$out" plan_files_ignored -eq 1
expect corrupt "$out" plans -eq 1
must_say corrupt "$out" "checksum mismatch"

# A file truncated to nothing, and one that is not a plan at all.
: > "$f"
out=$(run 1); rc=$?; clean empty "$out" $rc
expect empty "$out" plan_files_ignored -eq 1
must_say empty "$out" "ignored"

# A directory that cannot be used: a clear message, the program unaffected.
out=$(LD_PRELOAD="$lib" REPLAYALLOC_MODE=replay REPLAYALLOC_PLAN_DIR=/proc/nonexistent/x "$prog" 6 1 2>&1); rc=$?
clean bad-dir "$out" $rc
must_say bad-dir "$out" "REPLAYALLOC_PLAN_DIR='/proc/nonexistent/x' cannot be used"

exit $fail
