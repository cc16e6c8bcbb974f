"""Matcher nodes: what a compiled rule is made of, and what the route table's index
learns from it.

Each node has ``match(req) -> bool``. Combinators hold their children's bound ``match``
methods so a request costs one call per node and no allocation. :func:`_hosts_of` gives
the sound key set ``Rule.hosts`` promises (see :mod:`edge.rules`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from typing import Any

from edge.rules.hosts import wildcard_of
from edge.rules.regexp import _RE2

Match = Callable[[Any], bool]


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
    if net.version == 6 and net.prefixlen >= 96 and net.subnet_of(_MAPPED):
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
