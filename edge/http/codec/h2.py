"""HTTP/2's sans-IO side: the h2 state machine as edge sets it up, the translation
between HTTP/2 header lists and edge's heads, and the per-second allowances that
tell a flood from a client.

No socket, no loop (the server side is :mod:`edge.http.server.h2`). The framing,
HPACK and the stream and flow-control state machines are python-hyper's ``h2``
(RFC 9113 and RFC 7541, fuzzed and used by hyper, httpx and Twisted); this module
decides what edge accepts of what it decodes.

Invariants:
- A :class:`~edge.http.codec.base.RequestHead` made here can be written as an
  HTTP/1.1 request without changing its meaning: its method is a token, its
  target an origin-form path (or ``*``) of visible ASCII, no field is
  connection-specific, and every value is free of control bytes but HTAB;
  anything else is a :class:`~edge.errors.ProtocolError` naming the field.
- What RFC 9113 8.2 and 8.3 call malformed is checked here, not by h2 (whose
  checks end the whole connection): a malformed request or trailer section is
  a stream error, so the caller resets that stream alone (RST_STREAM
  PROTOCOL_ERROR, as Go's server does for Traefik) and the connection's other
  streams go on.
- A header list made from a response head holds no connection-specific field
  (RFC 9113 8.2.2) and only lowercase names.
"""

from __future__ import annotations

import logging
import re
from collections import deque

import h2.config
import h2.connection
import h2.settings
import hpack
from hpack.table import HeaderTable

from edge.errors import ProtocolError
from edge.http.codec.base import Header, RequestHead, ResponseHead

# hpack logs every header it codes at DEBUG: lines per request under edge's DEBUG.
logging.getLogger("hpack").setLevel(logging.INFO)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # the client connection preface (RFC 9113 3.4)

STREAM_WINDOW = 65535  # a stream's receive window: h2's (and RFC 9113's) initial one
# Streams h2's state machine lets a client open beyond the advertised limit, which the
# server refuses one by one (server_connection).
STREAMS_OVER = 16
LARGEST_WINDOW = (1 << 31) - 1

# Never sent in HTTP/2 (RFC 9113 8.2.2); the HTTP/1.1 writers drop the rest of the
# hop-by-hop fields already.
CONNECTION_SPECIFIC = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade")
)

# A field name as HTTP/2 carries it: a token in lower case (RFC 9113 8.2.1).
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")
# What no field value may hold: control bytes but HTAB (NUL, CR and LF are RFC 9113
# 8.2.1's; the rest would be refused on HTTP/1.1, as Go's server refuses them), or
# whitespace at either end.
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]|\A[ \t]|[ \t]\Z")
_REQUEST_PSEUDO = frozenset((b":method", b":scheme", b":authority", b":path"))

_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class CountedTable(HeaderTable):
    """An HPACK dynamic table that counts its changes (``generation``): a header
    block coded against one generation codes the same against it again."""

    def __init__(self) -> None:
        super().__init__()
        self.generation = 0

    def add(self, name: bytes, value: bytes) -> None:
        self.generation += 1
        super().add(name, value)

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, newmax: int) -> None:
        self.generation += 1
        HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]


class RememberingEncoder(hpack.Encoder):
    """An HPACK encoder that gives the last block again for the same header list,
    when coding it changed nothing in the table and nothing changed it since: a
    response whose fields are all in the table (the same server's same answer,
    each field indexed) costs a list comparison, not its coding."""

    def __init__(self) -> None:
        super().__init__()
        self.header_table = CountedTable()
        self.last: list[Header] | None = None
        self.last_block = b""
        self.last_generation = -1

    def encode(self, headers, huffman: bool = True) -> bytes:  # type: ignore[no-untyped-def]
        table = self.header_table
        if (
            headers == self.last
            and huffman
            and table.generation == self.last_generation
            and not table.resized
        ):
            return self.last_block
        generation = table.generation
        block = super().encode(headers, huffman)
        if huffman and table.generation == generation and isinstance(headers, list):
            self.last = list(headers)
            self.last_block = block
            self.last_generation = generation
        else:
            self.last = None
        return block


