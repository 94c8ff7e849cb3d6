#!/usr/bin/env bash
# The README's main job: set up, build, make a TorchScript ResNet-50 with random
# weights (once), and run it recorded, planned and replayed through libtorch's CPU
# allocator next to libtorch's own allocator, with its report. Then the
# allocator-only demo (an inference-shaped pattern through the C API).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --main-job
# The test suite is configured only where its GoogleTest is installed (scripts/test.sh
# installs it); the main job does not need it.
tests=OFF
pkg-config --exists gtest 2>/dev/null && tests=ON
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREPLAYALLOC_BUILD_TESTS=$tests >/dev/null
cmake --build build -j"$(nproc)" --target main_job demo_inference
/usr/bin/python3 scripts/make_models.py build/models resnet50
build/bench/torch/main_job build/models/resnet50.pt "$@"
echo
build/bench/demo_inference
