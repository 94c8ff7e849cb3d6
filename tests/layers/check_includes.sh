#!/usr/bin/env bash
# The layer rule of allocator/README.md, checked on every quoted #include of the
# sources (ctest layers.includes). The build seals what is public (only
# allocator/include/ reaches targets that do not link replayalloc_internal); this
# checks the direction inside: a layer includes only itself and the layers before it,
#   support -> backend -> trace -> planner -> replay -> runtime
# the CLI (allocator/cli/) only the offline layers (support to planner), the public
# headers only public headers, the CUDA device domain (integrations/cuda/) only
# runtime/domain.h of the core, and the PyTorch integration no internal header.
# Prints each include that breaks the rule (file:line: include, and why); exit 1 if any.
# Usage: check_includes.sh [SOURCE_DIR]
set -uo pipefail

src=$(cd "${1:-$(dirname "$0")/../..}" && pwd -P) || { echo "no source folder" >&2; exit 2; }
layers=(support backend trace planner replay runtime)
declare -A names=([include]="a public header" [cuda]="integrations/cuda"
                  [pytorch]="integrations/pytorch" [cli]="allocator/cli")
bad=0

# allowed FILE_GROUP INCLUDE_LAYER INCLUDE_PATH: 0 when the group may include it.
allowed() {
  local group=$1 layer=$2 path=$3 i
  case "$group" in
    cli) case "$layer" in support|backend|trace|planner|cli) return 0 ;; esac; return 1 ;;
    include) [ "$layer" = replayalloc ]; return ;;
    cuda) [ "$path" = runtime/domain.h ]; return ;;
    pytorch) return 1 ;;
  esac
  for i in "${layers[@]}"; do
    [ "$i" = "$layer" ] && return 0
    [ "$i" = "$group" ] && return 1
  done
  return 1
}

check() {  # check GROUP FILES...
  local group=$1 f line path layer
  shift
  for f in "$@"; do
    while IFS=: read -r line path; do
      layer=${path%%/*}
      [ "$layer" = "$path" ] && continue  # a header next to the file
      case "$layer" in
        support|backend|trace|planner|replay|runtime|cli) ;;
        replayalloc) [ "$group" = include ] || continue ;;  # public headers: anyone
        *) continue ;;                                      # absl, torch, CUDA, ...
      esac
      if ! allowed "$group" "$layer" "$path"; then
        echo "${f#$src/}:$line: #include \"$path\": ${names[$group]:-$group/} may not include $layer/"
        bad=1
      fi
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]+"' "$f" |
             sed -E 's/^([0-9]+):.*"([^"]+)".*/\1:\2/')
  done
}

shopt -s nullglob
for l in "${layers[@]}" cli; do
  check "$l" "$src"/allocator/"$l"/*.h "$src"/allocator/"$l"/*.cc
done
check include "$src"/allocator/include/replayalloc/*
check cuda "$src"/integrations/cuda/*.h "$src"/integrations/cuda/*.cc
check pytorch "$src"/integrations/pytorch/cpu/*.cc

if [ $bad -ne 0 ]; then
  echo "layers: FAIL (allocator/README.md, Layers, says which layer may include which)"
  exit 1
fi
echo "layers: ok"
