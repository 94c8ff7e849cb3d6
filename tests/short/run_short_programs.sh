#!/usr/bin/env bash
# Short programs give the same slab hits on every run, under load (Note [Plans that
# arrive in time]): each of the C program (linked, and under the LD_PRELOAD library),
# the C++ program and, when given, the Python package's program runs RUNS times (20) in a
# row beside two busy loops, with the defaults (the planner thread on), and must print
# its expected hits every time.
# Usage: run_short_programs.sh C_PROGRAM CXX_PROGRAM PRELOAD_LIBRARY [PYTHON TORCH_LIBRARY]
set -uo pipefail
c_program=$1 cxx_program=$2 preload=$3 python=${4:-} torch_library=${5:-}
runs=${RUNS:-20}
here=$(cd "$(dirname "$0")" && pwd)
busy() { while :; do :; done; }
busy & b1=$!
busy & b2=$!
trap 'kill $b1 $b2 2> /dev/null' EXIT
status=0
# check NAME EXPECTED COMMAND...: runs COMMAND $runs times, every output must be EXPECTED.
check() {
  local name=$1 expected=$2 out outs=()
  shift 2
  for _ in $(seq 1 "$runs"); do
    out=$("$@" 2> /dev/null) || out="exit $?"
    outs+=("$out")
  done
  if printf '%s\n' "${outs[@]}" | grep -qvx -- "$expected"; then
    echo "FAIL $name: slab hits in $runs runs: ${outs[*]} (expected $expected every time)"
    status=1
  else
    echo "ok   $name: $expected slab hits in each of $runs runs"
  fi
}
unset REPLAYALLOC_BACKGROUND_PLANNING REPLAYALLOC_INLINE_PLAN_MAX REPLAYALLOC_MODE
check "C API" 8 "$c_program"
check "C API under LD_PRELOAD" 8 env LD_PRELOAD="$preload" "$c_program"
check "C++ API" 4 "$cxx_program"
if [[ -n $python && -n $torch_library ]]; then
  check "Python package" 4 env PYTHONPATH="$here/../../integrations/pytorch/python" \
    REPLAYALLOC_LIBRARY="$torch_library" "$python" "$here/short_program.py"
fi
exit $status
