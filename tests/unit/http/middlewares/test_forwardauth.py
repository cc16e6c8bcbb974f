"""forwardAuth's pure parts (edge.http.middlewares.forwardauth), against Traefik's own
test tables (pkg/middlewares/auth/forward_test.go): the headers of the request to
the auth server under each trustForwardHeader (writeHeader, oldWriteHeader), the
headers a 2xx answer copies onto the request, the answer a refusal makes, the
auth request's bytes, and the model's checks naming the key. The client and the
exchange are tested through a real entrypoint (tests/integration/http/test_forward_auth.py)."""

from __future__ import annotations

import msgspec
import pytest

from edge.config.dynamic import ForwardAuth as ForwardAuthConfig
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.http.codec import ResponseHead
from edge.http.codec.h11 import RequestParser
from edge.http.middlewares import Forward
from edge.http.middlewares.forwardauth import (
    Matcher,
    auth_request_headers,
    canonical,
    cookie_name,
    copied_headers,
    entrypoint_headers,
    forward_auth,
    refusal,
)

HOP = {
    "Connection": "Connection",
    "Keep-Alive": "KeepAlive",
    "Proxy-Authenticate": "ProxyAuthenticate",
    "Proxy-Authorization": "ProxyAuthorization",
    "Te": "Te",
    "Trailers": "Trailers",
    "Transfer-Encoding": "TransferEncoding",
    "Upgrade": "Upgrade",
    "X-CustomHeader": "CustomHeader",
}
FILTER_IN = {
    "X-CustomHeader": "CustomHeader",
    "Content-Type": "multipart/form-data; boundary=---123456",
}
XF = {
    "X-Forwarded-Proto": "http",
    "X-Forwarded-Host": "foo.bar",
    "X-Forwarded-Uri": "/path?q=1",
    "X-Forwarded-Method": "GET",
    "X-Forwarded-For": "10.0.0.1",
}
XFP = {**XF, "X-Forwarded-Port": "80"}

