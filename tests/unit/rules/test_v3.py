"""The matchers of both syntaxes (edge.rules.v3, edge.rules.v2) on HTTP requests and TCP
connections, table-driven: the rule, the request, whether it matches."""

from __future__ import annotations

from typing import Any

import pytest

from edge.rules import (
    RequestView,
    compile_rule,
)
from tests.unit.rules.requests import req

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
