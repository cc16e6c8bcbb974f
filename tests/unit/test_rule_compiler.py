"""RuleCompiler: a rule compiled from the shape of an earlier one is the rule compile_rule makes.

Rules written alike (``Host(`a`) && Path(`/x`)``, ``Host(`b`) && Path(`/y`)``) share a
parse; the compiler builds each one's matchers from its own values. Here every rule of a
table is compiled both ways, in an order that makes most of them take a shape seen
before, and the two results compared node by node (types, values, host keys), or, for a
bad rule, error by error (message and column).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.errors import RuleError
from edge.rules import Rule, RuleCompiler, compile_rule

SHAPES = [
    ("http", "v3", "Host(`{}`)"),
    ("http", "v3", "Host(`{}`) && Path(`{}`)"),
    ("http", "v3", "Host(`{}`) && (Path(`{}`) || PathPrefix(`{}`))"),
    ("http", "v3", "PathPrefix(`{}`)"),
    ("http", "v3", "!Method(`{}`) && HostRegexp(`{}`)"),
    ("http", "v3", "Header(`{}`, `{}`) || Query(`{}`)"),
    ("http", "v3", "ClientIP(`{}`) && PathRegexp(`{}`)"),
    ("http", "v2", "Host(`{}`, `{}`) && PathPrefix(`{}`)"),
    ("http", "v2", "HostRegexp(`{}`)"),
    ("tcp", "v3", "HostSNI(`{}`) && ClientIP(`{}`)"),
    ("tcp", "v3", "HostSNIRegexp(`{}`)"),
]

VALUES = [
    "a.example.com", "*.example.com", "B.Example.COM", "/api", "/api/", "/", "GET",
    "^[a-z]+\\.example\\.com$", "X-Env", "prod", "10.0.0.0/8", "::1", "*", "",
    "/a%2Fb", "{sub:[a-z]+}.example.com", "(", "caf\u00e9.com", "a b", "x`",
]  # fmt: skip


def dump(node: Any) -> Any:
    """A node as plain data: its type and every slot that is not a bound match function."""
    if isinstance(node, tuple | list):
        return [dump(n) for n in node]
    if type(node).__module__ == "ipaddress":
        return repr(node)
    slots = getattr(type(node), "__slots__", None)
    if slots is None or isinstance(node, str | bytes | int | frozenset):
        return repr(node) if not isinstance(node, frozenset) else sorted(map(repr, node))
    out: dict[str, Any] = {"type": type(node).__name__}
    for slot in slots:
        value = getattr(node, slot, None)
        if slot == "searches":  # bound searches of compiled regexps: their patterns
            out[slot] = [repr(search.__self__) for search in value]
        elif slot not in ("fns", "fn"):
            out[slot] = dump(value)
    return out


def outcome(make: Any) -> Any:
    try:
        rule: Rule = make()
    except RuleError as exc:
        return ("error", str(exc), exc.column)
    return ("rule", rule.text, rule.kind, rule.syntax, dump(rule.root),
            sorted(rule.hosts) if rule.hosts is not None else None, rule.host_only)  # fmt: skip


def texts() -> list[tuple[str, str, str]]:
    out = []
    for kind, syntax, shape in SHAPES:
        n = shape.count("{}")
        for i in range(len(VALUES)):
            values = [VALUES[(i + k * 7) % len(VALUES)] for k in range(n)]
            if "`" in "".join(values):
                continue  # a backquote cannot stand in a backquoted string
            out.append((kind, syntax, shape.format(*values)))
    return out


def test_rules_written_alike_compile_as_compile_rule_compiles_them() -> None:
    compiler = RuleCompiler()
    cases = texts()
    assert len(cases) > 150
    errors = 0
    for kind, syntax, text in cases + cases:  # the second pass: every shape seen
        expected = outcome(lambda: compile_rule(text, kind=kind, syntax=syntax))  # noqa: B023
        got = outcome(lambda: compiler.compile(text, kind=kind, syntax=syntax))  # noqa: B023
        assert got == expected, text
        errors += expected[0] == "error"
    assert 20 < errors < 2 * len(cases) - 20  # both kinds of answer were compared
    assert len(compiler._plans) <= len(SHAPES)  # one parse per shape: the others built


@pytest.mark.parametrize(
    "text",
    [
        'Host("a.com") && Path(`/x`)',  # a double-quoted string: compiled in full
        "Host(`a.com`) && Path(`/x`) ||",
        "Host(`a.com`",
        "Hots(`a.com`)",
        "Host(`a.com`) && Path(`x`)",
    ],
)
def test_odd_rules_read_the_same(text: str) -> None:
    compiler = RuleCompiler()
    compiler.compile("Host(`b.com`) && Path(`/y`)")
    assert outcome(lambda: compiler.compile(text)) == outcome(lambda: compile_rule(text))


@settings(max_examples=200, deadline=None)
@given(
    host=st.text(alphabet="abcXYZ.-*09_ \u00e9", min_size=0, max_size=12),
    path=st.text(alphabet="/ab%2F{}:[]^$ ", min_size=0, max_size=10),
)
def test_a_shape_seen_gives_what_a_full_parse_gives(host: str, path: str) -> None:
    compiler = RuleCompiler()
    compiler.compile("Host(`seed.com`) && PathPrefix(`/seed`)")
    text = f"Host(`{host}`) && PathPrefix(`{path}`)"
    assert outcome(lambda: compiler.compile(text)) == outcome(lambda: compile_rule(text))