# (description, request headers, authRequestHeaders, trustForwardHeader, expected,
# nothing else expected): Traefik's TestForwardAuth_writeHeader and
# TestForwardAuth_oldWriteHeader (trust None). Its requests have no RemoteAddr, so
# it sets no X-Forwarded-For; here the client is 10.0.0.1, and X-Forwarded-For says so.
WRITE_HEADER = [
    ("trust forward header", {"Accept": "application/json", "X-Forwarded-Host": "fii.bir"},
     None, True, {"Accept": "application/json", "X-Forwarded-Host": "fii.bir"}, False),
    ("not trust forward header", {"Accept": "application/json", "X-Forwarded-Host": "fii.bir"},
     None, False, {"Accept": "application/json", "X-Forwarded-Host": "foo.bar"}, False),
    ("trust forward header with forwarded URI",
     {"Accept": "application/json", "X-Forwarded-Host": "fii.bir", "X-Forwarded-Uri": "/forward?q=1"},
     None, True,
     {"Accept": "application/json", "X-Forwarded-Host": "fii.bir", "X-Forwarded-Uri": "/forward?q=1"},
     False),
    ("not trust forward header with forward requested URI",
     {"Accept": "application/json", "X-Forwarded-Host": "fii.bir", "X-Forwarded-Uri": "/forward?q=1"},
     None, False,
     {"Accept": "application/json", "X-Forwarded-Host": "foo.bar", "X-Forwarded-Uri": "/path?q=1"},
     False),
    ("trust forward header with forwarded request Method", {"X-Forwarded-Method": "OPTIONS"},
     None, True, {"X-Forwarded-Method": "OPTIONS"}, False),
    ("not trust forward header with forward request Method", {"X-Forwarded-Method": "OPTIONS"},
     None, False, {"X-Forwarded-Method": "GET"}, False),
    ("remove hop-by-hop headers", HOP, None, False,
     {"X-CustomHeader": "CustomHeader", **XFP, "Proxy-Authenticate": "ProxyAuthenticate",
      "Proxy-Authorization": "ProxyAuthorization"}, True),
    ("filter forward request headers", FILTER_IN, ["X-CustomHeader"], False,
     {"X-CustomHeader": "CustomHeader", **XFP}, True),
    ("filter forward request headers doesn't add new headers", FILTER_IN,
     ["X-CustomHeader", "X-Non-Exists-Header"], False, {"X-CustomHeader": "CustomHeader", **XFP}, True),
    ("set empty User-Agent header if header is allowed but missing (Go writes none)",
     {"X-CustomHeader": "CustomHeader", "Accept": "application/json"},
     ["X-CustomHeader", "Accept", "User-Agent"], False,
     {"X-CustomHeader": "CustomHeader", "Accept": "application/json", **XFP}, True),
    ("authRequestHeaders and XForwarded are kept if trusted",
     {"X-CustomHeader": "CustomHeader", "X-Forwarded-Uri": "/path?q=2"}, ["X-CustomHeader"], True,
     {"X-CustomHeader": "CustomHeader", **XFP, "X-Forwarded-Uri": "/path?q=2"}, True),
    ("X-Forwarded and X_forwarded headers are removed when not trusted",
     {"X-CustomHeader": "CustomHeader", "X_forwarded_for": "127.0.0.1", "X-Forwarded-Proto": "xxx"},
     None, False, {"X-CustomHeader": "CustomHeader", **XFP}, True),
    ("X-Forwarded-Proto is not used to calculate X-Forwarded-Port if trustForwardHeader=false",
     {"X-CustomHeader": "CustomHeader", "X-Forwarded-Proto": "https"}, None, False,
     {"X-CustomHeader": "CustomHeader", **XFP}, True),
    ("trusted X-Forwarded-Proto https makes the port 443",
     {"X-Forwarded-Proto": "https"}, None, True, {**XF, "X-Forwarded-Proto": "https",
                                                   "X-Forwarded-Port": "443"}, True),
    ("trusted X-Forwarded-For gets the client appended", {"X-Forwarded-For": "1.2.3.4"},
     None, True, {**XFP, "X-Forwarded-For": "1.2.3.4, 10.0.0.1"}, True),
    # oldWriteHeader: trustForwardHeader unset.
    ("unset: not trust forward header", {"Accept": "application/json", "X-Forwarded-Host": "fii.bir"},
     None, None, {"Accept": "application/json", "X-Forwarded-Host": "foo.bar"}, False),
    ("unset: not trust forward header with forward requested URI",
     {"Accept": "application/json", "X-Forwarded-Host": "fii.bir", "X-Forwarded-Uri": "/forward?q=1"},
     None, None,
     {"Accept": "application/json", "X-Forwarded-Host": "foo.bar", "X-Forwarded-Uri": "/path?q=1"},
     False),
    ("unset: not trust forward header with forward request Method", {"X-Forwarded-Method": "OPTIONS"},
     None, None, {"X-Forwarded-Method": "GET"}, False),
    ("unset: remove hop-by-hop headers", HOP, None, None,
     {"X-CustomHeader": "CustomHeader", **XF, "Proxy-Authenticate": "ProxyAuthenticate",
      "Proxy-Authorization": "ProxyAuthorization"}, True),
    ("unset: filter forward request headers", FILTER_IN, ["X-CustomHeader"], None,
     {"X-CustomHeader": "CustomHeader", **XF}, True),
    ("unset: filter forward request headers doesn't add new headers", FILTER_IN,
     ["X-CustomHeader", "X-Non-Exists-Header"], None, {"X-CustomHeader": "CustomHeader", **XF}, True),
    ("unset: X-Forwarded-Prefix is kept for non-breaking behavior",
     {"X-CustomHeader": "CustomHeader", "X-Forwarded-Prefix": "foo.bar"}, None, None,
     {"X-CustomHeader": "CustomHeader", **XF, "X-Forwarded-Prefix": "foo.bar"}, True),
]  # fmt: skip


