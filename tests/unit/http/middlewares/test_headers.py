"""The headers middleware (edge.http.middlewares.headers) on Traefik's test tables
(pkg/middlewares/headers: header_test.go, secure_test.go, headers_test.go): CORS
preflights and responses, security headers, allowedHosts. What a response gets is
the fixed edits, then the ones set for the request (Forward.response_edits), then
Origin joined to the response's own Vary."""

from __future__ import annotations

import msgspec
import pytest

from edge.config.dynamic import Headers as HeadersConfig
from edge.http.codec import RequestHead
from edge.http.middlewares import Forward, Pipeline
from edge.http.middlewares.headers import headers, vary_origin


def head(method: bytes, headers_: list[tuple[bytes, bytes]]) -> RequestHead:
    return RequestHead(method, b"/foo", b"1.1", headers_, True, False, None, False, False)


def serve(config: dict, method=b"GET", request=(), response=(), scheme=b"http", host=b"foo.com"):
    """(status, headers of the response) as a client gets them; None: forwarded
    (status 200 from the backend, whose headers are ``response``)."""
    cfg = msgspec.convert(config, HeadersConfig)
    assert cfg.check() is None
    mw = headers("h", cfg)
    req = head(method, list(request))
    fwd = Forward(host.decode(), b"/foo", b"", method, host, scheme, None, req)
    answer = mw.request(fwd)
    if answer is not None:
        lines = [line.split(b": ", 1) for line in answer.lines.split(b"\r\n") if line]
        return answer.status, {n.decode(): v.decode() for n, v in lines}
    edits = Pipeline([mw]).respond(fwd)
    out = dict(response)
    if edits is not None:
        if mw.vary:
            edits = vary_origin(edits, list(response))
        for name, value in edits.pairs:
            for k in [k for k in out if k.lower() == name.lower()]:
                del out[k]
            if value:
                out[name] = value
    return 200, {n.decode(): v.decode() for n, v in out.items()}


PREFLIGHT = {
    b"Access-Control-Request-Headers": b"origin",
    b"Access-Control-Request-Method": b"GET",
    b"Origin": b"https://foo.bar.org",
}
METHODS = ["GET", "OPTIONS", "PUT"]

