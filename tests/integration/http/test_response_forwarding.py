"""``loadBalancer.responseForwarding.flushInterval`` through a real edge, under both
HTTP/1.1 codecs. Traefik flushes what its proxy buffered every ``flushInterval``
(100 ms by default; a negative value: after every write); edge buffers nothing, so
whatever the interval says, each read from the server reaches the client at once:
a backend holding the rest of its body until the client has the first chunk is
answered in full, and the first chunk comes well before any interval."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.harness import Edge, lb
from tests.integration.peers import ThreadedServer

PARSERS = ["httptools", "h11"]


class Holding(ThreadedServer):
    """Answers each request with a chunked body's first chunk, then holds the rest
    until ``release`` is set (at most 5 s)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(5)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = c.recv(65536)
                if not chunk:
                    return
                data += chunk
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            self.release.wait(5)
            c.sendall(b"6\r\nsecond\r\n0\r\n\r\n")
        except OSError:
            pass
        finally:
            c.close()


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("interval", ["10s", "-1", None])
def test_each_read_reaches_the_client_at_once_whatever_the_interval(tmp_path, parser, interval):
    backend = Holding()
    extra = {} if interval is None else {"responseForwarding": {"flushInterval": interval}}
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url, **extra)},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            start = time.perf_counter()
            s.sendall(b"GET / HTTP/1.1\r\nHost: app.example\r\n\r\n")
            got = b""
            while b"first" not in got:
                chunk = s.recv(65536)
                assert chunk, got
                got += chunk
            first = time.perf_counter() - start
            assert not backend.release.is_set()  # the backend still holds the rest
            backend.release.set()
            while not got.endswith(b"0\r\n\r\n"):
                chunk = s.recv(65536)
                assert chunk, got
                got += chunk
        assert got.startswith(b"HTTP/1.1 200 OK\r\n")
        assert got.endswith(b"5\r\nfirst\r\n6\r\nsecond\r\n0\r\n\r\n")
        # Well before a 10 s interval, and before Traefik's default 100 ms.
        assert first < 0.1 or (interval is None and first < 1.0), first
    finally:
        backend.release.set()
        e.stop()
        backend.stop()
