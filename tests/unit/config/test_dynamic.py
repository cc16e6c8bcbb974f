"""The dynamic configuration's models (edge.config.dynamic): every section, defaults,
values refused with the key path that holds them."""

from __future__ import annotations

import pytest

from edge.config.loader import decode_dynamic
from edge.errors import ConfigError


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
