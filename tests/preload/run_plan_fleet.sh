#!/usr/bin/env bash
# Plans as deployable artifacts (README "Deploying plans"; Note [Plan cache] in
# allocator/runtime/plan_store.cc, Note [Safe plan directories] in support/file_io.h):
#  1. eight replicas started together on one empty plan directory, each running the
#     same three-key service loop under the LD_PRELOAD library: every one replays after
#     its warm-up, exactly one valid file per key remains, no temporary file is left,
#     and each wrote its own statistics (REPLAYALLOC_STATS with %p);
#  2. a writer killed with SIGKILL at random moments (while it records, plans and
#     saves), then a reader: never a crash, never a wrong byte, never a half-written
#     plan accepted; always the previous good plan or recording again;
#  3. a read-only shipped plan directory with a writable REPLAYALLOC_PLAN_CACHE, as an
#     unprivileged user: the shipped plan replays from the first iteration, a key it
#     lacks is recorded once and saved to the cache only, the next start loads both,
#     and a plan re-made here (the program changed) wins over the shipped one;
#  4. REPLAYALLOC_STATS through a wrapper: a process that did nothing writes nothing
#     (unless REPLAYALLOC_STATS_IDLE=1), so the service's statistics survive; 1, stderr
#     and stdout are streams, never files.
# Usage: run_plan_fleet.sh PRELOAD_LIBRARY RESTART_PROGRAM [REPLAYALLOC_CLI]
set -uo pipefail
lib=$1 prog=$2 cli=${3:-}
top=$(mktemp -d)
other=""  # the other user's folder, when it is not under $top (other_user_dir)
trap 'chmod -R u+w "$top" 2>/dev/null; rm -rf "$top" ${other:+"$other"}' EXIT
chmod 755 "$top"
fail=0
. "$(dirname "$0")/plan_checks.sh"

service() {  # service DIR ITERATIONS [env...]: the program's output, stderr included
  local d=$1 n=$2
  shift 2
  env LD_PRELOAD="$lib" REPLAYALLOC_MODE=replay REPLAYALLOC_MIN_SIZE=0 REPLAYALLOC_VERBOSE=2 \
    REPLAYALLOC_PLAN_DIR="$d" RESTART_KEYS=3 "$@" "$prog" "$n" 1 2>&1
}
verify() {  # verify NAME DIR [wrapper...]: every *.raplan in DIR is one the library would load
  [ -n "$cli" ] || return 0
  local out name=$1 d=$2
  shift 2
  if out=$("$@" "$cli" plans verify "$d" 2>&1); then
    echo "ok    $name: replayalloc plans verify: every plan file good"
  else
    echo "FAIL  $name: replayalloc plans verify:"; echo "$out"; fail=1
  fi
}

# ---- 1. Eight replicas at once on an empty directory.
fleet="$top/fleet"
mkdir -m 700 "$fleet"
pids=()
for r in $(seq 1 8); do
  service "$fleet" 30 REPLAYALLOC_STATS="$top/stats.%p.json" > "$top/replica.$r" &
  pids+=($!)
done
for r in $(seq 1 8); do
  wait "${pids[$((r - 1))]}"; rc=$?
  out=$(cat "$top/replica.$r")
  clean "replica $r" "$out" $rc
  # 30 iterations over 3 keys: each key records (at least twice) and then replays.
  hits=$(field slab_hits "$out")
  [ "${hits:-0}" -ge 100 ] && echo "ok    replica $r: replays after its warm-up (slab_hits=$hits)" \
    || { echo "FAIL  replica $r: slab_hits=$hits"; fail=1; }
done
n=$(ls "$fleet" | grep -c '\.raplan$')
[ "$n" -eq 3 ] && echo "ok    fleet: one plan file per key (3)" || { echo "FAIL  fleet: $n plan files:"; ls -la "$fleet"; fail=1; }
left=$(ls -A "$fleet" | grep -vc '\.raplan$')
[ "$left" -eq 0 ] && echo "ok    fleet: no temporary file left" || { echo "FAIL  fleet: $left stray files:"; ls -la "$fleet"; fail=1; }
verify fleet "$fleet"
n=$(ls "$top"/stats.*.json 2>/dev/null | wc -l)
[ "$n" -eq 8 ] && echo "ok    fleet: eight statistics files (REPLAYALLOC_STATS=stats.%p.json)" \
  || { echo "FAIL  fleet: $n statistics files"; fail=1; }
