#!/usr/bin/env bash
# The installed tree, used the ways the README's "Installing" section says: installs
# BUILD_DIR into a temporary prefix (cmake --install --prefix), then
#   1. checks the files are there and the CMake/pkg-config files name no source or
#      build path,
#   2. builds tests/install/consumer (an outside CMake project) with
#      find_package(replayalloc) against the prefix and runs it: the C program and the
#      C++ one (replayalloc::Iteration, replayalloc::stats()) against the shared library,
#      both against the static one when the package offers replayalloc::replayalloc_static,
#      and a program using replayalloc/torch.hpp against replayalloc::torch when installed,
#   3. builds the same C program, and one that saves a CSV and a binary trace (read back
#      by the installed `replayalloc report`) and then uses operator new and delete, with
#      `cc $(pkg-config --cflags --libs replayalloc)`; checks that libreplayalloc.so
#      neither needs libjemalloc.so nor exports an allocator (Note [Private jemalloc]),
#   4. checks that ldd of the installed libreplayalloc_preload.so lists nothing but libc,
#      libm, libstdc++, libgcc_s, libjemalloc and the loader, and that it exports no
#      Abseil symbol (Note [Static Abseil]; skipped when configure found no Abseil source),
#      then runs perl, and a /usr/bin/python3 loop, under
#      LD_PRELOAD=<prefix>/lib/.../libreplayalloc_preload.so with REPLAYALLOC_STATS=stderr
#      (the right output, the statistics appear, the loop is served from a slab),
#   5. when libreplayalloc_torch.so was built: the installed Python package with
#      Debian's /usr/bin/python3 (install_cpu, iterations, slab hits) and
#      REPLAYALLOC_LIBRARY; skipped, saying so, otherwise.
# Any failing step ends the script with a message and exit code 1.
# Usage: run_install_test.sh BUILD_DIR [SOURCE_DIR]
set -uo pipefail

fail() { echo "install test: FAIL: $*" >&2; exit 1; }
step() { echo "== install test: $*"; }

[ $# -ge 1 ] || fail "usage: run_install_test.sh BUILD_DIR [SOURCE_DIR]"
build=$(cd "$1" 2>/dev/null && pwd -P) || fail "no build folder $1"
here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "${2:-$here/../..}" && pwd -P)
cmake=${CMAKE_COMMAND:-cmake}
cc=${CC:-cc}
python=/usr/bin/python3

# What the caller's environment says must not leak into what is tested.
unset DESTDIR PYTHONPATH
# (REPLAYALLOC_EXPECT_STATIC_ABSEIL is the build's, from ctest: kept.)
expect_static_abseil=${REPLAYALLOC_EXPECT_STATIC_ABSEIL:-1}
for v in $(compgen -e | grep '^REPLAYALLOC_'); do unset "$v"; done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/replayalloc-install.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
tmp=$(cd "$tmp" && pwd -P)
prefix=$tmp/prefix
case "$prefix/" in
  "$build"/*|"$src"/*|/usr/*) fail "refusing to install into $prefix (inside the build or source tree, or /usr)" ;;
esac

# ---- install
step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1 ||
  { tail -n 20 "$tmp/install.log" >&2; fail "cmake --install failed"; }
echo "installed:"
(cd "$prefix" && find . \( -type f -o -type l \) | sed 's|^\./|  |' | sort)

lib=$(find "$prefix" -name libreplayalloc.so -print -quit)
[ -n "$lib" ] || fail "no libreplayalloc.so under $prefix"
libdir=$(dirname "$lib")
pydir=$prefix/lib/python3/dist-packages
for f in "$libdir/libreplayalloc.so" "$libdir/libreplayalloc.a" "$libdir/libreplayalloc_preload.so" \
         "$prefix/bin/replayalloc" "$prefix/include/replayalloc/replayalloc.h" \
         "$prefix/include/replayalloc/replayalloc.hpp" \
         "$libdir/cmake/replayalloc/replayalloc-config.cmake" \
         "$libdir/cmake/replayalloc/replayalloc-config-version.cmake" \
         "$libdir/cmake/replayalloc/replayalloc-targets.cmake" \
         "$libdir/pkgconfig/replayalloc.pc" "$pydir/replayalloc/__init__.py" \
         "$pydir/replayalloc/torch.py"; do
  [ -e "$f" ] || fail "not installed: ${f#$prefix/}"
done
if grep -rlF -e "$src" -e "$build" "$libdir/cmake" "$libdir/pkgconfig"; then
  fail "the installed CMake/pkg-config files above name the source or build tree"
fi
if command -v readelf > /dev/null; then
  for f in "$libdir"/*.so "$prefix/bin/replayalloc"; do
    if readelf -d "$f" | grep -E 'R(UN)?PATH' | grep -qF -e "$src" -e "$build"; then
      fail "${f#$prefix/} has a run path into the source or build tree"
    fi
  done
fi
"$prefix/bin/replayalloc" version > "$tmp/version.txt" 2>&1 ||
  { cat "$tmp/version.txt" >&2; fail "bin/replayalloc version failed"; }
echo "bin/replayalloc version: $(head -n 1 "$tmp/version.txt")"

# ---- Versions: one number everywhere (project(VERSION)), the SONAME its major.
step "versions"
version=$(sed -n 's/^replayalloc \([0-9][0-9.]*\).*/\1/p' "$tmp/version.txt" | head -n 1)
[ -n "$version" ] || fail "bin/replayalloc version printed no version"
pc_version=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion replayalloc) ||
  fail "pkg-config --modversion replayalloc failed"
