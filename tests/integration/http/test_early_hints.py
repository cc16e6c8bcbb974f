"""103 Early Hints (and other 1xx but 101) from an HTTP/1.1 backend through edge.

The backend of ``test_trailers`` answers a path starting ``/hints`` with a 103
(a Link and a field its Connection names) before its response: HTTP/1.1 clients
(curl, a raw socket) get it as it came less the hop-by-hop fields, HTTP/2 clients
(a raw h2 client) as an informational HEADERS frame before the response's, an
HTTP/1.0 client not at all (RFC 9110 15.2). ``Expect: 100-continue`` is still
answered by edge alone. Both codecs read the upstream side.
"""

from __future__ import annotations

import socket

import pytest

from tests.harness import Edge
from tests.integration.http.h2peers import RawH2
from tests.integration.http.trailing import TrailerBackend, config
from tests.integration.peers import curl

PARSERS = ["httptools", "h11"]


@pytest.fixture(scope="module")
def backend():
    b = TrailerBackend()
    yield b
    b.stop()


def raw(port: int, request: bytes) -> bytes:
    """``request`` on a fresh connection (it says close); all that came back."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        data = b""
        for _ in range(100):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


@pytest.mark.parametrize("parser", PARSERS)
def test_early_hints_reach_http_1_1_clients_before_the_response(tmp_path, parser, backend):
    e = Edge(tmp_path, config(backend), parser=parser)
    try:
        got = curl("-i", "-H", "Host: app.example", e.url + "/hints")
        assert got.returncode == 0, got.stderr
        hints, _, rest = got.stdout.partition(b"\r\n\r\n")
        assert hints.split(b"\r\n") == [
            b"HTTP/1.1 103 Early Hints",
            b"Link: </s.css>; rel=preload",
        ]  # its Connection and the X-Hop it names: hop-by-hop, gone
        assert rest.startswith(b"HTTP/1.1 200 OK\r\n")
        # An HTTP/1.0 client gets no 1xx (RFC 9110 15.2), only the response.
        answer = raw(e.port, b"GET /hints HTTP/1.0\r\nHost: app.example\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b" 103 " not in answer
        # No hints asked, none sent.
        answer = raw(e.port, b"GET / HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_early_hints_reach_http2_clients_as_an_informational_headers_frame(
    tmp_path, parser, backend
):
    e = Edge(tmp_path, config(backend), parser=parser)
    try:
        with RawH2(e.port) as c:
            r = c.response(c.request(b"/hints", authority=b"app.example"))
            assert r.ended and r.status == 200 and bytes(r.body) == b"hello"
            assert r.interim == [{b":status": b"103", b"link": b"</s.css>; rel=preload"}]
            r = c.response(c.request(b"/", authority=b"app.example"))
            assert r.ended and r.status == 200 and r.interim == []
    finally:
        e.stop()
