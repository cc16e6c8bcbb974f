"""Malformed HTTP/2 requests through edge: each a stream error, the connection serving on.

A raw h2 client (h2's state machine with its own checks off) sends what RFC 9113
8.2 and 8.3 call malformed on one connection, each on a stream of its own,
between well-formed requests: each malformed stream gets RST_STREAM
PROTOCOL_ERROR (as Go's server answers for Traefik), the well-formed ones their
answers from the backend, and the backend never sees a malformed one.
"""

from __future__ import annotations

import json

import pytest
from h2.errors import ErrorCodes

from tests.harness import Edge, Whoami, lb
from tests.integration.http.h2peers import RawH2, Response

GOOD = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"app.example")]

MALFORMED = {
    "uppercase name": [*GOOD, (b":path", b"/m"), (b"X-Upper", b"1")],
    "connection field": [*GOOD, (b":path", b"/m"), (b"connection", b"keep-alive")],
    "transfer-encoding": [*GOOD, (b":path", b"/m"), (b"transfer-encoding", b"chunked")],
    "te but trailers": [*GOOD, (b":path", b"/m"), (b"te", b"gzip")],
    "line break in a value": [*GOOD, (b":path", b"/m"), (b"x-a", b"1\r\nx-b: 2")],
    "unknown pseudo-header": [*GOOD, (b":path", b"/m"), (b":custom", b"1")],
    "response pseudo-header": [*GOOD, (b":path", b"/m"), (b":status", b"200")],
    "pseudo after a field": [*GOOD, (b"x-a", b"1"), (b":path", b"/m")],
    "no :path": GOOD,
    "empty :path": [*GOOD, (b":path", b"")],
    "two :path": [*GOOD, (b":path", b"/m"), (b":path", b"/n")],
    "host not the authority": [*GOOD, (b":path", b"/m"), (b"host", b"other.example")],
}


@pytest.fixture(scope="module")
def whoami():
    w = Whoami("w1")
    yield w
    w.stop()


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_malformed_requests_reset_their_streams_and_the_connection_serves_on(
    tmp_path, parser, whoami
):
    e = Edge(
        tmp_path,
        {
            "http": {
                "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
                "services": {"app": lb(whoami.url)},
            }
        },
        parser=parser,
    )
    try:
        with RawH2(e.port, checked=False) as c:
            for why, headers in MALFORMED.items():
                bad = c.h2.get_next_available_stream_id()
                c.responses[bad] = Response()
                c.h2.send_headers(bad, headers, end_stream=True)
                c.flush()
                good = c.request(b"/after", authority=b"app.example")
                r = c.response(bad)
                assert r.reset == ErrorCodes.PROTOCOL_ERROR, why
                r = c.response(good)
                assert r.ended and r.status == 200, why
                assert json.loads(r.body)["path"] == "/after"
            assert c.terminated is None and not c.closed
    finally:
        e.stop()
