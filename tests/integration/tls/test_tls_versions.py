"""TLS versions below 1.2 (``minVersion: VersionTLS10/11``) as Go serves them: an
``openssl s_client -tls1_1`` (or ``-tls1``) client completes the handshake and gets
its answer; options from TLS 1.2 on keep OpenSSL's security level and refuse it.

The client lowers its own level (``-cipher DEFAULT@SECLEVEL=0``): OpenSSL 3's
default refuses TLS 1.0/1.1 on the client side too.
"""

from __future__ import annotations

import pytest

from tests.harness import Edge, lb
from tests.integration.peers import certificates, s_client_until

LEGACY_CLIENT = ("-cipher", "DEFAULT@SECLEVEL=0")
REQUEST = b"GET /old HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"


@pytest.fixture(scope="module")
def legacy(tmp_path_factory, certs, whoami):
    dynamic = {
        "http": {
            "routers": {
                "old": {"rule": "Host(`a.test`)", "service": "who", "tls": {"options": "old"}},
                "new": {"rule": "Host(`good.test`)", "service": "who", "tls": {}},
                "oldest": {
                    "rule": "Host(`echo.test`)",
                    "service": "who",
                    "tls": {"options": "older"},
                },
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": certificates(certs, "a.test", "good.test", "echo.test"),
            "options": {
                "old": {"minVersion": "VersionTLS11"},
                "older": {"minVersion": "VersionTLS10"},
            },
        },
    }
    e = Edge(tmp_path_factory.mktemp("tls-versions"), dynamic)
    yield e
    e.stop()


@pytest.mark.parametrize("version", ["-tls1_1", "-tls1_2"])
def test_min_version_tls11_serves_a_tls11_client(legacy, version):
    out = s_client_until(
        legacy.port, "a.test", REQUEST, b"HTTP/1.1 200", options=(version, *LEGACY_CLIENT)
    )
    assert b"HTTP/1.1 200" in out, out.decode("latin-1")[-800:]
    expected = {"-tls1_1": b"TLSv1.1", "-tls1_2": b"TLSv1.2"}[version]
    assert b"Protocol  : " + expected in out or b"Protocol: " + expected in out


def test_min_version_tls10_serves_a_tls10_client(legacy):
    request = REQUEST.replace(b"a.test", b"echo.test")
    options = ("-tls1", *LEGACY_CLIENT)
    out = s_client_until(legacy.port, "echo.test", request, b"HTTP/1.1 200", options=options)
    assert b"HTTP/1.1 200" in out, out.decode("latin-1")[-800:]


def test_default_options_keep_refusing_tls11(legacy):
    request = REQUEST.replace(b"a.test", b"good.test")
    out = s_client_until(
        legacy.port,
        "good.test",
        request,
        b"HTTP/1.1 200",
        timeout=5,
        options=("-tls1_1", *LEGACY_CLIENT),
    )
    assert b"HTTP/1.1 200" not in out
