"""HTTP/2 to servers: ``h2c://`` and ``https://`` (ALPN h2) server URLs, on real sockets.

The server is grpcio's (``grpcpeers.Echo``), which speaks only HTTP/2: an HTTP/1.1
client reaching it through edge proves the translation (Host as ``:authority``,
a body as DATA, the answer framed again for HTTP/1.1).
"""

from __future__ import annotations

import struct

import pytest

from tests.harness import Edge, get, lb
from tests.integration.http.grpcpeers import Echo
from tests.integration.peers import curl


def framed(message: bytes) -> bytes:
    """One gRPC length-prefixed message, uncompressed."""
    return b"\x00" + struct.pack(">I", len(message)) + message


@pytest.fixture(scope="module")
def echo():
    e = Echo()
    yield e
    e.stop()


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_http11_client_to_an_h2c_server(tmp_path, echo, parser):
    dynamic = {
        "http": {
            "routers": {"g": {"rule": "Host(`g.example`)", "service": "g"}},
            "services": {"g": lb(echo.url)},
        }
    }
    e = Edge(tmp_path, dynamic, parser=parser)
    try:
        for i in range(3):  # on one pooled HTTP/2 connection, each its own stream
            status, headers, body = get(
                e.port,
                "/edge.test.Echo/Unary",
                host="g.example",
                method="POST",
                body=framed(b"hi%d" % i),
                headers={"Content-Type": "application/grpc", "X-Token": "abc"},
            )
            assert status == 200, (status, headers, body, e.log)
            assert headers["content-type"] == "application/grpc"
            assert body == framed(b"echo:hi%d" % i)
            assert echo.metadata[-1]["x-token"] == "abc"
        # A chunked request body (curl's, from a file) goes as DATA frames.
        message = tmp_path / "message"
        message.write_bytes(framed(b"chunky"))
        result = curl(
            "-H",
            "Host: g.example",
            "-H",
            "Content-Type: application/grpc",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            f"@{message}",
            f"{e.url}/edge.test.Echo/Unary",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == framed(b"echo:chunky")
    finally:
        e.stop()