[ "$pc_version" = "$version" ] || fail "replayalloc.pc says $pc_version, bin/replayalloc $version"
grep -qF "#define REPLAYALLOC_VERSION_STRING \"$version\"" "$prefix/include/replayalloc/version.h" ||
  fail "include/replayalloc/version.h does not define REPLAYALLOC_VERSION_STRING \"$version\""
grep -qF "PACKAGE_VERSION \"$version\"" "$libdir/cmake/replayalloc/replayalloc-config-version.cmake" ||
  fail "the CMake package's version is not $version"
soname=$(readelf -d "$libdir/libreplayalloc.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libreplayalloc.so.${version%%.*}" ] ||
  fail "libreplayalloc.so's SONAME is '$soname', not libreplayalloc.so.${version%%.*}"
[ -f "$libdir/libreplayalloc.so.$version" ] || fail "no $libdir/libreplayalloc.so.$version"
[ "$(PYTHONPATH="$pydir" "$python" -c 'import replayalloc; print(replayalloc.__version__)')" = "$version" ] ||
  fail "the installed Python package's replayalloc.__version__ is not $version"
echo "version $version: bin/replayalloc, replayalloc.pc, version.h, the CMake package, replayalloc.__version__; SONAME $soname"

export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

check_consumer() {  # check_consumer NAME PROGRAM
  local out
  out=$("$2" 2>&1) || { echo "$out" >&2; fail "$1 failed"; }
  echo "$out" | grep -qE '^replayalloc consumer: slab_hits=[1-9][0-9]*$' ||
    { echo "$out" >&2; fail "$1 printed no slab hits"; }
  echo "$1: $out"
}

# ---- CMake package
step "CMake consumer: find_package(replayalloc CONFIG) with CMAKE_PREFIX_PATH=$prefix"
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
"$cmake" -S "$here/consumer" -B "$tmp/consumer" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log" >&2; fail "configuring the CMake consumer failed"; }
grep -F "consumer: replayalloc" "$tmp/consumer.log"
grep -qF "from $prefix/" "$tmp/consumer.log" ||
  fail "the CMake consumer did not find the package under $prefix"
"$cmake" --build "$tmp/consumer" > "$tmp/consumer-build.log" 2>&1 ||
  { cat "$tmp/consumer-build.log" >&2; fail "building the CMake consumer failed"; }
