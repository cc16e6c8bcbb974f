"""The import direction of edge's modules, as docs/design.md draws it.

Each module may import only modules of its own layer or of layers below it
(imports inside ``if TYPE_CHECKING:`` are for annotations and do not count),
the data plane never imports a provider or the watcher, and no two modules
import each other, directly or around a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EDGE = Path(__file__).resolve().parents[2] / "edge"

# Lowest first; a module belongs to the first layer with a prefix of its name.
LAYERS: list[tuple[str, ...]] = [
    ("edge.errors", "edge.deadlines", "edge.allocator", "edge.descriptors", "edge.eventloop"),
    ("edge.rules", "edge.balancer"),
    ("edge.config",),
    ("edge.providers", "edge.logs", "edge.ipc", "edge.api"),
    ("edge.watcher",),
    ("edge.transports",),
    # sans-IO HTTP (heads, parsers, head writers) and the middlewares the routers hold
    ("edge.http.codec", "edge.http.middlewares"),
    ("edge.tls", "edge.tcp"),
    ("edge.router",),
    # the HTTP server: a client connection, its exchanges, upstream connections
    ("edge.http.server",),
    ("edge.udp",),
    ("edge.entrypoints",),
    ("edge.app",),
    ("edge.supervisor",),
    ("edge.cli", "edge.__main__", "edge.whoami"),
]
DATA_PLANE = (
    "edge.http",
    "edge.tls",
    "edge.tcp",
    "edge.udp",
    "edge.router",
    "edge.entrypoints",
    "edge.transports",
)
CONTROL_PLANE = ("edge.providers", "edge.watcher")


def _name(path: Path) -> str:
    parts = list(path.relative_to(EDGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def _imports(tree: ast.Module, modules: set[str]) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _STATEMENTS):
                continue  # an import is a statement: expressions hold none
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name in modules)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module in modules:
                found.add(child.module)
                found.update(
                    f"{child.module}.{a.name}"
                    for a in child.names
                    if f"{child.module}.{a.name}" in modules
                )
            visit(child)

    visit(tree)
    return found


@pytest.fixture(scope="module")
def graph(edge_trees: dict[Path, ast.Module]) -> dict[str, set[str]]:
    """Every module's imports of other edge modules, found once for the three tests."""
    trees = {_name(path): tree for path, tree in edge_trees.items()}
    modules = set(trees)
    return {name: _imports(tree, modules) - {name} for name, tree in trees.items()}


def _layer(module: str) -> int:
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and to docs/design.md")


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_every_import_goes_down_the_layers(graph):
    wrong = [
        f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
        for m, deps in graph.items()
        if m != "edge"  # the package itself: only a version string
        for d in deps
        if d != "edge" and not _under(m, (d,)) and _layer(d) > _layer(m)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_data_plane_never_imports_the_control_plane(graph):
    wrong = [
        f"{m} imports {d}"
        for m, deps in graph.items()
        if _under(m, DATA_PLANE)
        for d in deps
        if _under(d, CONTROL_PLANE)
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles(graph):
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                raise AssertionError(
                    "import cycle: " + " -> ".join([*path[path.index(dep) :], dep])
                )
            if dep not in state:
                walk(dep, [*path, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
