"""HTTP/1.1 codec over h11: the strict reference, parsing what the fast codec parses.

This module owns the h11-backed RequestParser and ResponseParser of the interface
in :mod:`edge.http.codec`.

Invariant: h11 is only ever handed bytes this module has already framed and
checked with the shared rules of :mod:`edge.http.codec.headers`: one complete head at a
time (scanned for bare LF/CR, obs-fold and control bytes, no longer than
``max_header_bytes``), then the exact body bytes of that message. Chunk-size
lines are checked here as llhttp checks them and reach h11 rewritten as a plain
``<hex size>\\r\\n``; trailer sections are checked the same way as heads. So h11's
leniencies (bare LF, obs-fold unfolding, lenient chunk extensions, merging equal
Content-Length headers) never apply, and each message gets a fresh
``h11.Connection``: this parser-only use never sends a response, so h11's
request/response cycle never has to advance (HTTP/1.0 keep-alive included).

The strict path is slower than the httptools codec, by design.
"""

from __future__ import annotations

from collections.abc import Callable

import h11

from edge.errors import HeadersTooLarge, ProtocolError
from edge.http.codec.base import Handler, Header, RequestHead, ResponseHead
from edge.http.codec.headers import (
    HEAD_END,
    METHODS,
    ChunkLine,
    TrailerLines,
    check_header_count,
    check_oversize_head,
    check_partial_head,
    check_reason,
    check_target,
    request_framing,
    response_framing,
    scan_head,
    skip_empty_lines,
    split_header_lines,
)

__all__ = ["RequestParser", "ResponseParser"]

# Parser states.
_HEAD = 0
_BODY = 1  # Content-Length body
_CHUNKED = 2
_EOF_BODY = 3  # response body delimited by the connection closing
_CLOSED = 4
_UPGRADED = 5
_DEAD = 6

# Where a chunked body is.
_C_SIZE = 0  # a chunk-size line
_C_DATA = 1  # chunk data, ``_remaining`` bytes to go
_C_DATA_END = 2  # the CRLF after chunk data
_C_TRAILERS = 3  # the trailer section, up to its empty line


