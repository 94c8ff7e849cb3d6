"""The build backend of the repository root's pyproject.toml: `pip install .` and
`pip wheel .` at the root build the same wheel as integrations/pytorch/python does.

Layer: packaging only; never imported by the package. setuptools builds a project from
the current directory (its setup.py, pyproject.toml and packages), so every PEP 517 hook
here runs setuptools' own in this folder, with the paths it is given, and the build
folder or prefix the environment names, made absolute first (REPLAYALLOC_BUILD_DIR=build
means the root's build/). setup.py beside this file takes the library from a finished
build or install and never runs CMake.
"""
import functools
import os

from setuptools import build_meta as _setuptools

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _here(hook):
    @functools.wraps(hook)
    def run(*args, **kwargs):
        caller = os.getcwd()
        for name in ("REPLAYALLOC_BUILD_DIR", "REPLAYALLOC_PREFIX"):
            if os.environ.get(name):
                os.environ[name] = os.path.abspath(os.environ[name])
        # Directory arguments (wheel_directory, metadata_directory) relative to the caller.
        args = tuple(os.path.abspath(a) if isinstance(a, str) else a for a in args)
        for key in ("wheel_directory", "metadata_directory", "sdist_directory"):
            if isinstance(kwargs.get(key), str):
                kwargs[key] = os.path.abspath(kwargs[key])
        os.chdir(_PACKAGE_DIR)
        try:
            return hook(*args, **kwargs)
        finally:
            os.chdir(caller)
    return run


get_requires_for_build_wheel = _here(_setuptools.get_requires_for_build_wheel)
prepare_metadata_for_build_wheel = _here(_setuptools.prepare_metadata_for_build_wheel)
build_wheel = _here(_setuptools.build_wheel)
