"""HTTP/1.1 codec over httptools (llhttp): the fast default on edge's hot path.

This module owns the llhttp-backed RequestParser and ResponseParser of the
interface in :mod:`edge.http.codec.base`.

Invariant: llhttp is only ever handed (1) one complete head, found here (it ends at
the first CRLF CRLF) and no longer than ``max_header_bytes``, then (2) exactly the
body bytes of that message: a Content-Length body by count, a chunked body in
pieces that each end at a CRLF CRLF (a chunked message always ends with one, so it
can only end where a piece ends). So the end of every message is known here
without asking llhttp, heads are judged by the shared rules of
:mod:`edge.http.codec.headers` exactly as the h11 codec judges them, and one llhttp
parser serves every message of a keep-alive connection. llhttp's own checks
(bare LF, obs-fold, control bytes, Content-Length and Transfer-Encoding
conflicts, chunk syntax) do the rest, but for chunk sizes: llhttp takes any up to
2**64 - 1, so the chunk-size lines of a piece are followed here before llhttp gets
it (``_Base._chunk_sizes``: a few operations per chunk), and a size above
``MAX_CHUNK_SIZE`` (2**63 - 1, as in the h11 codec) is refused once llhttp has
been given the bytes before its line.

Per request the Python work is: one ``bytes.find`` for the head, llhttp's url and
header callbacks, one slice compare for the request line, one pass over the
headers (:func:`edge.http.codec.headers.request_framing`) and the head object.

Parser states (``_state``; the module constants below). The rules, as h11's
``_state.py`` writes its own:

- A parser starts in HEAD, and HEAD is where it finds a message's head: a head
  not complete yet is kept (``_partial``) and the state stays HEAD until its
  CRLF CRLF arrives. The head decides how the body is read: BODY counts a
  Content-Length, CHUNKED follows chunks, EOF_BODY (responses only) reads until
  the upstream closes; a message without a body ends with its head.
- A message's end (llhttp's ``on_message_complete``, or a quick parse that took
  the whole message) goes back to HEAD if the message keeps the connection
  alive, else to CLOSED.
- A head that upgrades (a request with ``Connection: upgrade`` and ``Upgrade``; a
  101 response) goes to UPGRADING while llhttp finishes its message, then to
  UPGRADED once ``on_upgrade`` has the bytes that followed the head.
- CLOSED and UPGRADED ignore whatever is fed after. An error from any state (a
  ProtocolError or HeadersTooLarge, llhttp's refusal, an exception of the
  handler, a response cut short by ``feed_eof``) goes to DEAD, and DEAD refuses
  every later ``feed``.
- A response parser stays in HEAD, keeping what it is fed (``_pending``), until
  ``expect(method)`` says which request the response answers; a 1xx interim
  response (not 101) goes to the handler's ``on_interim`` and leaves it in HEAD.

    state      event                                      next state
    ---------  -----------------------------------------  -----------------------------
    HEAD       head with Content-Length > 0               BODY
    HEAD       head with chunked                          CHUNKED
    HEAD       response head, body until close            EOF_BODY
    HEAD       head that upgrades (request, or 101)       UPGRADING
    HEAD       head without a body                        HEAD or CLOSED (keep-alive?)
    HEAD       1xx interim response (not 101)             HEAD
    BODY       the last byte of the Content-Length        HEAD or CLOSED (keep-alive?)
    CHUNKED    the last chunk and its trailers            HEAD or CLOSED (keep-alive?)
    EOF_BODY   feed_eof()                                 CLOSED (never kept alive)
    UPGRADING  llhttp ends the message; on_upgrade(rest)  UPGRADED
    CLOSED     feed()                                     CLOSED (bytes ignored)
    UPGRADED   feed()                                     UPGRADED (bytes ignored)
    any        an error                                   DEAD
    DEAD       feed()                                     DEAD (ProtocolError raised)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httptools

from edge.errors import HeadersTooLarge, ProtocolError
from edge.http.codec.base import (
    Handler,
    Header,
    QuickRequestHead,
    QuickResponseHead,
    RequestHead,
    ResponseHead,
)
from edge.http.codec.headers import (
    FIELD_LINES,
    HEAD_END,
    MAX_CHUNK_SIZE,
    MIN_LINE,
    QUICK_HEADERS,
    check_header_count,
    check_oversize_head,
    check_partial_head,
    check_reason,
    check_target,
    check_value_space,
    connection_line,
    request_framing,
    response_framing,
    skip_empty_lines,
    volatile_lines,
)

__all__ = ["RequestParser", "ResponseParser"]

# Parser states (the module's docstring has their rules and transitions).
_HEAD = 0  # between messages or inside a head
_BODY = 1  # Content-Length body: ``_remaining`` bytes to go
_CHUNKED = 2  # chunked body
_EOF_BODY = 3  # response body delimited by the connection closing
_UPGRADING = 4  # the head asked for an upgrade; llhttp is finishing the message
_CLOSED = 5  # the last message said close: later bytes are ignored
_UPGRADED = 6  # on_upgrade was called: later bytes are ignored
_DEAD = 7  # a ProtocolError was raised

# The quick paths (RequestParser.quick, ResponseParser.quick): start lines in the
# plain forms they take (the framing headers are read by headers.QUICK_HEADERS),
# and the status line most responses have. A plain target's path holds no "/.",
# "//", "%2e", "%2E" (what may be a dot or empty segment) or backslash, which
# forward.sanitize_path cleans on the full path, and no "#" anywhere (forward.split_target refuses
# one), so a quick head never needs either; the quick path pays no check of its own
# (a bytes `in` costs about 2,000 instructions: CPython tries the needle as an int first).
_PLAIN_REQUEST_LINE = re.compile(
    rb"(GET|HEAD|POST|PUT|DELETE|OPTIONS|PATCH) "
    rb"(/(?![./])(?:[!\"$&-.0->@-[\]-~]++|%(?!2[eE])|/(?![./]))*+(?:\?[!\"$-~]*+)?)"
    rb" HTTP/1\.([01])\r\n"
)
_PLAIN_STATUS_LINE = re.compile(rb"HTTP/1\.1 ([2-9][0-9][0-9]) ([\t -~]*)\r\n")
_200_OK = b"HTTP/1.1 200 OK\r\n"

_LINE_11 = b" HTTP/1.1\r\n"
_LINE_10 = b" HTTP/1.0\r\n"

# The digits that start a chunk-size line (``_Base._chunk_sizes``).
_HEX_DIGITS = re.compile(rb"[0-9A-Fa-f]*")


# Groups of QUICK_HEADERS.
_HOST, _CONNECTION, _CONTENT_LENGTH, _VALUE = range(4)


def _plain_headers(found: list[tuple[bytes, ...]], need: int) -> tuple[bytes, bool | None] | None:
    """What a quick parse reads from a head's framing headers (``QUICK_HEADERS.findall``).

    The head must hold the header of group ``need`` (Host, Content-Length) once,
    and at most one Connection that says exactly ``keep-alive`` or ``close``:
    then (that header's value, None without a Connection / True for keep-alive /
    False for close). None when it holds anything else.
    """
    if len(found) == 1:
        line = found[0]
        return (line[_VALUE].rstrip(b" \t"), None) if line[need] else None
    if len(found) != 2:
        return None
    line, other = found
    if not line[need]:
        line, other = other, line
    if not (line[need] and other[_CONNECTION]):
        return None
    token = other[_VALUE].rstrip(b" \t").lower()
    if token == b"keep-alive":
        return line[_VALUE].rstrip(b" \t"), True
    if token == b"close":
        return line[_VALUE].rstrip(b" \t"), False
    return None


class _Silent:
    """llhttp's protocol for a parser that only validates: no callbacks at all."""

    __slots__ = ()