def _write(headers: dict, allowed, trust) -> dict[str, list[str]]:
    out = auth_request_headers(
        [(k.encode(), v.encode()) for k, v in headers.items()],
        trust=trust,
        allowed=frozenset(h.lower() for h in _allowed(allowed, trust)) if allowed else None,
        client_ip=b"10.0.0.1",
        tls=False,
        method=b"GET",
        host=b"foo.bar",
        uri=b"/path?q=1",
    )
    got: dict[str, list[str]] = {}
    for name, value in out:
        got.setdefault(canonical(name).decode(), []).append(value.decode())
    return got


def _allowed(allowed: list[str], trust) -> list[bytes]:
    """What the middleware builds from authRequestHeaders (ForwardAuth.__init__)."""
    config = ForwardAuthConfig(
        address="http://auth", auth_request_headers=allowed, trust_forward_header=trust
    )
    built = forward_auth("m", config)
    assert built.allowed is not None
    return sorted(built.allowed)


@pytest.mark.parametrize(
    ("headers", "allowed", "trust", "expected", "exact"),
    [case[1:] for case in WRITE_HEADER],
    ids=[case[0] for case in WRITE_HEADER],
)
def test_auth_request_headers_as_traefik_writes_them(headers, allowed, trust, expected, exact):
    got = _write(headers, allowed, trust)
    for name, value in expected.items():
        assert got.get(canonical(name.encode()).decode()) == [value], name
    if exact:
        assert set(got) == {canonical(n.encode()).decode() for n in expected}


def test_entrypoint_headers_untrusted_client_loses_its_forwarding_headers():
    seen = entrypoint_headers(
        [(b"X-Forwarded-For", b"6.6.6.6"), (b"x_real_ip", b"6.6.6.6"), (b"Forwarded", b"for=x"),
         (b"X-Forwarded-Uri", b"/evil"), (b"Accept", b"*/*")],
        trusted=False, client_ip=b"10.0.0.1", proto=b"https", host=b"a.example:8443",
        port=b"8443",
    )  # fmt: skip
    assert seen == [
        (b"Accept", b"*/*"),
        (b"X-Real-Ip", b"10.0.0.1"),
        (b"X-Forwarded-Proto", b"https"),
        (b"X-Forwarded-Port", b"8443"),
        (b"X-Forwarded-Host", b"a.example:8443"),
    ]


def test_entrypoint_headers_trusted_client_keeps_them_joined():
    seen = entrypoint_headers(
        [(b"X-Forwarded-For", b"1.1.1.1"), (b"X-Forwarded-For", b"2.2.2.2"),
         (b"X-Forwarded-Proto", b"https"), (b"X-Real-Ip", b"1.1.1.1")],
        trusted=True, client_ip=b"10.0.0.1", proto=b"http", host=b"a", port=b"80",
        prefix=b"/api", edits=[(b"X-User", b"ann"), (b"X-Real-Ip", b"")],
    )  # fmt: skip
    assert seen == [
        (b"X-Forwarded-Proto", b"https"),
        (b"X-Forwarded-For", b"1.1.1.1, 2.2.2.2"),
        (b"X-Forwarded-Port", b"80"),
        (b"X-Forwarded-Host", b"a"),
        (b"X-Forwarded-Prefix", b"/api"),
        (b"X-User", b"ann"),
    ]


def test_connection_named_headers_do_not_go_but_managed_ones_stay():
    got = auth_request_headers(
        [(b"Connection", b"X-Secret, x-forwarded-host"), (b"X-Secret", b"s"),
         (b"X-Forwarded-Host", b"h")],
        trust=True, allowed=None, client_ip=b"1.2.3.4", tls=True, method=b"POST",
        host=b"h2", uri=b"/",
    )  # fmt: skip
    assert dict(got) == {
        b"X-Forwarded-Host": b"h",
        b"X-Forwarded-For": b"1.2.3.4",
        b"X-Forwarded-Method": b"POST",
        b"X-Forwarded-Proto": b"https",
        b"X-Forwarded-Port": b"443",
        b"X-Forwarded-Uri": b"/",
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [(b"x-auth-user", b"X-Auth-User"), (b"X-AUTH", b"X-Auth"), (b"foo-bar-", b"Foo-Bar-"),
     (b"X_forwarded_for", b"X_forwarded_for"), (b"bad name", b"bad name"), (b"", b"")],
)  # fmt: skip
def test_canonical_as_go(name, expected):
    assert canonical(name) == expected