class RememberingDecoder(hpack.Decoder):
    """An HPACK decoder that gives the last header list again for the same block,
    when decoding it changed nothing in the table and nothing changed it since: a
    client's request made of indexed fields (a browser's, h2load's: the same
    fields again) costs a bytes comparison, not its decoding. The list's size is
    checked against ``max_header_list_size`` each time, as decoding checks it."""

    def __init__(self) -> None:
        super().__init__()
        self.header_table = CountedTable()
        self.last = b""
        self.last_headers: list[tuple[bytes, bytes]] = []
        self.last_size = 0
        self.last_generation = -1

    def decode(self, data: bytes, raw: bool = False) -> list[tuple[bytes, bytes]]:  # type: ignore[override]
        table = self.header_table
        if (
            raw
            and data == self.last
            and table.generation == self.last_generation
            and self.last_size <= self.max_header_list_size
        ):
            self._assert_valid_table_size()
            return list(self.last_headers)
        generation = table.generation
        headers = super().decode(data, raw)
        if raw and table.generation == generation:
            self.last = bytes(data)
            self.last_headers = list(headers)  # type: ignore[arg-type]
            self.last_size = sum(32 + len(n) + len(v) for n, v in self.last_headers)
            self.last_generation = generation
        else:
            self.last = b""
        return headers  # type: ignore[return-value]


def remembering_hpack(conn: h2.connection.H2Connection) -> None:
    """``conn`` (new, nothing coded yet) codes header blocks with :class:`RememberingEncoder`
    and :class:`RememberingDecoder`: a block the same as the last, against the same table,
    is not coded again."""
    limit = conn.decoder.max_header_list_size
    conn.encoder = RememberingEncoder()
    conn.decoder = RememberingDecoder()
    conn.decoder.max_header_list_size = limit


def server_connection(
    *,
    max_concurrent_streams: int,
    decoder_table_size: int,
    max_header_list_size: int,
) -> h2.connection.H2Connection:
    """The server side of one HTTP/2 connection with edge's settings, its SETTINGS
    and a connection window of ``max_concurrent_streams`` stream windows queued
    (:meth:`~h2.connection.H2Connection.data_to_send`).

    The header list bound holds from the first frame (h2 applies the advertised one
    only once the client acknowledges it, keeping 64 KiB until then); the decoder's
    table follows the client's acknowledgement, as HPACK requires. h2 answers a stream
    past MAX_CONCURRENT_STREAMS with a connection error; RFC 9113 5.1.2 allows a
    stream error (REFUSED_STREAM, which a client may retry), which is what Go's
    server sends: so the state machine takes :data:`STREAMS_OVER` more than
    advertised, and the caller refuses each stream past the advertised count.
    """
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(
            client_side=False,
            header_encoding=None,
            # Checked by request_head and trailers: a malformed stream is reset alone.
            validate_inbound_headers=False,
            normalize_inbound_headers=False,  # cookie fields: joined by request_head
            # What edge sends is made by response_headers() below: lowercase, no
            # connection-specific field, values the HTTP/1.1 codecs checked.
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
    )
    remembering_hpack(conn)
    codes = h2.settings.SettingCodes
    values = {
        codes.MAX_CONCURRENT_STREAMS: max_concurrent_streams,
        codes.HEADER_TABLE_SIZE: decoder_table_size,
        codes.MAX_HEADER_LIST_SIZE: max_header_list_size,
    }
    conn.local_settings = h2.settings.Settings(client=False, initial_values=values)
    conn.decoder.max_header_list_size = max_header_list_size
    conn.initiate_connection()  # SETTINGS with the values above
    values[codes.MAX_CONCURRENT_STREAMS] = max_concurrent_streams + STREAMS_OVER
    conn.local_settings = h2.settings.Settings(client=False, initial_values=values)
    extra = min(max_concurrent_streams * STREAM_WINDOW, LARGEST_WINDOW) - STREAM_WINDOW
    if extra > 0:
        conn.increment_flow_control_window(extra)
    return conn


