"""Which build runs: edge.build's list of compiled modules, and the check that they are.

The compiled build (``scripts/build-compiled``, ``EDGE_COMPILE=1``) is tested with
EDGE_COMPILE=1 in the environment: then every module of ``COMPILED`` must import as a
C extension, so a build that silently left one in Python fails here. Without it, the
tree must be the pure build: no module of the list is an extension.
"""

from __future__ import annotations

import importlib
import os
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, SourceFileLoader
from pathlib import Path

import pytest

from edge import build

COMPILED_BUILD = os.environ.get("EDGE_COMPILE") == "1"
EDGE = Path(build.__file__).resolve().parent


def test_every_listed_module_has_its_source_in_the_package():
    # setup.py turns each name into the path it hands mypyc
    for name in build.COMPILED:
        path = EDGE.parent / Path(*name.split(".")).with_suffix(".py")
        assert path.is_file(), f"edge.build.COMPILED names {name}, which has no {path}"
    assert len(set(build.COMPILED)) == len(build.COMPILED)


@pytest.mark.skipif(not COMPILED_BUILD, reason="the pure build (EDGE_COMPILE=1 tests the compiled)")
def test_the_compiled_build_loads_every_listed_module_as_an_extension():
    for name in build.COMPILED:
        module = importlib.import_module(name)
        assert isinstance(module.__loader__, ExtensionFileLoader), (
            f"{name} was loaded from {module.__file__}, not compiled"
        )
        assert str(module.__file__).endswith(tuple(EXTENSION_SUFFIXES))
    assert build.extensions() == list(build.COMPILED)
    assert build.describe().startswith("compiled (mypyc), all ")


@pytest.mark.skipif(COMPILED_BUILD, reason="EDGE_COMPILE=1: the compiled build is under test")
def test_the_pure_build_loads_every_listed_module_from_source():
    for name in build.COMPILED:
        module = importlib.import_module(name)
        assert isinstance(module.__loader__, SourceFileLoader), (
            f"{name} was loaded from {module.__file__}: a compiled build in a pure tree"
        )
    assert build.extensions() == []
    assert build.describe() == "pure Python"
