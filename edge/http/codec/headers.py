"""Pure checks shared by the two HTTP/1.1 codecs: head framing, head scans, message framing.

This module owns the rules that must not depend on which parser runs, so that
``codec.httptools`` (llhttp) and ``codec.h11`` accept and refuse exactly the same
bytes. Both codecs find a head themselves (it ends at the first CRLF CRLF after any
empty lines) and hand a parser only complete heads no longer than
``max_header_bytes``.

Invariant, for any input split any way: a head is refused with 400 when
:func:`scan_head` finds a bare LF, a bare CR, obs-fold or a control byte within its
first ``max_header_bytes`` bytes; otherwise with 431 when it is longer than
``max_header_bytes`` (found while still incomplete if need be), or, for a
request, when it holds more than ``max_header_count`` field lines
(:func:`check_header_count`); otherwise it is parsed, and the framing rules
below (:func:`request_framing`, :func:`response_framing`) decide what follows it.

Where llhttp is more lenient than the rules (absolute-form targets, status
reasons) or h11 is (methods, chunk extensions, trailers), the checks here close
the gap; the values chosen mirror llhttp 9 as bundled with httptools 0.9, but
for chunk sizes, which stop at 2**63 - 1 as nginx's do (``MAX_CHUNK_SIZE``).
"""

from __future__ import annotations

import re

from edge.errors import HeadersTooLarge, ProtocolError

Header = tuple[bytes, bytes]

HEAD_END = b"\r\n\r\n"

# Every request method llhttp (HTTP mode) accepts; CONNECT is refused separately.
METHODS = frozenset(
    b"DELETE GET HEAD POST PUT CONNECT OPTIONS TRACE COPY LOCK MKCOL MOVE PROPFIND "
    b"PROPPATCH SEARCH UNLOCK BIND REBIND UNBIND ACL REPORT MKACTIVITY CHECKOUT MERGE "
    b"M-SEARCH NOTIFY SUBSCRIBE UNSUBSCRIBE PATCH PURGE MKCALENDAR LINK UNLINK SOURCE "
    b"QUERY".split()
)

# The largest Content-Length accepted (both codecs check it), and the largest chunk
# size: the same, as nginx refuses a chunk above 2**63 - 1 (llhttp takes up to
# 2**64 - 1: the httptools codec checks the sizes above it itself).
MAX_LENGTH = (1 << 63) - 1
MAX_CHUNK_SIZE = MAX_LENGTH

# Control bytes refused anywhere in a head (HTAB, CR and LF are checked apart).
_CTL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# Header names the framing rules read, lowercased, mapped to a small tag.
_CONTENT_LENGTH = 1
_TRANSFER_ENCODING = 2
_HOST = 3
_CONNECTION = 4
_UPGRADE = 5
_EXPECT = 6
_HOP = 7  # other hop-by-hop or edge-owned headers: a head holding one is rebuilt
_PROXY_CONNECTION = 8
# The one table of header names edge treats specially. Hop-by-hop names (RFC 9110
# 7.6.1, with the framing headers, which edge writes itself, and Expect, which it
# answers) are never forwarded as they are; the forwarding names are edge's own.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"expect",
    }
)
FORWARDED = frozenset(
    {
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"x-forwarded-prefix",
        b"x-real-ip",
    }
)


def _spellings(name: bytes) -> list[bytes]:
    """``name`` with each ``-`` also spelt ``_``: one header to CGI, WSGI and PHP,
    which map both to ``HTTP_X_FORWARDED_FOR``."""
    first, sep, rest = name.partition(b"-")
    if not sep:
        return [name]
    return [first + s + tail for s in (b"-", b"_") for tail in _spellings(rest)]