_SILENT = _Silent()


class _Checker:
    """llhttp without callbacks, validating the messages the quick paths take whole.

    It is only ever fed one complete message at a time, synchronously, after
    which it is back at its start; one that refused a message is replaced (an
    llhttp parser stays failed), and the full path refuses that message the
    same way, with the reason.
    """

    __slots__ = ("_cls", "_feed")

    def __init__(self, cls: type) -> None:
        self._cls = cls
        self._feed = _new_parser(cls, _SILENT).feed_data

    def valid(self, data: bytes) -> bool:
        try:
            self._feed(data)
        except httptools.HttpParserError:
            self._feed = _new_parser(self._cls, _SILENT).feed_data
            return False
        return True


def _new_parser(cls: type, protocol: object) -> httptools.HttpRequestParser:
    parser = cls(protocol)
    # Keep-alive is decided by edge (request_framing / response_framing), which never
    # feeds llhttp after a message it considers the last. llhttp must go on parsing
    # after a message it considers the last (HTTP/1.0, "close" in trailers): without
    # this it refuses the next bytes, and with lenient_data_after_close it would
    # silently drop them.
    parser.set_dangerous_leniencies(lenient_keep_alive=True)
    return parser


def _cut(data: bytes, pos: int, tail: bytes) -> int:
    """End of the next piece of a chunked body: just past the next CRLF CRLF
    (``tail`` holds the up-to-3 bytes that preceded ``pos``), or the end of data."""
    if tail:
        j = (tail + data[pos : pos + 3]).find(HEAD_END)
        if j >= 0:
            return pos + j + 4 - len(tail)
    j = data.find(HEAD_END, pos)
    return len(data) if j < 0 else j + 4


def _too_large(feed: Callable[[bytes], object], data: bytes, pos: int, bad: int) -> None:
    """Refuse a chunk size above MAX_CHUNK_SIZE whose line starts at ``data[bad]``,
    once llhttp has parsed what comes before it (its events, or a defect it finds
    first: the h11 codec meets them in the same order)."""
    if bad > pos:
        feed(data[pos:bad])
    raise ProtocolError("chunk size too large")


