"""Traefik's HTTP middlewares through a real entrypoint, under both codecs: the path
rewrites (stripPrefix, stripPrefixRegex, replacePathRegex, replacePath), redirectRegex,
chain, contentType, the headers middleware (security headers, CORS with a
browser-like preflight sent by curl, allowedHosts), and a middleware with a bad
regexp disabled with its router while the rest serves. The backend is ``edge whoami``,
which answers with what it received."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.harness import Edge, get, lb, need

MIDDLEWARES = {
    "strip": {"stripPrefix": {"prefixes": ["/mismatch", "/api/", "/api"]}},
    "strip-re": {"stripPrefixRegex": {"regex": ["/v[0-9]+/"]}},
    "replace-re": {
        "replacePathRegex": {"regex": "^/old/(?P<rest>.*)", "replacement": "/new/${rest}"}
    },
    "replace": {"replacePath": {"path": "/fixed"}},
    "redirect-re": {
        "redirectRegex": {
            "regex": "^http://([^/:]+)(:[0-9]+)?/go/(.*)",
            "replacement": "https://$1/to/$3",
        }
    },
    "both": {"chain": {"middlewares": ["strip-re", "replace-re"]}},
    "ct": {"contentType": {}},
    "secure": {
        "headers": {
            "frameDeny": True,
            "contentTypeNosniff": True,
            "stsSeconds": 60,
            "sslProxyHeaders": {"X-Forwarded-Proto": "https"},
            "contentSecurityPolicy": "default-src 'self'",
            "customResponseHeaders": {"X-Served-By": "edge"},
        }
    },
    "cors": {
        "headers": {
            "accessControlAllowOriginList": ["https://app.example"],
            "accessControlAllowMethods": ["GET", "PUT"],
            "accessControlAllowHeaders": ["Content-Type"],
            "accessControlMaxAge": 600,
            "addVaryHeader": True,
        }
    },
    "hosts": {"headers": {"allowedHosts": ["hosts.example"]}},
    "bad": {"replacePathRegex": {"regex": "(a)\\1", "replacement": "/x"}},
}
ROUTERS = {
    "strip": ["strip"],
    "rewrite": ["strip-re", "replace-re"],
    "replace": ["replace"],
    "redirect": ["redirect-re"],
    "chain": ["both"],
    "ct": ["ct"],
    "secure": ["secure"],
    "cors": ["cors"],
    "hosts": ["hosts"],
    "bad": ["bad"],
}


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, whoami):
    dyn = {
        "http": {
            "routers": {
                name: {"rule": f"Host(`{name}.example`)", "service": "app", "middlewares": mws}
                for name, mws in ROUTERS.items()
            },
            "services": {"app": lb(whoami.url)},
            "middlewares": MIDDLEWARES,
        }
    }
    e = Edge(tmp_path_factory.mktemp(request.param), dyn, parser=request.param)
    yield e
    e.stop()


def seen(edge: Edge, host: str, path: str, headers: dict | None = None):
    """(status, response headers, what whoami received) for one request."""
    status, hdrs, body = get(edge.port, path, host=host, headers=headers)
    return status, hdrs, json.loads(body) if status == 200 and body.startswith(b"{") else body


def test_strip_prefix_tries_prefixes_in_order_and_refuses_a_path_that_moves(edge):
    status, _, got = seen(edge, "strip.example", "/api/users?q=1")
    assert status == 200
    assert (got["path"], got["query"]) == ("/users", "q=1")
    assert got["headers"]["X-Forwarded-Prefix"] == ["/api/"]  # as configured, first match
    status, _, got = seen(edge, "strip.example", "/api")
    assert (status, got["path"], got["headers"]["X-Forwarded-Prefix"]) == (200, "/", ["/api"])
    status, _, body = seen(edge, "strip.example", "/api./foo")  # /./foo: /foo to a server
    assert status == 400, body


def test_strip_prefix_regex_then_replace_path_regex(edge):
    status, _, got = seen(edge, "rewrite.example", "/v2/old/a/b")
    assert status == 200
    assert got["path"] == "/new/a/b"
    assert got["headers"]["X-Forwarded-Prefix"] == ["/v2/"]
    assert got["headers"]["X-Replaced-Path"] == ["/old/a/b"]


def test_replace_path_keeps_the_query(edge):
    status, _, got = seen(edge, "replace.example", "/anything?x=1")
    assert (status, got["path"], got["query"]) == (200, "/fixed", "x=1")
    assert got["headers"]["X-Replaced-Path"] == ["/anything"]


def test_redirect_regex(edge):
    status, hdrs, _ = seen(edge, "redirect.example", "/go/page?a=b")
    assert status == 302
    assert hdrs["Location"] == "https://redirect.example/to/page?a=b"
    status, _, got = seen(edge, "redirect.example", "/stay")  # no match: served
    assert (status, got["path"]) == (200, "/stay")


def test_a_chain_runs_its_middlewares_in_order(edge):
    status, _, got = seen(edge, "chain.example", "/v1/old/z")
    assert (status, got["path"]) == (200, "/new/z")


def test_content_type_leaves_the_response_as_the_backend_wrote_it(edge):
    status, hdrs, _ = seen(edge, "ct.example", "/x")
    assert status == 200 and hdrs["Content-Type"] == "application/json"


def test_security_headers(edge):
    status, hdrs, _ = seen(edge, "secure.example", "/x")
    assert status == 200
    assert hdrs["X-Frame-Options"] == "DENY"
    assert hdrs["X-Content-Type-Options"] == "nosniff"
    assert hdrs["Content-Security-Policy"] == "default-src 'self'"
    assert hdrs["X-Served-By"] == "edge"
    assert "Strict-Transport-Security" not in hdrs  # plain HTTP, no sslProxyHeaders match
    # An untrusted client's X-Forwarded-Proto is what sslProxyHeaders reads (as Traefik).
    _, hdrs, _ = seen(edge, "secure.example", "/x", {"X-Forwarded-Proto": "https"})
    assert hdrs["Strict-Transport-Security"] == "max-age=60"


def test_cors_simple_request_and_vary(edge):
    status, hdrs, _ = seen(edge, "cors.example", "/x", {"Origin": "https://app.example"})
    assert status == 200
    assert hdrs["Access-Control-Allow-Origin"] == "https://app.example"
    assert hdrs["Vary"] == "Origin"
    _, hdrs, _ = seen(edge, "cors.example", "/x", {"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in hdrs


def test_cors_preflight_from_curl_is_answered_by_edge(edge):
    curl = need("curl")
    out = subprocess.run(
        [
            curl,
            "-s",
            "-i",
            "--max-time",
            "10",
            "-X",
            "OPTIONS",
            "-H",
            "Host: cors.example",
            "-H",
            "Origin: https://app.example",
            "-H",
            "Access-Control-Request-Method: PUT",
            "-H",
            "Access-Control-Request-Headers: content-type",
            f"http://127.0.0.1:{edge.port}/api/items",
        ],
        capture_output=True,
        timeout=20,
        check=True,
    ).stdout.decode()
    head, _, body = out.partition("\r\n\r\n")
    lines = head.split("\r\n")
    assert lines[0].startswith("HTTP/1.1 200"), out
    fields = dict(line.split(": ", 1) for line in lines[1:])
    assert fields["Access-Control-Allow-Origin"] == "https://app.example"
    assert fields["Access-Control-Allow-Methods"] == "GET,PUT"
    assert fields["Access-Control-Allow-Headers"] == "Content-Type"
    assert fields["Access-Control-Max-Age"] == "600"
    assert fields["Content-Length"] == "0" and body == ""
    # The backend never saw it: an OPTIONS without the preflight's headers reaches it.
    status, _, got = seen(edge, "cors.example", "/api/items", {"Origin": "https://app.example"})
    assert status == 200 and got["method"] == "GET"


def test_allowed_hosts(edge):
    status, _, body = seen(edge, "hosts.example", "/x")
    assert status == 200
    status, _, body = seen(edge, "hosts.example:8080", "/x")  # r.Host holds the port
    assert (status, body) == (500, b"Bad Host\n")


def test_a_middleware_with_a_bad_regexp_takes_only_its_router_down(edge):
    status, _, _ = seen(edge, "bad.example", "/x")
    assert status == 404  # its router is disabled
    assert "replacePathRegex.regex: invalid regexp" in edge.log
    status, _, _ = seen(edge, "strip.example", "/api/x")
    assert status == 200
