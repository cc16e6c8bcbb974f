"""HTTP/2 to servers: ``h2c://`` and ``https://`` (ALPN h2) server URLs, on real sockets.

The server is grpcio's (``grpcpeers.Echo``), which speaks only HTTP/2: an HTTP/1.1
client reaching it through edge proves the translation (Host as ``:authority``,
a body as DATA, the answer framed again for HTTP/1.1).
"""

from __future__ import annotations

import asyncio
import http.server
import socket
import ssl
import struct
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from edge.config.dynamic import ServersTransport
from edge.http.codec.httptools import RequestParser, ResponseParser
from edge.http.server import upstream_h2
from edge.transports import ServerURL, Transport
from tests.harness import Edge, get, lb
from tests.integration.http.h2peers import RawH2
from tests.integration.peers import curl


def framed(message: bytes) -> bytes:
    """One gRPC length-prefixed message, uncompressed."""
    return b"\x00" + struct.pack(">I", len(message)) + message


class Versions(http.server.BaseHTTPRequestHandler):
    """Answers with the HTTP version the request came in."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = self.request_version.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def https_http11(certs):
    """An HTTPS server whose ALPN offers only http/1.1."""
    crt, key = certs["files"]["good.test"]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.set_alpn_protocols(["http/1.1"])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Versions)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def tls_route(url: str, ca: str, **transport) -> dict:
    return {
        "http": {
            "routers": {"g": {"rule": "Host(`g.example`)", "service": "g"}},
            "services": {
                "g": {
                    **lb(url),
                    "loadBalancer": {**lb(url)["loadBalancer"], "serversTransport": "t"},
                }
            },
            "serversTransports": {"t": {"serverName": "good.test", "rootCAs": [ca], **transport}},
        }
    }


def test_grpc_over_http11_to_a_tls_server_negotiates_h2(tmp_path, echo_tls, certs):
    """A gRPC request (by its content type) from an HTTP/1.1 client offers h2 by ALPN."""
    e = Edge(tmp_path, tls_route(echo_tls.url, certs["ca"]))
    try:
        status, _, body = get(
            e.port,
            "/edge.test.Echo/Unary",
            host="g.example",
            method="POST",
            body=framed(b"tls"),
            headers={"Content-Type": "application/grpc"},
        )
        assert status == 200 and body == framed(b"echo:tls"), e.log
    finally:
        e.stop()


def test_http2_client_to_an_http11_tls_server_falls_back(tmp_path, https_http11, certs):
    """The server's ALPN says http/1.1: the request goes over HTTP/1.1, and so do the next."""
    e = Edge(tmp_path, tls_route(https_http11, certs["ca"]))
    try:
        for _ in range(3):
            result = curl(
                "--http2-prior-knowledge",
                "-H",
                "Host: g.example",
                "-w",
                " %{http_code} %{http_version}",
                f"{e.url}/v",
            )
            assert result.returncode == 0, result.stderr
            assert result.stdout == b"HTTP/1.1 200 2", e.log  # h2 to edge, HTTP/1.1 beyond
        assert len(e.all_matches("ALPN chose HTTP/1.1")) == 1
    finally:
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


def test_disable_http2_offers_no_h2(tmp_path, https_http11, certs):
    """Traefik's disableHTTP2: an HTTP/2 client's requests go over HTTP/1.1, no h2 offered."""
    e = Edge(tmp_path, tls_route(https_http11, certs["ca"], disableHTTP2=True))
    try:
        result = curl(
            "--http2-prior-knowledge", "-H", "Host: g.example", "-w", " %{http_code}", f"{e.url}/v"
        )
        assert result.stdout == b"HTTP/1.1 200", (result, e.log)
        assert not e.all_matches("ALPN chose")  # never offered
    finally:
        e.stop()


class StalledH2:
    """An HTTP/2 server (h2's state machine on a socket) that takes a request's head and
    never gives back window for its body: what it received is counted."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"h2c://127.0.0.1:{self.listener.getsockname()[1]}"
        self.received = 0
        self.heads = 0
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop_flag.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self.connection, args=(sock,), daemon=True).start()

    def connection(self, sock: socket.socket) -> None:
        machine = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        machine.initiate_connection()
        sock.sendall(machine.data_to_send())
        sock.settimeout(0.2)
        with sock:
            while not self.stop_flag.is_set():
                try:
                    data = sock.recv(1 << 16)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                for event in machine.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        self.heads += 1
                    elif isinstance(event, h2.events.DataReceived):
                        self.received += len(event.data)  # and no window given back
                sock.sendall(machine.data_to_send())

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(5)
        self.listener.close()


def test_a_server_that_takes_no_body_stops_the_client_upload(tmp_path):
    """Request DATA goes only within the server's window; past that edge stops
    acknowledging its client's DATA, whose window closes: nothing piles up in edge."""
    server = StalledH2()
    dynamic = {
        "http": {
            "routers": {"g": {"rule": "Host(`g.example`)", "service": "g"}},
            "services": {"g": lb(server.url)},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with RawH2(e.port) as c:
            sid = c.request(b"/up", authority=b"g.example", method=b"POST", end=False)
            sent = 0
            deadline = time.monotonic() + 4
            chunk = b"z" * 16384
            while sent < (8 << 20) and time.monotonic() < deadline:
                window = c.h2.local_flow_control_window(sid)
                if window < len(chunk):
                    c.read(0.2)  # a WINDOW_UPDATE from edge, if it reads on
                    continue
                c.h2.send_data(sid, chunk)
                c.flush()
                sent += len(chunk)
            assert server.heads == 1
            assert server.received <= 65535  # the server's window, nothing more
            # The client's own window (64 KiB) and what edge queues (HIGH_WATER), not 8 MiB.
            assert sent < 512 * 1024, sent
    finally:
        e.stop()
        server.stop()


def test_requests_waiting_for_a_dial_take_no_more_streams_than_the_server_allows():
    """A new connection is used once the server's SETTINGS said how many streams it
    takes: requests that waited for that dial and took theirs at once, before, opened
    more than a server allowing one stream takes (grpc-core resets the excess)."""

    class SlowSettings(asyncio.Protocol):
        """An h2 server that says SETTINGS (one stream a connection) 0.2 s late."""

        def connection_made(self, transport):
            machine = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
            machine.local_settings = h2.settings.Settings(
                client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1}
            )
            machine.initiate_connection()
            asyncio.get_running_loop().call_later(0.2, transport.write, machine.data_to_send())

    async def main():
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(SlowSettings, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        pool = Transport("t", ServersTransport(), loop)
        server = ServerURL(f"h2c://127.0.0.1:{port}")
        streams = []
        try:
            streams = await asyncio.wait_for(
                asyncio.gather(
                    *(
                        upstream_h2.connect(pool, server, RequestParser, ResponseParser)
                        for _ in range(3)
                    )
                ),
                10,
            )
            conns = {id(s.conn): s.conn for s in streams}
            return [(c.taken, c.limit) for c in conns.values()]
        finally:
            for stream in streams:
                stream.abort()
            listener.close()

    taken = asyncio.run(main())
    assert all(n <= limit == 1 for n, limit in taken) and len(taken) == 3, taken