def _check_field(name: bytes, value: bytes) -> None:
    """Refuse a regular field RFC 9113 8.2 calls malformed (or edge cannot forward)."""
    if _FIELD_NAME.fullmatch(name) is None:
        raise ProtocolError(f"invalid field name {name!r}")
    if _BAD_VALUE.search(value) is not None:
        raise ProtocolError(f"invalid value of {name.decode('latin-1')}")
    if name in CONNECTION_SPECIFIC or (name == b"te" and value.lower() != b"trailers"):
        raise ProtocolError(f"connection-specific field {name.decode('latin-1')}")


def request_head(headers: list[Header], end_stream: bool) -> RequestHead:
    """The head of a request that arrived as HTTP/2 ``headers``; ``end_stream``: the
    request has no body.

    The head is what an HTTP/1.1 client would have sent (module invariant), with
    version ``2.0``: the authority (``:authority``, else ``host``) as ``host``,
    the fields but ``host`` in order (the cookie fields joined into one, last, as
    RFC 9113 8.2.3 has it), chunked when a body comes without
    ``content-length``. Raises ProtocolError for a request RFC 9113 8.2 and 8.3 call
    malformed (pseudo-header fields unknown, repeated, after a regular one or
    missing; a name not in lower case; a connection-specific field; ``te`` but
    ``trailers``; a value with a control byte or surrounding whitespace; two
    Hosts, or one that is not the ``:authority``), or one edge does not forward.
    """
    method = path = authority = host = scheme = None
    length: int | None = None
    expect = False
    fields: list[Header] = []
    cookies: list[bytes] | None = None
    for name, value in headers:
        if name[:1] == b":":
            if fields or host is not None:
                raise ProtocolError(f"pseudo-header field {name!r} after a regular one")
            if _BAD_VALUE.search(value) is not None:
                raise ProtocolError(f"invalid value of {name.decode('latin-1')}")
            if name == b":method" and method is None:
                method = value
            elif name == b":path" and path is None:
                path = value
            elif name == b":authority" and authority is None:
                authority = value
            elif name == b":scheme" and scheme is None:
                scheme = value  # the entrypoint's goes upstream, as for HTTP/1.1
            elif name == b":protocol":
                raise ProtocolError(f"extended CONNECT (:protocol {value!r}) is not served")
            elif name in _REQUEST_PSEUDO:
                raise ProtocolError(f"pseudo-header field {name!r} repeated")
            else:
                raise ProtocolError(f"pseudo-header field {name!r} in a request")
            continue
        _check_field(name, value)
        if name == b"host":
            if host is not None:
                raise ProtocolError("two host fields")
            host = value
            continue
        if name == b"content-length":
            if not value.isdigit() or (length is not None and int(value) != length):
                raise ProtocolError(f"invalid content-length {value!r}")
            length = int(value)
        elif name == b"expect":
            expect = value.lower() == b"100-continue"
        elif name == b"cookie":
            if cookies is None:
                cookies = []
            cookies.append(value)
            continue
        fields.append((name, value))
    if cookies is not None:  # one field, last (RFC 9113 8.2.3)
        fields.append((b"cookie", b"; ".join(cookies)))
    if method == b"CONNECT":
        raise ProtocolError("CONNECT is not served")
    if method is None or path is None or scheme is None:
        raise ProtocolError("request without :method, :scheme or :path")
    if not _is_token(method):
        raise ProtocolError(f"invalid :method {method!r}")
    if not _is_target(path):
        raise ProtocolError(f"invalid :path {path!r}")
    if authority is None:
        authority = host
    elif host is not None and host != authority:
        raise ProtocolError("host is not the :authority")
    if not authority:
        raise ProtocolError("request without :authority or host")
    body = not end_stream
    return RequestHead(
        method,
        path,
        b"2.0",
        fields,
        True,
        body and length is None,
        length if body or length else None,
        False,
        expect and body,
        host=authority,
    )


