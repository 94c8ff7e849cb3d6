#!/usr/bin/env bash
# The project built and tested from a clone whose parent directory only its owner may
# enter (mktemp -d: 0700), as a clone under root's home is (issue 33): every test must
# pass there; those that run a process as another user (preload.plan_dir_safety and
# preload.plan_fleet, as user 65534) must bring what that user runs to a place it can
# read, not fail a correct build. Clones the committed HEAD of SOURCE_DIR, configures
# it as scripts/test.sh does but without the sanitizer variants, builds what those two
# tests run (the LD_PRELOAD library, preload_restart, the command-line tool) and runs
# them there with ctest, checking that both ran and passed. The rest of the suite runs
# as root, who enters a 0700 directory: it ran in the source's own build already (this
# test once built and ran all of it again, 16 of CI's 37 minutes).
# Exit 77 (skipped, with the reason): SOURCE_DIR is not a git checkout, git or cmake is
# missing, or the tests cannot run as another user here (not root): their own skip.
# Usage: run_private_clone.sh SOURCE_DIR
set -uo pipefail
src=$1
command -v git > /dev/null || { echo "SKIP: no git"; exit 77; }
command -v cmake > /dev/null || { echo "SKIP: no cmake"; exit 77; }
git -C "$src" rev-parse --verify -q HEAD > /dev/null || { echo "SKIP: $src is not a git checkout"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: not root: the tests that run as user 65534 skip themselves here"; exit 77; }
# The suite sets its own settings per test: none of this test's own (ctest gives it
# REPLAYALLOC_BACKGROUND_PLANNING=0, as every test of this folder) may reach them.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(REPLAYALLOC_[A-Z0-9_]*\)=.*/\1/p')
tmp=$(mktemp -d)  # 0700: user 65534 may not enter it
trap 'rm -rf "$tmp"' EXIT
[ "$(stat -c %a "$tmp")" = 700 ] || { echo "FAIL: mktemp -d made $(stat -c %a "$tmp"), not 700"; exit 1; }
echo "== cloning $(git -C "$src" rev-parse --short HEAD) into $tmp/src (parent mode 700)"
git clone -q --no-hardlinks "$src" "$tmp/src" || { echo "FAIL: git clone"; exit 1; }
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
static=()
[ -d /usr/local/src/replayalloc ] && static=(-DREPLAYALLOC_STATIC_ABSEIL=ON)  # as scripts/test.sh
cmake -S "$tmp/src" -B "$tmp/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${static[@]}" \
  -DREPLAYALLOC_SANITIZER_TESTS=OFF > "$tmp/configure.log" 2>&1 ||
  { tail -20 "$tmp/configure.log"; echo "FAIL: configure"; exit 1; }
cmake --build "$tmp/build" -j"$(nproc)" --target replayalloc_preload preload_restart replayalloc_cli \
  > "$tmp/build.log" 2>&1 || { tail -20 "$tmp/build.log"; echo "FAIL: build"; exit 1; }
out=$(ctest --test-dir "$tmp/build" -R '^preload\.(plan_dir_safety|plan_fleet)$' --output-on-failure 2>&1)
echo "$out" | grep -E "tests passed|Failed|Not Run|\*\*\*" | head -20
grep -q "100% tests passed, 0 tests failed out of 2" <<<"$out" ||
  { echo "$out" | tail -30; echo "FAIL: the tests that run as another user failed in a private clone"; exit 1; }
for t in preload.plan_dir_safety preload.plan_fleet; do
  grep -Eq "Test +#[0-9]+: $t \.+ +Passed" <<<"$out" || { echo "FAIL: $t did not run and pass in the private clone"; exit 1; }
done
echo "ok: the tests that run as user 65534 pass from a clone under a 0700 directory"
