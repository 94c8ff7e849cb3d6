"""The wheel's build steps that pyproject.toml cannot say: it carries the library.

Layer: packaging only; never imported by the package. It runs no CMake: the library
comes from a finished build or install, found in this order:
  REPLAYALLOC_BUILD_DIR=DIR   a CMake build folder (DIR/integrations/pytorch/
                              libreplayalloc_torch.so, else DIR/integrations/cuda/
                              libreplayalloc_cuda.so), its version from
                              DIR/python/replayalloc/_version.py (CMake writes it);
  REPLAYALLOC_PREFIX=DIR      an installed prefix (DIR/lib/<multiarch>, lib64, lib);
  neither                     the source tree's build/ folder (scripts/test.sh's).
The library is copied to replayalloc/lib/, the first place replayalloc.load() looks, so
the installed wheel needs no PYTHONPATH and no REPLAYALLOC_LIBRARY. What the library
needs besides (libtorch, Abseil, libcudart) comes from the system, as for the library
itself; it does not need the project's other libraries.
"""
import os
import re
import shutil
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # python3-wheel missing: pip then says it needs "wheel"
    bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
LIBRARIES = (("integrations/pytorch", "libreplayalloc_torch.so"), ("integrations/cuda", "libreplayalloc_cuda.so"))


def _read_version(path):
    try:
        with open(path, encoding="utf-8") as f:
            m = re.search(r'__version__\s*=\s*"([^"]+)"', f.read())
        return m.group(1) if m else None
    except OSError:
        return None


def _source_version():
    """project(VERSION) of the source tree's CMakeLists.txt, where CMake takes it from."""
    try:
        with open(os.path.join(SOURCE_ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
            m = re.search(r"project\(replayalloc\s+VERSION\s+([0-9.]+)", f.read())
        return m.group(1) if m else None
    except OSError:
        return None


def find_library():
    """(library path, version, where it came from, folders looked in); path None when
    nothing was found."""
    looked = []
    build_dir = os.environ.get("REPLAYALLOC_BUILD_DIR")
    prefix = os.environ.get("REPLAYALLOC_PREFIX")
    if build_dir or not prefix:
        origin = "REPLAYALLOC_BUILD_DIR" if build_dir else "the source tree's build folder"
        root = os.path.abspath(build_dir or os.path.join(SOURCE_ROOT, "build"))
        version = _read_version(os.path.join(root, "python", "replayalloc", "_version.py"))
        for folder, name in LIBRARIES:
            path = os.path.join(root, folder, name)
            looked.append(path)
            if os.path.exists(path):
                return path, version, f"{origin} ({root})", looked
        if build_dir:
            return None, None, origin, looked
    if prefix:
        prefix = os.path.abspath(prefix)
        multiarch = sysconfig.get_config_var("MULTIARCH")
        libdirs = ([os.path.join("lib", multiarch)] if multiarch else []) + ["lib64", "lib"]
        version = _read_version(os.path.join(prefix, "lib", "python3", "dist-packages", "replayalloc", "_version.py"))
        for _, name in LIBRARIES:
            for libdir in libdirs:
                path = os.path.join(prefix, libdir, name)
                looked.append(path)
                if os.path.exists(path):
                    return path, version, f"REPLAYALLOC_PREFIX ({prefix})", looked
        return None, None, "REPLAYALLOC_PREFIX", looked
    return None, None, "the source tree's build folder", looked


LIBRARY, LIBRARY_VERSION, ORIGIN, LOOKED = find_library()
VERSION = LIBRARY_VERSION or _source_version() or "0+unknown"


class build_py_with_library(build_py):
    """build_py, then the library into replayalloc/lib/ and replayalloc/_version.py."""

    def run(self):
        if LIBRARY is None:
            raise SystemExit(
                "replayalloc wheel: no libreplayalloc_torch.so or libreplayalloc_cuda.so to carry; "
                f"looked ({ORIGIN}) in:\n  " + "\n  ".join(LOOKED) +
                "\nbuild it first (cmake --build build), then set REPLAYALLOC_BUILD_DIR=<the CMake "
                "build folder> or REPLAYALLOC_PREFIX=<the install prefix>; no wheel was made")
        super().run()
        package = os.path.join(self.build_lib, "replayalloc")
        os.makedirs(os.path.join(package, "lib"), exist_ok=True)
        target = os.path.join(package, "lib", os.path.basename(LIBRARY))
        shutil.copyfile(os.path.realpath(LIBRARY), target)
        os.chmod(target, 0o755)
        with open(os.path.join(package, "_version.py"), "w", encoding="utf-8") as f:
            f.write(f'__version__ = "{VERSION}"\n')
        print(f"replayalloc wheel: carries {LIBRARY} from {ORIGIN}, version {VERSION}")


class distribution_with_library(Distribution):
    """A platform distribution: it carries a Linux library (installed to platlib)."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": build_py_with_library}
if bdist_wheel is not None:
    class bdist_wheel_any_python(bdist_wheel):
        """A platform wheel for any Python 3: the package is pure Python over ctypes,
        so no interpreter ABI tag (py3-none-linux_x86_64)."""

        def get_tag(self):
            return "py3", "none", super().get_tag()[2]

    cmdclass["bdist_wheel"] = bdist_wheel_any_python

setup(version=VERSION, cmdclass=cmdclass, distclass=distribution_with_library)
