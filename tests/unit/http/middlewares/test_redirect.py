"""The redirect middlewares (edge.http.middlewares.redirect) on Traefik's test tables
(pkg/middlewares/redirect): redirectRegex over the request's URL, redirectScheme's
statuses, forcePermanentRedirect."""

from __future__ import annotations

import pytest

from edge.http.middlewares import Forward
from edge.http.middlewares.redirect import RedirectRegex, RedirectScheme
from edge.rules import split_authority


def url_request(url: str, method: bytes = b"GET") -> Forward:
    scheme, _, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    path, _, query = (slash + path).partition("?")
    return Forward(
        split_authority(authority)[0],
        path.encode() or b"/",
        query.encode(),
        method,
        authority.encode(),
        scheme.encode(),
    )


# (desc, regex, replacement, permanent, url, method, status, location)
REDIRECT_REGEX = [
    (
        "simple redirection",
        r"^(?:http?:\/\/)(foo)(\.com)(:\d+)(.*)$",
        "https://${1}bar$2:443$4",
        False,
        "http://foo.com:80",
        b"GET",
        302,
        b"https://foobar.com:443/",
    ),
    (
        "URL doesn't match regex",
        r"^(?:http?:\/\/)(foo)(\.com)(:\d+)(.*)$",
        "https://${1}bar$2:443$4",
        False,
        "http://bar.com:80",
        b"GET",
        None,
        None,
    ),
    (
        "invalid rewritten URL",
        "^(.*)$",
        "http://192.168.0.%31/",
        False,
        "http://foo.com:80",
        b"GET",
        502,
        None,
    ),
    (
        "HTTPS to HTTP permanent",
        "https://foo",
        "http://foo",
        True,
        "https://foo",
        b"GET",
        301,
        b"http://foo/",
    ),
    (
        "HTTP to HTTPS",
        "http://foo:80",
        "https://foo:443",
        False,
        "http://foo:80",
        b"GET",
        302,
        b"https://foo:443/",
    ),
    (
        "HTTPS to HTTP",
        "https://foo:443",
        "http://foo:80",
        False,
        "https://foo:443",
        b"GET",
        302,
        b"http://foo:80/",
    ),
    (
        "HTTP to HTTP",
        "http://foo:80",
        "http://foo:88",
        False,
        "http://foo:80",
        b"GET",
        302,
        b"http://foo:88/",
    ),
    (
        "HTTP to HTTP POST",
        "^http://(.*)",
        "https://$1",
        False,
        "http://foo",
        b"POST",
        307,
        b"https://foo/",
    ),
    (
        "HTTP to HTTP POST permanent",
        "^http://(.*)",
        "https://$1",
        True,
        "http://foo",
        b"POST",
        308,
        b"https://foo/",
    ),
    (
        "www-redirect without port",
        "(https?)://[^/:]+(:[0-9]+)?/(.*)",
        "$1://example.com$2/$3",
        True,
        "http://www.example.com/path",
        b"GET",
        301,
        b"http://example.com/path",
    ),
    (
        "www-redirect with port",
        "(https?)://[^/:]+(:[0-9]+)?/(.*)",
        "$1://example.com$2/$3",
        True,
        "http://www.example.com:8080/path",
        b"GET",
        301,
        b"http://example.com:8080/path",
    ),
    ("same URL: served", "^(.*)$", "$1", False, "http://foo/x?y", b"GET", None, None),
]


@pytest.mark.parametrize(
    ("regex", "replacement", "permanent", "url", "method", "status", "location"),
    [case[1:] for case in REDIRECT_REGEX],
    ids=[case[0] for case in REDIRECT_REGEX],
)
def test_redirect_regex(regex, replacement, permanent, url, method, status, location):
    answer = RedirectRegex("r", regex, replacement, permanent).request(url_request(url, method))
    if status is None:
        assert answer is None
        return
    assert answer is not None and answer.status == status
    if location is not None:
        assert answer.lines == b"Location: " + location + b"\r\n"


@pytest.mark.parametrize(
    ("permanent", "force", "method", "status"),
    [
        (False, False, b"GET", 302),
        (True, False, b"GET", 301),
        (False, False, b"POST", 307),
        (True, False, b"POST", 308),
        (False, True, b"GET", 308),
        (True, True, b"GET", 308),
        (False, True, b"POST", 308),
    ],
)
def test_redirect_scheme_status(permanent, force, method, status):
    mw = RedirectScheme("r", "https", "", permanent, force)
    answer = mw.request(url_request("http://foo.com/a?b=1", method))
    assert answer is not None and answer.status == status
    assert answer.lines == b"Location: https://foo.com/a?b=1\r\n"
    assert answer.body  # the status's text, as Traefik writes


@pytest.mark.parametrize(
    ("scheme", "port", "url", "location"),
    [
        ("https", "", "http://foo", b"https://foo/"),
        ("https", "8443", "http://foo", b"https://foo:8443/"),
        ("https", "443", "http://foo:80", b"https://foo/"),
        ("http", "80", "https://foo:443/x", b"http://foo/x"),
        ("https", "", "http://[::1]:8080/x", b"https://[::1]/x"),
    ],
)
def test_redirect_scheme_location(scheme, port, url, location):
    answer = RedirectScheme("r", scheme, port, False).request(url_request(url))
    assert answer is not None and answer.lines == b"Location: " + location + b"\r\n"


@pytest.mark.parametrize("method", [b"GET", b"POST"])
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_regex_status_code_answers_that_status_for_every_method(status, method):
    """``statusCode`` (set by the Gateway provider's RequestRedirect): that status
    whatever the method, where ``permanent`` would pick by method."""
    mw = RedirectRegex("r", "^http://a/(.*)", "http://b/$1", False, status)
    answer = mw.request(url_request("http://a/x", method))
    assert answer is not None and answer.status == status
    assert answer.lines == b"Location: http://b/x\r\n"


def test_redirect_regex_status_code_must_be_a_redirect_status():
    from edge.config import dynamic

    model = dynamic.RedirectRegex(regex="^(.*)$", replacement="http://b$1", status_code=303)
    model.check()
    with pytest.raises(ValueError, match="statusCode: 304"):
        dynamic.RedirectRegex(regex="^(.*)$", replacement="http://b$1", status_code=304).check()
