"""Unit cases of the HTTP smuggling review (issue 12 item 4); the live ones are in
tests/integration/test_smuggling_review.py."""

from __future__ import annotations

import pytest

from edge.http.forward import split_host_port


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
