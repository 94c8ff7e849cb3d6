#!/usr/bin/env bash
# Real, unmodified programs give the same output and exit code with
# libreplayalloc_preload.so preloaded as without, in every mode.
# Usage: run_programs.sh PRELOAD_LIBRARY
set -uo pipefail
lib=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0 ran=0

# The programs: each a command line run through bash in $work.
programs=(
  "perl -e 'my %h; \$h{\$_ % 97} .= \$_ for 1..50000; print join(\",\", map { length \$h{\$_} } sort { \$a <=> \$b } keys %h), qq(\\n)'"
  "git init -q repo && cd repo && printf 'a\nb\n' > f && git add f && GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z' git -c user.name=t -c user.email=t@t commit -qm m && git log --format='%H %s' && git cat-file -p HEAD^{tree}"
  "sqlite3 :memory: 'create table t(a integer, b text); with recursive c(x) as (select 1 union all select x+1 from c where x < 20000) insert into t select x, hex(randomblob(0)) || x from c; select count(*), sum(a), max(length(b)) from t;'"
  "printf 'string(REPEAT \"ab\" 1000 s)\nstring(LENGTH \"\${s}\" n)\nforeach(i RANGE 200)\n  list(APPEND l \${i})\nendforeach()\nlist(LENGTH l m)\nmessage(\"\${n} \${m}\")\n' > t.cmake && cmake -P t.cmake"
  "mkdir -p proj && printf 'cmake_minimum_required(VERSION 3.25)\nproject(p NONE)\nmessage(STATUS \"configured\")\n' > proj/CMakeLists.txt && cmake -S proj -B proj/build 2>&1 | grep -c configured"
  "/usr/bin/python3 -c 'import threading, hashlib
out = []
def work(k):
    out.append(hashlib.sha256(b\"x\" * (k * 100000)).hexdigest()[:16])
ts = [threading.Thread(target=work, args=(k,)) for k in range(1, 9)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sorted(out), sum(len(str(i)) for i in range(200000)))'"
)

run() {  # run MODE COMMAND: prints "rc" then the output
  local mode=$1 cmd=$2 dir="$work/$3"
  rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || return
  if [ "$mode" = none ]; then
    out=$(bash -c "$cmd" 2>&1); rc=$?
  else
    out=$(LD_PRELOAD="$lib" REPLAYALLOC_MODE=$mode bash -c "$cmd" 2>&1); rc=$?
  fi
  printf '%s\n%s' "$rc" "$out"
}

for i in "${!programs[@]}"; do
  cmd=${programs[$i]}
  name=$(printf '%s' "$cmd" | head -n 1 | cut -c1-40)
  first=${cmd%% *}
  [ "$first" = mkdir ] && first=cmake
  if ! command -v "$first" >/dev/null 2>&1; then
    echo "SKIP  $name: not installed"
    continue
  fi
  want=$(run none "$cmd" "p$i-ref")
  for mode in off record replay; do
    ran=$((ran + 1))
    got=$(run "$mode" "$cmd" "p$i-$mode")
    if [ "$got" == "$want" ]; then
      echo "ok    [$mode] $name => $(printf '%s' "$got" | tail -n 1 | cut -c1-50)"
    else
      echo "FAIL  [$mode] $name"
      echo "  without: $(printf '%s' "$want" | head -c 300)"
      echo "  with:    $(printf '%s' "$got" | head -c 300)"
      fail=$((fail + 1))
    fi
  done
done
echo "$((ran - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
