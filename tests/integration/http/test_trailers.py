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

import pytest

from tests.harness import Edge
from tests.integration.http.h2peers import RawH2
from tests.integration.http.trailing import FORWARDED, TrailerBackend, config
from tests.integration.peers import curl

PARSERS = ["httptools", "h11"]


@pytest.fixture(scope="module")
def backend():
    b = TrailerBackend()
    yield b
    b.stop()


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


@pytest.mark.parametrize("parser", PARSERS)
def test_response_trailers_reach_http_1_1_clients_in_the_last_chunk(tmp_path, parser, backend):
    e = Edge(tmp_path, config(backend), parser=parser)
    try:
        got = curl("--raw", "-H", "Host: app.example", e.url + "/")
        assert got.returncode == 0, got.stderr
        # As Traefik (Go's server) writes them, whatever the client's TE.
        assert got.stdout == b"5\r\nhello\r\n0\r\ngrpc-status: 0\r\nGrpc-Message: all fine\r\n\r\n"
        # The same with TE: trailers. (The backend's Trailer announcement is hop-by-hop
        # to edge's writers: dropped; no client needs it to read the section.)
        answer = raw_exchange(
            e.port,
            b"GET / HTTP/1.1\r\nHost: app.example\r\nTE: trailers\r\nConnection: close\r\n\r\n",
        )
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"Transfer-Encoding: chunked" in head
        assert body == b"5\r\nhello\r\n0\r\ngrpc-status: 0\r\nGrpc-Message: all fine\r\n\r\n"
        # An HTTP/1.0 client gets the body delimited by close: no chunks, no trailers.
        answer = raw_exchange(e.port, b"GET / HTTP/1.0\r\nHost: app.example\r\n\r\n")
        assert answer.partition(b"\r\n\r\n")[2] == b"hello"
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_response_trailers_reach_http2_clients_as_a_last_headers_frame(tmp_path, parser, backend):
    e = Edge(tmp_path, config(backend), parser=parser)
    try:
        with RawH2(e.port) as c:
            sids = [c.request(b"/%d" % i, authority=b"app.example") for i in range(3)]
            for sid in sids:
                r = c.response(sid)
                assert r.ended and r.status == 200 and bytes(r.body) == b"hello"
                assert r.trailers == FORWARDED
    finally:
        e.stop()


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
