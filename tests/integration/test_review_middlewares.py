"""Adversarial review of HTTP middlewares, services and upstream transports.

Each test configures a real edge against a real backend on 127.0.0.1 (an h11
server in a thread that records what it parsed off the wire, or a raw socket
server scripted per case) and checks what the backend received and what the
client got, under both codecs. Each one failed on the commit before its fix.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time

import pytest

from tests.harness import Edge, lb, raw, read_response, read_until_closed
from tests.integration.test_smuggling_review import H11Backend, ThreadedServer

TIMEOUT = 5.0


@pytest.fixture
def backend():
    b = H11Backend(after_body=True)
    yield b
    b.stop()


def edge_with(tmp_path, parser, service: dict, middlewares: dict | None = None, **router) -> Edge:
    dyn = {
        "http": {
            "routers": {
                "app": {
                    "rule": "Host(`app.example`)",
                    "service": "app",
                    "middlewares": list(middlewares or {}),
                    **router,
                }
            },
            "services": {"app": service},
            "middlewares": middlewares or {},
        }
    }
    return Edge(tmp_path, dyn, parser=parser, entrypoints={"web": {"address": "127.0.0.1:0"}})


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` (one request) on a new connection: the response (read_response)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(data)
        return read_response(s)


def pipelined(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection; what edge answers until it closes or goes quiet."""
    return raw(port, data, timeout=TIMEOUT, quiet=0.5)


