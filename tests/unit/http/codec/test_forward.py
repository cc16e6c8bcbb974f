"""edge.http.codec.forward: the head edge sends on (forwarded headers, framing, the
passthrough decision), the error responses, the target split and the Host value.

``sanitize_path`` (issue 12 item 4) runs as a table, Traefik's own cases among them,
with the express path's guard (a path it would clean never takes the express path,
one it leaves alone may) and ``split_target`` refusing a fragment. Traefik
(pkg/server/server_entrypoint_tcp.go) cleans the escaped path with Go's ``path.Clean``
after ``normalizePath`` decoded unreserved escapes (``%2E`` among them), keeps a
trailing slash, and sends the backend the cleaned path.

``split_host_port``'s table pins the HTTP smuggling review (issue 12 item 4): the
router is chosen by the host before the first ':', so a value a backend would read
as another authority is refused.
"""

from __future__ import annotations

import pytest

from edge.http.codec import RequestHead, ResponseHead, forward
from edge.http.codec.forward import sanitize_path, split_host_port, split_target
from edge.http.codec.httptools import RequestParser
from edge.http.codec.parsers import parser_classes
from tests.unit.http.codec.support import Recorder, ResponseRecorder


def req(
    headers,
    *,
    method=b"GET",
    version=b"1.1",
    keep_alive=True,
    chunked=False,
    cl=None,
    upgrade=False,
):
    return RequestHead(method, b"/p", version, headers, keep_alive, chunked, cl, upgrade, False)


def build(head, trusted=False, **kw):
    args = dict(
        target=b"/p",
        host=b"a.test",
        client_ip=b"10.0.0.1",
        trusted=trusted,
        proto=b"http",
        forwarded_host=b"a.test",
        forwarded_port=b"80",
    )
    args.update(kw)
    return forward.request_head(head, **args)


def parse_head(data: bytes):
    lines = data.split(b"\r\n")
    assert data.endswith(b"\r\n\r\n")
    headers = [tuple(line.split(b": ", 1)) for line in lines[1:-2]]
    return lines[0], headers


@pytest.mark.parametrize(
    "target, expected",
    [
        (b"/a/b?x=1", (b"/a/b", b"x=1", None)),
        (b"/", (b"/", b"", None)),
        (b"http://Example.com:8080/a?q", (b"/a", b"q", b"Example.com:8080")),
        (b"https://h", (b"/", b"", b"h")),
        (b"http://h?x", (b"/", b"x", b"h")),
    ],
)
def test_split_target(target, expected):
    assert forward.split_target(target) == expected


@pytest.mark.parametrize(
    "target", [b"*", b"example.com:443", b"ftp://x/", b"http:///nohost", b"http://user@h/"]
)
def test_split_target_refuses(target):
    with pytest.raises(ValueError):
        forward.split_target(target)


@pytest.mark.parametrize(
    "authority, expected",
    [
        (b"A.Test:8080", ("a.test", "8080")),
        (b"a.test.", ("a.test", "")),
        (b"[::1]:80", ("::1", "80")),
        (b"", ("", "")),
    ],
)
def test_split_host_port(authority, expected):
    assert forward.split_host_port(authority) == expected


def test_request_head_rewrites_only_what_must_change():
    head = req(
        [
            (b"Host", b"a.test"),
            (b"User-Agent", b"t"),
            (b"Connection", b"keep-alive, X-Drop"),
            (b"X-Drop", b"1"),
            (b"Keep-Alive", b"5"),
            (b"Accept", b"*/*"),
        ]
    )
    line, headers = parse_head(build(head))
    assert line == b"GET /p HTTP/1.1"
    names = [n for n, _ in headers]
    assert names[0] == b"Host"
    assert (b"User-Agent", b"t") in headers and (b"Accept", b"*/*") in headers
    for gone in (b"Connection", b"X-Drop", b"Keep-Alive"):
        assert gone not in names
    assert names.count(b"Host") == 1


