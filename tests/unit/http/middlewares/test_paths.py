"""The path middlewares (edge.http.middlewares.paths) on Traefik's own test tables
(pkg/middlewares/{stripprefix,stripprefixregex,addprefix,replacepath,replacepathregex}):
the same inputs, the same expected outputs. Traefik's expected ``Path`` is the
decoded path; edge forwards the raw one, so the expectation here is the request
URI Traefik sends (its RawPath where it has one, ``/`` for an empty path)."""

from __future__ import annotations

import pytest

from edge.http.middlewares import Forward
from edge.http.middlewares.paths import (
    AddPrefix,
    ReplacePath,
    ReplacePathRegex,
    StripPrefix,
    StripPrefixRegex,
)


def run(mw, path: bytes) -> tuple[int, bytes, bytes, dict[bytes, bytes]]:
    fwd = Forward("localhost", path, b"")
    answer = mw.request(fwd)
    if answer is not None:
        return answer.status, b"", b"", {}
    return 200, fwd.path, fwd.prefix, dict(fwd.headers or ())


# (desc, prefixes, path, status, request URI upstream, X-Forwarded-Prefix)
STRIP_PREFIX = [
    ("no prefixes configured", [], b"/noprefixes", 200, b"/noprefixes", b""),
    ("wildcard (.*) requests", ["/"], b"/", 200, b"/", b"/"),
    ("prefix and path matching", ["/stat"], b"/stat", 200, b"/", b"/stat"),
    ("path prefix on exactly matching path", ["/stat/"], b"/stat/", 200, b"/", b"/stat/"),
    ("path prefix on matching longer path", ["/stat/"], b"/stat/us", 200, b"/us", b"/stat/"),
    ("path prefix on mismatching path", ["/stat/"], b"/status", 200, b"/status", b""),
    ("general prefix on matching path", ["/stat"], b"/stat/", 200, b"/", b"/stat"),
    ("earlier prefix matching", ["/stat", "/stat/us"], b"/stat/us", 200, b"/us", b"/stat"),
    ("later prefix matching", ["/mismatch", "/stat"], b"/stat", 200, b"/", b"/stat"),
    ("prefix matching within slash boundaries", ["/stat"], b"/status", 200, b"/us", b"/stat"),
    ("raw path is also stripped", ["/stat"], b"/stat/a%2Fb", 200, b"/a%2Fb", b"/stat"),
    ("encoded char in prefix segment", ["/api/"], b"/ap%69/a%2Fb", 200, b"/a%2Fb", b"/api/"),
    ("dot in the path not stripped by the prefix", ["/api"], b"/api./foo", 400, b"", b""),
    ("multiple dots in the path not stripped", ["/api"], b"/api../foo", 400, b"", b""),
]


@pytest.mark.parametrize(
    ("prefixes", "path", "status", "uri", "header"),
    [case[1:] for case in STRIP_PREFIX],
    ids=[case[0] for case in STRIP_PREFIX],
)
def test_strip_prefix(prefixes, path, status, uri, header):
    got = run(StripPrefix("s", prefixes), path)
    assert got[:3] == (status, uri, header)


# (path, regexps, status, request URI upstream, X-Forwarded-Prefix)
STRIP_PREFIX_REGEX = [
    (b"/a/test", ["/a/api/"], 200, b"/a/test", b""),
    (b"/a/test/", ["/a/api/"], 200, b"/a/test/", b""),
    (b"/a/api/", ["/a/api/"], 200, b"/", b"/a/api/"),
    (b"/a/api/test", ["/a/api/"], 200, b"/test", b"/a/api/"),
    (b"/a/api/test/", ["/a/api/"], 200, b"/test/", b"/a/api/"),
    (b"/b/api/", ["/b/([a-z0-9]+)/"], 200, b"/", b"/b/api/"),
    (b"/b/api", ["/b/([a-z0-9]+)/"], 200, b"/b/api", b""),
    (b"/b/api/test1", ["/b/([a-z0-9]+)/"], 200, b"/test1", b"/b/api/"),
    (b"/b/api2/test2", ["/b/([a-z0-9]+)/"], 200, b"/test2", b"/b/api2/"),
    (b"/c/api/123/", ["/c/[a-z0-9]+/[0-9]+/"], 200, b"/", b"/c/api/123/"),
    (b"/c/api/123", ["/c/[a-z0-9]+/[0-9]+/"], 200, b"/c/api/123", b""),
    (b"/c/api/123/test3", ["/c/[a-z0-9]+/[0-9]+/"], 200, b"/test3", b"/c/api/123/"),
    (b"/c/api/abc/test4", ["/c/[a-z0-9]+/[0-9]+/"], 200, b"/c/api/abc/test4", b""),
    (b"/a/api/a%2Fb", ["/a/api/"], 200, b"/a%2Fb", b"/a/api/"),
    (b"/a/api./foo", ["/a/api"], 400, b"", b""),
    (b"/x/b/api/y", ["/b/api/"], 200, b"/x/b/api/y", b""),  # matches, not at the start
]