def settle(backend: H11Backend, count: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while len(backend.requests) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # anything more the backend still had to parse


# --- headers: the names edge manages itself -------------------------------------------


def test_custom_request_host_and_forwarded_headers_replace_edges_own(tmp_path, parser, backend):
    """customRequestHeaders naming Host or an X-Forwarded-* header edge writes itself
    added a second line: two Host headers (nginx and Go answer 400), two
    X-Forwarded-Proto (a backend behind a TLS terminator saw http and https). In
    Traefik the value replaces the header (Host sets req.Host; X-Forwarded-For is
    then appended to; an empty X-Forwarded-For means none at all)."""
    mws = {
        "hdr": {
            "headers": {
                "customRequestHeaders": {
                    "Host": "internal.example",
                    "X-Forwarded-Proto": "https",
                    "X-Forwarded-Port": "443",
                    "X-Forwarded-For": "203.0.113.9",
                    "X-Real-Ip": "",
                }
            }
        }
    }
    e = edge_with(tmp_path, parser, lb(backend.url), mws)
    try:
        out = exchange(
            e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\nX-Real-Ip: 6.6.6.6\r\n\r\n"
        )
        assert out.startswith(b"HTTP/1.1 200 "), out
        settle(backend, 1)
        assert backend.errors == []
        [r] = backend.requests
        assert r.header(b"host") == [b"internal.example"]
        assert r.header(b"x-forwarded-proto") == [b"https"]
        assert r.header(b"x-forwarded-port") == [b"443"]
        assert r.header(b"x-forwarded-for") == [b"203.0.113.9, 127.0.0.1"]
        assert r.header(b"x-forwarded-host") == [b"app.example"]
        assert r.header(b"x-real-ip") == []
    finally:
        e.stop()


def test_custom_request_framing_headers_cannot_reframe_the_body(tmp_path, parser, backend):
    """customRequestHeaders naming Transfer-Encoding or Content-Length went upstream
    beside edge's own framing header: a POST with Content-Length: 5 reached the
    backend with Transfer-Encoding: chunked too, so a client's body was read as
    chunks (request smuggling through any route using the middleware). Traefik
    (Go's request writer) writes its own framing and no other: these names, and
    every hop-by-hop one, have no effect."""
    mws = {
        "hdr": {
            "headers": {
                "customRequestHeaders": {
                    "Transfer-Encoding": "chunked",
                    "Content-Length": "0",
                    "Connection": "close",
                }
            }
        }
    }
    e = edge_with(tmp_path, parser, lb(backend.url), mws)
    try:
        body = b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: app.example\r\n\r\n"
        out = pipelined(
            e.port,
            b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
            + b"GET /next HTTP/1.1\r\nHost: app.example\r\n\r\n",
        )
        settle(backend, 2)
        assert backend.errors == []
        assert [(r.method, r.target, r.body) for r in backend.requests] == [
            (b"POST", b"/up", body),
            (b"GET", b"/next", b""),
        ]
        for r in backend.requests:
            assert r.header(b"transfer-encoding") == []
            assert r.header(b"connection") == []
        assert backend.requests[0].header(b"content-length") == [b"%d" % len(body)]
        assert out.count(b"HTTP/1.1 200 ") == 2, out
    finally:
        e.stop()


def test_custom_response_framing_headers_cannot_reframe_the_response(tmp_path, parser, backend):
    """customResponseHeaders naming Content-Length or Transfer-Encoding went to the
    client beside edge's own framing: two lengths (or a length and chunked), so
    the client read the body, and the next response on the connection, wrongly."""
    mws = {
        "hdr": {
            "headers": {
                "customResponseHeaders": {
                    "Content-Length": "1",
                    "Transfer-Encoding": "chunked",
                    "Connection": "close",
                    "X-Custom": "yes",
                }
            }
        }
    }
    e = edge_with(tmp_path, parser, lb(backend.url), mws)
    try:
        out = pipelined(
            e.port,
            b"GET /a HTTP/1.1\r\nHost: app.example\r\n\r\nGET /b HTTP/1.1\r\nHost: app.example\r\n\r\n",
        )
        first, _, rest = out.partition(b"\r\n\r\n")
        lines = first.lower().split(b"\r\n")
        assert b"content-length: 8" in lines and b"x-custom: yes" in lines, first
        assert not [x for x in lines if x.startswith((b"transfer-encoding", b"connection"))], first
        assert [x for x in lines if x.startswith(b"content-length")] == [b"content-length: 8"], (
            first
        )
        assert rest.startswith(b"GET /a 0HTTP/1.1 200 "), out
        assert out.endswith(b"GET /b 0"), out
    finally:
        e.stop()


# --- a pooled connection lost as it is reused -------------------------------------------


class ClosingBackend(ThreadedServer):
    """Answers 200 (keep-alive) to each request head, except the ones numbered in
    ``drop`` (counted over all connections, from 1): those it reads, records and
    answers by closing the connection, as a server does that closes an idle
    connection just as a request arrives on it, or crashes on the request."""

    def __init__(self, drop: set[int]) -> None:
        self.drop = drop
        self.seen: list[tuple[int, bytes]] = []  # (connection, request line)
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(TIMEOUT)
        buf = b""
        try:
            while not self.stopped:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                with self.lock:
                    self.seen.append((n, head.split(b"\r\n", 1)[0]))
                    number = len(self.seen)
                if number in self.drop:
                    return
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except OSError:
            pass
        finally:
            c.close()


def one_by_one(port: int, requests: list[bytes]) -> list[bytes]:
    """Each request on one client connection, the next sent once its answer came: the answers."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        for request in requests:
            s.sendall(request)
            answers.append(read_response(s, bodiless=request.startswith(b"HEAD ")))
    return answers


@pytest.mark.parametrize(
    ("second", "resent"),
    [
        (b"GET /read HTTP/1.1\r\nHost: app.example\r\n\r\n", True),
        (b"HEAD /read HTTP/1.1\r\nHost: app.example\r\n\r\n", True),
        (b"DELETE /item HTTP/1.1\r\nHost: app.example\r\n\r\n", False),
        (b"POST /charge HTTP/1.1\r\nHost: app.example\r\n\r\n", False),
        (b"POST /charge HTTP/1.1\r\nHost: app.example\r\nIdempotency-Key: k1\r\n\r\n", True),
    ],
    ids=["GET", "HEAD", "DELETE", "POST", "POST-idempotency-key"],
)
def test_lost_reused_connection_resends_only_idempotent_requests(tmp_path, parser, second, resent):
    """A pooled connection closed by the server after it read a request, before any
    byte of an answer: edge sent any request without a body again on a new
    connection, so a DELETE or a bodiless POST reached the backend twice.
    Traefik's transport (Go's) sends it again only when it is replayable: GET, HEAD,
    OPTIONS, TRACE, or one with an Idempotency-Key; else 502."""
    backend = ClosingBackend(drop={2})
    e = edge_with(tmp_path, parser, lb(backend.url))
    try:
        first = b"GET /warm HTTP/1.1\r\nHost: app.example\r\n\r\n"
        answers = one_by_one(e.port, [first, second])
        time.sleep(0.2)
        line = second.split(b"\r\n", 1)[0]
        assert answers[0].startswith(b"HTTP/1.1 200 "), answers
        with backend.lock:
            seen = list(backend.seen)
        assert seen[0] == (1, b"GET /warm HTTP/1.1")
        if resent:
            assert seen[1:] == [(1, line), (2, line)], seen
            assert answers[1].startswith(b"HTTP/1.1 200 "), answers
        else:
            assert seen[1:] == [(1, line)], seen
            assert answers[1].startswith(b"HTTP/1.1 502 "), answers
    finally:
        e.stop()
        backend.stop()


# --- redirectScheme -------------------------------------------------------------------


def redirect_edge(tmp_path, parser, backend, permanent: bool) -> Edge:
    dyn = {
        "http": {
            "routers": {
                "app": {"rule": "Host(`app.example`)", "service": "app", "middlewares": ["tls"]}
            },
            "services": {"app": lb(backend.url)},
            "middlewares": {"tls": {"redirectScheme": {"scheme": "https", "permanent": permanent}}},
        }
    }
    eps = {"web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.1"]}}}
    return Edge(tmp_path, dyn, parser=parser, entrypoints=eps)


@pytest.mark.parametrize("permanent", [False, True], ids=["temporary", "permanent"])
def test_redirect_scheme_keeps_the_method_of_a_non_get_request(
    tmp_path, parser, backend, permanent
):
    """Every redirect was 301 or 302, which clients follow with a GET: a form POSTed
    to http:// lost its body and reached the https:// route as a GET. Traefik
    answers a request other than GET with 307 (308 when permanent), which keeps
    the method and body."""
    e = redirect_edge(tmp_path, parser, backend, permanent)
    try:
        for method, status in (
            (b"GET", b"301" if permanent else b"302"),
            (b"POST", b"308" if permanent else b"307"),
        ):
            out = exchange(
                e.port,
                method + b" /form?a=1 HTTP/1.1\r\nHost: app.example\r\nContent-Length: 2\r\n\r\nhi",
            )
            assert out.startswith(b"HTTP/1.1 " + status + b" "), (method, out)
            assert b"\r\nLocation: https://app.example/form?a=1\r\n" in out, out
        assert backend.requests == []
    finally:
        e.stop()


def test_redirect_scheme_passes_a_request_already_in_its_scheme(tmp_path, parser, backend):
    """A request that already came over https (here: a trusted proxy in front that
    terminates TLS says so in X-Forwarded-Proto, the usual set-up behind a cloud
    load balancer) was redirected to the URL it asked for, for ever: a redirect
    loop. Traefik redirects only when the URL changes, and otherwise serves the
    route. An untrusted client's X-Forwarded-Proto is not believed (its own is
    replaced by edge's), so it is still redirected."""
    e = redirect_edge(tmp_path, parser, backend, False)
    try:
        trusted = exchange(
            e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\nX-Forwarded-Proto: https\r\n\r\n"
        )
        assert trusted.startswith(b"HTTP/1.1 200 "), trusted
        settle(backend, 1)
        assert [(r.method, r.target) for r in backend.requests] == [(b"GET", b"/x")]
        # Another port is another URL: redirected (to the scheme's default port).
        other = exchange(
            e.port, b"GET /x HTTP/1.1\r\nHost: app.example:8443\r\nX-Forwarded-Proto: https\r\n\r\n"
        )
        assert other.startswith(b"HTTP/1.1 302 "), other
        assert b"\r\nLocation: https://app.example/x\r\n" in other, other
    finally:
        e.stop()


