# bench/lib.sh: what the benchmark scripts share. Sourced, never run:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"       (bench/*.sh)
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"    (bench/*/*.sh)
# It sets `root` (the repository, absolute) and `results` (bench/RESULTS.md) and defines
# the functions below; it sets no shell options and runs nothing else, so a script keeps
# its own `set -e` or not. Plain bash: it also works on the GPU machine, which has no
# Debian packages. Sections of RESULTS.md are written by bench/update_results.py only.
# shellcheck shell=bash

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC2034  # for the scripts that source this file
results=$root/bench/RESULTS.md

# die MESSAGE...: prints "SCRIPT: MESSAGE" on stderr and exits 1 (from a $(...) too:
# `x=$(f) || exit 1` where the script runs without set -e).
die() {
  echo "${0##*/}: $*" >&2
  exit 1
}

# rel PATH: PATH relative to the repository, for the commands written into RESULTS.md.
rel() { echo "${1#"$root"/}"; }

# ---- Build folders -----------------------------------------------------------------------

# cache_value BUILD NAME: the value of CMake cache entry NAME in the build folder BUILD
# (empty when unset).
cache_value() { sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" | head -n1; }

# configure_build BUILD [-DNAME=VALUE...]: makes BUILD a configured build folder.
# Without a CMakeCache.txt there, configures it (Ninja, RelWithDebInfo, then the options);
# with one, re-runs cmake only for the options whose cached value differs, so a folder
# someone configured keeps everything else.
configure_build() {
  local build=$1 opt name value
  shift
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
    return
  fi
  local changed=()
  for opt in "$@"; do
    name=${opt#-D}; value=${name#*=}; name=${name%%=*}; name=${name%%:*}
    [[ $(cache_value "$build" "$name") == "$value" ]] || changed+=("$opt")
  done
  if (( ${#changed[@]} )); then cmake "${changed[@]}" "$build"; fi
}

# build_targets BUILD TARGET...: builds the targets in the build folder BUILD, unless
# BENCH_PREBUILT=1 says BUILD already holds them (the GPU machine, which cannot configure
# the project: bench/gpu/run_lent.sh lays prebuilt binaries out as a build folder).
build_targets() {
  local build=$1
  shift
  [[ ${BENCH_PREBUILT:-0} == 1 ]] && return
  cmake --build "$build" --target "$@" > /dev/null
}

# preload_library BUILD, torch_library BUILD: replayalloc's LD_PRELOAD library and its
# libtorch CPU allocator library in the build folder BUILD (built or not).
preload_library() { echo "$1/hooks/libreplayalloc_preload.so"; }
torch_library() { echo "$1/integrations/pytorch/libreplayalloc_torch.so"; }

# require_file PATH HINT: dies with "PATH missing (HINT)" unless PATH exists.
require_file() { [[ -e $1 ]] || die "$1 missing ($2)"; }

# ---- Allocators and interpreters ---------------------------------------------------------

# allocator_library NAME: the shared library of a general-purpose allocator the
# benchmarks preload, from its Debian package (scripts/setup.sh installs them): jemalloc,
# tcmalloc (gperftools' minimal) or mimalloc. Prints the path, whether or not it exists.
# ALLOCATOR_LIBDIR overrides the folder (the GPU machine: .gpu/lib, bench/gpu/prepare.sh).
allocator_library() {
  local libdir
  # Debian's multiarch folder: x86_64-linux-gnu here
  libdir=${ALLOCATOR_LIBDIR:-/usr/lib/$(uname -m)-linux-gnu}
  case $1 in
    jemalloc) echo "$libdir/libjemalloc.so.2" ;;
    tcmalloc) echo "$libdir/libtcmalloc_minimal.so.4" ;;
    mimalloc) echo "$libdir/libmimalloc.so.2" ;;
    *) die "allocator_library: no library for '$1'" ;;
  esac
}

# torch_python [CANDIDATE...]: prints the first interpreter that imports torch and
# torchvision (about 2 s per candidate tried); dies when none does. Default candidates:
# Debian's /usr/bin/python3, whose torch is the libtorch the build links, then the
# python3 on PATH. The GPU machine's scripts pass `python3 /usr/bin/python3`.
torch_python() {
  local py
  (( $# )) || set -- /usr/bin/python3 python3
  for py in "$@"; do
    if command -v "$py" > /dev/null && "$py" -c 'import torch, torchvision' 2> /dev/null; then
      command -v "$py"
      return 0
    fi
  done
  die "none of $* imports torch and torchvision (scripts/setup.sh installs Debian's)"
}

# rotated ROUND NAME...: the names, one a line, rotated by ROUND - 1 (ROUND from 1), the
# order in which a round runs the allocators, so that none always runs first.
rotated() {
  local r=$1
  shift
  local names=("$@") k
  k=$(( (r - 1) % ${#names[@]} ))
  printf '%s\n' "${names[@]:k}" "${names[@]:0:k}"
}

# ---- The machine block -------------------------------------------------------------------

# utc_now: the date and time as RESULTS.md gives them, "2026-11-24 07:43 UTC".
utc_now() { date -u '+%Y-%m-%d %H:%M UTC'; }

# load_average: the 1, 5 and 15 minute load averages, "1.00 0.64 0.52".
load_average() { cut -d' ' -f1-3 /proc/loadavg; }

# cpu_model: the CPU's model name, "AMD EPYC" (/proc/cpuinfo, else lscpu).
cpu_model() {
  local cpu
  cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  echo "${cpu:-$(lscpu | sed -n 's/^Model name: *//p' | head -n1)}"
}

# source_commit: the repository's short commit, "+ uncommitted changes" when the working
# tree differs from it; outside git (the GPU machine gets the working tree alone) what
# bench/gpu/prepare.sh wrote in .gpu/commit, else "unknown".
source_commit() {
  local commit
  if ! commit=$(git -C "$root" rev-parse --short HEAD 2> /dev/null); then
    cat "$root/.gpu/commit" 2> /dev/null || echo unknown
    return
  fi
  # bench/RESULTS.md aside: the benchmarks write it, so a run after another would
  # otherwise call the sources it measured uncommitted.
  git -C "$root" diff --quiet HEAD -- . ':(exclude)bench/RESULTS.md' 2> /dev/null || commit="$commit + uncommitted changes"
  echo "$commit"
}

# machine_meta BUILD: the machine and source lines of a --meta file for
# bench/update_results.py (KEY=VALUE: date, nproc, cpu, kernel, load_before, commit,
# build_type, compiler), BUILD being the build folder measured. A script appends
# load_after and its own keys (commands, rounds) to the same file.
machine_meta() {
  echo "date=$(utc_now)"
  echo "nproc=$(nproc)"
  echo "cpu=$(cpu_model)"
  echo "kernel=$(uname -r)"
  echo "load_before=$(load_average)"
  echo "commit=$(source_commit)"
  echo "build_type=$(cache_value "$1" CMAKE_BUILD_TYPE)"
  echo "compiler=$("$(cache_value "$1" CMAKE_CXX_COMPILER)" --version | head -n1)"
}

# blas_name: libtorch's BLAS, whichever Debian's alternatives point libblas.so.3 at.
blas_name() {
  local blas
  blas=$(readlink -f "/usr/lib/$(uname -m)-linux-gnu/libblas.so.3" 2> /dev/null || true)
  case $blas in
    *openblas-pthread*) echo "OpenBLAS $(dpkg-query -W -f='${Version}' libopenblas0-pthread 2> /dev/null), 1 thread" ;;
    *openblas*) echo "OpenBLAS, 1 thread" ;;
    */blas/*) echo "reference BLAS (Debian's generic libblas3)" ;;
    *) echo "BLAS ${blas:-unknown}" ;;
  esac
}

# median: the median of the numbers on standard input, one per line.
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# ---- Results -----------------------------------------------------------------------------

# update_results SECTION ARGS...: bench/update_results.py, which writes one section of
# RESULTS.md (micro, demo, e2e from raw results; `text RESULTS --name NAME --body FILE`
# a section a script composed). Needs no torch: the first python3 on PATH.
update_results() { python3 "$root/bench/update_results.py" "$@"; }

# run_e2e_section BUILD PYTHON ROUNDS CELLS NAME TITLE COMMAND [RESULTS]: runs
# bench/e2e/run_e2e.py over CELLS and writes its RESULTS.md section NAME ("End to end:
# TITLE"), saying COMMAND made it; returns run_e2e.py's status. pre: scratch_dir.
run_e2e_section() {
  local build=$1 py=$2 rounds=$3 cells=$4 name=$5 title=$6 cmd=$7 results_file=${8:-$root/bench/RESULTS.md}
  local status=0
  machine_meta "$build" > "$tmp/meta"
  {
    echo "e2e_cmd=$cmd, i.e. bench/e2e/run_e2e.py --rounds $rounds --cells $cells"
    echo "e2e_title=$title"
    echo "torch_version=$("$py" -c 'import torch; print(torch.__version__)')"
    echo "blas=$(blas_name)"
  } >> "$tmp/meta"
  (cd "$root" && "$py" bench/e2e/run_e2e.py --build "$build" --out "$tmp/runs.jsonl" --rounds "$rounds" --cells "$cells") || status=$?
  echo "load_after=$(load_average)" >> "$tmp/meta"
  update_results e2e "$results_file" --meta "$tmp/meta" --e2e-runs "$tmp/runs.jsonl" --name "$name"
  return $status
}

# scratch_dir: makes a temporary folder, $tmp, removed when the script exits (an EXIT
# trap: a script that sets one of its own removes $tmp there).
scratch_dir() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
}
