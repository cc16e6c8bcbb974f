"""The rule language: Traefik's router rules, compiled once, and a host-indexed route table.

Owns the grammar, the matchers of both syntaxes Traefik v3 reads (``v3``, its own, and
``v2``, kept for migration: ``ruleSyntax`` on a router, ``core.defaultRuleSyntax``),
the request view matchers read, the one host normalisation (:func:`split_authority`)
and :class:`RouteTable`, which picks the winning route.

Grammar (``&&`` binds tighter than ``||``, ``!`` tighter than both)::

    rule    := or
    or      := and ( "||" and )*
    and     := unary ( "&&" unary )*
    unary   := "!" unary | "(" or ")" | NAME "(" [ STRING ( "," STRING )* ] ")"
    STRING  := `raw`  |  "go-style \\"escaped\\""

Meaning, as Traefik v3 (up to v3.7) gives it:

* ``v3``: every matcher takes one value (``Header``, ``HeaderRegexp``: two; ``Query``,
  ``QueryRegexp``: one or two); no value may be empty. ``Host(`*.a.com`)`` matches one
  label under ``a.com``, ``Host(`*`)`` any host. ``{name:re}`` is not a template: the
  braces are literal regexp text.
* ``v2``: matchers take several values (any of them), ``Headers``/``Query`` take
  key/value pairs (all of them); ``HostRegexp``, ``Path``, ``PathPrefix`` and the
  ``Query`` values are gorilla/mux templates (``{name}``, ``{name:re}``).
* Paths are matched on the *routing path*: the request path with percent-encoded
  reserved characters (RFC 3986 gen-delims, sub-delims and ``%``) kept encoded, in
  upper case, and every other escape decoded, so ``Path(`/a/b`)`` never matches
  ``/a%2Fb``. What goes upstream is the client's path, untouched.
* Regexps are RE2's (Go's ``regexp`` syntax: no backreferences, no lookaround), run
  by the RE2 library: linear in the input, so no rule can stall the event loop.
  ``HostRegexp`` reads the lowercased host and is case-sensitive (write ``(?i)``).

Invariants:

* A rule is parsed, validated and its regexps and networks compiled exactly once, in
  :func:`compile_rule`. Matching never parses or compiles; the only per-request work
  beyond comparisons is the request view's lazily cached query map, routing path and
  parsed client address.
* ``Rule.hosts`` is sound: when it is a set of keys (host names, or ``*.suffix``
  wildcards), every request the rule matches has a host (tcp rules: SNI) that is a
  key or whose :func:`wildcard_of` is one. :class:`RouteTable` relies on it to skip
  routes that cannot match, so its answer is always that of a linear scan over all
  entries in priority order.
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
from urllib.parse import unquote_to_bytes

import re2  # google-re2: RE2 itself, the engine (and syntax) of Go's regexp

from edge.errors import RuleError

__all__ = [
    "SYNTAXES",
    "RequestView",
    "RouteTable",
    "Rule",
    "RuleCompiler",
    "canonical_host",
    "compile_rule",
    "default_priority",
    "routing_path",
    "split_authority",
    "wildcard_of",
]

T = TypeVar("T")

KINDS: Final = ("http", "tcp")
SYNTAXES: Final = ("v3", "v2")
"""Rule syntaxes, the default first."""
MAX_NESTING: Final = 64
"""Deepest allowed nesting of ``(`` and ``!``; deeper rules are rejected, not recursed into."""

_GO_ESCAPES: Final = {
    '"': '"', "\\": "\\", "'": "'",
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
}  # fmt: skip
_WHITESPACE: Final = " \t\r\n"
# Traefik's HostSNI check: word characters, '.', '-', ':' (and a leading '*.' in v3).
_SNI_RE: Final = re.compile(r"(?:\*\.)?[0-9A-Za-z_.:-]+", re.ASCII)
_SNI_V2_RE: Final = re.compile(r"[0-9A-Za-z_.:-]+", re.ASCII)
_ACME_ALPN: Final = "acme-tls/1"
# RFC 3986 reserved characters, and '%': their escapes keep their meaning in a path.
_RESERVED: Final = frozenset(b":/?#[]@!$&'()*+,;=%")
_ESCAPE_RE: Final = re.compile(rb"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE_RE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
_UNANCHORED: Final = re2._re2.RE2.Anchor.UNANCHORED

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


def wildcard_of(host: str) -> str | None:
    """The wildcard key that covers ``host``: ``a.b.com`` -> ``*.b.com``; None without a
    dot, or when the first label is empty (``.b.com``).

    Traefik's one-label wildcard: ``*.b.com`` matches ``a.b.com``, not ``b.com`` nor
    ``x.a.b.com``; the label is never empty (Traefik's own matcher takes ``.b.com``).
    """
    dot = host.find(".")
    return None if dot <= 0 else "*" + host[dot:]


def _text_bytes(text: str) -> bytes:
    """The bytes a request string stands for.

    The server decodes the bytes it got as latin-1; what a client sends beyond ASCII
    is UTF-8, so a string whose latin-1 bytes are UTF-8 is taken as those bytes. Any
    other string is text (a test, a caller with real text) and stands for its UTF-8.
    """
    try:
        data = text.encode("latin-1")
        data.decode("utf-8")
    except UnicodeError:
        return text.encode("utf-8", "surrogateescape")
    return data


def _keep_reserved(match: re.Match[bytes]) -> bytes:
    byte = int(match.group(1), 16)
    return b"%" + match.group(1).upper() if byte in _RESERVED else bytes((byte,))


def routing_path(path: str) -> str:
    """The path rules match: reserved escapes kept (upper case), every other one decoded.

    ``path`` is the request target's path as the server got it (see :func:`_text_bytes`).
    ``/a%2fb`` -> ``/a%2Fb``, ``/%61dmin`` -> ``/admin``, ``/caf%C3%A9`` -> ``/café``;
    escaped bytes that are not UTF-8 become lone surrogates; a ``%`` that starts no
    escape stays as it is.
    """
    if "%" not in path and path.isascii():
        return path
    data = _ESCAPE_RE.sub(_keep_reserved, _text_bytes(path))
    return data.decode("utf-8", "surrogateescape")


def _unescape_query(text: str) -> str | None:
    """Go's QueryUnescape: ``+`` is a space; None for a bad escape (the pair is dropped)."""
    if "%" not in text and "+" not in text and text.isascii():
        return text
    if _BAD_ESCAPE_RE.search(text):
        return None
    raw = unquote_to_bytes(_text_bytes(text).replace(b"+", b" "))
    return raw.decode("utf-8", "surrogateescape")


def parse_query(query: str) -> dict[str, list[str]]:
    """Go's ``URL.Query()``: pairs split on ``&``; a pair holding ``;`` or a bad escape is
    dropped; a key without ``=`` has the value ``""``."""
    out: dict[str, list[str]] = {}
    for pair in query.split("&"):
        if not pair or ";" in pair:
            continue
        key, _, value = pair.partition("=")
        k, v = _unescape_query(key), _unescape_query(value)
        if k is not None and v is not None:
            out.setdefault(k, []).append(v)
    return out


# --- the request as matchers see it ------------------------------------------------------


class RequestView:
    """What a rule can look at. Built by the server (or a test) once per request/connection.

    ``host`` must already be canonical (see :func:`canonical_host`), ``sni`` lowercased;
    ``path`` and ``query`` are raw as received (bytes as latin-1). Path matchers read
    :meth:`routing_path`, query matchers the pairs as Go's ``URL.Query()`` finds them.
    """

    __slots__ = (
        "_client_addr",
        "_query_map",
        "_routing_path",
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
        self._routing_path: str | None = None
        self._client_addr: ipaddress.IPv4Address | ipaddress.IPv6Address | bool | None = False

    def header_values(self, name: str) -> list[str]:
        """Values of every header line called ``name`` (any case), trimmed; bytes as UTF-8
        (a byte that is not becomes a lone surrogate, so it equals no rule text)."""
        target = name.lower().encode("latin-1")
        size = len(target)
        return [
            value.strip(b" \t").decode("utf-8", "surrogateescape")
            for key, value in self.headers
            if len(key) == size and key.lower() == target
        ]

    def query_values(self, key: str) -> list[str]:
        """Decoded values of query parameter ``key`` (``[]`` if absent); parsed once, lazily."""
        qmap = self._query_map
        if qmap is None:
            qmap = self._query_map = parse_query(self.query) if self.query else {}
        return list(qmap.get(key, ()))

    def routing_path(self) -> str:
        """:func:`routing_path` of ``path``, cached."""
        routed = self._routing_path
        if routed is None:
            routed = self._routing_path = routing_path(self.path)
        return routed

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


# --- regexps ------------------------------------------------------------------------------


class _RE2:
    """A compiled RE2 regexp: ``search`` finds a match anywhere, as Go's ``MatchString``.

    Calls RE2's own ``Match`` (``re2._re2``): the module's ``re``-like wrapper builds a
    match object per call and costs about ten times more.
    """

    __slots__ = ("_match", "pattern")

    def __init__(self, pattern: str) -> None:
        options = re2.Options()
        options.log_errors = False
        options.never_capture = True
        compiled = re2._re2.RE2(pattern.encode("utf-8", "surrogateescape"), options)
        if not compiled.ok():
            error = compiled.error()
            raise ValueError(
                error.decode("utf-8", "replace") if isinstance(error, bytes) else error
            )
        self.pattern = pattern
        self._match = compiled.Match

    def search(self, text: str) -> bool:
        data = text.encode("utf-8", "surrogateescape")
        return self._match(_UNANCHORED, data, 0, len(data))[0][0] >= 0

    def __repr__(self) -> str:
        return f"RE2({self.pattern!r})"


# Go's regexp refuses \C (any byte), which RE2 accepts; everything else they share.
_ANY_BYTE_RE: Final = re.compile(r"(?<!\\)(?:\\\\)*\\C")


def _compile_re2(pattern: str) -> _RE2:
    if _ANY_BYTE_RE.search(pattern):
        raise ValueError(r"invalid escape sequence: \C")
    return _RE2(pattern)


def _quote_meta(text: str) -> str:
    """Go's ``regexp.QuoteMeta``."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def _template_regexp(template: str, default: str, *, host: bool, prefix: bool, query: bool) -> str:
    """A gorilla/mux template (``/a/{id:[0-9]+}``) as the regexp Traefik v2 matches with.

    Literal text is quoted; ``{name}`` is ``default``; anchored at both ends, at the start
    only for a prefix; case-insensitive for hosts; an empty query value matches any.
    """
    spans: list[tuple[int, int]] = []
    level = start = 0
    for i, ch in enumerate(template):
        if ch == "{":
            level += 1
            if level == 1:
                start = i
        elif ch == "}":
            level -= 1
            if level == 0:
                spans.append((start, i + 1))
            elif level < 0:
                raise ValueError(f"unbalanced braces in {template!r}")
    if level != 0:
        raise ValueError(f"unbalanced braces in {template!r}")
    out = ["(?i)^" if host else "^"]
    end = 0
    for begin, stop in spans:
        name, colon, pattern = template[begin + 1 : stop - 1].partition(":")
        pattern = pattern if colon else default
        if not name or not pattern:
            raise ValueError(f"missing name or pattern in {template[begin:stop]!r}")
        _compile_re2(f"^{pattern}$")  # each variable's pattern must stand alone
        out.append(f"{_quote_meta(template[end:begin])}(?:{pattern})")
        end = stop
    out.append(_quote_meta(template[end:]))
    if query and template.partition("=")[2] == "":
        out.append(default)
    if not prefix:
        out.append("$")
    return "".join(out)


# --- matcher nodes ------------------------------------------------------------------------
# Each node has ``match(req) -> bool``. Combinators hold their children's bound ``match``
# methods so a request costs one call per node and no allocation.


class _Host:
    """The host (``attr="host"``) or SNI (``attr="sni"``) is a key, or its wildcard is."""

    __slots__ = ("attr", "keys", "wild")

    def __init__(self, attr: str, keys: frozenset[str]) -> None:
        self.attr = attr
        self.keys = keys
        self.wild = any(k.startswith("*.") for k in keys)

    def match(self, req: Any) -> bool:
        name = getattr(req, self.attr)
        if name in self.keys:
            return True
        return self.wild and wildcard_of(name) in self.keys


class _Always:
    __slots__ = ()

    def match(self, req: Any) -> bool:
        return True


class _Regexp:
    """Some regexp finds a match in one attribute (the host, the SNI)."""

    __slots__ = ("attr", "searches")

    def __init__(self, attr: str, patterns: Sequence[_RE2]) -> None:
        self.attr = attr
        self.searches = tuple(p.search for p in patterns)

    def match(self, req: Any) -> bool:
        value = getattr(req, self.attr)
        for search in self.searches:  # noqa: SIM110 (no generator per request)
            if search(value):
                return True
        return False


class _PathRegexp:
    __slots__ = ("searches",)

    def __init__(self, patterns: Sequence[_RE2]) -> None:
        self.searches = tuple(p.search for p in patterns)

    def match(self, req: Any) -> bool:
        path = req.routing_path()
        for search in self.searches:  # noqa: SIM110 (no generator per request)
            if search(path):
                return True
        return False


class _Path:
    __slots__ = ("paths",)

    def __init__(self, paths: frozenset[str]) -> None:
        self.paths = paths

    def match(self, req: Any) -> bool:
        return req.routing_path() in self.paths


class _PathPrefix:
    __slots__ = ("prefixes",)

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = prefixes

    def match(self, req: Any) -> bool:
        return req.routing_path().startswith(self.prefixes)


class _Method:
    __slots__ = ("methods",)

    def __init__(self, methods: frozenset[str]) -> None:
        self.methods = methods

    def match(self, req: Any) -> bool:
        return req.method in self.methods


class _Header:
    """Some line of the header has the value; with ``value=None``, the header is present."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: str | None) -> None:
        self.name = name
        self.value = value

    def match(self, req: Any) -> bool:
        values = req.header_values(self.name)
        return bool(values) if self.value is None else self.value in values


class _ValuesRegexp:
    """Some value of a header (``source="header_values"``) or of a query key
    (``source="query_values"``) matches the regexp."""

    __slots__ = ("key", "search", "source")

    def __init__(self, source: str, key: str, pattern: _RE2) -> None:
        self.source = source
        self.key = key
        self.search = pattern.search

    def match(self, req: Any) -> bool:
        search = self.search
        for value in getattr(req, self.source)(self.key):  # noqa: SIM110
            if search(value):
                return True
        return False


class _Query:
    """Some value of the query key equals ``value`` (v3: ``Query(`k`)`` means ``""``)."""

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: str) -> None:
        self.key = key
        self.value = value

    def match(self, req: Any) -> bool:
        return self.value in req.query_values(self.key)


class _QueryTemplate:
    """v2: ``key=`` + the key's first value matches the template's regexp."""

    __slots__ = ("key", "search")

    def __init__(self, key: str, pattern: _RE2) -> None:
        self.key = key
        self.search = pattern.search

    def match(self, req: Any) -> bool:
        values = req.query_values(self.key)
        return self.search(f"{self.key}={values[0]}" if values else "")


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def unmapped_network(net: Network) -> Network:
    """An IPv4-mapped IPv6 network (``::ffff:10.0.0.0/104``, ``::ffff:127.0.0.1``) as the
    IPv4 network it maps; any other as it is. Clients are compared unmapped, so a mapped
    entry would match no IPv4 client otherwise; Traefik's ip.Checker unmaps both sides
    (ClientIP, forwardedHeaders and proxyProtocol trustedIPs, ipAllowList)."""
    if net.version == 6 and net.prefixlen >= 96 and net.subnet_of(_MAPPED):  # type: ignore[arg-type]
        return ipaddress.IPv4Network((int(net.network_address) & 0xFFFFFFFF, net.prefixlen - 96))
    return net


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


def _covered(key: str, keys: frozenset[str]) -> bool:
    """Whether every host reaching ``key`` (itself, or any host under a wildcard key) is
    matched by ``keys``."""
    return key in keys or (not key.startswith("*") and wildcard_of(key) in keys)


def _hosts_of(node: Any) -> frozenset[str] | None:
    """The sound key set of a node (see ``Rule.hosts``); ``None`` when unconstrained."""
    if isinstance(node, _Host):
        return node.keys
    if isinstance(node, _And):
        # A request must satisfy every child: keep the keys each constrained child covers.
        result: frozenset[str] | None = None
        for child in node.children:
            keys = _hosts_of(child)
            if keys is None:
                continue
            if result is None:
                result = keys
            else:
                first, second = result, keys
                result = frozenset(k for k in first if _covered(k, second)) | frozenset(
                    k for k in second if _covered(k, first)
                )
        return result
    if isinstance(node, _Or):
        # A request satisfies some child; only bounded if every child is bounded.
        union: set[str] = set()
        for child in node.children:
            keys = _hosts_of(child)
            if keys is None:
                return None
            union |= keys
        return frozenset(union)
    return None  # _Not, host-agnostic leaves, regexps


def _without_host_conjuncts(root: Any) -> Any:
    """The rule minus its top-level Host/HostSNI conjuncts, for requests found via the index.

    Sound because a request reaches a rule through the host index only through one of
    ``Rule.hosts``' keys, and ``_And`` keeps only the keys every top-level Host conjunct
    covers, so those conjuncts are already known to hold; for a disjunction of Host
    matchers only, ``hosts`` is the union of their keys, so one of them holds.
    """
    if isinstance(root, _Host):
        return _Always()
    if isinstance(root, _Or) and all(isinstance(c, _Host) for c in root.children):
        return _Always()
    if isinstance(root, _And):
        rest = [c for c in root.children if not isinstance(c, _Host)]
        if len(rest) == len(root.children):
            return root
        if not rest:
            return _Always()
        return rest[0] if len(rest) == 1 else _And(rest)
    return root


# --- the compiled rule --------------------------------------------------------------------


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
# Each takes the argument tokens (count checked, none empty) and returns a node, raising
# _Fail at the offending argument's column for a bad value.


def _ascii(arg: _Token, what: str) -> str:
    if not arg.value.isascii():
        raise _Fail(
            arg.column, f"invalid {what} {arg.value!r}: non-ASCII characters are not allowed"
        )
    return arg.value


def _host_key(arg: _Token, *, wildcard: bool) -> str:
    value = _ascii(arg, "host")
    name = canonical_host(value) if value.startswith("[") else value.lower().removesuffix(".")
    if "*" in name:
        if not wildcard:
            raise _Fail(arg.column, f"invalid host {value!r}: v2 Host has no wildcards (v3 has)")
        if not name.startswith("*.") or "*" in name[1:] or len(name) < 3:
            raise _Fail(
                arg.column,
                f"invalid host {value!r}: a wildcard is '*.' and a domain (one label), or '*'",
            )
    return name


def _regexp(arg: _Token) -> _RE2:
    try:
        return _compile_re2(arg.value)
    except ValueError as err:
        raise _Fail(arg.column, f"invalid regexp {arg.value!r}: {err}") from None


def _template(arg: _Token, default: str, **flags: bool) -> _RE2:
    """A v2 template compiled (see :func:`_template_regexp`)."""
    try:
        return _compile_re2(_template_regexp(arg.value, default, **flags))
    except ValueError as err:
        raise _Fail(arg.column, f"invalid template {arg.value!r}: {err}") from None


def _path_value(arg: _Token) -> str:
    if not arg.value.startswith("/"):
        raise _Fail(arg.column, f"path {arg.value!r} does not start with '/'")
    return arg.value


def _header_name(arg: _Token) -> str:
    name = arg.value
    if not name.isascii() or any(c in name for c in ' \t:"'):
        raise _Fail(arg.column, f"invalid header name {name!r}")
    return name.lower()


def _network(arg: _Token) -> Network:
    try:
        network = ipaddress.ip_network(arg.value.strip(), strict=False)
    except ValueError:
        raise _Fail(arg.column, f"invalid IP address or CIDR {arg.value!r}") from None
    return unmapped_network(network)


def _alpn(arg: _Token) -> str:
    if arg.value == _ACME_ALPN:
        raise _Fail(arg.column, f"ALPN protocol {_ACME_ALPN!r} is not allowed")
    return arg.value


def _sni_key(arg: _Token, pattern: re.Pattern[str]) -> str:
    if not pattern.fullmatch(arg.value):
        raise _Fail(arg.column, f"invalid HostSNI {arg.value!r}: not a host name or IP")
    return arg.value.lower().removesuffix(".")


# v3: one value each (Header*: two; Query*: one or two).


def _v3_host(args: list[_Token]) -> Any:
    if args[0].value == "*":
        return _Always()
    return _Host("host", frozenset((_host_key(args[0], wildcard=True),)))


def _v3_host_regexp(args: list[_Token]) -> Any:
    _ascii(args[0], "HostRegexp")
    return _Regexp("host", [_regexp(args[0])])


def _v3_path(args: list[_Token]) -> Any:
    return _Path(frozenset((_path_value(args[0]),)))


def _v3_path_prefix(args: list[_Token]) -> Any:
    return _PathPrefix((_path_value(args[0]),))


def _v3_path_regexp(args: list[_Token]) -> Any:
    return _PathRegexp([_regexp(args[0])])


def _v3_method(args: list[_Token]) -> Any:
    return _Method(frozenset((args[0].value.upper(),)))


def _v3_header(args: list[_Token]) -> Any:
    return _Header(_header_name(args[0]), args[1].value)


def _v3_header_regexp(args: list[_Token]) -> Any:
    return _ValuesRegexp("header_values", _header_name(args[0]), _regexp(args[1]))


def _v3_query(args: list[_Token]) -> Any:
    return _Query(args[0].value, args[1].value if len(args) == 2 else "")


def _v3_query_regexp(args: list[_Token]) -> Any:
    if len(args) == 1:
        return _Query(args[0].value, "")
    return _ValuesRegexp("query_values", args[0].value, _regexp(args[1]))


def _v3_client_ip(args: list[_Token]) -> Any:
    return _ClientIP([_network(args[0])])


def _v3_host_sni(args: list[_Token]) -> Any:
    if args[0].value == "*":
        return _Always()
    return _Host("sni", frozenset((_sni_key(args[0], _SNI_RE),)))


def _v3_host_sni_regexp(args: list[_Token]) -> Any:
    _ascii(args[0], "HostSNIRegexp")
    return _Regexp("sni", [_regexp(args[0])])


def _v3_alpn(args: list[_Token]) -> Any:
    return _ALPN(frozenset((_alpn(args[0]),)))


# v2: several values, any of them (Headers*, Query: pairs, all of them).


def _v2_host(args: list[_Token]) -> Any:
    return _Host("host", frozenset(_host_key(a, wildcard=False) for a in args))


def _v2_host_regexp(args: list[_Token]) -> Any:
    for arg in args:
        _ascii(arg, "HostRegexp")
    return _Regexp(
        "host", [_template(a, "[^.]+", host=True, prefix=False, query=False) for a in args]
    )


def _v2_paths(args: list[_Token], *, prefix: bool) -> Any:
    literal: list[str] = []
    templates: list[_RE2] = []
    for arg in args:
        _path_value(arg)
        if "{" in arg.value or "}" in arg.value:
            templates.append(_template(arg, "[^/]+", host=False, prefix=prefix, query=False))
        else:  # a template without variables: its quoted, anchored text is a plain compare
            literal.append(arg.value)
    nodes: list[Any] = []
    if literal:
        nodes.append(_PathPrefix(tuple(literal)) if prefix else _Path(frozenset(literal)))
    if templates:
        nodes.append(_PathRegexp(templates))
    return nodes[0] if len(nodes) == 1 else _Or(nodes)


def _v2_path(args: list[_Token]) -> Any:
    return _v2_paths(args, prefix=False)


def _v2_path_prefix(args: list[_Token]) -> Any:
    return _v2_paths(args, prefix=True)


def _v2_method(args: list[_Token]) -> Any:
    return _Method(frozenset(a.value.upper() for a in args))


def _pairs(name: str, args: list[_Token]) -> list[tuple[_Token, _Token]]:
    if len(args) % 2:
        raise _Fail(args[-1].column, f"{name} takes name/value pairs, got {len(args)} values")
    return [(args[i], args[i + 1]) for i in range(0, len(args), 2)]


def _v2_headers(args: list[_Token]) -> Any:
    # mux keeps the last value given for a name
    pairs = {_header_name(k): v.value for k, v in _pairs("Headers", args)}
    nodes = [_Header(k, v) for k, v in pairs.items()]
    return nodes[0] if len(nodes) == 1 else _And(nodes)


def _v2_headers_regexp(args: list[_Token]) -> Any:
    pairs = {_header_name(k): _regexp(v) for k, v in _pairs("HeadersRegexp", args)}
    nodes = [_ValuesRegexp("header_values", k, p) for k, p in pairs.items()]
    return nodes[0] if len(nodes) == 1 else _And(nodes)


def _v2_query(args: list[_Token]) -> Any:
    # Traefik v2 splits every value at its first '=' and pairs up the pieces:
    # Query(`a=1`, `b=`) is a=1 and b=(anything); an odd number of pieces is an error.
    pieces: list[_Token] = []
    for arg in args:
        key, eq, value = arg.value.partition("=")
        pieces.append(_Token("string", key, arg.column))
        if eq:
            pieces.append(_Token("string", value, arg.column + len(key) + 1))
    if len(pieces) % 2:
        raise _Fail(
            args[-1].column, "Query takes key=value values in v2 (a key alone is v3: Query(`key`))"
        )
    nodes = []
    for i in range(0, len(pieces), 2):
        key, value = pieces[i], pieces[i + 1]
        template = _Token("string", f"{key.value}={value.value}", key.column)
        nodes.append(
            _QueryTemplate(
                key.value, _template(template, ".*", host=False, prefix=False, query=True)
            )
        )
    return nodes[0] if len(nodes) == 1 else _And(nodes)


def _v2_client_ip(args: list[_Token]) -> Any:
    return _ClientIP([_network(a) for a in args])


def _v2_host_sni(args: list[_Token]) -> Any:
    if args[0].value == "*":
        return _Always()
    keys = []
    for arg in args:
        if arg.value == "*":  # after the first: any name, but a name there must be
            return _Regexp("sni", [_compile_re2(".")])
        keys.append(_sni_key(arg, _SNI_V2_RE))
    return _Host("sni", frozenset(keys))


def _v2_host_sni_regexp(args: list[_Token]) -> Any:
    return _Regexp(
        "sni", [_template(a, "[^.]+", host=True, prefix=False, query=False) for a in args]
    )


def _v2_alpn(args: list[_Token]) -> Any:
    return _ALPN(frozenset(_alpn(a) for a in args))


@dataclass(frozen=True, slots=True)
class _Spec:
    build: Callable[[list[_Token]], Any]
    min_args: int
    max_args: int
    kinds: tuple[str, ...]

    def arity(self) -> str:
        plural = "s" if self.max_args != 1 else ""
        if self.min_args == self.max_args:
            return f"takes exactly {self.min_args} argument{plural}"
        if self.max_args < _MANY:
            return f"takes {self.min_args} or {self.max_args} arguments"
        return f"takes at least {self.min_args} argument{'s' if self.min_args != 1 else ''}"


_MANY: Final = 1 << 16
_HTTP: Final = ("http",)
_TCP: Final = ("tcp",)
_BOTH: Final = ("http", "tcp")
_NO_SPEC: Final = _Spec(lambda args: None, 0, 0, ())

_MATCHERS: Final[dict[str, dict[str, _Spec]]] = {
    "v3": {
        "Host": _Spec(_v3_host, 1, 1, _HTTP),
        "HostRegexp": _Spec(_v3_host_regexp, 1, 1, _HTTP),
        "Path": _Spec(_v3_path, 1, 1, _HTTP),
        "PathPrefix": _Spec(_v3_path_prefix, 1, 1, _HTTP),
        "PathRegexp": _Spec(_v3_path_regexp, 1, 1, _HTTP),
        "Method": _Spec(_v3_method, 1, 1, _HTTP),
        "Header": _Spec(_v3_header, 2, 2, _HTTP),
        "HeaderRegexp": _Spec(_v3_header_regexp, 2, 2, _HTTP),
        "Query": _Spec(_v3_query, 1, 2, _HTTP),
        "QueryRegexp": _Spec(_v3_query_regexp, 1, 2, _HTTP),
        "ClientIP": _Spec(_v3_client_ip, 1, 1, _BOTH),
        "HostSNI": _Spec(_v3_host_sni, 1, 1, _TCP),
        "HostSNIRegexp": _Spec(_v3_host_sni_regexp, 1, 1, _TCP),
        "ALPN": _Spec(_v3_alpn, 1, 1, _TCP),
    },
    "v2": {
        "Host": _Spec(_v2_host, 1, _MANY, _HTTP),
        "HostHeader": _Spec(_v2_host, 1, _MANY, _HTTP),
        "HostRegexp": _Spec(_v2_host_regexp, 1, _MANY, _HTTP),
        "Path": _Spec(_v2_path, 1, _MANY, _HTTP),
        "PathPrefix": _Spec(_v2_path_prefix, 1, _MANY, _HTTP),
        "Method": _Spec(_v2_method, 1, _MANY, _HTTP),
        "Headers": _Spec(_v2_headers, 1, _MANY, _HTTP),
        "HeadersRegexp": _Spec(_v2_headers_regexp, 1, _MANY, _HTTP),
        "Query": _Spec(_v2_query, 1, _MANY, _HTTP),
        "ClientIP": _Spec(_v2_client_ip, 1, _MANY, _BOTH),
        "HostSNI": _Spec(_v2_host_sni, 1, _MANY, _TCP),
        "HostSNIRegexp": _Spec(_v2_host_sni_regexp, 1, _MANY, _TCP),
        "ALPN": _Spec(_v2_alpn, 1, _MANY, _TCP),
    },
}

# What a v2 name is in v3, for the message.
_V3_INSTEAD: Final = {
    "Headers": ": write Header(`name`, `value`)",
    "HeadersRegexp": ": write HeaderRegexp(`name`, `regexp`)",
    "HostHeader": ": write Host(`host`)",
}

# Traefik accepts each name as written, lowercased, uppercased, and Titlecased.
_SPELLINGS: Final[dict[str, str]] = {
    spelling: name
    for names in _MATCHERS.values()
    for name in names
    for spelling in (name, name.lower(), name.upper(), name.lower().title())
}


# --- the route table ----------------------------------------------------------------------


class RouteTable(Generic[T]):
    """Routes in priority order, indexed by host so lookup cost does not grow with hosts.

    Order: priority descending, then name ascending, then input order. ``match`` returns
    the value of the first entry in that order whose rule matches, exactly as a linear scan
    would, but only looks at entries that can match the request's host.

    Index: for each key named by some rule's ``hosts`` (a host, or a ``*.suffix``
    wildcard), a pre-merged tuple of that key's entries (for a host, those of the
    wildcard covering it too) and the host-agnostic entries ranked above the last of
    them, followed by a shared tail of the remaining host-agnostic entries (so memory
    stays near hosts + entries, not hosts x host-agnostic entries). A request for a host
    with no key of its own uses its wildcard's; any other scans only the host-agnostic
    entries. All sorting and merging happen here.
    """

    __slots__ = ("_agnostic", "_index", "_use_sni", "_wild", "by_host", "entries")

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
        key_ranks: dict[str, list[int]] = {}
        for rank, (_, rule, _, _) in enumerate(ordered):
            if rule.hosts is None:
                agnostic_ranks.append(rank)
            else:  # an empty set (contradictory hosts) can never match: indexed nowhere
                for key in rule.hosts:
                    key_ranks.setdefault(key, []).append(rank)
        self._wild = any(key.startswith("*.") for key in key_ranks)

        agnostic = tuple(pairs[r] for r in agnostic_ranks)
        self._agnostic: tuple[tuple[Match, T], ...] = agnostic
        tails: dict[int, tuple[tuple[Match, T], ...]] = {0: agnostic}
        index: dict[str, tuple[tuple[tuple[Match, T], ...], tuple[tuple[Match, T], ...]]] = {}
        # Hosts whose answer the host alone decides: their first candidate has
        # nothing left to check once the index found it (see ``match_host``).
        by_host: dict[str, T] = {}
        for key, own in key_ranks.items():  # each ``own`` is in rank order
            wildcard = wildcard_of(key) if self._wild and not key.startswith("*") else None
            ranks = sorted(set(own) | set(key_ranks[wildcard])) if wildcard in key_ranks else own
            # Host-agnostic entries ranked above this key's last entry are interleaved;
            # the rest follow as a tail shared by every key with the same cut.
            cut = bisect_left(agnostic_ranks, ranks[-1])
            merged = sorted(ranks + agnostic_ranks[:cut]) if cut else ranks
            if host_only[merged[0]]:
                by_host[key] = ordered[merged[0]][3]
            tail = tails.get(cut)
            if tail is None:
                tail = tails[cut] = agnostic[cut:]
            index[key] = (tuple(pairs[r] for r in merged), tail)
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
        if slot is None and self._wild:
            wildcard = wildcard_of(key)
            if wildcard is not None:
                slot = self._index.get(wildcard)
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
        return f"RouteTable({len(self.entries)} entries, {len(self._index)} indexed keys)"
