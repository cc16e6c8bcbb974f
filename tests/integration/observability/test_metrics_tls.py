"""``edge_tls_handshakes_total`` through a real edge: each handshake's outcome counted
once, by entry point and TLS version, on both ways edge terminates TLS (an HTTPS-only
entry point, no peek; one with a TCP router too, after the peek)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.harness import Edge, lb
from tests.integration.observability.metrics_text import scrape, value
from tests.integration.peers import certificates

METRICS = {"metrics": {"prometheus": {}}}
NAME = "edge_tls_handshakes_total"


def client_hello(server_name: str) -> bytes:
    """The first flight of a TLS client for ``server_name`` (Python's ssl, no socket)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl._create_unverified_context().wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def curl(port: int, ca: str, *version: str) -> str:
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            ca,
            "--resolve",
            f"a.test:{port}:127.0.0.1",
            *version,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            f"https://a.test:{port}/",
        ],
        capture_output=True,
        timeout=20,
    )
    return done.stdout.decode()


def wait_closed(s: socket.socket, timeout: float = 10.0) -> None:
    """Read ``s`` until edge closes it (what it wrote is dropped)."""
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not s.recv(4096):
                return
        except ConnectionResetError:
            return
    raise AssertionError("edge did not close the connection")


@pytest.fixture(scope="module")
def edge(tmp_path_factory, certs, whoami):
    tmp = tmp_path_factory.mktemp("metrics-tls")
    quick = {"transport": {"respondingTimeouts": {"readTimeout": "1s"}}}
    entrypoints = {
        "web": {"address": "127.0.0.1:0", **quick},
        "mixed": {"address": "127.0.0.1:0", **quick},
    }
    dynamic = {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "who", "tls": {}},
            },
            "services": {"who": lb(whoami.url)},
        },
        # On "mixed" a TCP router too: its TLS connections are peeked first.
        "tcp": {
            "routers": {
                "pt": {
                    "rule": "HostSNI(`pt.test`)",
                    "service": "who",
                    "entryPoints": ["mixed"],
                    "tls": {"passthrough": True},
                },
            },
            "services": {"who": {"loadBalancer": {"servers": [{"address": "127.0.0.1:9"}]}}},
        },
        "tls": {
            "certificates": certificates(certs, "a.test"),
            "options": {"default": {"sniStrict": True}},
        },
    }
    e = Edge(tmp, dynamic, entrypoints=entrypoints, static_extra=METRICS)
    yield e
    e.stop()


@pytest.mark.parametrize("entrypoint", ["web", "mixed"])
def test_each_handshake_counts_once_by_outcome(edge, certs, entrypoint):
    port = edge.ports[entrypoint]
    before, _ = scrape(edge.ports["traefik"])
    assert curl(port, certs["ca"]) == "200"
    assert curl(port, certs["ca"], "--tlsv1.2", "--tls-max", "1.2") == "200"
    assert curl(port, certs["ca"], "--tlsv1.2", "--tls-max", "1.2") == "200"
    # sniStrict: a name edge has no certificate for is refused with an alert.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        context = ssl._create_unverified_context()
        with pytest.raises((ssl.SSLError, ConnectionError)):
            context.wrap_socket(raw, server_hostname="nobody.test")
    # A whole ClientHello, then the client leaves before the handshake ends.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(client_hello("a.test"))
        s.recv(1)  # the server's flight began: the handshake is under way
        s.shutdown(socket.SHUT_WR)
        wait_closed(s)
    # A whole ClientHello, then nothing: readTimeout (1 s) bounds the handshake.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(client_hello("a.test"))
        wait_closed(s)
    deadline = time.monotonic() + 10
    want = {"ok/1.3": 1, "ok/1.2": 2, "error/": 1, "closed/": 1, "timeout/": 1}
    while True:
        after, _ = scrape(edge.ports["traefik"])
        got = {}
        for key in want:
            outcome, version = key.split("/")
            labels = {"entrypoint": entrypoint, "outcome": outcome, "tls_version": version}
            got[key] = (value(after, NAME, **labels) or 0) - (value(before, NAME, **labels) or 0)
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert got == want
    # Plain HTTP on the same port is no handshake.
    assert not [k for k in after if k[0] == NAME and ("outcome", "") in k[1]]


def test_certificates_expiry_by_name_and_serial(edge, certs):
    """``traefik_tls_certs_not_after``: each certificate of the configuration, by its
    common name, serial and names, at its notAfter (seconds since the epoch)."""
    cert = certs["pairs"]["a.test"].cert
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    samples, _ = scrape(edge.ports["traefik"])
    got = value(
        samples,
        "traefik_tls_certs_not_after",
        cn=cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value,
        serial=str(cert.serial_number),
        sans=",".join(sans.get_values_for_type(x509.DNSName)),
    )
    assert got == cert.not_valid_after_utc.timestamp()


@pytest.mark.parametrize("entrypoint", ["web", "mixed"])
def test_requests_over_tls_count_by_version_and_cipher(edge, certs, entrypoint):
    """``traefik_*_requests_tls_total``: each request over TLS, by the version and the
    cipher (Go's name) of its connection, on the entry point and its service."""
    port = edge.ports[entrypoint]
    rsa_key = isinstance(certs["pairs"]["a.test"].cert.public_key(), rsa.RSAPublicKey)
    suite = f"TLS_ECDHE_{'RSA' if rsa_key else 'ECDSA'}_WITH_AES_128_GCM_SHA256"
    tls12 = ("--tlsv1.2", "--tls-max", "1.2", "--ciphers", OPENSSL_AES128_GCM)
    before, _ = scrape(edge.ports["traefik"])
    for _ in range(2):
        assert curl(port, certs["ca"], "--tlsv1.3", "--tls13-ciphers", AES256) == "200"
    assert curl(port, certs["ca"], *tls12) == "200"
    want = {("1.3", AES256): 2, ("1.2", suite): 1}
    scopes = {
        "traefik_entrypoint_requests_tls_total": {"entrypoint": entrypoint},
        "traefik_service_requests_tls_total": {"service": "who@file"},
    }
    deadline = time.monotonic() + 10
    while True:
        after, _ = scrape(edge.ports["traefik"])
        got = {
            (name, pair): (
                value(after, name, tls_version=pair[0], tls_cipher=pair[1], **labels) or 0
            )
            - (value(before, name, tls_version=pair[0], tls_cipher=pair[1], **labels) or 0)
            for name, labels in scopes.items()
            for pair in want
        }
        if got == {(name, pair): n for name in scopes for pair, n in want.items()}:
            break
        assert time.monotonic() < deadline, got
        time.sleep(0.1)
    # Requests without TLS (the scrapes) make no such series.
    tls_series = [labels for name, labels in after if name.endswith("_requests_tls_total")]
    assert all(("entrypoint", "traefik") not in labels for labels in tls_series)


AES256 = "TLS_AES_256_GCM_SHA384"
OPENSSL_AES128_GCM = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256"
