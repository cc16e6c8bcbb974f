"""The HTTP/1.1 codec interface: sans-IO parsers for requests and responses.

Two implementations sit behind this interface: :mod:`~edge.http.codec.httptools`
(llhttp, the fast default) and :mod:`~edge.http.codec.h11` (the strict reference).
Both are pure objects over bytes: ``feed()`` buffers and parses, and calls the
handler synchronously for each event; no sockets, no loop. They must emit exactly the same events for the same
bytes, however those bytes are split (a differential test checks this).

Events, in order, per message:
    handler.on_head(head)            a RequestHead / ResponseHead
    handler.on_body(data)            zero or more times, decoded body bytes (chunk
                                     framing removed), never empty
    handler.on_end()                 the message is complete

Two events only a handler that has them gets (looked up when one comes, so the
hot path pays nothing and a handler that wants neither, a forwardAuth or mirror
connection, needs neither):
    handler.on_interim(head)         a response parser's 1xx but 101 (103 Early
                                     Hints, 102), before the final head; no
                                     on_end follows it
    handler.on_trailers(fields)      the trailer fields of a chunked message, as
                                     received (name case kept, values stripped),
                                     just before its on_end; never an empty list

For an upgrade (a request with ``Connection: upgrade`` and ``Upgrade``, or a 101
response) the parser calls ``on_head``, ``on_end`` and then
``handler.on_upgrade(rest)`` with the bytes that followed the head, and parses
nothing more: further ``feed()`` calls are ignored.

Errors raise :class:`edge.errors.ProtocolError` (status 400) or
:class:`edge.errors.HeadersTooLarge` (431), identically under both codecs: both
refuse Content-Length together with Transfer-Encoding, more than one
Content-Length header, any Transfer-Encoding but exactly ``chunked``, an invalid
chunk size, obs-fold, a bare LF line ending, a request line that is not
HTTP/1.0 or HTTP/1.1, HTTP/1.1 without Host, a CONNECT request, an upgrade
request with a body (its bytes would go to the tunnel, never as a body), a head
larger than ``max_header_bytes``, and a request head with more than
``max_header_count`` fields. After an error the parser is dead.

Heads are plain slotted objects (not msgspec Structs): they are built once per
message on the hot path.
"""

from __future__ import annotations

from typing import Protocol

from edge.http.codec.headers import (
    FORWARDED,
    FORWARDED_KEPT,
    HOP_BY_HOP,
    RFC_FORWARDED,
    head_passthrough,
    split_header_lines,
)

# ``passthrough`` not worked out yet (a quick parse): found from the headers when asked.
UNKNOWN = ...

# (name as received, value with surrounding whitespace stripped)
Header = tuple[bytes, bytes]


# Fields never forwarded as trailers, either way (RFC 9110 6.5.1): framing and other
# hop-by-hop ones (edge frames each message itself), Host (routing), and the
# forwarding headers edge owns (a server that merges trailers into the header
# section must not take a client's own).
NOT_TRAILERS = HOP_BY_HOP | FORWARDED | FORWARDED_KEPT | {RFC_FORWARDED, b"host"}


def trailer_fields(fields: list[Header]) -> list[Header]:
    """The trailer fields edge forwards of ``fields`` (see NOT_TRAILERS)."""
    return [(n, v) for n, v in fields if n.lower() not in NOT_TRAILERS]


def last_chunk(fields: list[Header]) -> bytes:
    """The last chunk of a chunked body, with ``fields`` as its trailer section."""
    return b"".join((b"0\r\n", *[b"%s: %s\r\n" % field for field in fields], b"\r\n"))


def _header_list(raw: bytes) -> list[Header]:
    return split_header_lines(raw, raw.find(b"\r\n") + 2, len(raw))