# The other X- headers a Traefik-style proxy manages (its forwardedheaders
# middleware): an untrusted client's are dropped as FORWARDED's are, in any
# spelling with underscores; a trusted client's go on as they came. Edge writes
# none of them, so a backend trusting them (a client certificate, the original
# URI or method) must not get a client's own.
FORWARDED_KEPT = (
    frozenset(
        spelling
        for name in (
            *FORWARDED,
            b"x-forwarded-server",
            b"x-forwarded-uri",
            b"x-forwarded-method",
            b"x-forwarded-scheme",
            b"x-forwarded-tls-client-cert",
            b"x-forwarded-tls-client-cert-info",
            b"x-scheme",
        )
        for spelling in _spellings(name)
    )
    - FORWARDED
)
# RFC 7239's Forwarded (for=, by=, host=, proto=): edge writes none, and a backend
# reading one must not get a client's own, so it goes as X-Forwarded-* do: dropped
# from an untrusted client, kept as it came from a trusted one. (Traefik's proxy
# copies every client's as it came; its forwardedheaders middleware leaves it.)
RFC_FORWARDED = b"forwarded"
_FRAMING_NAMES = dict.fromkeys(HOP_BY_HOP | FORWARDED | FORWARDED_KEPT | {RFC_FORWARDED}, _HOP) | {
    b"content-length": _CONTENT_LENGTH,
    b"transfer-encoding": _TRANSFER_ENCODING,
    b"host": _HOST,
    b"connection": _CONNECTION,
    # llhttp reads Proxy-Connection exactly like Connection (close, keep-alive and
    # upgrade): follow it so that both codecs agree on keep-alive and upgrade.
    b"proxy-connection": _PROXY_CONNECTION,
    b"upgrade": _UPGRADE,
    b"expect": _EXPECT,
}


# Any header line whose name the framing rules read, in a lowercased head. A head
# where this finds only Host (and at most a plain Connection) needs none of them:
# the httptools codec parses such heads without a header list (its quick path).
def _alternation(words: list[bytes]) -> bytes:
    """A regex matching exactly ``words``, as a trie (``re`` tries alternatives in
    turn, so shared prefixes are tested once)."""
    branches: dict[bytes, list[bytes]] = {}
    for word in words:
        branches.setdefault(word[:1], []).append(word[1:])
    ends = b"" in branches.pop(b"", [None])
    alternatives = [
        re.escape(first) + _alternation(rest) for first, rest in sorted(branches.items())
    ]
    if not alternatives:
        return b""
    if len(alternatives) == 1 and not ends:
        return alternatives[0]
    return b"(?:" + b"|".join(alternatives) + (b")?" if ends else b")")


# Every header line whose name the framing rules read, in one findall over a head
# (the httptools codec's quick paths): (host, connection, content-length, value)
# per line, where the first three are empty but for the one that names the line;
# all three empty: another of those names. Names match in any case; the value has
# its leading whitespace dropped, not its trailing.
_QUICK_OTHERS = [
    name
    for name in sorted(_FRAMING_NAMES)
    if name not in (b"host", b"connection", b"content-length")
]
QUICK_HEADERS = re.compile(
    rb"\r\n(?i:(host)|(connection)|(content-length)|"
    + _alternation(_QUICK_OTHERS)
    + rb")[ \t]*:[ \t]*([^\r\n]*)"
)

# What llhttp accepts between two parts of a checked head (see volatile_lines): a
# field value (HTAB, SP, VCHAR and obs-text: no CR, LF, other control or DEL, at
# any place in it), then exactly ``k`` field lines (CRLF, a token name, a colon, a
# value; llhttp checks nothing else in a field it does not read), none named as a
# field the framing rules read. FIELD_LINES[k] for k up to 8.
_VALUE = rb"[\t -~\x80-\xff]*"
_LINE = (
    rb"\r\n(?!(?i:"
    + _alternation(sorted(_FRAMING_NAMES))
    + rb"):)[!#$%&'*+\-.^_`|~0-9A-Za-z]+:"
    + _VALUE
)
FIELD_LINES = tuple(
    re.compile(_VALUE + (b"(?:" + _LINE + b"){%d}" % k if k else b"")) for k in range(9)
)


