#!/usr/bin/env bash
# The libFuzzer targets, built with clang and run for a bounded time.
#   run_fuzzers.sh build BUILD_DIR [CLANGXX]      configure tests/fuzz/clang, build
#   run_fuzzers.sh run BUILD_DIR TARGET SECONDS CORPUS_DIR
# A run starts from the committed corpus (read only: new inputs go to
# BUILD_DIR/corpus-new/TARGET) and fails on any crash, leak, timeout or broken
# promise, leaving the input in BUILD_DIR/artifacts/ to be added to the corpus.
# Exit 77 (skipped) when clang cannot link libFuzzer.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=$1 build=$2

case $cmd in
build)
  cxx=${3:-clang++}
  cc=${cxx/clang++/clang}
  command -v "$cxx" > /dev/null || { echo "skipped: no $cxx"; exit 77; }
  mkdir -p "$build"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' > "$build/probe.cc"
  if ! "$cxx" -fsanitize=fuzzer "$build/probe.cc" -o "$build/probe" 2> "$build/probe.err"; then
    echo "skipped: $cxx cannot link libFuzzer (install libclang-rt-dev):"
    cat "$build/probe.err"
    exit 77
  fi
  generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  CC=$cc CXX=$cxx cmake "${generator[@]}" -S "$here/clang" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
  cmake --build "$build" -j 2 || exit 1
  ;;
run)
  target=$3 seconds=$4 corpus=$5
  bin=$build/fuzz_$target
  [ -x "$bin" ] || { echo "no $bin: run '$0 build $build' first"; exit 1; }
  mkdir -p "$build/corpus-new/$target" "$build/artifacts"
  log=$build/$target.log
  "$bin" -max_total_time="$seconds" -seed=1 -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" \
    "$build/corpus-new/$target" "$corpus" > "$log" 2>&1
  rc=$?
  grep -E 'INITED|DONE|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log"
  if [ $rc -ne 0 ]; then
    echo "FAIL  fuzz_$target (rc $rc):"
    grep -E -A30 'ERROR|fuzz '"$target"':|SUMMARY' "$log" | head -60
    echo "The input is in $build/artifacts/; fix the bug, then add the input to $corpus."
    exit 1
  fi
  echo "ok    fuzz_$target: no crash in ${seconds}s"
  ;;
*)
  echo "usage: $0 build BUILD_DIR [CLANGXX] | run BUILD_DIR TARGET SECONDS CORPUS_DIR"
  exit 2
  ;;
esac
