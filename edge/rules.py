"""The rule language: Traefik-style router rules, compiled once, and a host-indexed route table.

Owns the grammar (Traefik v3, plus v2's multi-argument forms), the matchers, the
request view they read, and :class:`RouteTable`, which picks the winning route.

Grammar (``&&`` binds tighter than ``||``, ``!`` tighter than both)::

    rule    := or
    or      := and ( "||" and )*
    and     := unary ( "&&" unary )*
    unary   := "!" unary | "(" or ")" | NAME "(" [ STRING ( "," STRING )* ] ")"
    STRING  := `raw`  |  "go-style \\"escaped\\""

Invariants:

* A rule is parsed, validated and its regexps and networks compiled exactly once, in
  :func:`compile_rule`. Matching never parses or compiles; the only per-request work
  beyond comparisons is the request view's lazily cached query map, decoded path and
  parsed client address.
* ``Rule.hosts`` is sound: when it is a set, every request the rule matches has
  ``req.host`` (tcp rules: ``req.sni``) in that set. :class:`RouteTable` relies on it
  to skip routes that cannot match, so its answer is always the answer of a linear
  scan over all entries in priority order.
* Every problem with a rule is a :class:`~edge.errors.RuleError` naming the rule and
  the 1-based column (character offset into the rule text) of the offending token.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar
from urllib.parse import parse_qsl, unquote

from edge.errors import RuleError

__all__ = [
    "RequestView",
    "RouteTable",
    "Rule",
    "canonical_host",
    "compile_rule",
    "default_priority",
    "split_authority",
]

T = TypeVar("T")

KINDS: Final = ("http", "tcp")
MAX_NESTING: Final = 64
"""Deepest allowed nesting of ``(`` and ``!``; deeper rules are rejected, not recursed into."""

_GO_ESCAPES: Final = {
    '"': '"', "\\": "\\", "'": "'",
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
}  # fmt: skip
_WHITESPACE: Final = " \t\r\n"
_HOSTNAME_RE: Final = re.compile(r"[A-Za-z0-9._:-]+")
_V2_TEMPLATE_RE: Final = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*:")

Match = Callable[[Any], bool]


def default_priority(rule_text: str) -> int:
    """Traefik's default router priority: the length of the rule text."""
    return len(rule_text)


def split_authority(authority: str) -> tuple[str, str]:
    """(host, port) of a Host header / :authority value: the one host normalisation.

    The host as ``RequestView.host`` expects it: port and IPv6 brackets gone, one
    trailing dot dropped, lowercased (``"Example.COM.:8080"`` -> ``("example.com",
    "8080")``, ``"[::1]:80"`` -> ``("::1", "80")``); an unbracketed value with
    several colons is an IPv6 address without a port (``"::1"``).
    """
    host = authority.strip()
    port = ""
    if host.startswith("["):
        end = host.find("]")
        if end != -1:
            if host[end + 1 : end + 2] == ":":
                port = host[end + 2 :]
            host = host[1:end]
    elif host.count(":") == 1:
        host, port = host.split(":")
    if host.endswith("."):
        host = host[:-1]
    return host.lower(), port


def canonical_host(authority: str) -> str:
    """The host of a Host header / :authority value (see :func:`split_authority`)."""
    return split_authority(authority)[0]


# --- the request as matchers see it ------------------------------------------------------


class RequestView:
    """What a rule can look at. Built by the server (or a test) once per request/connection.

    ``host`` must already be canonical (see :func:`canonical_host`), ``sni`` lowercased;
    ``path`` and ``query`` are raw as received. Path matchers compare against the
    percent-decoded path (:meth:`decoded_path`), as Traefik does with Go's ``URL.Path``.
    """

    __slots__ = (
        "_client_addr",
        "_decoded_path",
        "_query_map",
        "alpn",
        "client_ip",
        "headers",
        "host",
        "method",
        "path",
        "query",
        "sni",
    )

    def __init__(
        self,
        *,
        host: str = "",
        path: str = "",
        query: str = "",
        method: str = "",
        client_ip: str = "",
        headers: Sequence[tuple[bytes, bytes]] = (),
        sni: str = "",
        alpn: tuple[str, ...] = (),
    ) -> None:
        self.host = host
        self.path = path
        self.query = query
        self.method = method
        self.client_ip = client_ip
        self.headers = headers
        self.sni = sni
        self.alpn = alpn
        self._query_map: dict[str, list[str]] | None = None
        self._decoded_path: str | None = None
        self._client_addr: ipaddress.IPv4Address | ipaddress.IPv6Address | bool | None = False

    def header_values(self, name: str) -> list[str]:
        """Values of every header line called ``name`` (any case), decoded latin-1, trimmed."""
        target = name.lower().encode("latin-1")
        size = len(target)
        return [
            value.decode("latin-1").strip(" \t")
            for key, value in self.headers
            if len(key) == size and key.lower() == target
        ]

    def query_values(self, key: str) -> list[str]:
        """Decoded values of query parameter ``key`` (``[]`` if absent); parsed once, lazily."""
        qmap = self._query_map
        if qmap is None:
            qmap = {}
            for k, v in parse_qsl(self.query, keep_blank_values=True):
                qmap.setdefault(k, []).append(v)
            self._query_map = qmap
        return list(qmap.get(key, ()))

    def decoded_path(self) -> str:
        """The path with %XX escapes decoded (``%2F`` included), cached; raw if it has none."""
        decoded = self._decoded_path
        if decoded is None:
            path = self.path
            decoded = unquote(path, errors="surrogateescape") if "%" in path else path
            self._decoded_path = decoded
        return decoded

    def client_address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """``client_ip`` parsed (``None`` if empty or invalid), cached."""
        addr = self._client_addr
        if addr is False:
            try:
                addr = ipaddress.ip_address(self.client_ip)
            except ValueError:
                addr = None
            self._client_addr = addr
        return addr  # type: ignore[return-value]

    def __repr__(self) -> str:
        return (
            f"RequestView(host={self.host!r}, method={self.method!r}, path={self.path!r}, "
            f"query={self.query!r}, client_ip={self.client_ip!r}, sni={self.sni!r})"
        )


# --- matcher nodes ------------------------------------------------------------------------
# Each node has ``match(req) -> bool``. Combinators hold their children's bound ``match``
# methods so a request costs one call per node and no allocation.


class _Host:
    __slots__ = ("names",)

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def match(self, req: Any) -> bool:
        return req.host in self.names


class _HostSNI:
    __slots__ = ("names",)

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def match(self, req: Any) -> bool:
        return req.sni in self.names


class _Always:
    __slots__ = ()

    def match(self, req: Any) -> bool:
        return True


class _Regexp:
    """Some pattern finds a match (``re.search``, like Go's ``MatchString``) in one attribute."""

    __slots__ = ("attr", "searches")

    def __init__(self, attr: str, patterns: Sequence[re.Pattern[str]]) -> None:
        self.attr = attr
        self.searches = tuple(p.search for p in patterns)

    def match(self, req: Any) -> bool:
        value = getattr(req, self.attr)
        for search in self.searches:  # noqa: SIM110 (no generator per request)
            if search(value) is not None:
                return True
        return False


class _PathRegexp:
    __slots__ = ("searches",)

    def __init__(self, patterns: Sequence[re.Pattern[str]]) -> None:
        self.searches = tuple(p.search for p in patterns)

    def match(self, req: Any) -> bool:
        path = req.decoded_path()
        for search in self.searches:  # noqa: SIM110 (no generator per request)
            if search(path) is not None:
                return True
        return False


class _Path:
    __slots__ = ("paths",)

    def __init__(self, paths: frozenset[str]) -> None:
        self.paths = paths

    def match(self, req: Any) -> bool:
        return req.decoded_path() in self.paths


class _PathPrefix:
    __slots__ = ("prefixes",)

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = prefixes

    def match(self, req: Any) -> bool:
        return req.decoded_path().startswith(self.prefixes)


class _Method:
    __slots__ = ("methods",)

    def __init__(self, methods: frozenset[str]) -> None:
        self.methods = methods

    def match(self, req: Any) -> bool:
        return req.method in self.methods


class _Header:
    __slots__ = ("name", "value")

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self.value = value

    def match(self, req: Any) -> bool:
        return self.value in req.header_values(self.name)


class _ValuesRegexp:
    """Some value of a header (``source="header_values"``) or of a query key
    (``source="query_values"``) matches the pattern."""

    __slots__ = ("key", "search", "source")

    def __init__(self, source: str, key: str, pattern: re.Pattern[str]) -> None:
        self.source = source
        self.key = key
        self.search = pattern.search

    def match(self, req: Any) -> bool:
        search = self.search
        for value in getattr(req, self.source)(self.key):  # noqa: SIM110
            if search(value) is not None:
                return True
        return False


class _Query:
    """Key has the value; with ``value=None``, the key is present (with any value)."""

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: str | None) -> None:
        self.key = key
        self.value = value

    def match(self, req: Any) -> bool:
        values = req.query_values(self.key)
        if self.value is None:
            return bool(values)
        return self.value in values


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class _ClientIP:
    __slots__ = ("networks", "v4_networks")

    def __init__(self, networks: Sequence[Network]) -> None:
        self.networks = tuple(networks)
        self.v4_networks = tuple(n for n in networks if n.version == 4)

    def match(self, req: Any) -> bool:
        addr = req.client_address()
        if addr is None:
            return False
        for net in self.networks:
            if addr in net:
                return True
        if addr.version == 6 and self.v4_networks:
            mapped = addr.ipv4_mapped
            if mapped is not None:
                for net in self.v4_networks:
                    if mapped in net:
                        return True
        return False


