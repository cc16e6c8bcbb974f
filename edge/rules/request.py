"""The request as matchers see it: :class:`RequestView`, the routing path and the query.

Built once per request (HTTP) or connection (TCP: SNI and ALPN); the routing path, the
query map and the parsed client address are computed lazily, once each, so a rule that
does not look at them costs nothing for them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Final
from urllib.parse import unquote_to_bytes

# RFC 3986 reserved characters, and '%': their escapes keep their meaning in a path.
_RESERVED: Final = frozenset(b":/?#[]@!$&'()*+,;=%")
_ESCAPE_RE: Final = re.compile(rb"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE_RE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _text_bytes(text: str) -> bytes:
    """The bytes a request string stands for.

    The server decodes the bytes it got as latin-1; what a client sends beyond ASCII
    is UTF-8, so a string whose latin-1 bytes are UTF-8 is taken as those bytes. Any
    other string is text (a test, a caller with real text) and stands for its UTF-8.
    """
    try:
        data = text.encode("latin-1")
        data.decode("utf-8")
    except UnicodeError:
        return text.encode("utf-8", "surrogateescape")
    return data


def _keep_reserved(match: re.Match[bytes]) -> bytes:
    byte = int(match.group(1), 16)
    return b"%" + match.group(1).upper() if byte in _RESERVED else bytes((byte,))


def routing_path(path: str) -> str:
    """The path rules match: reserved escapes kept (upper case), every other one decoded.

    ``path`` is the request target's path as the server got it (see :func:`_text_bytes`).
    ``/a%2fb`` -> ``/a%2Fb``, ``/%61dmin`` -> ``/admin``, ``/caf%C3%A9`` -> ``/café``;
    escaped bytes that are not UTF-8 become lone surrogates; a ``%`` that starts no
    escape stays as it is.
    """
    if "%" not in path and path.isascii():
        return path
    data = _ESCAPE_RE.sub(_keep_reserved, _text_bytes(path))
    return data.decode("utf-8", "surrogateescape")


def _unescape_query(text: str) -> str | None:
    """Go's QueryUnescape: ``+`` is a space; None for a bad escape (the pair is dropped)."""
    if "%" not in text and "+" not in text and text.isascii():
        return text
    if _BAD_ESCAPE_RE.search(text):
        return None
    raw = unquote_to_bytes(_text_bytes(text).replace(b"+", b" "))
    return raw.decode("utf-8", "surrogateescape")


def parse_query(query: str) -> dict[str, list[str]]:
    """Go's ``URL.Query()``: pairs split on ``&``; a pair holding ``;`` or a bad escape is
    dropped; a key without ``=`` has the value ``""``."""
    out: dict[str, list[str]] = {}
    for pair in query.split("&"):
        if not pair or ";" in pair:
            continue
        key, _, value = pair.partition("=")
        k, v = _unescape_query(key), _unescape_query(value)
        if k is not None and v is not None:
            out.setdefault(k, []).append(v)
    return out


class RequestView:
    """What a rule can look at. Built by the server (or a test) once per request/connection.

    ``host`` must already be canonical (see :func:`canonical_host`), ``sni`` lowercased;
    ``path`` and ``query`` are raw as received (bytes as latin-1). Path matchers read
    :meth:`routing_path`, query matchers the pairs as Go's ``URL.Query()`` finds them.
    """

    __slots__ = (
        "_client_addr",
        "_query_map",
        "_routing_path",
        "alpn",
        "client_ip",
        "headers",
        "host",
        "method",
        "path",
        "query",
        "sni",
    )

    def __init__(
        self,
        *,
        host: str = "",
        path: str = "",
        query: str = "",
        method: str = "",
        client_ip: str = "",
        headers: Sequence[tuple[bytes, bytes]] = (),
        sni: str = "",
        alpn: tuple[str, ...] = (),
    ) -> None:
        self.host = host
        self.path = path
        self.query = query
        self.method = method
        self.client_ip = client_ip
        self.headers = headers
        self.sni = sni
        self.alpn = alpn
        self._query_map: dict[str, list[str]] | None = None
        self._routing_path: str | None = None
        self._client_addr: ipaddress.IPv4Address | ipaddress.IPv6Address | bool | None = False

    def header_values(self, name: str) -> list[str]:
        """Values of every header line called ``name`` (any case), trimmed; bytes as UTF-8
        (a byte that is not becomes a lone surrogate, so it equals no rule text)."""
        target = name.lower().encode("latin-1")
        size = len(target)
        return [
            value.strip(b" \t").decode("utf-8", "surrogateescape")
            for key, value in self.headers
            if len(key) == size and key.lower() == target
        ]

    def query_values(self, key: str) -> list[str]:
        """Decoded values of query parameter ``key`` (``[]`` if absent); parsed once, lazily."""
        qmap = self._query_map
        if qmap is None:
            qmap = self._query_map = parse_query(self.query) if self.query else {}
        return list(qmap.get(key, ()))

    def routing_path(self) -> str:
        """:func:`routing_path` of ``path``, cached."""
        routed = self._routing_path
        if routed is None:
            routed = self._routing_path = routing_path(self.path)
        return routed

    def client_address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """``client_ip`` parsed (``None`` if empty or invalid), cached."""
        addr = self._client_addr
        if addr is False:
            try:
                addr = ipaddress.ip_address(self.client_ip)
            except ValueError:
                addr = None
            self._client_addr = addr
        return addr  # type: ignore[return-value]

    def __repr__(self) -> str:
        return (
            f"RequestView(host={self.host!r}, method={self.method!r}, path={self.path!r}, "
            f"query={self.query!r}, client_ip={self.client_ip!r}, sni={self.sni!r})"
        )
