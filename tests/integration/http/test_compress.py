"""The compress middleware through a real entrypoint, under both codecs: curl
``--compressed`` (gzip, br, zstd, each decoded by curl's own libraries) in front of a
purpose-built backend, and a raw client where the wire matters (a server-sent-events
stream whose first event must arrive, decoded, while the backend still holds the
rest). What is never compressed (a small body, an excluded or gRPC type, an encoded
response, a range, HEAD) goes through byte for byte; a bad value disables the
middleware naming its key."""

from __future__ import annotations

import gzip
import socket
import subprocess
import threading
import time
import zlib

import brotli
import pytest
import zstandard

from tests.harness import Edge, lb, need
from tests.integration.peers import ThreadedServer

TEXT = b"".join(b"line %05d of a text body that compresses well\n" % i for i in range(200))
SMALL = b"a small body under minResponseBodyBytes\n"
EVENT = b"data: %d\n\n"


class Backend(ThreadedServer):
    """One response per connection, chosen by path; ``/events?NAME`` sends one
    event, then waits for its stream's ``release`` before the next and the end, and
    sets its ``done``."""

    def __init__(self) -> None:
        self.streams: dict[bytes, tuple[threading.Event, threading.Event]] = {}
        self.lock = threading.Lock()
        super().__init__()

    def stream(self, name: bytes) -> tuple[threading.Event, threading.Event]:
        """The (release, done) events of the stream ``/events?name``."""
        with self.lock:
            return self.streams.setdefault(name, (threading.Event(), threading.Event()))

    def _serve(self, c: socket.socket, n: int) -> None:
        with c:
            c.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                more = c.recv(65536)
                if not more:
                    return
                data += more
            line = data.split(b"\r\n", 1)[0]
            method, target = line.split(b" ")[:2]
            path = target.split(b"?")[0]
            send = c.sendall
            if path == b"/events":
                release, done = self.stream(target.partition(b"?")[2])
                send(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                )
                for i in range(3):
                    event = EVENT % i
                    send(b"%x\r\n%s\r\n" % (len(event), event))
                    if i == 0 and not release.wait(15):
                        return
                send(b"0\r\n\r\n")
                done.set()
                return
            status, headers, body = ROUTES[path.decode()]
            lines = b"".join(b"%s: %s\r\n" % h for h in headers)
            if path == b"/chunked":
                framing = b"Transfer-Encoding: chunked\r\n"
                wire = b"".join(
                    b"%x\r\n%s\r\n" % (len(body[i : i + 1000]), body[i : i + 1000])
                    for i in range(0, len(body), 1000)
                )
                wire += b"0\r\n\r\n"
            else:
                framing = b"Content-Length: %d\r\n" % len(body)
                wire = body
            head = b"HTTP/1.1 %d X\r\n%s%sConnection: close\r\n\r\n" % (status, lines, framing)
            send(head + (b"" if method == b"HEAD" else wire))


PLAIN_TYPE = (b"Content-Type", b"text/plain; charset=utf-8")
ROUTES = {
    "/text": (200, [PLAIN_TYPE, (b"ETag", b'"v1"'), (b"Accept-Ranges", b"bytes")], TEXT),
    "/chunked": (200, [PLAIN_TYPE], TEXT),
    "/small": (200, [PLAIN_TYPE], SMALL),
    "/image": (200, [(b"Content-Type", b"image/png")], TEXT),
    "/grpc": (200, [(b"Content-Type", b"application/grpc")], TEXT),
    "/encoded": (200, [PLAIN_TYPE, (b"Content-Encoding", b"gzip")], gzip.compress(TEXT)),
    "/range": (
        206,
        [PLAIN_TYPE, (b"Content-Range", b"bytes 0-%d/99999" % (len(TEXT) - 1))],
        TEXT,
    ),
    "/vary": (200, [PLAIN_TYPE, (b"Vary", b"Origin")], TEXT),
}


