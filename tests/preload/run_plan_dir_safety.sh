#!/usr/bin/env bash
# REPLAYALLOC_PLAN_DIR in a directory others may touch (Note [Safe plan directories],
# allocator/support/file_io.h):
#  * a symbolic link placed at every name the library could write (the plan's final
#    name and the temporary names older versions used) never gets its target written;
#  * a plan file that is a link, or that others may write, is refused with a message;
#  * a directory writable by other users is refused with one message naming it and its
#    mode, and the program runs on, recording as without a plan directory;
#  * a read-only directory of good plans replays from the first iteration and nothing
#    is written to it (run as an unprivileged user, since root writes anywhere).
# Usage: run_plan_dir_safety.sh PRELOAD_LIBRARY RESTART_PROGRAM
set -uo pipefail
lib=$1 prog=$2
top=$(mktemp -d)
other=""  # the other user's folder, when it is not under $top (other_user_dir)
trap 'chmod -R u+w "$top" 2>/dev/null; rm -rf "$top" ${other:+"$other"}' EXIT
fail=0

run() {  # run DIR [wrapper...]: the program's output, stderr included
  local d=$1
  shift
  "$@" env LD_PRELOAD="$lib" REPLAYALLOC_MODE=replay REPLAYALLOC_MIN_SIZE=0 REPLAYALLOC_VERBOSE=2 \
    REPLAYALLOC_PLAN_DIR="$d" "$prog" 6 1 2>&1
}
. "$(dirname "$0")/plan_checks.sh"
unchanged() {  # unchanged NAME FILE CONTENT
  if [ -f "$2" ] && [ ! -L "$2" ] && [ "$(cat "$2")" = "$3" ]; then
    echo "ok    $1: $2 untouched"
  else
    echo "FAIL  $1: $2 was modified"; fail=1
  fi
}

# A good plan, made once in a private directory.
good="$top/good"
mkdir -m 700 "$good"
out=$(run "$good"); rc=$?; clean record "$out" $rc
expect record "$out" plans -eq 1
plan=$(ls "$good"/*.raplan)
name=$(basename "$plan")
leftover=$(ls -A "$good" | grep -vc '\.raplan$')
[ "$leftover" -eq 0 ] && echo "ok    record: no temporary file left" || { echo "FAIL  record: $leftover stray files"; fail=1; }

# 1. Links at every name the library could write: the final name, and the
#    predictable temporary names of earlier versions (<file>.tmp.<pid>) for the
#    next pids. The targets outside the directory must never change.
links="$top/links"
mkdir -m 700 "$links"
echo "precious" > "$top/victim"
ln -s "$top/victim" "$links/$name"
next=$(( $(sh -c 'echo $$') + 1 ))
for p in $(seq "$next" $((next + 300))); do ln -s "$top/victim" "$links/$name.tmp.$p"; done
out=$(run "$links"); rc=$?; clean links "$out" $rc
unchanged links "$top/victim" "precious"
must_say links "$out" "is a symbolic link; not followed"
expect links "$out" plans_loaded -eq 0
[ -f "$links/$name" ] && [ ! -L "$links/$name" ] && echo "ok    links: the plan replaced the link, not its target" \
  || { echo "FAIL  links: $links/$name is not a plain plan file"; fail=1; }

# 2. A plan file others may write is refused (as planted), and so is a link to a
#    good plan.
planted="$top/planted"
mkdir -m 700 "$planted"
cp "$plan" "$planted/$name"
chmod 666 "$planted/$name"
out=$(run "$planted"); rc=$?; clean planted-mode "$out" $rc
expect planted-mode "$out" plans_loaded -eq 0
expect planted-mode "$out" plan_files_ignored -eq 1
must_say planted-mode "$out" "mode 0666"

# 3. A directory writable by other users: refused once, named with its mode; the
#    program records as without a plan directory, and writes nothing there.
shared="$top/shared"
mkdir "$shared"
cp "$plan" "$shared/$name"
chmod 777 "$shared"
out=$(run "$shared"); rc=$?; clean shared-dir "$out" $rc
must_say shared-dir "$out" "REPLAYALLOC_PLAN_DIR refused: directory $shared (owner uid [0-9]*, mode 0777)"
n=$(grep -c "REPLAYALLOC_PLAN_DIR refused" <<<"$out")
[ "$n" -eq 1 ] && echo "ok    shared-dir: said once" || { echo "FAIL  shared-dir: said $n times"; fail=1; }
expect shared-dir "$out" plans_loaded -eq 0
expect shared-dir "$out" recordings -ge 1
expect shared-dir "$out" slab_hits -ge 1
[ "$(ls -A "$shared" | wc -l)" -eq 1 ] && echo "ok    shared-dir: nothing written" || { echo "FAIL  shared-dir: files written"; fail=1; }
chmod 755 "$shared"

# 4. A read-only directory of good plans (owned by root, used by an unprivileged
#    user): replay from the first iteration, no recording, nothing written. That user
#    runs copies of the library and the program (as_other_user_copies, plan_checks.sh):
#    the build tree may be out of its reach.
skipped=0
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
  base=$(other_user_dir "$top") || base=""
  case $base in "$top"/* | "") ;; *) other=$base ;; esac
  if [ -n "$base" ] && as_other_user_copies "$base/bin" "$lib" "$prog"; then
    ro="$base/ro"
    mkdir "$ro"
    cp "$plan" "$ro/$name"
    chmod 755 "$ro"
    chmod 644 "$ro/$name"
    before=$(ls -la --time-style=full-iso "$ro")
    out=$(lib="$base/bin/$(basename "$lib")" prog="$base/bin/$(basename "$prog")" run "$ro" "${other_user[@]}"); rc=$?
    clean read-only "$out" $rc
    expect read-only "$out" plans_loaded -eq 1
    expect read-only "$out" recordings -eq 0
    expect read-only "$out" slab_hits -eq 288
    [ "$before" = "$(ls -la --time-style=full-iso "$ro")" ] && echo "ok    read-only: nothing written" \
      || { echo "FAIL  read-only: the directory changed"; fail=1; }
  else
    echo "SKIP  read-only: user 65534 can reach no copy of the library and the program (above)"
    skipped=1
  fi
else
  echo "skip  read-only: needs root and setpriv to run as another user"
fi

# Skipped (ctest SKIP_RETURN_CODE 77) when a part that could run here could not.
[ "$fail" -eq 0 ] && [ "$skipped" -eq 1 ] && exit 77
exit $fail