def test_copied_headers_as_traefiks_forward_auth_success():
    """TestForwardAuthSuccess: X-Auth-User and X-Auth-Group (both of its values) from
    the answer replace the client's; ^Foo- takes Foo-Bar from the answer and removes
    the client's Foo-Bar and Foo-Baz; X-Auth-Secret is not copied."""
    answer = [
        (b"X-Auth-User", b"user@example.com"),
        (b"X-Auth-Secret", b"secret"),
        (b"x-auth-group", b"group1"),
        (b"X-Auth-Group", b"group2"),
        (b"foo-bar", b"auth-value"),
        (b"Set-Cookie", b"authCookie=Auth"),
    ]
    edits = copied_headers(
        [b"X-Auth-Group", b"Foo-Bar", b"foo-baz", b"Accept"],
        answer,
        (b"X-Auth-User", b"X-Auth-Group"),
        Matcher("^Foo-"),
    )
    # Applied in order as Forward.set_header's edits are (an empty value removes).
    request = [(b"X-Auth-Group", b"admin_group"), (b"Foo-Bar", b"c"), (b"foo-baz", b"c"),
               (b"Accept", b"*/*")]  # fmt: skip
    for name in {n.lower() for n, _ in edits}:
        request = [(n, v) for n, v in request if n.lower() != name]
    request += [(n, v) for n, v in edits if v]
    assert sorted(request) == sorted(
        [
            (b"Accept", b"*/*"),
            (b"X-Auth-User", b"user@example.com"),
            (b"X-Auth-Group", b"group1"),
            (b"X-Auth-Group", b"group2"),
            (b"Foo-Bar", b"auth-value"),
        ]
    )


def test_regex_matches_canonical_names():
    matcher = Matcher("^X-Token$")
    assert copied_headers([], [(b"x-token", b"t")], (), matcher) == [(b"X-Token", b"t")]
    assert matcher.kept == {b"x-token": b"X-Token"}  # the verdict is kept for the next
    assert copied_headers([], [(b"x-token", b"t")], (), matcher) == [(b"X-Token", b"t")]
    assert copied_headers([], [(b"x-token", b"t")], (), Matcher("^x-token$")) == []


def _head(status: int, headers: list[tuple[bytes, bytes]]) -> ResponseHead:
    return ResponseHead(status, b"", b"1.1", headers, True, False, 0, True)


def test_refusal_is_the_answer_as_it_came_less_hop_by_hop():
    head = _head(
        403,
        [(b"Content-Type", b"text/plain; charset=utf-8"), (b"X-Content-Type-Options", b"nosniff"),
         (b"Set-Cookie", b"example=testing; Path=/"), (b"X-Foo", b"bar"), (b"Content-Length", b"10"),
         (b"Connection", b"test"), (b"Keep-Alive", b"test"), (b"Te", b"test"), (b"Trailers", b"t"),
         (b"Upgrade", b"test"), (b"Proxy-Authenticate", b"test"),
         (b"WWW-Authenticate", b'Basic realm="x"')],
    )  # fmt: skip
    answer = refusal(head, b"Forbidden\n", address="http://auth:9/v", preserve_location=False)
    assert answer.status == 403
    assert answer.body == b"Forbidden\n"
    assert answer.content_type == b"text/plain; charset=utf-8"
    assert answer.lines == (
        b"X-Content-Type-Options: nosniff\r\nSet-Cookie: example=testing; Path=/\r\n"
        b"X-Foo: bar\r\nProxy-Authenticate: test\r\n"
        b'WWW-Authenticate: Basic realm="x"\r\n'
    )