def test_untrusted_forwarded_headers_are_replaced():
    head = req(
        [
            (b"Host", b"a"),
            (b"X-Forwarded-For", b"6.6.6.6"),
            (b"x-real-ip", b"6.6.6.6"),
            (b"X-Forwarded-Proto", b"https"),
        ]
    )
    _, headers = parse_head(build(head))
    d = dict(headers)
    assert d[b"X-Forwarded-For"] == b"10.0.0.1"
    assert d[b"X-Real-Ip"] == b"10.0.0.1"
    assert d[b"X-Forwarded-Proto"] == b"http"
    assert b"6.6.6.6" not in b"".join(v for _, v in headers)


def test_trusted_forwarded_headers_are_kept_and_appended():
    head = req(
        [
            (b"Host", b"a"),
            (b"X-Forwarded-For", b"1.1.1.1"),
            (b"X-Forwarded-For", b"2.2.2.2"),
            (b"X-Forwarded-Proto", b"https"),
        ]
    )
    d = dict(parse_head(build(head, trusted=True))[1])
    assert d[b"X-Forwarded-For"] == b"1.1.1.1, 2.2.2.2, 10.0.0.1"
    assert d[b"X-Forwarded-Proto"] == b"https"


SPOOFED = b"for=1.2.3.4;host=evil;proto=https"


def test_untrusted_forwarded_header_is_dropped():
    """RFC 7239's Forwarded went on as the client wrote it while every X-Forwarded-*
    was replaced: a backend reading its for= or host= took the client's word."""
    for name in (b"Forwarded", b"forwarded", b"FORWARDED"):
        head = req([(b"Host", b"a"), (name, SPOOFED), (b"Accept", b"*/*"), (name, b"for=5.6.7.8")])
        _, headers = parse_head(build(head))
        assert [n for n, _ in headers if n.lower() == b"forwarded"] == []
        assert (b"Accept", b"*/*") in headers and dict(headers)[b"X-Forwarded-For"] == b"10.0.0.1"


def test_trusted_forwarded_header_is_kept_as_it_came():
    head = req(
        [
            (b"Host", b"a"),
            (b"Forwarded", SPOOFED),
            (b"Accept", b"*/*"),
            (b"forwarded", b"for=5.6.7.8"),
        ]
    )
    _, headers = parse_head(build(head, trusted=True))
    assert [(n, v) for n, v in headers if n.lower() in (b"forwarded", b"accept")] == [
        (b"Forwarded", SPOOFED),
        (b"Accept", b"*/*"),
        (b"forwarded", b"for=5.6.7.8"),
    ]
    # A Connection token naming it drops it, as Traefik deletes what Connection names
    # but its own X- headers; a middleware's edit replaces it.
    named = req(
        [(b"Host", b"a"), (b"Connection", b"keep-alive, Forwarded"), (b"Forwarded", SPOOFED)]
    )
    assert b"orwarded:" not in build(named, trusted=True)
    edits = forward.HeaderEdits([(b"Forwarded", b"for=edge")])
    _, headers = parse_head(
        build(req([(b"Host", b"a"), (b"Forwarded", SPOOFED)]), trusted=True, extra=edits)
    )
    assert [(n, v) for n, v in headers if n.lower() == b"forwarded"] == [
        (b"Forwarded", b"for=edge")
    ]


@pytest.mark.parametrize("codec", ["httptools", "h11"])
@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
def test_forwarded_header_never_rides_a_head_forwarded_as_its_bytes(codec, trusted):
    """The express path sends a quick head's own bytes (``cut``) and the general path
    a passthrough head's: neither may be taken for a head holding Forwarded, on
    either codec, so ``upstream_request`` rebuilds it (dropped when untrusted)."""
    from edge.http.codec.parsers import parser_classes

    heads = []

    class H:
        def on_head(self, h):
            heads.append(h)

        def on_body(self, d): ...
        def on_end(self): ...
        def on_upgrade(self, r): ...

    def request(n: int, line: bytes) -> bytes:
        return b"GET /p HTTP/1.1\r\nHost: a.test\r\nX-Id: %d\r\n%s\r\nX-Trace: %d\r\n\r\n" % (
            n,
            line,
            n,
        )

    for line in (b"Forwarded: " + SPOOFED, b"forwarded:for=1.2.3.4", b"FORWARDED: for=1.2.3.4 "):
        parser = parser_classes(codec)[0](H())
        # Two heads that differ in two values: the httptools quick path then takes a
        # head holding other values and any field lines between them, but Forwarded.
        parser.feed(request(1, b"Accept: */*"))
        parser.feed(request(2, b"Accept: */*"))
        if codec == "httptools":
            assert parser.quick(request(3, b"X-Other: 1")) is not None
            assert parser.quick(request(4, line)) is None
        parser.feed(request(4, line))
        head = heads[-1]
        assert head.passthrough is None and head.cut is None
        out = forward.upstream_request(
            head, True, b"10.0.0.1", b"http", b"a.test", b"80", trusted=trusted
        )
        assert (line.partition(b":")[2].strip() in out) == trusted, out
        assert out.count(b"X-Forwarded-For: 10.0.0.1\r\n") == 1