class _Base:
    """What both parsers share: the partial head buffer, chunk pieces, error mapping.

    The parser object itself is llhttp's protocol: its ``on_*`` methods are llhttp
    callbacks, not the Handler interface.
    """

    __slots__ = (
        "_body_bytes",
        "_chunk_at",
        "_chunk_ext",
        "_chunk_size",
        "_handler",
        "_head",
        "_headers",
        "_idle",
        "_keep_alive",
        "_max",
        "_parser",
        "_partial",
        "_remaining",
        "_scanned",
        "_searched",
        "_state",
        "_tail",
        "head_started",
    )
    _parser: Any  # llhttp's parser (httptools has no types); None once closed

    def __init__(self, handler: Handler, max_header_bytes: int) -> None:
        self._handler = handler
        self._max = max_header_bytes
        self._state = _HEAD
        self._partial: bytearray | None = None
        self.head_started = (
            False  # _partial holds a head begun (a plain attribute: read per exchange)
        )
        self._llhttp_state()

    def _llhttp_state(self) -> None:
        """The fields only llhttp's path reads, set with its parser (RequestParser
        makes that on first use: a connection served by quick parses never does)."""
        self._keep_alive = True
        self._headers: list[Header] = []
        self._head = b""  # the head being parsed (complete, from its first byte)
        self._remaining = 0
        self._tail = b""
        self._idle = 0
        self._body_bytes = 0  # body bytes llhttp gave in the current chunked piece
        self._searched = 0
        self._scanned = 0

    # -- llhttp callbacks shared by both directions --------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        # llhttp strips the whitespace before a value, not after it.
        stripped = value.rstrip(b" \t")
        if stripped is not value:
            check_value_space(name, value)
        self._headers.append((name, stripped))

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        self._handler.on_body(body)

    def _trailers(self) -> None:
        """The fields llhttp gave after a chunked body: to the handler, if it takes them."""
        fields = self._headers
        self._headers = []
        on_trailers = getattr(self._handler, "on_trailers", None)
        if on_trailers is not None:
            on_trailers(fields)

    # -- helpers ---------------------------------------------------------------

    def _more_head(self, data: bytes) -> bytes | None:
        """Add ``data`` to an incomplete head; return all bytes once it is complete.

        A head that turns out invalid kills the parser (ProtocolError propagates).
        """
        buf = self._partial
        assert buf is not None
        buf += data
        if buf.find(HEAD_END, self._searched) < 0:
            self._searched = max(0, len(buf) - 3)
            try:
                self._scanned = check_partial_head(buf, 0, self._scanned, self._max)
            except ProtocolError:
                self._state = _DEAD
                raise
            return None
        self._partial = None
        self.head_started = False
        return bytes(buf)

    def _keep_partial(self, data: bytes, pos: int) -> None:
        buf = bytearray(data[pos:])
        self._scanned = check_partial_head(buf, 0, 0, self._max)
        self._searched = max(0, len(buf) - 3)
        self._partial = buf
        self.head_started = True

    def _chunk_piece(self, data: bytes, pos: int, cut: int) -> None:
        """Bookkeeping after a chunked-body piece that did not end the message."""
        self._tail = data[cut - 3 : cut] if cut - pos >= 3 else (self._tail + data[pos:cut])[-3:]
        # Chunk-size lines and trailers are not taken without bound: count the
        # framing bytes since the last piece with data in it (the h11 codec counts
        # a line or the trailer section exactly; this is within a few bytes).
        framing = cut - pos - self._body_bytes
        self._idle = framing if self._body_bytes else self._idle + framing
        if self._idle > self._max:
            raise HeadersTooLarge("chunk framing or trailers too large")

    def _chunk_start(self) -> None:
        """A chunked body starts: its first chunk-size line is next (see ``_chunk_sizes``)."""
        self._chunk_at = (
            0  # bytes before the next chunk-size line; -1: none (the last chunk's was read)
        )
        self._chunk_size = (
            -1
        )  # the value of the digits of the line in progress; -1: none in progress
        self._chunk_ext = False  # past its digits: the rest of the line is skipped

    def _chunk_sizes(self, data: bytes, pos: int, cut: int) -> int:
        """Follow the chunk-size lines in ``data[pos:cut]``, the next piece of a chunked
        body; -1, or where the line of a size above ``MAX_CHUNK_SIZE`` starts in it
        (``pos`` when it began in an earlier piece).

        A chunk-size line is hex digits, then anything up to its LF (llhttp checks
        extensions and the CRLF); the chunk's data and its CRLF follow, then the
        next line. On a body llhttp accepts this reads the sizes llhttp reads; on
        one it refuses, llhttp meets the defect before the point returned.
        """
        at = self._chunk_at
        if at < 0 or at >= cut - pos:
            if at > 0:
                self._chunk_at = at - (cut - pos)
            return -1
        q = pos + at
        size = self._chunk_size
        ext = self._chunk_ext
        start = pos
        while q < cut:
            if size < 0:
                start = q
                lf = data.find(b"\n", q, cut)
                if lf > q:
                    # Most lines: hex digits and the CR, which int() strips. Anything
                    # else int() takes (a sign, "0x", "_", spaces) llhttp refuses.
                    try:
                        size = int(data[q:lf], 16)
                    except ValueError:
                        size = -1
                    if size > 0:
                        if size > MAX_CHUNK_SIZE:
                            return start
                        q = lf + 3 + size  # its data and CRLF
                        size = -1
                        continue
                size = 0  # the line digit by digit (an extension, split, the last chunk)
                ext = False
            if not ext:
                end = _HEX_DIGITS.match(data, q, cut).end()
                if end > q:
                    size = (size << 4 * (end - q)) | int(data[q:end], 16)
                    if size > MAX_CHUNK_SIZE:
                        return start
                    q = end
                    if q == cut:
                        break
                ext = True
            lf = data.find(b"\n", q, cut)
            if lf < 0:
                q = cut
                break
            if not size:  # the last chunk: trailers follow, then the message ends
                self._chunk_at = -1
                return -1
            q = lf + 3 + size  # its data and CRLF
            size = -1
        self._chunk_at = q - cut if size < 0 else 0
        self._chunk_size = size
        self._chunk_ext = ext
        return -1

    def _fail(self, exc: httptools.HttpParserError) -> BaseException:
        """The exception to raise for an llhttp error (and the parser is dead)."""
        self._state = _DEAD
        if isinstance(exc, httptools.HttpParserCallbackError) and exc.__context__ is not None:
            return exc.__context__  # ours (ProtocolError) or the handler's own
        return ProtocolError(str(exc) or "invalid HTTP/1.1")