def volatile_lines(old: bytes, new: bytes) -> tuple[bytes, bytes, int] | None:
    """``new`` cut around the field values where it differs from ``old``.

    ``old`` and ``new`` are heads (or their field lines from the CRLF that ends
    the start line) that llhttp accepted, so every field line is ``name:value``
    with no obs-fold and no bare CR or LF. The first and the last byte where
    they differ (aligned at their starts, then at their ends) pick the lines of
    ``new``: then (``new`` up to and including the colon of the first such line,
    or of the line before it when the first byte lies in a name; ``new`` from the
    CRLF that ends the last; how many field lines start between). A head that
    starts with the first part and ends with the second, with what
    ``FIELD_LINES[k]`` accepts between, holds ``new``'s field lines but for those
    values and lines, none a field the framing rules read: its framing is
    ``new``'s, and it is valid (the quick paths' varied heads). When ``new``'s
    own lines between are not such lines (a framing header lies between two
    changed values), or more than 8, the cut is around the last changed line
    alone. None when the heads are equal, or the line before the colon is the
    start line or a framing header.
    """
    diff = int.from_bytes(old, "big") ^ int.from_bytes(new, "big")
    if not diff:
        return None
    last = len(new) - 1 - (((diff & -diff).bit_length() - 1) >> 3)
    diff = int.from_bytes(old, "little") ^ int.from_bytes(new, "little")
    first = ((diff & -diff).bit_length() - 1) >> 3
    if last < 0:
        return None
    return _cut(new, min(first, last), last) or _cut(new, last, last)


def _cut(new: bytes, first: int, last: int) -> tuple[bytes, bytes, int] | None:
    """volatile_lines' cut of ``new`` for changed bytes ``first`` to ``last``."""
    start = new.rfind(b"\n", 0, first) + 1
    colon = new.find(b":", start, first + 1) if start else -1
    if colon < 0 and start:
        start = new.rfind(b"\n", 0, start - 1) + 1  # in a name: from the line before
        colon = new.find(b":", start) if start else -1
    if colon < 0 or new[start:colon].lower() in _FRAMING_NAMES:
        return None
    end = new.find(b"\r\n", max(colon, last - 1))
    lines = new.count(b"\r\n", colon, end)
    if lines >= len(FIELD_LINES) or FIELD_LINES[lines].fullmatch(new, colon + 1, end) is None:
        return None
    return new[: colon + 1], new[end:], lines


def connection_line(head: bytes, end: int) -> tuple[int, int] | None:
    """(start, end) of the Connection line in ``head[:end]``, its leading CRLF included.

    The one place a Connection line is found in a head's bytes (both codecs'
    heads, requests and responses): by its name in any case, whatever the
    whitespace around its value. Only for heads holding exactly one Connection
    header; None for ``Connection :``, which both codecs refuse anyway.
    """
    start = head.lower().find(b"\r\nconnection:", 0, end)
    if start < 0:
        return None
    return start, head.find(b"\r\n", start + 13)


# Absolute-form request targets: scheme "://" authority, then "/..." or "?...".
_SCHEME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_AUTHORITY_CHARS = frozenset(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@[]%"
)
# Bytes allowed in origin-form targets after the "/" (VCHAR), and in the rest of an
# absolute-form target.
_VCHAR = frozenset(range(0x21, 0x7F))

_TOKEN_CHARS = frozenset(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"
)
_HEXDIGITS = frozenset(b"0123456789abcdefABCDEF")
# qdtext in a quoted chunk-extension value: HTAB, SP, VCHAR except '"' and '\', obs-text.
_QDTEXT = frozenset([9, 0x20, 0x21, *range(0x23, 0x5C), *range(0x5D, 0x7F), *range(0x80, 0x100)])
_QUOTED_PAIR = frozenset([9, 0x20, *range(0x21, 0x7F), *range(0x80, 0x100)])


# --- head framing -------------------------------------------------------------


def skip_empty_lines(buf: bytes | bytearray, pos: int) -> int:
    """Index of the first byte at or after ``pos`` that is not CR or LF.

    Empty lines before a request or status line are ignored (RFC 9112 section 2.2;
    llhttp ignores any CR and LF bytes there, and so do both codecs).
    """
    n = len(buf)
    while pos < n and buf[pos] in (10, 13):
        pos += 1
    return pos


