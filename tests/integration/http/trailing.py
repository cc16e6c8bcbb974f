"""A backend for the trailer and 1xx tests: chunked answers with trailers, 103 first
where asked, each request kept as it came."""

from __future__ import annotations

import socket
import threading

from tests.harness import lb
from tests.integration.peers import ThreadedServer

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


def config(backend: TrailerBackend) -> dict:
    return {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
