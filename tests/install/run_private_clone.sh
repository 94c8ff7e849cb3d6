#!/usr/bin/env bash
# The tests that run a process as another user, from a clone whose parent directory
# only its owner may enter (mktemp -d: 0700), as a clone under root's home is (issue
# 33): preload.plan_dir_safety and preload.plan_fleet run what they test as user 65534,
# and must bring what that user runs (the LD_PRELOAD library, the programs) to a place
# it can read, not fail a correct build. Clones the committed HEAD of SOURCE_DIR under
# such a directory, puts the build's LD_PRELOAD library, preload_restart and command-line
# tool beside it (copies, as a build there would make them: the same commit's), and
# runs the two tests' scripts from the clone on them; both must pass, neither skip. The
# rest of the suite runs as root, who enters a 0700 directory: it ran in the source's
# own build. (This test once built the clone and ran the whole suite in it: 16 of CI's
# 37 minutes; then built only these three: 7 of its 10.)
# Exit 77 (skipped, with the reason): SOURCE_DIR is not a git checkout, git is missing,
# or the tests cannot run as another user here (not root, no setpriv).
# Usage: run_private_clone.sh SOURCE_DIR PRELOAD_LIBRARY RESTART_PROGRAM CLI_PROGRAM
set -uo pipefail
src=$1 lib=$2 restart=$3 cli=$4
command -v git > /dev/null || { echo "SKIP: no git"; exit 77; }
git -C "$src" rev-parse --verify -q HEAD > /dev/null || { echo "SKIP: $src is not a git checkout"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: not root: the tests that run as user 65534 skip themselves here"; exit 77; }
command -v setpriv > /dev/null || { echo "SKIP: no setpriv: the tests cannot run as another user"; exit 77; }
for f in "$lib" "$restart" "$cli"; do
  [ -f "$f" ] || { echo "FAIL: $f is not built"; exit 1; }
done
# The suite sets its own settings per test: none of this test's own may reach them.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(REPLAYALLOC_[A-Z0-9_]*\)=.*/\1/p')
tmp=$(mktemp -d)  # 0700: user 65534 may not enter it
trap 'rm -rf "$tmp"' EXIT
[ "$(stat -c %a "$tmp")" = 700 ] || { echo "FAIL: mktemp -d made $(stat -c %a "$tmp"), not 700"; exit 1; }
echo "== cloning $(git -C "$src" rev-parse --short HEAD) into $tmp/src (parent mode 700)"
git clone -q --no-hardlinks "$src" "$tmp/src" || { echo "FAIL: git clone"; exit 1; }
mkdir -p "$tmp/build/hooks" "$tmp/build/tests" "$tmp/build/allocator/cli"
cp "$lib" "$tmp/build/hooks/" && cp "$restart" "$tmp/build/tests/" && cp "$cli" "$tmp/build/allocator/cli/" ||
  { echo "FAIL: copying the build's programs"; exit 1; }
in_clone() { echo "$tmp/build/$1/$(basename "$2")"; }
status=0
for t in plan_dir_safety plan_fleet; do
  args=("$(in_clone hooks "$lib")" "$(in_clone tests "$restart")")
  [ "$t" = plan_fleet ] && args+=("$(in_clone allocator/cli "$cli")")
  out=$(cd "$tmp" && bash "$tmp/src/tests/preload/run_$t.sh" "${args[@]}" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] || grep -q "^SKIP" <<<"$out"; then
    echo "$out" | tail -30
    echo "FAIL: preload.$t exited $rc in a private clone$(grep -q '^SKIP' <<<"$out" && echo ', a part skipped')"
    status=1
  else
    echo "ok: preload.$t passes from a clone under a 0700 directory ($(grep -c '^ok' <<<"$out") checks)"
  fi
done
exit $status
