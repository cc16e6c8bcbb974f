"""The build: pure Python by default; EDGE_COMPILE=1 compiles the hot path with mypyc.

Everything else (name, dependencies, entry points) is in pyproject.toml. Without
EDGE_COMPILE this adds nothing, so ``pip install -e .`` needs python3 alone. With
``EDGE_COMPILE=1`` the modules of ``edge.build.COMPILED`` become C extensions beside
their source; that needs a C compiler and mypy (whose mypyc does the compiling) in the
build environment along with edge's dependencies, whose types mypyc reads:
``scripts/build-compiled`` installs it that way (``--no-build-isolation``).
"""

import os
import runpy
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def compiled_extensions() -> list:
    """mypyc's extensions for edge.build.COMPILED (read from that file, not imported)."""
    from mypyc.build import mypycify

    modules = runpy.run_path(str(HERE / "edge" / "build.py"))["COMPILED"]
    paths = [str(Path(*name.split(".")).with_suffix(".py")) for name in modules]
    # One shared library for them all, inside the package (edge/_compiled__mypyc*.so),
    # so an editable install and a wheel both find it.
    return mypycify(paths, opt_level="3", debug_level="0", group_name="edge._compiled")


# pip runs this file once per build step; only the steps that build extensions need
# mypyc's (minutes of) type checking and C generation, not those that read metadata.
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}

if os.environ.get("EDGE_COMPILE") == "1" and BUILDS & set(sys.argv[1:]):
    setup(ext_modules=compiled_extensions())
else:
    setup()
