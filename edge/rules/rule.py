"""The compiled rule: :func:`compile_rule` parses, validates and compiles a rule once;
:class:`RuleCompiler` does it for many rules written alike, reusing their parse.
"""

from __future__ import annotations

import re
from typing import Any, Final

from edge.errors import RuleError
from edge.rules.lexer import _Fail
from edge.rules.nodes import Match, _Always, _hosts_of, _without_host_conjuncts
from edge.rules.parser import _instantiate, _Parser, _Planner

KINDS: Final = ("http", "tcp")
SYNTAXES: Final = ("v3", "v2")
"""Rule syntaxes, the default first."""


def default_priority(rule_text: str) -> int:
    """Traefik's default router priority: the length of the rule text."""
    return len(rule_text)


class Rule:
    """A compiled rule. Immutable; safe to share between route tables and threads."""

    __slots__ = (
        "_indexed_match",
        "_match",
        "host_only",
        "hosts",
        "kind",
        "root",
        "syntax",
        "text",
    )

    def __init__(self, text: str, kind: str, root: Any, syntax: str = "v3") -> None:
        self.text = text
        self.kind = kind
        self.syntax = syntax
        self.root = root
        self._match: Match = root.match
        self.hosts: frozenset[str] | None = _hosts_of(root)
        # What RouteTable evaluates for a request it found under one of ``hosts``.
        indexed = root if self.hosts is None else _without_host_conjuncts(root)
        self._indexed_match: Match = indexed.match
        # Nothing but the host to check (``Host(`a`)``, ``Host(`a`) || Host(`b`)``).
        self.host_only = self.hosts is not None and isinstance(indexed, _Always)

    def match(self, req: Any) -> bool:
        return self._match(req)

    @property
    def catch_all(self) -> bool:
        """The rule is one matcher that takes everything (``HostSNI(`*`)``)."""
        return isinstance(self.root, _Always)

    def __repr__(self) -> str:
        return f"Rule({self.text!r}, kind={self.kind!r}, syntax={self.syntax!r})"


def compile_rule(rule: str, *, kind: str = "http", syntax: str = "v3") -> Rule:
    """Parse and validate ``rule`` once; raise :class:`RuleError` (with a column) if it is bad."""
    if kind not in KINDS:
        raise ValueError(f"unknown rule kind {kind!r}; expected one of {KINDS}")
    if syntax not in SYNTAXES:
        raise ValueError(f"unknown rule syntax {syntax!r}; expected one of {SYNTAXES}")
    try:
        root = _Parser(rule, kind, syntax).parse()
    except _Fail as fail:
        raise RuleError(rule, fail.column, fail.message) from None
    return Rule(rule, kind, root, syntax)


_LITERAL_RE: Final = re.compile(r"`[^`]*`")


class RuleCompiler:
    """:func:`compile_rule` for many rules written alike (a provider's: ``Host(`a`)``,
    ``Host(`b`)``, ...): a rule whose text differs from one compiled before only inside
    its backquoted strings takes that rule's parse (its *shape*) and builds the matchers
    of its own values, without lexing and parsing it. The result is the same
    :class:`Rule`; any value the matchers refuse, and any rule with a double-quoted
    string, is compiled by :func:`compile_rule`, so errors read the same. Holds one
    plan per shape seen; use one per configuration.
    """

    def __init__(self) -> None:
        self._plans: dict[tuple[str, str, str], Any] = {}

    def compile(self, rule: str, *, kind: str = "http", syntax: str = "v3") -> Rule:
        if '"' in rule:
            return compile_rule(rule, kind=kind, syntax=syntax)
        values: list[str] = []
        columns: list[int] = []
        pieces: list[str] = []
        last = 0
        for m in _LITERAL_RE.finditer(rule):
            start, end = m.span()
            pieces.append(rule[last:start])
            values.append(rule[start + 1 : end - 1])
            columns.append(start + 1)
            last = end
        pieces.append(rule[last:])
        key = (kind, syntax, "``".join(pieces))
        plan = self._plans.get(key)
        if plan is None:
            compiled = compile_rule(rule, kind=kind, syntax=syntax)  # raises for a bad rule
            self._plans[key] = _Planner(rule, kind, syntax, columns).parse()
            return compiled
        try:
            root = _instantiate(plan, values, columns)
        except _Fail:
            return compile_rule(rule, kind=kind, syntax=syntax)  # the error, as it reads
        return Rule(rule, kind, root, syntax)