# --- serversTransport forwardingTimeouts ---------------------------------------------------


def test_response_header_timeout_counts_from_the_end_of_the_request_body(tmp_path, parser, backend):
    """responseHeaderTimeout ran from the moment the request head went upstream, so an
    upload taking longer than it got 504 while the client was still sending (and
    the backend had answered nothing because the body was not all there). Traefik's
    (Go's ResponseHeaderTimeout) runs from the end of the request, body included:
    a slow upload is served, and a backend slow to answer once it has it is not."""
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url, serversTransport="rht")},
            "serversTransports": {
                "rht": {"forwardingTimeouts": {"responseHeaderTimeout": "300ms"}}
            },
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(b"POST /upload HTTP/1.1\r\nHost: app.example\r\nContent-Length: 6\r\n\r\nabc")
            time.sleep(0.8)  # the upload goes on past the timeout
            s.sendall(b"def")
            out = read_until_closed(s, TIMEOUT, quiet=1.0)[0]
        assert out.startswith(b"HTTP/1.1 200 "), out
        assert out.endswith(b"POST /upload 6"), out
    finally:
        e.stop()


# --- path middlewares ----------------------------------------------------------------------


def test_add_prefix_without_a_leading_slash_makes_an_origin_form_path(tmp_path, parser, backend):
    """addPrefix ``api`` (no leading slash, as Kubernetes annotations are often
    written) sent ``GET api/x HTTP/1.1`` upstream: not origin-form, refused by
    strict servers and read as anything by lax ones. Traefik makes the path start
    with a slash (ensureLeadingSlash): ``/api/x``."""
    mws = {"add": {"addPrefix": {"prefix": "api"}}}
    e = edge_with(tmp_path, parser, lb(backend.url), mws)
    try:
        out = exchange(e.port, b"GET /x?q=1 HTTP/1.1\r\nHost: app.example\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200 "), out
        settle(backend, 1)
        assert [r.target for r in backend.requests] == [b"/api/x?q=1"]
    finally:
        e.stop()


