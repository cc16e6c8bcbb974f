"""Trailer fields through edge, both ways, on real sockets.

A backend answers with a chunked body and trailers (``grpc-status`` among them, and
fields edge must never forward: framing, hop-by-hop, Host, X-Forwarded-*); HTTP/1.1
clients (curl ``--raw``, a raw socket) get them in the last chunk, HTTP/2 clients (a
raw h2 client) as a HEADERS frame with END_STREAM after the data. A client's request
trailers (a chunked HTTP/1.1 body, an HTTP/2 HEADERS after DATA) reach the backend in
the last chunk of the request. Both codecs read both sides.
"""

from __future__ import annotations

import socket
import threading

import pytest

from tests.harness import Edge, lb
from tests.integration.http.h2peers import RawH2
from tests.integration.peers import ThreadedServer

PARSERS = ["httptools", "h11"]

TRAILERS = (
    b"grpc-status: 0\r\n"
    b"Grpc-Message: all fine\r\n"
    b"Keep-Alive: timeout=5\r\n"
    b"Host: evil.example\r\n"
    b"X-Forwarded-For: 6.6.6.6\r\n"
    b"Trailer: x\r\n"
)
FORWARDED = [(b"grpc-status", b"0"), (b"grpc-message", b"all fine")]


def _read_message(c: socket.socket) -> bytes:
    """One request, head and body (a Content-Length or chunked one, trailers included)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        # The body ends with the last chunk ("0" line at a chunk boundary) and the
        # trailer section's empty line: enough for the small bodies sent here.
        while not (body.startswith(b"0\r\n") or b"\r\n0\r\n" in body) or not body.endswith(
            b"\r\n\r\n"
        ):
            chunk = c.recv(65536)
            if not chunk:
                break
            body += chunk
    elif b"content-length:" in lower:
        length = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < length:
            chunk = c.recv(65536)
            if not chunk:
                break
            body += chunk
    return head + b"\r\n\r\n" + body


class TrailerBackend(ThreadedServer):
    """Answers every request with a chunked ``hello`` and TRAILERS (after a 103 Early
    Hints for a path starting ``/hints``), keeping each request as it came (``seen``)."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(5)
        try:
            for _ in range(20):
                request = _read_message(c)
                if not request:
                    return
                with self.lock:
                    self.seen.append(request)
                out = b""
                if request.split(b" ", 2)[1].startswith(b"/hints"):
                    out += (
                        b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n"
                        b"Connection: x-hop\r\nX-Hop: 1\r\n\r\n"
                    )
                out += (
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: grpc-status\r\n\r\n"
                    b"5\r\nhello\r\n0\r\n" + TRAILERS + b"\r\n"
                )
                c.sendall(out)
        except OSError:
            pass
        finally:
            c.close()


@pytest.fixture(scope="module")
def backend():
    b = TrailerBackend()
    yield b
    b.stop()


def config(backend: TrailerBackend) -> dict:
    return {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }


def raw_exchange(port: int, request: bytes) -> bytes:
    """``request`` on a fresh connection; what came back until the chunked body's end."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        data = b""
        while not data.endswith(b"\r\n\r\n") or b"\r\n0\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def chunked_post(path: bytes, trailers: bytes) -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n4\r\nabcd\r\n0\r\n" + trailers + b"\r\n"
    )


@pytest.mark.parametrize("parser", PARSERS)
def test_request_trailers_reach_the_backend_from_http_1_1_and_http2(tmp_path, parser, backend):
    e = Edge(tmp_path, config(backend), parser=parser)
    try:
        raw_exchange(
            e.port,
            chunked_post(
                b"/up1", b"X-Checksum: 1234\r\nX-Forwarded-For: 6.6.6.6\r\nHost: evil\r\n"
            ),
        )
        with RawH2(e.port) as c:
            sid = c.request(
                b"/up2", authority=b"app.example", method=b"POST", body=b"abcd", end=False
            )
            c.h2.send_headers(
                sid, [(b"x-checksum", b"5678"), (b"grpc-timeout", b"1S")], end_stream=True
            )
            c.flush()
            assert c.response(sid).status == 200
        with backend.lock:
            seen = {r.split(b" ", 2)[1]: r for r in backend.seen}
        body1 = seen[b"/up1"].partition(b"\r\n\r\n")[2]
        assert body1 == b"4\r\nabcd\r\n0\r\nX-Checksum: 1234\r\n\r\n"
        head2, _, body2 = seen[b"/up2"].partition(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head2.lower()
        assert body2 == b"4\r\nabcd\r\n0\r\nx-checksum: 5678\r\ngrpc-timeout: 1S\r\n\r\n"
        # Without trailers, the last chunk is as it was.
        raw_exchange(e.port, chunked_post(b"/up3", b""))
        with backend.lock:
            seen = {r.split(b" ", 2)[1]: r for r in backend.seen}
        assert seen[b"/up3"].endswith(b"\r\n\r\n4\r\nabcd\r\n0\r\n\r\n")
    finally:
        e.stop()
