"""Review of the PROXY protocol entry points, TCP middlewares and UDP (the defects it found).

Each test here failed on the commit before its fix:

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

import socket
import time

import pytest

from edge.tcp.middlewares import IPAllowList, networks
from edge.tcp.proxied import trust
from edge.tcp.proxyproto import encode_v1
from tests.harness import Edge
from tests.integration.test_tls_tcp import Backend

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
            "services": {"smtp": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{backend.port}"}]}}},
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
        assert recv_exactly(s, len(BANNER)) == BANNER  # before: b"" (closed at the header's deadline)
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
    assert [str(n) for n in networks(["::ffff:10.0.0.0/104", "::ffff:127.0.0.1", "::/0", "10.0.0.0/8"])] == [
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
                "allow": {"rule": "HostSNI(`*`)", "service": "s", "entryPoints": ["allow"], "middlewares": ["two"]},
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
                assert (recv_exactly(s, len(BANNER)) == BANNER) is admitted, source  # before: both refused
    finally:
        e.stop()
