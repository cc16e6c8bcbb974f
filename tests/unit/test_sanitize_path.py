"""sanitizePath (issue 12 item 4): ``forward.sanitize_path`` as a table, Traefik's own
cases among them, the express path's guard (a path it would clean never takes
the express path, one it leaves alone may), and ``split_target`` refusing a fragment.

Traefik (pkg/server/server_entrypoint_tcp.go) cleans the escaped path with Go's
``path.Clean`` after ``normalizePath`` decoded unreserved escapes (``%2E`` among
them), keeps a trailing slash, and sends the backend the cleaned path.
"""

from __future__ import annotations

import pytest

from edge.http.codec.forward import sanitize_path, split_target
from edge.http.codec.httptools import RequestParser
from tests.unit.test_codec import Recorder

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