@pytest.mark.parametrize(
    ("location", "preserve", "expected"),
    [
        (b"http://example.com/redirect-test", False, b"http://example.com/redirect-test"),
        (b"/login?next=1", False, b"http://auth:9/login?next=1"),
        (b"login", False, b"http://auth:9/v/login"),
        (b"/login?next=1", True, b"/login?next=1"),
    ],
)
def test_refusal_location_resolved_against_the_address(location, preserve, expected):
    answer = refusal(
        _head(302, [(b"Location", location)]),
        b"",
        address="http://auth:9/v/",
        preserve_location=preserve,
    )
    assert answer.lines == b"Location: %s\r\n" % expected


def test_cookie_name():
    assert cookie_name(b"authCookie=Auth; Path=/") == b"authCookie"
    assert cookie_name(b" n =v") == b"n"


def _forward(raw: bytes, trusted: bool = False, scheme: bytes = b"http") -> Forward:
    heads = []

    class Handler:
        def on_head(self, head):
            heads.append(head)

        def on_body(self, data): ...
        def on_end(self): ...
        def on_upgrade(self, rest): ...

    RequestParser(Handler()).feed(raw)
    head = heads[0]
    return Forward(
        "a.example", b"/p/x", b"q=1", head.method, head.host, scheme,
        head if trusted else None, head, "10.0.0.1",
    )  # fmt: skip