def scan_head(buf: bytes | bytearray, first: int, start: int, stop: int) -> None:
    """Refuse a bare LF, a bare CR, obs-fold or a control byte in ``buf[start:stop]``.

    ``first`` is where the head begins (``start`` may be later when a partial head
    is scanned in steps). A CR at ``stop - 1`` is judged by the byte at ``stop``
    when there is one, and is left for the next scan otherwise.
    """
    if start >= stop:
        return
    # LFs in [start, stop) against CRLF pairs whose LF is in [start, stop).
    lo = start - 1 if start > first else start
    if buf.count(b"\n", start, stop) != buf.count(b"\r\n", lo, stop):
        raise ProtocolError("bare LF in head")
    crs = buf.count(b"\r", start, stop)
    if crs:
        follow = stop + 1 if stop < len(buf) else stop
        if buf[stop - 1] == 13 and stop == len(buf):
            crs -= 1  # the LF may come with the next bytes
        if crs != buf.count(b"\r\n", start, follow):
            raise ProtocolError("bare CR in head")
    fold_from = max(first, start - 2)
    if buf.find(b"\r\n ", fold_from, stop) >= 0 or buf.find(b"\r\n\t", fold_from, stop) >= 0:
        raise ProtocolError("obsolete line folding in head")
    if _CTL.search(buf, start, stop) is not None:
        raise ProtocolError("control character in head")


def check_partial_head(buf: bytes | bytearray, first: int, scanned: int, max_bytes: int) -> int:
    """Check an incomplete head ``buf[first:]``; return how far it has been scanned.

    Raises ProtocolError for a defect within the first ``max_bytes`` bytes, then
    HeadersTooLarge when the head is already longer than ``max_bytes``.
    """
    n = len(buf)
    limit = first + max_bytes
    stop = n if n < limit else limit
    scan_head(buf, first, scanned, stop)
    if n > limit:
        raise HeadersTooLarge(f"head larger than {max_bytes} bytes")
    return stop - 1 if stop > first and buf[stop - 1] == 13 else stop


def check_oversize_head(buf: bytes | bytearray, first: int, scanned: int, max_bytes: int) -> None:
    """Refuse a complete head longer than ``max_bytes``: 400 for a defect within the
    first ``max_bytes`` bytes, 431 otherwise."""
    scan_head(buf, first, scanned, first + max_bytes)
    raise HeadersTooLarge(f"head larger than {max_bytes} bytes")


# The fewest bytes a header field line takes ("a:" CRLF): a head no longer than
# MIN_LINE * max_count bytes cannot hold more than max_count of them.
MIN_LINE = 4


def check_header_count(buf: bytes | bytearray, first: int, end: int, max_count: int) -> None:
    """Refuse a complete head ``buf[first:end]`` holding more than ``max_count`` field lines.

    Lines are counted by their CRLF (the start line and the final empty line are
    not fields). As for a head over ``max_header_bytes``, a defect the scan finds
    wins (400); otherwise 431. Both codecs call this on every complete request
    head before parsing its fields, so 10,000 tiny headers cost one ``count``,
    not 10,000 callbacks.
    """
    if end - first > MIN_LINE * max_count and buf.count(b"\r\n", first, end) - 2 > max_count:
        scan_head(buf, first, first, end)
        raise HeadersTooLarge(f"more than {max_count} header fields")


def check_value_space(name: bytes, raw_value: bytes) -> None:
    """Refuse a Transfer-Encoding value followed by whitespace with an HTAB in it.

    llhttp does not read ``chunked<HTAB>`` as chunked (it refuses such a request,
    and would take such a response's body as running until close), although the
    value is ``chunked`` once stripped; both codecs refuse it.
    """
    if b"\t" in raw_value[len(raw_value.rstrip(b" \t")) :] and name.lower() == b"transfer-encoding":
        raise ProtocolError("Transfer-Encoding value followed by a tab")


