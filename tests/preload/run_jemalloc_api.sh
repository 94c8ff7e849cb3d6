#!/usr/bin/env bash
# jemalloc's non-standard API under the LD_PRELOAD library that carries its own
# jemalloc and libstdc++ (tests/preload/jemalloc_api.c; Note [The LD_PRELOAD library's
# own runtime], hooks/CMakeLists.txt): in auto mode, in check mode, with statistics
# at exit, with replayalloc off, without the front cache, with a MALLOC_CONF of the
# program's, and with the system's libjemalloc.so.2 loaded beside it; jemalloc's thread
# caches off where the front cache serves (EXPECT_TCACHE). Each run at most 120 s (a
# hang fails).
# Usage: run_jemalloc_api.sh PRELOAD_LIBRARY PROGRAM
set -uo pipefail
lib=$1 program=$2
fail=0
run() {  # run NAME PRELOAD [ENV...]
  local name=$1 preload=$2
  shift 2
  local out
  out=$(timeout 120 env "$@" PRELOAD_LIBRARY="$lib" LD_PRELOAD="$preload" "$program" 2>&1)
  local rc=$?
  if [ $rc -ne 0 ] || ! grep -qx 'jemalloc_api: ok' <<< "$out"; then
    echo "FAIL: $name (exit $rc)"
    echo "$out" | head -n 30
    fail=1
  else
    echo "ok: $name"
  fi
}
run "auto mode, nothing else loaded" "$lib" EXPECT_OWN_RUNTIME=1 EXPECT_TCACHE=0
run "check mode" "$lib" REPLAYALLOC_CHECK=1 EXPECT_OWN_RUNTIME=1 EXPECT_TCACHE=1
# Statistics at exit: the engine's atexit made at load, never inside glibc's atexit
# (Note [The engine made at load], hooks/preload.cc: this hung before).
run "REPLAYALLOC_STATS=stderr" "$lib" REPLAYALLOC_STATS=stderr REPLAYALLOC_STATS_FORMAT=text EXPECT_OWN_RUNTIME=1
run "REPLAYALLOC_MODE=off" "$lib" REPLAYALLOC_MODE=off EXPECT_OWN_RUNTIME=1 EXPECT_TCACHE=0
run "REPLAYALLOC_FRONT_CACHE=0" "$lib" REPLAYALLOC_FRONT_CACHE=0 EXPECT_TCACHE=1
# A program's MALLOC_CONF wins over the library's settings (Note [Thread caches left to
# the front cache], allocator/backend/jemalloc_backend.cc).
run "MALLOC_CONF=tcache:true" "$lib" MALLOC_CONF=tcache:true EXPECT_OWN_RUNTIME=1 EXPECT_TCACHE=1
# jemalloc's heap profiling calls exp, round and log: the library's own where it carries
# them (Note [The LD_PRELOAD library without libm], hooks/own_math.cc; EXPECT_NO_LIBM=1
# from ctest then), libm's otherwise.
run "MALLOC_CONF=prof:true" "$lib" MALLOC_CONF=prof:true,lg_prof_sample:10,prof_final:false EXPECT_OWN_RUNTIME=1 EXPECT_TCACHE=0
jemalloc=$(ldconfig -p 2>/dev/null | awk '/libjemalloc\.so\.2 .*x86-64/ {print $NF; exit}')
if [ -n "$jemalloc" ]; then
  run "libjemalloc.so.2 loaded after it" "$lib $jemalloc" EXPECT_NO_LIBM=0  # it needs libm
else
  echo "SKIPPED: libjemalloc.so.2 beside it (not installed)"
fi
exit $fail
