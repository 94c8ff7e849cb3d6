#!/usr/bin/env bash
# Installs the Debian 12 packages replayalloc needs, when they are missing.
# Idempotent and quiet: prints one line when everything is already there.
# Usage: scripts/setup.sh [--main-job] [--onnx]   (run as root, or with sudo available)
set -euo pipefail

# What the main job (scripts/demo.sh) needs: build the libraries, make a TorchScript
# ResNet-50 with Python's torch, run it through libtorch.
main_job_packages=(
  # toolchain
  g++ cmake ninja-build pkg-config
  # the allocator's dependencies; Google Benchmark, which bench/ (the main job's folder)
  # is built with
  libjemalloc-dev libabsl-dev libbenchmark-dev
  # PyTorch: libtorch for the C++ integration, Debian's python3 torch and torchvision for
  # the model scripts
  libtorch-dev python3-torch python3-torchvision
  # an optimised BLAS for libtorch (Debian's alternatives switch libblas.so.3 to it):
  # with the reference BLAS the benchmark models spend >70% of their time in it
  libopenblas0-pthread
)
# What only the tests and benchmarks add (scripts/test.sh).
test_packages=(
  # dpkg-source, which unpacks Abseil's source package below (the LD_PRELOAD library)
  dpkg-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev valgrind strace
  # programs the LD_PRELOAD tests run preloaded; allocators the benchmarks compare with
  git sqlite3 perl jq mawk bc libtcmalloc-minimal4 libmimalloc2.0
  # the Python package's wheel, built and installed offline (pip wheel
  # --no-build-isolation) and tested in a fresh virtual environment (install.wheel)
  python3-setuptools python3-wheel python3-pip python3-venv
  # the Debian packages' checker (install.debian_packages runs it on cpack's packages)
  lintian
  # the planner's exact mode (an integer program solved by GLPK), the viz render test
  # (headless Chromium), fuzzing (clang's libFuzzer runtime) and profiling
  glpk-utils chromium clang libclang-rt-14-dev linux-perf
)

# Groups: everything by default; --main-job only what the main job needs (and no
# Abseil source); --onnx adds what bench/run_onnx_generation.sh needs (Node.js, and npm
# where it does not come with it, to install onnxruntime-node).
packages=("${main_job_packages[@]}" "${test_packages[@]}")
abseil_source=1
for arg in "$@"; do
  case $arg in
    --main-job) packages=("${main_job_packages[@]}"); abseil_source=0 ;;
    --onnx) packages+=(nodejs); command -v npm > /dev/null || packages+=(npm) ;;
    *) echo "setup: unknown option '$arg' (known: --main-job, --onnx)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Abseil's Debian source package, of the installed libabsl-dev's version, unpacked
# with Debian's patches under $abseil_src_root: the LD_PRELOAD library compiles the
# Abseil pieces it needs from it as position-independent code and carries them hidden
# inside (libabsl-dev's archives are built for executables: Note [Static Abseil],
# cmake/static_abseil.cmake). Fetched with apt-get source through a private list of
# deb-src entries made from the system's own deb entries; the system's apt
# configuration is not changed. Without it the library links Abseil's shared libraries.
abseil_src_root=${REPLAYALLOC_ABSEIL_SRC_ROOT:-/usr/local/src/replayalloc}
fetch_abseil_source() {
  local version dir work
  [ "$abseil_source" = 1 ] || return 0
  version=$(dpkg-query -W -f='${Version}' libabsl-dev 2>/dev/null) || return 0
  dir=$abseil_src_root/abseil-$version
  [ -f "$dir/absl/base/options.h" ] && return 0
  if [ "$(id -u)" -ne 0 ] && [ ${#as_root[@]} -eq 0 ]; then
    echo "setup: not root: Abseil's source package not fetched; the LD_PRELOAD library will load Abseil's shared libraries" >&2
    return 0
  fi
  echo "setup: fetching Abseil's source package $version (apt-get source) into $dir"
  work=$(mktemp -d)
  mkdir -p "$work/sources" "$work/lists/partial"
  # deb-src entries beside each deb entry of the system's sources (both formats).
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" > "$work/sources/$(basename "$f")"
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    sed -n 's/^deb \(.*\)/deb-src \1/p' > "$work/sources/system.list" || true
  local apt_opts=(-q -o Dir::Etc::SourceList="$work/sources/system.list"
                  -o Dir::Etc::SourceParts="$work/sources" -o Dir::State::Lists="$work/lists")
  if "${as_root[@]}" apt-get "${apt_opts[@]}" update > "$work/log" 2>&1 &&
     (cd "$work" && "${as_root[@]}" apt-get "${apt_opts[@]}" source "abseil=$version" >> "$work/log" 2>&1); then
    "${as_root[@]}" mkdir -p "$abseil_src_root"
    "${as_root[@]}" rm -rf "$dir"
    "${as_root[@]}" mv "$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'abseil-*' | head -n 1)" "$dir"
  else
    tail -n 5 "$work/log" >&2
    echo "setup: could not fetch Abseil's source package: the LD_PRELOAD library will load Abseil's shared libraries instead" >&2
  fi
  "${as_root[@]}" rm -rf "$work"
}

as_root=()
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
fi

if [ ${#missing[@]} -eq 0 ]; then
  fetch_abseil_source
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  if [ ${#as_root[@]} -eq 0 ]; then
    echo "setup: missing packages (${missing[*]}) and not root; run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fetch_abseil_source
echo "setup: done"