for f in "$top"/stats.*.json; do
  pid=${f##*/stats.}; pid=${pid%.json}
  grep -q "^{\"pid\":$pid,\"program\":\"preload_restart\"," "$f" ||
    { echo "FAIL  fleet: $f does not name its process:"; head -c 200 "$f"; echo; fail=1; }
done
# A ninth replica, started after them, replays every key from its first iteration.
out=$(service "$fleet" 30); rc=$?; clean "late replica" "$out" $rc
expect "late replica" "$out" plans_loaded -eq 3
expect "late replica" "$out" recordings -eq 0

# ---- 2. A writer killed at random moments, then a reader.
kills="$top/kills"
mkdir -m 700 "$kills"
cp "$fleet"/*.raplan "$kills/"
interrupted=0
for trial in $(seq 1 24); do
  # The writer runs another program under the same keys: the loaded plans deviate, and
  # it records, plans and saves new ones, replacing the files (as after an upgrade).
  service "$kills" 60 RESTART_OTHER=1 > /dev/null &
  w=$!
  sleep "0.0$(( RANDOM % 4 ))$(( RANDOM % 10 ))"  # 0-39 ms: the writer runs ~40 ms
  kill -KILL "$w" 2>/dev/null
  wait "$w" 2>/dev/null
  [ $? -eq 137 ] && interrupted=$((interrupted + 1))
  out=$(service "$kills" 12); rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "^corruptions 0$" <<<"$out"; then
    echo "FAIL  kill $trial: the reader exited $rc"; echo "$out"; fail=1
    continue
  fi
  if grep -q "checksum mismatch\|truncated" <<<"$out"; then
    echo "FAIL  kill $trial: a reader met a half-written plan file:"; grep "ignored" <<<"$out"; fail=1
  fi
  loaded=$(field plans_loaded "$out") recorded=$(field recordings "$out")
  [ "$((loaded + recorded))" -ge 3 ] ||
    { echo "FAIL  kill $trial: neither a plan loaded nor a recording for every key"; fail=1; }
  verify "kill $trial" "$kills"
  # Temporary files a killed writer left never look like plans, and are pruned later.
  rm -f "$kills"/.*.tmp
done
echo "ok    kills: 24 trials, $interrupted writers killed before they finished, every reader clean"
[ "$interrupted" -ge 1 ] || { echo "FAIL  kills: no writer was ever killed (too fast?)"; fail=1; }

# ---- 3. A read-only shipped directory and a writable cache, as an unprivileged user,
# who runs copies of the library, the program and the CLI (as_other_user_copies,
# plan_checks.sh): the build tree may be out of its reach.
skipped=0 base=""
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
  base=$(other_user_dir "$top") || base=""
  case $base in "$top"/* | "") ;; *) other=$base ;; esac
  if [ -z "$base" ] || ! as_other_user_copies "$base/bin" "$lib" "$prog" ${cli:+"$cli"}; then
    echo "SKIP  cache: user 65534 can reach no copy of the library and the programs (above)"
    skipped=1
  fi
fi
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null && [ "$skipped" -eq 0 ]; then
  # (restored below, for part 4)
  own_lib=$lib own_prog=$prog own_cli=$cli
  lib="$base/bin/$(basename "$lib")" prog="$base/bin/$(basename "$prog")"
  [ -n "$cli" ] && cli="$base/bin/$(basename "$cli")"
  ship="$base/ship" cache="$base/cache"
  mkdir -m 755 "$ship"
  cp "$fleet/$(ls "$fleet" | grep '^request-')" "$ship/"  # only the key "request" is shipped
  chmod 644 "$ship"/*
  mkdir -m 700 "$cache"
  chown 65534:65534 "$cache"
  nobody=("${other_user[@]}")
  before=$(ls -la --time-style=full-iso "$ship")
  out=$(service "$ship" 30 REPLAYALLOC_PLAN_CACHE="$cache" "${nobody[@]}"); rc=$?
  clean "cache first" "$out" $rc
  expect "cache first" "$out" plans_loaded -eq 1
  must_say "cache first" "$out" "'request': plan loaded from $ship/"
  n=$(ls "$cache" | grep -c '\.raplan$')
  [ "$n" -eq 2 ] && echo "ok    cache first: the two keys not shipped saved to the cache" \
    || { echo "FAIL  cache first: $n files in the cache"; ls -la "$cache"; fail=1; }
  [ "$before" = "$(ls -la --time-style=full-iso "$ship")" ] && echo "ok    cache first: the shipped directory untouched" \
    || { echo "FAIL  cache first: the shipped directory changed"; fail=1; }
  out=$(service "$ship" 30 REPLAYALLOC_PLAN_CACHE="$cache" "${nobody[@]}"); rc=$?
  clean "cache again" "$out" $rc
  expect "cache again" "$out" plans_loaded -eq 3
  expect "cache again" "$out" recordings -eq 0
  # The program changes: the shipped plan of "request" deviates, is re-made and saved
  # to the cache; the next start loads the newer plan from the cache, not the shipped one.
  out=$(service "$ship" 30 REPLAYALLOC_PLAN_CACHE="$cache" RESTART_OTHER=1 "${nobody[@]}"); rc=$?
  clean "changed" "$out" $rc
  expect "changed" "$out" rerecords -ge 1
  out=$(service "$ship" 30 REPLAYALLOC_PLAN_CACHE="$cache" RESTART_OTHER=1 "${nobody[@]}"); rc=$?
  clean "changed again" "$out" $rc
  must_say "changed again" "$out" "'request': plan loaded from $cache/"
  expect "changed again" "$out" recordings -eq 0
  [ "$before" = "$(ls -la --time-style=full-iso "$ship")" ] && echo "ok    changed: the shipped directory untouched" \
    || { echo "FAIL  changed: the shipped directory changed"; fail=1; }
  verify cache "$cache" "${nobody[@]}"
  lib=$own_lib prog=$own_prog cli=$own_cli
elif [ "$skipped" -eq 0 ]; then
  echo "skip  cache: needs root and setpriv to run as another user"
fi

# ---- 4. Statistics through a wrapper that does nothing itself.
stats="$top/wrapped.json"
out=$(env LD_PRELOAD="$lib" REPLAYALLOC_MODE=replay REPLAYALLOC_MIN_SIZE=0 REPLAYALLOC_STATS="$stats" \
      timeout 60 "$prog" 6 1 2>&1); rc=$?
clean wrapper "$out" $rc
if grep -q '"program":"preload_restart"' "$stats" 2>/dev/null && grep -q '"iterations":6,' "$stats"; then
  echo "ok    wrapper: timeout's own allocations did not replace the service's statistics"
else
  echo "FAIL  wrapper: $stats holds:"; cat "$stats" 2>/dev/null; echo; fail=1
fi
idle="$top/idle.json"
env LD_PRELOAD="$lib" REPLAYALLOC_STATS="$idle" /bin/true
[ ! -e "$idle" ] && echo "ok    idle: a process that did nothing wrote no statistics" \
  || { echo "FAIL  idle: $idle written"; fail=1; }
env LD_PRELOAD="$lib" REPLAYALLOC_STATS="$idle" REPLAYALLOC_STATS_IDLE=1 /bin/true
grep -q '"program":"true"' "$idle" 2>/dev/null && echo "ok    idle: written when asked (REPLAYALLOC_STATS_IDLE=1)" \
  || { echo "FAIL  idle: nothing written with REPLAYALLOC_STATS_IDLE=1"; fail=1; }
# REPLAYALLOC_STATS=1 and =stderr print to standard error, =stdout to standard output
# after the program's own output, as jemalloc's stats_print does: never files named so.
for to in 1 stderr stdout; do
  streams="$top/streams.$to"
  mkdir "$streams"
  (cd "$streams" && env LD_PRELOAD="$lib" REPLAYALLOC_MODE=replay REPLAYALLOC_MIN_SIZE=0 REPLAYALLOC_STATS=$to \
     "$prog" 4 1 > "$top/out.$to" 2> "$top/err.$to"); rc=$?
  want=err.$to
  [ "$to" = stdout ] && want=out.$to
  if [ $rc -eq 0 ] && tail -n 1 "$top/$want" | grep -q '^{"allocations":' && [ -z "$(ls -A "$streams")" ]; then
    echo "ok    stats to $to: the JSON is the last line of ${want%%.*}, no file written"
  else
    echo "FAIL  stats to $to: exit $rc; files: $(ls -A "$streams"); stdout:"; cat "$top/out.$to"
    echo "  stderr:"; cat "$top/err.$to"; fail=1
  fi
done
# Two processes on one path while both run: the later to exit says it replaces the
# file the other wrote meanwhile (a long-lived process asked to write even when idle,
# and a short service started after it).
shared="$top/shared.json"
( sleep 0.3; env LD_PRELOAD="$lib" REPLAYALLOC_MODE=replay REPLAYALLOC_MIN_SIZE=0 REPLAYALLOC_STATS="$shared" \
    "$prog" 4 1 > /dev/null 2>&1 ) &
out=$(env LD_PRELOAD="$lib" REPLAYALLOC_STATS="$shared" REPLAYALLOC_STATS_IDLE=1 \
      perl -e 'select(undef, undef, undef, 1.5)' 2>&1)
wait
must_say "shared stats" "$out" "REPLAYALLOC_STATS: replacing '$shared', written by process [0-9]* (preload_restart) while this one ran"
grep -q '"program":"perl"' "$shared" && echo "ok    shared stats: the later one's file remains" \
  || { echo "FAIL  shared stats: $shared holds:"; cat "$shared"; fail=1; }

# Skipped (ctest SKIP_RETURN_CODE 77) when a part that could run here could not.
[ "$fail" -eq 0 ] && [ "$skipped" -eq 1 ] && exit 77
exit $fail
