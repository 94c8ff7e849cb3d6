#!/usr/bin/env bash
# The Debian packages (cmake/install.cmake; issue 33): `cpack -G DEB` in the build
# folder makes five, split as Debian splits a library, each holding what it should and
# nothing of the others', their dependencies on Debian's libraries computed by
# dpkg-shlibdeps (libstdc++6, libc6, Abseil's; libjemalloc2 for a preload library that
# links it: named by the ELF files, not by hand),
# and their dependencies on each other at the same version. lintian (scripts/setup.sh
# installs it) runs on them: its errors fail the test; its warnings are printed.
# Exit 77 (skipped, with the reason): no cpack, dpkg-deb or dpkg-shlibdeps.
# Usage: run_debian_packages.sh BUILD_DIR
set -uo pipefail
build=$1
for tool in dpkg-deb dpkg-shlibdeps; do
  command -v $tool > /dev/null || { echo "SKIP: no $tool (Debian's dpkg-dev)"; exit 77; }
done
cpack=${CPACK_COMMAND:-cpack}
command -v "$cpack" > /dev/null || { echo "SKIP: no cpack"; exit 77; }
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
[ -n "$version" ] || { echo "FAIL: no CPACK_PACKAGE_VERSION in $build/CPackConfig.cmake"; exit 1; }
major=${version%%.*}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL  $*"; fail=1; }
ok() { echo "ok    $*"; }
(cd "$build" && "$cpack" -G DEB -B "$tmp/out" > "$tmp/cpack.log" 2>&1) || { tail -30 "$tmp/cpack.log"; echo "FAIL: cpack"; exit 1; }
deb() { ls "$tmp/out"/"$1"_"$version"_*.deb 2>/dev/null | head -1; }
contents() { dpkg-deb -c "$(deb "$1")" | awk '{ print $6 }' | sed 's|^\./|/|'; }  # (a link's target dropped)
field() { dpkg-deb -f "$(deb "$1")" "$2"; }
lib=libreplayalloc$major
for p in "$lib" libreplayalloc-dev replayalloc-preload python3-replayalloc replayalloc-tools; do
  [ -n "$(deb "$p")" ] && ok "$p made" || bad "$p: no ${p}_${version}_*.deb (made: $(ls "$tmp/out" | paste -sd' '))"
done
[ $fail = 0 ] || exit 1
[ "$(ls "$tmp/out"/*.deb | wc -l)" = 5 ] && ok "five packages, no more" || bad "packages: $(ls "$tmp/out" | paste -sd' ')"

# What each holds (and what it must not).
has() {  # package pattern what
  contents "$1" | grep -Eq "$2" && ok "$1 holds $3" || bad "$1 does not hold $3"
}
lacks() {
  contents "$1" | grep -Eq "$2" && bad "$1 holds $3, which belongs elsewhere" || ok "$1 does not hold $3"
}
has "$lib" "/lib/.*/?libreplayalloc\.so\.$major(\..*)?$" "libreplayalloc.so.$major"
lacks "$lib" "\.h$|\.hpp$|\.a$|\.pc$|\.cmake$|libreplayalloc\.so$" "development files"
lacks "$lib" "libreplayalloc_preload\.so" "the preload library"
has libreplayalloc-dev "/include/replayalloc/replayalloc\.h$" "the C header"
has libreplayalloc-dev "/include/replayalloc/version\.h$" "version.h"
has libreplayalloc-dev "libreplayalloc\.a$" "the static library"
has libreplayalloc-dev "pkgconfig/replayalloc\.pc$" "the pkg-config file"
has libreplayalloc-dev "cmake/replayalloc/replayalloc-config\.cmake$" "the CMake package"
has libreplayalloc-dev "libreplayalloc\.so$" "the libreplayalloc.so link"
lacks libreplayalloc-dev "libreplayalloc\.so\.$major" "the shared library itself"
has replayalloc-preload "libreplayalloc_preload\.so$" "libreplayalloc_preload.so"
lacks replayalloc-preload "\.h$|bin/" "headers or programs"
has python3-replayalloc "dist-packages/replayalloc/__init__\.py$" "the Python package"
has python3-replayalloc "dist-packages/replayalloc/_version\.py$" "_version.py"
lacks python3-replayalloc "\.so" "a shared library"
has replayalloc-tools "/bin/replayalloc$" "the replayalloc command"
for p in "$lib" libreplayalloc-dev replayalloc-preload python3-replayalloc replayalloc-tools; do
  has "$p" "/share/doc/$p/copyright$" "its copyright file"
done

# Dependencies: computed from the ELF files, and on each other at the same version.
depends() {  # package regex what
  field "$1" Depends | grep -Eq "$2" && ok "$1 depends on $3" || bad "$1 does not depend on $3 (Depends: $(field "$1" Depends))"
}
depends "$lib" "libabsl" "Abseil's library (dpkg-shlibdeps; jemalloc is linked in, private)"
# The preload library carries jemalloc, libstdc++ and libgcc's unwinder inside where the
# build could (Note [The LD_PRELOAD library's own runtime], hooks/CMakeLists.txt): then
# it depends on none of them; else on libjemalloc2.
if readelf -d "$build/hooks/libreplayalloc_preload.so" 2>/dev/null | grep -q 'NEEDED.*libjemalloc'; then
  depends replayalloc-preload "libjemalloc2" "libjemalloc2 (dpkg-shlibdeps)"
else
  field replayalloc-preload Depends | grep -Eq "libjemalloc2|libstdc\+\+6|libgcc-s1" &&
    bad "replayalloc-preload depends on libjemalloc2, libstdc++6 or libgcc-s1, which it carries inside (Depends: $(field replayalloc-preload Depends))" ||
    ok "replayalloc-preload depends on none of libjemalloc2, libstdc++6 and libgcc-s1 (it carries them inside)"
fi
depends "$lib" "libc6 \(>= " "libc6 with a version (dpkg-shlibdeps)"
depends "$lib" "libstdc\+\+6" "libstdc++6"
depends replayalloc-preload "libc6 \(>= " "libc6 with a version (dpkg-shlibdeps)"
depends libreplayalloc-dev "$lib \(= $version\)" "$lib at its own version"
depends libreplayalloc-dev "libjemalloc-dev" "libjemalloc-dev"
depends python3-replayalloc "$lib \(= $version\)" "$lib at its own version"
depends replayalloc-tools "libc6 \(>= " "libc6 with a version (dpkg-shlibdeps)"
[ "$(field libreplayalloc-dev Section)" = libdevel ] && ok "libreplayalloc-dev in section libdevel" || bad "libreplayalloc-dev section $(field libreplayalloc-dev Section)"

if command -v lintian > /dev/null; then
  for f in "$tmp"/out/*.deb; do
    out=$(lintian --no-tag-display-limit "$f" 2>&1)
    errors=$(grep -c '^E:' <<<"$out")
    echo "lintian $(basename "$f"): $errors errors, $(grep -c '^W:' <<<"$out") warnings"
    grep '^[EW]:' <<<"$out" | head -20
    [ "$errors" = 0 ] || bad "lintian: errors in $(basename "$f")"
  done
else
  echo "note  lintian is not installed: the packages were not checked by it"
fi
exit $fail
