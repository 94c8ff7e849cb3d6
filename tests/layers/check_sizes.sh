#!/usr/bin/env bash
# Source files stay small, and growth is an explicit edit (issue 43, item 4): every C/C++
# source of allocator/, hooks/ and integrations/ (tests and benchmarks aside) is at most
# 600 lines and at most its line count in tests/layers/line_budget.txt, which lists every
# such file. A change that makes a file longer raises its budget in the same commit (or
# splits the file); a new file gets a line; a removed file loses its line.
# `check_sizes.sh --update` rewrites the budget to today's counts (review the diff).
# Usage: check_sizes.sh [SOURCE_DIR] [--update]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
update=0
for a in "$@"; do
  case $a in
    --update) update=1 ;;
    *) root=$(cd "$a" && pwd) ;;
  esac
done
cd "$root" || exit 1
budget=tests/layers/line_budget.txt
limit=600
list() {
  find allocator hooks integrations -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cc' -o -name '*.c' -o -name '*.cu' \) |
    LC_ALL=C sort
}
if (( update )); then
  {
    echo "# Lines allowed per source file (tests/layers/check_sizes.sh; at most $limit each)."
    list | while read -r f; do echo "$f $(wc -l < "$f")"; done
  } > "$budget"
  echo "wrote $budget"
  exit 0
fi
declare -A allowed=()
while read -r f n; do
  [[ -z $f || $f == \#* ]] && continue
  allowed[$f]=$n
done < "$budget"
status=0 count=0
while read -r f; do
  count=$((count + 1))
  n=$(wc -l < "$f")
  if (( n > limit )); then
    echo "$f: $n lines, over the limit of $limit: split it"
    status=1
  fi
  if [[ -z ${allowed[$f]:-} ]]; then
    echo "$f: not in $budget (a new file: add '$f $n')"
    status=1
  elif (( n > allowed[$f] )); then
    echo "$f: $n lines, over its budget of ${allowed[$f]} in $budget: raise it in this change, or make the file shorter"
    status=1
  fi
  unset "allowed[$f]"
done < <(list)
for f in "${!allowed[@]}"; do
  echo "$budget: $f is no longer in the tree: remove its line"
  status=1
done
echo "sizes: $count source files checked against $budget (limit $limit lines)"
exit $status