# The largest head Varying.learn cuts.
_VARY_MAX = 16384


class Varying:
    """Where the quick heads of a parser (or an entrypoint's) differ: field values.

    ``cut``: the last quick head cut around the values where it differed from
    the one before (``headers.volatile_lines``), the two parts' lengths, how
    many lines start between them, then what the quick path read from it; None
    when there is none. Finding those lines costs about half a quick parse, so
    they are looked for again only after ``wait`` more heads found the long
    way, a wait that doubles (up to 255) each time a cut finds no head before
    the next long way and ends when one does: traffic whose heads a cut never
    fits pays about 1/256 of a search per head.
    """

    __slots__ = ("cut", "misses", "wait")

    def __init__(self) -> None:
        self.cut: tuple | None = None
        self.misses = 0
        self.wait = 0

    def learn(self, old: bytes, new: bytes, read: tuple) -> None:
        """After a head found the long way, when not waiting (the caller counts
        ``wait`` down, so a head costs no call then): ``new``'s cut from ``old``
        (the bytes of the previous head found so), with ``read``."""
        self.misses = misses = self.misses + 1
        self.wait = (1 << min(misses, 8)) - 1
        # The search is linear in the heads' size (a few passes): only heads of the
        # usual sizes are cut, so a client's large heads cost no more than parsing.
        split = volatile_lines(old, new) if len(new) <= _VARY_MAX else None
        self.cut = (
            None
            if split is None
            else (split[0], split[1], len(split[0]), len(split[1]), split[2], *read)
        )


class Memo:
    """What the request parsers of one entrypoint share (see ``RequestParser.memo``).

    ``check``: the ``_Checker`` that validates quick heads; back at its start
    after each, so one serves every connection. ``seen``: the last quick head's header lines
    and what was read from them (see ``RequestParser.quick``): a pure function
    of those bytes, so a new connection may start from the last one's.
    ``vary``: the last quick heads' field lines cut around the values that
    changed between them, with their Host and Connection (a ``Varying``; see
    ``RequestParser.quick``).
    """

    __slots__ = ("check", "seen", "vary")

    def __init__(self) -> None:
        self.check = _Checker(httptools.HttpRequestParser)
        # (header lines, Host, Connection, cut, request, head)
        self.seen: tuple[bytes, bytes, bool | None, bytes, bytes, QuickRequestHead] | None = None
        # cut: (field lines up to the changing values, from their lines' end, their
        # lengths, lines between, Host, Connection)
        self.vary = Varying()


