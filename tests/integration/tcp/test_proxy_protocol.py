"""The PROXY protocol on entry points (``proxyProtocol``): a header read before
anything else, on every path a connection can take (HTTP, TLS passthrough and
termination, with and without the peek), and a header edge sends to its servers.

Most tests pin a defect found by the review of the PROXY protocol entry points and
failed on the commit before its fix:

- a peer that sends no PROXY protocol header and nothing else (a client waiting for a
  server that speaks first, SMTP or SSH) was closed at the header's deadline, or at
  once on its EOF, so a ``HostSNI(`*`)`` TCP router never relayed it on an entry
  point with ``proxyProtocol``; go-proxyproto (Traefik) reads a timeout or an EOF
  before the first byte as "no header" and goes on;
- IPv4-mapped entries in ``proxyProtocol.trustedIPs`` and in a TCP ``ipAllowList``'s
  ``sourceRange`` matched no client: clients are compared unmapped, the entries were
  not (Traefik's checker unmaps both).

Real edge processes, real sockets on 127.0.0.0/8, ephemeral ports; every wait bounded.
"""

from __future__ import annotations

import json
import socket
import ssl
import time

import pytest

from edge.tcp.middlewares import IPAllowList, networks
from edge.tcp.proxied import trust
from edge.tcp.proxyproto import encode_v1, encode_v2
from tests.fixtures.tls.pki import PKI
from tests.harness import Edge
from tests.integration.peers import (
    Backend,
    recv_all,
)

BANNER = b"220 edge-review ready\r\n"


def recv_exactly(sock: socket.socket, n: int, timeout: float = 5.0) -> bytes:
    """Up to ``n`` bytes, stopping early at EOF or after ``timeout`` seconds."""
    sock.settimeout(timeout)
    got = b""
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        try:
            chunk = sock.recv(n - len(got))
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        got += chunk
    return got


# -- a peer that sends nothing: no header ------------------------------------------------------------


@pytest.fixture(scope="module")
def speaks_first(tmp_path_factory):
    """edge with ``proxyProtocol`` (127.0.0.1 trusted, readTimeout 1 s: the header's deadline)
    and a ``HostSNI(`*`)`` TCP router to a server that speaks first, then echoes."""
    backend = Backend(banner=BANNER)
    folder = tmp_path_factory.mktemp("speaks-first")
    eps = {
        "pp": {
            "address": "127.0.0.1:0",
            "proxyProtocol": {"trustedIPs": ["127.0.0.1/32"]},
            "transport": {"respondingTimeouts": {"readTimeout": "1s"}},
        }
    }
    dynamic = {
        "tcp": {
            "routers": {"smtp": {"rule": "HostSNI(`*`)", "service": "smtp"}},
            "services": {
                "smtp": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{backend.port}"}]}}
            },
        }
    }
    e = Edge(folder, dynamic, entrypoints=eps)
    yield e, backend
    e.stop()
    backend.close()


def test_a_silent_peer_hears_a_server_that_speaks_first(speaks_first):
    e, _ = speaks_first
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        start = time.monotonic()
        assert (
            recv_exactly(s, len(BANNER)) == BANNER
        )  # before: b"" (closed at the header's deadline)
        assert 0.9 <= time.monotonic() - start < 4.5  # no header within readTimeout: none
        s.sendall(b"QUIT\r\n")
        assert recv_exactly(s, 6) == b"QUIT\r\n"  # the relay carries on both ways


def test_a_peer_that_ends_its_side_first_is_relayed_with_its_eof(speaks_first):
    e, backend = speaks_first
    seen = len(backend.received)
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        s.shutdown(socket.SHUT_WR)  # nothing to say, and says so: no header
        assert recv_exactly(s, len(BANNER)) == BANNER  # before: b"" at once
    # The server heard the EOF and nothing else (earlier tests' connections sent bytes).
    deadline = time.monotonic() + 5
    while b"" not in backend.received[seen:] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert b"" in backend.received[seen:], backend.received[seen:]