def split_header_lines(head: bytes | bytearray, first_line_end: int, end: int) -> list[Header]:
    """Header fields of a scanned head, as received (name case kept, value stripped).

    ``head[first_line_end:end]`` holds the field lines, each ending in CRLF, then
    the final CRLF; the caller has already validated them. Both codecs build
    their header lists here, so the lists cannot differ.
    """
    block = head[first_line_end : end - 4]
    if not block:
        return []
    if type(block) is not bytes:
        block = bytes(block)
    pairs = [line.partition(b":") for line in block.split(b"\r\n")]
    if b" \r\n" in block or b"\t\r\n" in block or block[-1:] in (b" ", b"\t"):
        for name, _, value in pairs:  # whitespace after a value: rare, checked apart
            if value[-1:] in (b" ", b"\t"):
                check_value_space(name, value)
    return [(name, value.strip(b" \t")) for name, _, value in pairs]


# --- request line -------------------------------------------------------------


def check_target(target: bytes) -> None:
    """Refuse a request-target that is not origin-form, absolute-form or ``*``.

    Origin-form (``/...``) is checked by both parsers identically (VCHAR only); the
    other forms are narrowed here to what both accept: ``*`` alone, and
    ``scheme://authority[/path][?query]`` with a letters-only scheme and at most one
    ``@`` in the authority.
    """
    if target[:1] == b"/":
        return
    if target == b"*":
        return
    scheme_end = target.find(b"://")
    if scheme_end <= 0 or not all(c in _SCHEME_CHARS for c in target[:scheme_end]):
        raise ProtocolError("invalid request target")
    rest = target[scheme_end + 3 :]
    i = 0
    n = len(rest)
    while i < n and rest[i] in _AUTHORITY_CHARS:
        i += 1
    if (i < n and rest[i] not in (0x2F, 0x3F)) or rest.count(b"@", 0, i) > 1:  # '/' or '?'
        raise ProtocolError("invalid request target")
    if not all(c in _VCHAR for c in rest[i:]):
        raise ProtocolError("invalid request target")


def check_reason(reason: bytes) -> None:
    """Refuse control bytes (other than HTAB) in a status line's reason phrase."""
    if _CTL.search(reason) is not None:
        raise ProtocolError("control character in reason phrase")


# --- message framing ----------------------------------------------------------


def _content_length(value: bytes) -> int:
    if not value.isdigit():  # digits only: no sign, no comma list, not empty
        raise ProtocolError("invalid Content-Length")
    digits = value.lstrip(b"0")
    if len(digits) > 19:
        raise ProtocolError("Content-Length too large")
    length = int(digits) if digits else 0
    if length > MAX_LENGTH:
        raise ProtocolError("Content-Length too large")
    return length


def _connection_tokens(value: bytes, tokens: int) -> int:
    """Fold the tokens of one Connection value into a bit set.

    1 close, 2 keep-alive, 4 upgrade, 8 any other token (the name of a header
    that is hop-by-hop for this message).
    """
    value = value.lower()
    if value == b"keep-alive":
        return tokens | 2
    if value == b"close":
        return tokens | 1
    for token in value.split(b","):
        token = token.strip(b" \t")
        if token == b"close":
            tokens |= 1
        elif token == b"keep-alive":
            tokens |= 2
        elif token == b"upgrade":
            tokens |= 4
        elif token:
            tokens |= 8
    return tokens


class _Scan:
    """What one pass over a header list found (see :func:`_scan`)."""

    __slots__ = (
        "connection",
        "content_length",
        "expect_continue",
        "h2c",
        "hop",
        "host",
        "hosts",
        "odd",
        "te",
        "tokens",
        "upgrade",
    )
    connection: list[Header]
    content_length: int | None
    expect_continue: bool
    h2c: bool
    hop: bool
    host: bytes
    hosts: int
    odd: bool
    te: int
    tokens: int
    upgrade: bool