check_consumer "CMake consumer (replayalloc::replayalloc)" "$tmp/consumer/consumer_shared"
check_consumer "CMake consumer, C++ API (replayalloc::replayalloc)" "$tmp/consumer/consumer_cxx_shared"
if [ -x "$tmp/consumer/consumer_static" ]; then
  check_consumer "CMake consumer (replayalloc::replayalloc_static)" "$tmp/consumer/consumer_static"
  check_consumer "CMake consumer, C++ API (replayalloc::replayalloc_static)" "$tmp/consumer/consumer_cxx_static"
else
  echo "CMake consumer (replayalloc::replayalloc_static): not offered (jemalloc, Abseil or Threads not found by the consumer)"
fi
if [ -e "$libdir/libreplayalloc_torch.so" ]; then
  [ -x "$tmp/consumer/consumer_torch" ] || fail "libreplayalloc_torch.so is installed but the package has no replayalloc::torch"
  check_consumer "CMake consumer, torch.hpp (replayalloc::torch)" "$tmp/consumer/consumer_torch"
fi

# ---- pkg-config
step "pkg-config consumer: cc \$(pkg-config --cflags --libs replayalloc)"
command -v pkg-config > /dev/null || fail "pkg-config is not installed"
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs replayalloc) ||
  fail "pkg-config does not find replayalloc in $libdir/pkgconfig"
echo "pkg-config --cflags --libs replayalloc: $flags"
# shellcheck disable=SC2086  # the flags are words
"$cc" -o "$tmp/pc_consumer" "$here/consumer/main.c" $flags ||
  fail "building with the pkg-config flags failed"
check_consumer "pkg-config consumer" "$tmp/pc_consumer"
# shellcheck disable=SC2086
"$cc" -o "$tmp/pc_traces" "$here/consumer/traces.c" $flags ||
  fail "building traces.c with the pkg-config flags failed"
out=$(cd "$tmp" && ./pc_traces "$tmp/c_demo.csv" "$tmp/c_demo.ratrace" 2>&1) ||
  { echo "$out" >&2; fail "pkg-config consumer (traces.c) failed"; }
echo "$out"
head -n 1 "$tmp/c_demo.csv" | grep -qx 'id,size,align,alloc_at,free_at,op' ||
  fail "the CSV trace has no CSV header"
for f in c_demo.csv c_demo.ratrace; do
  report=$("$prefix/bin/replayalloc" report --json "$tmp/$f" 2>&1) ||
    { echo "$report" >&2; fail "replayalloc report $f failed"; }
  grep -qE '"allocations": ?6[,}]' <<<"$report" ||
    { echo "$report" >&2; fail "replayalloc report $f: not the 6 allocations of an iteration"; }
done
echo "traces.c: the CSV and the binary trace read back, 6 allocations each"
# The static library through the .pc file's private part (Requires.private, Libs.private).
static_flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --static --libs replayalloc) ||
  fail "pkg-config --static --libs replayalloc failed"
static_flags=$(echo " $static_flags " | sed 's/ -lreplayalloc / /')
# shellcheck disable=SC2086
"$cc" -o "$tmp/pc_static" "$here/consumer/main.c" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags replayalloc) "$libdir/libreplayalloc.a" $static_flags ||
  fail "linking libreplayalloc.a with \$(pkg-config --static --libs replayalloc) failed"
! readelf -d "$tmp/pc_static" | grep -q 'libreplayalloc\.so' || fail "pc_static links libreplayalloc.so"
check_consumer "pkg-config --static consumer (libreplayalloc.a)" "$tmp/pc_static"
if command -v readelf > /dev/null && command -v nm > /dev/null; then
  if readelf -d "$libdir/libreplayalloc.so" | grep -E 'NEEDED' | grep -q jemalloc; then
    fail "libreplayalloc.so needs libjemalloc.so: jemalloc's operator new and delete reach its users (Note [Private jemalloc])"
  fi
  leaked=$(nm -D --defined-only "$libdir/libreplayalloc.so" | awk '{print $NF}' |
           grep -xE '(malloc|free|calloc|realloc|posix_memalign|aligned_alloc|memalign|valloc|malloc_usable_size|_Zn[wa].*|_Zd[la].*|[a-z]*allocx|mallctl.*|malloc_conf)' || true)
  [ -z "$leaked" ] || fail "libreplayalloc.so exports allocator symbols: $leaked"
  echo "libreplayalloc.so: no libjemalloc.so needed, no allocator symbol exported"
