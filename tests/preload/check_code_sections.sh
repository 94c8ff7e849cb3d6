#!/usr/bin/env bash
# The LD_PRELOAD library keeps all its functions in one .text (Note [The start's code
# together], hooks/CMakeLists.txt): hooks/start_code.ld gathers a start's functions first
# in .text, and tools that read the library know its functions by that section (valgrind
# names the object of code outside it "???": a first version put them in a section of
# their own). Fails where an executable section other than the ELF's usual ones (.init,
# .plt, .plt.got, .plt.sec, .text, .fini) is present, or where .text is not one section;
# Abseil's LowLevelAlloc keeps its own (malloc_hook: ABSL_ATTRIBUTE_SECTION).
# Usage: check_code_sections.sh LIBRARY
set -uo pipefail
lib=${1:?usage: check_code_sections.sh LIBRARY}
command -v readelf > /dev/null || { echo "SKIP: no readelf"; exit 0; }
sections=$(readelf -SW "$lib") || { echo "FAIL: readelf could not read $lib"; exit 1; }
# Each row: "[ N] NAME TYPE ADDRESS OFFSET SIZE ES FLAGS ...": the executable ones by name.
code=$(sed -n 's/^ *\[ *[0-9]*\] //p' <<< "$sections" | awk '$2 == "PROGBITS" && $7 ~ /X/ { print $1 }')
echo "executable sections:" $code
texts=$(grep -cx '\.text' <<< "$code")
others=$(grep -vxE '\.(init|plt|plt\.got|plt\.sec|text|fini)|malloc_hook' <<< "$code")
if [[ $texts != 1 || -n $others ]]; then
  echo "FAIL: $lib's code must be one .text beside .init, the PLT and .fini (found: $(tr '\n' ' ' <<< "$code"))"
  exit 1
fi
echo PASS
