"""A wildcard stands for exactly one non-empty label: ``*.example.com`` never covers
``.example.com``, in each place a wildcard is looked up (issue 12 item 4).

The places: :func:`edge.rules.wildcard_of` (the Host and HostSNI matchers and the
RouteTable index), ``TCPRouters.https_route`` (which TLS options a name's handshake
and Host need) and the certificate tables (``_certificate``, ``errors_for``).
Traefik's own ``DomainMatchHostExpression`` replaces the first label whatever it
is, so it matches ``.example.com``; edge does not.
"""

from __future__ import annotations

import msgspec
import pytest

from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.rules import RequestView, RouteTable, compile_rule, wildcard_of
from edge.tls.certs import TLSCertificates
from tests.fixtures.tls.pki import PKI
from tests.integration.test_tls_tcp import HTTP_SVC, TCP_SVC, hello, tcp_routers


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


def test_tcp_routers_hostsni_and_https_options_skip_the_empty_label():
    _, routers = tcp_routers(
        {
            "http": {
                "routers": {
                    "site": {
                        "rule": "Host(`*.site.test`)",
                        "service": "h",
                        "tls": {"options": "strict"},
                    },
                    "other": {"rule": "Host(`other.test`)", "service": "h", "tls": {}},
                },
                "services": {"h": HTTP_SVC},
            },
            "tcp": {
                "routers": {
                    "db": {
                        "rule": "HostSNI(`*.db.test`)",
                        "service": "t",
                        "tls": {"passthrough": True},
                    },
                },
                "services": {"t": TCP_SVC},
            },
            "tls": {"options": {"strict": {"minVersion": "VersionTLS13"}}},
        }
    )
    r = routers["web"]
    assert r.tls(hello("x.db.test"), "1.2.3.4").name == "db@file"
    assert getattr(r.tls(hello(".db.test"), "1.2.3.4"), "name", None) != "db@file"
    assert r.https_route("x.site.test").options == "strict@file"
    assert r.https_route(".site.test") is None
    assert r.https_options(".site.test") == "default"  # not the wildcard's


def test_certificates_skip_the_empty_label():
    pki = PKI()
    wild, other = pki.issue("*.wild.test"), pki.issue("other.test")
    section = {
        "certificates": [
            {"certFile": wild.cert_pem, "keyFile": wild.key_pem},
            {"certFile": wild.cert_pem, "keyFile": other.key_pem},  # broken: its names are known
        ]
    }
    certs = TLSCertificates(merge({"file": msgspec.convert({"tls": section}, Configuration)}).tls)
    assert len(certs.errors) == 1
    assert certs.certificate_for("x.wild.test") is not None
    assert certs.certificate_for(".wild.test") is None
    assert certs.errors_for("x.nowhere.wild.test") == ()  # two labels: not the wildcard's
    assert certs.errors_for(".wild.test") == ()