def test_a_header_still_comes_first_and_part_of_one_still_closes(speaks_first):
    e, _ = speaks_first
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        start = time.monotonic()
        s.sendall(encode_v1(("192.0.2.1", 2525), ("127.0.0.1", 25)))
        assert recv_exactly(s, len(BANNER)) == BANNER
        assert time.monotonic() - start < 0.9  # a whole header: relayed at once
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        s.sendall(b"PROXY TCP4 192.0.2.1")  # part of a header, then silence
        assert recv_exactly(s, 1) == b""
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        s.sendall(b"PROXY TCP4 192.0.2.1")
        s.shutdown(socket.SHUT_WR)  # part of a header, then EOF
        assert recv_exactly(s, 1) == b""


# -- IPv4-mapped entries -------------------------------------------------------------------------------


def test_mapped_entries_are_the_ipv4_networks_they_map():
    assert [
        str(n) for n in networks(["::ffff:10.0.0.0/104", "::ffff:127.0.0.1", "::/0", "10.0.0.0/8"])
    ] == [
        "10.0.0.0/8",
        "127.0.0.1/32",
        "::/0",
        "10.0.0.0/8",
    ]
    allow = IPAllowList("allow", ["::ffff:10.0.0.0/104"])
    assert allow.enter("10.1.2.3") and allow.enter("::ffff:10.1.2.3")
    assert not allow.enter("11.0.0.1") and not allow.enter("::1")
    trusted = trust(["::ffff:127.0.0.1"], insecure=False)
    assert trusted("127.0.0.1") and trusted("::ffff:127.0.0.1") and not trusted("127.0.0.2")
    assert not IPAllowList("v6", ["::/0"]).enter("10.0.0.1")  # as Traefik: all of IPv6 is not IPv4


