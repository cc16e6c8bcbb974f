"""A serversTransport's TLS versions, cipher suites and peer SANs, against real servers.

``openssl s_server -www`` answers each HTTPS request with what it negotiated: the
suites both ends have in common (what edge offered, as far as the server has them)
and the version and suite chosen. Servers limited to TLS 1.2 (``-tls1_2``) or 1.3
(``-tls1_3``) stand for old and new servers. The certificate carries a URI SAN
(a SPIFFE id) besides its DNS name, for ``peerCertURI`` and ``peerCertSANs``, and
``openssl s_server -rev`` serves the TCP side of them (a reversed line back: edge
reached the server over TLS).
"""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from tests.fixtures.tls.pki import PKI, Pair
from tests.harness import Edge, get, lb, need
from tests.integration.peers import Process, send_until

SPIFFE = "spiffe://edge.test/ns/default/sa/backend"


def spiffe_pair(pki: PKI) -> Pair:
    """A server certificate for ``up.test`` with the URI SAN ``SPIFFE``, from ``pki``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "up.test")]))
        .issuer_name(pki.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("up.test"), x509.UniformResourceIdentifier(SPIFFE)]
            ),
            critical=False,
        )
        .sign(pki.key, hashes.SHA256())
    )
    return Pair(cert, key)


def s_server(crt: str, key: str, *extra: str) -> Process:
    args = ["-accept", "127.0.0.1:0", "-cert", crt, "-key", key, "-naccept", "200", *extra]
    p = Process([need("openssl"), "s_server", *args], r"ACCEPT .*:(\d+)")
    p.port = int(p.match.group(1))
    return p


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("upstream-settings")
    pki = PKI()
    return {"ca": pki.write_ca(folder), "server": spiffe_pair(pki).write(folder, "up")}


@pytest.fixture(scope="module")
def servers(files):
    crt, key = files["server"]
    started = {
        "tls12": s_server(crt, key, "-www", "-tls1_2"),
        "tls13": s_server(crt, key, "-www", "-tls1_3"),
        "any": s_server(crt, key, "-www"),
        # TLS 1.2 with one suite, which the transports below do not all offer
        "aes128": s_server(crt, key, "-www", "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"),
        "rev": s_server(crt, key, "-rev"),
    }
    yield {name: p.port for name, p in started.items()}
    for p in started.values():
        p.stop()


AES256 = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"


@pytest.fixture(scope="module")
def edge(tmp_path_factory, files, servers):
    verified = {"rootCAs": [files["ca"]], "serverName": "up.test"}
    routes = {
        # name: (server, transport)
        "min13-to-12": ("tls12", {**verified, "minVersion": "VersionTLS13"}),
        "min13-to-13": ("tls13", {**verified, "minVersion": "VersionTLS13"}),
        "max12": ("any", {**verified, "maxVersion": "VersionTLS12"}),
        "suites": ("any", {**verified, "maxVersion": "VersionTLS12", "cipherSuites": [AES256]}),
        "no-common-suite": ("aes128", {**verified, "cipherSuites": [AES256]}),
        "only13-to-12": ("tls12", {**verified, "cipherSuites": ["TLS_AES_128_GCM_SHA256"]}),
        "only13-to-13": ("tls13", {**verified, "cipherSuites": ["TLS_AES_128_GCM_SHA256"]}),
        "uri": ("any", {**verified, "peerCertURI": SPIFFE}),
        "uri-upper": ("any", {**verified, "peerCertURI": SPIFFE.upper()}),
        "uri-other": ("any", {**verified, "peerCertURI": "spiffe://edge.test/other"}),
        "sans-dns": (
            "any",
            {
                **verified,
                "peerCertSANs": [
                    {"type": "URI", "value": "spiffe://edge.test/other"},
                    {"type": "DNSName", "value": "Up.Test"},  # a host name: no case
                ],
            },
        ),
        "sans-none": (
            "any",
            {**verified, "peerCertSANs": [{"type": "DNSName", "value": "a.up.test"}]},
        ),
        # insecureSkipVerify: the chain is still verified (not the name), as Go's check does
        "insecure-uri": (
            "any",
            {"rootCAs": [files["ca"]], "insecureSkipVerify": True, "peerCertURI": SPIFFE},
        ),
        "insecure-uri-unknown-ca": ("any", {"insecureSkipVerify": True, "peerCertURI": SPIFFE}),
        "bad-suite": ("any", {**verified, "cipherSuites": ["TLS_NOT_A_SUITE"]}),
    }
    routers, services, transports = {}, {}, {}
    for name, (server, transport) in routes.items():
        routers[name] = {"rule": f"Host(`{name}.test`)", "service": name}
        services[name] = lb(f"https://127.0.0.1:{servers[server]}", serversTransport=name)
        transports[name] = transport

    def tcp_service(transport: str) -> dict:
        server = {"address": f"127.0.0.1:{servers['rev']}", "tls": True}
        return {"loadBalancer": {"servers": [server], "serversTransport": transport}}

    tcp = {"tcp-uri": SPIFFE, "tcp-other": "spiffe://edge.test/other"}
    dynamic = {
        "http": {"routers": routers, "services": services, "serversTransports": transports},
        "tcp": {
            "routers": {
                name: {"rule": "HostSNI(`*`)", "service": name, "entryPoints": [name]}
                for name in tcp
            },
            "services": {name: tcp_service(name) for name in tcp},
            "serversTransports": {
                name: {"tls": {**verified, "peerCertSANs": [{"type": "URI", "value": uri}]}}
                for name, uri in tcp.items()
            },
        },
    }
    eps = {name: {"address": "127.0.0.1:0"} for name in ("web", *tcp)}
    e = Edge(tmp_path_factory.mktemp("edge"), dynamic, entrypoints=eps)
    yield e
    e.stop()


def ask(edge: Edge, name: str) -> tuple[int, str]:
    status, _, data = get(edge.port, "/", host=f"{name}.test", timeout=15)
    return status, data.decode(errors="replace")


def negotiated(text: str) -> str:
    """s_server's line for the session: ``New, TLSv1.2, Cipher is ...``."""
    return next(line for line in text.splitlines() if line.startswith("New, "))


