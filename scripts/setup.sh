#!/usr/bin/env bash
# Installs the Debian 12 packages replayalloc needs, when they are missing.
# Idempotent and quiet: prints one line when everything is already there.
# Usage: scripts/setup.sh            (run as root, or with sudo available)
set -euo pipefail

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config
  # the allocator's dependencies
  libjemalloc-dev libabsl-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev valgrind
  # programs the LD_PRELOAD tests run preloaded; allocators the benchmarks compare with
  git sqlite3 perl libtcmalloc-minimal4 libmimalloc2.0
  # PyTorch: libtorch for the C++ integration, Debian's python3 torch for the Python
  # package, the model scripts and their tests
  libtorch-dev python3-torch python3-torchvision
  # an optimised BLAS for libtorch (Debian's alternatives switch libblas.so.3 to it):
  # with the reference BLAS the benchmark models spend >70% of their time in it
  libopenblas0-pthread
  # the planner's exact mode (an integer program solved by GLPK), the viz render test
  # (headless Chromium), fuzzing (clang's libFuzzer runtime) and profiling
  glpk-utils chromium clang libclang-rt-14-dev linux-perf
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "setup: missing packages (${missing[*]}) and not root; run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