class _ALPN:
    __slots__ = ("protocols",)

    def __init__(self, protocols: frozenset[str]) -> None:
        self.protocols = protocols

    def match(self, req: Any) -> bool:
        protocols = self.protocols
        for proto in req.alpn:  # noqa: SIM110
            if proto in protocols:
                return True
        return False


class _And:
    __slots__ = ("children", "fns")

    def __init__(self, children: Sequence[Any]) -> None:
        self.children = tuple(children)
        self.fns: tuple[Match, ...] = tuple(c.match for c in self.children)

    def match(self, req: Any) -> bool:
        for fn in self.fns:  # noqa: SIM110
            if not fn(req):
                return False
        return True


class _Or:
    __slots__ = ("children", "fns")

    def __init__(self, children: Sequence[Any]) -> None:
        self.children = tuple(children)
        self.fns: tuple[Match, ...] = tuple(c.match for c in self.children)

    def match(self, req: Any) -> bool:
        for fn in self.fns:  # noqa: SIM110
            if fn(req):
                return True
        return False


class _Not:
    __slots__ = ("child", "fn")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.fn: Match = child.match

    def match(self, req: Any) -> bool:
        return not self.fn(req)


def _hosts_of(node: Any) -> frozenset[str] | None:
    """The sound host set of a node (see ``Rule.hosts``); ``None`` when unconstrained."""
    if isinstance(node, _Host | _HostSNI):
        return node.names
    if isinstance(node, _And):
        # A request must satisfy every child, so it must be in every constrained child's set.
        result: frozenset[str] | None = None
        for child in node.children:
            hosts = _hosts_of(child)
            if hosts is not None:
                result = hosts if result is None else result & hosts
        return result
    if isinstance(node, _Or):
        # A request satisfies some child; only bounded if every child is bounded.
        union: set[str] = set()
        for child in node.children:
            hosts = _hosts_of(child)
            if hosts is None:
                return None
            union |= hosts
        return frozenset(union)
    return None  # _Not, host-agnostic leaves, regexps