fi

# ---- The LD_PRELOAD library is one file (Note [Static Abseil], cmake/static_abseil.cmake):
# it needs nothing but the C and C++ runtimes, libjemalloc and the loader.
step "ldd ${libdir#$prefix/}/libreplayalloc_preload.so"
if [ "$expect_static_abseil" != 1 ]; then
  echo "SKIPPED: this build links the LD_PRELOAD library to Abseil's shared libraries (REPLAYALLOC_STATIC_ABSEIL: configure said why)"
else
  deps=$(ldd "$libdir/libreplayalloc_preload.so") || fail "ldd libreplayalloc_preload.so failed"
  echo "$deps" | sed 's/^/  /'
  extra=$(echo "$deps" | awk '{print $1}' |
          grep -vxE 'linux-vdso\.so\.1|/lib(64)?/ld-linux[^ ]*|libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libjemalloc\.so\.2' || true)
  [ -z "$extra" ] || fail "libreplayalloc_preload.so needs more than libc, libm, libstdc++, libgcc_s, libjemalloc and the loader: $(echo $extra)"
  exported=$(nm -D --defined-only "$libdir/libreplayalloc_preload.so" | awk '{print $NF}' | grep -c '^_ZN4absl' || true)
  [ "$exported" = 0 ] || fail "libreplayalloc_preload.so exports $exported Abseil symbols (they must stay hidden inside it)"
  echo "libreplayalloc_preload.so: $(echo "$deps" | wc -l) entries in ldd, no Abseil library, no Abseil symbol exported"
fi

# ---- LD_PRELOAD
step "LD_PRELOAD=${libdir#$prefix/}/libreplayalloc_preload.so under perl"
perl_program='my @keep; my %h; for my $i (1..4000) { my $s = "x" x (4096 * (1 + $i % 5)); $h{$i % 97} .= substr($s, 0, 3); push @keep, $s if $i % 400 == 0; } print join(",", map { length $h{$_} } sort { $a <=> $b } keys %h), " ", scalar(@keep), "\n";'
expected=$(/usr/bin/perl -e "$perl_program") || fail "perl alone failed"
# (REPLAYALLOC_STATS_IDLE=1: the statistics also when auto mode found no loop in perl.)
got=$(cd "$tmp" && LD_PRELOAD="$libdir/libreplayalloc_preload.so" REPLAYALLOC_STATS=stderr REPLAYALLOC_STATS_IDLE=1 \
      /usr/bin/perl -e "$perl_program" 2> "$tmp/preload.err") ||
  { cat "$tmp/preload.err" >&2; fail "perl under LD_PRELOAD failed"; }
[ "$got" = "$expected" ] ||
  fail "perl under LD_PRELOAD printed something else: '${got:0:80}' instead of '${expected:0:80}'"
grep -qE '^\{"allocations":[0-9]+,.*"slab_hits":[0-9]+' "$tmp/preload.err" ||
  { cat "$tmp/preload.err" >&2; fail "no statistics JSON on stderr under LD_PRELOAD (REPLAYALLOC_STATS=stderr)"; }
echo "perl output identical; stats: $(grep -oE '"slab_hits":[0-9]+' "$tmp/preload.err" | head -n 1)"

# A loop auto mode finds (40 iterations of the same 100 buffers): served from a slab.
if [ -x "$python" ]; then
  step "LD_PRELOAD=${libdir#$prefix/}/libreplayalloc_preload.so under a $python loop (auto mode)"
  loop='
t = 0
for r in range(40):
    a = [bytearray(4096 * (1 + i % 7)) for i in range(100)]
    t += sum(len(b) for b in a)
    del a