@pytest.mark.parametrize(
    ("transport", "reused"),
    [
        ({"maxIdleConnsPerHost": -1}, False),  # Traefik: negative disables reuse
        ({"maxIdleConnsPerHost": 0}, True),  # Traefik: zero is Go's default (2)
        ({"forwardingTimeouts": {"idleConnTimeout": "0s"}}, True),  # Go: zero is no limit
    ],
    ids=["maxIdle-negative", "maxIdle-zero", "idleConnTimeout-zero"],
)
def test_servers_transport_pool_settings_mean_what_traefik_documents(
    tmp_path, parser, backend, transport, reused
):
    """maxIdleConnsPerHost -1, which Traefik documents as disabling connection reuse,
    was refused when the file was read, so every route of the file went down; 0
    (Go's default of 2) and idleConnTimeout 0 (Go: no limit) disabled pooling
    instead, so every request dialed its server."""
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url, serversTransport="t")},
            "serversTransports": {"t": transport},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        answers = one_by_one(e.port, [b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n"] * 3)
        assert all(a.startswith(b"HTTP/1.1 200 ") for a in answers), answers
        settle(backend, 3)
        conns = [r.conn for r in backend.requests]
        assert conns == ([1, 1, 1] if reused else [1, 2, 3]), conns
    finally:
        e.stop()


# --- a response before the end of the request body -----------------------------------------


class EarlyAnswerBackend(ThreadedServer):
    """Answers 413 as soon as a request head is in, without reading its body (a size
    limit, an auth check), then reads and drops what comes until EOF."""

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(TIMEOUT)
        buf = b""
        try:
            while b"\r\n\r\n" not in buf:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
            c.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo big!")
            while c.recv(65536):
                pass
        except OSError:
            pass
        finally:
            c.close()


def test_response_before_a_large_request_body_ends_says_the_connection_closes(tmp_path, parser):
    """An upstream that answers before the request body is all sent (413, 401) had
    its answer forwarded as if the client connection stayed open, then edge closed
    it: the client, still sending, learnt it only by the close (or a reset). Traefik's
    server (Go) says ``Connection: close`` when more than it will drain remains."""
    backend = EarlyAnswerBackend()
    e = edge_with(tmp_path, parser, lb(backend.url))
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 1000000\r\n\r\n"
                + b"x" * 1000
            )
            out = read_response(s)
            assert out.startswith(b"HTTP/1.1 413 "), out
            assert b"\r\nConnection: close\r\n" in out, out
            rest, closed = read_until_closed(s, TIMEOUT)
            assert closed and rest == b"", rest
    finally:
        e.stop()
        backend.stop()


def test_response_before_a_small_request_body_ends_keeps_the_connection(tmp_path, parser):
    """...and when what remains is small, edge reads and drops it and the connection
    serves the next request, as Go's server drains a small body (and as edge does for
    its own early answers) instead of closing a client mid-upload."""
    backend = EarlyAnswerBackend()
    e = edge_with(tmp_path, parser, lb(backend.url))
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 1000\r\n\r\n"
                + b"x" * 10
            )
            first = read_response(s)
            assert first.startswith(b"HTTP/1.1 413 ") and b"Connection: close" not in first, first
            s.sendall(
                b"x" * 990
                + b"POST /again HTTP/1.1\r\nHost: app.example\r\nContent-Length: 2\r\n\r\nhi"
            )
            second = read_response(s)
            assert second.startswith(b"HTTP/1.1 413 "), second
    finally:
        e.stop()
        backend.stop()