def _without_host_conjuncts(root: Any) -> Any:
    """The rule minus its top-level Host/HostSNI conjuncts, for requests found via the index.

    Sound because a request reaches a rule through the host index only if its host is in
    ``Rule.hosts``, which is a subset of every top-level Host conjunct's names (``_And``
    intersects them), so those conjuncts are already known to hold; for a disjunction of
    Host matchers only, ``hosts`` is their union, so one of them holds.
    """
    if isinstance(root, _Host | _HostSNI):
        return _Always()
    if isinstance(root, _Or) and all(isinstance(c, _Host | _HostSNI) for c in root.children):
        return _Always()  # ``hosts`` is the union of these names: one of them holds
    if isinstance(root, _And):
        rest = [c for c in root.children if not isinstance(c, _Host | _HostSNI)]
        if len(rest) == len(root.children):
            return root
        if not rest:
            return _Always()
        return rest[0] if len(rest) == 1 else _And(rest)
    return root


# --- the compiled rule --------------------------------------------------------------------


class Rule:
    """A compiled rule. Immutable; safe to share between route tables and threads."""

    __slots__ = ("_indexed_match", "_match", "host_only", "hosts", "kind", "root", "text")

    def __init__(self, text: str, kind: str, root: Any) -> None:
        self.text = text
        self.kind = kind
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

    def __repr__(self) -> str:
        return f"Rule({self.text!r}, kind={self.kind!r})"


