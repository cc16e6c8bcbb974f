"""Host handling (edge.rules.hosts): the one normalisation of a Host value, and the
wildcard key of a name.

A wildcard stands for exactly one non-empty label: ``*.example.com`` never covers
``.example.com``, in each place a wildcard is looked up (issue 12 item 4):
:func:`edge.rules.wildcard_of` (the Host and HostSNI matchers and the RouteTable
index) here, ``TCPRouters.https_route`` in ``router/test_tcp.py`` and the certificate
tables in ``tls/test_certs.py``. Traefik's own ``DomainMatchHostExpression`` replaces
the first label whatever it is, so it matches ``.example.com``; edge does not.
"""

from __future__ import annotations

import pytest

from edge.rules import (
    RequestView,
    RouteTable,
    canonical_host,
    compile_rule,
    wildcard_of,
)


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("a.example.com", "*.example.com"),
        ("a.b.example.com", "*.b.example.com"),
        ("a.", "*."),  # not a host split_authority gives (it drops the dot); no key matches it
        (".example.com", None),  # the empty label
        ("..example.com", None),
        (".", None),
        ("", None),
        ("localhost", None),
    ],
)
def test_wildcard_of(host, key):
    assert wildcard_of(host) == key


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("a.example.com", True),
        (".example.com", False),
        ("example.com", False),
        ("a.b.example.com", False),
    ],
)
def test_host_wildcard_matches_one_non_empty_label(host, expected):
    rule = compile_rule("Host(`*.example.com`)")
    assert rule.match(RequestView(host=host)) is expected
    table = RouteTable([("wild", rule, 1, "wild")])
    assert (table.match(RequestView(host=host)) == "wild") is expected
    assert table.match_host(host) is None or expected  # the index's own answer agrees
    sni = compile_rule("HostSNI(`*.example.com`)", kind="tcp")
    assert sni.match(RequestView(sni=host)) is expected
    assert (
        RouteTable([("wild", sni, 1, "wild")]).match(RequestView(sni=host)) == "wild"
    ) is expected


def test_an_exact_route_under_a_wildcard_keeps_the_wildcard_from_the_empty_label():
    table = RouteTable(
        [
            ("wild", compile_rule("Host(`*.example.com`)"), 1, "wild"),
            ("a", compile_rule("Host(`a.example.com`) && PathPrefix(`/a`)"), 2, "a"),
        ]
    )
    assert table.match(RequestView(host="a.example.com", path="/b")) == "wild"
    assert table.match(RequestView(host=".example.com", path="/a")) is None


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
