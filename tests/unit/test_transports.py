"""ServerURL: the plain form read without urlsplit says what urlsplit says.

``ServerURL`` reads ``scheme://host:port`` with one regexp (a Kubernetes sync makes
20,000 of them) and everything else with ``urllib.parse.urlsplit``; both must agree on
the scheme, host, port, Host authority and pool key of every URL the fast path takes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.errors import ConfigError
from edge.transports import _PLAIN_URL, ServerURL, _split


def general(url: str) -> tuple[bool, str, int, bytes]:
    """What ServerURL holds when urlsplit reads ``url``."""
    scheme, host, port = _split(url)
    tls = scheme == "https"
    port = port or (443 if tls else 80)
    shown = f"[{host}]" if ":" in host else host
    authority = shown if port == (443 if tls else 80) else f"{shown}:{port}"
    return tls, host, port, authority.encode()


def held(server: ServerURL) -> tuple[bool, str, int, bytes]:
    scheme = "https" if server.tls else "h2c" if server.h2c else "http"
    assert server.key == (scheme, server.host, server.port)
    return server.tls, server.host, server.port, server.authority


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:8080",
        "https://10.0.0.1:443",
        "http://Backend.Example.COM:80",
        "http://whoami:080",
        "https://a.b.c:65535",
        "http://host.:81",
        "h2c://10.0.0.1:50051",
    ],
)
def test_plain_urls_read_as_urlsplit_reads_them(url: str) -> None:
    assert _PLAIN_URL.fullmatch(url) is not None
    assert held(ServerURL(url)) == general(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1",  # no port: the scheme's
        "http://[fd00::1]:8080",  # IPv6: urlsplit checks it
        "HTTP://10.0.0.1:80",
        "http://10.0.0.1:0",  # port 0: urlsplit's None-or-0 means the default
        "http://user@10.0.0.1:80",
        "http://10.0.0.1:80/",
    ],
)
def test_other_urls_go_through_urlsplit(url: str) -> None:
    assert _PLAIN_URL.fullmatch(url) is None or int(_PLAIN_URL.fullmatch(url)[3]) == 0
    assert held(ServerURL(url)) == general(url)


@pytest.mark.parametrize("url", ["http://10.0.0.1:70000", "ftp://10.0.0.1:21", "http://:80"])
def test_bad_urls_are_refused_naming_them(url: str) -> None:
    with pytest.raises(ConfigError, match="server url"):
        ServerURL(url)


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https"]),
    host=st.from_regex(r"[A-Za-z0-9.-]{1,20}", fullmatch=True),
    port=st.integers(min_value=0, max_value=99999),
)
def test_fast_path_agrees_with_urlsplit(scheme: str, host: str, port: int) -> None:
    url = f"{scheme}://{host}:{port}"
    try:
        expected = general(url)
    except ConfigError:
        with pytest.raises(ConfigError):
            ServerURL(url)
        return
    assert held(ServerURL(url)) == expected