class _Head:
    """What request and response heads share: the bytes, and what is cut from them lazily."""

    __slots__ = (
        "_headers",  # list[Header]; None: cut from raw when asked
        "_through",  # see ``passthrough``
        "cut",  # bytes | None: raw as sent to a kept-alive next hop (a quick parse's; see forward.cut_connection)
        "raw",  # bytes: the head as received, first line to the final CRLF CRLF
    )

    @property
    def headers(self) -> list[Header]:
        """The header fields, order and case kept; a quick parse leaves them in ``raw`` until asked for."""
        headers = self._headers
        if headers is None:
            headers = self._headers = _header_list(self.raw)
        return headers

    @property
    def passthrough(self) -> tuple[Header, ...] | None:
        """None when the head must be rebuilt, else its Connection header (if any),
        to cut from ``raw`` (see :func:`edge.http.codec.headers.passthrough`)."""
        through = self._through
        if through is UNKNOWN:
            through = self._through = head_passthrough(self.headers)
        return through


class RequestHead(_Head):
    __slots__ = (
        "chunked",  # bool: Transfer-Encoding: chunked
        "content_length",  # int | None
        "expect_continue",  # bool: Expect: 100-continue
        "host",  # bytes: the Host header's value (b"" without one)
        "keep_alive",  # bool: version default and Connection tokens
        "method",  # b"GET"
        "target",  # raw request-target as received: b"/a?b" or b"http://host/a?b"
        "upgrade",  # bool: Connection: upgrade + an Upgrade header
        "version",  # b"1.1" or b"1.0"
    )

    def __init__(
        self,
        method: bytes,
        target: bytes,
        version: bytes,
        headers: list[Header] | None,
        keep_alive: bool,
        chunked: bool,
        content_length: int | None,
        upgrade: bool,
        expect_continue: bool,
        raw: bytes = b"",
        passthrough: tuple[Header, ...] | None = None,
        host: bytes = b"",
        cut: bytes | None = None,
    ) -> None:
        self.cut = cut
        self.method = method
        self.target = target
        self.version = version
        self._headers = headers
        self.host = host
        self.keep_alive = keep_alive
        self.chunked = chunked
        self.content_length = content_length
        self.upgrade = upgrade
        self.expect_continue = expect_continue
        self.raw = raw
        self._through = passthrough

    def as_tuple(self) -> tuple:
        """A comparable form (header names lowercased): used by tests."""
        return (
            self.method,
            self.target,
            self.version,
            self.host,
            [(n.lower(), v) for n, v in self.headers],
            self.keep_alive,
            self.chunked,
            self.content_length,
            self.upgrade,
            self.expect_continue,
        )

    def __repr__(self) -> str:
        return f"RequestHead{self.as_tuple()!r}"


class ResponseHead(_Head):
    __slots__ = (
        "chunked",  # bool
        "content_length",  # int | None (None with chunked, or body until close, or no body)
        "has_body",  # bool: False for HEAD, 1xx, 204, 304
        "keep_alive",  # bool: the upstream connection may be reused after this response
        "reason",  # bytes
        "status",  # int
        "version",  # b"1.1" / b"1.0"
    )

    def __init__(
        self,
        status: int,
        reason: bytes,
        version: bytes,
        headers: list[Header] | None,
        keep_alive: bool,
        chunked: bool,
        content_length: int | None,
        has_body: bool,
        raw: bytes = b"",
        passthrough: tuple[Header, ...] | None = None,
        cut: bytes | None = None,
    ) -> None:
        self.cut = cut
        self.status = status
        self.reason = reason
        self.version = version
        self._headers = headers
        self.keep_alive = keep_alive
        self.chunked = chunked
        self.content_length = content_length
        self.has_body = has_body
        self.raw = raw
        self._through = passthrough

    def as_tuple(self) -> tuple:
        return (
            self.status,
            self.reason,
            self.version,
            [(n.lower(), v) for n, v in self.headers],
            self.keep_alive,
            self.chunked,
            self.content_length,
            self.has_body,
        )

    def __repr__(self) -> str:
        return f"ResponseHead{self.as_tuple()!r}"


