"""Fixtures the unit tests share: edge's own source, parsed once per run.

The tests that read the source (the import layers, where the deadline kinds
are defined) walk the same 130-odd modules; parsing them is most of their cost,
so it is done once and the trees are only read.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EDGE = Path(__file__).resolve().parents[2] / "edge"


@pytest.fixture(scope="session")
def edge_trees() -> dict[Path, ast.Module]:
    """Every module under edge/, by path, as its syntax tree (read only: tests share them)."""
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(EDGE.rglob("*.py"))}
