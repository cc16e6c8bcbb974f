"""Review of the PROXY protocol entry points, TCP middlewares and UDP (the defects it found).

Each test here failed on the commit before its fix:

- a peer that sends no PROXY protocol header and nothing else (a client waiting for a
  server that speaks first, SMTP or SSH) was closed at the header's deadline, or at
  once on its EOF, so a ``HostSNI(`*`)`` TCP router never relayed it on an entry
  point with ``proxyProtocol``; go-proxyproto (Traefik) reads a timeout or an EOF
  before the first byte as "no header" and goes on;

Real edge processes, real sockets on 127.0.0.0/8, ephemeral ports; every wait bounded.
"""

from __future__ import annotations

import socket
import time

import pytest

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