def test_pass_host_header_false_wins_over_a_custom_host(tmp_path, parser, backend):
    """With passHostHeader false Traefik's proxy sets the server's host last, after
    the middlewares: a customRequestHeaders Host does not replace it."""
    mws = {"hdr": {"headers": {"customRequestHeaders": {"Host": "internal.example"}}}}
    e = edge_with(tmp_path, parser, lb(backend.url, passHostHeader=False), mws)
    try:
        out = exchange(e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200 "), out
        settle(backend, 1)
        [r] = backend.requests
        assert r.header(b"host") == [backend.url.removeprefix("http://").encode()]
    finally:
        e.stop()


def test_strip_prefix_strips_the_prefix_the_router_matched_however_it_is_escaped(
    tmp_path, parser, backend
):
    """Routers match the path with unreserved escapes decoded (``/%61pi`` is
    ``/api``), as Traefik's do, but stripPrefix compared the raw bytes: the request
    was routed by PathPrefix(`/api`) and went upstream unstripped, reaching the
    backend's ``/api/...`` paths that the route's layout never exposes. Traefik strips
    the prefix the decoded path starts with, and the escaped bytes that spell it."""
    dyn = {
        "http": {
            "routers": {
                "app": {"rule": "PathPrefix(`/api`)", "service": "app", "middlewares": ["strip"]}
            },
            "services": {"app": lb(backend.url)},
            "middlewares": {"strip": {"stripPrefix": {"prefixes": ["/api"]}}},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        for target in (b"/api/x", b"/%61pi/x", b"/%61%70i/x", b"/ap%69/x?q=%61"):
            out = exchange(e.port, b"GET %s HTTP/1.1\r\nHost: app.example\r\n\r\n" % target)
            assert out.startswith(b"HTTP/1.1 200 "), (target, out)
        settle(backend, 4)
        assert [r.target for r in backend.requests] == [b"/x", b"/x", b"/x", b"/x?q=%61"]
        assert [r.header(b"x-forwarded-prefix") for r in backend.requests] == [[b"/api"]] * 4
    finally:
        e.stop()


def test_custom_response_headers_reach_edges_own_error_answers(tmp_path, parser):
    """customResponseHeaders were left off the 502 and 504 edge answers for a route:
    a CORS header missing from a 502 shows in a browser as a CORS failure instead of
    the bad gateway, and a security header (HSTS, CSP) is missing from the page.
    Traefik's headers middleware modifies whatever response the handlers after it
    write, the proxy's own errors included."""
    closed = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there: 502
    mws = {
        "hdr": {
            "headers": {
                "customResponseHeaders": {
                    "Access-Control-Allow-Origin": "*",
                    "Content-Type": "text/x-edge",
                }
            }
        }
    }
    e = edge_with(tmp_path, parser, lb(url), mws)
    try:
        out = exchange(e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n")
        head = out.partition(b"\r\n\r\n")[0].lower().split(b"\r\n")
        assert head[0].startswith(b"http/1.1 502 "), out
        assert b"access-control-allow-origin: *" in head, out
        assert [x for x in head if x.startswith(b"content-type")] == [
            b"content-type: text/x-edge"
        ], out
    finally:
        e.stop()


def test_closing_with_the_request_body_still_coming_does_not_reset_the_connection(tmp_path, parser):
    """When edge closed a client connection whose request body was still arriving
    (an early 413 from the upstream, a 502), the kernel answered the next bytes
    of that body with a reset: the client, still sending, got EPIPE or
    ECONNRESET, and most clients then report the reset, not the answer (which a
    reset can also destroy in flight). Go's server under Traefik closes its side
    and reads on for a while before it closes (lingering close), as nginx does."""
    backend = EarlyAnswerBackend()
    e = edge_with(tmp_path, parser, lb(backend.url))
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            total = 4_000_000
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: %d\r\n\r\n" % total
            )
            s.sendall(b"x" * 1000)
            time.sleep(0.3)  # the answer comes, and edge closes its side
            s.sendall(b"x" * (total - 1000))  # the rest of the upload: no reset
            s.shutdown(socket.SHUT_WR)
            out, closed = read_until_closed(s, TIMEOUT)
        assert closed, out
        assert out.startswith(b"HTTP/1.1 413 ") and b"\r\nConnection: close\r\n" in out, out
        assert out.endswith(b"too big!"), out
    finally:
        e.stop()
        backend.stop()


def test_lingering_is_bounded(tmp_path):
    """...and a client that keeps sending and never closes is closed on after a
    while (LINGER, 2 s, enforced by the entrypoint's deadline sweep). A guard: it
    passes on the commit before too, where the close came at once. The client reads
    EOF at once (edge's half-close): only its sends see the full close."""
    backend = EarlyAnswerBackend()
    e = edge_with(
        tmp_path, "httptools", lb(backend.url)
    )  # after the answer no codec reads: one is enough
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 100000000\r\n\r\n"
                + b"x" * 1000
            )
            out = read_response(s)
            assert out.startswith(b"HTTP/1.1 413 "), out
            start = time.monotonic()
            closed = False
            s.settimeout(0.1)
            while (
                time.monotonic() - start < 8
            ):  # edge's half-close ends our reading, not our sending
                try:
                    s.sendall(b"x" * 1000)
                except TimeoutError:
                    continue
                except OSError:  # the full close, seen by a send (EPIPE, a reset)
                    closed = True
                    break
                time.sleep(0.01)
            assert closed and time.monotonic() - start < 6, time.monotonic() - start
    finally:
        e.stop()
        backend.stop()


def test_dial_timeout_answers_504(tmp_path, parser):
    """A server that did not accept within dialTimeout was answered 502, like one
    that refused. Traefik answers a timeout 504 (its proxy's error handler maps
    every net.Error with Timeout() to Gateway Timeout), which is what alerts and
    retry policies downstream tell apart from a refusal."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)  # a backlog that a few unaccepted connections fill: the next SYNs go unanswered
    port = full.getsockname()[1]
    held = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            c.connect(("127.0.0.1", port))
        held.append(c)
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(f"http://127.0.0.1:{port}", serversTransport="t")},
            "serversTransports": {"t": {"forwardingTimeouts": {"dialTimeout": "300ms"}}},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        out = exchange(e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 504 "), out
    finally:
        e.stop()
        for c in held:
            c.close()
        full.close()


def test_trusted_clients_x_real_ip_is_kept(tmp_path, parser, backend):
    """Behind a trusted proxy that names the client in X-Real-Ip, edge replaced it with
    that proxy's address, so the backend logged and rate-limited the proxy. Traefik
    sets X-Real-Ip only when a trusted request has none (an untrusted one's is
    removed first, as edge does)."""
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    eps = {"web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.1"]}}}
    e = Edge(tmp_path, dyn, parser=parser, entrypoints=eps)
    try:
        answers = one_by_one(
            e.port,
            [
                b"GET /a HTTP/1.1\r\nHost: app.example\r\nX-Real-Ip: 203.0.113.7\r\n\r\n",
                b"GET /b HTTP/1.1\r\nHost: app.example\r\n\r\n",
            ],
        )
        assert all(a.startswith(b"HTTP/1.1 200 ") for a in answers), answers
        settle(backend, 2)
        assert [r.header(b"x-real-ip") for r in backend.requests] == [
            [b"203.0.113.7"],
            [b"127.0.0.1"],
        ]
    finally:
        e.stop()


def test_lingering_over_tls13(tmp_path, parser):
    """The same over TLS 1.3 (edge's terminator half-closes with close_notify and reads
    on): the client sends the rest of its upload without a reset and reads the whole
    answer. TLS 1.2 has no half-close: there edge closes as before."""
    from tests.fixtures.tls.pki import PKI

    pki = PKI()
    cert, key = pki.issue("app.example").write(tmp_path, "app")
    ca = pki.write_ca(tmp_path)
    backend = EarlyAnswerBackend()
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app", "tls": {}}},
            "services": {"app": lb(backend.url)},
        },
        "tls": {"certificates": [{"certFile": cert, "keyFile": key}]},
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        ctx = ssl.create_default_context(cafile=ca)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        plain = socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT)
        with ctx.wrap_socket(plain, server_hostname="app.example") as s:
            total = 4_000_000
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: %d\r\n\r\n" % total
            )
            s.sendall(b"x" * 1000)
            time.sleep(0.3)
            s.sendall(b"x" * (total - 1000))
            out = read_response(s)
        assert out.startswith(b"HTTP/1.1 413 ") and b"\r\nConnection: close\r\n" in out, out
    finally:
        e.stop()
        backend.stop()


def test_trusted_clients_x_forwarded_prefix_is_kept(tmp_path, parser, backend):
    """Behind a trusted proxy that stripped a prefix of its own and says so in
    X-Forwarded-Prefix, edge dropped it, so the backend built its links without
    the outer prefix. Traefik keeps it from a trusted client, and its stripPrefix
    adds its own value after it (two lines)."""
    dyn = {
        "http": {
            "routers": {
                "app": {"rule": "PathPrefix(`/api`)", "service": "app", "middlewares": ["strip"]}
            },
            "services": {"app": lb(backend.url)},
            "middlewares": {"strip": {"stripPrefix": {"prefixes": ["/api"]}}},
        }
    }
    eps = {"web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.1"]}}}
    e = Edge(tmp_path, dyn, parser=parser, entrypoints=eps)
    try:
        out = exchange(
            e.port,
            b"GET /api/x HTTP/1.1\r\nHost: app.example\r\nX-Forwarded-Prefix: /outer\r\n\r\n",
        )
        assert out.startswith(b"HTTP/1.1 200 "), out
        settle(backend, 1)
        [r] = backend.requests
        assert r.target == b"/x"
        assert r.header(b"x-forwarded-prefix") == [b"/outer", b"/api"]
    finally:
        e.stop()
