#!/usr/bin/env bash
# The Python package as a wheel, used the way the README's "Installing" section says:
#   1. builds the wheel from a copy of integrations/pytorch/python (so the source tree
#      stays untouched) with Debian's /usr/bin/python3 -m pip wheel --no-build-isolation
#      --no-index, taking the library from BUILD_DIR (REPLAYALLOC_BUILD_DIR); checks it
#      is a platform wheel carrying replayalloc/lib/libreplayalloc_torch.so and that the
#      library needs none of the project's other libraries,
#   2. makes a fresh virtual environment (/usr/bin/python3 -m venv --system-site-packages,
#      for Debian's torch) and installs the wheel with pip install --no-index --no-deps,
#   3. with no PYTHONPATH and no REPLAYALLOC_* in the environment, from an empty folder:
#      imports replayalloc.torch from the environment, the library from the wheel,
#      __version__ that of the build, runs a small model for a few iterations under
#      replayalloc.torch.iteration() and finds slab hits in the statistics,
#   4. `pip install .` at the root of a clean clone of the source (pyproject.toml there;
#      the working tree's uncommitted files copied in) into another fresh environment
#      installs the same files as the wheel, and the package works there with no
#      environment variables but REPLAYALLOC_BUILD_DIR at install time,
#   5. a wheel build with REPLAYALLOC_BUILD_DIR naming a folder without the library
#      fails, saying where it looked.
# Exit 77 (ctest's SKIP_RETURN_CODE), saying why, when /usr/bin/python3 cannot import
# torch; any failing step ends the script with a message and exit code 1.
# Usage: run_wheel_test.sh BUILD_DIR [SOURCE_DIR]
set -uo pipefail

fail() { echo "wheel test: FAIL: $*" >&2; exit 1; }
step() { echo "== wheel test: $*"; }

[ $# -ge 1 ] || fail "usage: run_wheel_test.sh BUILD_DIR [SOURCE_DIR]"
build=$(cd "$1" 2>/dev/null && pwd -P) || fail "no build folder $1"
here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "${2:-$here/../..}" && pwd -P)
python=/usr/bin/python3
package_src=$src/integrations/pytorch/python

if ! "$python" -c 'import torch' > /dev/null 2>&1; then
  echo "wheel test: SKIPPED: $python cannot import torch (apt install python3-torch)"
  exit 77
fi
[ -f "$package_src/pyproject.toml" ] || fail "no $package_src/pyproject.toml: the package cannot be built as a wheel"
lib=$build/integrations/pytorch/libreplayalloc_torch.so
[ -f "$lib" ] || fail "no $lib (libreplayalloc_torch.so is not built: configure found no libtorch?)"
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$build/python/replayalloc/_version.py") ||
  fail "no $build/python/replayalloc/_version.py"
[ -n "$version" ] || fail "$build/python/replayalloc/_version.py names no version"

# Nothing of the caller's environment may do the wheel's work for it.
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV PIP_FIND_LINKS
for v in $(compgen -e | grep '^REPLAYALLOC_'); do unset "$v"; done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/replayalloc-wheel.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
tmp=$(cd "$tmp" && pwd -P)

# ---- build
step "pip wheel integrations/pytorch/python --no-build-isolation (REPLAYALLOC_BUILD_DIR=$build)"
mkdir -p "$tmp/src" &&
  cp -r "$package_src/pyproject.toml" "$package_src/setup.py" "$package_src/replayalloc" "$tmp/src/" &&
  rm -rf "$tmp/src/replayalloc/__pycache__" "$tmp/src/replayalloc/lib" "$tmp/src/replayalloc/_version.py" ||
  fail "copying the package's sources"
(cd "$tmp" && REPLAYALLOC_BUILD_DIR="$build" "$python" -m pip wheel "$tmp/src" --no-build-isolation --no-deps \
   --no-index -w "$tmp/dist") > "$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log" >&2; fail "pip wheel failed"; }
wheel=$(ls "$tmp"/dist/replayalloc-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || { cat "$tmp/wheel.log" >&2; fail "pip wheel made no replayalloc-*.whl"; }
case "$(basename "$wheel")" in
  "replayalloc-$version-py3-none-linux_"*.whl) ;;
  *) fail "the wheel is $(basename "$wheel"), not replayalloc-$version-py3-none-linux_<arch>.whl" ;;
esac
"$python" -m zipfile -l "$wheel" > "$tmp/wheel.list" || fail "the wheel is not a zip file"
for f in replayalloc/__init__.py replayalloc/torch.py replayalloc/_version.py replayalloc/lib/libreplayalloc_torch.so; do
  grep -qE "^$f " "$tmp/wheel.list" || { cat "$tmp/wheel.list" >&2; fail "the wheel does not carry $f"; }
done
if command -v readelf > /dev/null; then
  needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  ! grep -q '^libreplayalloc' <<<"$needed" ||
    fail "libreplayalloc_torch.so needs $(grep '^libreplayalloc' <<<"$needed"), which the wheel does not carry"
fi
echo "$(basename "$wheel"): carries replayalloc/lib/libreplayalloc_torch.so, which needs no other replayalloc library"

# ---- install into a fresh virtual environment
step "$python -m venv --system-site-packages; pip install --no-index --no-deps the wheel"
"$python" -m venv --system-site-packages "$tmp/venv" > "$tmp/venv.log" 2>&1 ||
  { cat "$tmp/venv.log" >&2; fail "$python -m venv failed (apt install python3-venv)"; }
