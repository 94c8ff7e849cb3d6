#!/usr/bin/env bash
# The LD_PRELOAD library's calls of the functions it defines itself bind at its link, not
# through the PLT (-Bsymbolic-functions, hooks/CMakeLists.txt): calloc's, realloc's and
# posix_memalign's of the C API, operator new's inside, and its copy of libstdc++'s free
# (the copy's blocks come from __wrap_malloc: Note [The LD_PRELOAD library's own runtime]),
# so a program that defines malloc and free or operator new of its own does not take
# them. Fails where a PLT or GOT relocation names a function the library defines.
# Usage: check_own_bindings.sh LIBRARY
set -uo pipefail
lib=${1:?usage: check_own_bindings.sh LIBRARY}
command -v readelf > /dev/null || { echo "SKIP: no readelf"; exit 0; }
# Defined functions: "Num: Value Size Type Bind Vis Ndx Name" with Ndx a section number.
defined=$(readelf -W --dyn-syms "$lib" | awk '$4 == "FUNC" && $7 != "UND" { sub(/@.*/, "", $8); print $8 }' | sort -u)
# Relocations against a symbol: "Offset Info Type Symbol's Value Symbol's Name + Addend".
bound=$(readelf -W -r "$lib" | awk '$3 ~ /JUMP_SLOT|GLOB_DAT/ { sub(/@.*/, "", $5); print $5 }' | sort -u)
[[ -n $defined && -n $bound ]] || { echo "FAIL: readelf found no defined functions or no relocations in $lib"; exit 1; }
own=$(comm -12 <(echo "$defined") <(echo "$bound"))
echo "functions defined: $(wc -l <<< "$defined"); symbols bound at load: $(wc -l <<< "$bound")"
if [[ -n $own ]]; then
  echo "FAIL: $lib calls functions it defines through the PLT or GOT: $(tr '\n' ' ' <<< "$own")"
  exit 1
fi
echo PASS
