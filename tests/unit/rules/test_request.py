"""The request as matchers see it (edge.rules.request): RequestView's defaults, header
values, the query parsed once as Go parses it, the routing path."""

from __future__ import annotations

from typing import Any

import pytest

import edge.rules.request as rules_mod
from edge.rules import (
    RequestView,
    routing_path,
)


def test_request_view_defaults() -> None:
    view = RequestView()
    assert (view.host, view.path, view.query, view.method, view.client_ip, view.sni) == (
        "", "", "", "", "", "",
    )  # fmt: skip
    assert list(view.headers) == [] and view.alpn == ()
    assert view.query_values("a") == [] and view.header_values("a") == []
    assert view.client_address() is None


def test_header_values_case_insensitive_all_lines() -> None:
    view = RequestView(
        headers=[(b"X-A", b" 1 "), (b"x-b", b"2"), (b"x-a", b"\xc3\xa9"), (b"x-a", b"\xe9")]
    )
    # Bytes are text as UTF-8 (as Go compares them); a stray byte equals no rule text.
    assert view.header_values("x-A") == ["1", "\xe9", "\udce9"]
    assert view.header_values("X-C") == []


def test_query_values_parsed_once_and_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = rules_mod.parse_query

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(rules_mod, "parse_query", counting)
    view = RequestView(query="a=1&a=2&b=&c")
    assert view.query_values("a") == ["1", "2"]
    assert view.query_values("b") == [""]
    assert view.query_values("c") == [""]
    view.query_values("a").append("mutated")
    assert view.query_values("a") == ["1", "2"]
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("path", "routed"),
    [
        ("/plain", "/plain"),
        ("/a%20b/%2F", "/a b/%2F"),
        ("/a%2fb", "/a%2Fb"),
        ("/%61dmin", "/admin"),
        ("/%2561dmin", "/%2561dmin"),  # no double decoding: %25 is reserved
        (
            "/%3a%40%21%24%26%27%28%29%2a%2b%2c%3b%3d%3f%23%5b%5d",
            "/%3A%40%21%24%26%27%28%29%2A%2B%2C%3B%3D%3F%23%5B%5D",
        ),
        ("/%7e%2d%2e%5f", "/~-._"),
        ("/caf%C3%A9", "/caf\xe9"),
        ("/caf\xc3\xa9", "/caf\xe9"),  # raw UTF-8 bytes, as the server hands them (latin-1)
        ("/caf\xe9", "/caf\xe9"),  # text (its latin-1 bytes are not UTF-8)
        ("/%ff", "/\udcff"),
        ("/bad%zz", "/bad%zz"),
        ("/end%", "/end%"),
        ("/end%4", "/end%4"),
    ],
)
def test_routing_path(path: str, routed: str) -> None:
    assert RequestView(path=path).routing_path() == routed
    assert routing_path(path) == routed


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("a=1&a=2&b=&c", {"a": ["1", "2"], "b": [""], "c": [""]}),
        ("q=a+b&r=a%20b", {"q": ["a b"], "r": ["a b"]}),
        ("a=1;b=2&c=3", {"c": ["3"]}),  # Go drops a pair holding ';'
        ("a=%zz&b=1", {"b": ["1"]}),  # and one with a bad escape
        ("&&=v&k", {"": ["v"], "k": [""]}),
        ("a=1=2", {"a": ["1=2"]}),
        ("e=%C3%A9", {"e": ["\xe9"]}),
    ],
)
def test_query_parsed_as_go_does(query: str, expected: dict[str, list[str]]) -> None:
    assert rules_mod.parse_query(query) == expected
