#!/usr/bin/env bash
# The code a forked child runs in the library's fork handler lies together (Note [A
# forked child's code together], allocator/support/config.h): fork() copies no page
# table of code, so the child faults once in each 64 KiB window of code it runs, and a
# shell forks for every command. The handler's functions, from runtime/ and backend/,
# must lie within one 4 KiB span of the LD_PRELOAD library's code; they lay in three
# windows 64-200 KiB apart before.
# Usage: check_fork_child_code.sh LIBRARY
set -uo pipefail
lib=${1:?usage: check_fork_child_code.sh LIBRARY}
command -v nm > /dev/null || { echo "SKIP: no nm"; exit 0; }
symbols=(
  "replayalloc::detail::(anonymous namespace)::child_after_fork()"
  "replayalloc::detail::engine::postfork_child()"
  "replayalloc::detail::backend::front_cache_postfork(bool, bool)"
  "replayalloc::detail::backend::front::forked_child(bool)"
  "replayalloc::detail::backend::fallback_start_postfork_child()"
)
table=$(nm -C "$lib") || { echo "FAIL: nm could not read $lib"; exit 1; }
low='' high=''
for s in "${symbols[@]}"; do
  a=$(awk -v s="$s" '{ addr = $1; $1 = ""; $2 = ""; sub(/^  /, ""); if ($0 == s) { print addr; exit } }' <<< "$table")
  if [[ -z $a ]]; then
    echo "FAIL: $s is not in $lib's symbol table"
    exit 1
  fi
  v=$((16#$a))
  printf '  %-70s 0x%x\n' "$s" "$v"
  if [[ -z $low ]] || (( v < low )); then low=$v; fi
  if [[ -z $high ]] || (( v > high )); then high=$v; fi
done
span=$((high - low))
echo "the fork child handler's functions span $span bytes (at most 4096)"
if (( span > 4096 )); then
  echo "FAIL: a function the child handler runs is not marked REPLAYALLOC_FORK_CHILD_CODE, or the linker did not gather .text.sorted.*"
  exit 1
fi
echo "PASS"