def _scan(headers: list[Header]) -> _Scan:
    """One pass over a header list: framing, Connection tokens, and what must be rewritten.

    Raises ProtocolError for more than one Content-Length or one that is not
    plain digits. ``te`` counts Transfer-Encoding headers (-1 once one is not
    ``chunked``); ``hop`` is set by any header edge must strip or own; ``odd``
    by a framing value not spelt as edge writes it (``Chunked``, ``007``).
    """
    found = _Scan()
    content_length: int | None = None
    te = hosts = tokens = 0
    host = b""
    upgrade = expect_continue = hop = odd = h2c = False
    connection: list[Header] = []
    get = _FRAMING_NAMES.get
    for header in headers:
        name, value = header
        tag = get(name.lower())
        if tag is None:
            continue
        if tag == _HOST:
            if not hosts:
                host = value
            hosts += 1
        elif tag == _CONTENT_LENGTH:
            if content_length is not None:
                raise ProtocolError("more than one Content-Length")
            content_length = _content_length(value)
            if value[0] == 48 and len(value) > 1:  # leading zeros
                odd = True
        elif tag == _TRANSFER_ENCODING:
            if te >= 0 and value == b"chunked":
                te += 1
            elif te >= 0 and value.lower() == b"chunked":
                te += 1
                odd = True
            else:
                te = -1
        elif tag == _CONNECTION:
            tokens = _connection_tokens(value, tokens)
            connection.append(header)
        elif tag == _PROXY_CONNECTION:
            tokens = _connection_tokens(value, tokens)
            hop = True
        elif tag == _UPGRADE:
            hop = True
            if value:
                upgrade = True
                if b"2" in value:  # h2c among the protocols? (rare: checked token by token)
                    h2c = h2c or any(t.strip(b" \t").lower() == b"h2c" for t in value.split(b","))
        elif tag == _EXPECT:
            hop = True
            if value.lower() == b"100-continue":
                expect_continue = True
        else:
            hop = True
    found.content_length = content_length
    found.te = te
    found.hosts = hosts
    found.host = host
    found.tokens = tokens
    found.upgrade = upgrade
    found.expect_continue = expect_continue
    found.hop = hop
    found.odd = odd
    found.h2c = h2c
    found.connection = connection
    return found


def _check_transfer_encoding(found: _Scan) -> None:
    if found.te != 1:
        raise ProtocolError("Transfer-Encoding other than chunked")
    if found.content_length is not None:
        raise ProtocolError("both Content-Length and Transfer-Encoding")


def request_framing(
    version: bytes, headers: list[Header]
) -> tuple[bool, bool, int | None, bool, bool, tuple[Header, ...] | None, bytes]:
    """(keep_alive, chunked, content_length, upgrade, expect_continue, passthrough, host) of a request.

    Raises ProtocolError for: more than one Content-Length, a Content-Length
    that is not plain digits, Transfer-Encoding other than exactly one
    ``chunked``, both of them, Transfer-Encoding in HTTP/1.0, a Host count
    other than one in HTTP/1.1 (or more than one in HTTP/1.0), and an upgrade
    request with a body (chunked, or a Content-Length other than 0). ``passthrough``
    tells whether the head's own bytes may be forwarded (see :func:`passthrough`).
    """
    found = _scan(headers)
    http11 = version == b"1.1"
    if found.te:
        _check_transfer_encoding(found)
        if not http11:
            raise ProtocolError("Transfer-Encoding in an HTTP/1.0 request")
    hosts = found.hosts
    if hosts != 1 and (http11 or hosts):
        raise ProtocolError("missing Host" if not hosts else "more than one Host")
    tokens = found.tokens
    upgrade = found.upgrade and bool(tokens & 4)
    if upgrade and (found.te or found.content_length):
        # Both parsers hand the bytes after an upgrade request's head to the tunnel
        # whole (llhttp, through httptools, reads no body of one): a body the head
        # announces would never be sent as one, and the next hop, which waits for
        # it, would take the next request on that connection for it.
        raise ProtocolError("upgrade request with a body")
    if upgrade and (found.h2c or not http11):
        # HTTP/2 over cleartext, asked by an upgrade: edge does not speak it, and a
        # backend that does would get the connection, and with it every later
        # request on it, past edge's routers and middlewares (h2c smuggling).
        # Ignored, as RFC 9110 7.8 lets a server: a plain HTTP/1.1 request
        # (Traefik answers h2c itself and routes each stream). An HTTP/1.0
        # request's Upgrade is ignored too, as 7.8 requires.
        upgrade = False
    return (
        not tokens & 1 and (http11 or bool(tokens & 2)),
        found.te == 1,
        found.content_length,
        upgrade,
        found.expect_continue and http11,
        # A framing value spelt otherwise than edge writes it goes upstream as edge
        # writes it (rebuilt): a server that compares it exactly (``chunked``) or
        # reads leading zeros otherwise must see what edge framed the body by.
        None if found.odd else passthrough(found),
        found.host,
    )