class QuickRequestHead(RequestHead):
    """A RequestHead from a quick parse (see ``edge.http.codec.httptools.RequestParser.quick``).

    What every such head shares is a class attribute, which shadows the slot of
    the same name (heads are never written after they are built), so building one
    sets seven fields, not twelve.
    """

    __slots__ = ()
    chunked = False
    content_length = None
    upgrade = False
    expect_continue = False

    def __init__(
        self,
        method: bytes,
        target: bytes,
        version: bytes,
        keep_alive: bool,
        raw: bytes,
        host: bytes,
        cut: bytes,
    ) -> None:
        self.method = method
        self.target = target
        self.version = version
        self.keep_alive = keep_alive
        self.raw = raw
        self.host = host
        self.cut = cut
        self._headers = None
        self._through = UNKNOWN


class QuickResponseHead(ResponseHead):
    """A ResponseHead from a quick parse: HTTP/1.1, a Content-Length body (see QuickRequestHead).

    ``closing``: the head as written to a client whose connection closes after
    it, kept by :func:`edge.http.codec.forward.client_response` the first time it is
    asked (the parser hands the same head out again for a repeated response).
    """

    __slots__ = ("closing",)
    version = b"1.1"
    chunked = False
    has_body = True

    def __init__(
        self,
        status: int,
        reason: bytes,
        keep_alive: bool,
        content_length: int,
        raw: bytes,
        cut: bytes,
    ) -> None:
        self.status = status
        self.reason = reason
        self.keep_alive = keep_alive
        self.content_length = content_length
        self.raw = raw
        self.cut = cut
        self._headers = None
        self._through = UNKNOWN
        self.closing: bytes | None = None


class Handler(Protocol):
    def on_head(self, head: RequestHead | ResponseHead) -> None: ...
    def on_body(self, data: bytes) -> None: ...
    def on_end(self) -> None: ...
    def on_upgrade(self, rest: bytes) -> None: ...


class RequestParser(Protocol):
    """Parses the client side of a connection: a stream of requests (pipelining).

    A request head with more than ``max_header_count`` field lines is refused
    with HeadersTooLarge (431), as one over ``max_header_bytes`` is.
    """

    def __init__(
        self,
        handler: Handler,
        max_header_bytes: int = 1 << 20,
        max_header_count: int = 100,
        memo: object = None,
    ) -> None: ...

    @staticmethod
    def memo() -> object:
        """What the parsers of one entrypoint may share (made once, passed to each as
        ``memo``; None when nothing): what would otherwise be made per connection."""

    def feed(self, data: bytes) -> None:
        """Parse ``data``; call the handler for each event. Raises ProtocolError."""

    @property
    def head_started(self) -> bool:
        """Bytes of a request head not complete yet are buffered."""

    def close(self) -> None:
        """The connection is gone: let go of the handler and of anything that refers
        back to this parser, so that neither waits for the cyclic GC. No call follows."""


class ResponseParser(Protocol):
    """Parses the upstream side: one response per request sent, in order.

    ``expect(method)`` must be called once before each response, with the method
    of the request it answers (a response to HEAD has no body). Interim 1xx
    responses other than 101 go to the handler's ``on_interim`` where it has one,
    and are dropped otherwise. ``feed_eof()`` ends a
    body delimited by connection close (calls on_end) or raises ProtocolError if a
    message was cut short.
    """

    def __init__(self, handler: Handler, max_header_bytes: int = 1 << 20) -> None: ...

    def expect(self, method: bytes) -> None: ...

    def feed(self, data: bytes) -> None: ...

    def feed_eof(self) -> None: ...

    def close(self) -> None:
        """No response comes any more: let go of the handler and of anything that refers
        back to this parser, so that neither waits for the cyclic GC (a parser made per
        HTTP/2 stream). No call follows."""

    @property
    def held(self) -> bytes | bytearray:
        """Bytes received but not yet part of a reported message: the start of a
        head, or bytes waiting for the next ``expect()``. After a feed that ended a
        response, anything here but empty lines arrived before the next request
        was sent: a response to nothing (see ``UpstreamConnection``)."""