@pytest.mark.parametrize(
    "chunked, cl, framing",
    [
        (True, None, (b"Transfer-Encoding", b"chunked")),
        (False, 12, (b"Content-Length", b"12")),
        (False, None, None),
    ],
)
def test_request_framing_is_unambiguous(chunked, cl, framing):
    incoming = [(b"Host", b"a")]
    if chunked:
        incoming.append((b"Transfer-Encoding", b"chunked"))
    if cl is not None:
        incoming.append((b"content-length", b"%d" % cl))
    _, headers = parse_head(build(req(incoming, method=b"POST", chunked=chunked, cl=cl)))
    names = [n.lower() for n, _ in headers]
    assert names.count(b"content-length") + names.count(b"transfer-encoding") == (
        0 if framing is None else 1
    )
    if framing:
        assert framing in headers


def test_upgrade_request_keeps_upgrade():
    head = req(
        [(b"Host", b"a"), (b"Connection", b"Upgrade"), (b"Upgrade", b"websocket")], upgrade=True
    )
    d = dict(parse_head(build(head))[1])
    assert d[b"Connection"] == b"Upgrade" and d[b"Upgrade"] == b"websocket"


def test_middleware_headers_replace_and_remove():
    head = req([(b"Host", b"a"), (b"X-Env", b"client"), (b"X-Remove", b"1")])
    d = dict(
        parse_head(
            build(head, extra=forward.HeaderEdits([(b"X-Env", b"edge"), (b"X-Remove", b"")]))
        )[1]
    )
    assert d[b"X-Env"] == b"edge"
    assert b"X-Remove" not in d


def resp(status, headers, *, has_body=True, cl=None, chunked=False, keep_alive=True):
    return ResponseHead(status, b"", b"1.1", headers, keep_alive, chunked, cl, has_body)


def test_response_rechunks_unknown_length_for_http11():
    out = forward.response_head(
        resp(200, [(b"Transfer-Encoding", b"chunked"), (b"X", b"1")], chunked=True),
        chunked=True,
        keep_alive=True,
    )
    assert out == b"HTTP/1.1 200 OK\r\nX: 1\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_response_close_delimited_for_http10():
    out = forward.response_head(resp(200, []), chunked=False, keep_alive=False)
    assert out == b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"


def test_head_response_keeps_content_length():
    out = forward.response_head(
        resp(200, [(b"Content-Length", b"42")], has_body=False, cl=42),
        chunked=False,
        keep_alive=True,
    )
    assert b"Content-Length: 42\r\n" in out and out.count(b"Content-Length") == 1


def test_error_response_is_generic():
    out = forward.error_response(502, close=True)
    assert out.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert out.endswith(b"\r\n\r\n502 Bad Gateway\n")
    assert b"Connection: close" in out