def test_auth_request_bytes():
    config = ForwardAuthConfig(
        address="http://ann:s%20e@auth.example:9000/verify?app=1",
        trust_forward_header=False,
        preserve_request_method=True,
    )
    middleware = forward_auth("m", config)
    fwd = _forward(
        b"POST /p/x?q=1 HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0\r\n"
        b"X-Forwarded-For: 6.6.6.6\r\nCookie: c=1\r\n\r\n"
    )
    data, method = middleware._request(fwd)
    assert method == b"POST"
    assert data == (
        b"POST /verify?app=1 HTTP/1.1\r\nHost: auth.example:9000\r\nCookie: c=1\r\n"
        b"X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Method: POST\r\n"
        b"X-Forwarded-Proto: http\r\nX-Forwarded-Port: 80\r\nX-Forwarded-Host: a.example\r\n"
        b"X-Forwarded-Uri: /p/x?q=1\r\nAuthorization: Basic YW5uOnMgZQ==\r\n"
        b"Content-Length: 0\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("framing", "body", "expected"),
    [
        (b"Content-Length: 5\r\n", b"hello", b"Content-Length: 5\r\n\r\nhello"),
        (b"Transfer-Encoding: chunked\r\n", b"hello",
         b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        (b"Transfer-Encoding: chunked\r\n", b"", b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        (b"Content-Length: 0\r\n", b"", b"Content-Length: 0\r\n\r\n"),  # POST's
    ],
)  # fmt: skip
def test_auth_request_bytes_with_the_body(framing, body, expected):
    """forwardBody: the body read from the client goes framed as the client's was
    (Traefik copies ContentLength and TransferEncoding onto the auth request)."""
    config = ForwardAuthConfig(
        address="http://auth/", trust_forward_header=False, preserve_request_method=True,
        forward_body=True, max_body_size=100,
    )  # fmt: skip
    middleware = forward_auth("m", config)
    assert (middleware.forward_body, middleware.max_body) == (True, 100)
    fwd = _forward(b"POST /p/x?q=1 HTTP/1.1\r\nHost: a.example\r\n" + framing + b"\r\n")
    data, method = middleware._request(fwd, body)
    assert method == b"POST"
    assert data.endswith(b"X-Forwarded-Uri: /p/x?q=1\r\n" + expected), data


def test_auth_request_unset_trust_keeps_the_entrypoints_port_and_real_ip():
    middleware = forward_auth("m", ForwardAuthConfig(address="http://auth/"))
    fwd = _forward(b"GET /p/x?q=1 HTTP/1.1\r\nHost: a.example:8443\r\n\r\n", scheme=b"https")
    data, method = middleware._request(fwd)
    assert method == b"GET"
    assert data == (
        b"GET / HTTP/1.1\r\nHost: auth\r\nX-Real-Ip: 10.0.0.1\r\nX-Forwarded-Port: 8443\r\n"
        b"X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Method: GET\r\n"
        b"X-Forwarded-Host: a.example:8443\r\nX-Forwarded-Uri: /p/x?q=1\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ({}, "forwardAuth.address: must not be empty"),
        ({"address": "auth:9000"}, "forwardAuth.address: 'auth:9000' is not an http:// or https://"),
        ({"address": "http://auth:99999"}, "forwardAuth.address: 'http://auth:99999': Port out of range"),
        ({"address": "http://a b"}, "forwardAuth.address: 'http://a b' holds a space"),
        ({"address": "http://a", "authResponseHeadersRegex": "(?=x)"},
         "forwardAuth.authResponseHeadersRegex: invalid regexp '(?=x)'"),
        ({"address": "http://a", "authResponseHeaders": ["X Bad"]},
         "forwardAuth.authResponseHeaders[0]: invalid header name 'X Bad'"),
        ({"address": "http://a", "authRequestHeaders": ["ok", "a:b"]},
         "forwardAuth.authRequestHeaders[1]: invalid header name 'a:b'"),
        ({"address": "http://a", "headerField": "a b"}, "forwardAuth.headerField: invalid header name"),
        ({"address": "http://a", "authSigninURL": "http://x/\r\nX: y"}, "forwardAuth.authSigninURL: "),
        ({"address": "https://a", "tls": {"cert": "c.pem"}},
         "forwardAuth.tls.cert, key: both must be set, or neither"),
        ({"address": "https://a", "tls": {"ca": "/nonexistent/ca.pem"}},
         "forwardAuth.tls.ca /nonexistent/ca.pem: no such file"),
        ({"address": "https://a", "tls": {"ca": "-----BEGIN CERTIFICATE-----\nx\n"}},
         "forwardAuth.tls.ca inline PEM: no certificate could be read"),
    ],
)  # fmt: skip
def test_model_check_names_the_key(doc, error):
    config = msgspec.convert({"forwardAuth": doc}, MiddlewareConfig)
    problems = config.check()
    assert len(problems) == 1 and problems[0].startswith(error), problems


def test_model_keys_are_traefiks():
    doc = {
        "address": "https://auth",
        "tls": {"insecureSkipVerify": True, "caOptional": True},
        "trustForwardHeader": True,
        "authResponseHeaders": ["X-User"],
        "authResponseHeadersRegex": "^X-",
        "authRequestHeaders": ["Cookie"],
        "maxResponseBodySize": 100,
        "addAuthCookiesToResponse": ["s"],
        "headerField": "X-User",
        "preserveLocationHeader": True,
        "preserveRequestMethod": True,
        "authSigninURL": "https://login",
        "forwardBody": True,
        "maxBodySize": 1024,
    }
    config = msgspec.convert({"forwardAuth": doc}, MiddlewareConfig)
    assert config.kind == "forwardAuth"
    assert config.check() == []
    assert msgspec.to_builtins(config.forward_auth) == doc


def test_forward_body_and_max_body_size_are_served():
    """forwardBody and maxBodySize are read as Traefik's keys: the middleware is
    enabled (maxBodySize -1, no limit, by default)."""
    doc = {
        "http": {
            "routers": {"r": {"rule": "Host(`a`)", "service": "s", "middlewares": ["fa"]}},
            "services": {"s": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:1"}]}}},
            "middlewares": {"fa": {"forwardAuth": {"address": "http://a", "forwardBody": True}}},
        }
    }
    rt = build_runtime(merge({"file": decode_dynamic(doc)}), {"web": "tcp"})
    info = rt.http_middlewares["fa@file"]
    assert (info.status, info.errors) == ("enabled", [])
    middleware = forward_auth("fa@file", info.config.forward_auth)
    assert (middleware.forward_body, middleware.max_body) == (True, -1)