@pytest.mark.parametrize(("path", "regexps", "status", "uri", "header"), STRIP_PREFIX_REGEX)
def test_strip_prefix_regex(path, regexps, status, uri, header):
    got = run(StripPrefixRegex("s", regexps), path)
    assert got[:3] == (status, uri, header)


@pytest.mark.parametrize(
    ("prefix", "path", "uri"),
    [
        ("/foo", b"/bar", b"/foo/bar"),
        ("/foo", b"/bar%2Fbaz", b"/foo/bar%2Fbaz"),
        ("foo", b"/bar", b"/foo/bar"),
        ("/foo/", b"/bar", b"/foo/bar"),
    ],
)
def test_add_prefix(prefix, path, uri):
    assert run(AddPrefix("a", prefix), path)[:2] == (200, uri)


@pytest.mark.parametrize(
    ("path", "replacement", "uri", "replaced"),
    [
        (b"/example", "/replacement-path", b"/replacement-path", b"/example"),
        (
            b"/some/really/long/path",
            "/replacement-path",
            b"/replacement-path",
            b"/some/really/long/path",
        ),
        (b"/foo%2Fbar", "/replacement-path", b"/replacement-path", b"/foo%2Fbar"),
        (b"/path", "/foo%2Fbar", b"/foo%2Fbar", b"/path"),
        (b"/path/%08bar", "/path/%08bar", b"/path/%08bar", b"/path/%08bar"),
        (b"/path", "", b"/", b"/path"),
    ],
)
def test_replace_path(path, replacement, uri, replaced):
    status, got, _, headers = run(ReplacePath("r", replacement), path)
    assert (status, got, headers) == (200, uri, {b"X-Replaced-Path": replaced})


# (desc, path, regex, replacement, status, request URI upstream, X-Replaced-Path)
REPLACE_PATH_REGEX = [
    (
        "simple regex",
        b"/whoami/and/whoami",
        "^/whoami/(.*)",
        "/who-am-i/$1",
        200,
        b"/who-am-i/and/whoami",
        b"/whoami/and/whoami",
    ),
    (
        "simple replace (no regex)",
        b"/whoami/and/whoami",
        "/whoami",
        "/who-am-i",
        200,
        b"/who-am-i/and/who-am-i",
        b"/whoami/and/whoami",
    ),
    (
        "empty replacement",
        b"/whoami/and/whoami",
        "/whoami",
        "",
        200,
        b"/and",
        b"/whoami/and/whoami",
    ),
    (
        "empty trimmed replacement",
        b"/whoami/and/whoami",
        "/whoami",
        " ",
        200,
        b"/and",
        b"/whoami/and/whoami",
    ),
    ("no match", b"/whoami/and/whoami", "/no-match", "/whoami", 200, b"/whoami/and/whoami", None),
    (
        "multiple replacement",
        b"/downloads/src/source.go",
        "^(?i)/downloads/([^/]+)/([^/]+)$",
        "/downloads/$1-$2",
        200,
        b"/downloads/src-source.go",
        b"/downloads/src/source.go",
    ),
    (
        "replacement with escaped char",
        b"/aaa/bbb",
        "/aaa/bbb",
        "/foo%2Fbar",
        200,
        b"/foo%2Fbar",
        b"/aaa/bbb",
    ),
    (
        "path and regex with escaped char",
        b"/aaa%2Fbbb",
        "/aaa%2Fbbb",
        "/foo/bar",
        200,
        b"/foo/bar",
        b"/aaa%2Fbbb",
    ),
    (
        "path with escaped char (no match)",
        b"/aaa%2Fbbb",
        "/aaa/bbb",
        "/foo/bar",
        200,
        b"/aaa%2Fbbb",
        None,
    ),
    (
        "path with percent encoded backspace char",
        b"/foo/%08bar",
        "^/foo/(.*)",
        "/$1",
        200,
        b"/%08bar",
        b"/foo/%08bar",
    ),
    ("path with ..", b"/foo../bar", "^/foo(.*)", "/$1", 400, b"", None),
    (
        "named group",
        b"/v1/items/7",
        "^/v1/(?P<rest>.*)",
        "/v2/${rest}",
        200,
        b"/v2/items/7",
        b"/v1/items/7",
    ),
    ("dollar sign", b"/a", "^/a$", "/$$x", 200, b"/$x", b"/a"),
]


@pytest.mark.parametrize(
    ("path", "regex", "replacement", "status", "uri", "replaced"),
    [case[1:] for case in REPLACE_PATH_REGEX],
    ids=[case[0] for case in REPLACE_PATH_REGEX],
)
def test_replace_path_regex(path, regex, replacement, status, uri, replaced):
    got_status, got, _, headers = run(ReplacePathRegex("r", regex, replacement), path)
    assert got_status == status
    if status == 200:
        assert got == uri
        assert headers.get(b"X-Replaced-Path") == replaced
