"""The sweep's contract (:class:`edge.entrypoints.base.Swept`) and its one set of deadline kinds.

mypy checks the kinds in its allowlist against ``Swept`` where they join an
entrypoint's ``connections`` (``set[Swept]``); these tests also cover the HTTP
server's kinds, still in the type debt, and keep the deadline kinds from being
redefined module by module again.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge import deadlines
from edge.deadlines import DeadlineKind
from edge.entrypoints.base import Swept
from edge.http.server.connection import HTTPConnection, Tunnel
from edge.tcp.peek import Peek, Relay
from edge.tcp.proxied import ProxyHeaderReader
from edge.tls.terminate import TLSAccept, TLSTransport

EDGE = Path(deadlines.__file__).parent

# Every kind of connection an entrypoint keeps in its ``connections``.
SWEPT = [HTTPConnection, Tunnel, Peek, Relay, ProxyHeaderReader, TLSTransport, TLSAccept]

ATTRIBUTES = ("deadline", "deadline_kind")
METHODS = ("deadline_passed", "shutdown", "abort")


def _defines(kind: type, name: str) -> bool:
    """``kind`` (or an edge class it inherits from) has ``name`` as a class attribute,
    a slot, or sets ``self.<name>``."""
    return any(
        name in vars(k) or f"self.{name} = " in inspect.getsource(k)
        for k in kind.__mro__
        if k.__module__.startswith("edge.")
    )


def test_the_protocol_names_what_the_sweep_and_the_drain_use():
    members = {n for n in vars(Swept) if not n.startswith("_")} | set(Swept.__annotations__)
    assert members == set(ATTRIBUTES + METHODS)


@pytest.mark.parametrize("kind", SWEPT, ids=lambda k: k.__name__)
def test_every_connection_kind_keeps_the_contract(kind):
    for name in METHODS:
        assert callable(getattr(kind, name, None)), f"{kind.__name__}.{name}"
    for name in ATTRIBUTES:
        assert _defines(kind, name), f"{kind.__name__}.{name}"


def test_no_deadline_is_false_and_the_module_names_are_the_members():
    assert not DeadlineKind.NONE
    assert all(DeadlineKind(value) for value in range(1, len(DeadlineKind)))
    assert deadlines.NO_DEADLINE is DeadlineKind.NONE
    for name in set(deadlines.__all__) - {"DeadlineKind", "NO_DEADLINE"}:
        assert getattr(deadlines, name) is DeadlineKind[name]


def _statements(body: list[ast.AST]) -> Iterator[ast.AST]:
    """Every statement in ``body`` and the blocks nested in it (an assignment is one;
    expressions, the bulk of a tree, hold none, so they are not walked)."""
    for node in body:
        yield node
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, block, []))


def test_deadline_kinds_are_defined_in_one_module(edge_trees: dict[Path, ast.Module]):
    """Each connection module once had its own integers (http's HEAD was 2, and so
    was TLS's HANDSHAKING); a kind is now imported from edge.deadlines."""
    names = set(deadlines.__all__)
    wrong = []
    assert EDGE / "deadlines.py" in edge_trees
    for path, tree in edge_trees.items():
        if path == EDGE / "deadlines.py":
            continue
        where = path.relative_to(EDGE.parent)
        for node in tree.body:  # module level: no name of a kind assigned
            if isinstance(node, ast.Assign):
                found = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                wrong += [f"{where}:{node.lineno} defines {name}" for name in found & names]
        for node in _statements(tree.body):  # no kind set as a bare number
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                targets = {getattr(t, "attr", getattr(t, "id", "")) for t in node.targets}
                if "deadline_kind" in targets:
                    wrong.append(f"{where}:{node.lineno} sets deadline_kind to a number")
    assert not wrong, "\n".join(wrong)
