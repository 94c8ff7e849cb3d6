#!/usr/bin/env bash
# Check mode (REPLAYALLOC_CHECK=1, Note [Check mode]) never stops a correct program, in
# any mode: check_program.c (issue 33's program, and its variants that mark their own
# iterations and change their sizes halfway) under the LD_PRELOAD library in auto mode,
# explicit iterations (in replay and in auto mode), record mode and replay mode. Each
# run must exit 0 with the output of the program run without the library; where the
# library replays, check mode must replay as much as it does without the check (the
# checker looks at the replay the program gets, not at another one).
# Usage: run_check_mode.sh PRELOAD_LIBRARY CHECK_PROGRAM
set -uo pipefail
lib=$1 prog=$2
fail=0
field() { sed -n 's/.*"'"$1"'":\([0-9]*\).*/\1/p' <<<"$2" | tail -n 1; }

# MODE ARGS: the runs, as "mode|program arguments"
runs=(
  "auto|"             # the issue's program as filed
  "auto|shift"        # a plan retired; its slab released by the program's frees
  "auto|mark"         # explicit iterations in the preload library's default mode
  "auto|mark shift"
  "replay|mark"       # explicit
  "replay|mark shift"
  "replay|"           # replay mode, nothing marked
  "record|mark"
  "record|"
)

for r in "${runs[@]}"; do
  mode=${r%%|*} args=${r#*|}
  name="[$mode${args:+ $args}]"
  # shellcheck disable=SC2086
  want=$("$prog" $args 2>&1); want_rc=$?
  # shellcheck disable=SC2086
  plain=$(LD_PRELOAD="$lib" REPLAYALLOC_MODE=$mode REPLAYALLOC_STATS=stderr "$prog" $args 2>&1)
  # shellcheck disable=SC2086
  got=$(LD_PRELOAD="$lib" REPLAYALLOC_MODE=$mode REPLAYALLOC_CHECK=1 REPLAYALLOC_STATS=stderr \
    "$prog" $args 2>&1); rc=$?
  out=$(grep -v '^{' <<<"$got")
  if [ "$rc" -ne "$want_rc" ] || [ "$out" != "$want" ]; then
    echo "FAIL  $name: exit $rc, output:"; echo "$got"; echo "  without the library: $want"
    fail=1
    continue
  fi
  hits=$(field slab_hits "$got") plain_hits=$(field slab_hits "$plain")
  if [ "${hits:-0}" != "${plain_hits:-0}" ]; then
    echo "FAIL  $name: $hits slab hits under check mode, $plain_hits without"
    fail=1
    continue
  fi
  echo "ok    $name: exit 0, '$out', ${hits:-0} slab hits with and without the check"
done
exit $fail
