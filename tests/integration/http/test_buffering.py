"""buffering through a real edge, under both codecs: a chunked upload reaches the
backend whole, with its length; a streamed response reaches the client whole, with
its length; bodies over their limits are answered 413. The backend
(:class:`Recording`) keeps each request's head and a digest of its body, and answers
``/stream/<n>`` with n chunks of 10 KiB written 20 ms apart.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time

import pytest

from tests.harness import lb, read_response, read_until_closed
from tests.integration.http.servers import edge_with
from tests.integration.http.test_health import Scripted
from tests.integration.peers import ThreadedServer, free_port, read_request

CODECS = ["httptools", "h11"]


class Recording(ThreadedServer):
    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.bodies: list[tuple[int, str]] = []
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(5.0)
        try:
            request = read_request(c)
            if request is None:
                return
            head, body = request
            with self.lock:
                self.heads.append(head)
                self.bodies.append((len(body), hashlib.sha256(body).hexdigest()))
            target = head.split(b" ")[1]
            if target.startswith(b"/stream/"):
                parts = int(target.split(b"/")[2])
                c.sendall(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                )
                for i in range(parts):
                    c.sendall(b"2800\r\n" + bytes([65 + i % 26]) * 10240 + b"\r\n")
                    time.sleep(0.02)
                c.sendall(b"0\r\n\r\n")
                return
            answer = b"got %d" % len(body)
            c.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (len(answer), answer)
            )
        except OSError:
            pass
        finally:
            c.close()


@pytest.fixture
def recording():
    s = Recording()
    yield s
    s.stop()


def send(port: int, data: bytes, bodiless: bool = False) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        return read_response(s, bodiless)


def chunked(body: bytes, size: int = 7000) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += b"%x\r\n%s\r\n" % (len(part), part)
    return out + b"0\r\n\r\n"


def start(tmp_path, codec, recording, **config):
    return edge_with(
        tmp_path,
        codec,
        {"loadBalancer": {"servers": [{"url": recording.url}]}},
        {"buf": {"buffering": config}},
    )


@pytest.mark.parametrize("codec", CODECS)
def test_a_chunked_upload_goes_whole_with_its_length(tmp_path, codec, recording):
    """300 KB chunked, 64 KiB held in memory and the rest in a file: the backend gets
    Content-Length and the same bytes."""
    e = start(tmp_path, codec, recording, memRequestBodyBytes=65536)
    try:
        body = bytes(range(256)) * 1200
        out = send(
            e.port,
            b"POST /up HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n" + chunked(body),
        )
        assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"got %d" % len(body))
        head = recording.heads[-1].lower()
        assert b"content-length: %d" % len(body) in head and b"transfer-encoding" not in head
        assert recording.bodies[-1] == (len(body), hashlib.sha256(body).hexdigest())
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_a_request_body_over_its_limit_is_refused(tmp_path, codec, recording):
    e = start(tmp_path, codec, recording, maxRequestBodyBytes=1000)
    try:
        said = send(
            e.port,
            b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000,
        )
        assert said.startswith(b"HTTP/1.1 413") and said.endswith(b"Request Entity Too Large")
        found = send(
            e.port,
            b"POST /up HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked(b"y" * 2000, 600),
        )
        assert found.startswith(b"HTTP/1.1 413")
        fits = send(
            e.port,
            b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 1000\r\n"
            b"Connection: close\r\n\r\n" + b"z" * 1000,
        )
        assert fits.endswith(b"got 1000")
        assert [n for n, _ in recording.bodies] == [1000]  # the refused never reached it
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_a_streamed_response_goes_whole_with_its_length(tmp_path, codec, recording):
    """Ten chunks written 20 ms apart: nothing reaches the client before the last
    one (the head waits for the body), then all of it, with Content-Length."""
    e = start(tmp_path, codec, recording, memResponseBodyBytes=30000)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            began = time.monotonic()
            s.sendall(b"GET /stream/10 HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
            first = s.recv(1)
            waited = time.monotonic() - began
            out = first + read_response(s)
        head, _, body = out.partition(b"\r\n\r\n")
        assert b"content-length: 102400" in head.lower() and b"chunked" not in head.lower()
        assert body == b"".join(bytes([65 + i]) * 10240 for i in range(10))
        assert waited >= 0.18  # nine pauses of 20 ms before the last chunk
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_a_response_body_over_its_limit_is_answered_413(tmp_path, codec, recording):
    e = start(tmp_path, codec, recording, maxResponseBodyBytes=50000)
    try:
        out = send(
            e.port, b"GET /stream/10 HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n"
        )
        assert out.startswith(b"HTTP/1.1 413")
        out = send(
            e.port, b"GET /stream/4 HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n"
        )
        assert out.startswith(b"HTTP/1.1 200") and b"content-length: 40960" in out.lower()
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_retry_expression_sends_a_held_request_again(tmp_path, codec, recording):
    """A server answering 503 and a good one: while ``ResponseCode() == 503`` holds the
    request (its held body with it) goes again, and the client sees the good answer
    alone; a dead server is tried again under ``IsNetworkError()``."""
    failing = Scripted("failing")
    failing.status = 503
    service = lb(failing.url, recording.url)
    e = edge_with(
        tmp_path,
        codec,
        service,
        {
            "buf": {
                "buffering": {
                    "retryExpression": 'ResponseCode() == 503 && Attempts() < 3 && RequestMethod() == "POST"'
                }
            }
        },
    )
    try:
        for _ in range(2):
            out = send(
                e.port,
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 5\r\n"
                b"Connection: close\r\n\r\nhello",
            )
            assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"got 5")
        assert failing.served == 2 and [n for n, _ in recording.bodies] == [5, 5]
        # GET is not in the expression: the 503 goes to the client.
        statuses = sorted(
            send(e.port, b"GET / HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")[9:12]
            for _ in range(2)
        )
        assert statuses == [b"200", b"503"]
    finally:
        e.stop()
        failing.stop()
    (tmp_path / "dead").mkdir()
    e = edge_with(
        tmp_path / "dead",
        codec,
        lb(f"http://127.0.0.1:{free_port()}", recording.url),
        {"buf": {"buffering": {"retryExpression": "IsNetworkError() && Attempts() < 2"}}},
    )
    try:
        for _ in range(2):
            out = send(e.port, b"GET / HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
            assert out.startswith(b"HTTP/1.1 200")
    finally:
        e.stop()


def test_a_bad_retry_expression_disables_the_middleware_naming_the_key(tmp_path, recording):
    e = start(tmp_path, "httptools", recording, retryExpression="Attempts() < 2.5")
    try:
        out = send(e.port, b"GET / HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 404")  # its router is disabled
        e.wait_for(
            r"buffering\.retryExpression: an integer expected to compare with Attempts\(\)",
            start=0,
        )
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_disable_request_buffer_streams_the_upload_unlimited(tmp_path, codec, recording):
    """disableRequestBuffer: a chunked upload over maxRequestBodyBytes reaches the
    backend chunked, as it came (no 413, no Content-Length), while the response is
    still held (sent with its length)."""
    e = start(tmp_path, codec, recording, disableRequestBuffer=True, maxRequestBodyBytes=1000)
    try:
        body = b"y" * 5000
        out = send(
            e.port,
            b"POST /up HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n" + chunked(body, 600),
        )
        assert out.startswith(b"HTTP/1.1 200")  # held, it would be 413
        head = recording.heads[-1].lower()
        assert b"transfer-encoding: chunked" in head and b"content-length" not in head
        out = send(
            e.port, b"GET /stream/3 HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n"
        )
        assert b"content-length: 30720" in out.lower() and b"chunked" not in out.lower()
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_disable_response_buffer_streams_the_response_unlimited(tmp_path, codec, recording):
    """disableResponseBuffer: a response over maxResponseBodyBytes reaches the client
    as it came (chunked, its first bytes before the last is written), while the
    request's body is still held (sent with its length)."""
    e = start(tmp_path, codec, recording, disableResponseBuffer=True, maxResponseBodyBytes=50000)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            s.sendall(b"GET /stream/10 HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
            out, closed = read_until_closed(s, 10)
        head, _, body = out.partition(b"\r\n\r\n")
        assert closed and head.startswith(b"HTTP/1.1 200")
        assert b"transfer-encoding: chunked" in head.lower()
        assert body.count(b"2800\r\n") == 10  # all ten chunks, past the limit
        out = send(
            e.port,
            b"POST /up HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n" + chunked(b"z" * 3000, 700),
        )
        assert out.endswith(b"got 3000")
        assert b"content-length: 3000" in recording.heads[-1].lower()
    finally:
        e.stop()