@pytest.mark.parametrize(
    "headers, expected",
    [
        ([(b"Host", b"a")], ()),
        ([(b"Host", b"a"), (b"Connection", b"keep-alive")], ((b"Connection", b"keep-alive"),)),
        ([(b"Host", b"a"), (b"connection", b"close")], ((b"connection", b"close"),)),
        ([(b"Host", b"a"), (b"Connection", b"keep-alive, X-Secret")], None),  # names a header
        ([(b"Host", b"a"), (b"Connection", b"close"), (b"Connection", b"keep-alive")], None),
        ([(b"Host", b"a"), (b"Keep-Alive", b"5")], None),
        ([(b"Host", b"a"), (b"X-Forwarded-For", b"1.2.3.4")], None),
        ([(b"Host", b"a"), (b"x-real-ip", b"1.2.3.4")], None),
        ([(b"Host", b"a"), (b"Forwarded", b"for=1.2.3.4;host=evil")], None),
        ([(b"Host", b"a"), (b"FORWARDED", b"for=1.2.3.4")], None),
        ([(b"Host", b"a"), (b"Expect", b"100-continue"), (b"Content-Length", b"1")], None),
        ([(b"Host", b"a"), (b"Upgrade", b"websocket")], None),
        ([(b"Host", b"a"), (b"Proxy-Connection", b"keep-alive")], None),
        ([(b"Host", b"a"), (b"TE", b"trailers")], None),
        ([(b"Host", b"a"), (b"Transfer-Encoding", b"chunked")], ()),
    ],
)
def test_request_passthrough_decision(headers, expected):
    from edge.http.codec.headers import request_framing

    assert request_framing(b"1.1", headers)[5] == expected


def test_cut_connection_and_passthrough_request():
    raw = b"GET /p?q HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n"
    cut = forward.cut_connection(raw, ((b"Connection", b"keep-alive"),))
    assert cut == b"GET /p?q HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n"
    assert forward.cut_connection(raw, ()) is raw
    # A lone keep-alive stays when the next hop's connection is kept alive too.
    assert forward.cut_connection(raw, ((b"Connection", b"Keep-Alive"),), keep_alive=True) is raw
    close = raw.replace(b"keep-alive", b"close")
    assert forward.cut_connection(close, ((b"Connection", b"close"),), keep_alive=True) == cut
    # Whatever its whitespace, the line is found and cut as the quick parses cut it
    # (issue 7: the express and general paths must send the same bytes).
    for odd in (b"Connection:keep-alive", b"Connection: keep-alive\t", b"CONNECTION:  keep-alive "):
        assert (
            forward.cut_connection(
                raw.replace(b"Connection: keep-alive", odd), ((b"Connection", b"keep-alive"),)
            )
            == cut
        )
    out = forward.passthrough_request(cut, b"10.0.0.1", b"http", b"a.test", b"80")
    line, headers = parse_head(out)
    assert line == b"GET /p?q HTTP/1.1"
    assert headers == [
        (b"Host", b"a.test"),
        (b"Accept", b"*/*"),
        (b"X-Forwarded-For", b"10.0.0.1"),
        (b"X-Forwarded-Proto", b"http"),
        (b"X-Forwarded-Host", b"a.test"),
        (b"X-Forwarded-Port", b"80"),
        (b"X-Real-Ip", b"10.0.0.1"),
    ]


def test_passthrough_and_rebuild_agree():
    # The same request forwarded both ways carries the same header set.
    from edge.http.codec.parsers import parser_classes

    raw = b"GET /p HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive\r\nAccept: */*\r\nUser-Agent: t\r\n\r\n"
    heads = []

    class H:
        def on_head(self, h):
            heads.append(h)

        def on_body(self, d): ...
        def on_end(self): ...
        def on_upgrade(self, r): ...

    parser_classes("httptools")[0](H()).feed(raw)
    head = heads[0]
    fast = forward.passthrough_request(
        forward.cut_connection(head.raw, head.passthrough), b"10.0.0.1", b"http", b"a.test", b"80"
    )
    slow = build(head)
    assert sorted(parse_head(fast)[1]) == sorted(parse_head(slow)[1])
    assert parse_head(fast)[0] == parse_head(slow)[0]