print(t)'
  # A loop of ~10 ms: its plan, made by the planner thread, may come after its end on a
  # busy machine (Note [Background planning]); planned synchronously here, as this step
  # tests the installed library, not when a plan arrives.
  got=$(cd "$tmp" && LD_PRELOAD="$libdir/libreplayalloc_preload.so" REPLAYALLOC_STATS=stderr \
        REPLAYALLOC_BACKGROUND_PLANNING=0 "$python" -c "$loop" 2> "$tmp/preload.err") ||
    { cat "$tmp/preload.err" >&2; fail "$python under LD_PRELOAD failed"; }
  [ "$got" = 64716800 ] || fail "$python under LD_PRELOAD printed '${got:0:80}' instead of 64716800"
  hits=$(grep -E '^\{"allocations":' "$tmp/preload.err" | grep -oE '"slab_hits":[0-9]+' | head -n 1 |
         grep -oE '[0-9]+$')
  [ -n "$hits" ] || { cat "$tmp/preload.err" >&2; fail "no statistics JSON on stderr under LD_PRELOAD"; }
  [ "$hits" -gt 0 ] || { cat "$tmp/preload.err" >&2; fail "auto mode served nothing from a slab under LD_PRELOAD"; }
  echo "python loop output right; slab_hits=$hits"
fi

# ---- Python package
torch_lib=$libdir/libreplayalloc_torch.so
if [ ! -e "$torch_lib" ]; then
  step "Python package: SKIPPED (libreplayalloc_torch.so was not built: no libtorch at configure)"
elif [ ! -x "$python" ] || ! "$python" -c 'import torch' > /dev/null 2>&1; then
  step "Python package: SKIPPED ($python cannot import torch: apt install python3-torch)"
else
  step "Python package: PYTHONPATH=${pydir#$prefix/} $python, replayalloc.torch"
  run_dir=$(mktemp -d "$tmp/py.XXXXXX")
  (cd "$run_dir" && PYTHONPATH="$pydir" "$python" -c '
import sys
import torch
import replayalloc
import replayalloc.torch as rt
prefix = sys.argv[1]
assert replayalloc.__file__.startswith(prefix + "/"), "imported " + replayalloc.__file__
rt.install_cpu()
assert rt.library_path().startswith(prefix + "/"), "loaded " + rt.library_path()
x = torch.randn(64, 256)
w = torch.randn(256, 256)
for i in range(6):
    with rt.iteration("install-test/mlp"):
        y = torch.relu(x @ w) @ w
        total = float(y.sum())
    if i == 1:
        replayalloc.wait_plans()  # warm-up done: its plan is made by the planner thread
stats = rt.stats()
assert stats["slab_hits"] > 0, stats
print("python: loaded", rt.library_path(), "slab_hits", stats["slab_hits"])
' "$prefix") || fail "the installed Python package failed with torch (above)"

  step "Python package: REPLAYALLOC_LIBRARY overrides the search"
  mkdir -p "$tmp/alt" && cp "$torch_lib" "$tmp/alt/" || fail "copying the torch library"
  (cd "$run_dir" && PYTHONPATH="$pydir" REPLAYALLOC_LIBRARY="$tmp/alt/libreplayalloc_torch.so" \
     "$python" -c '
import sys, replayalloc
assert replayalloc.library_path() == sys.argv[1], replayalloc.library_path()
print("python: REPLAYALLOC_LIBRARY ->", replayalloc.library_path())
' "$tmp/alt/libreplayalloc_torch.so") || fail "REPLAYALLOC_LIBRARY was not used"
  (cd "$run_dir" && PYTHONPATH="$pydir" REPLAYALLOC_LIBRARY="$tmp/missing/libreplayalloc_torch.so" \
     "$python" -c '
import replayalloc
try:
    replayalloc.load()
except OSError as e:
    assert "REPLAYALLOC_LIBRARY" in str(e), e
    print("python: a missing REPLAYALLOC_LIBRARY is an error:", e)
else:
    raise SystemExit("loaded " + replayalloc.library_path() + " though REPLAYALLOC_LIBRARY names a missing file")
') || fail "a missing REPLAYALLOC_LIBRARY did not fail"
fi

echo "install test: PASS"
