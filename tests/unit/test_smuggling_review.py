"""Unit cases of the HTTP smuggling review (issue 12 item 4); the live ones are in
tests/integration/test_smuggling_review.py."""

from __future__ import annotations

import pytest

from edge.config.loader import decode_dynamic
from edge.errors import ConfigError
from edge.http.codec.forward import split_host_port


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        (b"app.example", ("app.example", "")),
        (b"APP.example.:8080", ("app.example", "8080")),
        (b"[::1]:80", ("::1", "80")),
        (b"[::1]", ("::1", "")),
        (b"::1", ("::1", "")),
        (b"", ("", "")),
        (b"a-b_c~d!$&'()*+,;=%41.example", ("a-b_c~d!$&'()*+,;=%41.example", "")),
    ],
)
def test_host_values_edge_routes(authority, expected):
    assert split_host_port(authority) == expected


@pytest.mark.parametrize(
    "authority",
    [
        b"app.example:@evil.example",
        b"user@app.example",
        b"app.example/x",
        b"app.example x",
        b"app.example?x",
        b"app.example#x",
        b"app.example\\x",
        b'"app.example"',
        b"app.example<x>",
        b"app.example{x}|^`",
        b"app.\xe9xample",
        b"app.example\t",
        b"[app.example]evil.example",
        b"[::1",
    ],
)
def test_host_values_edge_refuses(authority):
    # The router is chosen by the host before the first ':'; a backend reading the
    # value as a URL authority would see another: Go's ValidHostHeader bytes only,
    # and an IP literal followed by a port or nothing.
    with pytest.raises(ValueError, match="malformed Host"):
        split_host_port(authority)


@pytest.mark.parametrize(
    ("middleware", "error"),
    [
        (
            {"headers": {"customRequestHeaders": {"X-A": "1\r\nTransfer-Encoding: chunked"}}},
            "may not hold CR, LF",
        ),
        ({"headers": {"customRequestHeaders": {"X-A": "1\nHost: evil"}}}, "may not hold CR, LF"),
        (
            {"headers": {"customResponseHeaders": {"X-A": "1\r\n\r\n<script>"}}},
            "may not hold CR, LF",
        ),
        ({"headers": {"customResponseHeaders": {"X-A": "a\x00b"}}}, "may not hold CR, LF"),
        ({"headers": {"customRequestHeaders": {"X A": "1"}}}, "invalid header name"),
        ({"headers": {"customRequestHeaders": {"X-A:": "1"}}}, "invalid header name"),
        ({"headers": {"customRequestHeaders": {"": "1"}}}, "invalid header name"),
        ({"addPrefix": {"prefix": "/v1 HTTP/1.1\r\nX-A: 1"}}, "whitespace or a control"),
        ({"addPrefix": {"prefix": "/v1\t"}}, "whitespace or a control"),
        ({"redirectScheme": {"scheme": "https\r\nSet-Cookie: a=b"}}, "invalid scheme"),
        ({"redirectScheme": {"scheme": "https://evil"}}, "invalid scheme"),
    ],
)
def test_middleware_that_would_write_a_line_of_its_own_is_refused(middleware, error):
    # Header edits, addPrefix and redirectScheme's scheme are written into heads as
    # they are: a CR or LF in one was a header, or a request, of the configuration's
    # own on every request through the route (Transfer-Encoding: chunked upstream
    # with no chunked body: a desync). Refused when the configuration is read,
    # naming the field (Traefik's Go server and client never write such a line).
    with pytest.raises(ConfigError, match=error) as info:
        decode_dynamic({"http": {"middlewares": {"m": middleware}}})
    assert "$.http.middlewares.m." in str(info.value)


def test_middleware_values_edge_writes_as_they_are():
    conf = decode_dynamic(
        {
            "http": {
                "middlewares": {
                    "h": {
                        "headers": {"customRequestHeaders": {"X-A": "caf\u00e9 \tok", "X-B": ""}}
                    },
                    "p": {"addPrefix": {"prefix": "/v1/%20x"}},
                    "r": {"redirectScheme": {"scheme": "svn+ssh.x-1"}},
                }
            }
        }
    )
    assert conf.http.middlewares["h"].headers.custom_request_headers == {
        "X-A": "caf\u00e9 \tok",
        "X-B": "",
    }
