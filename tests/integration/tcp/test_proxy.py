"""TCP proxying through a real edge: routing by server name (a catch-all, names that
do not resolve, PostgreSQL STARTTLS), keep-alive on relayed connections, the
load balancer's termination delay.

A real edge process (``tests.harness.Edge``) on 127.0.0.1 port 0, real clients
(Python's ssl, raw sockets) and small servers in threads that record what they
get. Each test failed on the commit before its fix (the review of TCP routing); the pure counterparts of the
precedence cases are in ``tests/unit/router/test_tcp.py``.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import subprocess
import threading
import time

import pytest

from tests.fixtures.tls.pki import PKI
from tests.harness import Edge, need, read_until_closed
from tests.integration.peers import ThreadedServer


class Recorder(ThreadedServer):
    """A TCP server: per connection, reads one chunk, keeps it, answers ``reply`` and closes."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.received: list[bytes] = []
        super().__init__()

    def _serve(self, conn: socket.socket, n: int) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            self.received.append(conn.recv(65536))
            conn.sendall(self.reply)


@pytest.fixture
def recorder():
    r = Recorder(b"passed through\n")
    yield r
    r.stop()


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
def test_a_tcp_catch_all_gets_the_names_no_https_router_names(
    tmp_path, whoami, recorder, server_name
):
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
            "routers": {
                "rest": {"rule": "HostSNI(`*`)", "service": "pass", "tls": {"passthrough": True}}
            },
            "services": {
                "pass": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{recorder.port}"}]}}
            },
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
@pytest.mark.parametrize(
    "host", ["a..b.test", "x" * 64 + ".test"], ids=["empty-label", "long-label"]
)
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
            "services": {
                "bad": {"loadBalancer": {"servers": [{"address": f"{host}:5000", "tls": tls}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            s.sendall(b"hello")
            data, closed = read_until_closed(s, 5)
        assert (data, closed) == (b"", True)
        what = " \\(tls\\)" if tls else ""
        e.wait_for(
            rf"tcp router raw@file: service bad@file: dial {host}:5000{what}: not a host name .*; connection closed"
        )
        assert "Task exception was never retrieved" not in e.log
    finally:
        e.stop()


# -- PostgreSQL STARTTLS -------------------------------------------------------------------

SSL_REQUEST = b"\x00\x00\x00\x08\x04\xd2\x16\x2f"  # PostgreSQL's SSLRequest


class FakePostgres(ThreadedServer):
    """A server that answers like PostgreSQL: an SSLRequest gets ``S`` and TLS follows
    (unencrypted bytes after the request are refused, as PostgreSQL has since
    CVE-2021-23214); plain bytes are a startup message. Each connection's message
    is answered ``got <message> over tls|clear`` and closed."""

    def __init__(self, cert: tuple[str, str]) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*cert)
        self.errors: list[str] = []
        super().__init__()

    def _serve(self, conn: socket.socket, n: int) -> None:
        try:
            conn.settimeout(5)
            first = conn.recv(65536)
            if not first.startswith(SSL_REQUEST):
                conn.sendall(b"got " + first + b" over clear")
            elif first != SSL_REQUEST:
                self.errors.append("received unencrypted data after SSL request")
            else:
                conn.sendall(b"S")
                conn = self.ctx.wrap_socket(conn, server_side=True)
                conn.sendall(b"got " + conn.recv(65536) + b" over tls")
        except OSError as exc:
            self.errors.append(repr(exc))
        finally:
            conn.close()


def postgres_client(port: int, server_name: str, ca: str) -> tuple[bytes, bytes]:
    """A PostgreSQL client with sslmode=verify-full: SSLRequest, ``S``, TLS for
    ``server_name`` verified against ``ca``, a startup message; (answer to the request,
    what came back over TLS)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(SSL_REQUEST)
        yes = s.recv(1)
        if yes != b"S":
            return yes, b""
        ctx = ssl.create_default_context(cafile=ca)
        with ctx.wrap_socket(s, server_hostname=server_name) as tls:
            tls.sendall(b"startup")
            return yes, read_until_closed(tls, 5)[0]


@pytest.mark.parametrize("rule", ["HostSNI(`db.test`)", "HostSNI(`*`)"])
def test_postgres_starttls_is_routed_by_server_name(tmp_path, whoami, rule):
    """Traefik answers PostgreSQL's STARTTLS request (SSLRequest, then ``S``) on an
    entrypoint with TCP routers on TLS and routes the TLS that follows by its server
    name: passthrough (the server gets the SSLRequest, answers it, then the
    ClientHello) or termination (the server gets the plaintext). edge took the
    SSLRequest for a plain connection: with an HTTP router beside, the client got an
    HTTP 400; a TCP router on TLS never saw a PostgreSQL client."""
    backend_pki, edge_pki = PKI(), PKI()
    backend_cert = backend_pki.issue("db.test").write(tmp_path, "backend")
    crt, key = edge_pki.issue("db.test").write(tmp_path, "edge")
    backend_ca, edge_ca = (
        backend_pki.write_ca(tmp_path, "backend-ca"),
        edge_pki.write_ca(tmp_path, "edge-ca"),
    )
    pg = FakePostgres(backend_cert)
    service = {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{pg.port}"}]}}
    dynamic = {
        "http": {
            "routers": {"site": {"rule": "Host(`site.test`)", "service": "w"}},
            "services": {"w": {"loadBalancer": {"servers": [{"url": whoami.url}]}}},
        },
        "tcp": {
            "routers": {
                "pass": {"rule": rule, "service": "pg", "tls": {"passthrough": True}},
                "term": {"rule": "HostSNI(`term.db.test`)", "service": "pg", "tls": {}},
            },
            "services": {"pg": service},
        },
        "tls": {"certificates": [{"certFile": crt, "keyFile": key}]},
    }
    e = Edge(tmp_path, dynamic)
    try:
        # passthrough: the server's own certificate, and it saw the whole STARTTLS
        assert postgres_client(e.port, "db.test", backend_ca) == (b"S", b"got startup over tls")
        # termination by edge (its certificate), the server gets the plaintext
        edge_term = edge_pki.issue("term.db.test").write(tmp_path, "term")
        dynamic["tls"]["certificates"].append({"certFile": edge_term[0], "keyFile": edge_term[1]})
        e.write_dynamic(dynamic)
        e.wait_applied(2)
        assert postgres_client(e.port, "term.db.test", edge_ca) == (b"S", b"got startup over clear")
        assert pg.errors == []
        # plain HTTP on the same port is untouched
        assert exchange(
            e.port, b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n"
        ).startswith(b"HTTP/1.1 200")
    finally:
        e.stop()
        pg.stop()


def test_postgres_starttls_to_a_server_that_refuses_tls_closes_the_client(tmp_path):
    """A server that answers the SSLRequest with ``N`` (no TLS) cannot take the
    ClientHello: the client is closed and the log says what the server answered."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def refuse_tls() -> None:
        server.settimeout(10)
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                conn.settimeout(5)
                conn.recv(8)
                conn.sendall(b"N")
                conn.recv(1)  # until edge closes

    thread = threading.Thread(target=refuse_tls, daemon=True)
    thread.start()
    dynamic = {
        "tcp": {
            "routers": {
                "pass": {"rule": "HostSNI(`*`)", "service": "pg", "tls": {"passthrough": True}}
            },
            "services": {"pg": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{port}"}]}}},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            s.sendall(SSL_REQUEST)
            assert s.recv(1) == b"S"
            s.sendall(client_hello("db.test"))
            assert read_until_closed(s, 5) == (b"", True)
        e.wait_for(
            r"tcp router pass@file: service pg@file: dial .*: answered b'N' to the STARTTLS request"
        )
    finally:
        e.stop()
        thread.join(5)
        server.close()


def test_postgres_request_split_byte_by_byte_is_answered_and_a_near_miss_is_relayed_intact(
    tmp_path, recorder
):
    """The SSLRequest is looked for a byte at a time (as Traefik peeks it): sent in
    eight writes it is answered; bytes that start like it and then differ go, all of
    them, to the TCP router without TLS."""
    dynamic = {
        "tcp": {
            "routers": {
                "raw": {"rule": "HostSNI(`*`)", "service": "rec"},
                "tls": {
                    "rule": "HostSNI(`db.test`)",
                    "service": "rec",
                    "tls": {"passthrough": True},
                },
            },
            "services": {
                "rec": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{recorder.port}"}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for byte in SSL_REQUEST:
                s.sendall(bytes([byte]))
                time.sleep(0.01)
            assert s.recv(1) == b"S"
        near = SSL_REQUEST[:7] + b"\x30 and more"
        assert exchange(e.port, near) == b"passed through\n"
        assert recorder.received == [near]
    finally:
        e.stop()


# -- keep-alive on relayed connections ---------------------------------------------------------


def keepalive_timers(port_filter: str) -> list[int]:
    """The keep-alive timers (seconds left) ``ss`` shows on established TCP sockets
    matching ``port_filter`` (an ``ss`` filter such as ``sport = :8000``), those over a
    minute; none: []."""
    out = subprocess.run(
        ["ss", "-tnoH", "state", "established", port_filter],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    # Past a minute ss writes "1min14sec" (below, its unit varies between versions).
    return [
        int(m) * 60 + int(s)
        for m, s in re.findall(r"timer:\(keepalive,(\d+)min(\d+)sec,\d+\)", out)
    ]


def test_relayed_connections_keep_alive_both_ways(tmp_path, recorder):
    """Traefik dials TCP servers with keep-alive (``dialKeepAlive``, 15 s by default)
    and keeps accepted connections alive (a 3-minute period). edge accepted
    ``dialKeepAlive`` and used it nowhere: with no idle deadline on a relay, a server
    or client that vanished without a FIN or reset (powered off, a partition, a NAT
    that dropped the flow) held the pair, and the inFlightConn count that admitted
    it, for ever. ``ss`` shows the kernel's keep-alive timers on both sockets edge
    holds for a relay: the server's at the transport's dialKeepAlive, the client's
    at three minutes."""
    need("ss")
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "rec"}},
            "services": {
                "rec": {
                    "loadBalancer": {
                        "servers": [{"address": f"127.0.0.1:{recorder.port}"}],
                        "serversTransport": "probing",
                    }
                }
            },
            "serversTransports": {"probing": {"dialKeepAlive": "75s"}},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            client_port = s.getsockname()[1]
            # nothing sent: the relay dials at once and the recorder waits to read
            deadline = time.monotonic() + 5
            upstream: list[int] = []
            while not upstream and time.monotonic() < deadline:
                upstream = keepalive_timers(f"dport = :{recorder.port}")
                time.sleep(0.05)
            client = keepalive_timers(f"sport = :{e.port} and dport = :{client_port}")
            assert upstream and 60 < upstream[0] <= 75, upstream
            assert client and 120 < client[0] <= 180, client
    finally:
        e.stop()


# -- the load balancer's terminationDelay (Traefik v2's key, still read by v3) -------------------


class AnswerAfterEOF(ThreadedServer):
    """A TCP server: reads until the client's EOF, waits ``delay`` seconds, answers
    ``got <what it read>`` and closes."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        super().__init__()

    def _serve(self, conn: socket.socket, n: int) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            time.sleep(self.delay)
            conn.sendall(b"got " + data)


@pytest.mark.parametrize(("delay_ms", "answered"), [(1000, True), (-1, True), (None, False)])
def test_load_balancer_termination_delay_is_read_when_no_servers_transport_is_named(
    tmp_path, delay_ms, answered
):
    """``loadBalancer.terminationDelay`` (milliseconds; negative: wait for ever) was
    Traefik v2's way to let a server finish after the client's EOF, and Traefik v3
    still reads it (deprecated) when the load balancer names no serversTransport, as
    edge reads its sibling ``proxyProtocol``. edge refused the key as unsupported and
    disabled the service, so a v2 configuration lost its TCP routes. A server that
    answers 0.4 s after the client's EOF is heard with 1000 or -1, and cut by the
    default transport's 100 ms without the key."""
    server = AnswerAfterEOF(0.4)
    lb: dict = {"servers": [{"address": f"127.0.0.1:{server.port}"}]}
    if delay_ms is not None:
        lb["terminationDelay"] = delay_ms
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "slow"}},
            "services": {"slow": {"loadBalancer": lb}},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            s.sendall(b"question")
            s.shutdown(socket.SHUT_WR)
            data, closed = read_until_closed(s, 5)
        assert closed and data == (b"got question" if answered else b"")
        assert "not supported" not in e.log
    finally:
        e.stop()
        server.stop()


def test_negative_termination_delay_and_dial_keep_alive_mean_no_deadline_and_no_probes(tmp_path):
    """Traefik documents a negative serversTransport ``terminationDelay`` as no
    deadline and a negative ``dialKeepAlive`` as keep-alive off. edge refused both
    ("must not be negative") while decoding, and that refused the whole file, every
    router in it. Now the server that answers 0.4 s after the client's EOF is heard,
    and its connection has no keep-alive timer."""
    need("ss")
    server = AnswerAfterEOF(0.4)
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "slow"}},
            "services": {
                "slow": {
                    "loadBalancer": {
                        "servers": [{"address": f"127.0.0.1:{server.port}"}],
                        "serversTransport": "patient",
                    }
                }
            },
            "serversTransports": {"patient": {"terminationDelay": "-1s", "dialKeepAlive": "-1s"}},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            s.sendall(b"question")
            time.sleep(0.2)  # the relay is up
            out = subprocess.run(
                ["ss", "-tnoH", "state", "established", f"dport = :{server.port}"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            s.shutdown(socket.SHUT_WR)
            data, closed = read_until_closed(s, 5)
        assert closed and data == b"got question"
        assert f":{server.port}" in out and "keepalive" not in out, out
    finally:
        e.stop()
        server.stop()
