"""The route table (edge.rules.table): priority order, ties by name, the host index
(exact names, wildcards, SNI) giving the answer of a linear scan, on random tables too."""

from __future__ import annotations

import random
from typing import Any

import pytest

from edge.rules import (
    RequestView,
    RouteTable,
    Rule,
    compile_rule,
    default_priority,
)
from tests.unit.rules.requests import Req, req


def entry(name: str, rule: str, priority: int, kind: str = "http") -> tuple[str, Rule, int, str]:
    return (name, compile_rule(rule, kind=kind), priority, name)


def test_default_priority_is_rule_length() -> None:
    assert default_priority("Host(`a.com`)") == 13


def test_higher_priority_first() -> None:
    table = RouteTable([entry("low", "PathPrefix(`/`)", 1), entry("high", "PathPrefix(`/`)", 10)])
    assert table.match(req()) == "high"
    assert [e[0] for e in table.entries] == ["high", "low"]


@pytest.mark.parametrize("names", [("a", "b"), ("b", "a")])
def test_ties_broken_by_name_ascending(names: tuple[str, str]) -> None:
    table = RouteTable([entry(n, "PathPrefix(`/`)", 5) for n in names])
    assert table.match(req()) == "a"


def test_host_agnostic_high_priority_beats_host_specific_low() -> None:
    table = RouteTable(
        [entry("specific", "Host(`a.com`)", 1), entry("catch", "PathPrefix(`/`)", 100)]
    )
    assert table.match(req(host="a.com")) == "catch"


def test_host_specific_high_priority_beats_host_agnostic_low() -> None:
    table = RouteTable(
        [entry("specific", "Host(`a.com`)", 100), entry("catch", "PathPrefix(`/`)", 1)]
    )
    assert table.match(req(host="a.com")) == "specific"
    assert table.match(req(host="b.com")) == "catch"
    assert table.match(req(host="")) == "catch"


def test_falls_through_host_entries_to_lower_agnostic_ones() -> None:
    table = RouteTable(
        [
            entry("h-api", "Host(`a.com`) && PathPrefix(`/api`)", 50),
            entry("any-static", "PathPrefix(`/static`)", 60),
            entry("h-admin", "Host(`a.com`) && PathPrefix(`/admin`)", 40),
            entry("any-health", "Path(`/health`)", 30),
            entry("h-root", "Host(`a.com`)", 20),
            entry("any-root", "PathPrefix(`/`)", 10),
        ]
    )
    assert table.match(req(path="/static/x")) == "any-static"
    assert table.match(req(path="/api/x")) == "h-api"
    assert table.match(req(path="/admin")) == "h-admin"
    assert table.match(req(path="/health")) == "any-health"
    assert table.match(req(path="/other")) == "h-root"
    assert table.match(req(host="b.com", path="/other")) == "any-root"
    assert table.match(req(host="b.com", path="/api")) == "any-root"


def test_or_of_hosts_is_indexed_under_each_host() -> None:
    table = RouteTable(
        [
            entry("both", "(Host(`a.com`) && Path(`/p`)) || (Host(`b.com`) && Path(`/q`))", 5),
            entry("fallback", "PathPrefix(`/`)", 1),
        ]
    )
    assert table.match(req(host="a.com", path="/p")) == "both"
    assert table.match(req(host="b.com", path="/q")) == "both"
    assert table.match(req(host="a.com", path="/q")) == "fallback"
    assert table.match(req(host="c.com", path="/p")) == "fallback"


def test_no_match_and_empty_table() -> None:
    assert RouteTable([entry("a", "Host(`a.com`)", 1)]).match(req(host="b.com")) is None
    empty: RouteTable[str] = RouteTable([])
    assert empty.match(req()) is None and len(empty) == 0


def test_len() -> None:
    assert len(RouteTable([entry(f"r{i}", f"Host(`h{i}`)", 1) for i in range(7)])) == 7


def test_tcp_table_indexes_by_sni() -> None:
    table = RouteTable(
        [
            entry("a", "HostSNI(`a.com`)", 10, "tcp"),
            entry("a-h2", "HostSNI(`a.com`) && ALPN(`h2`)", 20, "tcp"),
            entry("any", "HostSNI(`*`)", 1, "tcp"),
        ]
    )
    assert table.match(RequestView(sni="a.com", alpn=("h2",))) == "a-h2"
    assert table.match(RequestView(sni="a.com")) == "a"
    assert table.match(RequestView(sni="b.com")) == "any"
    assert table.match(RequestView(sni="", host="a.com")) == "any"


def test_mixed_kinds_rejected() -> None:
    with pytest.raises(ValueError):
        RouteTable([entry("h", "Host(`a`)", 1), entry("t", "HostSNI(`a`)", 1, "tcp")])


class CountingView(RequestView):
    __slots__ = ("path_reads",)

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.path_reads = 0

    def routing_path(self) -> str:
        self.path_reads += 1
        return super().routing_path()


