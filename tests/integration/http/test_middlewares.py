"""HTTP middlewares (headers, redirectScheme, addPrefix, stripPrefix) and the
service options they meet (passHostHeader).

Each test configures a real edge against a real backend on 127.0.0.1 (an h11
server in a thread that records what it parsed off the wire, or a raw socket
server scripted per case) and checks what the backend received and what the
client got, under both codecs. Each one failed on the commit before its fix (the review of
HTTP middlewares, services and upstream transports).
"""

from __future__ import annotations

import socket

import pytest

from tests.harness import Edge, lb
from tests.integration.http.servers import edge_with, exchange, pipelined, settle

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


# --- a response before the end of the request body -----------------------------------------


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
