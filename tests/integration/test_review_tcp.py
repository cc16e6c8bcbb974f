"""Review of TCP routing, the splice and TCP middlewares on a shared TLS entrypoint.

A real edge process (``tests.harness.Edge``) on 127.0.0.1 port 0, real clients
(Python's ssl, raw sockets) and small servers in threads that record what they
get. Each test failed on the commit before its fix; the pure counterparts of the
precedence cases are in ``tests/unit/test_review_tcp.py``.
"""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from tests.fixtures.tls.pki import PKI
from tests.harness import Edge, read_until_closed


class Recorder:
    """A TCP server in a thread: per connection, reads one chunk, keeps it, answers
    ``reply`` and closes."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.received: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.closing = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.closing:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    self.received.append(conn.recv(65536))
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self) -> None:
        self.closing = True
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def recorder():
    r = Recorder(b"passed through\n")
    yield r
    r.close()


def client_hello(server_name: str | None) -> bytes:
    """The first flight of a TLS client for ``server_name`` (None: no SNI)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_side=False, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a new connection; what comes back until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return read_until_closed(s, timeout)[0]


# -- precedence: HTTPS routers that name hosts, and a TCP router that catches all -----------


@pytest.mark.parametrize("server_name", ["other.test", None], ids=["unknown-name", "no-sni"])
def test_a_tcp_catch_all_gets_the_names_no_https_router_names(tmp_path, whoami, recorder, server_name):
    """Traefik (since 2.7) tries, in order: an HTTPS router's Host, a TCP router on TLS
    with a specific rule, an HTTPS router without a Host, ``HostSNI(`*`)``, and the
    HTTPS 404 last. A common setup (a few HTTPS sites, everything else passed through
    to another TLS server) lost every other name to edge's own termination and 404:
    the passthrough server never saw a ClientHello."""
    pki = PKI()
    crt, key = pki.issue("site.test").write(tmp_path, "site")
    dynamic = {
        "http": {
            "routers": {"site": {"rule": "Host(`site.test`)", "service": "w", "tls": {}}},
            "services": {"w": {"loadBalancer": {"servers": [{"url": whoami.url}]}}},
        },
        "tcp": {
            "routers": {"rest": {"rule": "HostSNI(`*`)", "service": "pass", "tls": {"passthrough": True}}},
            "services": {"pass": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{recorder.port}"}]}}},
        },
        "tls": {"certificates": [{"certFile": crt, "keyFile": key}]},
    }
    e = Edge(tmp_path, dynamic)
    try:
        first = client_hello(server_name)
        assert exchange(e.port, first) == b"passed through\n"
        assert recorder.received == [first]  # the ClientHello, untouched
        # The HTTPS router keeps its own name.
        ctx = ssl.create_default_context(cafile=pki.write_ca(tmp_path))
        with (
            socket.create_connection(("127.0.0.1", e.port), timeout=5) as raw_sock,
            ctx.wrap_socket(raw_sock, server_hostname="site.test") as s,
        ):
            s.sendall(b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
            assert read_until_closed(s, 5)[0].startswith(b"HTTP/1.1 200")
    finally:
        e.stop()


# -- a server address that cannot be dialled -------------------------------------------------


@pytest.mark.parametrize("tls", [False, True], ids=["clear", "tls"])
@pytest.mark.parametrize("host", ["a..b.test", "x" * 64 + ".test"], ids=["empty-label", "long-label"])
def test_a_server_name_that_cannot_be_resolved_closes_the_client_and_says_why(tmp_path, host, tls):
    """A server address whose host name is no valid DNS name (an empty label, a label
    over 63 bytes: a typo, a generated name) passes validation, and asking the
    resolver for it raises UnicodeError (a ValueError, not an OSError), which the dial
    did not catch: the relay's task died with "Task exception was never retrieved",
    the client stayed parked with its reading paused, never closed and never told,
    and the connection stayed in the entrypoint's set (a drain waited out its grace).
    Traefik's dial fails and closes the client, as for a name that does not resolve.
    The client is closed at once and the log names the router, service and address,
    whether edge speaks TLS to the server or not."""
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "bad"}},
            "services": {"bad": {"loadBalancer": {"servers": [{"address": f"{host}:5000", "tls": tls}]}}},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            s.sendall(b"hello")
            data, closed = read_until_closed(s, 5)
        assert (data, closed) == (b"", True)
        what = " \\(tls\\)" if tls else ""
        e.wait_for(rf"tcp router raw@file: service bad@file: dial {host}:5000{what}: not a host name .*; connection closed")
        assert "Task exception was never retrieved" not in e.log
    finally:
        e.stop()