@pytest.fixture(scope="module")
def backend():
    b = Backend()
    yield b
    b.stop()


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, backend):
    dyn = {
        "http": {
            "routers": {
                "c": {"rule": "Host(`c.test`)", "service": "app", "middlewares": ["c"]},
                "br": {"rule": "Host(`br.test`)", "service": "app", "middlewares": ["br"]},
                "plain": {"rule": "Host(`plain.test`)", "service": "app"},
                "bad": {"rule": "Host(`bad.test`)", "service": "app", "middlewares": ["bad"]},
            },
            "services": {"app": lb(backend.url)},
            "middlewares": {
                "c": {"compress": {"excludedContentTypes": ["image/png"]}},
                "br": {"compress": {"encodings": ["br", "gzip"], "defaultEncoding": "br"}},
                "bad": {"compress": {"encodings": ["gzip", "lz4"]}},
            },
        }
    }
    e = Edge(tmp_path_factory.mktemp(request.param), dyn, parser=request.param)
    yield e
    e.stop()


def curl(edge: Edge, host: str, path: str, *args: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body as curl gives it)."""
    out = subprocess.run(
        [
            need("curl"), "-s", "-i", "--max-time", "10", "-H", f"Host: {host}",
            *args, f"http://127.0.0.1:{edge.port}{path}",
        ],
        capture_output=True,
        timeout=20,
        check=True,
    )  # fmt: skip
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        key = name.strip().lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    ("accept", "coding"),
    [("gzip", "gzip"), ("br", "br"), ("zstd", "zstd"), ("gzip, br, zstd", "gzip")],
)
def test_curl_reads_each_coding(edge, accept, coding):
    status, headers, body = curl(
        edge, "c.test", "/text", "--compressed", "-H", f"Accept-Encoding: {accept}"
    )
    assert status == 200
    assert headers["content-encoding"] == coding
    assert headers["vary"] == "Accept-Encoding"
    assert headers["transfer-encoding"] == "chunked"
    assert "content-length" not in headers
    assert "accept-ranges" not in headers  # ranges of the encoded body are not served
    assert headers["etag"] == '"v1"'  # kept as it came, as Traefik keeps it
    assert body == TEXT


def raw_body(edge: Edge, host: str, path: str, accept: str | None) -> tuple[dict, bytes]:
    """Without --compressed: the bytes on the wire (chunked framing removed by curl)."""
    args = ["-H", f"Accept-Encoding: {accept}"] if accept is not None else []
    _, headers, body = curl(edge, host, path, *args)
    return headers, body


def test_each_coding_decodes_with_the_standard_decoders(edge):
    _, body = raw_body(edge, "c.test", "/text", "gzip")
    assert zlib.decompress(body, 31) == TEXT and len(body) < len(TEXT) // 5
    _, body = raw_body(edge, "c.test", "/text", "br")
    assert brotli.decompress(body) == TEXT
    _, body = raw_body(edge, "c.test", "/text", "zstd")
    assert zstandard.ZstdDecompressor().stream_reader(body).read() == TEXT


def test_a_chunked_body_is_compressed(edge):
    headers, body = raw_body(edge, "c.test", "/chunked", "gzip")
    assert headers["content-encoding"] == "gzip"
    assert zlib.decompress(body, 31) == TEXT


@pytest.mark.parametrize(
    ("path", "accept", "vary"),
    [
        ("/small", "gzip", "Accept-Encoding"),  # under minResponseBodyBytes
        ("/image", "gzip", "Accept-Encoding"),  # excludedContentTypes
        ("/grpc", "gzip", "Accept-Encoding"),  # application/grpc, always excluded
        ("/range", "gzip", "Accept-Encoding"),  # a 206 with Content-Range
        ("/text", None, None),  # no Accept-Encoding: no coding, no Vary
        ("/text", "", None),  # an empty one: identity
        ("/text", "identity", None),
        ("/text", "compress, rar", None),  # nothing edge knows
    ],
)
def test_what_is_not_compressed_goes_as_it_came(edge, path, accept, vary):
    headers, body = raw_body(edge, "c.test", path, accept)
    assert "content-encoding" not in headers
    assert headers.get("vary") == vary
    assert headers["content-length"] == str(len(ROUTES[path][2]))
    assert body == ROUTES[path][2]


def test_an_encoded_response_is_untouched(edge):
    headers, body = raw_body(edge, "c.test", "/encoded", "gzip, br")
    assert headers["content-encoding"] == "gzip"
    assert body == ROUTES["/encoded"][2]  # gzip of TEXT, exactly as the backend sent it


def test_head_is_not_compressed(edge):
    status, headers, _ = curl(edge, "c.test", "/text", "-I", "-H", "Accept-Encoding: gzip")
    assert status == 200
    assert "content-encoding" not in headers
    assert headers["content-length"] == str(len(TEXT))


def test_the_request_content_type_excluded(edge):
    """Traefik's guard: a request that is itself gRPC gets no coding."""
    headers, body = raw_body(edge, "c.test", "/text", "gzip")
    assert headers["content-encoding"] == "gzip"
    _, headers, body = curl(
        edge,
        "c.test",
        "/text",
        "-H",
        "Accept-Encoding: gzip",
        "-H",
        "Content-Type: application/grpc",
    )
    assert "content-encoding" not in headers and body == TEXT


