"""Lingering close: when edge closes a connection whose client is still sending,
it reads and drops what comes for a bounded time first, so the client gets the
answer instead of a reset (plain and over TLS 1.3, under both codecs). Each test
failed on the commit before its fix (the review of HTTP middlewares and transports).
"""

from __future__ import annotations

import socket
import ssl
import time

from tests.harness import Edge, lb, read_response, read_until_closed
from tests.integration.http.servers import TIMEOUT, EarlyAnswerBackend, edge_with


def test_closing_with_the_request_body_still_coming_does_not_reset_the_connection(tmp_path, parser):
    """When edge closed a client connection whose request body was still arriving
    (an early 413 from the upstream, a 502), the kernel answered the next bytes
    of that body with a reset: the client, still sending, got EPIPE or
    ECONNRESET, and most clients then report the reset, not the answer (which a
    reset can also destroy in flight). Go's server under Traefik closes its side
    and reads on for a while before it closes (lingering close), as nginx does."""
    backend = EarlyAnswerBackend()
    e = edge_with(tmp_path, parser, lb(backend.url))
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            total = 4_000_000
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: %d\r\n\r\n" % total
            )
            s.sendall(b"x" * 1000)
            time.sleep(0.3)  # the answer comes, and edge closes its side
            s.sendall(b"x" * (total - 1000))  # the rest of the upload: no reset
            s.shutdown(socket.SHUT_WR)
            out, closed = read_until_closed(s, TIMEOUT)
        assert closed, out
        assert out.startswith(b"HTTP/1.1 413 ") and b"\r\nConnection: close\r\n" in out, out
        assert out.endswith(b"too big!"), out
    finally:
        e.stop()
        backend.stop()


def test_lingering_is_bounded(tmp_path):
    """...and a client that keeps sending and never closes is closed on after a
    while (LINGER, 2 s, enforced by the entrypoint's deadline sweep). A guard: it
    passes on the commit before too, where the close came at once. The client reads
    EOF at once (edge's half-close): only its sends see the full close."""
    backend = EarlyAnswerBackend()
    e = edge_with(
        tmp_path, "httptools", lb(backend.url)
    )  # after the answer no codec reads: one is enough
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 100000000\r\n\r\n"
                + b"x" * 1000
            )
            out = read_response(s)
            assert out.startswith(b"HTTP/1.1 413 "), out
            start = time.monotonic()
            closed = False
            s.settimeout(0.1)
            while (
                time.monotonic() - start < 8
            ):  # edge's half-close ends our reading, not our sending
                try:
                    s.sendall(b"x" * 1000)
                except TimeoutError:
                    continue
                except OSError:  # the full close, seen by a send (EPIPE, a reset)
                    closed = True
                    break
                time.sleep(0.01)
            assert closed and time.monotonic() - start < 6, time.monotonic() - start
    finally:
        e.stop()
        backend.stop()


def test_lingering_over_tls13(tmp_path, parser):
    """The same over TLS 1.3 (edge's terminator half-closes with close_notify and reads
    on): the client sends the rest of its upload without a reset and reads the whole
    answer. TLS 1.2 has no half-close: there edge closes as before."""
    from tests.fixtures.tls.pki import PKI

    pki = PKI()
    cert, key = pki.issue("app.example").write(tmp_path, "app")
    ca = pki.write_ca(tmp_path)
    backend = EarlyAnswerBackend()
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app", "tls": {}}},
            "services": {"app": lb(backend.url)},
        },
        "tls": {"certificates": [{"certFile": cert, "keyFile": key}]},
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        ctx = ssl.create_default_context(cafile=ca)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        plain = socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT)
        with ctx.wrap_socket(plain, server_hostname="app.example") as s:
            total = 4_000_000
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: %d\r\n\r\n" % total
            )
            s.sendall(b"x" * 1000)
            time.sleep(0.3)
            s.sendall(b"x" * (total - 1000))
            out = read_response(s)
        assert out.startswith(b"HTTP/1.1 413 ") and b"\r\nConnection: close\r\n" in out, out
    finally:
        e.stop()
        backend.stop()
