"""The rule language: matchers, precedence, errors with columns, host sets, RouteTable order."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

import edge.rules.request as rules_mod
from edge.errors import RuleError
from edge.rules import (
    RequestView,
    RouteTable,
    Rule,
    canonical_host,
    compile_rule,
    default_priority,
    routing_path,
)


def req(**kw: Any) -> RequestView:
    kw.setdefault("host", "a.com")
    kw.setdefault("path", "/")
    kw.setdefault("method", "GET")
    return RequestView(**kw)


H = [(b"X-Key", b"v1"), (b"x-other", b"o")]

# (rule, request fields, expected match)
HTTP_CASES: list[tuple[str, dict[str, Any], bool]] = [
    # Host: exact, case-insensitive argument, trailing dot, IPv6, wildcards (v3).
    ("Host(`a.com`)", {"host": "a.com"}, True),
    ("Host(`A.COM`)", {"host": "a.com"}, True),
    ("Host(`a.com.`)", {"host": "a.com"}, True),
    ("Host(`a.com`)", {"host": "b.com"}, False),
    ("Host(`a.com`)", {"host": "sub.a.com"}, False),
    ("Host(`a.com`)", {"host": "a.com.evil"}, False),
    ("Host(`a.com`)", {"host": ""}, False),
    ("Host(`[::1]`)", {"host": "::1"}, True),
    ("Host(`*.a.com`)", {"host": "x.a.com"}, True),
    ("Host(`*.a.com`)", {"host": "a.com"}, False),
    ("Host(`*.a.com`)", {"host": "y.x.a.com"}, False),
    ("Host(`*.A.com.`)", {"host": "x.a.com"}, True),
    ("Host(`*`)", {"host": ""}, True),
    ("Host(`*`)", {"host": "anything"}, True),
    # HostRegexp: search semantics on the lowercased host, case-sensitive.
    (r"HostRegexp(`^[a-z]+\.example\.com$`)", {"host": "foo.example.com"}, True),
    (r"HostRegexp(`^[a-z]+\.example\.com$`)", {"host": "foo.bar.example.com"}, False),
    ("HostRegexp(`example`)", {"host": "www.example.org"}, True),
    (r"HostRegexp(`^WWW\.`)", {"host": "www.a.com"}, False),
    (r"HostRegexp(`(?i)^WWW\.`)", {"host": "www.a.com"}, True),
    # Path: exact, on the routing path (unreserved escapes decoded, reserved kept).
    ("Path(`/a`)", {"path": "/a"}, True),
    ("Path(`/a`)", {"path": "/a/"}, False),
    ("Path(`/a`)", {"path": "/ab"}, False),
    ("Path(`/a b`)", {"path": "/a%20b"}, True),
    ("Path(`/admin`)", {"path": "/%61dmin"}, True),
    ("Path(`/a/b`)", {"path": "/a%2Fb"}, False),
    ("Path(`/a%2Fb`)", {"path": "/a%2fb"}, True),
    # PathPrefix: plain string prefix.
    ("PathPrefix(`/api`)", {"path": "/api"}, True),
    ("PathPrefix(`/api`)", {"path": "/api/v1"}, True),
    ("PathPrefix(`/api`)", {"path": "/apix"}, True),
    ("PathPrefix(`/api`)", {"path": "/ap"}, False),
    ("PathPrefix(`/api`)", {"path": "/v1/api"}, False),
    ("PathPrefix(`/api`)", {"path": "/%61pi/x"}, True),
    ("PathPrefix(`/api/`)", {"path": "/api%2Fv1"}, False),
    ("PathPrefix(`/`)", {"path": "/"}, True),
    # PathRegexp.
    ("PathRegexp(`^/a/[0-9]+$`)", {"path": "/a/12"}, True),
    ("PathRegexp(`^/a/[0-9]+$`)", {"path": "/a/x"}, False),
    ("PathRegexp(`[0-9]`)", {"path": "/x/1/y"}, True),
    ("PathRegexp(`[0-9]`)", {"path": "/x/y"}, False),
    # Method: argument case-insensitive.
    ("Method(`GET`)", {"method": "GET"}, True),
    ("Method(`GET`)", {"method": "POST"}, False),
    ("Method(`get`)", {"method": "GET"}, True),
    ("Method(`GET`)", {"method": "get"}, False),
    # Header / HeaderRegexp.
    ("Header(`X-Key`, `v1`)", {"headers": H}, True),
    ("Header(`x-key`, `v1`)", {"headers": [(b"X-KEY", b"v1")]}, True),
    ("Header(`X-Key`, `v1`)", {"headers": [(b"X-Key", b"no"), (b"x-key", b"v1")]}, True),
    ("Header(`X-Key`, `v1`)", {"headers": [(b"X-Key", b"V1")]}, False),
    ("Header(`X-Key`, `v1`)", {"headers": [(b"X-Keys", b"v1")]}, False),
    ("Header(`X-Key`, `v1`)", {"headers": []}, False),
    ("HeaderRegexp(`X-Key`, `^v[0-9]$`)", {"headers": H}, True),
    ("HeaderRegexp(`X-Key`, `^v[0-9]$`)", {"headers": [(b"x-key", b"vv")]}, False),
    ("HeaderRegexp(`X-Key`, `.*`)", {"headers": []}, False),
    # Query: (key, value); (key) alone is the key with an empty value.
    ("Query(`a`, `1`)", {"query": "a=1&b=2"}, True),
    ("Query(`a`, `1`)", {"query": "a=2"}, False),
    ("Query(`a`, `1`)", {"query": "a=2&a=1"}, True),
    ("Query(`a`, `1`)", {"query": ""}, False),
    ("Query(`q`, `a b`)", {"query": "q=a+b"}, True),
    ("Query(`q`, `a b`)", {"query": "q=a%20b"}, True),
    ("Query(`a`)", {"query": "a="}, True),
    ("Query(`a`)", {"query": "a"}, True),
    ("Query(`a`)", {"query": "a=1"}, False),
    ("Query(`a`)", {"query": "b=1"}, False),
    ("Query(`a`, `1`)", {"query": "a=1;b=2"}, False),
    ("QueryRegexp(`a`)", {"query": "a"}, True),
    # QueryRegexp.
    ("QueryRegexp(`a`, `^[0-9]+$`)", {"query": "a=123"}, True),
    ("QueryRegexp(`a`, `^[0-9]+$`)", {"query": "a=x1"}, False),
    ("QueryRegexp(`a`, `.*`)", {"query": ""}, False),
    # ClientIP: networks, single addresses, host bits, IPv4-mapped IPv6.
    ("ClientIP(`10.0.0.0/8`)", {"client_ip": "10.1.2.3"}, True),
    ("ClientIP(`10.0.0.0/8`)", {"client_ip": "11.0.0.1"}, False),
    ("ClientIP(`10.0.0.1/8`)", {"client_ip": "10.9.9.9"}, True),
    ("ClientIP(`::1`)", {"client_ip": "::1"}, True),
    ("ClientIP(`::1`)", {"client_ip": "127.0.0.1"}, False),
    ("ClientIP(`192.168.1.7`)", {"client_ip": "192.168.1.7"}, True),
    ("ClientIP(`192.168.1.7`)", {"client_ip": "192.168.1.8"}, False),
    ("ClientIP(`10.0.0.0/8`)", {"client_ip": "::ffff:10.1.2.3"}, True),
    ("ClientIP(`10.0.0.0/8`)", {"client_ip": "::ffff:11.1.2.3"}, False),
    ("ClientIP(`::ffff:0:0/96`)", {"client_ip": "::ffff:1.2.3.4"}, True),
    # An IPv4-mapped entry is the IPv4 network it maps (Traefik's ip.Checker unmaps both sides).
    ("ClientIP(`::ffff:10.0.0.0/104`)", {"client_ip": "10.1.2.3"}, True),
    ("ClientIP(`::ffff:10.0.0.0/104`)", {"client_ip": "::ffff:10.1.2.3"}, True),
    ("ClientIP(`::ffff:10.0.0.0/104`)", {"client_ip": "11.0.0.1"}, False),
    ("ClientIP(`::ffff:127.0.0.1`)", {"client_ip": "127.0.0.1"}, True),
    ("ClientIP(`fe80::/10`)", {"client_ip": "fe80::1%eth0"}, True),
    ("ClientIP(`0.0.0.0/0`)", {"client_ip": ""}, False),
    ("ClientIP(`0.0.0.0/0`)", {"client_ip": "not-an-ip"}, False),
    # Precedence: && binds tighter than ||, ! tighter than both.
    ("Host(`a.com`) || Path(`/b`) && Method(`POST`)", {"host": "a.com", "method": "GET"}, True),
    ("Method(`POST`) && Path(`/b`) || Host(`a.com`)", {"host": "a.com", "method": "GET"}, True),
    ("Host(`x`) || Path(`/b`) && Method(`POST`)", {"path": "/b", "method": "GET"}, False),
    ("Host(`x`) || Path(`/b`) && Method(`POST`)", {"path": "/b", "method": "POST"}, True),
    ("(Host(`a.com`) || Path(`/b`)) && Method(`POST`)", {"host": "a.com", "method": "GET"}, False),
    ("(Host(`a.com`) || Path(`/b`)) && Method(`POST`)", {"host": "a.com", "method": "POST"}, True),
    ("!Host(`a.com`)", {"host": "a.com"}, False),
    ("!Host(`a.com`)", {"host": "b.com"}, True),
    ("!Host(`a.com`) && Path(`/x`)", {"host": "b.com", "path": "/x"}, True),
    ("!Host(`a.com`) && Path(`/x`)", {"host": "a.com", "path": "/y"}, False),
    ("!(Host(`a.com`) || Host(`b.com`))", {"host": "b.com"}, False),
    ("!(Host(`a.com`) || Host(`b.com`))", {"host": "c.com"}, True),
    ("!!Host(`a.com`)", {"host": "a.com"}, True),
    ("((Host(`a.com`)))", {"host": "a.com"}, True),
    ("Host(`a.com`) && (Path(`/x`) || (Path(`/y`) && !Method(`GET`)))", {"path": "/y"}, False),
    (
        "Host(`a.com`) && (Path(`/x`) || (Path(`/y`) && !Method(`GET`)))",
        {"path": "/y", "method": "PUT"},
        True,
    ),
    # Syntax latitude: whitespace anywhere, double quotes with Go escapes, name spellings.
    (" \tHost( `b.com` )\n&&PathPrefix(`/`)  ", {"host": "b.com"}, True),
    ('Host("a.com") && Path("/x\\"y")', {"path": '/x"y'}, True),
    ("host(`a.com`) && pathprefix(`/`)", {}, True),
    ("HOST(`a.com`) && Pathprefix(`/`)", {}, True),
]


@pytest.mark.parametrize(("rule", "fields", "expected"), HTTP_CASES)
def test_http_matchers(rule: str, fields: dict[str, Any], expected: bool) -> None:
    compiled = compile_rule(rule)
    assert compiled.match(req(**fields)) is expected
    assert compiled.text == rule


TCP_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("HostSNI(`a.com`)", {"sni": "a.com"}, True),
    ("HostSNI(`A.com`)", {"sni": "a.com"}, True),
    ("HostSNI(`a.com`)", {"sni": "b.com"}, False),
    ("HostSNI(`a.com`)", {"sni": ""}, False),
    ("HostSNI(`*.a.com`)", {"sni": "x.a.com"}, True),
    ("HostSNI(`*.a.com`)", {"sni": "a.com"}, False),
    ("HostSNI(`a.com.`)", {"sni": "a.com"}, True),
    ("HostSNI(`*`)", {"sni": ""}, True),
    ("HostSNI(`*`)", {"sni": "anything.example"}, True),
    (r"HostSNIRegexp(`^[a-z]+\.a\.com$`)", {"sni": "x.a.com"}, True),
    (r"HostSNIRegexp(`^[a-z]+\.a\.com$`)", {"sni": "x.y.a.com"}, False),
    ("ALPN(`h2`)", {"alpn": ("h2", "http/1.1")}, True),
    ("ALPN(`h2`)", {"alpn": ("http/1.1",)}, False),
    ("ALPN(`h2`)", {"alpn": ()}, False),
    ("ClientIP(`10.0.0.0/8`)", {"client_ip": "10.0.0.5"}, True),
    ("HostSNI(`a.com`) && ALPN(`h2`)", {"sni": "a.com", "alpn": ("h2",)}, True),
    ("HostSNI(`a.com`) && !ALPN(`h2`)", {"sni": "a.com", "alpn": ("h2",)}, False),
]


@pytest.mark.parametrize(("rule", "fields", "expected"), TCP_CASES)
def test_tcp_matchers(rule: str, fields: dict[str, Any], expected: bool) -> None:
    compiled = compile_rule(rule, kind="tcp")
    assert compiled.kind == "tcp"
    assert compiled.match(RequestView(**fields)) is expected


# (rule, kind, column, message fragment)
ERROR_CASES: list[tuple[str, str, int, str]] = [
    ("Hots(`a`)", "http", 1, "unknown matcher 'Hots'"),
    ("Host(`a`) && Pth(`/`)", "http", 14, "unknown matcher 'Pth'"),
    ("Host(`a`) && Path `/`", "http", 19, "expected '(' after matcher name"),
    ("Host(`a.com`) && Path(`/x", "http", 23, "unterminated string"),
    ('Path("/x)', "http", 6, "unterminated string"),
    ("", "http", 1, "empty rule"),
    ("  \t", "http", 1, "empty rule"),
    ("Host(`a`,)", "http", 10, "expected a quoted string argument"),
    ("Host(a.com)", "http", 6, "expected a quoted string argument, found 'a'"),
    ("(Host(`a`)", "http", 11, "to close '(' at column 1"),
    ("Host(`a`))", "http", 10, "unexpected ')'"),
    ("Host(`a`) Path(`/`)", "http", 11, "expected '&&', '||' or end of rule"),
    ("Host(`a`) &&", "http", 13, "expected a matcher, '!' or '(', found end of rule"),
    ("Host(`a`) && && Path(`/`)", "http", 14, "expected a matcher"),
    ("Host(`a`) & Path(`/`)", "http", 11, "expected '&&'"),
    ("Host(`a`) | Path(`/`)", "http", 11, "expected '||'"),
    ("Host(`a`) && #", "http", 14, "unexpected character '#'"),
    ("Host(`a` `b`)", "http", 10, "expected ',' or ')'"),
    ("Host()", "http", 1, "Host takes exactly 1 argument, got 0"),
    ("Host(`a`, `b`)", "http", 1, "got 2 (several values are v2 syntax"),
    ("Query(`a`, `b`, `c`)", "http", 1, "Query takes 1 or 2 arguments, got 3"),
    ("Headers(`X`, `v`)", "http", 1, "'Headers' is v2 syntax and this rule is v3: write Header("),
    ("Header(`X`, ``)", "http", 13, "empty value for Header"),
    ("Query(`q`, ``)", "http", 12, "empty value for Query"),
    ("Host(`*a.com`)", "http", 6, "a wildcard is '*.'"),
    ("Host(`a.*.com`)", "http", 6, "a wildcard is '*.'"),
    ("HostRegexp(`\u00e9`)", "http", 12, "non-ASCII"),
    ("PathRegexp(`(a)\\1`)", "http", 12, "invalid regexp"),
    ("PathRegexp(`(?=a)`)", "http", 12, "invalid regexp"),
    ("PathRegexp(`a\\C`)", "http", 12, "invalid escape sequence"),
    ("ALPN(`acme-tls/1`)", "tcp", 6, "not allowed"),
    ("HostSNI(`a`, `b`)", "tcp", 1, "HostSNI takes exactly 1 argument, got 2"),
    ("Header(`X`)", "http", 1, "Header takes exactly 2 arguments, got 1"),
    ("Host(`a`) && QueryRegexp(`a`, `b`, `c`)", "http", 14, "takes 1 or 2 arguments, got 3"),
    ("PathRegexp(`^/(a`)", "http", 12, "invalid regexp"),
    ("HostRegexp(`[`)", "http", 12, "invalid regexp"),
    ("HeaderRegexp(`X`, `*`)", "http", 19, "invalid regexp"),
    ("ClientIP(`10.0.0.0/33`)", "http", 10, "invalid IP address or CIDR"),
    ("ClientIP(`nope`)", "http", 10, "invalid IP address or CIDR 'nope'"),
    ("HostSNI(`a.com`)", "http", 1, "not allowed in http rules"),
    ("ALPN(`h2`)", "http", 1, "not allowed in http rules"),
    ("Host(`a`)", "tcp", 1, "not allowed in tcp rules"),
    ("HostSNI(`*`) && Path(`/`)", "tcp", 17, "not allowed in tcp rules"),
    ("HostSNI(`a b`)", "tcp", 9, "invalid HostSNI"),
    ("Path(`a`)", "http", 6, "does not start with '/'"),
    ("Host(``)", "http", 6, "empty value for Host"),
    ("Host(`\u00e9.com`)", "http", 6, "non-ASCII"),
    ('Path("\\d")', "http", 7, "invalid escape"),
    ("!" * 70 + "Host(`a`)", "http", 65, "nested deeper"),
]


@pytest.mark.parametrize(("rule", "kind", "column", "fragment"), ERROR_CASES)
def test_errors_name_rule_and_column(rule: str, kind: str, column: int, fragment: str) -> None:
    with pytest.raises(RuleError) as info:
        compile_rule(rule, kind=kind)
    err = info.value
    assert err.rule == rule
    assert err.column == column, str(err)
    assert fragment in err.message, str(err)
    assert f"column {column}: " in str(err)
    assert repr(rule) in str(err)


def test_unknown_matcher_suggests_the_close_name() -> None:
    with pytest.raises(RuleError, match=r"did you mean 'PathPrefix'"):
        compile_rule("PathPrefx(`/`)")


def test_unknown_kind_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        compile_rule("Host(`a`)", kind="udp")


# (rule, kind, expected hosts)
HOSTS_CASES: list[tuple[str, str, frozenset[str] | None]] = [
    ("Host(`a`)", "http", frozenset({"a"})),
    ("Host(`A.com`) || Host(`b.com`)", "http", frozenset({"a.com", "b.com"})),
    ("Host(`*.a.com`)", "http", frozenset({"*.a.com"})),
    ("Host(`*.a.com`) && Host(`x.a.com`)", "http", frozenset({"x.a.com"})),
    ("Host(`x.a.com`) && Host(`*.a.com`)", "http", frozenset({"x.a.com"})),
    ("Host(`x.b.com`) && Host(`*.a.com`)", "http", frozenset()),
    ("Host(`*.a.com`) && Host(`*.b.com`)", "http", frozenset()),
    ("Host(`*.a.com`) && Host(`*.a.com`)", "http", frozenset({"*.a.com"})),
    ("Host(`x.y.a.com`) && Host(`*.a.com`)", "http", frozenset()),
    ("Host(`*`)", "http", None),
    ("Host(`a`) && PathPrefix(`/x`)", "http", frozenset({"a"})),
    ("PathPrefix(`/x`) && Host(`a`)", "http", frozenset({"a"})),
    ("Host(`a`) || Host(`b`)", "http", frozenset({"a", "b"})),
    ("(Host(`a`) && Path(`/p`)) || (Host(`b`) && Path(`/q`))", "http", frozenset({"a", "b"})),
    ("PathPrefix(`/`) && (Host(`a`) || Host(`b`))", "http", frozenset({"a", "b"})),
    ("(Host(`a`) || Host(`b`)) && (Host(`b`) || Host(`c`))", "http", frozenset({"b"})),
    ("Host(`a`) && Host(`b`)", "http", frozenset()),
    ("Host(`a`) && !Host(`b`)", "http", frozenset({"a"})),
    ("Host(`a`) || PathPrefix(`/x`)", "http", None),
    ("!Host(`a`)", "http", None),
    ("!!Host(`a`)", "http", None),
    ("HostRegexp(`^a$`)", "http", None),
    ("Host(`a`) || HostRegexp(`^b$`)", "http", None),
    ("Path(`/`)", "http", None),
    ("HostSNI(`a.com`)", "tcp", frozenset({"a.com"})),
    ("HostSNI(`a.com`) && ALPN(`h2`)", "tcp", frozenset({"a.com"})),
    ("HostSNI(`*`)", "tcp", None),
    ("HostSNI(`*.a.com`)", "tcp", frozenset({"*.a.com"})),
    ("HostSNI(`a`) || ClientIP(`::1`)", "tcp", None),
    ("HostSNIRegexp(`a`)", "tcp", None),
]


@pytest.mark.parametrize(("rule", "kind", "expected"), HOSTS_CASES)
def test_hosts_derivation(rule: str, kind: str, expected: frozenset[str] | None) -> None:
    assert compile_rule(rule, kind=kind).hosts == expected


def test_contradictory_hosts_never_match() -> None:
    rule = compile_rule("Host(`a`) && Host(`b`)")
    assert not rule.match(req(host="a")) and not rule.match(req(host="b"))


# --- RequestView ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("authority", "host"),
    [
        ("Example.COM", "example.com"),
        ("example.com:8080", "example.com"),
        ("example.com.", "example.com"),
        ("Example.com.:443", "example.com"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("10.0.0.1:80", "10.0.0.1"),
        ("", ""),
    ],
)
def test_canonical_host(authority: str, host: str) -> None:
    assert canonical_host(authority) == host


def test_host_from_a_request_with_port_and_case_matches() -> None:
    rule = compile_rule("Host(`example.com`)")
    assert rule.match(RequestView(host=canonical_host("EXAMPLE.com:8443")))


def test_request_view_defaults() -> None:
    view = RequestView()
    assert (view.host, view.path, view.query, view.method, view.client_ip, view.sni) == (
        "", "", "", "", "", "",
    )  # fmt: skip
    assert list(view.headers) == [] and view.alpn == ()
    assert view.query_values("a") == [] and view.header_values("a") == []
    assert view.client_address() is None


def test_header_values_case_insensitive_all_lines() -> None:
    view = RequestView(
        headers=[(b"X-A", b" 1 "), (b"x-b", b"2"), (b"x-a", b"\xc3\xa9"), (b"x-a", b"\xe9")]
    )
    # Bytes are text as UTF-8 (as Go compares them); a stray byte equals no rule text.
    assert view.header_values("x-A") == ["1", "\xe9", "\udce9"]
    assert view.header_values("X-C") == []


def test_query_values_parsed_once_and_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = rules_mod.parse_query

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(rules_mod, "parse_query", counting)
    view = RequestView(query="a=1&a=2&b=&c")
    assert view.query_values("a") == ["1", "2"]
    assert view.query_values("b") == [""]
    assert view.query_values("c") == [""]
    view.query_values("a").append("mutated")
    assert view.query_values("a") == ["1", "2"]
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("path", "routed"),
    [
        ("/plain", "/plain"),
        ("/a%20b/%2F", "/a b/%2F"),
        ("/a%2fb", "/a%2Fb"),
        ("/%61dmin", "/admin"),
        ("/%2561dmin", "/%2561dmin"),  # no double decoding: %25 is reserved
        (
            "/%3a%40%21%24%26%27%28%29%2a%2b%2c%3b%3d%3f%23%5b%5d",
            "/%3A%40%21%24%26%27%28%29%2A%2B%2C%3B%3D%3F%23%5B%5D",
        ),
        ("/%7e%2d%2e%5f", "/~-._"),
        ("/caf%C3%A9", "/caf\xe9"),
        ("/caf\xc3\xa9", "/caf\xe9"),  # raw UTF-8 bytes, as the server hands them (latin-1)
        ("/caf\xe9", "/caf\xe9"),  # text (its latin-1 bytes are not UTF-8)
        ("/%ff", "/\udcff"),
        ("/bad%zz", "/bad%zz"),
        ("/end%", "/end%"),
        ("/end%4", "/end%4"),
    ],
)
def test_routing_path(path: str, routed: str) -> None:
    assert RequestView(path=path).routing_path() == routed
    assert routing_path(path) == routed


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("a=1&a=2&b=&c", {"a": ["1", "2"], "b": [""], "c": [""]}),
        ("q=a+b&r=a%20b", {"q": ["a b"], "r": ["a b"]}),
        ("a=1;b=2&c=3", {"c": ["3"]}),  # Go drops a pair holding ';'
        ("a=%zz&b=1", {"b": ["1"]}),  # and one with a bad escape
        ("&&=v&k", {"": ["v"], "k": [""]}),
        ("a=1=2", {"a": ["1=2"]}),
        ("e=%C3%A9", {"e": ["\xe9"]}),
    ],
)
def test_query_parsed_as_go_does(query: str, expected: dict[str, list[str]]) -> None:
    assert rules_mod.parse_query(query) == expected


def test_matching_never_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    rule = compile_rule(
        "HostRegexp(`^a`) && PathRegexp(`^/x`) && ClientIP(`10.0.0.0/8`) "
        "&& HeaderRegexp(`k`, `v`) && QueryRegexp(`q`, `1`)"
    )

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("compiled at match time")

    monkeypatch.setattr(re, "compile", boom)
    monkeypatch.setattr(rules_mod.ipaddress, "ip_network", boom)
    view = req(host="a.com", path="/x", client_ip="10.0.0.1", headers=[(b"k", b"v")], query="q=1")
    assert rule.match(view)


# --- RouteTable -------------------------------------------------------------------------


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
    n = 10_000
    table = RouteTable(
        [entry(f"r{i}", f"Host(`h{i}.example.com`) && Path(`/x`)", 1) for i in range(n)]
        + [entry("catch", "Path(`/catch`)", 0)]
    )
    view = CountingView(host="h5000.example.com", path="/nope")
    assert table.match(view) is None
    assert view.path_reads == 2  # its own route, then the host-agnostic one
    view = CountingView(host="unknown.example.com", path="/catch")
    assert table.match(view) == "catch"
    assert view.path_reads == 1


# --- RouteTable == linear scan, on random tables ------------------------------------------

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