def test_vary_joins_the_responses_own(edge):
    headers, _ = raw_body(edge, "c.test", "/vary", "gzip")
    assert headers["vary"] == "Origin, Accept-Encoding"


def test_encodings_order_and_default_encoding(edge):
    headers, body = raw_body(edge, "br.test", "/text", None)  # defaultEncoding: br
    assert headers["content-encoding"] == "br" and brotli.decompress(body) == TEXT
    headers, _ = raw_body(edge, "br.test", "/text", "gzip, br, zstd")  # br first here
    assert headers["content-encoding"] == "br"
    headers, _ = raw_body(edge, "br.test", "/text", "*")
    assert headers["content-encoding"] == "br"
    headers, _ = raw_body(edge, "br.test", "/text", "zstd")  # not in encodings
    assert "content-encoding" not in headers


def test_a_route_without_the_middleware_is_untouched(edge):
    headers, body = raw_body(edge, "plain.test", "/text", "gzip")
    assert "content-encoding" not in headers and "vary" not in headers and body == TEXT


def test_a_bad_value_disables_the_middleware_naming_the_key(edge):
    status, _, _ = curl(edge, "bad.test", "/text", "-H", "Accept-Encoding: gzip")
    assert status == 404
    edge.wait_for(r"compress\.encodings\[1\]: unsupported encoding 'lz4'", start=0)


def read_chunk(sock: socket.socket, buf: bytearray, deadline: float) -> bytes:
    """One chunk of a chunked body from ``sock`` (``buf``: bytes read past the last one)."""
    while True:
        end = buf.find(b"\r\n")
        if end >= 0:
            size = int(buf[:end].split(b";")[0], 16)
            if len(buf) >= end + 2 + size + 2:
                chunk = bytes(buf[end + 2 : end + 2 + size])
                del buf[: end + 2 + size + 2]
                return chunk
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        more = sock.recv(65536)
        if not more:
            raise EOFError("closed mid-body")
        buf += more


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_a_stream_flows_compressed(edge, backend, coding):
    """Each upstream chunk is compressed and flushed as it comes: the first event
    arrives and decodes while the backend holds the rest (minResponseBodyBytes does
    not hold a body of unknown length back)."""
    release, done = backend.stream(f"{edge.port}-{coding}".encode())
    decode = {
        "gzip": zlib.decompressobj(31).decompress,
        "br": brotli.Decompressor().process,
        "zstd": zstandard.ZstdDecompressor().decompressobj().decompress,
    }[coding]
    deadline = time.monotonic() + 15
    with socket.create_connection(("127.0.0.1", edge.port), timeout=10) as s:
        s.sendall(
            b"GET /events?%d-%s HTTP/1.1\r\nHost: c.test\r\nAccept-Encoding: %s\r\n\r\n"
            % (edge.port, coding.encode(), coding.encode())
        )
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            more = s.recv(65536)
            assert more, "closed before the head"
            buf += more
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        assert b"\r\ncontent-encoding: " + coding.encode() in head.lower()
        buf = bytearray(rest)
        got = b""
        while got != EVENT % 0:
            got += decode(read_chunk(s, buf, deadline))
            assert len(got) <= len(EVENT % 0)
        assert not done.is_set()  # the backend has not finished
        release.set()
        while True:
            chunk = read_chunk(s, buf, deadline)
            if not chunk:
                break
            got += decode(chunk)
        assert got == EVENT % 0 + EVENT % 1 + EVENT % 2