# Traefik's TestSanitizePath table and its entrypoint docs' examples, verbatim cases.
TRAEFIK = [
    ("/b", "/b"),
    ("/b/", "/b/"),
    ("/../../b/", "/b/"),
    ("/../../b", "/b"),
    ("/a/b/..", "/a"),
    ("/a/b/../", "/a/"),
    ("/a/../../b", "/b"),
    ("/..///b///", "/b/"),
    ("/a/../b", "/b"),
    ("/a/./b", "/a/b"),
    ("/a//b", "/a/b"),
    ("/a/../c/../b", "/b"),
    ("/a/../../../c/../b", "/b"),
    ("/a/../c/../../b", "/b"),
    ("/a/..//c/.././b", "/b"),
    ("/./foo/bar", "/foo/bar"),
    ("/foo/../bar", "/bar"),
    ("/foo/bar//", "/foo/bar/"),
    ("/./foo/../bar//", "/bar/"),
    # TestPathOperations (normalizePath then sanitizePath), as raw paths
    ("/../../b/", "/b/"),
    ("/a/../../b/../c/", "/c/"),
    ("/a/../b/./c/../d/", "/b/d/"),
    ("/a/%2E%2E/%2E%2E/b/", "/b/"),
    ("/a/%252E%252E/%252E%252E/b/", "/a/%252E%252E/%252E%252E/b/"),  # over-encoded: not a dot
    ("/foo%2Fbar", "/foo%2Fbar"),
    ("/a/..%2Fb/", "/a/..%2Fb/"),  # an encoded slash is no separator
]


EDGE = [
    ("/", "/"),
    ("//", "/"),
    ("/.", "/"),
    ("/..", "/"),
    ("/./", "/"),
    ("/../", "/"),
    ("/a/.", "/a"),
    ("/a/./", "/a/"),
    ("/x/../admin", "/admin"),
    ("/x/%2e%2e/admin", "/admin"),
    ("/x/.%2E/admin", "/admin"),
    ("/x/%2e./admin", "/admin"),
    ("/%2e/admin", "/admin"),
    ("//admin", "/admin"),
    ("/admin/./", "/admin/"),
    ("/admin/%2e", "/admin"),
    ("/x/...", "/x/..."),  # three dots: a name
    ("/x/.../", "/x/.../"),
    ("/.well-known/acme", "/.well-known/acme"),
    ("/a%2eb/c", "/a%2eb/c"),  # a dot inside a name stays as spelled
    ("/x/%2e%2e%2fadmin", "/x/%2e%2e%2fadmin"),
    ("/x/..\\admin", "/x/..%5Cadmin"),  # a backslash: no separator, sent escaped (as Traefik)
    ("/x\\..\\admin", "/x%5C..%5Cadmin"),
    ("/x/..\\..\\admin/../b\\", "/x/b%5C"),  # "..\\..\\admin" is one name
    ("/x/..;/admin", "/x/..;/admin"),  # a path parameter makes a name (Traefik alike)
    ("/caf%C3%A9/../b", "/b"),
    ("/a/b/c/../../../../d", "/d"),
]


@pytest.mark.parametrize(("path", "expected"), TRAEFIK + EDGE)
def test_sanitize_path(path: str, expected: str) -> None:
    raw = path.encode("latin-1")
    clean = sanitize_path(raw)
    assert clean == expected.encode("latin-1")
    if clean == raw:
        assert clean is raw  # unchanged: the same object, so callers test identity
    assert sanitize_path(clean) == clean  # idempotent


QUICK_CLEAN = [
    "/",
    "/a/b.c",
    "/a.",
    "/a?next=/../x//y%2e",
    "/%41dmin",
    "/a%2Fb/",
    "/a...b/c",
]  # "/." is never quick


@pytest.mark.parametrize(("path", "expected"), [*TRAEFIK, *EDGE, *((p, p) for p in QUICK_CLEAN)])
@pytest.mark.parametrize("memo", [False, True])
def test_a_quick_head_never_holds_a_path_to_clean_nor_a_fragment(
    path: str, expected: str, memo: bool
) -> None:
    """The express path takes quick heads only (``RequestParser.quick``), and a quick
    head's path is one sanitize_path leaves alone, with no ``#``: the request-line
    pattern refuses the rest, which the full path then cleans (or refuses). Also from
    remembered header lines (``memo``: the same lines as the last quick head)."""
    parser = RequestParser(Recorder(), memo=RequestParser.memo())
    lines = b" HTTP/1.1\r\nHost: a.test\r\n\r\n"
    if memo:
        assert parser.quick(b"GET /warm" + lines) is not None
    for target in (path.encode("latin-1"), path.encode("latin-1") + b"#f"):
        head = parser.quick(b"GET " + target + lines)
        if b"#" in target or sanitize_path(target.partition(b"?")[0]) != target.partition(b"?")[0]:
            assert head is None, target
        elif path in QUICK_CLEAN:
            assert head is not None and head.target == target