class _Base:
    """Buffering, head framing, bodies and events shared by both directions."""

    __slots__ = (
        "_buf",
        "_check",
        "_chunk",
        "_conn",
        "_handler",
        "_keep_alive",
        "_max",
        "_remaining",
        "_running",
        "_scanned",
        "_searched",
        "_state",
        "_trailers",
    )

    def __init__(self, handler: Handler, max_header_bytes: int) -> None:
        self._handler = handler
        self._max = max_header_bytes
        self._buf = bytearray()
        self._state = _HEAD
        self._conn: h11.Connection | None = None
        self._keep_alive = True
        self._searched = 0  # how far a CRLF CRLF (or CRLF) has been looked for
        self._scanned = 0  # how far an incomplete head has been scanned
        self._remaining = 0
        self._chunk = _C_SIZE
        self._check: ChunkLine | TrailerLines = ChunkLine()  # of the line in progress
        self._running = False  # inside _run: a handler callback must not re-enter it
        self._trailers: list[Header] | None = None  # a trailer section's fields, for _end

    def _feed(self, data: bytes) -> None:
        state = self._state
        if state >= _CLOSED:
            if state == _DEAD:
                raise ProtocolError("parser failed earlier")
            return
        self._buf += data
        self._guarded(self._run)

    def _guarded(self, step: Callable[[], None]) -> None:
        self._running = True
        try:
            step()
        except h11.ProtocolError as exc:
            self._state = _DEAD
            status = getattr(exc, "error_status_hint", 400)
            cls = HeadersTooLarge if status == 431 else ProtocolError
            raise cls(str(exc) or "invalid HTTP/1.1") from None
        except BaseException:
            self._state = _DEAD
            raise
        finally:
            self._running = False

    def _run(self) -> None:
        while True:
            state = self._state
            if state == _HEAD:
                if not self._step_head():
                    return
            elif state == _BODY:
                if not self._step_body():
                    return
            elif state == _CHUNKED:
                if not self._step_chunked():
                    return
            elif state == _EOF_BODY:
                if self._buf:
                    self._give(bytes(self._buf))
                    self._buf.clear()
                return
            else:
                return

    def _step_head(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- heads -----------------------------------------------------------------

    def _take_head(self) -> bytes | None:
        """Remove and return the next complete, checked head; None if incomplete."""
        buf = self._buf
        if not self._searched:
            start = skip_empty_lines(buf, 0)
            if start:
                del buf[:start]
            if not buf:
                return None
        end = buf.find(HEAD_END, self._searched)
        if end < 0:
            self._scanned = check_partial_head(buf, 0, self._scanned, self._max)
            self._searched = max(1, len(buf) - 3)
            return None
        end += 4
        if end > self._max:
            check_oversize_head(buf, 0, self._scanned, self._max)
        scan_head(buf, 0, self._scanned, end)
        head = bytes(buf[:end])
        del buf[:end]
        self._searched = self._scanned = 0
        return head

    # -- bodies ----------------------------------------------------------------

    def _give(self, data: bytes) -> None:
        """Hand body bytes to h11 and report what it makes of them."""
        conn = self._conn
        assert conn is not None
        conn.receive_data(data)
        self._pump()

    def _pump(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            kind = type(event)
            if kind is h11.Data:
                if event.data:
                    self._handler.on_body(bytes(event.data))
            elif kind is h11.EndOfMessage:
                self._end()
                return
            else:
                raise ProtocolError(f"unexpected {kind.__name__} in a body")

    def _step_body(self) -> bool:
        buf = self._buf
        if not buf:
            return False
        take = min(len(buf), self._remaining)
        self._remaining -= take
        data = bytes(buf[:take])
        del buf[:take]
        self._give(data)
        return True

    def _step_chunked(self) -> bool:
        buf = self._buf
        conn = self._conn
        assert conn is not None
        part = self._chunk
        if part == _C_SIZE:
            check = self._check
            assert isinstance(check, ChunkLine)
            i = buf.find(b"\r\n", self._searched)
            if i < 0:
                n = len(buf)
                check.feed(buf, n - 1 if n and buf[n - 1] == 13 else n)  # bad bytes: refused now
                if n > self._max:
                    raise HeadersTooLarge("chunk-size line too long")
                self._searched = max(0, n - 1)
                return False
            check.feed(buf, i)
            size = check.finish()
            del buf[: i + 2]
            self._searched = 0
            conn.receive_data(b"%x\r\n" % size)
            if size:
                self._chunk = _C_DATA
                self._remaining = size
            else:
                self._chunk = _C_TRAILERS
                self._scanned = 0
                self._check = TrailerLines()
            return True
        if part == _C_DATA:
            if not buf:
                return False
            if self._step_body() and not self._remaining:
                self._chunk = _C_DATA_END
            return True
        if part == _C_DATA_END:
            if len(buf) < 2:
                if buf and buf[0] != 13:
                    raise ProtocolError("chunk data not followed by CRLF")
                return False
            if buf[:2] != b"\r\n":
                raise ProtocolError("chunk data not followed by CRLF")
            del buf[:2]
            conn.receive_data(b"\r\n")
            self._chunk = _C_SIZE
            self._check = ChunkLine()
            return True
        # The trailer section: an empty line, or trailer fields and an empty line.
        check = self._check
        assert isinstance(check, TrailerLines)
        if buf[:2] == b"\r\n":
            end = 2
        else:
            end = buf.find(HEAD_END, self._searched)
            if end < 0:
                self._scanned = check_partial_head(buf, 0, self._scanned, self._max)
                self._searched = max(0, len(buf) - 3)
                check.feed(buf)  # a bad line is refused before the section ends
                return False
            end += 4
            if end > self._max:
                check_oversize_head(buf, 0, self._scanned, self._max)
            scan_head(buf, 0, self._scanned, end)
        block = bytes(buf[:end])
        del buf[:end]
        self._searched = self._scanned = 0
        check.feed(block)
        if end > 2:  # for the handler once h11 ends the message with them (_end)
            self._trailers = split_header_lines(block, 0, end)
        self._give(block)
        return True

    def _start_body(self, conn: h11.Connection, chunked: bool, content_length: int | None) -> None:
        """Set up the body after a head was reported; ends a message without one."""
        self._conn = conn
        if chunked:
            self._state = _CHUNKED
            self._chunk = _C_SIZE
            self._check = ChunkLine()
            self._searched = 0
        elif content_length:
            self._state = _BODY
            self._remaining = content_length
        else:
            self._pump()  # h11 ends a message with no body at once

    def _end(self) -> None:
        self._conn = None
        if self._state != _UPGRADED:
            self._state = _HEAD if self._keep_alive else _CLOSED
        if self._state == _CLOSED:
            self._buf.clear()
        self._ended()
        fields = self._trailers
        if fields is not None:
            self._trailers = None
            on_trailers = getattr(self._handler, "on_trailers", None)
            if on_trailers is not None:
                on_trailers(fields)
        self._handler.on_end()

    def _ended(self) -> None:
        """Per-direction reset when a message ends."""


def _h11_event(conn: h11.Connection, head: bytes) -> object:
    conn.receive_data(head)
    return conn.next_event()


class RequestParser(_Base):
    """Client side of a connection: a stream of (possibly pipelined) requests."""

    __slots__ = ("_count",)

    def __init__(
        self,
        handler: Handler,
        max_header_bytes: int = 1 << 20,
        max_header_count: int = 100,
        memo: None = None,
    ) -> None:
        super().__init__(handler, max_header_bytes)
        self._count = max_header_count

    @staticmethod
    def memo() -> None:
        """Nothing is shared between the parsers of an entrypoint (see the interface)."""
        return None

    def feed(self, data: bytes) -> None:
        """Parse ``data``; call the handler for each event. Raises ProtocolError."""
        self._feed(data)

    @property
    def head_started(self) -> bool:
        """Bytes of a request head not complete yet are buffered."""
        return self._state == _HEAD and bool(self._buf)

    def close(self) -> None:
        """The connection is gone (see the interface): nothing here refers back to this parser."""
        self._handler = None

    def _step_head(self) -> bool:
        head = self._take_head()
        if head is None:
            return False
        check_header_count(head, 0, len(head), self._count)  # scanned already: 431
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=len(head) + 64)
        event = _h11_event(conn, head)
        if type(event) is not h11.Request:
            raise ProtocolError("no request in head")
        version = event.http_version
        if version != b"1.1" and version != b"1.0":
            raise ProtocolError("request line is not 'METHOD target HTTP/1.0|1.1'")
        method = event.method
        if method not in METHODS:
            raise ProtocolError("unknown method")
        if method == b"CONNECT":
            raise ProtocolError("CONNECT is not supported")
        target = event.target
        check_target(target)
        headers = split_header_lines(head, head.find(b"\r\n") + 2, len(head))
        keep_alive, chunked, content_length, upgrade, expect_continue, through, host = (
            request_framing(version, headers)
        )
        self._keep_alive = keep_alive
        self._handler.on_head(
            RequestHead(
                method,
                target,
                version,
                headers,
                keep_alive,
                chunked,
                content_length,
                upgrade,
                expect_continue,
                head,
                through,
                host,
            )
        )
        if upgrade:
            self._state = _UPGRADED
            self._conn = None
            self._handler.on_end()
            rest = bytes(self._buf)
            self._buf.clear()
            self._handler.on_upgrade(rest)
            return False
        self._start_body(conn, chunked, content_length)
        return True


class ResponseParser(_Base):
    """Upstream side: one response per request sent, in order (see the interface)."""

    __slots__ = ("_method", "_started")

    def __init__(self, handler: Handler, max_header_bytes: int = 1 << 20) -> None:
        super().__init__(handler, max_header_bytes)
        self._method: bytes | None = None
        self._started = False  # bytes of the expected response (or its 1xx) were read

    def expect(self, method: bytes) -> None:
        """The next response answers a ``method`` request (bytes kept so far are parsed)."""
        self._method = method
        if self._buf and self._state == _HEAD and not self._running:
            self._guarded(self._run)

    def feed(self, data: bytes) -> None:
        self._feed(data)

    def close(self) -> None:
        """No response comes any more (see the interface): the handler is let go."""
        self._handler = None
        self._conn = None

    @property
    def held(self) -> bytes | bytearray:
        """Bytes kept after the last complete response (see the interface)."""
        return self._buf if self._state == _HEAD else b""

    def feed_eof(self) -> None:
        """The upstream closed: end a body delimited by close, or refuse a cut message."""
        state = self._state
        if state == _EOF_BODY:
            self._guarded(lambda: self._give(b""))
        elif state in (_BODY, _CHUNKED) or (
            state == _HEAD
            and self._method is not None
            and (self._started or skip_empty_lines(self._buf, 0) < len(self._buf))
        ):
            self._state = _DEAD
            raise ProtocolError("upstream closed the connection in the middle of a response")

    def _ended(self) -> None:
        self._method = None
        self._started = False

    def _step_head(self) -> bool:
        method = self._method
        if method is None:
            return False  # bytes are kept until expect()
        head = self._take_head()
        if head is None:
            if self._buf:
                self._started = True
            return False
        self._started = True
        conn = self._conn
        if conn is None:
            # h11 reads a response only after its request; propose an upgrade so
            # that a 101 is understood whatever the real request was.
            conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=self._max + 64)
            conn.send(
                h11.Request(
                    method=method,
                    target=b"/",
                    headers=[
                        (b"Host", b"edge"),
                        (b"Connection", b"upgrade"),
                        (b"Upgrade", b"edge"),
                    ],
                )
            )
            conn.send(h11.EndOfMessage())
            self._conn = conn
        event = _h11_event(conn, head)
        if type(event) not in (h11.Response, h11.InformationalResponse):
            raise ProtocolError("no response in head")
        status = event.status_code
        version = event.http_version
        if version != b"1.1" and version != b"1.0":
            raise ProtocolError("status line is not HTTP/1.0 or HTTP/1.1")
        check_reason(event.reason)
        headers = split_header_lines(head, head.find(b"\r\n") + 2, len(head))
        keep_alive, chunked, content_length, has_body, through = response_framing(
            status, version, headers, method
        )
        if status < 200 and status != 101:
            # 100 Continue, 103 Early Hints: no message of their own
            on_interim = getattr(self._handler, "on_interim", None)
            if on_interim is not None:
                on_interim(
                    ResponseHead(
                        status,
                        bytes(event.reason),
                        version,
                        headers,
                        keep_alive,
                        False,
                        None,
                        False,
                        head,
                    )
                )
            return True
        self._keep_alive = keep_alive
        self._handler.on_head(
            ResponseHead(
                status,
                bytes(event.reason),
                version,
                headers,
                keep_alive,
                chunked,
                content_length,
                has_body,
                head,
                through,
            )
        )
        if status == 101:
            self._state = _UPGRADED
            self._conn = None
            self._ended()
            self._handler.on_end()
            rest = bytes(self._buf)
            self._buf.clear()
            self._handler.on_upgrade(rest)
            return False
        if has_body and not chunked and content_length is None:
            self._state = _EOF_BODY
            self._conn = conn
            return True
        self._start_body(conn, chunked, content_length if has_body else 0)
        return True