class RequestParser(_Base):
    """Client side of a connection: a stream of (possibly pipelined) requests.

    Per connection, only what is the connection's own is made: llhttp's parser
    for the full path waits until a head needs it (``_llhttp``), and the quick
    path's validator and remembered head come from the entrypoint's ``memo``.
    """

    __slots__ = ("_count", "_feed", "_get_method", "_many", "_memo", "_seen", "_url", "_vary")
    _feed: Any  # the llhttp parser's feed_data and get_method (None once closed)
    _get_method: Any

    def __init__(
        self,
        handler: Handler,
        max_header_bytes: int = 1 << 20,
        max_header_count: int = 100,
        memo: Memo | None = None,
    ) -> None:
        # What _Base.__init__ sets but the fields of llhttp's path, without the call
        # (one request parser per connection): _llhttp sets those.
        self._handler = handler
        self._max = max_header_bytes
        self._state = _HEAD
        self._partial = None
        self.head_started = False
        self._count = max_header_count
        self._many = MIN_LINE * max_header_count  # a head longer than this may hold too many fields
        if memo is None:
            memo = Memo()
        self._memo = memo
        self._seen = (
            memo.seen
        )  # (header lines, Host, Connection, cut, request, head) of the last quick head
        self._vary = memo.vary
        # _parser, _feed and _get_method: set by _llhttp when the full path first runs

    @staticmethod
    def memo() -> Memo:
        """What the parsers of one entrypoint share: pass it to each (``memo=``)."""
        return Memo()

    def close(self) -> None:
        """The connection is gone (see the interface): llhttp's parser, once made, refers
        back to this one (its callbacks); both let go, and of the handler."""
        self._handler = None
        self._state = _DEAD
        self._parser = self._feed = self._get_method = None

    def _llhttp(self) -> object:
        """llhttp's parser for the full path, made on first use; its feed_data."""
        self._llhttp_state()
        self._url = b""
        self._parser = _new_parser(httptools.HttpRequestParser, self)
        self._get_method = self._parser.get_method
        feed = self._feed = self._parser.feed_data
        return feed

    # -- llhttp callbacks ------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        self._url = url  # a complete head is fed at once: one call per request

    def on_headers_complete(self) -> None:
        method = self._get_method()
        url = self._url
        head = self._head
        self._head = b""  # marks the head as understood (see _run)
        # llhttp tolerates several spaces in the request line and any HTTP/x.y:
        # demand exactly "METHOD SP target SP HTTP/1.x CRLF" at its known offsets.
        i = len(method) + len(url) + 1
        line_end = head[i : i + 11]
        if line_end == _LINE_11:
            version = b"1.1"
        elif line_end == _LINE_10:
            version = b"1.0"
        else:
            raise ProtocolError("request line is not 'METHOD target HTTP/1.0|1.1'")
        if method == b"CONNECT":
            raise ProtocolError("CONNECT is not supported")
        if url[0] != 0x2F:  # not origin-form: '*' or absolute-form only
            check_target(url)
        headers = self._headers
        self._headers = []
        keep_alive, chunked, content_length, upgrade, expect_continue, through, host = (
            request_framing(version, headers)
        )
        self._keep_alive = keep_alive
        if upgrade:
            self._state = _UPGRADING
        elif chunked:
            self._state = _CHUNKED
            self._tail = b""
            self._idle = 0
            self._chunk_start()
        elif content_length:
            self._state = _BODY
            self._remaining = content_length
        self._handler.on_head(
            RequestHead(
                method,
                url,
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

    def on_message_complete(self) -> None:
        if self._state != _UPGRADING:
            self._state = _HEAD if self._keep_alive else _CLOSED
        if self._headers:
            self._trailers()
        self._handler.on_end()

    # -- interface -------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Parse ``data``; call the handler for each event. Raises ProtocolError."""
        if self._state >= _CLOSED:
            if self._state == _DEAD:
                raise ProtocolError("request parser failed earlier")
            return
        if self._partial is not None:
            complete = self._more_head(data)
            if complete is None:
                return
            data = complete
        try:
            head = self.quick(data)
            if head is not None:
                self._handler.on_head(head)
                self._handler.on_end()
                return
            self._run(data)
        except httptools.HttpParserUpgrade:
            self._state = _DEAD
            raise ProtocolError("llhttp upgraded a request edge did not") from None
        except httptools.HttpParserError as exc:
            raise self._fail(exc) from None
        except BaseException:
            self._state = _DEAD
            raise

    def quick(self, data: bytes) -> RequestHead | None:
        """The head ``data`` holds, if it is exactly one plain request; None otherwise.

        Plain: ``METHOD /target HTTP/1.x`` with a common method, one Host, no
        body, and no other header the framing rules read but one Connection of
        exactly ``keep-alive`` or ``close``. A second llhttp parser without
        callbacks validates the bytes. The head is what the full path gives for
        the same bytes (the differential tests feed both), and the parser is left
        as the full path leaves it after that message; no handler is called.
        Otherwise nothing changes and ``data`` is for :meth:`feed`.

        A keep-alive client often repeats its header lines request after request
        (API clients, health checks, a browser fetching assets): when they are the
        bytes of the last quick head's, only the request line is new, and the
        strict pattern it must match is all it needs. When the whole request is
        the last quick head's bytes, it is that head (heads are never written
        after they are built, and a quick head is a pure function of its bytes).
        When two quick heads in a row differ in field values only (a request id,
        trace headers, a counter), a later head that has the second's lines
        around those has its framing (``headers.volatile_lines``) when what lies
        between is field lines llhttp accepts, none a framing header
        (``FIELD_LINES``): that is all it is checked for.
        """
        if self._state != _HEAD or self._partial is not None:
            return None
        n = len(data)
        if n > self._max:
            return None
        seen = self._seen
        if seen is None:
            pass
        elif data == seen[4]:
            # The very request of the last quick head (a client repeating itself,
            # or the next connection of the same client): the same head.
            head = seen[5]
            if not head.keep_alive:
                self._state = _CLOSED
            return head
        elif data.endswith(seen[0]):
            line = _PLAIN_REQUEST_LINE.match(data)
            if line is not None and line.end() - 2 == n - len(seen[0]):
                _, host, connection, cut, _, _ = seen
                method, target, minor = line.groups()
                keep_alive = minor == b"1" if connection is None else connection
                if not keep_alive:
                    self._state = _CLOSED
                if cut:
                    cut = data[: line.end() - 2] + cut
                return QuickRequestHead(
                    method,
                    target,
                    b"1.1" if minor == b"1" else b"1.0",
                    keep_alive,
                    data,
                    host,
                    cut or data,
                )
        line = _PLAIN_REQUEST_LINE.match(data)
        if line is None:
            return None
        line_end = line.end() - 2
        varying = self._vary
        vary = varying.cut
        cut = b""  # the header lines without the Connection line, when it says close
        if (
            vary is not None
            and data.startswith(vary[0], line_end)
            and data.endswith(vary[1])
            and FIELD_LINES[vary[4]].fullmatch(data, line_end + vary[2], n - vary[3]) is not None
        ):
            # The lines of the last varied head but for what lies between the two
            # parts, values and lines llhttp accepts that no framing rule reads
            # (none when the parts overlap): a head as valid as that one and as
            # many fields, complete (its first CRLF CRLF ends it).
            host = vary[5]
            connection = vary[6]
        else:
            vary = None
            if data.find(HEAD_END) != n - 4:
                return None
            if n > self._many and data.count(b"\r\n") - 2 > self._count:
                return None  # too many fields: the full path refuses it
            plain = _plain_headers(QUICK_HEADERS.findall(data), _HOST)
            if plain is None:
                return None
            host, connection = plain
            if connection is False:
                span = connection_line(data, len(data))
                if span is None:
                    return None
                cut = data[line_end : span[0]] + data[span[1] :]
        memo = self._memo
        if vary is None and not memo.check.valid(data):
            return None
        method, target, minor = line.groups()
        keep_alive = minor == b"1" if connection is None else connection
        if not keep_alive:
            self._state = _CLOSED
        head = QuickRequestHead(
            method,
            target,
            b"1.1" if minor == b"1" else b"1.0",
            keep_alive,
            data,
            host,
            data[:line_end] + cut if cut else data,
        )
        lines = data[line_end:]
        if vary is not None:
            # Remembered as any quick head is: the same request again is this head.
            if varying.misses:
                varying.misses = varying.wait = 0
        elif seen is not None and connection is not False:
            if varying.wait:
                varying.wait -= 1
                varying.cut = None
            else:
                varying.learn(seen[0], lines, (host, connection))
        self._seen = memo.seen = (lines, host, connection, cut, data, head)
        return head

    def _run(self, data: bytes) -> None:
        try:
            feed = self._feed
        except AttributeError:
            feed = self._llhttp()
        max_bytes = self._max
        n = len(data)
        pos = 0
        view: memoryview | None = None
        while pos < n:
            state = self._state
            if state == _HEAD:
                c = data[pos]
                if c == 13 or c == 10:
                    pos = skip_empty_lines(data, pos)
                    if pos == n:
                        return
                end = data.find(HEAD_END, pos)
                if end < 0:
                    self._keep_partial(data, pos)
                    return
                end += 4
                if end - pos > max_bytes:
                    check_oversize_head(data, pos, pos, max_bytes)
                check_header_count(data, pos, end, self._count)
                head = data if pos == 0 and end == n else data[pos:end]
                self._head = head
                try:
                    feed(head)
                except httptools.HttpParserUpgrade:
                    if self._state != _UPGRADING:
                        if self._head or self._state not in (_HEAD, _CLOSED):
                            raise
                        # An upgrade edge ignores (h2c: headers.request_framing): llhttp
                        # ended the message, which has no body (an upgrade request
                        # with one is refused), and stopped; a new llhttp goes on.
                        feed = self._llhttp()
                if self._head:
                    # llhttp took a whole head without completing it: it waits for
                    # the rest of an HTTP/2 preface after "PRI ... HTTP/x.y".
                    raise ProtocolError("request head not understood")
                if self._state == _UPGRADING:
                    self._state = _UPGRADED
                    self._handler.on_upgrade(data[end:])
                    return
                pos = end
            elif state == _BODY:
                take = self._remaining
                if take > n - pos:
                    take = n - pos
                self._remaining -= take
                if take == n:
                    feed(data)
                else:
                    if view is None:
                        view = memoryview(data)
                    feed(view[pos : pos + take])
                pos += take
            elif state == _CHUNKED:
                cut = _cut(data, pos, self._tail)
                self._body_bytes = 0
                bad = self._chunk_sizes(data, pos, cut)
                if bad >= 0:
                    _too_large(feed, data, pos, bad)
                if pos == 0 and cut == n:
                    feed(data)
                else:
                    if view is None:
                        view = memoryview(data)
                    feed(view[pos:cut])
                if self._state == _CHUNKED:
                    self._chunk_piece(data, pos, cut)
                pos = cut
            else:  # closed: the rest is ignored
                return


class ResponseParser(_Base):
    """Upstream side: one response per request sent, in order (see the interface)."""

    __slots__ = (
        "_check",
        "_complete",
        "_feeding",
        "_interim",
        "_method",
        "_no_body",
        "_pending",
        "_reason",
        "_seen",
        "_started",
        "_vary",
    )

    def __init__(self, handler: Handler, max_header_bytes: int = 1 << 20) -> None:
        super().__init__(handler, max_header_bytes)
        self._method: bytes | None = None
        self._reason = b""
        self._pending = b""  # bytes that arrived with no response expected
        self._feeding = False
        self._started = False  # bytes of the expected response (or its 1xx) were read
        self._complete = False  # llhttp ended the message it was given
        self._interim = False
        self._no_body = False
        self._parser = _new_parser(httptools.HttpResponseParser, self)
        self._check = _Checker(httptools.HttpResponseParser)
        self._seen: QuickResponseHead | None = None  # the last quick head (see quick)
        # cut: (head up to the changing values, head from their lines' end, their
        # lengths, lines between, status, reason, Content-Length)
        self._vary = Varying()

    # -- llhttp callbacks ------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self._reason = reason

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        head = self._head
        self._head = b""  # marks the head as understood (see _run)
        if head.startswith(b"HTTP/1.1 "):
            version = b"1.1"
        elif head.startswith(b"HTTP/1.0 "):
            version = b"1.0"
        else:
            raise ProtocolError("status line is not HTTP/1.0 or HTTP/1.1")
        if status < 100:
            raise ProtocolError("invalid status code")
        reason = self._reason
        self._reason = b""
        check_reason(reason)
        headers = self._headers
        self._headers = []
        method = self._method or b"GET"
        keep_alive, chunked, content_length, has_body, through = response_framing(
            status, version, headers, method
        )
        if status < 200 and status != 101:
            self._interim = True  # 100 Continue, 103 Early Hints: no message of their own
            on_interim = getattr(self._handler, "on_interim", None)
            if on_interim is not None:
                on_interim(
                    ResponseHead(
                        status, reason, version, headers, keep_alive, False, None, False, head
                    )
                )
            return
        self._keep_alive = keep_alive
        if status == 101:
            self._state = _UPGRADING
        elif not has_body:
            self._no_body = True
        elif chunked:
            self._state = _CHUNKED
            self._tail = b""
            self._idle = 0
            self._chunk_start()
        elif content_length is not None:
            if content_length:
                self._state = _BODY
                self._remaining = content_length
        else:
            self._state = _EOF_BODY
        self._handler.on_head(
            ResponseHead(
                status,
                reason,
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

    def on_message_complete(self) -> None:
        self._complete = True
        if self._interim:
            self._interim = False
            return
        self._end()

    def _end(self) -> None:
        if self._headers:
            self._trailers()
        if self._state != _UPGRADING:
            self._state = _HEAD if self._keep_alive else _CLOSED
        self._method = None
        self._started = False
        self._no_body = False
        self._handler.on_end()

    # -- interface -------------------------------------------------------------

    def expect(self, method: bytes) -> None:
        """The next response answers a ``method`` request (bytes kept so far are parsed)."""
        self._method = method
        if self._pending and not self._feeding and self._state == _HEAD:
            data = self._pending
            self._pending = b""
            self.feed(data)

    def feed(self, data: bytes) -> None:
        state = self._state
        if state >= _CLOSED:
            if state == _DEAD:
                raise ProtocolError("response parser failed earlier")
            return
        if state == _HEAD and self._method is None:
            self._pending += data
            return
        if self._partial is not None:
            complete = self._more_head(data)
            if complete is None:
                return
            data = complete
        self._feeding = True
        try:
            head = self.quick(data)
            if head is not None:
                handler = self._handler
                handler.on_head(head)
                if head.content_length:
                    handler.on_body(data[len(head.raw) :])
                handler.on_end()
                return
            self._run(data)
        except httptools.HttpParserError as exc:
            raise self._fail(exc) from None
        except BaseException:
            self._state = _DEAD
            raise
        finally:
            self._feeding = False

    @property
    def held(self) -> bytes | bytearray:
        """Bytes kept after the last complete response: for a response not asked for
        yet, or the start of one's head (see the interface)."""
        return self._pending or self._partial or b""

    def close(self) -> None:
        """No response comes any more (see the interface): llhttp's parser refers back to
        this one (its callbacks); both let go, and of the handler. No call follows."""
        self._handler = None
        self._state = _DEAD
        self._parser = None

    def feed_eof(self) -> None:
        """The upstream closed: end a body delimited by close, or refuse a cut message."""
        state = self._state
        if state == _EOF_BODY:
            self._end()
        elif state in (_BODY, _CHUNKED) or (
            state == _HEAD and (self._started or self._partial is not None)
        ):
            self._state = _DEAD
            raise ProtocolError("upstream closed the connection in the middle of a response")

    def quick(self, data: bytes) -> ResponseHead | None:
        """The head of the response ``data`` holds, if it is exactly one plain response.

        Plain: ``HTTP/1.1`` with a status of 200 or more that has a body (not 204,
        304, nor an answer to HEAD), a reason of printable ASCII, one
        Content-Length that ``data`` holds exactly (the body is
        ``data[len(head.raw):]``), and no other header the framing rules read but
        one Connection of exactly ``keep-alive`` or ``close``. Validated by a
        second llhttp parser without callbacks, as requests are (see
        RequestParser.quick); the message is then complete: the next response
        needs an ``expect()``. No handler is called. None: nothing changed.

        A keep-alive response that differs from the quick response before it in
        field values (a request id, an ETag, a Date) leaves that head cut around
        them (``headers.volatile_lines``): a later response made of the two parts
        with field lines between that llhttp accepts and no framing rule reads
        (``FIELD_LINES``), and the same body length, has that head's framing and
        is valid.
        """
        method = self._method
        if method is None or method == b"HEAD" or self._state != _HEAD or self._partial is not None:
            return None
        seen = self._seen
        if (
            seen is not None
            and data.startswith(seen.raw)
            and len(data) - len(seen.raw) == seen.content_length
        ):
            # The head of the last quick response again (a server repeats its
            # heads byte for byte within the second of its Date): the same head.
            if not seen.keep_alive:
                self._state = _CLOSED
            self._method = None
            self._started = False
            return seen
        varying = self._vary
        vary = varying.cut
        if (
            vary is not None
            and data.startswith(vary[0])
            and (end := data.find(vary[1], vary[2])) >= 0
            and FIELD_LINES[vary[4]].fullmatch(data, vary[2], end) is not None
        ):
            # The head of the last varied response but for what lies between the
            # two parts, lines llhttp accepts that no framing rule reads: a head as
            # valid as that one (its first CRLF CRLF ends the second part); the
            # body is counted.
            end += vary[3] - 4
            size = len(data) - end - 4
            if size != vary[7] or end + 4 > self._max:
                return None
            status = vary[5]
            reason = vary[6]
            keep_alive = True
            i = j = end
        else:
            vary = None
            if data.startswith(_200_OK):
                status, reason = 200, b"OK"
            else:
                line = _PLAIN_STATUS_LINE.match(data)
                if line is None:
                    return None
                status, reason = line.groups()
                status = int(status)
                if status == 204 or status == 304:
                    return None
            end = data.find(HEAD_END)
            if end < 0 or end + 4 > self._max:
                return None
            plain = _plain_headers(QUICK_HEADERS.findall(data, 0, end), _CONTENT_LENGTH)
            if plain is None:
                return None
            length, connection = plain
            keep_alive = connection is not False
            i = j = end
            if not keep_alive:
                span = connection_line(data, end)
                if span is None:
                    return None
                i, j = span
            size = len(data) - end - 4
            if not length.isdigit() or len(length) > 18 or size != int(length):
                return None
        if vary is None and not self._check.valid(data):
            return None
        if not keep_alive:
            self._state = _CLOSED  # else _HEAD, as it is
        self._method = None
        self._started = False
        self._no_body = False
        raw = data[: end + 4]
        head = QuickResponseHead(
            status,
            reason,
            keep_alive,
            size,
            raw,
            raw if i == j else data[:i] + data[j : end + 4],
        )
        self._seen = head  # a varied head too: the same response again is this head
        if vary is not None:
            if varying.misses:
                varying.misses = varying.wait = 0
        elif seen is not None and keep_alive:
            if varying.wait:
                varying.wait -= 1
                varying.cut = None
            else:
                varying.learn(seen.raw, raw, (status, reason, size))
        return head

    def _run(self, data: bytes) -> None:
        n = len(data)
        pos = 0
        view: memoryview | None = None
        while pos < n:
            state = self._state
            if state == _HEAD:
                if self._method is None:
                    self._pending = data[pos:]  # kept for the next expect()
                    return
                c = data[pos]
                if c == 13 or c == 10:
                    pos = skip_empty_lines(data, pos)
                    if pos == n:
                        return
                self._started = True
                end = data.find(HEAD_END, pos)
                if end < 0:
                    self._keep_partial(data, pos)
                    return
                end += 4
                if end - pos > self._max:
                    check_oversize_head(data, pos, pos, self._max)
                head = data if pos == 0 and end == n else data[pos:end]
                self._head = head
                self._complete = False
                try:
                    self._parser.feed_data(head)
                except (httptools.HttpParserUpgrade, httptools.HttpParserError) as exc:
                    # After a 101 llhttp stops with an "upgrade" error of one kind or
                    # the other, depending on the Connection and Upgrade headers.
                    if self._state != _UPGRADING or isinstance(
                        exc, httptools.HttpParserCallbackError
                    ):
                        raise
                if self._head:
                    raise ProtocolError("response head not understood")
                if self._state == _UPGRADING:
                    if not self._complete:
                        self._end()
                    self._state = _UPGRADED
                    self._handler.on_upgrade(data[end:])
                    return
                if not self._complete and (self._no_body or self._interim):
                    # A response to HEAD (llhttp cannot be told) or a 1xx other than
                    # 100-103 (llhttp reads a body for those): llhttp waits for the
                    # body the headers announce. End the message and start afresh.
                    self._parser = _new_parser(httptools.HttpResponseParser, self)
                    if self._interim:
                        self._interim = False
                    else:
                        self._end()
                pos = end
            elif state == _BODY:
                take = self._remaining
                if take > n - pos:
                    take = n - pos
                self._remaining -= take
                if take == n:
                    self._parser.feed_data(data)
                else:
                    if view is None:
                        view = memoryview(data)
                    self._parser.feed_data(view[pos : pos + take])
                pos += take
            elif state == _CHUNKED:
                cut = _cut(data, pos, self._tail)
                self._body_bytes = 0
                bad = self._chunk_sizes(data, pos, cut)
                if bad >= 0:
                    _too_large(self._parser.feed_data, data, pos, bad)
                if view is None:
                    view = memoryview(data)
                self._parser.feed_data(view[pos:cut])
                if self._state == _CHUNKED:
                    self._chunk_piece(data, pos, cut)
                pos = cut
            elif state == _EOF_BODY:
                if view is None:
                    view = memoryview(data)
                self._parser.feed_data(view[pos:] if pos else data)
                return
            else:
                return
