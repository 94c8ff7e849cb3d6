#!/bin/sh
# A shell script of the kind a build or a configure script runs: 100 rounds of short
# commands (expr, sort, tr, sed, cut), each a process of its own under the allocator
# preloaded, so what it measures is mostly each process's start and exit. Prints a
# checksum of what the commands printed.
i=0
while [ "$i" -lt 100 ]; do
  n=$(expr "$i" \* 7 + 3)
  printf '%s\n' "$n" "$i" "line $i" | sort -r | tr 'a-z' 'A-Z' | sed 's/LINE/row/' | cut -c1-12
  i=$(expr "$i" + 1)
done | cksum
