"""The rule language's parser: a recursive descent over :mod:`edge.rules.lexer`'s tokens
into matcher nodes (:class:`_Parser`), or into a rule's *plan* (:class:`_Planner`) that
:class:`~edge.rules.rule.RuleCompiler` reuses for rules written alike.

Grammar (``&&`` binds tighter than ``||``, ``!`` tighter than both)::

    rule    := or
    or      := and ( "||" and )*
    and     := unary ( "&&" unary )*
    unary   := "!" unary | "(" or ")" | NAME "(" [ STRING ( "," STRING )* ] ")"
    STRING  := `raw`  |  "go-style \\"escaped\\""

A matcher's name is looked up in the rule's syntax (:mod:`edge.rules.v3`,
:mod:`edge.rules.v2`); every error is a _Fail at the offending token's column.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, Final

from edge.rules.arguments import _Spec
from edge.rules.lexer import _Fail, _Lexer, _Token
from edge.rules.nodes import _And, _combine, _Not, _Or
from edge.rules.v2 import _V3_INSTEAD
from edge.rules.v2 import MATCHERS as V2_MATCHERS
from edge.rules.v3 import MATCHERS as V3_MATCHERS

MAX_NESTING: Final = 64
"""Deepest allowed nesting of ``(`` and ``!``; deeper rules are rejected, not recursed into."""

_NO_SPEC: Final = _Spec(lambda args: None, 0, 0, ())

_MATCHERS: Final[dict[str, dict[str, _Spec]]] = {"v3": V3_MATCHERS, "v2": V2_MATCHERS}

# Traefik accepts each name as written, lowercased, uppercased, and Titlecased.
_SPELLINGS: Final[dict[str, str]] = {
    spelling: name
    for names in _MATCHERS.values()
    for name in names
    for spelling in (name, name.lower(), name.upper(), name.lower().title())
}


class _Parser:
    def __init__(self, text: str, kind: str, syntax: str) -> None:
        self.text = text
        self.kind = kind
        self.syntax = syntax
        self.matchers = _MATCHERS[syntax]
        self.lexer = _Lexer(text)
        self._lookahead: _Token | None = None

    @property
    def current(self) -> _Token:
        # Lexed only when looked at, so a lexical error after a token the parser
        # rejects anyway does not hide the more useful parse error.
        tok = self._lookahead
        if tok is None:
            tok = self._lookahead = self.lexer.next()
        return tok

    def advance(self) -> _Token:
        tok = self.current
        if tok.kind != "end":
            self._lookahead = None
        return tok

    def parse(self) -> Any:
        if self.current.kind == "end":
            raise _Fail(1, "empty rule")
        node = self.parse_or(0)
        tok = self.current
        if tok.kind == ")":
            raise _Fail(tok.column, "unexpected ')' with no matching '('")
        if tok.kind != "end":
            raise _Fail(tok.column, f"expected '&&', '||' or end of rule, found {tok.describe()}")
        return node

    def parse_or(self, depth: int) -> Any:
        children = [self.parse_and(depth)]
        while self.current.kind == "||":
            self.advance()
            children.append(self.parse_and(depth))
        return self.combine(_Or, children)

    def parse_and(self, depth: int) -> Any:
        children = [self.parse_unary(depth)]
        while self.current.kind == "&&":
            self.advance()
            children.append(self.parse_unary(depth))
        return self.combine(_And, children)

    def parse_unary(self, depth: int) -> Any:
        tok = self.advance()
        if depth >= MAX_NESTING:
            raise _Fail(tok.column, f"rule nested deeper than {MAX_NESTING} levels")
        if tok.kind == "!":
            return self.negate(self.parse_unary(depth + 1))
        if tok.kind == "(":
            node = self.parse_or(depth + 1)
            close = self.advance()
            if close.kind != ")":
                raise _Fail(
                    close.column,
                    f"expected '&&', '||' or ')' to close '(' at column {tok.column}, "
                    f"found {close.describe()}",
                )
            return node
        if tok.kind == "name":
            return self.parse_matcher(tok)
        raise _Fail(tok.column, f"expected a matcher, '!' or '(', found {tok.describe()}")

    def parse_matcher(self, name_tok: _Token) -> Any:
        name = _SPELLINGS.get(name_tok.value)
        spec = self.matchers.get(name) if name is not None else None
        if spec is None or self.kind not in spec.kinds:
            raise _Fail(name_tok.column, self._unknown(name_tok.value, name))
        paren = self.advance()
        if paren.kind != "(":
            raise _Fail(paren.column, "expected '(' after matcher name")
        args: list[_Token] = []
        tok = self.advance()
        if tok.kind != ")":
            while True:
                if tok.kind != "string":
                    raise _Fail(
                        tok.column, f"expected a quoted string argument, found {tok.describe()}"
                    )
                args.append(tok)
                tok = self.advance()
                if tok.kind == ")":
                    break
                if tok.kind != ",":
                    raise _Fail(
                        tok.column, f"expected ',' or ')' after argument, found {tok.describe()}"
                    )
                tok = self.advance()
        assert name is not None
        if not spec.min_args <= len(args) <= spec.max_args:
            message = f"{name} {spec.arity()}, got {len(args)}"
            if self.syntax == "v3" and len(args) > spec.max_args:
                message += f" (several values are v2 syntax: write {name}(...) || {name}(...))"
            raise _Fail(name_tok.column, message)
        for arg in args:  # Traefik's CheckRule, in both syntaxes
            if not arg.value:
                raise _Fail(arg.column, f"empty value for {name}")
        return self.build(spec, args)

    # What the parse makes of what it read: matcher nodes (a _Planner makes a plan).

    def build(self, spec: _Spec, args: list[_Token]) -> Any:
        return spec.build(args)

    def negate(self, node: Any) -> Any:
        return _Not(node)

    def combine(self, cls: type[_And] | type[_Or], children: list[Any]) -> Any:
        return _combine(cls, children)

    def _unknown(self, written: str, name: str | None) -> str:
        if name is not None and name in self.matchers:
            return f"matcher {name!r} is not allowed in {self.kind} rules"
        other = "v2" if self.syntax == "v3" else "v3"
        if name is not None and self.kind in _MATCHERS[other].get(name, _NO_SPEC).kinds:
            hint = _V3_INSTEAD.get(name, "") if self.syntax == "v3" else ""
            return (
                f"matcher {name!r} is {other} syntax and this rule is {self.syntax}{hint} "
                f"(or set the router's ruleSyntax to {other})"
            )
        message = f"unknown matcher {written!r}"
        allowed = [n for n, s in self.matchers.items() if self.kind in s.kinds]
        close = difflib.get_close_matches(written, allowed, n=1)
        if close:
            message += f" (did you mean {close[0]!r}?)"
        return message


class _Planner(_Parser):
    """Parses as :class:`_Parser` does and returns the rule's plan instead of its nodes:
    ``("m", spec, (i, ...))`` a matcher built from the i-th string literals of the rule,
    ``("!", plan)``, ``("c", _And or _Or, [plan, ...])``."""

    def __init__(self, text: str, kind: str, syntax: str, columns: Sequence[int]) -> None:
        super().__init__(text, kind, syntax)
        self.ordinal = {column: i for i, column in enumerate(columns)}

    def build(self, spec: _Spec, args: list[_Token]) -> Any:
        return ("m", spec, tuple(self.ordinal[arg.column] for arg in args))

    def negate(self, node: Any) -> Any:
        return ("!", node)

    def combine(self, cls: type[_And] | type[_Or], children: list[Any]) -> Any:
        return children[0] if len(children) == 1 else ("c", cls, children)


def _instantiate(plan: Any, values: list[str], columns: list[int]) -> Any:
    """The nodes of ``plan`` for these literal values; _Fail as the parser would fail."""
    if plan[0] == "m":
        args = [_Token("string", values[i], columns[i]) for i in plan[2]]
        for arg in args:
            if not arg.value:
                raise _Fail(arg.column, "empty value")  # the caller parses again for the text
        return plan[1].build(args)
    if plan[0] == "!":
        return _Not(_instantiate(plan[1], values, columns))
    return _combine(plan[1], [_instantiate(child, values, columns) for child in plan[2]])