def compile_rule(rule: str, *, kind: str = "http") -> Rule:
    """Parse and validate ``rule`` once; raise :class:`RuleError` (with a column) if it is bad."""
    if kind not in KINDS:
        raise ValueError(f"unknown rule kind {kind!r}; expected one of {KINDS}")
    try:
        root = _Parser(rule, kind).parse()
    except _Fail as fail:
        raise RuleError(rule, fail.column, fail.message) from None
    return Rule(rule, kind, root)


# --- lexer ------------------------------------------------------------------------------


class _Fail(Exception):
    """Internal: a problem at a column; compile_rule turns it into RuleError."""

    def __init__(self, column: int, message: str) -> None:
        super().__init__(message)
        self.column = column
        self.message = message


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "name", "string", "(", ")", ",", "&&", "||", "!", "end"
    value: str
    column: int  # 1-based

    def describe(self) -> str:
        if self.kind == "end":
            return "end of rule"
        if self.kind == "string":
            return "a string"
        return repr(self.value)


class _Lexer:
    """Produces tokens on demand, so an error is reported where the parser meets it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def next(self) -> _Token:
        text, n = self.text, len(self.text)
        pos = self.pos
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            self.pos = pos
            return _Token("end", "", pos + 1)
        ch = text[pos]
        column = pos + 1
        if ch in "(),!":
            self.pos = pos + 1
            return _Token(ch, ch, column)
        if ch in "&|":
            if text.startswith(ch * 2, pos):
                self.pos = pos + 2
                return _Token(ch * 2, ch * 2, column)
            raise _Fail(column, f"expected {ch * 2!r}, found a single {ch!r}")
        if ch.isascii() and (ch.isalpha() or ch == "_"):
            end = pos + 1
            while end < n and text[end].isascii() and (text[end].isalnum() or text[end] == "_"):
                end += 1
            self.pos = end
            return _Token("name", text[pos:end], column)
        if ch == "`":
            end = text.find("`", pos + 1)
            if end == -1:
                raise _Fail(column, "unterminated string")
            self.pos = end + 1
            return _Token("string", text[pos + 1 : end], column)
        if ch == '"':
            return self._double_quoted(pos)
        raise _Fail(column, f"unexpected character {ch!r}")

    def _double_quoted(self, start: int) -> _Token:
        text, n = self.text, len(self.text)
        out: list[str] = []
        pos = start + 1
        while pos < n:
            ch = text[pos]
            if ch == '"':
                self.pos = pos + 1
                return _Token("string", "".join(out), start + 1)
            if ch == "\\":
                if pos + 1 >= n:
                    break
                escaped = _GO_ESCAPES.get(text[pos + 1])
                if escaped is None:
                    raise _Fail(
                        pos + 1,
                        f"invalid escape '\\{text[pos + 1]}' in double-quoted string "
                        "(use a `backtick` string for regexps)",
                    )
                out.append(escaped)
                pos += 2
                continue
            out.append(ch)
            pos += 1
        raise _Fail(start + 1, "unterminated string")


# --- parser -----------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, kind: str) -> None:
        self.text = text
        self.kind = kind
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
        return _combine(_Or, children)

    def parse_and(self, depth: int) -> Any:
        children = [self.parse_unary(depth)]
        while self.current.kind == "&&":
            self.advance()
            children.append(self.parse_unary(depth))
        return _combine(_And, children)

    def parse_unary(self, depth: int) -> Any:
        tok = self.advance()
        if depth >= MAX_NESTING:
            raise _Fail(tok.column, f"rule nested deeper than {MAX_NESTING} levels")
        if tok.kind == "!":
            return _Not(self.parse_unary(depth + 1))
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
        name = _MATCHER_SPELLINGS.get(name_tok.value)
        if name is None:
            message = f"unknown matcher {name_tok.value!r}"
            allowed = [n for n, s in _MATCHERS.items() if self.kind in s.kinds]
            close = difflib.get_close_matches(name_tok.value, allowed, n=1)
            if close:
                message += f" (did you mean {close[0]!r}?)"
            raise _Fail(name_tok.column, message)
        spec = _MATCHERS[name]
        if self.kind not in spec.kinds:
            raise _Fail(name_tok.column, f"matcher {name!r} is not allowed in {self.kind} rules")
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
        if not spec.min_args <= len(args) <= spec.max_args:
            raise _Fail(name_tok.column, f"{name} {spec.arity()}, got {len(args)}")
        return spec.build(args)


def _combine(cls: type[_And] | type[_Or], children: list[Any]) -> Any:
    if len(children) == 1:
        return children[0]
    flat: list[Any] = []
    for child in children:
        if isinstance(child, cls):
            flat.extend(child.children)
        else:
            flat.append(child)
    return cls(flat)


# --- matcher builders ---------------------------------------------------------------------
# Each takes the argument tokens (count already checked) and returns a node, raising _Fail
# at the offending argument's column for a bad value.


def _require_nonempty(arg: _Token, what: str) -> str:
    if not arg.value:
        raise _Fail(arg.column, f"empty {what}")
    return arg.value


def _host_name(arg: _Token) -> str:
    value = _require_nonempty(arg, "host name")
    if not value.isascii():
        raise _Fail(arg.column, f"invalid host {value!r}: non-ASCII characters are not allowed")
    return canonical_host(value) if value.startswith("[") else value.lower().removesuffix(".")


def _regexp(arg: _Token) -> re.Pattern[str]:
    pattern = _require_nonempty(arg, "regexp")
    if _V2_TEMPLATE_RE.search(pattern):
        raise _Fail(
            arg.column,
            "v2 '{name:regexp}' templates are not supported; write a plain regexp "
            r"(e.g. `^[a-z]+\.example\.com$`)",
        )
    try:
        return re.compile(pattern)
    except re.error as err:
        raise _Fail(arg.column, f"invalid regexp {pattern!r}: {err}") from None


def _host_regexp(arg: _Token) -> re.Pattern[str]:
    return re.compile(_regexp(arg).pattern, re.IGNORECASE)


def _build_host(args: list[_Token]) -> Any:
    return _Host(frozenset(_host_name(a) for a in args))


def _build_host_sni(args: list[_Token]) -> Any:
    names = []
    for arg in args:
        if arg.value == "*":
            return _Always()
        name = _host_name(arg)
        if not _HOSTNAME_RE.fullmatch(name):
            raise _Fail(arg.column, f"invalid HostSNI {arg.value!r}: not a host name or IP")
        names.append(name)
    return _HostSNI(frozenset(names))


def _build_host_regexp(args: list[_Token]) -> Any:
    return _Regexp("host", [_host_regexp(a) for a in args])


def _build_host_sni_regexp(args: list[_Token]) -> Any:
    return _Regexp("sni", [_host_regexp(a) for a in args])


def _path_value(arg: _Token) -> str:
    if not arg.value.startswith("/"):
        raise _Fail(arg.column, f"path {arg.value!r} does not start with '/'")
    return arg.value


def _build_path(args: list[_Token]) -> Any:
    return _Path(frozenset(_path_value(a) for a in args))


def _build_path_prefix(args: list[_Token]) -> Any:
    return _PathPrefix(tuple(_path_value(a) for a in args))


def _build_path_regexp(args: list[_Token]) -> Any:
    return _PathRegexp([_regexp(a) for a in args])


def _build_method(args: list[_Token]) -> Any:
    return _Method(frozenset(_require_nonempty(a, "method").upper() for a in args))


def _header_name(arg: _Token) -> str:
    name = _require_nonempty(arg, "header name")
    if not name.isascii() or any(c in name for c in ' \t:"'):
        raise _Fail(arg.column, f"invalid header name {name!r}")
    return name.lower()


def _build_header(args: list[_Token]) -> Any:
    return _Header(_header_name(args[0]), args[1].value)


def _build_header_regexp(args: list[_Token]) -> Any:
    return _ValuesRegexp("header_values", _header_name(args[0]), _regexp(args[1]))


def _build_query(args: list[_Token]) -> Any:
    # v3: Query(`key`, `value`). v2: Query(`key=value`, `key2`, ...), every pair required.
    if len(args) == 2 and "=" not in args[0].value:
        return _Query(_require_nonempty(args[0], "query key"), args[1].value)
    nodes = []
    for arg in args:
        key, sep, value = arg.value.partition("=")
        if not key:
            raise _Fail(arg.column, f"empty query key in {arg.value!r}")
        nodes.append(_Query(key, value if sep else None))
    return nodes[0] if len(nodes) == 1 else _And(nodes)


def _build_query_regexp(args: list[_Token]) -> Any:
    return _ValuesRegexp("query_values", _require_nonempty(args[0], "query key"), _regexp(args[1]))


def _build_client_ip(args: list[_Token]) -> Any:
    networks: list[Network] = []
    for arg in args:
        try:
            networks.append(ipaddress.ip_network(arg.value.strip(), strict=False))
        except ValueError:
            raise _Fail(arg.column, f"invalid IP address or CIDR {arg.value!r}") from None
    return _ClientIP(networks)


def _build_alpn(args: list[_Token]) -> Any:
    return _ALPN(frozenset(_require_nonempty(a, "ALPN protocol") for a in args))


@dataclass(frozen=True, slots=True)
class _Spec:
    build: Callable[[list[_Token]], Any]
    min_args: int
    max_args: int
    kinds: tuple[str, ...]

    def arity(self) -> str:
        if self.min_args == self.max_args:
            plural = "s" if self.min_args != 1 else ""
            return f"takes exactly {self.min_args} argument{plural}"
        return f"takes at least {self.min_args} argument{'s' if self.min_args != 1 else ''}"


_MANY: Final = 1 << 16
_HTTP: Final = ("http",)
_TCP: Final = ("tcp",)
_BOTH: Final = ("http", "tcp")

_MATCHERS: Final[dict[str, _Spec]] = {
    "Host": _Spec(_build_host, 1, _MANY, _HTTP),
    "HostRegexp": _Spec(_build_host_regexp, 1, _MANY, _HTTP),
    "Path": _Spec(_build_path, 1, _MANY, _HTTP),
    "PathPrefix": _Spec(_build_path_prefix, 1, _MANY, _HTTP),
    "PathRegexp": _Spec(_build_path_regexp, 1, _MANY, _HTTP),
    "Method": _Spec(_build_method, 1, _MANY, _HTTP),
    "Header": _Spec(_build_header, 2, 2, _HTTP),
    "HeaderRegexp": _Spec(_build_header_regexp, 2, 2, _HTTP),
    "Headers": _Spec(_build_header, 2, 2, _HTTP),  # v2 name
    "HeadersRegexp": _Spec(_build_header_regexp, 2, 2, _HTTP),  # v2 name
    "Query": _Spec(_build_query, 1, _MANY, _HTTP),
    "QueryRegexp": _Spec(_build_query_regexp, 2, 2, _HTTP),
    "ClientIP": _Spec(_build_client_ip, 1, _MANY, _BOTH),
    "HostSNI": _Spec(_build_host_sni, 1, _MANY, _TCP),
    "HostSNIRegexp": _Spec(_build_host_sni_regexp, 1, _MANY, _TCP),
    "ALPN": _Spec(_build_alpn, 1, _MANY, _TCP),
}

# Traefik accepts each name as written, lowercased, uppercased, and Titlecased.
_MATCHER_SPELLINGS: Final[dict[str, str]] = {
    spelling: name
    for name in _MATCHERS
    for spelling in (name, name.lower(), name.upper(), name.lower().title())
}


# --- the route table ----------------------------------------------------------------------


class RouteTable(Generic[T]):
    """Routes in priority order, indexed by host so lookup cost does not grow with hosts.

    Order: priority descending, then name ascending, then input order. ``match`` returns
    the value of the first entry in that order whose rule matches, exactly as a linear scan
    would, but only looks at entries that can match the request's host.

    Index: for each host named by some rule's ``hosts``, a pre-merged tuple of that
    host's entries and the host-agnostic entries ranked above the host's last entry,
    followed by a shared tail of the remaining host-agnostic entries (so memory stays
    near hosts + entries, not hosts x host-agnostic entries). Requests for any other
    host scan only the host-agnostic entries. All sorting and merging happen here.
    """

    __slots__ = ("_agnostic", "_index", "_use_sni", "by_host", "entries")

    def __init__(self, entries: Iterable[tuple[str, Rule, int, T]]) -> None:
        items = list(entries)
        kinds = {rule.kind for _, rule, _, _ in items}
        if len(kinds) > 1:
            raise ValueError(f"a RouteTable holds rules of one kind, got {sorted(kinds)}")
        self._use_sni = kinds == {"tcp"}
        order = sorted(range(len(items)), key=lambda i: (-items[i][2], items[i][0], i))
        ordered = [items[i] for i in order]
        self.entries: tuple[tuple[str, Rule, int, T], ...] = tuple(ordered)

        # Host-agnostic entries are checked in full; host entries found through the index
        # skip their top-level Host conjuncts, which the index lookup already satisfied.
        pairs = [(rule._indexed_match, value) for _, rule, _, value in ordered]
        host_only = [rule.host_only for _, rule, _, _ in ordered]
        agnostic_ranks: list[int] = []
        host_ranks: dict[str, list[int]] = {}
        for rank, (_, rule, _, _) in enumerate(ordered):
            if rule.hosts is None:
                agnostic_ranks.append(rank)
            else:  # an empty set (contradictory hosts) can never match: indexed nowhere
                for host in rule.hosts:
                    host_ranks.setdefault(host, []).append(rank)

        agnostic = tuple(pairs[r] for r in agnostic_ranks)
        self._agnostic: tuple[tuple[Match, T], ...] = agnostic
        tails: dict[int, tuple[tuple[Match, T], ...]] = {0: agnostic}
        index: dict[str, tuple[tuple[tuple[Match, T], ...], tuple[tuple[Match, T], ...]]] = {}
        # Hosts whose answer the host alone decides: their first candidate has
        # nothing left to check once the index found it (see ``match_host``).
        by_host: dict[str, T] = {}
        for host, ranks in host_ranks.items():
            # Host-agnostic entries ranked above this host's last entry are interleaved;
            # the rest follow as a tail shared by every host with the same cut.
            cut = bisect_left(agnostic_ranks, ranks[-1])
            merged = sorted(ranks + agnostic_ranks[:cut])
            if host_only[merged[0]]:
                by_host[host] = ordered[merged[0]][3]
            tail = tails.get(cut)
            if tail is None:
                tail = tails[cut] = agnostic[cut:]
            index[host] = (tuple(pairs[r] for r in merged), tail)
        self._index = index
        self.by_host = by_host

    def match_host(self, host: str) -> T | None:
        """The answer for any request to ``host``, when the host alone decides it.

        None means "look at the whole request" (:meth:`match`), not "no route".
        Lets the server skip building a request view for the common rule.
        """
        return self.by_host.get(host)

    def match(self, req: Any) -> T | None:
        key = req.sni if self._use_sni else req.host
        slot = self._index.get(key)
        if slot is not None:
            head, tail = slot
            for fn, value in head:
                if fn(req):
                    return value
        else:
            tail = self._agnostic
        for fn, value in tail:
            if fn(req):
                return value
        return None

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"RouteTable({len(self.entries)} entries, {len(self._index)} indexed hosts)"
