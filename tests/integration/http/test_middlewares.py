"""HTTP middlewares (headers, redirectScheme, addPrefix, stripPrefix) and the
service options they meet (passHostHeader).

Each test configures a real edge against a real backend on 127.0.0.1 (an h11
server in a thread that records what it parsed off the wire, or a raw socket
server scripted per case) and checks what the backend received and what the
client got, under both codecs. One edge per codec serves the module: each test
writes its own routes to the file provider and waits until edge applied them. Each one failed on the commit before its fix (the review of
HTTP middlewares, services and upstream transports).
"""

from __future__ import annotations

import socket

import pytest

from tests.harness import Edge, lb
from tests.integration.http.servers import exchange, pipelined, settle

TRUSTED = "trusted"  # the shared edge's entrypoint trusting 127.0.0.1's X-Forwarded-*


class Shared:
    """One edge for the module's tests under one codec, reconfigured per test."""

    def __init__(self, edge: Edge) -> None:
        self.edge = edge
        self.rounds = 0  # configurations written, each one distinct from the one before

    def configure(self, dyn: dict) -> Edge:
        """Serve ``dyn`` (its services renamed apart from the last round's, so no two
        rounds are identical and the watcher drops none); return once it is applied."""
        self.rounds += 1
        http = dyn["http"]
        renamed = {name: f"{name}-{self.rounds}" for name in http["services"]}
        http["services"] = {renamed[k]: v for k, v in http["services"].items()}
        for router in http["routers"].values():
            router["service"] = renamed[router["service"]]
        applied = self.edge.applied()
        self.edge.write_dynamic(dyn)
        self.edge.wait_applied(applied + 1, timeout=15.0)
        return self.edge

    def route(self, service: dict, middlewares: dict | None = None, **router) -> Edge:
        """The ``app`` router (Host app.example) through ``middlewares`` to ``service``."""
        return self.configure(
            {
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
        )


@pytest.fixture(scope="module", params=["httptools", "h11"])
def shared(request, tmp_path_factory):
    eps = {
        "web": {"address": "127.0.0.1:0"},
        TRUSTED: {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.1"]}},
    }
    tmp = tmp_path_factory.mktemp(f"middlewares-{request.param}")
    e = Edge(tmp, {"http": {}}, parser=request.param, entrypoints=eps)
    yield Shared(e)
    e.stop()


# --- headers: the names edge manages itself -------------------------------------------


def test_custom_request_host_and_forwarded_headers_replace_edges_own(shared, backend):
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
    e = shared.route(lb(backend.url), mws)
    out = exchange(e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\nX-Real-Ip: 6.6.6.6\r\n\r\n")
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


def test_custom_request_framing_headers_cannot_reframe_the_body(shared, backend):
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
    e = shared.route(lb(backend.url), mws)
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


def test_custom_response_framing_headers_cannot_reframe_the_response(shared, backend):
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
    e = shared.route(lb(backend.url), mws)
    out = pipelined(
        e.port,
        b"GET /a HTTP/1.1\r\nHost: app.example\r\n\r\nGET /b HTTP/1.1\r\nHost: app.example\r\n\r\n",
    )
    first, _, rest = out.partition(b"\r\n\r\n")
    lines = first.lower().split(b"\r\n")
    assert b"content-length: 8" in lines and b"x-custom: yes" in lines, first
    assert not [x for x in lines if x.startswith((b"transfer-encoding", b"connection"))], first
    assert [x for x in lines if x.startswith(b"content-length")] == [b"content-length: 8"], first
    assert rest.startswith(b"GET /a 0HTTP/1.1 200 "), out
    assert out.endswith(b"GET /b 0"), out


# --- a pooled connection lost as it is reused -------------------------------------------


# --- redirectScheme -------------------------------------------------------------------


def redirect_edge(shared: Shared, backend, permanent: bool) -> Edge:
    """redirectScheme to https on app.example, behind a trusted proxy: ``e.ports[TRUSTED]``."""
    return shared.configure(
        {
            "http": {
                "routers": {
                    "app": {"rule": "Host(`app.example`)", "service": "app", "middlewares": ["tls"]}
                },
                "services": {"app": lb(backend.url)},
                "middlewares": {
                    "tls": {"redirectScheme": {"scheme": "https", "permanent": permanent}}
                },
            }
        }
    )


@pytest.mark.parametrize("permanent", [False, True], ids=["temporary", "permanent"])
def test_redirect_scheme_keeps_the_method_of_a_non_get_request(shared, backend, permanent):
    """Every redirect was 301 or 302, which clients follow with a GET: a form POSTed
    to http:// lost its body and reached the https:// route as a GET. Traefik
    answers a request other than GET with 307 (308 when permanent), which keeps
    the method and body."""
    e = redirect_edge(shared, backend, permanent)
    for method, status in (
        (b"GET", b"301" if permanent else b"302"),
        (b"POST", b"308" if permanent else b"307"),
    ):
        out = exchange(
            e.ports[TRUSTED],
            method + b" /form?a=1 HTTP/1.1\r\nHost: app.example\r\nContent-Length: 2\r\n\r\nhi",
        )
        assert out.startswith(b"HTTP/1.1 " + status + b" "), (method, out)
        assert b"\r\nLocation: https://app.example/form?a=1\r\n" in out, out
    assert backend.requests == []


def test_redirect_scheme_passes_a_request_already_in_its_scheme(shared, backend):
    """A request that already came over https (here: a trusted proxy in front that
    terminates TLS says so in X-Forwarded-Proto, the usual set-up behind a cloud
    load balancer) was redirected to the URL it asked for, for ever: a redirect
    loop. Traefik redirects only when the URL changes, and otherwise serves the
    route. An untrusted client's X-Forwarded-Proto is not believed (its own is
    replaced by edge's), so it is still redirected."""
    e = redirect_edge(shared, backend, False)
    trusted = exchange(
        e.ports[TRUSTED],
        b"GET /x HTTP/1.1\r\nHost: app.example\r\nX-Forwarded-Proto: https\r\n\r\n",
    )
    assert trusted.startswith(b"HTTP/1.1 200 "), trusted
    settle(backend, 1)
    assert [(r.method, r.target) for r in backend.requests] == [(b"GET", b"/x")]
    # Another port is another URL: redirected (to the scheme's default port).
    other = exchange(
        e.ports[TRUSTED],
        b"GET /x HTTP/1.1\r\nHost: app.example:8443\r\nX-Forwarded-Proto: https\r\n\r\n",
    )
    assert other.startswith(b"HTTP/1.1 302 "), other
    assert b"\r\nLocation: https://app.example/x\r\n" in other, other


# --- serversTransport forwardingTimeouts ---------------------------------------------------


# --- path middlewares ----------------------------------------------------------------------


def test_add_prefix_without_a_leading_slash_makes_an_origin_form_path(shared, backend):
    """addPrefix ``api`` (no leading slash, as Kubernetes annotations are often
    written) sent ``GET api/x HTTP/1.1`` upstream: not origin-form, refused by
    strict servers and read as anything by lax ones. Traefik makes the path start
    with a slash (ensureLeadingSlash): ``/api/x``."""
    mws = {"add": {"addPrefix": {"prefix": "api"}}}
    e = shared.route(lb(backend.url), mws)
    out = exchange(e.port, b"GET /x?q=1 HTTP/1.1\r\nHost: app.example\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 "), out
    settle(backend, 1)
    assert [r.target for r in backend.requests] == [b"/api/x?q=1"]


# --- a response before the end of the request body -----------------------------------------


def test_pass_host_header_false_wins_over_a_custom_host(shared, backend):
    """With passHostHeader false Traefik's proxy sets the server's host last, after
    the middlewares: a customRequestHeaders Host does not replace it."""
    mws = {"hdr": {"headers": {"customRequestHeaders": {"Host": "internal.example"}}}}
    e = shared.route(lb(backend.url, passHostHeader=False), mws)
    out = exchange(e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 "), out
    settle(backend, 1)
    [r] = backend.requests
    assert r.header(b"host") == [backend.url.removeprefix("http://").encode()]


def test_strip_prefix_strips_the_prefix_the_router_matched_however_it_is_escaped(shared, backend):
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
    e = shared.configure(dyn)
    for target in (b"/api/x", b"/%61pi/x", b"/%61%70i/x", b"/ap%69/x?q=%61"):
        out = exchange(e.port, b"GET %s HTTP/1.1\r\nHost: app.example\r\n\r\n" % target)
        assert out.startswith(b"HTTP/1.1 200 "), (target, out)
    settle(backend, 4)
    assert [r.target for r in backend.requests] == [b"/x", b"/x", b"/x", b"/x?q=%61"]
    assert [r.header(b"x-forwarded-prefix") for r in backend.requests] == [[b"/api"]] * 4


def test_custom_response_headers_reach_edges_own_error_answers(shared):
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
    e = shared.route(lb(url), mws)
    out = exchange(e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n")
    head = out.partition(b"\r\n\r\n")[0].lower().split(b"\r\n")
    assert head[0].startswith(b"http/1.1 502 "), out
    assert b"access-control-allow-origin: *" in head, out
    assert [x for x in head if x.startswith(b"content-type")] == [b"content-type: text/x-edge"], out