def response_framing(
    status: int, version: bytes, headers: list[Header], method: bytes
) -> tuple[bool, bool, int | None, bool, tuple[Header, ...] | None]:
    """(keep_alive, chunked, content_length, has_body, passthrough) of a response to ``method``.

    The same header refusals as requests (Transfer-Encoding is allowed in
    HTTP/1.0 responses). No body for HEAD, 1xx, 204 and 304; without either
    header, the body runs until the connection closes, which ends keep-alive.
    """
    found = _scan(headers)
    if found.te:
        _check_transfer_encoding(found)
    tokens = found.tokens
    keep_alive = not tokens & 1 and (version == b"1.1" or bool(tokens & 2))
    through = passthrough(found)
    if method == b"HEAD" or status < 200 or status == 204 or status == 304:
        if status == 204 and (found.te or found.content_length is not None):
            # A 204 has no Content-Length or Transfer-Encoding (RFC 9110 8.6, RFC
            # 9112 6.1): rebuilt without them, so that a client reading one as a
            # body length cannot take the next response for this one's body.
            through = None
        return keep_alive and status != 101, False, None, False, through
    if found.te:
        return keep_alive, True, None, True, through
    if found.content_length is None:
        return False, False, None, True, None
    return keep_alive, False, found.content_length, True, through


def head_passthrough(headers: list[Header]) -> tuple[Header, ...] | None:
    """:func:`passthrough` of a header list already known to be valid."""
    return passthrough(_scan(headers))


def passthrough(found: _Scan) -> tuple[Header, ...] | None:
    """Whether a head's own bytes can be forwarded, and what to cut from them.

    None: the head holds something edge must rewrite (another hop-by-hop
    header, X-Forwarded-* or Forwarded, Expect, an Upgrade, a Connection token
    naming a header, several Connection headers): it is rebuilt. Otherwise the
    Connection header to cut (empty when there is none): the bytes of the head
    minus that line are exactly what a rebuild would produce, framing included
    (one Content-Length, or one ``Transfer-Encoding: chunked`` that edge
    re-frames identically).
    """
    if found.hop or found.tokens & 12 or len(found.connection) > 1:
        return None
    return tuple(found.connection)


# --- chunked framing (for the h11 codec; llhttp checks its own) ---------------

# Where a chunk-size line scan is: in the size, after ";", in an extension name,
# after "=", in a token value, in a quoted value, after "\" in one, after one.
_CS_SIZE, _CS_SEMI, _CS_NAME, _CS_EQUALS, _CS_TOKEN, _CS_QUOTED, _CS_ESCAPE, _CS_CLOSED = range(8)
_CS_COMPLETE = frozenset((_CS_NAME, _CS_EQUALS, _CS_TOKEN, _CS_CLOSED))
_HEX_VALUE = {c: int(chr(c), 16) for c in _HEXDIGITS}
_NOT_TOKEN = re.compile(rb"[^-!#$%&'*+.^_`|~0-9A-Za-z]")


