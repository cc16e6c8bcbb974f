"""The built-in HTTP middlewares' pure parts (edge.http.middlewares.builtin), table-driven:
RedirectScheme redirects only to another URL, StripPrefix reads the path as routers do.
Both pin defects of the middleware review; the live cases are integration tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edge.http.middlewares import Forward
from edge.http.middlewares.builtin import RedirectScheme, StripPrefix


def trusted(proto: bytes) -> SimpleNamespace:
    """What RedirectScheme reads of a trusted client's head: its headers."""
    return SimpleNamespace(headers=[(b"Host", b"a.example"), (b"X-Forwarded-Proto", proto)])


@pytest.mark.parametrize(
    ("scheme", "port", "entry", "authority", "head", "location"),
    [
        # Served on the entrypoint of the target scheme (a router on both): no redirect.
        ("https", "", b"https", b"a.example", None, None),
        ("https", "443", b"https", b"a.example:443", None, None),
        ("https", "8443", b"https", b"a.example:8443", None, None),
        ("http", "", b"http", b"a.example", None, None),
        # Another scheme or port is another URL.
        ("https", "", b"http", b"a.example", None, b"https://a.example/p?q"),
        ("https", "", b"https", b"a.example:8443", None, b"https://a.example/p?q"),
        ("https", "8443", b"https", b"a.example", None, b"https://a.example:8443/p?q"),
        ("https", "8443", b"http", b"a.example:8080", None, b"https://a.example:8443/p?q"),
        # A trusted client's X-Forwarded-Proto is the scheme (ws/wss read as http/https).
        ("https", "", b"http", b"a.example", trusted(b"https"), None),
        ("https", "", b"http", b"a.example", trusted(b"WSS"), None),
        ("http", "", b"https", b"a.example", trusted(b"ws"), None),
        ("https", "", b"https", b"a.example", trusted(b"http"), b"https://a.example/p?q"),
        ("https", "", b"http", b"a.example", trusted(b"bogus"), b"https://a.example/p?q"),
    ],
)
def test_redirect_scheme_redirects_only_to_another_url(
    scheme, port, entry, authority, head, location
):
    mw = RedirectScheme("r", scheme, port, False)
    fwd = Forward("a.example", b"/p", b"q", b"GET", authority, entry, head)
    answer = mw.request(fwd)
    if location is None:
        assert answer is None
    else:
        assert answer is not None and answer.status == 302
        assert answer.lines == b"Location: " + location + b"\r\n"


@pytest.mark.parametrize(
    ("path", "prefix", "path_after", "forwarded"),
    [
        (b"/api/x", "/api", b"/x", b"/api"),
        (b"/%61pi/x", "/api", b"/x", b"/api"),
        (b"/%61%70%69/x", "/api", b"/x", b"/api"),
        (b"/%61pix", "/api", b"/x", b"/api"),
        (b"/%41pi/x", "/api", b"/%41pi/x", b""),  # /Api: another path
        (b"/a%2Fb/x", "/a/b", b"/a%2Fb/x", b""),  # a reserved escape is no separator
        (b"/a%2fb/x", "/a%2Fb", b"/x", b"/a%2Fb"),  # ...and matches its upper-case spelling
        (b"/caf%C3%A9/x", "/café", b"/x", b"/caf\xc3\xa9"),
        (b"/ap%", "/api", b"/ap%", b""),
        (b"/a", "/api", b"/a", b""),
    ],
)
def test_strip_prefix_reads_the_path_as_routers_do(path, prefix, path_after, forwarded):
    fwd = Forward("a.example", path, b"")
    assert StripPrefix("s", [prefix]).request(fwd) is None
    assert (fwd.path, fwd.prefix) == (path_after, forwarded)