def test_mapped_trusted_ips_and_source_range_match_ipv4_clients(tmp_path, speaks_first):
    _, backend = speaks_first
    eps = {
        "pp": {"address": "127.0.0.1:0", "proxyProtocol": {"trustedIPs": ["::ffff:127.0.0.1"]}},
        "allow": {"address": "127.0.0.1:0"},
    }
    server = {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{backend.port}"}]}}
    dynamic = {
        "tcp": {
            "routers": {
                "pp": {"rule": "HostSNI(`*`)", "service": "s", "entryPoints": ["pp"]},
                "allow": {
                    "rule": "HostSNI(`*`)",
                    "service": "s",
                    "entryPoints": ["allow"],
                    "middlewares": ["two"],
                },
            },
            "services": {"s": server},
            "middlewares": {"two": {"ipAllowList": {"sourceRange": ["::ffff:127.0.0.2/128"]}}},
        }
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    try:
        with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
            s.sendall(encode_v1(("192.0.2.1", 2525), ("127.0.0.1", 25)))
            assert recv_exactly(s, len(BANNER)) == BANNER  # before: closed (127.0.0.1 untrusted)
        for source, admitted in (("127.0.0.2", True), ("127.0.0.1", False)):
            with socket.create_connection(
                ("127.0.0.1", e.ports["allow"]), timeout=10, source_address=(source, 0)
            ) as s:
                assert (recv_exactly(s, len(BANNER)) == BANNER) is admitted, (
                    source
                )  # before: both refused
    finally:
        e.stop()


# -- the header and a ClientHello in one stream, on every TLS path ---------------------------------------


def tls_request(sock: socket.socket, prefix: bytes, cut: int, host: str, ca: str) -> bytes:
    """``prefix`` (a PROXY header) and a TLS client's first flight, written in two parts
    split at ``cut``; then the handshake and one request; the plaintext response."""
    ctx = ssl.create_default_context(cafile=ca)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=host)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    first = prefix + outgoing.read()
    sock.sendall(first[:cut])
    time.sleep(0.005)  # two reads on edge's side
    sock.sendall(first[cut:])
    sock.settimeout(5)

    def pump() -> bool:
        if outgoing.pending:
            sock.sendall(outgoing.read())
        data = sock.recv(65536)
        if not data:
            return False
        incoming.write(data)
        return True

    for _ in range(20):  # a handshake takes a few round trips
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            assert pump(), "closed during the handshake"
    tls.write(f"GET /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    response = b""
    for _ in range(200):
        try:
            chunk = tls.read(65536)
            if not chunk:
                break
            response += chunk
        except ssl.SSLWantReadError:
            if not pump():
                break
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            break
    return response


@pytest.fixture(scope="module")
def tls_paths(tmp_path_factory, whoami):
    """Two proxyProtocol entry points serving HTTPS for a.test: ``nopeek`` (no TCP router:
    the first bytes go into the handshake) and ``peek`` (a TCP router for another name:
    the ClientHello is parsed first), and on ``peek`` a passthrough router for p.test to a
    server that records what it gets, PROXY v1 header first."""
    folder = tmp_path_factory.mktemp("tls-paths")
    pki = PKI()
    crt, key = pki.issue("a.test").write(folder, "a")
    ca = pki.write_ca(folder)
    backend = Backend()
    eps = {
        name: {"address": "127.0.0.1:0", "proxyProtocol": {"insecure": True}}
        for name in ("nopeek", "peek")
    }
    dynamic = {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "who", "tls": {}},
                "h": {"rule": "Host(`h.test`) && ClientIP(`192.0.2.0/24`)", "service": "who"},
            },
            "services": {"who": {"loadBalancer": {"servers": [{"url": whoami.url}]}}},
        },
        "tcp": {
            "routers": {
                "p": {
                    "rule": "HostSNI(`p.test`)",
                    "service": "rec",
                    "entryPoints": ["peek"],
                    "tls": {"passthrough": True},
                }
            },
            "services": {
                "rec": {
                    "loadBalancer": {
                        "servers": [{"address": f"127.0.0.1:{backend.port}"}],
                        "proxyProtocol": {"version": 1},
                    }
                }
            },
        },
        "tls": {"certificates": [{"certFile": crt, "keyFile": key}]},
    }
    e = Edge(folder, dynamic, entrypoints=eps)
    yield e, ca, backend
    e.stop()
    backend.close()


@pytest.mark.parametrize("path", ["nopeek", "peek"])
def test_header_then_client_hello_split_anywhere_names_the_client(tls_paths, path):
    e, ca, _ = tls_paths
    header = encode_v2(("192.0.2.77", 4242), ("127.0.0.1", 443))
    # every offset inside the header, and around the record header and handshake header after it
    cuts = [*range(1, len(header) + 1), *(len(header) + k for k in (1, 4, 5, 6, 9, 10, 40))]
    for cut in cuts:
        with socket.create_connection(("127.0.0.1", e.ports[path]), timeout=10) as s:
            response = tls_request(s, header, cut, "a.test", ca)
        assert response.startswith(b"HTTP/1.1 200"), (cut, response[:80])
        info = json.loads(response.partition(b"\r\n\r\n")[2])
        assert info["headers"]["X-Forwarded-For"] == ["192.0.2.77"], cut
        assert info["headers"]["X-Forwarded-Proto"] == ["https"], cut