@pytest.mark.parametrize(
    "target", [b"/admin#x", b"/admin/x#/../../y", b"/a?b#c", b"http://a.test/x#y", b"#", b"/%23/#"]
)
def test_a_fragment_is_refused(target: bytes) -> None:
    """A request-target has no fragment; a backend cutting one off would see another
    path than the one routed (``/admin/x#/../../y`` cleans to ``/y``)."""
    with pytest.raises(ValueError, match="fragment"):
        split_target(target)


def test_an_escaped_hash_is_no_fragment() -> None:
    assert split_target(b"/a%23b?c%23d") == (b"/a%23b", b"c%23d", None)


def test_query_and_authority_are_not_cleaned() -> None:
    path, query, authority = split_target(b"http://a.test/x/../y?next=/../z//w")
    assert (sanitize_path(path), query, authority) == (b"/y", b"next=/../z//w", b"a.test")


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


# --- client_response with a route's response header edits ------------------------------

EDITS = forward.HeaderEdits(
    [(b"X-Frame-Options", b"DENY"), (b"Vary", b"Origin"), (b"X-Gone", b""), (b"X-Real-Ip", b"r")]
)


def _parsed(codec: str, data: bytes, quick: bool) -> ResponseHead:
    rec = ResponseRecorder([])
    parser = parser_classes(codec)[1](rec)
    rec.parser = parser
    parser.expect(b"GET")
    if quick:
        head = parser.quick(data)
        assert head is not None
        return head
    parser.feed(data)
    return rec.heads[0]


def _fields(out: bytes) -> tuple[bytes, list[bytes]]:
    """The status line and the sorted field lines, but a ``Connection: keep-alive``
    (passed as it came, it states what a rebuild leaves unsaid: cut_connection)."""
    first, *lines = out[: out.index(b"\r\n\r\n")].split(b"\r\n")
    return first, sorted(line for line in lines if line != b"Connection: keep-alive")


@pytest.mark.parametrize("codec", ["httptools", "h11"])
@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize(
    ("data", "quick", "kept"),
    [
        (b"HTTP/1.1 200 OK\r\nServer: s\r\nContent-Length: 2\r\n\r\nok", True, True),
        (
            b"HTTP/1.1 200 OK\r\nServer: s\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
            True,
            True,
        ),
        (b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", False, True),
        (
            b"HTTP/1.1 200 OK\r\nX-FRAME-OPTIONS: SAMEORIGIN\r\nContent-Length: 0\r\n\r\n",
            False,
            False,
        ),
        (b"HTTP/1.1 200 OK\r\nx-gone: 1\r\nContent-Length: 0\r\n\r\n", False, False),
        (b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nContent-Length: 0\r\n\r\n", False, True),
    ],
    ids=["quick", "quick-connection", "chunked", "edited-name", "removed-name", "hop-by-hop"],
)
def test_edits_go_after_the_heads_own_bytes_unless_they_touch_it(
    codec, keep_alive, data, quick, kept
):
    """A response head none of whose names the edits touch is sent as its own bytes
    (as without edits) with the edits' lines, made once, before the blank line; one
    they touch is rebuilt. Either way the client gets the same fields as a rebuild."""
    if quick and codec == "h11":
        quick = False
    head = _parsed(codec, data, quick)
    chunked = head.chunked
    out = forward.client_response(head, keep_alive, chunked, EDITS)
    rebuilt = forward.response_head(head, chunked=chunked, keep_alive=keep_alive, extra=EDITS)
    assert _fields(out) == _fields(rebuilt)
    plain = forward.client_response(head, keep_alive, chunked, None)
    lines = b"X-Frame-Options: DENY\r\nVary: Origin\r\nX-Real-Ip: r\r\n"
    assert EDITS.lines == lines
    assert (out == plain[:-2] + lines + b"\r\n") is kept