# (desc, config, request headers, expected headers) of TestNewHeader_CORSPreflights
CORS_PREFLIGHTS = [
    (
        "Test Simple Preflight",
        {
            "accessControlAllowMethods": METHODS,
            "accessControlAllowOriginList": ["https://foo.bar.org"],
            "accessControlMaxAge": 600,
        },
        PREFLIGHT,
        {
            "Access-Control-Allow-Origin": "https://foo.bar.org",
            "Access-Control-Max-Age": "600",
            "Access-Control-Allow-Methods": "GET,OPTIONS,PUT",
        },
    ),
    (
        "Wildcard origin Preflight",
        {
            "accessControlAllowMethods": METHODS,
            "accessControlAllowOriginList": ["*"],
            "accessControlMaxAge": 600,
        },
        PREFLIGHT,
        {
            "Access-Control-Allow-Origin": "*",
            "Access-Control-Max-Age": "600",
            "Access-Control-Allow-Methods": "GET,OPTIONS,PUT",
        },
    ),
    (
        "Allow Credentials Preflight",
        {
            "accessControlAllowMethods": METHODS,
            "accessControlAllowOriginList": ["*"],
            "accessControlAllowCredentials": True,
            "accessControlMaxAge": 600,
        },
        PREFLIGHT,
        {
            "Access-Control-Allow-Origin": "https://foo.bar.org",
            "Access-Control-Max-Age": "600",
            "Access-Control-Allow-Methods": "GET,OPTIONS,PUT",
            "Access-Control-Allow-Credentials": "true",
        },
    ),
    (
        "Allow Headers Preflight",
        {
            "accessControlAllowMethods": METHODS,
            "accessControlAllowOriginList": ["*"],
            "accessControlAllowHeaders": ["origin", "X-Forwarded-For"],
            "accessControlMaxAge": 600,
        },
        PREFLIGHT,
        {
            "Access-Control-Allow-Origin": "*",
            "Access-Control-Max-Age": "600",
            "Access-Control-Allow-Methods": "GET,OPTIONS,PUT",
            "Access-Control-Allow-Headers": "origin,X-Forwarded-For",
        },
    ),
    (
        "No Request Headers Preflight",
        {
            "accessControlAllowMethods": METHODS,
            "accessControlAllowOriginList": ["*"],
            "accessControlAllowHeaders": ["origin", "X-Forwarded-For"],
            "accessControlMaxAge": 600,
        },
        {b"Access-Control-Request-Method": b"GET", b"Origin": b"https://foo.bar.org"},
        {
            "Access-Control-Allow-Origin": "*",
            "Access-Control-Max-Age": "600",
            "Access-Control-Allow-Methods": "GET,OPTIONS,PUT",
            "Access-Control-Allow-Headers": "origin,X-Forwarded-For",
        },
    ),
    (
        "Nil MaxAge Preflight",
        {"accessControlAllowMethods": METHODS, "accessControlAllowOriginList": ["*"]},
        {b"Access-Control-Request-Method": b"GET", b"Origin": b"https://foo.bar.org"},
        {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET,OPTIONS,PUT"},
    ),
    (
        "Wildcards with credentials echo the request",
        {
            "accessControlAllowMethods": ["*"],
            "accessControlAllowHeaders": ["*"],
            "accessControlAllowOriginList": ["*"],
            "accessControlAllowCredentials": True,
        },
        {**PREFLIGHT, b"Access-Control-Request-Method": b"PATCH"},
        {
            "Access-Control-Allow-Origin": "https://foo.bar.org",
            "Access-Control-Allow-Methods": "PATCH",
            "Access-Control-Allow-Headers": "origin",
            "Access-Control-Allow-Credentials": "true",
        },
    ),
]


@pytest.mark.parametrize(
    ("config", "request_headers", "expected"),
    [case[1:] for case in CORS_PREFLIGHTS],
    ids=[case[0] for case in CORS_PREFLIGHTS],
)
def test_cors_preflight(config, request_headers, expected):
    assert serve(config, b"OPTIONS", request_headers.items()) == (200, expected)


ORIGIN = {b"Origin": b"https://foo.bar.org"}

# (desc, config, request headers, backend's response headers, expected headers)
CORS_RESPONSES = [
    (
        "Test Simple Request",
        {"accessControlAllowOriginList": ["https://foo.bar.org"]},
        ORIGIN,
        {},
        {"Access-Control-Allow-Origin": "https://foo.bar.org"},
    ),
    (
        "Wildcard origin Request",
        {"accessControlAllowOriginList": ["*"]},
        ORIGIN,
        {},
        {"Access-Control-Allow-Origin": "*"},
    ),
    (
        "Regexp Origin Request",
        {"accessControlAllowOriginListRegex": ["^https?://([a-z]+)\\.bar\\.org$"]},
        ORIGIN,
        {},
        {"Access-Control-Allow-Origin": "https://foo.bar.org"},
    ),
    (
        "Partial Regexp Origin Request",
        {"accessControlAllowOriginListRegex": ["([a-z]+)\\.bar"]},
        ORIGIN,
        {},
        {"Access-Control-Allow-Origin": "https://foo.bar.org"},
    ),
    (
        "Regexp Origin Request without matching",
        {"accessControlAllowOriginListRegex": ["([a-z]+)\\.bar\\.org"]},
        {b"Origin": b"https://bar.org"},
        {},
        {},
    ),
    ("Empty origin Request", {"accessControlAllowOriginList": ["https://foo.bar.org"]}, {}, {}, {}),
    (
        "Allow Credentials Request",
        {"accessControlAllowOriginList": ["*"], "accessControlAllowCredentials": True},
        ORIGIN,
        {},
        {
            "Access-Control-Allow-Origin": "https://foo.bar.org",
            "Access-Control-Allow-Credentials": "true",
        },
    ),
    (
        "Expose Headers Request",
        {
            "accessControlAllowOriginList": ["*"],
            "accessControlExposeHeaders": ["origin", "X-Forwarded-For"],
        },
        ORIGIN,
        {},
        {
            "Access-Control-Allow-Origin": "*",
            "Access-Control-Expose-Headers": "origin,X-Forwarded-For",
        },
    ),
    (
        "Test Simple Request with Vary Headers",
        {"accessControlAllowOriginList": ["https://foo.bar.org"], "addVaryHeader": True},
        ORIGIN,
        {},
        {"Access-Control-Allow-Origin": "https://foo.bar.org", "Vary": "Origin"},
    ),
    (
        "Test Simple Request with Vary Headers and non-empty response",
        {"accessControlAllowOriginList": ["https://foo.bar.org"], "addVaryHeader": True},
        ORIGIN,
        {b"Vary": b"Testing"},
        {"Access-Control-Allow-Origin": "https://foo.bar.org", "Vary": "Testing,Origin"},
    ),
    (
        "Test Simple Request with Vary Headers and existing vary:origin response",
        {"accessControlAllowOriginList": ["https://foo.bar.org"], "addVaryHeader": True},
        ORIGIN,
        {b"Vary": b"Origin"},
        {"Access-Control-Allow-Origin": "https://foo.bar.org", "Vary": "Origin"},
    ),
    (
        "Test Simple Request with non-empty response: set ACAO",
        {"accessControlAllowOriginList": ["*"]},
        ORIGIN,
        {b"Access-Control-Allow-Origin": b"http://foo.bar.org"},
        {"Access-Control-Allow-Origin": "*"},
    ),
    (
        "Test Simple CustomRequestHeaders Not Hijacked by CORS",
        {"customRequestHeaders": {"foo": "bar"}},
        PREFLIGHT,
        {},
        {},
    ),
]


@pytest.mark.parametrize(
    ("config", "request_headers", "response", "expected"),
    [case[1:] for case in CORS_RESPONSES],
    ids=[case[0] for case in CORS_RESPONSES],
)
def test_cors_response(config, request_headers, response, expected):
    assert serve(config, b"GET", request_headers.items(), response.items()) == (200, expected)


@pytest.mark.parametrize(
    ("config", "response", "expected"),
    [
        (
            {"customResponseHeaders": {"Testing": "foo", "Testing2": "bar"}},
            {b"Foo": b"bar"},
            {"Foo": "bar", "Testing": "foo", "Testing2": "bar"},
        ),
        (
            {"customResponseHeaders": {"Testing": "foo", "Testing2": ""}},
            {b"Foo": b"bar"},
            {"Foo": "bar", "Testing": "foo"},
        ),
        (
            {"customResponseHeaders": {"Testing": "foo", "Foo": ""}},
            {b"Foo": b"bar"},
            {"Testing": "foo"},
        ),
    ],
)
def test_custom_response_headers(config, response, expected):
    assert serve(config, response=response.items()) == (200, expected)


# (desc, config, expected) of secure_test.go, over plain HTTP
SECURE = [
    (
        "PermissionsPolicy",
        {"permissionsPolicy": "microphone=(),"},
        {"Permissions-Policy": "microphone=(),"},
    ),
    (
        "STSSeconds",
        {"stsSeconds": 1, "forceSTSHeader": True},
        {"Strict-Transport-Security": "max-age=1"},
    ),
    (
        "STSSeconds and STSPreload",
        {"stsSeconds": 1, "forceSTSHeader": True, "stsPreload": True},
        {"Strict-Transport-Security": "max-age=1; preload"},
    ),
    ("CustomFrameOptionsValue", {"customFrameOptionsValue": "foo"}, {"X-Frame-Options": "foo"}),
    ("FrameDeny", {"frameDeny": True}, {"X-Frame-Options": "DENY"}),
    ("ContentTypeNosniff", {"contentTypeNosniff": True}, {"X-Content-Type-Options": "nosniff"}),
    ("STS over plain HTTP: none", {"stsSeconds": 31536000}, {}),
    ("BrowserXssFilter", {"browserXssFilter": True}, {"X-XSS-Protection": "1; mode=block"}),
    (
        "CustomBrowserXSSValue",
        {"browserXssFilter": True, "customBrowserXSSValue": "0"},
        {"X-XSS-Protection": "0"},
    ),
    (
        "CSP",
        {
            "contentSecurityPolicy": "default-src 'self'",
            "contentSecurityPolicyReportOnly": "img-src *",
            "referrerPolicy": "no-referrer",
        },
        {
            "Content-Security-Policy": "default-src 'self'",
            "Content-Security-Policy-Report-Only": "img-src *",
            "Referrer-Policy": "no-referrer",
        },
    ),
    (
        "isDevelopment drops STS",
        {"stsSeconds": 1, "forceSTSHeader": True, "isDevelopment": True},
        {},
    ),
]


@pytest.mark.parametrize(
    ("config", "expected"), [case[1:] for case in SECURE], ids=[case[0] for case in SECURE]
)
def test_security_headers(config, expected):
    assert serve(config) == (200, expected)


@pytest.mark.parametrize(
    ("scheme", "request_headers", "expected"),
    [
        (
            b"https",
            {},
            {
                "Strict-Transport-Security": "max-age=315360000; includeSubDomains; preload",
                "Public-Key-Pins": 'pin-sha256="x"',
            },
        ),
        (b"http", {}, {}),
        (
            b"http",
            {b"X-Forwarded-Proto": b"https"},
            {
                "Strict-Transport-Security": "max-age=315360000; includeSubDomains; preload",
                "Public-Key-Pins": 'pin-sha256="x"',
            },
        ),
        (b"http", {b"X-Forwarded-Proto": b"http"}, {}),
    ],
)
def test_sts_and_public_key_go_over_https_only(scheme, request_headers, expected):
    config = {
        "stsSeconds": 315360000,
        "stsIncludeSubdomains": True,
        "stsPreload": True,
        "publicKey": 'pin-sha256="x"',
        "sslProxyHeaders": {"X-Forwarded-Proto": "https"},
    }
    assert serve(config, request=request_headers.items(), scheme=scheme) == (200, expected)


@pytest.mark.parametrize(
    ("host", "request_headers", "dev", "status"),
    [
        (b"foo.com", {}, False, 200),  # in the list
        (b"", {}, False, 500),  # no host
        (b"boo.com", {}, False, 500),  # not in the list
        (b"FOO.com", {}, False, 200),  # compared case-insensitively
        (b"boo.com", {b"X-Forwarded-Host": b"bar.com"}, False, 200),  # hostsProxyHeaders
        (b"boo.com", {}, True, 200),  # isDevelopment: no check
    ],
)
def test_allowed_hosts(host, request_headers, dev, status):
    config = {
        "allowedHosts": ["foo.com", "bar.com"],
        "hostsProxyHeaders": ["X-Forwarded-Host"],
        "isDevelopment": dev,
    }
    got = serve(config, request=request_headers.items(), host=host)
    assert got[0] == status


def test_fixed_headers_run_no_code_per_request():
    """Headers that do not depend on the request are edits made once: the
    middleware has no per-request step, so the pipeline calls nothing for it."""
    fixed = headers(
        "h",
        msgspec.convert(
            {"frameDeny": True, "stsSeconds": 1, "forceSTSHeader": True}, HeadersConfig
        ),
    )
    assert Pipeline([fixed]).steps == ()
    cors = headers("h", msgspec.convert({"accessControlAllowOriginList": ["*"]}, HeadersConfig))
    assert Pipeline([cors]).steps == (cors,)


@pytest.mark.parametrize(
    ("request_headers", "sent"),
    [
        ([], b"add"),
        ([(b"X-Add", b"one")], b"one,add"),
        ([(b"x-add", b"one"), (b"Other", b"o"), (b"X-ADD", b"two")], b"one,two,add"),
    ],
    ids=["absent", "one-line", "two-lines"],
)
def test_append_request_headers_append_to_the_requests_own(request_headers, sent):
    """appendRequestHeaders (the Gateway provider's ``add``): the value after every
    value the request holds for that header, one comma-joined line."""
    cfg = msgspec.convert({"appendRequestHeaders": {"X-Add": "add"}}, HeadersConfig)
    assert cfg.check() is None
    mw = headers("h", cfg)
    fwd = Forward("foo.com", b"/foo", b"", b"GET", b"foo.com", b"http", None,
                  head(b"GET", request_headers))  # fmt: skip
    assert mw.request(fwd) is None
    assert fwd.headers == [(b"X-Add", sent)]


@pytest.mark.parametrize(
    ("origins", "credentials", "origin", "allowed"),
    [
        # Traefik's matchOrigin walks the list in order: an origin before the first
        # ``*`` is itself, any other is ``*`` (itself with credentials).
        (["https://a", "*", "https://b"], False, b"https://a", "https://a"),
        (["https://a", "*", "https://b"], False, b"https://b", "*"),
        (["https://a", "*"], True, b"https://c", "https://c"),
        (["*"], False, b"*", "*"),
        (["https://a"], False, b"https://b", None),
        # Without Origin, a list holding ``*`` still answers ``*`` (Traefik matches "").
        (["*"], False, None, "*"),
        (["https://a"], False, None, None),
    ],
)
def test_the_origin_list_is_walked_as_traefik_does(origins, credentials, origin, allowed):
    config = {"accessControlAllowOriginList": origins, "accessControlAllowCredentials": credentials}
    request = {b"Origin": origin} if origin is not None else {}
    got = serve(config, request=request.items())[1].get("Access-Control-Allow-Origin")
    assert got == allowed


def test_a_regexp_matching_nothing_allows_a_request_without_origin():
    """``accessControlAllowOriginListRegex: [".*"]`` matches the empty Origin, so
    Traefik sets the header empty; edge's empty edit removes it (the backend's own
    ACAO goes either way); one needing a character does not touch it."""
    response = {b"Access-Control-Allow-Origin": b"https://backend"}
    empty = serve({"accessControlAllowOriginListRegex": [".*"]}, response=response.items())
    assert "Access-Control-Allow-Origin" not in empty[1]
    kept = serve({"accessControlAllowOriginListRegex": [".+"]}, response=response.items())
    assert kept[1]["Access-Control-Allow-Origin"] == "https://backend"