def common_suites(text: str) -> set[str]:
    """The suites s_server had in common with edge's offer."""
    lines = text.splitlines()
    start = lines.index("Ciphers common between both SSL end points:") + 1
    found: set[str] = set()
    for line in lines[start:]:
        if line.startswith(("Signature Algorithms", "---")):
            break
        found.update(line.split())
    return found


def test_min_version_tls13_refuses_a_tls12_server_with_a_502_and_says_why(edge):
    status, _ = ask(edge, "min13-to-12")
    assert status == 502
    line = edge.wait_for(r"dial https://127\.0\.0\.1:\d+: .*", timeout=10).group(0)
    assert "protocol version" in line.lower() or "unsupported protocol" in line.lower(), line
    status, text = ask(edge, "min13-to-13")
    assert status == 200 and "New, TLSv1.3" in negotiated(text), text


def test_max_version_tls12_is_what_a_newer_server_gets(edge):
    status, text = ask(edge, "max12")
    assert status == 200, text
    assert negotiated(text).startswith("New, TLSv1.2, "), negotiated(text)


def test_cipher_suites_are_all_edge_offers_for_tls12(edge):
    status, text = ask(edge, "suites")
    assert status == 200, text
    assert negotiated(text) == "New, TLSv1.2, Cipher is ECDHE-ECDSA-AES256-GCM-SHA384"
    tls12 = {s for s in common_suites(text) if not s.startswith("TLS_")}
    assert tls12 == {"ECDHE-ECDSA-AES256-GCM-SHA384"}, common_suites(text)
    # a server without that suite is not reached
    assert ask(edge, "no-common-suite")[0] == 502
    edge.wait_for(r"dial https://127\.0\.0\.1:\d+: .*handshake failure", timeout=10)


def test_tls13_suites_alone_leave_tls13_the_only_version_as_in_go(edge):
    # Go offers no TLS 1.2 suite then; its TLS 1.3 suites are always on, as OpenSSL's.
    assert ask(edge, "only13-to-12")[0] == 502
    status, text = ask(edge, "only13-to-13")
    assert status == 200 and "New, TLSv1.3" in negotiated(text), text


def test_an_unknown_cipher_suite_disables_the_transport_and_its_service(edge):
    line = edge.wait_for(r"service bad-suite@file: .*", timeout=10).group(0)
    assert "cipherSuites: unknown cipher suite 'TLS_NOT_A_SUITE'" in line, line
    assert ask(edge, "bad-suite")[0] == 404  # its router is disabled: not served


def test_peer_cert_uri_must_be_a_uri_san_of_the_server_certificate(edge):
    status, text = ask(edge, "uri")
    assert status == 200 and "New, TLSv1.3" in negotiated(text), text
    assert ask(edge, "uri-upper")[0] == 200  # compared without regard to case, as Traefik does
    assert ask(edge, "uri-other")[0] == 502
    line = edge.wait_for(r"dial https://127\.0\.0\.1:\d+: .*peerCertSANs.*", timeout=10).group(0)
    assert "URI spiffe://edge.test/other" in line, line


def test_peer_cert_sans_match_any_listed_dns_name_or_uri(edge):
    assert ask(edge, "sans-dns")[0] == 200
    assert ask(edge, "sans-none")[0] == 502


def test_peer_cert_uri_with_insecure_skip_verify_still_verifies_the_chain(edge):
    assert ask(edge, "insecure-uri")[0] == 200
    assert ask(edge, "insecure-uri-unknown-ca")[0] == 502


def reversed_line(port: int, timeout: float = 10) -> bytes:
    return send_until(port, b"hello edge\n", b"egde olleh", timeout)


def test_tcp_transport_peer_cert_sans(edge):
    assert b"egde olleh" in reversed_line(edge.ports["tcp-uri"])
    assert b"egde olleh" not in reversed_line(edge.ports["tcp-other"], timeout=5)
    edge.wait_for(r"tcp router tcp-other@file: .*handshake failed: .*peerCertSANs", timeout=10)
