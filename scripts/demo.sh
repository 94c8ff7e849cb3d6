#!/usr/bin/env bash
# The README's main job: set up, build, and run the demo (an inference-shaped
# allocation pattern recorded, planned and replayed, with its report).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target demo_inference
build/bench/demo_inference "$@"