"$tmp/venv/bin/python" -m pip install --no-index --no-deps "$wheel" > "$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "pip install of the wheel failed"; }

# ---- use it, with nothing pointing at the build
step "import replayalloc.torch in the environment, no PYTHONPATH, no REPLAYALLOC_LIBRARY"
mkdir -p "$tmp/run"
(cd "$tmp/run" && "$tmp/venv/bin/python" -c '
import os, sys
import torch
import replayalloc
import replayalloc.torch as rt
venv, version = sys.argv[1], sys.argv[2]
assert replayalloc.__file__.startswith(venv + "/"), "imported " + replayalloc.__file__
assert replayalloc.__version__ == version, replayalloc.__version__ + " is not the build version " + version
rt.install_cpu()
want = os.path.join(os.path.dirname(replayalloc.__file__), "lib", "libreplayalloc_torch.so")
assert rt.library_path() == want, "loaded " + rt.library_path() + ", not the wheel library " + want
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
x = torch.randn(32, 256)
with torch.no_grad():
    for i in range(6):
        with rt.iteration("wheel-test/mlp"):
            y = model(x).sum().item()
        if i == 1:
            replayalloc.wait_plans()  # warm-up done: its plan is made by the planner thread
s = rt.stats()
assert s["slab_hits"] > 0, s
print("wheel: replayalloc", replayalloc.__version__, "from", rt.library_path(), "slab_hits", s["slab_hits"])
' "$tmp/venv" "$version") || fail "the wheel installed in a fresh environment did not work (above)"

# ---- pip install . at the root of a clean clone (pyproject.toml there), into another
# fresh environment: the same files as the wheel above, and the package works there too
step "pip install . at the root of a clean clone, into a fresh virtual environment"
if git -C "$src" rev-parse --git-dir > /dev/null 2>&1; then
  git clone -q --no-hardlinks "$src" "$tmp/clone" > "$tmp/clone.log" 2>&1 ||
    { cat "$tmp/clone.log" >&2; fail "git clone of $src failed"; }
  # What the working tree has that is not committed yet (a session's change under test).
  git -C "$src" ls-files -z --modified --others --exclude-standard |
    (cd "$src" && xargs -0 -r cp --parents -t "$tmp/clone" 2> /dev/null) || true
else
  cp -r "$src" "$tmp/clone" && rm -rf "$tmp/clone/build"
fi
"$python" -m venv --system-site-packages "$tmp/venv-root" > "$tmp/venv-root.log" 2>&1 ||
  { cat "$tmp/venv-root.log" >&2; fail "$python -m venv failed"; }
(cd "$tmp/clone" && REPLAYALLOC_BUILD_DIR="$build" "$tmp/venv-root/bin/python" -m pip install . --no-build-isolation \
   --no-deps --no-index) > "$tmp/install-root.log" 2>&1 ||
  { cat "$tmp/install-root.log" >&2; fail "pip install . at the clone's root failed"; }
site=$("$tmp/venv-root/bin/python" -c 'import replayalloc, os; print(os.path.dirname(replayalloc.__file__))' 2> /dev/null) ||
  fail "pip install . installed no importable replayalloc"
(cd "$site" && find . -type f ! -path '*/__pycache__/*' | sort) > "$tmp/root-files"
"$python" -m zipfile -l "$wheel" | awk '$1 ~ /^replayalloc\// { sub(/^replayalloc/, ".", $1); print $1 }' | sort > "$tmp/wheel-files"
diff "$tmp/wheel-files" "$tmp/root-files" > "$tmp/files.diff" ||
  { cat "$tmp/files.diff" >&2; fail "pip install . installed other files than the wheel carries (above)"; }
cmp -s "$site/lib/libreplayalloc_torch.so" "$lib" || fail "pip install . carries another library than $lib"
mkdir -p "$tmp/run-root"
(cd "$tmp/run-root" && "$tmp/venv-root/bin/python" -c '
import torch
import replayalloc
import replayalloc.torch as rt
rt.install_cpu()
for i in range(6):
    with rt.iteration("root-install/mlp"):
        torch.randn(64, 1024).relu_().sum().item()
s = rt.stats()
assert s["slab_hits"] > 0, s
print("pip install .: replayalloc", replayalloc.__version__, "slab_hits", s["slab_hits"])
') || fail "the package installed by pip install . did not work (above)"

# ---- no library, no wheel
step "REPLAYALLOC_BUILD_DIR naming a folder without the library"
mkdir -p "$tmp/empty-build"
rm -rf "$tmp/src/build"
if (cd "$tmp" && REPLAYALLOC_BUILD_DIR="$tmp/empty-build" "$python" -m pip wheel "$tmp/src" --no-build-isolation \
      --no-deps --no-index -w "$tmp/dist2") > "$tmp/wheel2.log" 2>&1; then
  fail "pip wheel made a wheel without a library"
fi
grep -qF "replayalloc wheel: no libreplayalloc_torch.so or libreplayalloc_cuda.so to carry; looked (REPLAYALLOC_BUILD_DIR) in:" "$tmp/wheel2.log" ||
  { cat "$tmp/wheel2.log" >&2; fail "pip wheel without a library did not say where it looked"; }
echo "no library: refused, naming $tmp/empty-build/integrations/pytorch/libreplayalloc_torch.so"

echo "wheel test: PASS"
