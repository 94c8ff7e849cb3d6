#!/usr/bin/env bash
# The allocator's sources are C++20 that clang accepts too, not only GCC (ctest
# layers.clang_syntax, where clang++ is found): every .cc of the core's layers
# (support to runtime) and of the CLI, `clang++ -fsyntax-only`, with the build's
# include folders. GCC takes some things the standard does not (a reinterpret_cast in
# a constinit initializer: replay/fast_path.h's closed free, which clang refused in
# every file that includes it); this says so at the change that adds one.
# Prints each file clang rejects with its first errors; exit 1 if any.
# Usage: check_clang.sh CLANGXX SOURCE_DIR BUILD_DIR
set -uo pipefail
clang=$1
src=$(cd "$2" && pwd -P) || { echo "no source folder" >&2; exit 2; }
build=$(cd "$3" && pwd -P) || { echo "no build folder" >&2; exit 2; }
files=()
for d in support backend trace planner replay runtime cli; do
  for f in "$src"/allocator/$d/*.cc; do files+=("$f"); done
done
out=$(printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'err=$("$0" -fsyntax-only -std=c++20 -w -DREPLAYALLOC_DEBUG=0 -DREPLAYALLOC_VERSION_STRING=\"0\" -I"$1/allocator/include" -I"$2/include" \
     -I"$1/allocator" "{}" 2>&1 > /dev/null) || { echo "{}:"; printf "%s\n" "$err" | grep -m3 "error:"; }' \
  "$clang" "$src" "$build")
if [ -n "$out" ]; then
  echo "clang_syntax: clang rejects these sources (GCC may take them; the standard does not):"
  echo "$out"
  exit 1
fi
echo "clang_syntax: ${#files[@]} sources of allocator/ accepted by $("$clang" --version | head -1)"
