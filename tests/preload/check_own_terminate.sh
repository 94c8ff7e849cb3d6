#!/usr/bin/env bash
# The LD_PRELOAD library's copy of libstdc++ terminates through the library's own handler
# and carries no demangler (Note [The copy's terminate handler], hooks/own_terminate.cc):
# its symbol table names replayalloc's own_terminate and neither libstdc++'s verbose
# terminate handler nor __cxa_demangle (whose tables the loader relocated at every start).
# Usage: check_own_terminate.sh LIBRARY
set -uo pipefail
lib=${1:?usage: check_own_terminate.sh LIBRARY}
command -v nm > /dev/null || { echo "SKIP: no nm"; exit 0; }
symbols=$(nm -C "$lib" 2>/dev/null) || { echo "FAIL: nm cannot read $lib"; exit 1; }
[[ -n $symbols ]] || { echo "FAIL: $lib has no symbol table"; exit 1; }
fail=0
if ! grep -q 'replayalloc::detail::own_terminate()' <<< "$symbols"; then
  echo "FAIL: $lib does not define replayalloc's own terminate handler"
  fail=1
fi
for name in '__cxa_demangle' '__gnu_cxx::__verbose_terminate_handler()'; do
  if grep -qF " $name" <<< "$symbols"; then
    echo "FAIL: $lib carries libstdc++'s $name"
    fail=1
  fi
done
[[ $fail == 0 ]] && echo PASS
exit $fail
