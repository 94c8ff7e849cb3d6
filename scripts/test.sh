#!/usr/bin/env bash
# The README's test command: set up, build everything, run every test with ctest.
# Includes the AddressSanitizer+UBSan build of the whole suite and the
# ThreadSanitizer build of the concurrency tests (REPLAYALLOC_SANITIZER_TESTS).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# REPLAYALLOC_STATIC_ABSEIL=ON: the LD_PRELOAD library carries Abseil inside, from the
# source setup.sh fetched (Note [Static Abseil]); a missing source fails here, not later.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREPLAYALLOC_STATIC_ABSEIL=ON \
  -DREPLAYALLOC_BUILD_TESTS=ON >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
