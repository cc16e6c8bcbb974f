"""forwardAuth through a real entrypoint, under both codecs, with a purpose-built
auth server (h11, in threads) deciding by the X-Forwarded-Uri edge sends it: 200
with headers to copy and cookies, 401 with WWW-Authenticate and a body, 302 with a
relative Location, an answer that never comes within the middleware's timeout
(Traefik's 30 s by default; 1 s in a middleware the test builds and serves in its
own loop: 500), and no server at all (500); the auth requests' X-Forwarded-* headers, methods and
keep-alive connections; and a bad address or regexp disabling only that
middleware, with the key in the API."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import logging
import socket
import ssl
import threading
import time

import h11
import pytest

from edge.config.dynamic import ForwardAuth as ForwardAuthConfig
from edge.http.middlewares.forwardauth import forward_auth
from tests.harness import Edge, get
from tests.integration.http.test_middleware_hooks import read_response, serve
from tests.integration.http.test_middleware_hooks import run as run_loop
from tests.integration.peers import ThreadedServer

TIMEOUT = 10.0


class Peer(ThreadedServer):
    """An HTTP/1.1 server answering with ``answer(request)``: (status, headers, body,
    seconds to hold the answer back). It keeps what it received: (connection number,
    method, target, headers, body: a bytearray filled as the body comes)."""

    def __init__(self, answer, context: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.context = context
        self.peer_certs: list[dict] = []  # the TLS clients' certificates, as ssl reads them
        self.received: list[tuple[int, bytes, bytes, list[tuple[bytes, bytes]], bytearray]] = []
        self.closed: set[int] = set()  # connections the other side closed
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        if self.context is not None:
            c.settimeout(TIMEOUT)
            try:
                c = self.context.wrap_socket(c, server_side=True)
            except (OSError, ssl.SSLError):
                c.close()
                return
            with self.lock:
                self.peer_certs.append(c.getpeercert())
        c.settimeout(0.2)
        conn = h11.Connection(h11.SERVER)
        deadline = time.monotonic() + 60
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
                        with self.lock:
                            self.closed.add(n)
                        return
                    continue
                if isinstance(event, h11.Request):
                    headers = [(k, v) for k, v in event.headers]
                    request = (n, event.method, event.target, headers, bytearray())
                    with self.lock:
                        self.received.append(request)
                    continue
                if isinstance(event, h11.Data):
                    request[4].extend(event.data)
                    continue
                if isinstance(event, h11.EndOfMessage):
                    status, headers, body, hold = self.answer(request)
                    if request[1] == b"HEAD" or status in (204, 304):
                        body = b""  # the head alone (h11 frames a HEAD's as a GET's)
                    until = time.monotonic() + hold
                    while time.monotonic() < until and not self.stopped:
                        if self._gone(c):  # the other side gave up waiting
                            with self.lock:
                                self.closed.add(n)
                            return
                    c.sendall(
                        conn.send(h11.Response(status_code=status, headers=headers))
                        + conn.send(h11.Data(data=body))
                        + conn.send(h11.EndOfMessage())
                    )
                    conn.start_next_cycle()
                    continue
                if isinstance(event, h11.ConnectionClosed):
                    return
        except (OSError, h11.ProtocolError):
            return
        finally:
            c.close()

    @staticmethod
    def _gone(c: socket.socket) -> bool:
        """Whether the peer closed ``c`` (waits up to 50 ms; plain sockets only)."""
        c.settimeout(0.05)
        try:
            return c.recv(1, socket.MSG_PEEK) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        finally:
            c.settimeout(0.2)

    def since(self, mark: int) -> list:
        with self.lock:
            return self.received[mark:]


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [v for n, v in headers if n.lower() == name]


def decide(request) -> tuple[int, list, bytes, float]:
    """The auth server: by the path the client asked for (X-Forwarded-Uri); under
    /body, by the body it got (forwardBody): 200 when it says "open sesame"."""
    _, _, _, headers, body = request
    uri = (header(headers, b"x-forwarded-uri") or [b""])[0]
    if uri.startswith(b"/body"):
        if body.startswith(b"open sesame"):
            return 200, [(b"X-Auth-Body", b"%d" % len(body))], b"", 0.0
        return 401, [(b"X-Reason", b"wrong words")], b"no\n", 0.0
    if uri.startswith(b"/ok"):
        return (
            200,
            [
                (b"X-Auth-User", b"ann"),
                (b"X-Auth-Group", b"g1"),
                (b"X-Auth-Group", b"g2"),
                (b"X-Auth-Secret", b"not copied"),
                (b"Foo-Bar", b"auth-value"),
                (b"Set-Cookie", b"authCookie=Auth; Path=/"),
                (b"Set-Cookie", b"authCookieNotAdded=Auth"),
            ],
            b"ok\n",
            0.0,
        )
    if uri.startswith(b"/deny"):
        return (
            401,
            [
                (b"WWW-Authenticate", b'Basic realm="auth server"'),
                (b"Set-Cookie", b"tried=1; Path=/"),
                (b"Content-Type", b"text/plain"),
                (b"X-Reason", b"no token"),
            ],
            b"go away\n",
            0.0,
        )
    if uri.startswith(b"/login"):
        return 302, [(b"Location", b"/signin?from=edge")], b"see /signin\n", 0.0
    if uri.startswith(b"/slow"):
        return 200, [], b"too late\n", 40.0
    return 403, [], b"forbidden\n", 0.0


def backend_answer(request) -> tuple[int, list, bytes, float]:
    """The upstream: what it received as JSON, and cookies of its own; a path
    ending in ``/status/<n>`` is answered with that status (no body for 204, 304)."""
    _, method, target, headers, got = request
    seen: dict[str, list[str]] = {}
    for n, v in headers:
        seen.setdefault(n.decode().lower(), []).append(v.decode())
    body = json.dumps(
        {
            "method": method.decode(),
            "target": target.decode(),
            "headers": seen,
            "body": hashlib.sha256(got).hexdigest(),
        }
    )
    _, marker, status = target.rpartition(b"/status/")
    return (
        int(status) if marker else 200,
        [
            (b"Content-Type", b"application/json"),
            (b"Set-Cookie", b"authCookie=Backend"),
            (b"Set-Cookie", b"backendCookie=Backend"),
        ],
        body.encode(),
        0.0,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def peers():
    auth, backend = Peer(decide), Peer(backend_answer)
    yield auth, backend
    auth.stop()
    backend.stop()


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, peers):
    auth, backend = peers
    address = auth.url + "/verify?app=edge"
    middlewares = {
        "auth": {
            "forwardAuth": {
                "address": address,
                "authResponseHeaders": ["X-Auth-User", "x-auth-group"],
                "authResponseHeadersRegex": "^Foo-",
                "addAuthCookiesToResponse": ["authCookie"],
            }
        },
        "trusting": {"forwardAuth": {"address": address, "trustForwardHeader": True}},
        "method": {
            "forwardAuth": {
                "address": address,
                "preserveRequestMethod": True,
                "preserveLocationHeader": True,
            }
        },
        "signin": {"forwardAuth": {"address": address, "authSigninURL": "https://login.test/"}},
        "down": {"forwardAuth": {"address": f"http://127.0.0.1:{closed_port()}/"}},
        "small": {"forwardAuth": {"address": address, "maxResponseBodySize": 2}},
        "body": {
            "forwardAuth": {
                "address": address,
                "forwardBody": True,
                "authResponseHeaders": ["X-Auth-Body"],
            }
        },
        "body-max": {"forwardAuth": {"address": address, "forwardBody": True, "maxBodySize": 16}},
        "bad-address": {"forwardAuth": {"address": "auth.test:9000"}},
        "bad-regex": {"forwardAuth": {"address": address, "authResponseHeadersRegex": "(?=x)"}},
    }
    routers = {
        name: {"rule": f"Host(`{name}.test`)", "service": "app", "middlewares": [name]}
        for name in middlewares
    }
    routers["open"] = {"rule": "Host(`open.test`)", "service": "app"}
    dyn = {
        "http": {
            "routers": routers,
            "services": {"app": {"loadBalancer": {"servers": [{"url": backend.url}]}}},
            "middlewares": middlewares,
        }
    }
    tmp = tmp_path_factory.mktemp(f"forward-auth-{request.param}")
    e = Edge(tmp, dyn, parser=request.param, static_extra={"api": {"insecure": True}})
    yield e
    e.stop()


def fetch(
    edge: Edge,
    host: str,
    path: str,
    headers: dict | None = None,
    method: str = "GET",
    body: bytes | None = None,
    conn: http.client.HTTPConnection | None = None,
) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, every header line, body) of one request."""
    own = conn is None
    if conn is None:
        conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=45)
    try:
        conn.request(method, path, body=body, headers={"Host": host, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.getheaders(), resp.read()
    finally:
        if own:
            conn.close()


def values(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [v for n, v in headers if n.lower() == name.lower()]


def test_200_forwards_with_the_answers_headers_and_cookies(edge, peers):
    """Traefik's TestForwardAuthSuccess through edge: the named headers (all of their
    values) and those ^Foo- matches come from the auth answer in place of the
    client's; the response gets the auth answer's authCookie in place of the
    upstream's, and keeps the upstream's other cookies."""
    auth, _ = peers
    mark = len(auth.since(0))
    status, headers, body = fetch(
        edge,
        "auth.test",
        "/ok/x?q=1",
        {"X-Auth-Group": "admin_group", "Foo-Bar": "client", "Foo-Baz": "client",
         "X-Auth-User": "mallory", "X-Forwarded-Uri": "/spoofed"},
    )  # fmt: skip
    assert status == 200, body
    seen = json.loads(body)["headers"]
    assert seen["x-auth-user"] == ["ann"]
    assert seen["x-auth-group"] == ["g1", "g2"]
    assert seen["foo-bar"] == ["auth-value"]
    assert "foo-baz" not in seen and "x-auth-secret" not in seen
    assert values(headers, "Set-Cookie") == ["backendCookie=Backend", "authCookie=Auth; Path=/"]
    # What the auth server was asked: GET /verify?app=edge with Traefik's headers.
    _, method, target, asked, _ = auth.since(mark)[-1]
    assert (method, target) == (b"GET", b"/verify?app=edge")
    assert header(asked, b"host") == [f"127.0.0.1:{auth.port}".encode()]
    assert header(asked, b"x-forwarded-method") == [b"GET"]
    assert header(asked, b"x-forwarded-proto") == [b"http"]
    assert header(asked, b"x-forwarded-host") == [b"auth.test"]
    assert header(asked, b"x-forwarded-uri") == [b"/ok/x?q=1"]  # the client's own is not
    assert header(asked, b"x-forwarded-for") == [b"127.0.0.1"]
    assert header(asked, b"x-auth-user") == [b"mallory"]  # the client's headers go along
    assert header(asked, b"content-length") == []  # a GET without a body
    assert header(asked, b"user-agent") == []  # http.client sent none: none is made up


def test_auth_cookies_reach_bodiless_responses(edge):
    """addAuthCookiesToResponse on responses without a body, as Traefik's response
    modifier sees every response: the upstream's answer to a HEAD, a 204, a 304 get
    the auth server's authCookie in place of theirs; no body, and the connection
    serves the next request."""
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=TIMEOUT)
    try:
        for method, path, expected in (
            ("HEAD", "/ok/x", 200),
            ("GET", "/ok/status/204", 204),
            ("GET", "/ok/status/304", 304),
        ):
            status, headers, body = fetch(edge, "auth.test", path, method=method, conn=conn)
            assert (status, body) == (expected, b"")
            assert values(headers, "Set-Cookie") == [
                "backendCookie=Backend",
                "authCookie=Auth; Path=/",
            ]
        status, _, body = fetch(edge, "auth.test", "/ok/after", conn=conn)
        assert status == 200 and json.loads(body)["target"] == "/ok/after"
    finally:
        conn.close()


def test_401_goes_to_the_client_as_it_came(edge, peers):
    """Traefik's TestForwardAuthFail/FailResponseHeaders: status, WWW-Authenticate,
    Set-Cookie, the other headers and the body of the auth answer; no upstream."""
    _, backend = peers
    before = len(backend.since(0))
    status, headers, body = fetch(edge, "auth.test", "/deny/me")
    assert (status, body) == (401, b"go away\n")
    assert values(headers, "WWW-Authenticate") == ['Basic realm="auth server"']
    assert values(headers, "Set-Cookie") == ["tried=1; Path=/"]
    assert values(headers, "X-Reason") == ["no token"]
    assert values(headers, "Content-Type") == ["text/plain"]
    assert values(headers, "Content-Length") == ["8"]
    assert len(backend.since(0)) == before


def test_302_location_resolved_against_the_address_or_preserved(edge, peers):
    auth, _ = peers
    status, headers, body = fetch(edge, "auth.test", "/login")
    assert (status, body) == (302, b"see /signin\n")
    assert values(headers, "Location") == [f"http://127.0.0.1:{auth.port}/signin?from=edge"]
    status, headers, _ = fetch(edge, "method.test", "/login")
    assert (status, values(headers, "Location")) == (302, ["/signin?from=edge"])


def test_other_refusals_and_the_signin_redirect(edge):
    status, headers, body = fetch(edge, "auth.test", "/other")
    assert (status, body) == (403, b"forbidden\n")
    status, headers, body = fetch(edge, "signin.test", "/deny")
    assert status == 302
    assert values(headers, "Location") == ["https://login.test/"]
    assert body == b'<a href="https://login.test/">Found</a>.\n\n'


def test_method_is_get_unless_preserved(edge, peers):
    auth, _ = peers
    mark = len(auth.since(0))
    assert fetch(edge, "auth.test", "/ok", method="POST", body=b"abc")[0] == 200
    assert fetch(edge, "method.test", "/ok", method="POST", body=b"abc")[0] == 200
    asked = auth.since(mark)
    assert [(r[1], header(r[3], b"x-forwarded-method")) for r in asked] == [
        (b"GET", [b"POST"]),
        (b"POST", [b"POST"]),
    ]
    assert header(asked[1][3], b"content-length") == [b"0"]  # no forwardBody: no body


def chunks(data: bytes, size: int = 8192):
    """``data`` in pieces, for http.client to send chunked."""
    return (data[i : i + size] for i in range(0, len(data), size))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_forward_body_goes_to_the_auth_server_and_whole_upstream(edge, peers, framing):
    """Traefik's TestForwardAuthForwardBody: the auth server gets the body (framed as
    the client's: Content-Length, or chunked) and decides by it; on a 2xx the upstream
    gets it whole, unchanged; on a refusal nobody else does. Past the high-water mark
    too (2 MiB, unlimited by default): edge reads on while the step reads the body."""
    auth, backend = peers
    for body, expected in (
        (b"open sesame: small", 200),
        (b"open sesame" + bytes(range(256)) * 8192, 200),
        (b"wrong words", 401),
    ):
        mark, before = len(auth.since(0)), len(backend.since(0))
        conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=TIMEOUT)
        sent = body if framing == "content-length" else chunks(body)
        try:
            status, headers, got = fetch(edge, "body.test", "/body/x", method="POST",
                                         body=sent, conn=conn)  # fmt: skip
        finally:
            conn.close()
        assert status == expected, got
        (asked,) = auth.since(mark)
        assert bytes(asked[4]) == body
        if framing == "chunked":
            assert header(asked[3], b"transfer-encoding") == [b"chunked"]
            assert header(asked[3], b"content-length") == []
        else:
            assert header(asked[3], b"content-length") == [b"%d" % len(body)]
        if expected == 401:
            assert (got, values(headers, "X-Reason")) == (b"no\n", ["wrong words"])
            assert len(backend.since(0)) == before
            continue
        seen = json.loads(got)
        assert seen["body"] == sha(body)  # the upstream's, whole
        assert seen["headers"]["x-auth-body"] == [str(len(body))]
        assert bytes(backend.since(before)[0][4]) == body


def test_forward_body_without_a_body_sends_none(edge, peers):
    """Traefik's TestForwardAuthForwardBodyEmptyBody: a GET without a body asks
    without one (no framing header), and so does a POST's empty body (the auth
    request is a GET: Go writes no Content-Length: 0 for it)."""
    auth, _ = peers
    mark = len(auth.since(0))
    assert fetch(edge, "body.test", "/body/empty")[0] == 401  # no words: refused
    assert fetch(edge, "body.test", "/body/empty", method="POST", body=b"")[0] == 401
    get_, post = auth.since(mark)
    assert header(get_[3], b"content-length") == [] and bytes(get_[4]) == b""
    assert header(get_[3], b"transfer-encoding") == []
    assert header(post[3], b"content-length") == [] and bytes(post[4]) == b""


def test_forward_body_over_max_body_size_is_401(edge, peers):
    """Traefik's TestForwardAuthForwardBodySizeLimit: a body over maxBodySize (16) is
    answered 401 with no body, neither the auth server nor the upstream asked; one of
    exactly 16 bytes goes. A Content-Length over it is refused before its body is read,
    a chunked body once it passes the limit (its connection closed after)."""
    auth, backend = peers
    mark, before = len(auth.since(0)), len(backend.since(0))
    assert (
        fetch(edge, "body-max.test", "/body/x", method="POST", body=b"open sesame 1234")[0] == 200
    )
    assert bytes(auth.since(mark)[0][4]) == b"open sesame 1234"
    assert len(backend.since(0)) == before + 1
    mark, before = len(auth.since(0)), len(backend.since(0))
    for sent in (b"open sesame 12345", chunks(b"open sesame 12345" * 1000, 7)):
        status, _, got = fetch(edge, "body-max.test", "/body/x", method="POST", body=sent)
        assert (status, got) == (401, b"")
    assert auth.since(mark) == [] and len(backend.since(0)) == before
    # A declared length over the limit: answered without waiting for its body.
    with socket.create_connection(("127.0.0.1", edge.port), timeout=TIMEOUT) as s:
        s.sendall(b"POST /body/x HTTP/1.1\r\nHost: body-max.test\r\nContent-Length: 1000\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 401 ")
    assert auth.since(mark) == []


def test_forward_body_asks_for_an_expected_body(edge, peers):
    """A client that waits for 100 Continue before its body gets it once the step
    reads the body, and then the answer, with no second 100 before it."""
    _, backend = peers
    body = b"open sesame, continued"
    with socket.create_connection(("127.0.0.1", edge.port), timeout=TIMEOUT) as s:
        s.sendall(
            b"POST /body/x HTTP/1.1\r\nHost: body.test\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        got = b""
        while b"\r\n\r\n" not in got:
            data = s.recv(65536)
            assert data, got
            got += data
        assert got == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        reply = s.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200 "), reply
    assert bytes(backend.since(0)[-1][4]) == body


def test_trust_forward_header_keeps_the_clients_x_forwarded(edge, peers):
    """trustForwardHeader true: the client's X-Forwarded-Uri goes through to the
    auth server (the entrypoint trusts no one here, so edge's entrypoint view has
    already replaced X-Forwarded-For, -Proto and -Host, as Traefik's does)."""
    auth, _ = peers
    mark = len(auth.since(0))
    status, _, _ = fetch(
        edge, "trusting.test", "/deny", {"X-Forwarded-Uri": "/ok", "X-Forwarded-Host": "evil"}
    )
    assert status == 401  # X-Forwarded-Uri /ok came from the client but was dropped...
    asked = auth.since(mark)[-1][3]
    assert header(asked, b"x-forwarded-uri") == [b"/deny"]  # ...by the entrypoint
    assert header(asked, b"x-forwarded-host") == [b"trusting.test"]
    assert header(asked, b"x-forwarded-port") == [b"80"]  # the Host names no port
    assert header(asked, b"x-real-ip") == [b"127.0.0.1"]


def test_auth_requests_reuse_keep_alive_connections(edge, peers):
    auth, _ = peers
    mark = len(auth.since(0))
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=TIMEOUT)
    try:
        for _ in range(30):
            assert fetch(edge, "auth.test", "/ok", conn=conn)[0] == 200
    finally:
        conn.close()
    connections = {r[0] for r in auth.since(mark)}
    assert len(auth.since(mark)) == 30
    assert len(connections) == 1, connections


def test_auth_server_down_is_500(edge):
    started = time.monotonic()
    status, _, body = fetch(edge, "down.test", "/ok")
    assert (status, body) == (500, b"")
    assert time.monotonic() - started < 5
    edge.wait_for(r"middleware down@file: calling http://127\.0\.0\.1:\d+/: ", start=0)


def test_bad_address_or_regexp_disables_only_that_middleware(edge):
    assert fetch(edge, "bad-address.test", "/ok")[0] == 404
    assert fetch(edge, "bad-regex.test", "/ok")[0] == 404
    assert fetch(edge, "open.test", "/x")[0] == 200
    for name, error in (
        ("bad-address", "forwardAuth.address: 'auth.test:9000' is not an http:// or https:// URL"),
        ("bad-regex", "forwardAuth.authResponseHeadersRegex: invalid regexp '(?=x)'"),
    ):
        status, _, body = get(edge.ports["traefik"], f"/api/http/middlewares/{name}@file")
        info = json.loads(body)
        assert (status, info["status"]) == (200, "disabled")
        assert info["error"][0].startswith(error), info["error"]


@pytest.mark.parametrize("codec", ["httptools", "h11"])
def test_no_answer_within_the_timeout_is_500(codec, peers, caplog):
    """An auth server that does not answer within the middleware's timeout: 500, no
    body, logged naming the middleware; the connection to it is closed. The
    middleware is built with a 1 s timeout (Traefik's fixed 30 s is the default,
    which no key changes) and served in the test's loop."""
    auth, backend = peers
    config = ForwardAuthConfig(address=auth.url + "/verify")
    assert forward_auth("auth@file", config).timeout == 30.0  # Traefik's client's
    mark = len(auth.since(0))

    async def main():
        middleware = forward_auth("auth@file", config, timeout=1.0)
        server, port, _ = await serve(codec, backend.port, [middleware])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        writer.write(b"GET /slow HTTP/1.1\r\nHost: a.test\r\n\r\n")
        head, body = await read_response(reader)
        took = time.monotonic() - started
        assert head.startswith(b"HTTP/1.1 500 ") and body == b"", head
        assert 0.9 < took < 5, took
        writer.close()
        server.close()

    with caplog.at_level(logging.ERROR, logger="edge.middlewares"):
        run_loop(main())
    assert any(
        r.getMessage().startswith(f"middleware auth@file: calling {auth.url}/verify: ")
        and r.getMessage().endswith("no answer within 1s")
        for r in caplog.records
    ), caplog.text
    (n,) = {r[0] for r in auth.since(mark)}
    deadline = time.monotonic() + TIMEOUT
    while n not in auth.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert n in auth.closed  # given up: not kept for another request


def test_answer_body_over_max_response_body_size_is_401(edge):
    assert fetch(edge, "small.test", "/deny")[::2] == (401, b"")
    assert fetch(edge, "small.test", "/ok")[::2] == (401, b"")  # "ok\n": 3 bytes, over 2


def test_idle_auth_connections_close_with_their_configuration(tmp_path, peers):
    """The pool goes with the configuration that built it: once a new one without
    the middleware is applied, its idle connection to the auth server is closed."""
    auth, backend = peers
    app = {"loadBalancer": {"servers": [{"url": backend.url}]}}
    with_auth = {
        "http": {
            "routers": {"r": {"rule": "Host(`r.test`)", "service": "app", "middlewares": ["fa"]}},
            "services": {"app": app},
            "middlewares": {"fa": {"forwardAuth": {"address": auth.url + "/"}}},
        }
    }
    e = Edge(tmp_path, with_auth)
    try:
        mark = len(auth.since(0))
        assert fetch(e, "r.test", "/ok")[0] == 200
        (n,) = {r[0] for r in auth.since(mark)}
        time.sleep(0.5)
        assert n not in auth.closed  # kept alive, idle in the pool
        e.write_dynamic(
            {"http": {"routers": {"r": {"rule": "Host(`r.test`)", "service": "app"}},
                      "services": {"app": app}}}
        )  # fmt: skip
        e.wait_applied(2, timeout=TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while n not in auth.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert n in auth.closed
        assert fetch(e, "r.test", "/deny")[0] == 200  # no forwardAuth any more
    finally:
        e.stop()


def test_auth_server_over_tls_with_a_client_certificate(tmp_path, pki, peers):
    """``tls``: the auth server's certificate verified against ``ca``, edge's own
    (``cert``, ``key``) presented to a server that requires one; a ``ca`` that
    cannot be read disables that middleware with the key named."""
    _, backend = peers
    server = pki.issue("localhost").write(tmp_path, "auth")
    client = pki.issue(cn="edge-client", client=True).write(tmp_path, "client")
    ca = pki.write_ca(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca)
    context.load_cert_chain(*server)
    context.verify_mode = ssl.CERT_REQUIRED
    auth = Peer(decide, context)
    address = f"https://localhost:{auth.port}/verify"
    app = {"loadBalancer": {"servers": [{"url": backend.url}]}}
    middlewares = {
        "tls": {"forwardAuth": {"address": address,
                                "authResponseHeaders": ["X-Auth-User"],
                                "tls": {"ca": ca, "cert": client[0], "key": client[1]}}},
        "no-ca": {"forwardAuth": {"address": address}},  # the system's CAs: not ours
        "bad-ca": {"forwardAuth": {"address": address, "tls": {"ca": str(tmp_path / "none.pem")}}},
    }  # fmt: skip
    dyn = {
        "http": {
            "routers": {
                n: {"rule": f"Host(`{n}.test`)", "service": "app", "middlewares": [n]}
                for n in middlewares
            },
            "services": {"app": app},
            "middlewares": middlewares,
        }
    }
    e = Edge(tmp_path, dyn, static_extra={"api": {"insecure": True}})
    try:
        status, _, body = fetch(e, "tls.test", "/ok")
        assert status == 200, body
        assert json.loads(body)["headers"]["x-auth-user"] == ["ann"]
        assert fetch(e, "tls.test", "/deny")[0] == 401
        subjects = [dict(rdn[0] for rdn in cert["subject"]) for cert in auth.peer_certs]
        assert subjects and all(s == {"commonName": "edge-client"} for s in subjects)
        assert fetch(e, "no-ca.test", "/ok")[::2] == (500, b"")  # its certificate not trusted
        e.wait_for(r"middleware no-ca@file: calling https://localhost:\d+/verify: .*CERTIFICATE")
        assert fetch(e, "bad-ca.test", "/ok")[0] == 404
        status, _, body = get(e.ports["traefik"], "/api/http/middlewares/bad-ca@file")
        assert json.loads(body)["error"] == [
            f"forwardAuth.tls.ca {tmp_path / 'none.pem'}: no such file"
        ]
    finally:
        e.stop()
        auth.stop()


def test_a_client_gone_while_waiting_drops_the_auth_request(edge, peers):
    """The client leaves while the auth server thinks: the wait is cancelled, its
    connection to the auth server closed (not pooled for another request)."""
    auth, backend = peers
    mark = len(auth.since(0))
    before = len(backend.since(0))
    with socket.create_connection(("127.0.0.1", edge.port), timeout=TIMEOUT) as s:
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: auth.test\r\n\r\n")
        deadline = time.monotonic() + TIMEOUT
        while not auth.since(mark) and time.monotonic() < deadline:
            time.sleep(0.02)
        (n,) = {r[0] for r in auth.since(mark)}
    deadline = time.monotonic() + TIMEOUT
    while n not in auth.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert n in auth.closed
    assert len(backend.since(0)) == before
    assert fetch(edge, "auth.test", "/ok")[0] == 200  # the next one is served


def test_pool_bounds_its_connections_and_requests_wait_for_one(peers, monkeypatch):
    """AuthPool on a real loop: with MAX_CONNECTIONS 1, four concurrent auth
    requests share one connection, one after another, and all get their answer."""
    from edge.http.codec.parsers import parser_classes
    from edge.http.middlewares import forwardauth
    from tests.integration.peers import run

    auth, _ = peers
    monkeypatch.setattr(forwardauth, "MAX_CONNECTIONS", 1)
    mark = len(auth.since(0))
    request = b"GET /v HTTP/1.1\r\nHost: a\r\nX-Forwarded-Uri: /ok\r\n\r\n"

    async def main() -> None:
        pool = forwardauth.AuthPool("127.0.0.1", auth.port, None, parser_classes("h11")[1])
        answers = await asyncio.gather(
            *(pool.exchange(request, b"GET", -1, True) for _ in range(4))
        )
        assert [(head.status, body) for head, body in answers] == [(200, b"ok\n")] * 4
        assert pool.open == 1 and len(pool.idle) == 1
        pool.close()
        assert pool.open == 0 and pool.idle == []

    run(main, timeout=TIMEOUT)
    assert len(auth.since(mark)) == 4
    assert len({r[0] for r in auth.since(mark)}) == 1
