#!/usr/bin/env bash
# Builds, on this (CPU) machine, what the GPU machine runs, into .gpu/:
#   .gpu/gpu_tests                 the real-GPU test suite (tests/gpu)
#   .gpu/libreplayalloc_cuda.so    the pluggable allocator and Python package library
#   .gpu/libreplayalloc_preload.so the LD_PRELOAD library, CUDA runtime interposed
#   .gpu/bench/                    the standalone micro benchmarks the lent machine's
#                                  16 cores run (contention, threaded_stress:
#                                  bench/gpu/run_lent.sh)
#   .gpu/lib/                      the shared libraries they need that the GPU image
#                                  lacks (jemalloc, Abseil, the CUDA runtime), and the
#                                  allocators the many-core study preloads (jemalloc,
#                                  tcmalloc, mimalloc: bench/gpu/run_manycore.sh)
# The GPU image has CUDA and PyTorch but no Debian packages (no jemalloc, Abseil or
# GoogleTest) and no network, so the project cannot be configured there; the binaries
# are built here against the same CUDA major version (13) and carried.
set -euo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$root"
scripts/setup.sh
configure_build build-gpu -DREPLAYALLOC_GPU_TESTS=ON -DREPLAYALLOC_WITH_CUDA=ON \
  -DREPLAYALLOC_SANITIZER_TESTS=OFF -DREPLAYALLOC_BUILD_BENCH=OFF >/dev/null
cmake --build build-gpu -j"$(nproc)" --target gpu_tests replayalloc_cuda_shared replayalloc_preload
rm -rf .gpu && mkdir -p .gpu/lib
cp build-gpu/tests/gpu_tests build-gpu/integrations/cuda/libreplayalloc_cuda.so \
  build-gpu/hooks/libreplayalloc_preload.so .gpu/
for bin in .gpu/gpu_tests .gpu/libreplayalloc_cuda.so .gpu/libreplayalloc_preload.so; do
  ldd "$bin" | awk '/libabsl|libjemalloc|libcudart/ {print $3}' | xargs -r -I{} cp -L {} .gpu/lib/
done
mkdir -p .gpu/bench
for prog in contention threaded_stress; do  # no dependency but libc and libstdc++
  g++ -std=c++20 -O2 -g -pthread bench/micro/$prog.cc -o .gpu/bench/$prog -ldl
done
for a in jemalloc tcmalloc mimalloc; do cp -L "$(allocator_library $a)" .gpu/lib/; done
# The native CUDA route is compiled on the GPU machine against its torch
# (replayalloc.torch.native_cuda_module): it needs the generated version header too.
mkdir -p .gpu/include/replayalloc
cp build-gpu/include/replayalloc/version.h .gpu/include/replayalloc/
source_commit > .gpu/commit  # the device machine gets the working tree, not its history
echo "prepare: $(du -sh .gpu | cut -f1) in .gpu/ ($(ls .gpu/lib | wc -l) libraries)"
