"""Request smuggling: what a backend receives from the HTTP/1.1 front end.

Each test pins a defect found by the adversarial review of the front end (issue 12
item 4).

Each test sends edge bytes a client controls and reads what a real backend, an
HTTP/1.1 server that keeps to the framing it is given (h11, in a thread, on
127.0.0.1), parsed off the wire: which requests, with which Host and body, on
which connection. The backend answers each request as soon as its head is in,
before reading any body, as nginx's ``return`` or a static file does, and then
reads and drops the body the head announced: so a body announced and not sent
makes it take the next request on that pooled connection for the body.
"""

from __future__ import annotations

import random
import socket
import time

import h11
import pytest

from tests import harness
from tests.harness import Edge, lb, raw, read_until_closed
from tests.integration.http.servers import TIMEOUT, H11Backend
from tests.integration.peers import ThreadedServer


@pytest.fixture
def backend():
    b = H11Backend()
    yield b
    b.stop()


def edge_for(tmp_path, parser, backend, entrypoint: dict | None = None) -> Edge:
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    return Edge(
        tmp_path,
        dyn,
        parser=parser,
        entrypoints={"web": {"address": "127.0.0.1:0", **(entrypoint or {})}},
    )


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection; what edge answers until it closes or goes quiet."""
    return raw(port, data, timeout=TIMEOUT, quiet=0.5)


VICTIM = b"GET /victim HTTP/1.1\r\nHost: app.example\r\nCookie: secret\r\n\r\n"


@pytest.mark.parametrize(
    "framing",
    [b"Content-Length: 40\r\n", b"Transfer-Encoding: chunked\r\n"],
    ids=["content-length", "chunked"],
)
def test_upgrade_request_with_a_body_cannot_swallow_the_next_request(
    tmp_path, parser, backend, framing
):
    """Both codecs hand the bytes after an upgrade request's head to the tunnel, body
    included. Before the fix the head went upstream announcing a body that was never
    sent (or, chunked, with an empty body); the backend answered without the
    upgrade, the connection went back to the pool, and the next client's request
    on it became that body."""
    e = edge_for(tmp_path, parser, backend)
    try:
        attack = (
            b"GET /ws HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            + framing
            + b"\r\n"
        )
        refused = exchange(e.port, attack)
        served = exchange(e.port, VICTIM)
        time.sleep(0.3)  # what the backend still had to parse
        assert [(r.method, r.target, r.body) for r in backend.requests] == [
            (b"GET", b"/victim", b"")
        ]
        assert backend.errors == []
        assert refused.startswith(b"HTTP/1.1 400 "), refused
        assert served.startswith(b"HTTP/1.1 200 OK\r\n") and served.endswith(b"ok"), served
    finally:
        e.stop()


MALFORMED_HOSTS = [
    b"app.example:@evil.example",  # a URL parser reads evil.example as the host
    b"app.example:80@evil.example",
    b"app.example:80/evil.example",
    b"app.example:80 evil.example",
    b"app.example:80?evil.example",
    b"app.example:80#evil.example",
    b"app.example:80\\evil.example",
    b"[app.example]evil.example",
    b'app.example:"80"',
    b"app.example:\xe9",
]


def test_host_the_router_was_not_chosen_by_is_refused(tmp_path, parser, backend):
    """The router is chosen by the Host's host before its first ':' (edge.rules.split_authority)
    and the Host goes upstream as it came: a value with bytes no host or port holds
    let a client be routed by one host while the backend, reading the value as a URL
    authority, saw another (and X-Forwarded-Port said '@evil.example'). Such values
    are refused as Go's server (so Traefik) refuses them, and the connection closes
    after the 400 (a malformed request ends its connection); a keep-alive connection
    whose Host the express path remembers goes on serving the good ones."""
    e = edge_for(tmp_path, parser, backend)
    good = [b"app.example", b"APP.example.:8080", b"app.example:80"]

    def ask(s: socket.socket, f, host: bytes) -> bytes:
        s.sendall(b"GET /h HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        status = f.readline()
        length = 0
        while (line := f.readline()) != b"\r\n":
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        f.read(length)
        return status.split(b" ")[1]

    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            f = s.makefile("rb")
            assert ask(s, f, good[0]) == b"200"
        for host in MALFORMED_HOSTS:
            with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
                f = s.makefile("rb")
                assert ask(s, f, host) == b"400", host
                assert f.read() == b"", host  # then the connection closes
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            f = s.makefile("rb")
            for host in good:
                assert ask(s, f, host) == b"200", host
        time.sleep(0.3)
        assert [r.header(b"host") for r in backend.requests] == [[good[0]], *([h] for h in good)]
        assert backend.requests[2].header(b"x-forwarded-port") == [b"8080"]
    finally:
        e.stop()


# X- headers a Traefik-style proxy manages that edge does not write, and
# underscore spellings (CGI, WSGI and PHP read X_Forwarded_For as X-Forwarded-For).
SPOOFED = [
    (b"X-Forwarded-Server", b"evil"),
    (b"X-Forwarded-Uri", b"/admin"),
    (b"X-Forwarded-Method", b"DELETE"),
    (b"X-Forwarded-Tls-Client-Cert", b"MIIBforged"),
    (b"X-Forwarded-Tls-Client-Cert-Info", b"Subject%3D%22CN%3Dadmin%22"),
    (b"X-Forwarded-Scheme", b"https"),
    (b"X-Scheme", b"https"),
    (b"X_Forwarded_For", b"10.0.0.1"),
    (b"x_real_ip", b"10.0.0.1"),
    (b"X-Forwarded_Proto", b"https"),
    (b"X_Forwarded-Tls-Client-Cert", b"MIIBforged"),
]


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
def test_forwarded_headers_a_client_may_not_set(tmp_path, parser, backend, trusted):
    """From an untrusted client, edge dropped only the X-Forwarded-For/-Proto/-Host/
    -Port/-Prefix and X-Real-Ip it writes itself; X-Forwarded-Server, -Uri, -Method,
    -Tls-Client-Cert(-Info), -Scheme, X-Scheme and any spelling with underscores went
    through, as the client wrote them, to a backend that may take them for a proxy's
    (Traefik's forwardedheaders drops them all). A trusted client's go on unchanged,
    a Connection token naming one included, as in Traefik."""
    e = edge_for(
        tmp_path, parser, backend, {"forwardedHeaders": {"insecure": True}} if trusted else None
    )
    lines = b"".join(name + b": " + value + b"\r\n" for name, value in SPOOFED)
    try:
        for connection in (b"", b"Connection: keep-alive, X-Forwarded-Server\r\n"):
            answer = exchange(
                e.port, b"GET /f HTTP/1.1\r\nHost: app.example\r\n" + connection + lines + b"\r\n"
            )
            assert answer.startswith(b"HTTP/1.1 200 OK"), answer
        time.sleep(0.3)
        assert len(backend.requests) == 2
        for received in backend.requests:
            kept = [(n, v) for n, v in received.headers if n in {m.lower() for m, _ in SPOOFED}]
            assert kept == ([(n.lower(), v) for n, v in SPOOFED] if trusted else [])
            assert received.header(b"x-forwarded-for") == [b"127.0.0.1"]
            assert received.header(b"x-real-ip") == [b"127.0.0.1"]
            assert received.header(b"x-forwarded-proto") == [b"http"]
    finally:
        e.stop()


FORGED = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"


class StrayBackend(ThreadedServer):
    """A broken HTTP/1.1 server: after each response it sends a second, forged one in
    the same write, answering nothing. It records each request line it reads, with
    the number of its connection; requests carry no body."""

    def __init__(
        self, response: bytes, forged: bytes = FORGED, choose=None, split: bool = False
    ) -> None:
        self.response = response
        self.forged = forged
        self.choose = choose  # head -> response, where it depends on the head
        self.split = split  # each answer in up to three writes (seeded by its head)
        self.lines: list[tuple[int, bytes]] = []
        self.heads: list[bytes] = []  # each head as read, then what followed it up to a CRLF CRLF
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(0.2)
        buf = b""
        deadline = time.monotonic() + 4 * TIMEOUT
        with c:
            while not self.stopped and time.monotonic() < deadline:
                end = buf.find(b"\r\n\r\n")
                if end >= 0:
                    self.lines.append((n, buf[: buf.find(b"\r\n")]))
                    self.heads.append(buf[: end + 4])
                    buf = buf[end + 4 :]
                    data = (
                        self.choose(self.heads[-1]) if self.choose else self.response
                    ) + self.forged
                    cuts = []
                    if self.split and len(data) > 1:
                        rng = random.Random(self.heads[-1])
                        cuts = sorted(
                            rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 2)))
                        )
                    try:
                        for start, stop in zip([0, *cuts], [*cuts, len(data)], strict=True):
                            c.sendall(data[start:stop])
                            if cuts:
                                time.sleep(0.002)
                    except OSError:
                        return
                    continue
                try:
                    data = c.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                buf += data


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\nok",
    ],
    ids=["extra-response", "204-with-body"],
)
def test_pipelined_request_not_written_to_a_connection_that_answered_too_much(
    tmp_path, parser, response
):
    """Bytes after a response in the same read answer nothing: the upstream connection
    is aborted once that read is parsed (edge.http.server.upstream). But the response had
    already put it back in the pool, and a pipelined request waiting on the client
    connection was taken up at once, in the same parse, and written to it; the abort
    then made edge send it again on a new connection: the backend got it twice
    (a DELETE, a POST without a body). Each request must reach the backend once,
    and no client sees the forged response."""
    backend = StrayBackend(response)
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        pipelined = b"".join(
            b"DELETE /item/%d HTTP/1.1\r\nHost: app.example\r\n\r\n" % i for i in range(1, 4)
        )
        answer = exchange(e.port, pipelined)
        time.sleep(0.3)
        assert sorted(line for _, line in backend.lines) == [
            b"DELETE /item/%d HTTP/1.1" % i for i in range(1, 4)
        ]
        assert b"forged" not in answer
        assert answer.count(response.split(b"\r\n")[0]) == 3, answer
    finally:
        e.stop()
        backend.stop()


@pytest.mark.parametrize(
    ("response", "sent"),
    [
        (
            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
        ),
        (
            b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
        ),
        (  # a 304's Content-Length describes the representation: kept
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n",
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n",
        ),
    ],
    ids=["204-content-length", "204-chunked", "304-content-length"],
)
def test_no_framing_header_on_a_204(tmp_path, parser, response, sent):
    """A backend's 204 with a Content-Length (or Transfer-Encoding) went to the client
    as it came; a client or cache in front of edge reading that length as a body
    would take the start of the next response on the connection for it. RFC 9110
    8.6 forbids both on a 204 (Go's server, so Traefik, deletes them)."""
    backend = StrayBackend(response, forged=b"")
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        request = b"GET /n HTTP/1.1\r\nHost: app.example\r\n\r\n"
        answer = exchange(e.port, request + request)
        assert answer == sent + sent
    finally:
        e.stop()
        backend.stop()


@pytest.mark.parametrize(
    ("framing", "body", "canonical"),
    [
        (
            b"Transfer-Encoding: Chunked\r\n",
            b"2\r\nok\r\n0\r\n\r\n",
            b"Transfer-Encoding: chunked\r\n",
        ),
        (
            b"Transfer-Encoding:  CHUNKED \r\n",
            b"2\r\nok\r\n0\r\n\r\n",
            b"Transfer-Encoding: chunked\r\n",
        ),
        (b"Content-Length: 0002\r\n", b"ok", b"Content-Length: 2\r\n"),
    ],
    ids=["chunked-capital", "chunked-upper", "length-zeros"],
)
def test_framing_header_goes_upstream_as_edge_frames_the_body(
    tmp_path, parser, framing, body, canonical
):
    """A head with nothing to rewrite goes upstream as its own bytes, and a request's
    Transfer-Encoding or Content-Length went as the client spelt it: ``Chunked``,
    ``0002``. Both are valid, but a server comparing ``chunked`` exactly reads no
    body and takes the chunks for the next request (Traefik's Go client always
    writes ``chunked`` and the length in plain digits). They now go as edge writes
    them, the head rebuilt."""
    backend = StrayBackend(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", forged=b"")
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        answer = exchange(
            e.port, b"POST /b HTTP/1.1\r\nHost: app.example\r\n" + framing + b"\r\n" + body
        )
        assert answer.startswith(b"HTTP/1.1 200 OK"), answer
        head = backend.heads[0]
        assert canonical in head and framing not in head, head
    finally:
        e.stop()
        backend.stop()


@pytest.mark.parametrize(
    ("size", "refused"),
    [(b"ffffffffffffffff", True), (b"8000000000000000", True), (b"7fffffffffffffff", False)],
    ids=["2**64-1", "2**63", "2**63-1"],
)
def test_chunk_sizes_above_2_63_minus_1_are_refused(tmp_path, parser, backend, size, refused):
    """A chunk size above 2**63 - 1 is answered 400 and the connection closed, as
    nginx answers it; llhttp (the httptools codec) and the h11 codec took sizes up
    to 2**64 - 1 and streamed the data on. 2**63 - 1 is taken: the backend, which
    answers a head at once, gets the chunk's data as edge frames it."""
    e = edge_for(tmp_path, parser, backend)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n\r\n"
                + size
                + b"\r\nabc"
            )
            if refused:
                answer, closed = read_until_closed(s, TIMEOUT)
                assert answer.startswith(b"HTTP/1.1 400 ") and b"Connection: close\r\n" in answer, (
                    answer
                )
                assert closed and answer.count(b"HTTP/1.1 ") == 1
            else:
                answer = harness.read_response(s)
                assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"\r\n\r\nok"), (
                    answer
                )
                deadline = time.monotonic() + TIMEOUT
                while (
                    not backend.requests or backend.requests[0].body != b"abc"
                ) and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert [(r.target, r.body) for r in backend.requests] == [(b"/up", b"abc")]
    finally:
        e.stop()


SWITCHED = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"


def h2c_server(head: bytes) -> bytes:
    """An h2c-capable server: it switches when asked (what follows, HTTP/2 in life, is
    read here as HTTP/1.1 heads and recorded all the same)."""
    if b"\r\nupgrade: h2c\r\n" in head.lower():
        return SWITCHED
    return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def test_h2c_upgrade_is_not_handed_to_the_backend(tmp_path, parser):
    """Edge forwarded Upgrade: h2c and, on the backend's 101, spliced the connection to
    it: every later request on that connection (HTTP/2 in life) reached the backend
    past edge's routers and middlewares (h2c smuggling: here /secret, which no router
    serves). Edge speaks no h2c, so the upgrade is now ignored (RFC 9110 7.8): the
    request goes as plain HTTP/1.1 and the connection stays edge's."""
    backend = StrayBackend(b"", forged=b"", choose=h2c_server)
    rule = "Host(`app.example`) && PathPrefix(`/public`)"
    dyn = {
        "http": {
            "routers": {"app": {"rule": rule, "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"GET /public HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
            )
            s.settimeout(0.5)
            first = s.recv(65536)
            s.sendall(b"GET /secret HTTP/1.1\r\nHost: app.example\r\n\r\n")
            try:
                second = s.recv(65536)
            except TimeoutError:
                second = b""
        time.sleep(0.3)
        assert [line for _, line in backend.lines] == [b"GET /public HTTP/1.1"]
        assert (
            b"upgrade" not in backend.heads[0].lower()
            and b"http2-settings" not in backend.heads[0].lower()
        )
        assert first.startswith(b"HTTP/1.1 200 OK"), first
        assert second.startswith(b"HTTP/1.1 404 "), second
    finally:
        e.stop()
        backend.stop()


def _spelt(rng: random.Random, name: bytes) -> bytes:
    return bytes(c ^ 0x20 if chr(c).isalpha() and rng.random() < 0.3 else c for c in name)


def random_request(rng: random.Random, i: int) -> tuple[bytes, tuple[bytes, bytes, bytes]]:
    """A valid request, framed in one of the ways a client may (case, whitespace,
    leading zeros, chunk extensions and trailers, Expect), and what a backend must
    parse of it: (method, target, body)."""

    def ows() -> bytes:
        return rng.choice([b"", b" ", b"  ", b"\t", b" \t"])

    method = rng.choice([b"GET", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS"])
    target = b"/r%d" % i + rng.choice([b"", b"?q=1", b"/x", b"?a=b&c=%20"])
    lines = [
        _spelt(rng, b"Host")
        + b":"
        + ows()
        + rng.choice([b"app.example", b"APP.example", b"app.example:80"])
        + ows()
    ]
    for _ in range(rng.randint(0, 4)):
        name = rng.choice(
            [
                b"X-A",
                b"Accept",
                b"X-Request-Id",
                b"Cookie",
                b"TE",
                b"Keep-Alive",
                b"X-Forwarded-For",
                b"X_Forwarded_For",
            ]
        )
        lines.append(name + b":" + ows() + b"v%d" % rng.randint(0, 99) + ows())
    if rng.random() < 0.3:
        lines.append(
            _spelt(rng, b"Connection")
            + b": "
            + rng.choice([b"keep-alive", b"Keep-Alive", b"keep-alive, x-a", b"TE"])
        )
    body = framed = b""
    kind = rng.choice(["none", "none", "length", "chunked"])
    if kind == "length":
        body = rng.randbytes(rng.randint(0, 300))
        zeros = b"00" if rng.random() < 0.2 else b""
        lines.append(
            _spelt(rng, b"Content-Length") + b":" + ows() + zeros + b"%d" % len(body) + ows()
        )
        framed = body
    elif kind == "chunked":
        lines.append(
            _spelt(rng, b"Transfer-Encoding")
            + b":"
            + ows()
            + rng.choice([b"chunked", b"Chunked", b"CHUNKED"])
        )
        for _ in range(rng.randint(0, 4)):
            piece = rng.randbytes(rng.randint(1, 100))
            body += piece
            size = (b"0" if rng.random() < 0.2 else b"") + b"%X" % len(piece)
            framed += (
                size + rng.choice([b"", b";a=b", b';x="y z"', b";e"]) + b"\r\n" + piece + b"\r\n"
            )
        framed += (
            b"0"
            + rng.choice([b"", b";last"])
            + b"\r\n"
            + rng.choice([b"", b"X-T: 1\r\n"])
            + b"\r\n"
        )
    if body and rng.random() < 0.2:
        lines.append(b"Expect: 100-continue")
    rng.shuffle(lines)
    head = (
        method
        + b" "
        + target
        + b" HTTP/1.1\r\n"
        + b"".join(line + b"\r\n" for line in lines)
        + b"\r\n"
    )
    return head + framed, (method, target, body)


def test_random_pipelined_streams_reach_the_backend_intact(tmp_path, parser):
    """Random valid requests, pipelined and split at random offsets: the backend (h11,
    reading each whole request before it answers) parses exactly the requests sent,
    in order, each with its body, none with a client's X_Forwarded_For; the client
    gets one answer per request. 40 streams of up to 5 requests, seeded per codec;
    the review ran 600 such streams with no disagreement."""
    rng = random.Random(f"smuggling-review-{parser}")
    backend = H11Backend(after_body=True)
    e = edge_for(tmp_path, parser, backend)
    try:
        for n in range(40):
            requests = [random_request(rng, i) for i in range(rng.randint(1, 5))]
            stream = b"".join(data for data, _ in requests)
            cuts = sorted(
                rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 4)))
            )
            with backend.lock:
                backend.requests.clear()
            got = b""
            with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
                for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
                    s.sendall(stream[start:end])
                    time.sleep(0.002)
                deadline = time.monotonic() + TIMEOUT
                while got.count(b"HTTP/1.1 200 OK") < len(requests) and time.monotonic() < deadline:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    got += chunk
            with backend.lock:
                seen = list(backend.requests)
            expected = [want for _, want in requests]
            assert [(r.method, r.target, r.body) for r in seen] == expected, (n, cuts, stream)
            assert all(r.header(b"x_forwarded_for") == [] for r in seen), (n, stream)
            assert got.count(b"HTTP/1.1 200 OK") == len(requests), (n, got)
        assert backend.errors == []
    finally:
        e.stop()
        backend.stop()


def read_response(f) -> tuple[bytes, bytes]:
    """(head, body) of one Content-Length response from a socket file."""
    head = f.readline()
    length = 0
    while (line := f.readline()) not in (b"\r\n", b""):
        head += line
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, f.read(length)


def test_http10_keep_alive_answers_say_so(tmp_path, parser, backend):
    """An HTTP/1.0 client asking for keep-alive had its connection kept, but the answer
    did not say so: such a client takes an answer without ``Connection: keep-alive``
    as the end of the connection (RFC 9112 C.2.2; nginx and Go's server write it).
    Proxied answers and edge's own (404) now say it; the last request, without
    keep-alive, is answered with ``Connection: close`` and the connection closes."""
    e = edge_for(tmp_path, parser, backend)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            f = s.makefile("rb")
            for host in (b"app.example", b"nowhere.example", b"app.example"):
                s.sendall(
                    b"GET /k HTTP/1.0\r\nHost: " + host + b"\r\nConnection: Keep-Alive\r\n\r\n"
                )
                head, _ = read_response(f)
                assert head.split(b" ")[1] == (b"404" if host == b"nowhere.example" else b"200"), (
                    head
                )
                assert b"\r\nConnection: keep-alive\r\n" in head, head
            s.sendall(b"GET /k HTTP/1.0\r\nHost: app.example\r\n\r\n")
            head, body = read_response(f)
            assert (
                head.startswith(b"HTTP/1.1 200 OK")
                and b"\r\nConnection: close\r\n" in head
                and body == b"ok"
            ), head
            assert f.read() == b""  # closed
        assert len(backend.requests) == 3
    finally:
        e.stop()


def test_http10_upgrade_is_ignored(tmp_path, parser):
    """RFC 9110 7.8: a server MUST ignore Upgrade in an HTTP/1.0 request. Edge
    forwarded it, and a backend's 101 made the connection a tunnel to it; now the
    request goes as a plain one, without Upgrade, and the connection stays edge's."""

    def server(head: bytes) -> bytes:
        if b"\r\nupgrade: websocket\r\n" in head.lower():
            return b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    backend = StrayBackend(b"", forged=b"", choose=server)
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        answer = exchange(
            e.port,
            b"GET /ws HTTP/1.0\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"ok"), answer
        assert b"upgrade" not in backend.heads[0].lower(), backend.heads[0]
    finally:
        e.stop()
        backend.stop()


def random_response(rng: random.Random, i: int, method: bytes) -> tuple[bytes, int, bytes]:
    """A valid response to request ``i`` as a server may write it (header case,
    whitespace, leading zeros, chunk extensions and trailers, a 103 first, a 204 or
    304 with other headers, a value that changes from response to response, which
    the quick paths cut around), and what a client must read of it: (bytes, status, body)."""

    def ows() -> bytes:
        return rng.choice([b"", b" ", b"  ", b"\t"])

    kind = rng.choice(["length", "length", "chunked", "204", "304", "interim", "varied"])
    extra = b"".join(
        rng.choice([b"Server: t\r\n", b"Date: d%d\r\n" % rng.randint(0, 3), b'ETag: "e"\r\n', b""])
        for _ in range(3)
    )
    body = rng.randbytes(rng.randint(0, 200))
    sent = body if method != b"HEAD" else b""
    if kind == "chunked":
        head = (
            b"HTTP/1.1 200 OK\r\n"
            + extra
            + b"Transfer-Encoding:"
            + ows()
            + rng.choice([b"chunked", b"Chunked"])
            + b"\r\n\r\n"
        )
        if method == b"HEAD":
            return head, 200, b""
        framed, rest = b"", body
        while rest:
            n = rng.randint(1, len(rest))
            framed += b"%x" % n + rng.choice([b"", b";a=b"]) + b"\r\n" + rest[:n] + b"\r\n"
            rest = rest[n:]
        return head + framed + b"0\r\n" + rng.choice([b"", b"T: 1\r\n"]) + b"\r\n", 200, body
    if kind == "204":
        return (
            b"HTTP/1.1 204 No Content\r\n"
            + extra
            + rng.choice([b"", b"Content-Length: 0\r\n"])
            + b"\r\n",
            204,
            b"",
        )
    if kind == "304":
        return (
            b"HTTP/1.1 304 Not Modified\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body),
            304,
            b"",
        )
    if kind == "varied":
        return (
            b"HTTP/1.1 200 OK\r\nX-Req: %d\r\nContent-Length: %d\r\n\r\n" % (i, len(body)) + sent,
            200,
            sent,
        )
    name = rng.choice([b"Content-Length", b"content-length", b"CONTENT-LENGTH"])
    length = rng.choice([b"", b"", b"0"]) + b"%d" % len(body)
    head = b"HTTP/1.1 200 OK\r\n" + extra + name + b":" + ows() + length + ows() + b"\r\n\r\n"
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" if kind == "interim" else b""
    return early + head + sent, 200, sent


def scripted(seed: str):
    """A server's answer to ``GET /r/<i>`` (or HEAD): ``random_response`` for ``i``."""

    def answer(head: bytes) -> bytes:
        method, target = head[: head.find(b"\r\n")].split(b" ")[:2]
        i = int(target.rsplit(b"/", 1)[1])
        return random_response(random.Random(f"{seed}-{i}"), i, method)[0]

    return answer


def test_random_responses_reach_the_client_intact(tmp_path, parser):
    """The response side of the random streams: 120 responses a server may write,
    each split in up to three writes, to GET and HEAD requests on one keep-alive
    connection (so the quick paths remember heads and cut around changing values).
    A strict client (h11) reads each status and body as the server meant, and no
    204 carries Content-Length or Transfer-Encoding. The review ran 1,200 (both
    codecs) with no disagreement."""
    seed = f"responses-{parser}"
    backend = StrayBackend(b"", forged=b"", choose=scripted(seed), split=True)
    e = edge_for(tmp_path, parser, backend)
    rng = random.Random(seed)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            client = h11.Connection(h11.CLIENT)
            for i in range(120):
                method = rng.choice([b"GET", b"GET", b"GET", b"HEAD"])
                request = h11.Request(
                    method=method, target=b"/r/%d" % i, headers=[(b"Host", b"app.example")]
                )
                s.sendall(client.send(request) + client.send(h11.EndOfMessage()))
                status, headers, body = 0, [], b""
                while True:
                    event = client.next_event()
                    if event is h11.NEED_DATA:
                        client.receive_data(s.recv(65536))
                    elif type(event) is h11.Response:
                        status, headers = event.status_code, event.headers
                    elif type(event) is h11.Data:
                        body += event.data
                    elif type(event) is h11.EndOfMessage:
                        break
                    else:
                        assert type(event) is h11.InformationalResponse, event
                _, want_status, want_body = random_response(random.Random(f"{seed}-{i}"), i, method)
                assert (status, body) == (want_status, want_body), (i, method, headers)
                if status == 204:
                    assert not {b"content-length", b"transfer-encoding"} & {
                        n for n, _ in headers
                    }, headers
                client.start_next_cycle()
    finally:
        e.stop()
        backend.stop()