def test_lookup_only_evaluates_routes_of_the_request_host() -> None:
    n = 1_000  # any count above two tells a host index from a scan of every route
    table = RouteTable(
        [entry(f"r{i}", f"Host(`h{i}.example.com`) && Path(`/x`)", 1) for i in range(n)]
        + [entry("catch", "Path(`/catch`)", 0)]
    )
    view = CountingView(host=f"h{n // 2}.example.com", path="/nope")
    assert table.match(view) is None
    assert view.path_reads == 2  # its own route, then the host-agnostic one
    view = CountingView(host="unknown.example.com", path="/catch")
    assert table.match(view) == "catch"
    assert view.path_reads == 1


ATOMS = [
    "Host(`h0`)",
    "Host(`h1`)",
    "Host(`h2`)",
    "(Host(`h0`) || Host(`h3`))",
    "Host(`*.h1`)",
    "Host(`a.h1`)",
    "Host(`*`)",
    "HostRegexp(`^h[12]$`)",
    "PathPrefix(`/a`)",
    "Path(`/b`)",
    "Path(`/`)",
    "Method(`POST`)",
    "Query(`x`)",
]


def random_rule(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth >= 3 or roll < 0.45:
        return rng.choice(ATOMS)
    if roll < 0.55:
        return "!" + random_rule(rng, depth + 1)
    op = rng.choice([" && ", " && ", " || "])
    left, right = random_rule(rng, depth + 1), random_rule(rng, depth + 1)
    return f"({left}{op}{right})" if rng.random() < 0.5 else f"{left}{op}{right}"


def brute_force(entries: list[tuple[str, Rule, int, str]], view: RequestView) -> str | None:
    for _name, rule, _priority, value in sorted(entries, key=lambda e: (-e[2], e[0])):
        if rule.match(view):
            return value
    return None


def test_route_table_equals_linear_scan_on_random_tables() -> None:
    rng = random.Random(1)
    views = [
        RequestView(host=h, path=p, method=m, query=q)
        for h in ("h0", "h1", "h2", "h3", "h4", "", "a.h1", "b.h1", "x.a.h1", "*.h1")
        for p in ("/", "/a", "/a/b", "/b")
        for m in ("GET", "POST")
        for q in ("", "x=1")
    ]
    checked_indexed = 0
    decided_by_host = 0
    for _ in range(300):
        entries = []
        for i in range(rng.randint(0, 14)):
            rule = compile_rule(random_rule(rng))
            checked_indexed += rule.hosts is not None
            name = rng.choice("abcdef")
            entries.append((name, rule, rng.randint(0, 4), f"{name}{i}"))
        table = RouteTable(list(entries))
        for view in views:
            expected = brute_force(entries, view)
            assert table.match(view) == expected, (
                [(e[0], e[1].text, e[2]) for e in entries],
                view,
            )
            # When the host alone decides, it decides what the full match would.
            by_host = table.match_host(view.host)
            if by_host is not None:
                decided_by_host += 1
                assert by_host == expected, ([(e[0], e[1].text, e[2]) for e in entries], view)
    assert checked_indexed > 300  # the index is exercised, not just the agnostic path
    assert decided_by_host > 100  # and so is the host-only shortcut


@pytest.mark.parametrize(
    "rules, host, expected",
    [
        (["Host(`a`)"], "a", "r0"),
        (["Host(`a`) || Host(`b`)"], "b", "r0"),
        (["Host(`a`) && PathPrefix(`/x`)"], "a", None),  # the path must be looked at
        (
            ["Host(`a`)", "PathPrefix(`/`) && Method(`POST`)"],
            "a",
            None,
        ),  # a longer agnostic rule ranks first
        (["HostRegexp(`^a$`)"], "a", None),
        (["Host(`a`)"], "b", None),
    ],
)
def test_match_host_only_when_the_host_decides(rules, host, expected):
    table = RouteTable([(f"r{i}", compile_rule(r), len(r), f"r{i}") for i, r in enumerate(rules)])
    assert table.match_host(host) == expected


def test_wildcard_hosts_are_indexed_not_scanned() -> None:
    rule = compile_rule("Host(`*.example.com`) && PathPrefix(`/api`)")
    assert rule.hosts == frozenset({"*.example.com"})
    table = RouteTable(
        [
            ("wild", rule, 10, "wild"),
            ("exact", compile_rule("Host(`a.example.com`)"), 5, "exact"),
            ("star", compile_rule("Host(`*`)"), 1, "star"),
        ]
    )
    assert table.match(Req("/api/x", host="a.example.com").view()) == "wild"
    assert table.match(Req("/other", host="a.example.com").view()) == "exact"
    assert table.match(Req("/api/x", host="b.example.com").view()) == "wild"
    assert table.match(Req("/other", host="b.example.com").view()) == "star"
    assert table.match(Req("/api", host="example.com").view()) == "star"
    wild_only = RouteTable([("w", compile_rule("Host(`*.example.com`)"), 1, "w")])
    assert wild_only.match_host("*.example.com") == "w"