class RequestHeads:
    """A connection's request heads: :func:`request_head` of a header list, or the
    last head again when the list and ``end_stream`` are the last's (a client
    asking the same again; heads are never written once built, so streams share
    one). A refused list is not kept."""

    __slots__ = ("end_stream", "fields", "head")

    def __init__(self) -> None:
        self.fields: list[Header] | None = None
        self.end_stream = False
        self.head: RequestHead | None = None

    def head_of(self, headers: list[Header], end_stream: bool) -> RequestHead:
        head = self.head
        if head is not None and end_stream is self.end_stream and headers == self.fields:
            return head
        head = request_head(headers, end_stream)
        self.fields = headers
        self.end_stream = end_stream
        self.head = head
        return head


def next_data(
    machine: h2.connection.H2Connection, stream_id: int, pending: deque[bytes]
) -> bytes | None:
    """The next DATA frame's worth of ``pending`` (the stream's queued body, in order)
    that its send window allows, taken off ``pending``; None when the window is shut.
    ``pending`` must not be empty."""
    window = machine.local_flow_control_window(stream_id)
    if window <= 0:
        return None
    size = min(window, machine.max_outbound_frame_size)
    data = pending[0]
    if len(data) > size:
        pending[0] = data[size:]
        return data[:size]
    pending.popleft()
    return data


def trailers(headers: list[Header]) -> list[Header]:
    """A request's trailer section as HTTP/2 carried it, checked as ``request_head``
    checks regular fields; a pseudo-header field in it is malformed too."""
    for name, value in headers:
        if name[:1] == b":":
            raise ProtocolError(f"pseudo-header field {name!r} in trailers")
        _check_field(name, value)
    return headers


def _is_token(value: bytes) -> bool:
    return bool(value) and all(c in _TOKEN for c in value)


def _is_target(path: bytes) -> bool:
    """An origin-form target (or ``*``) of visible ASCII, as an HTTP/1.1 request line holds it."""
    if path == b"*":
        return True
    if path[:1] != b"/":
        return False
    return all(0x21 <= c <= 0x7E for c in path)


def response_headers(head: ResponseHead) -> list[Header]:
    """The HTTP/2 header list of a response head as edge wrote it for HTTP/1.1."""
    out: list[Header] = [(b":status", b"%d" % head.status)]
    for name, value in head.headers:
        lname = name.lower()
        if lname not in CONNECTION_SPECIFIC:
            out.append((lname, value))
    return out


class ResponseLists:
    """A connection's response header lists: :func:`response_headers` of a head, or
    the last list again for a head read from the same bytes (the same answer again,
    within the second of its Date). A list given out is never written: h2 codes
    from it."""

    __slots__ = ("fields", "raw")

    def __init__(self) -> None:
        self.raw = b""
        self.fields: list[Header] = []

    def of(self, head: ResponseHead) -> list[Header]:
        raw = head.raw
        if raw and raw == self.raw:
            return self.fields
        fields = response_headers(head)
        self.raw = raw
        self.fields = fields
        return fields


class Allowance:
    """How many of one kind of event a connection may cause per second.

    A client needs a few SETTINGS, PING and PRIORITY frames per connection, and
    resets a stream now and then; a flood sends thousands per second (rapid reset,
    CVE-2023-44487; SETTINGS and PING floods, CVE-2019-9515 and -9512), each one
    work for edge and a frame it must answer. :meth:`spend` counts one at ``now``
    (loop time) and says whether the allowance still holds.
    """

    __slots__ = ("count", "limit", "start")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.start = 0.0

    def spend(self, now: float) -> bool:
        if now - self.start >= 1.0:
            self.start = now
            self.count = 0
        self.count += 1
        return self.count <= self.limit
