"""Adversarial review of the HTTP/1.1 front end (issue 12 item 4): what a backend receives.

Each test sends edge bytes a client controls and reads what a real backend, an
HTTP/1.1 server that keeps to the framing it is given (h11, in a thread, on
127.0.0.1), parsed off the wire: which requests, with which Host and body, on
which connection. The backend answers each request as soon as its head is in,
before reading any body, as nginx's ``return`` or a static file does, and then
reads and drops the body the head announced: so a body announced and not sent
makes it take the next request on that pooled connection for the body.
"""

from __future__ import annotations

import socket
import threading
import time

import h11
import pytest

from tests.harness import Edge, lb

TIMEOUT = 5.0


class Received:
    """One request as the backend parsed it."""

    def __init__(self, conn: int, request: h11.Request) -> None:
        self.conn = conn
        self.method = request.method
        self.target = request.target
        self.headers = [(n.lower(), v) for n, v in request.headers]
        self.body = b""

    def header(self, name: bytes) -> list[bytes]:
        return [v for n, v in self.headers if n == name]


class H11Backend:
    """An HTTP/1.1 server answering 200 ``ok`` to every request head, recording what it parsed."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[Received] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stopped = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        n = 0
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except TimeoutError:
                continue
            n += 1
            t = threading.Thread(target=self._serve, args=(c, n), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(0.2)
        conn = h11.Connection(h11.SERVER)
        current: Received | None = None
        deadline = time.monotonic() + 4 * TIMEOUT
        try:
            while not self.stopped and time.monotonic() < deadline:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = c.recv(65536)
                    except TimeoutError:
                        continue
                    conn.receive_data(data)
                    if not data:
                        return
                elif type(event) is h11.Request:
                    current = Received(n, event)
                    with self.lock:
                        self.requests.append(current)
                    c.sendall(conn.send(h11.Response(status_code=200, reason=b"OK", headers=[(b"Content-Length", b"2")])))
                    c.sendall(conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage()))
                elif type(event) is h11.Data:
                    current.body += event.data
                elif type(event) is h11.EndOfMessage:
                    conn.start_next_cycle()
                else:  # ConnectionClosed
                    return
        except (h11.RemoteProtocolError, OSError) as exc:
            with self.lock:
                self.errors.append(f"connection {n}: {exc!r}")
        finally:
            c.close()

    def stop(self) -> None:
        self.stopped = True
        for t in self.threads:
            t.join(2)
        self.sock.close()


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
    return Edge(tmp_path, dyn, parser=parser, entrypoints={"web": {"address": "127.0.0.1:0", **(entrypoint or {})}})


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection; what edge answers until it closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(data)
        s.settimeout(0.5)
        out = b""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out


VICTIM = b"GET /victim HTTP/1.1\r\nHost: app.example\r\nCookie: secret\r\n\r\n"


@pytest.mark.parametrize(
    "framing",
    [b"Content-Length: 40\r\n", b"Transfer-Encoding: chunked\r\n"],
    ids=["content-length", "chunked"],
)
def test_upgrade_request_with_a_body_cannot_swallow_the_next_request(tmp_path, parser, backend, framing):
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
        assert [(r.method, r.target, r.body) for r in backend.requests] == [(b"GET", b"/victim", b"")]
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
    are refused as Go's server (so Traefik) refuses them; the same connection, a
    keep-alive one whose Host the express path remembers, goes on serving."""
    e = edge_for(tmp_path, parser, backend)
    good = [b"app.example", b"APP.example.:8080", b"app.example:80"]
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            f = s.makefile("rb")
            for host in [good[0], *MALFORMED_HOSTS, *good]:
                s.sendall(b"GET /h HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
                status = f.readline()
                length = 0
                while (line := f.readline()) != b"\r\n":
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                f.read(length)
                expected = b"200" if host in good else b"400"
                assert status.split(b" ")[1] == expected, (host, status)
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
    e = edge_for(tmp_path, parser, backend, {"forwardedHeaders": {"insecure": True}} if trusted else None)
    lines = b"".join(name + b": " + value + b"\r\n" for name, value in SPOOFED)
    try:
        for connection in (b"", b"Connection: keep-alive, X-Forwarded-Server\r\n"):
            answer = exchange(e.port, b"GET /f HTTP/1.1\r\nHost: app.example\r\n" + connection + lines + b"\r\n")
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


class StrayBackend:
    """A broken HTTP/1.1 server: after each response it sends a second, forged one in
    the same write, answering nothing. It records each request line it reads, with
    the number of its connection; requests carry no body."""

    def __init__(self, response: bytes, forged: bytes = FORGED, choose=None) -> None:
        self.response = response
        self.forged = forged
        self.choose = choose  # head -> response, where it depends on the head
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.lines: list[tuple[int, bytes]] = []
        self.heads: list[bytes] = []  # each head as read, then what followed it up to a CRLF CRLF
        self.stopped = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        n = 0
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except TimeoutError:
                continue
            n += 1
            t = threading.Thread(target=self._serve, args=(c, n), daemon=True)
            self.threads.append(t)
            t.start()

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
                    try:
                        c.sendall((self.choose(self.heads[-1]) if self.choose else self.response) + self.forged)
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

    def stop(self) -> None:
        self.stopped = True
        for t in self.threads:
            t.join(2)
        self.sock.close()


@pytest.mark.parametrize(
    "response",
    [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\nok"],
    ids=["extra-response", "204-with-body"],
)
def test_pipelined_request_not_written_to_a_connection_that_answered_too_much(tmp_path, parser, response):
    """Bytes after a response in the same read answer nothing: the upstream connection
    is aborted once that read is parsed (edge.http.upstream). But the response had
    already put it back in the pool, and a pipelined request waiting on the client
    connection was taken up at once, in the same parse, and written to it; the abort
    then made edge send it again on a new connection: the backend got it twice
    (a DELETE, a POST without a body). Each request must reach the backend once,
    and no client sees the forged response."""
    backend = StrayBackend(response)
    dyn = {"http": {"routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}}, "services": {"app": lb(backend.url)}}}
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        pipelined = b"".join(b"DELETE /item/%d HTTP/1.1\r\nHost: app.example\r\n\r\n" % i for i in range(1, 4))
        answer = exchange(e.port, pipelined)
        time.sleep(0.3)
        assert sorted(line for _, line in backend.lines) == [b"DELETE /item/%d HTTP/1.1" % i for i in range(1, 4)]
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
    dyn = {"http": {"routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}}, "services": {"app": lb(backend.url)}}}
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
        (b"Transfer-Encoding: Chunked\r\n", b"2\r\nok\r\n0\r\n\r\n", b"Transfer-Encoding: chunked\r\n"),
        (b"Transfer-Encoding:  CHUNKED \r\n", b"2\r\nok\r\n0\r\n\r\n", b"Transfer-Encoding: chunked\r\n"),
        (b"Content-Length: 0002\r\n", b"ok", b"Content-Length: 2\r\n"),
    ],
    ids=["chunked-capital", "chunked-upper", "length-zeros"],
)
def test_framing_header_goes_upstream_as_edge_frames_the_body(tmp_path, parser, framing, body, canonical):
    """A head with nothing to rewrite goes upstream as its own bytes, and a request's
    Transfer-Encoding or Content-Length went as the client spelt it: ``Chunked``,
    ``0002``. Both are valid, but a server comparing ``chunked`` exactly reads no
    body and takes the chunks for the next request (Traefik's Go client always
    writes ``chunked`` and the length in plain digits). They now go as edge writes
    them, the head rebuilt."""
    backend = StrayBackend(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", forged=b"")
    dyn = {"http": {"routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}}, "services": {"app": lb(backend.url)}}}
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        answer = exchange(e.port, b"POST /b HTTP/1.1\r\nHost: app.example\r\n" + framing + b"\r\n" + body)
        assert answer.startswith(b"HTTP/1.1 200 OK"), answer
        head = backend.heads[0]
        assert canonical in head and framing not in head, head
    finally:
        e.stop()
        backend.stop()


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
    dyn = {"http": {"routers": {"app": {"rule": rule, "service": "app"}}, "services": {"app": lb(backend.url)}}}
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
        assert b"upgrade" not in backend.heads[0].lower() and b"http2-settings" not in backend.heads[0].lower()
        assert first.startswith(b"HTTP/1.1 200 OK"), first
        assert second.startswith(b"HTTP/1.1 404 "), second
    finally:
        e.stop()
        backend.stop()