@pytest.mark.parametrize("path", ["nopeek", "peek"])
def test_header_then_http_request_split_anywhere_names_the_client(tls_paths, path):
    """Plain HTTP on the same entry points (not TLS from the first byte): the header's
    client reaches the ClientIP rule and X-Forwarded-For, wherever the bytes are split."""
    e, _, _ = tls_paths
    request = b"GET /who HTTP/1.1\r\nHost: h.test\r\nConnection: close\r\n\r\n"
    for header in (
        encode_v1(("192.0.2.79", 4444), ("127.0.0.1", 80)),
        encode_v2(("192.0.2.79", 4444), ("127.0.0.1", 80)),
    ):
        data = header + request
        for cut in [*range(1, len(header) + 1), len(header) + 1, len(header) + 4]:
            with socket.create_connection(("127.0.0.1", e.ports[path]), timeout=10) as s:
                s.sendall(data[:cut])
                time.sleep(0.005)
                s.sendall(data[cut:])
                response = b""
                while len(response) < 1 << 20 and (chunk := recv_exactly(s, 65536, timeout=5)):
                    response += chunk
            assert response.startswith(b"HTTP/1.1 200"), (cut, response[:80])  # ClientIP matched
            info = json.loads(response.partition(b"\r\n\r\n")[2])
            assert info["headers"]["X-Forwarded-For"] == ["192.0.2.79"], cut
    with socket.create_connection(("127.0.0.1", e.ports[path]), timeout=10) as s:
        s.sendall(request)  # without a header the peer (127.0.0.1) is the client: no route
        assert recv_exactly(s, 12) == b"HTTP/1.1 404"


def test_passthrough_passes_the_header_client_on_and_the_hello_whole(tls_paths):
    e, ca, backend = tls_paths
    ctx = ssl.create_default_context(cafile=ca)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="p.test")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    seen = len(backend.received)
    for cut in (1, 10, 41, 42, 43, 47, 48):
        with socket.create_connection(("127.0.0.1", e.ports["peek"]), timeout=10) as s:
            data = (
                encode_v1(("192.0.2.78", 4343), ("127.0.0.1", 443)) + hello
            )  # the v1 line is 42 bytes
            s.sendall(data[:cut])
            time.sleep(0.005)
            s.sendall(data[cut:])
            s.shutdown(socket.SHUT_WR)
            assert recv_exactly(s, 1) == b""  # the recorder says nothing and closes at EOF
    deadline = time.monotonic() + 5
    while len(backend.received) < seen + 7 and time.monotonic() < deadline:
        time.sleep(0.02)
    got = backend.received[seen:]
    assert len(got) == 7
    for data in got:
        line, _, rest = data.partition(b"\r\n")
        assert line.startswith(b"PROXY TCP4 192.0.2.78 127.0.0.1 4343 "), (
            line
        )  # edge's own header, the client's address
        assert rest == hello  # the ClientHello once, whole, nothing of the incoming header


# -- UDP: the PROXY v2 header once per upstream flow, after a re-pick and an eviction too -----------------


# -- TCP middlewares: an admitted connection is left once, however it ends ---------------------------------


# -- UDP: a broadcast to a wildcard listener is answered ------------------------------------------------


# -- UDP: a datagram from a server's own address opens no session (a loop) --------------------------------


def test_proxy_protocol_v1_and_v2_parsed_by_nginx(tmp_path, nginx_proxy_protocol):
    def service(version: int) -> dict:
        return {
            "loadBalancer": {
                "servers": [{"address": f"127.0.0.1:{nginx_proxy_protocol}"}],
                "proxyProtocol": {"version": version},
            }
        }

    dynamic = {
        "tcp": {
            "routers": {
                "one": {"rule": "HostSNI(`*`)", "service": "v1", "entryPoints": ["one"]},
                "two": {"rule": "HostSNI(`*`)", "service": "v2", "entryPoints": ["two"]},
            },
            "services": {"v1": service(1), "v2": service(2)},
        }
    }
    eps = {"one": {"address": "127.0.0.1:0"}, "two": {"address": "127.0.0.1:0"}}
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    try:
        for ep in ("one", "two"):
            with socket.create_connection(("127.0.0.1", e.ports[ep]), timeout=10) as s:
                s.sendall(b"GET / HTTP/1.0\r\nHost: pp.test\r\n\r\n")
                response = recv_all(s)
                client_port = s.getsockname()[1]
            assert response.startswith(b"HTTP/1.1 200"), response
            assert response.endswith(f"127.0.0.1 {client_port}\n".encode()), (ep, response)
    finally:
        e.stop()