class ChunkLine:
    """Incremental check of one chunk-size line, as llhttp checks it.

    ``1*HEXDIG *( 1*";" ( 1*tchar / *tchar "=" [ *tchar [ quoted-string ] ] ) )``,
    no whitespace anywhere, size at most ``MAX_CHUNK_SIZE`` (2**63 - 1). :meth:`feed`
    refuses the line at its first bad byte, as llhttp does, so a line is checked
    once however it arrives; :meth:`finish` checks its end and gives the size.
    """

    __slots__ = ("digits", "pos", "size", "state")

    def __init__(self) -> None:
        self.state = _CS_SIZE
        self.size = 0
        self.digits = 0
        self.pos = 0  # bytes of the line scanned so far

    def feed(self, line: bytes | bytearray, stop: int) -> None:
        """Scan ``line[self.pos:stop]`` (``line`` starts at the line's first byte)."""
        state = self.state
        i = self.pos
        while i < stop:
            c = line[i]
            if state == _CS_SIZE:
                if c in _HEX_VALUE:
                    self.size = self.size * 16 + _HEX_VALUE[c]
                    self.digits += 1
                    if self.size > MAX_CHUNK_SIZE:
                        raise ProtocolError("chunk size too large")
                elif c == 0x3B and self.digits:  # ';'
                    state = _CS_SEMI
                else:
                    raise ProtocolError("invalid chunk size")
            elif state == _CS_SEMI:
                if c in _TOKEN_CHARS:
                    state = _CS_NAME
                elif c == 0x3D:  # '=': llhttp accepts an empty name
                    state = _CS_EQUALS
                elif c != 0x3B:
                    raise ProtocolError("invalid chunk extension")
            elif state in (_CS_NAME, _CS_TOKEN):
                if c == 0x3B:
                    state = _CS_SEMI
                elif c == 0x3D and state == _CS_NAME:
                    state = _CS_EQUALS
                elif c == 0x22 and state == _CS_TOKEN:  # llhttp: a quote may follow a token
                    state = _CS_QUOTED
                elif c not in _TOKEN_CHARS:
                    raise ProtocolError("invalid chunk extension")
            elif state == _CS_EQUALS:
                if c == 0x22:  # '"'
                    state = _CS_QUOTED
                elif c in _TOKEN_CHARS:
                    state = _CS_TOKEN
                elif c == 0x3B:
                    state = _CS_SEMI
                else:
                    raise ProtocolError("invalid chunk extension")
            elif state == _CS_QUOTED:
                if c == 0x22:
                    state = _CS_CLOSED
                elif c == 0x5C:  # '\\'
                    state = _CS_ESCAPE
                elif c not in _QDTEXT:
                    raise ProtocolError("invalid chunk extension")
            elif state == _CS_ESCAPE:
                if c not in _QUOTED_PAIR:
                    raise ProtocolError("invalid chunk extension")
                state = _CS_QUOTED
            elif c == 0x3B:  # _CS_CLOSED
                state = _CS_SEMI
            else:
                raise ProtocolError("invalid chunk extension")
            i += 1
        self.state = state
        self.pos = i

    def finish(self) -> int:
        """The chunk size, once the whole line has been fed."""
        if self.state == _CS_SIZE:
            if not self.digits:
                raise ProtocolError("invalid chunk size")
        elif self.state not in _CS_COMPLETE:
            raise ProtocolError("invalid chunk extension")
        return self.size


class TrailerLines:
    """Incremental check of a trailer section, line by line, as llhttp checks it.

    Each field line is ``token ":" value`` and is neither Content-Length nor
    Transfer-Encoding; a bad name is refused at its first bad byte. The head scans
    (bare CR/LF, obs-fold, control bytes) are :func:`scan_head`'s job.
    """

    __slots__ = ("checked", "colon", "line")

    def __init__(self) -> None:
        self.line = 0  # start of the line being checked
        self.checked = 0  # bytes of that line checked so far
        self.colon = False  # its name is complete and valid

    def feed(self, block: bytes | bytearray) -> None:
        """Check what has arrived of the section (``block`` starts at its first byte)."""
        n = len(block)
        while True:
            if self.colon:
                end = block.find(b"\r\n", self.checked)
                if end < 0:
                    self.checked = max(self.checked, n - 1)
                    return
                self.line = self.checked = end + 2
                self.colon = False
                continue
            match = _NOT_TOKEN.search(block, self.checked)
            if match is None:
                self.checked = n
                return
            k = match.start()
            c = block[k]
            if c == 0x3A and k > self.line:  # ':' after a name
                name = bytes(block[self.line : k]).lower()
                if name == b"content-length" or name == b"transfer-encoding":
                    raise ProtocolError(f"{name.decode('latin-1')} in trailers")
                self.colon = True
                self.checked = k + 1
            elif c == 13 and k == self.line:
                self.checked = k
                return  # the empty line that ends the section (or its CR so far)
            else:
                raise ProtocolError("invalid trailer field")
