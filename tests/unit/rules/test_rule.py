"""The compiled rule (edge.rules.rule): ``compile_rule`` gives Traefik v3's answer, case by
case (the rule, the request, and Traefik's answer); ``Rule.hosts`` is sound; matching
never compiles; ``RuleCompiler`` builds from a shape seen before what ``compile_rule``
builds; a router's ``ruleSyntax`` (and the static default) picks v2 or v3.

Each case names where Traefik documents its answer: the docs (``routing/routers``
rules, the v2 -> v3 migration guide), or the table tests of ``pkg/muxer/http``
(``matcher_test.go``, ``mux_test.go``) and ``pkg/muxer/tcp``. The same table runs
through a real entrypoint in ``tests/integration/http/test_rules.py``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import edge.rules.request as rules_mod
from edge.errors import RuleError
from edge.rules import (
    RequestView,
    RouteTable,
    Rule,
    RuleCompiler,
    compile_rule,
)
from tests.unit.rules.requests import Req, req


@dataclass(frozen=True)
class Case:
    bullet: str  # the item of issue 13 it checks
    rule: str
    req: Req
    match: bool  # Traefik's answer
    source: str
    syntax: str = "v3"
    entrypoint: bool = True  # also sent through a real entrypoint


def C(bullet: str, rule: str, req: Req, match: bool, source: str, **kw: Any) -> Case:
    return Case(bullet, rule, req, match, source, **kw)


PATH = "path: reserved escapes kept (v3.4.1)"


WILD = "Host wildcards (v3.7)"


HOSTRE = "HostRegexp: lowercased host, case-sensitive"


BRACES = "{name:re} is not a template in v3"


ARITY = "arity, empty values, Query(`k`)"


V2 = "ruleSyntax v2"


RE2 = "RE2 semantics"


MUX = "pkg/muxer/http/mux.go withRoutingPath + server normalizePath"


MT = "pkg/muxer/http/matcher_test.go"


MT2 = "pkg/muxer/http/matcher_v2_test.go"


GO = "Go regexp (RE2) semantics"


CASES: list[Case] = [
    # -- reserved characters stay encoded, the rest is decoded ------------------------
    C(PATH, "Path(`/foo/bar`)", Req("/foo%2Fbar"), False, MUX),
    C(PATH, "Path(`/foo%2Fbar`)", Req("/foo%2Fbar"), True, MUX),
    C(PATH, "Path(`/foo%2Fbar`)", Req("/foo%2fbar"), True, MUX + " (hex upper-cased)"),
    C(PATH, "Path(`/foo/bar`)", Req("/foo/bar"), True, MUX),
    C(PATH, "PathPrefix(`/foo bar`)", Req("/foo%20bar/x"), True, MUX + " (its doc's example)"),
    C(PATH, "PathPrefix(`/admin`)", Req("/%61dmin/x"), True, MUX + " (unreserved decoded)"),
    C(PATH, "PathPrefix(`/public/`)", Req("/public%2F..%2Fadmin"), False, MUX),
    C(PATH, "PathRegexp(`^/foo/bar$`)", Req("/foo%2Fbar"), False, MUX),
    C(PATH, "Path(`/a#b`)", Req("/a%23b"), False, MUX),
    C(PATH, "Path(`/a%23b`)", Req("/a%23b"), True, MUX),
    C(PATH, "Path(`/100%25`)", Req("/100%25"), True, MUX),
    C(PATH, "Path(`/100%`)", Req("/100%25"), False, MUX),
    C(PATH, "Path(`/a:b@c`)", Req("/a%3Ab%40c"), False, MUX),
    C(PATH, "Path(`/caf\u00e9`)", Req("/caf%C3%A9"), True, MUX + " (non-reserved decoded)"),
    C(PATH, "Path(`/css`)", Req("/css/"), False, MT + " TestPathMatcher"),
    # -- Host(`*.example.com`) and Host(`*`) -------------------------------------------
    C(WILD, "Host(`*.example.com`)", Req(host="test.example.com"), True, MT + " TestHostMatcher"),
    C(WILD, "Host(`*.example.com`)", Req(host="other.example.com:8080"), True, MT),
    C(WILD, "Host(`*.example.com`)", Req(host="example.com"), False, MT),
    C(WILD, "Host(`*.example.com`)", Req(host="test.otherexample.com"), False, MT),
    C(WILD, "Host(`*.example.com`)", Req(host="a.b.example.com"), False, "pkg/muxer/muxer.go"),
    C(WILD, "Host(`*.example.com`)", Req(host="TEST.Example.COM"), True, "docs: case-insensitive"),
    C(WILD, "Host(`*`)", Req(host="localhost"), True, MT),
    C(WILD, "Host(`*`)", Req(host="test.otherexample.com"), True, MT),
    C(WILD, "Host(`example.com.`)", Req(host="example.com"), True, MT),
    C(WILD, "Host(`example.com`)", Req(host="example.com."), True, MT),
    # -- HostRegexp reads the lowercased host, case-sensitively ------------------------
    C(HOSTRE, r"HostRegexp(`^[A-Z]+\.com$`)", Req(host="EXAMPLE.com"), False, MT),
    C(HOSTRE, r"HostRegexp(`^[a-zA-Z-]+\.com$`)", Req(host="example.com:8080"), True, MT),
    C(HOSTRE, r"HostRegexp(`^[a-zA-Z-]+\.com$`)", Req(host="example.org"), False, MT),
    C(HOSTRE, r"HostRegexp(`(?i)^EXAMPLE\.com$`)", Req(host="example.com"), True, GO),
    # -- braces are regexp text, not templates -----------------------------------------
    C(BRACES, r"HostRegexp(`{domain:[a-zA-Z-]+\.com}`)", Req(host="example.com"), False, MT),
    C(BRACES, "PathRegexp(`/{path:(css|js)}`)", Req("/css"), False, MT),
    C(BRACES, "PathRegexp(`/{path:(css|js)}`)", Req("/%7Bpath:css%7D"), True, MT),
    C(
        BRACES,
        "HeaderRegexp(`X-Proto`, `http{secure:s?}`)",
        Req(headers=(("X-Proto", "https"),)),
        False,
        MT,
    ),
    C(
        BRACES,
        "HeaderRegexp(`X-Proto`, `http{secure:s?}`)",
        Req(headers=(("X-Proto", "http{secure:s}"),)),
        True,
        MT,
    ),
    C(BRACES, "QueryRegexp(`q`, `{value:(traefik|nginx)}`)", Req("/?q=traefik"), False, MT),
    C(
        BRACES,
        "QueryRegexp(`q`, `{value:(traefik|nginx)}`)",
        Req("/?q=%7Bvalue:traefik%7D"),
        True,
        MT,
    ),
    # -- one value per matcher, no empty value, Query(`k`) ------------------------------
    C(ARITY, "Query(`mobile`)", Req("/?mobile"), True, MT + " TestQueryMatcher"),
    C(ARITY, "Query(`mobile`)", Req("/?mobile=true"), False, MT),
    C(ARITY, "Query(`mobile`)", Req("/"), False, MT),
    C(ARITY, "Query(`q`, `traefik`)", Req("/?q=awesome&q=traefik"), True, MT),
    C(ARITY, "Query(`q`, `traefik`)", Req("/?Q=traefik"), False, MT),
    C(ARITY, "QueryRegexp(`q`, `^(traefik|nginx)$`)", Req("/?rel=ddg&q=nginx"), True, MT),
    C(ARITY, "Method(`get`)", Req(method="GET"), True, MT + " TestMethodMatcher"),
    C(ARITY, "Method(`GET`)", Req(method="POST"), False, MT),
    C(
        ARITY,
        "Header(`x-forwarded-proto`, `https`)",
        Req(headers=(("X-Forwarded-Proto", "https"),)),
        True,
        MT,
    ),
    C(
        ARITY,
        "Header(`X-Forwarded-Proto`, `https`)",
        Req(headers=(("X-Forwarded-Proto", "HTTPS"),)),
        False,
        MT,
    ),
    C(ARITY, "ClientIP(`127.0.0.1`)", Req(), True, MT + " TestClientIPMatcher"),
    C(ARITY, "ClientIP(`192.168.1.0/24`)", Req(), False, MT),
    # -- ruleSyntax: v2 ------------------------------------------------------------------
    C(V2, "Host(`a.com`, `b.com`)", Req(host="b.com"), True, MT2, syntax="v2"),
    C(V2, "HostHeader(`a.com`)", Req(host="A.com"), True, MT2, syntax="v2"),
    C(
        V2,
        r"HostRegexp(`{sub:[a-z]+}.example.com`)",
        Req(host="foo.example.com"),
        True,
        MT2,
        syntax="v2",
    ),
    C(
        V2,
        r"HostRegexp(`{sub:[a-z]+}.example.com`)",
        Req(host="foo.bar.example.com"),
        False,
        MT2,
        syntax="v2",
    ),
    C(V2, "HostRegexp(`{sub}.example.com`)", Req(host="x-1.example.com"), True, MT2, syntax="v2"),
    C(V2, "HostRegexp(`{sub}.example.com`)", Req(host="example.com"), False, MT2, syntax="v2"),
    C(V2, "Path(`/products/{id:[0-9]+}`)", Req("/products/12"), True, MT2, syntax="v2"),
    C(V2, "Path(`/products/{id:[0-9]+}`)", Req("/products/12/x"), False, MT2, syntax="v2"),
    C(V2, "Path(`/products/{id}`)", Req("/products/ab"), True, MT2, syntax="v2"),
    C(V2, "Path(`/a`, `/b`)", Req("/b"), True, MT2, syntax="v2"),
    C(V2, "PathPrefix(`/api/{version:v[0-9]+}`)", Req("/api/v2/items"), True, MT2, syntax="v2"),
    C(V2, "PathPrefix(`/api/{version:v[0-9]+}`)", Req("/api/x/items"), False, MT2, syntax="v2"),
    C(
        V2,
        "Path(`/foo/bar`)",
        Req("/foo%2Fbar"),
        False,
        MUX + " (v2 reads the routing path too)",
        syntax="v2",
    ),
    C(V2, "Method(`get`, `post`)", Req(method="POST"), True, MT2, syntax="v2"),
    C(V2, "Headers(`X-A`, `1`)", Req(headers=(("x-a", "1"),)), True, MT2, syntax="v2"),
    C(V2, "Headers(`X-A`, `1`, `X-B`, `2`)", Req(headers=(("x-a", "1"),)), False, MT2, syntax="v2"),
    C(
        V2,
        "HeadersRegexp(`X-A`, `^[0-9]+$`)",
        Req(headers=(("x-a", "12"),)),
        True,
        MT2,
        syntax="v2",
    ),
    C(V2, "Query(`a=1`, `b=2`)", Req("/?b=2&a=1"), True, MT2, syntax="v2"),
    C(V2, "Query(`a=1`, `b=2`)", Req("/?a=1"), False, MT2, syntax="v2"),
    C(
        V2,
        "Query(`a=`)",
        Req("/?a=anything"),
        True,
        "gorilla/mux: an empty value is any",
        syntax="v2",
    ),
    C(V2, "Query(`id={id:[0-9]+}`)", Req("/?id=12"), True, MT2, syntax="v2"),
    C(V2, "Query(`id={id:[0-9]+}`)", Req("/?id=x"), False, MT2, syntax="v2"),
    C(V2, "Query(`a=1`)", Req("/?a=2&a=1"), False, "gorilla/mux: the first value", syntax="v2"),
    C(V2, "ClientIP(`10.0.0.0/8`, `127.0.0.1`)", Req(), True, MT2, syntax="v2"),
    # -- RE2: linear time, Go's syntax and classes ------------------------------------
    C(RE2, "PathRegexp(`^/(a+)+$`)", Req("/" + "a" * 5000 + "b"), False, GO + ": linear time"),
    C(RE2, r"QueryRegexp(`q`, `^a$`)", Req("/?q=a%0A"), False, GO + ": $ is the end of text"),
    C(RE2, r"QueryRegexp(`q`, `^\d$`)", Req("/?q=%D9%A3"), False, GO + r": \d is ASCII"),
    C(RE2, r"QueryRegexp(`q`, `^\pN$`)", Req("/?q=%D9%A3"), True, GO + r": \pN is Unicode"),
    C(RE2, r"PathRegexp(`^/[[:alpha:]]+$`)", Req("/abc"), True, GO + ": POSIX classes"),
]


# (rule, syntax, kind, a fragment of edge's message): Traefik refuses these too.
REFUSED: list[tuple[str, str, str, str]] = [
    ("Host(`a.com`, `b.com`)", "v3", "http", "takes exactly 1 argument, got 2"),
    ("Path(`/css`, `/js`)", "v3", "http", "takes exactly 1 argument, got 2"),
    ("Header(`X-Forwarded-Host`)", "v3", "http", "takes exactly 2 arguments, got 1"),
    ("Query(`q`, `traefik`, `proxy`)", "v3", "http", "takes 1 or 2 arguments, got 3"),
    ("Host(``)", "v3", "http", "empty value for Host"),
    ("Query(`q`, ``)", "v3", "http", "empty value for Query"),
    ("Header(``, `example.com`)", "v3", "http", "empty value for Header"),
    ("Method(``)", "v3", "http", "empty value for Method"),
    ("Path(`css`)", "v3", "http", "does not start with '/'"),
    ("Host(`\U0001f9ad.com`)", "v3", "http", "non-ASCII"),
    ("HostRegexp(`\U0001f9ad.com`)", "v3", "http", "non-ASCII"),
    ("HostRegexp(`(example.com`)", "v3", "http", "invalid regexp"),
    ("ClientIP(`1`)", "v3", "http", "invalid IP address or CIDR"),
    ("Headers(`X`, `1`)", "v3", "http", "v2 syntax"),
    ("HostHeader(`a`)", "v3", "http", "v2 syntax"),
    ("Header(`X`, `1`)", "v2", "http", "v3 syntax"),
    ("PathRegexp(`/a`)", "v2", "http", "v3 syntax"),
    ("Headers(`X`)", "v2", "http", "name/value pairs"),
    ("Query(`a`)", "v2", "http", "key=value"),
    ("Path(`/{id`)", "v2", "http", "unbalanced braces"),
    ("Path(`/{:[0-9]}`)", "v2", "http", "missing name or pattern"),
    ("PathRegexp(`(a)\\1`)", "v3", "http", "invalid regexp"),  # no backreferences
    ("PathRegexp(`(?=a)`)", "v3", "http", "invalid regexp"),  # no lookaround
    ("PathRegexp(`a{1001}`)", "v3", "http", "invalid regexp"),
    ("HostSNI(`a.com`, `b.com`)", "v3", "tcp", "takes exactly 1 argument"),
    ("HostSNI(`*.a.com`)", "v2", "tcp", "invalid HostSNI"),
    ("ALPN(`acme-tls/1`)", "v3", "tcp", "not allowed"),
]


# (rule, syntax, sni, Traefik's answer): pkg/muxer/tcp matcher tests.
TCP_CASES: list[tuple[str, str, str, bool]] = [
    ("HostSNI(`*.example.com`)", "v3", "foo.example.com", True),
    ("HostSNI(`*.example.com`)", "v3", "example.com", False),
    ("HostSNI(`*.example.com`)", "v3", "a.foo.example.com", False),
    ("HostSNI(`*`)", "v3", "", True),
    ("HostSNI(`example.com`)", "v3", "", False),
    (r"HostSNIRegexp(`^[a-z]+\.example\.com$`)", "v3", "foo.example.com", True),
    ("HostSNIRegexp(`{sub:[a-z]+}.example.com`)", "v3", "foo.example.com", False),
    ("HostSNIRegexp(`{sub:[a-z]+}.example.com`)", "v2", "foo.example.com", True),
    ("HostSNI(`a.com`, `b.com`)", "v2", "b.com", True),
    ("HostSNI(`*`, `a.com`)", "v2", "", True),
]


def case_id(case: Case) -> str:
    return f"{case.syntax}:{case.rule} {case.req.host}{case.req.target[:40]}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rule_engine_gives_traefiks_answer(case: Case) -> None:
    rule = compile_rule(case.rule, syntax=case.syntax)
    assert rule.syntax == case.syntax
    started = time.perf_counter()
    assert rule.match(case.req.view()) is case.match, case.source
    assert time.perf_counter() - started < 1.0  # RE2: no input makes a regexp slow
    # And through a route table, where host rules are found through the index.
    table = RouteTable([("r", rule, 1, "r")])
    assert (table.match(case.req.view()) == "r") is case.match


@pytest.mark.parametrize(("rule", "syntax", "kind", "fragment"), REFUSED)
def test_traefik_refuses_and_so_does_edge(rule: str, syntax: str, kind: str, fragment: str) -> None:
    with pytest.raises(RuleError, match=re.escape(fragment)):
        compile_rule(rule, kind=kind, syntax=syntax)


@pytest.mark.parametrize(("rule", "syntax", "sni", "expected"), TCP_CASES)
def test_tcp_rules(rule: str, syntax: str, sni: str, expected: bool) -> None:
    assert compile_rule(rule, kind="tcp", syntax=syntax).match(RequestView(sni=sni)) is expected


def test_the_backtracking_pattern_would_stall_pythons_re() -> None:
    """Why RE2: the same pattern and path take Python's backtracking ``re`` exponential
    time (here bounded to a short input to keep the test fast)."""
    text = "/" + "a" * 18 + "b"
    started = time.perf_counter()
    assert re.search(r"^/(a+)+$", text) is None
    slow = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(100):
        assert not compile_rule("PathRegexp(`^/(a+)+$`)").match(RequestView(path=text))
    fast = (time.perf_counter() - started) / 100
    assert fast * 100 < slow, (fast, slow)


def runtime_for(routers: dict[str, Any], tcp: dict[str, Any] | None = None, **kw: Any) -> Any:
    from edge.config.loader import decode_dynamic
    from edge.config.merge import merge
    from edge.config.runtime import build_runtime

    lb = {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:1"}]}}
    doc: dict[str, Any] = {"http": {"routers": routers, "services": {"s": lb}}}
    if tcp is not None:
        tlb = {"loadBalancer": {"servers": [{"address": "127.0.0.1:1"}]}}
        doc["tcp"] = {"routers": tcp, "services": {"s": tlb}}
    return build_runtime(merge({"file": decode_dynamic(doc)}), {"web": "tcp"}, **kw)


def test_rule_syntax_per_router_and_by_default() -> None:
    routers = {
        "v3": {"rule": "Host(`a.com`)", "service": "s"},
        "v2": {"rule": "Host(`a.com`, `b.com`)", "service": "s", "ruleSyntax": "v2"},
        "v2-in-v3": {"rule": "Host(`a.com`, `b.com`)", "service": "s"},
        "odd": {"rule": "Host(`a.com`)", "service": "s", "ruleSyntax": "v4"},
    }
    rt = runtime_for(
        routers,
        tcp={"t": {"rule": "HostSNI(`x`, `y`)", "service": "s", "tls": {}, "ruleSyntax": "v2"}},
    )
    info = rt.http_routers
    assert (info["v3@file"].status, info["v3@file"].rule_syntax) == ("enabled", "v3")
    assert (info["v2@file"].status, info["v2@file"].rule.syntax) == ("enabled", "v2")
    assert info["v2@file"].rule.match(RequestView(host="b.com"))
    assert info["v2-in-v3@file"].status == "disabled"
    assert "several values are v2 syntax" in info["v2-in-v3@file"].errors[0]
    assert info["odd@file"].errors == ["ruleSyntax 'v4': expected one of v3, v2"]
    assert rt.tcp_routers["t@file"].status == "enabled"
    assert rt.to_builtins()["http"]["routers"]["v2@file"]["ruleSyntax"] == "v2"

    # core.defaultRuleSyntax: v2 reads unmarked routers as v2; a router saying v3 stays v3.
    routers["v3"]["ruleSyntax"] = "v3"
    rt = runtime_for(routers, default_rule_syntax="v2")
    assert rt.http_routers["v2-in-v3@file"].status == "enabled"
    assert rt.http_routers["v2-in-v3@file"].rule_syntax == "v2"
    assert rt.http_routers["v3@file"].rule.syntax == "v3"


def test_a_changed_syntax_compiles_the_rule_again() -> None:
    routers = {"r": {"rule": "PathPrefix(`/a/{x}`)", "service": "s"}}
    first = runtime_for(routers)
    assert not first.http_routers["r@file"].rule.match(RequestView(path="/a/b"))
    routers["r"]["ruleSyntax"] = "v2"
    second = runtime_for(routers, previous=first)
    assert second.http_routers["r@file"].rule.match(RequestView(path="/a/b"))


def test_default_rule_syntax_in_the_static_configuration() -> None:
    from edge.config.loader import decode_static
    from edge.errors import ConfigError

    assert decode_static({}).core.default_rule_syntax == "v3"
    assert decode_static({"core": {"defaultRuleSyntax": "v2"}}).core.default_rule_syntax == "v2"
    with pytest.raises(ConfigError, match=r"\$\.core\.defaultRuleSyntax"):
        decode_static({"core": {"defaultRuleSyntax": "v1"}})


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
