"""What edge writes: upstream request heads, client response heads, error answers.

Pure functions over parsed heads, no I/O. The invariants they keep:

- What goes upstream is unambiguous: hop-by-hop headers (RFC 9110 7.6.1, plus
  every header the Connection header names) are removed, except that a
  Connection header saying only ``keep-alive`` stays on a head forwarded as it
  came when the next hop's connection stays alive too (it then says what edge
  means for that connection; see :func:`cut_connection`), and exactly one framing
  header is written: ``Content-Length`` for a sized body, ``Transfer-Encoding:
  chunked`` for a chunked one, neither for no body. The request line is always
  origin-form ``HTTP/1.1``, whatever form the client used.
- ``X-Forwarded-For/-Proto/-Host/-Port`` and ``X-Real-Ip`` are edge's own unless the
  client is trusted (``forwardedHeaders.trustedIPs`` or ``insecure``): from an
  untrusted client any such header is dropped and replaced. The other X- headers
  a Traefik-style proxy manages (``headers.FORWARDED_KEPT``: -Server, -Uri,
  -Method, -Tls-Client-Cert, ..., and every spelling with ``_`` for ``-``) are
  dropped from an untrusted client and kept as they came from a trusted one.
  So is RFC 7239's ``Forwarded`` (``headers.RFC_FORWARDED``; edge writes none),
  unless a Connection token names it. A head holding any of them is rebuilt
  (``headers.passthrough``), never forwarded as its own bytes, and the quick
  parses never take one: an untrusted client's cannot ride a passthrough head.
- Error bodies name nothing internal: a status line, a fixed short text.
"""

from __future__ import annotations

import re
from http import HTTPStatus

from edge.http.codec.base import Header, QuickResponseHead, RequestHead, ResponseHead
from edge.http.codec.headers import (
    FORWARDED,
    FORWARDED_KEPT,
    HOP_BY_HOP,
    RFC_FORWARDED,
    connection_line,
)
from edge.rules import split_authority

# Never copied as they are: edge writes its own (from a trusted client, it
# carries the received X-Forwarded-* values over into its own).
DROP = HOP_BY_HOP | FORWARDED | FORWARDED_KEPT | {RFC_FORWARDED, b"host"}

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


# Header names a middleware's edit does not write as a line of its own: the
# framing and hop-by-hop ones (edge writes its own; Traefik's Go writer ignores
# them in a request's header map, its proxy drops them), and the ones edge
# manages (Host, X-Forwarded-*, X-Real-Ip), whose value an edit replaces
# (HeaderEdits.managed) instead of adding a second line.
MANAGED = FORWARDED | {b"host"}


class HeaderEdits:
    """Headers a middleware sets or removes, prepared once per configuration.

    A header with a value replaces every same-named header; one with an empty
    value only removes them. Framing and hop-by-hop names have no effect (edge
    writes those itself); Host and edge's forwarding headers are in ``managed``
    (lowercased name -> (name, value)), for the writers to put in place of their own.
    """

    __slots__ = ("_lengths", "_lines", "managed", "names", "pairs", "values")

    def __init__(self, headers: list[Header]) -> None:
        self.pairs = tuple(headers)
        self.names = frozenset(name.lower() for name, _ in headers)
        self.values = [
            (n, v)
            for n, v in headers
            if v and n.lower() not in HOP_BY_HOP and n.lower() not in MANAGED
        ]
        self.managed = {n.lower(): (n, v) for n, v in headers if n.lower() in MANAGED}
        self._lines: bytes | None = None
        self._lengths: frozenset[int] | None = None

    def __bool__(self) -> bool:
        return bool(self.names)

    @property
    def lines(self) -> bytes:
        """The header lines a response gets from these edits (those with a value, then
        the managed ones set), made once when first asked: for a route's fixed edits,
        once per configuration."""
        lines = self._lines
        if lines is None:
            pairs = (*self.values, *(p for p in self.managed.values() if p[1]))
            lines = self._lines = b"".join(b"%s: %s\r\n" % pair for pair in pairs)
        return lines

    def touches(self, headers: list[Header]) -> bool:
        """Whether one of ``headers`` is set or removed by these edits (only names of
        the lengths they edit are lowercased)."""
        lengths = self._lengths
        if lengths is None:
            lengths = self._lengths = frozenset(len(name) for name in self.names)
        names = self.names
        for name, _ in headers:  # noqa: SIM110 (no generator per response)
            if len(name) in lengths and name.lower() in names:
                return True
        return False


def reason(status: int) -> bytes:
    return _REASONS.get(status, b"")


def connection_tokens(headers: list[Header]) -> frozenset[bytes]:
    """The lowercased tokens of every Connection header (names of extra hop-by-hop headers)."""
    tokens: set[bytes] = set()
    for name, value in headers:
        if len(name) == 10 and name.lower() == b"connection":
            for tok in value.split(b","):
                tok = tok.strip().lower()
                if tok:
                    tokens.add(tok)
    return frozenset(tokens)


def split_target(target: bytes) -> tuple[bytes, bytes, bytes | None]:
    """(path, query, authority) of a request-target.

    ``authority`` is None for origin-form. Raises ValueError for a target edge
    does not route: not origin-form, not absolute-form http(s), or ``*``, or one
    holding a ``#``: a request-target has no fragment (RFC 9112 3.2), and a backend
    that cuts one off would resolve a path other than the one routed
    (``/admin/x#/../../y`` is routed as ``/y``); Traefik refuses one in the path.
    """
    if target.find(b"#") >= 0:  # not ``in``: see _TO_CLEAN
        raise ValueError("request-target holds a fragment ('#')")
    authority = None
    if target[:1] != b"/":
        lower = target[:8].lower()
        if lower.startswith(b"http://"):
            rest = target[7:]
        elif lower.startswith(b"https://"):
            rest = target[8:]
        else:
            raise ValueError("request-target is neither origin-form nor absolute-form")
        slash = rest.find(b"/")
        qmark = rest.find(b"?")
        end = min(i for i in (slash, qmark, len(rest)) if i >= 0)
        authority = rest[:end]
        if not authority or b"@" in authority:
            raise ValueError("invalid authority in absolute-form request-target")
        target = rest[end:] or b"/"
        if target[:1] == b"?":
            target = b"/" + target
    q = target.find(b"?")
    if q < 0:
        return target, b"", authority
    return target[:q], target[q + 1 :], authority


# What may start a dot segment or an empty one, and a backslash. One search: a bytes
# ``in`` costs more than that (CPython 3.11 first tries its needle as an int, raising inside).
_TO_CLEAN = re.compile(rb"/[./]|%2[eE]|\\")


def sanitize_path(path: bytes) -> bytes:
    """A request path as Traefik's ``sanitizePath`` (on by default) leaves it: dot
    segments resolved and empty ones dropped (RFC 3986 6.2.2.3; Traefik cleans the
    escaped path with Go's ``path.Clean`` after its ``normalizePath`` decoded
    ``%2E``). Routers match, middlewares see and the backend receives this path, so
    a backend that resolves ``/x/../admin`` itself is never reached past the
    routers and middlewares of ``/admin``.

    - ``.`` and ``..`` segments, also spelled ``%2e``/``%2E``, are resolved, and
      ``..`` never climbs above the root (``/../a`` -> ``/a``, no error);
    - empty segments go (``//a///b`` -> ``/a/b``); a trailing slash stays
      (``/a/b/../`` -> ``/a/``), a final dot segment leaves none (``/a/b/..`` -> ``/a``);
    - a backslash, which no path may hold raw (RFC 3986), is sent as ``%5C``, as
      Traefik forwards it (Go re-escapes the path): no separator to edge, and none
      to a backend either (WHATWG URL parsers read a raw one as ``/``, so
      ``/x/..\\admin`` would be ``/admin`` there);
    - every other byte stays as sent: ``%2F`` is no separator (``/a/..%2Fb``
      stays), no other escape is decoded.

    ``path`` starts with ``/`` (:func:`split_target`). Returns ``path`` itself when
    nothing changes; a path holding none of ``/.``, ``//``, ``%2e``, ``%2E``, ``\\``
    costs one search (a quick head never holds one:
    ``edge.http.codec.httptools._PLAIN_REQUEST_LINE``).
    """
    if _TO_CLEAN.search(path) is None:
        return path
    kept: list[bytes] = []
    for segment in path.replace(b"\\", b"%5C").split(b"/"):
        dots = segment.replace(b"%2e", b".").replace(b"%2E", b".") if b"%" in segment else segment
        if dots == b"..":
            if kept:
                kept.pop()
        elif dots and dots != b".":
            kept.append(segment)
    clean = b"/" + b"/".join(kept)
    if path.endswith(b"/") and not clean.endswith(b"/"):
        clean += b"/"
    return path if clean == path else clean


# Bytes a Host value may hold (Go's httpguts.ValidHostHeader, which Traefik's server
# applies: reg-name, IP literal and port characters): no "@", "/", "?", "#", "\\",
# space, quote or obs-text, with which a backend parsing the value as a URL
# authority could read a host other than the one the router was chosen by.
_NOT_HOST = re.compile(rb"[^0-9A-Za-z!$%&'()*+,\-.:;=\[\]_~]")


def split_host_port(authority: bytes) -> tuple[str, str]:
    """("host", "port") of a Host header value (:func:`edge.rules.split_authority`).

    Raises ValueError for a value with a byte no host or port holds (``_NOT_HOST``),
    or an IP literal followed by anything but a port (``[a.example]b.example``:
    the router would see ``a.example``).
    """
    if _NOT_HOST.search(authority) is not None:
        raise ValueError("malformed Host header")
    if authority[:1] == b"[" and authority[authority.find(b"]") + 1 :][:1] not in (b"", b":"):
        raise ValueError("malformed Host header")
    return split_authority(authority.decode("latin-1"))


def request_head(
    head: RequestHead,
    *,
    target: bytes,
    host: bytes,
    client_ip: bytes,
    trusted: bool,
    proto: bytes,
    forwarded_host: bytes,
    forwarded_port: bytes,
    extra: HeaderEdits | None = None,
    prefix: bytes = b"",
) -> bytes:
    """The request head sent upstream, as one bytes object.

    ``host`` is the Host header to send (the client's, or the server's authority
    when passHostHeader is false). ``extra`` headers (from middlewares) replace
    same-named ones; an empty value removes the header.
    """
    headers = head.headers
    drop = DROP
    tokens = connection_tokens(headers)
    xff = b""
    xfproto = xfhost = xfport = real_ip = None
    managed = extra.managed if extra else None
    out = [head.method, b" ", target, b" HTTP/1.1\r\nHost: ", host, b"\r\n"]
    extra_names = extra.names if extra else ()
    for name, value in headers:
        lname = name.lower()
        if lname in drop or lname in tokens or lname in extra_names:
            if trusted:
                if lname == b"x-forwarded-for":
                    xff = xff + b", " + value if xff else value
                elif lname == b"x-forwarded-proto":
                    xfproto = value
                elif lname == b"x-forwarded-host":
                    xfhost = value
                elif lname == b"x-forwarded-port":
                    xfport = value
                elif lname == b"x-real-ip":
                    real_ip = (
                        real_ip or value
                    )  # Traefik sets it only where a trusted request has none
                elif lname == b"x-forwarded-prefix" and lname not in extra_names:
                    out += (
                        name,
                        b": ",
                        value,
                        b"\r\n",
                    )  # kept; a stripPrefix adds its own after it
                elif lname in FORWARDED_KEPT and lname not in extra_names:
                    out += (name, b": ", value, b"\r\n")  # a Connection token does not drop it
                elif lname == RFC_FORWARDED and lname not in tokens and lname not in extra_names:
                    out += (
                        name,
                        b": ",
                        value,
                        b"\r\n",
                    )  # a Connection token drops it, as in Traefik
            continue
        out += (name, b": ", value, b"\r\n")
    if extra:
        for name, value in extra.values:
            out += (name, b": ", value, b"\r\n")
    if managed:
        _managed_lines(
            out,
            managed,
            xff,
            xfproto or proto,
            xfhost or forwarded_host,
            xfport or forwarded_port,
            client_ip,
            real_ip or client_ip,
            prefix,
        )
    else:
        out += (
            b"X-Forwarded-For: ",
            xff + b", " + client_ip if xff else client_ip,
            b"\r\nX-Forwarded-Proto: ",
            xfproto or proto,
            b"\r\nX-Forwarded-Host: ",
            xfhost or forwarded_host,
            b"\r\nX-Forwarded-Port: ",
            xfport or forwarded_port,
            b"\r\nX-Real-Ip: ",
            real_ip or client_ip,
            b"\r\n",
        )
        if prefix:
            out += (b"X-Forwarded-Prefix: ", prefix, b"\r\n")
    if head.upgrade:
        out += (b"Connection: Upgrade\r\nUpgrade: ", _header(headers, b"upgrade"), b"\r\n")
    if head.chunked:
        out.append(b"Transfer-Encoding: chunked\r\n\r\n")
    elif head.content_length is not None:
        out += (b"Content-Length: ", b"%d" % head.content_length, b"\r\n\r\n")
    else:
        out.append(b"\r\n")
    return b"".join(out)


def _managed_lines(
    out: list[bytes],
    managed: dict[bytes, tuple[bytes, bytes]],
    xff: bytes,
    proto: bytes,
    host: bytes,
    port: bytes,
    client_ip: bytes,
    real_ip: bytes,
    prefix: bytes,
) -> None:
    """Edge's forwarding headers where a middleware's edit names some of them
    (``managed``), as Traefik leaves them: an edit's value replaces edge's, an
    empty one removes the header, and X-Forwarded-For set by an edit is still
    appended the client's address (Go's proxy does; an empty one: none at all)."""
    edited = managed.get(b"x-forwarded-for")
    if edited is not None:
        xff = edited[1] + b", " + client_ip if edited[1] else b""
    else:
        xff = xff + b", " + client_ip if xff else client_ip
    for name, value in (
        (b"X-Forwarded-For", xff),
        (b"X-Forwarded-Proto", proto),
        (b"X-Forwarded-Host", host),
        (b"X-Forwarded-Port", port),
        (b"X-Real-Ip", real_ip),
        (b"X-Forwarded-Prefix", prefix),
    ):
        lname = name.lower()
        if lname != b"x-forwarded-for":
            edited = managed.get(lname)
            if edited is not None:
                value = edited[1]
        if value:
            out += (name, b": ", value, b"\r\n")


def cut_connection(
    raw: bytes, through: tuple[Header, ...], keep_alive: bool = False
) -> bytes | None:
    """A head's bytes without its Connection line (``through`` names it, if any).

    ``through`` comes from :func:`edge.http.codec.headers.passthrough`. A Connection
    of exactly ``keep-alive`` stays when ``keep_alive`` (the next hop's
    connection is kept alive): it then states edge's own intent for that
    connection, as nginx writes one. The line is found by
    :func:`edge.http.codec.headers.connection_line`, as the quick parses find it.
    """
    if not through:
        return raw
    if keep_alive and through[0][1].lower() == b"keep-alive":
        return raw
    span = connection_line(raw, len(raw))
    if span is None:
        return None
    return raw[: span[0]] + raw[span[1] :]


def passthrough_request(
    raw: bytes, client_ip: bytes, proto: bytes, host: bytes, port: bytes
) -> bytes:
    """The client's own head bytes with edge's forwarding headers appended.

    Only for heads that need nothing else (see ``RequestHead.passthrough``): no
    hop-by-hop, X-Forwarded-* or Forwarded header of the client's, an origin-form
    HTTP/1.1 request line, no rewrite by a middleware.
    """
    return raw[:-2] + forwarding_lines(client_ip, proto, host, port)


def forwarding_lines(client_ip: bytes, proto: bytes, host: bytes, port: bytes) -> bytes:
    """The end of a passthrough head (:func:`passthrough_request`): edge's forwarding
    headers and the empty line. The same for every request of a connection that
    names the same Host, so a connection keeps it (``HTTPConnection.forwarding``)."""
    return (
        b"X-Forwarded-For: %s\r\nX-Forwarded-Proto: %s\r\nX-Forwarded-Host: %s\r\n"
        b"X-Forwarded-Port: %s\r\nX-Real-Ip: %s\r\n\r\n" % (client_ip, proto, host, port, client_ip)
    )


def upstream_request(
    head: RequestHead,
    keep_alive: bool,
    client_ip: bytes,
    scheme: bytes,
    authority: bytes,
    forwarded_port: bytes,
    trusted: bool = False,
    target: bytes | None = None,
    host: bytes | None = None,
    edits: HeaderEdits | None = None,
    prefix: bytes = b"",
) -> bytes:
    """The request head sent upstream: the one writer for every path.

    ``keep_alive``: the upstream connection stays open after this exchange.
    ``target``, ``host``, ``edits`` and ``prefix`` are what a route's pipeline
    rewrote (None/empty: nothing). A head that needs nothing rewritten goes as
    its own bytes (a quick parse's ``cut`` when there is one), minus a Connection
    line, plus edge's forwarding headers; anything else is rebuilt.
    """
    if (
        target is None
        and host is None
        and edits is None
        and head.version == b"1.1"
        and head.target[:1] == b"/"
    ):
        raw = head.cut if keep_alive else None
        if raw is None:
            through = head.passthrough
            if through is not None:
                raw = cut_connection(head.raw, through, keep_alive)
        if raw is not None:
            return passthrough_request(raw, client_ip, scheme, authority, forwarded_port)
    if target is None:  # origin-form upstream, whatever form the client used
        path, query, _ = split_target(head.target)
        target = path + b"?" + query if query else path
    if (
        host is None
    ):  # passHostHeader: the client's Host, or one a middleware set (req.Host in Traefik)
        host = authority
        if edits is not None and b"host" in edits.managed:
            host = edits.managed[b"host"][1] or authority  # an empty one: no effect
    return request_head(
        head,
        target=target,
        host=host,
        client_ip=client_ip,
        trusted=trusted,
        proto=(b"wss" if scheme == b"https" else b"ws") if head.upgrade else scheme,
        forwarded_host=authority,
        forwarded_port=forwarded_port,
        extra=edits,
        prefix=prefix,
    )


def client_response(
    head: ResponseHead, keep_alive: bool, chunked: bool, edits: HeaderEdits | None
) -> bytes:
    """The response head sent to the client: the one writer for every path.

    ``keep_alive``: the client connection stays open; ``chunked``: edge re-frames
    a body of unknown length as chunked. A head with nothing to rewrite goes as
    the upstream's own bytes (a quick parse's ``cut`` when the connection stays
    open) minus its Connection line; so does one none of whose names ``edits``
    touch, with the edits' lines (:attr:`HeaderEdits.lines`, made once) before
    its blank line; anything else is rebuilt.
    """
    if (
        head.version == b"1.1"
        and head.status != 101
        and (chunked or not head.chunked)
        and (edits is None or not edits.touches(head.headers))
    ):
        if edits is not None:
            # None of its names is edited: its own bytes, the edits' lines at the end.
            out = client_response(head, keep_alive, chunked, None)
            return out[:-2] + edits.lines + b"\r\n"
        if keep_alive and head.cut is not None:
            return head.cut
        if type(head) is QuickResponseHead:  # closing (a kept-alive one returned its cut)
            # Its framing is plain (one Content-Length, at most one Connection of
            # keep-alive or close, nothing else hop-by-hop): what passthrough and
            # cut_connection work out from the header list, without the list.
            closing = head.closing
            if closing is None:
                raw = head.raw
                span = connection_line(raw, len(raw))
                if span is not None:
                    raw = raw[: span[0]] + raw[span[1] :]
                closing = head.closing = raw[:-2] + b"Connection: close\r\n\r\n"
            return closing
        through = head.passthrough
        if through is not None:
            cut = cut_connection(head.raw, through, keep_alive)
            if cut is not None:
                return cut if keep_alive else cut[:-2] + b"Connection: close\r\n\r\n"
    return response_head(head, chunked=chunked, keep_alive=keep_alive, extra=edits)


def keep_alive_for_http10(out: bytes) -> bytes:
    """A response (its head, or all of it) to an HTTP/1.0 client whose connection stays
    open, saying so: such a client takes a response without ``Connection:
    keep-alive`` as the end of the connection (RFC 9112 C.2.2; nginx and Go's server
    write it). ``out`` holds no Connection line but one of keep-alive."""
    end = out.index(b"\r\n\r\n")
    if connection_line(out, end + 2) is not None:
        return out
    return out[:end] + b"\r\nConnection: keep-alive" + out[end:]


def response_head(
    head: ResponseHead,
    *,
    chunked: bool,
    keep_alive: bool,
    extra: HeaderEdits | None = None,
) -> bytes:
    """The response head sent to the client.

    ``chunked`` tells whether edge re-frames the body as chunked for this client
    (a body of unknown length to an HTTP/1.1 client); a body of unknown length to
    an HTTP/1.0 client is delimited by close (``keep_alive`` False).
    """
    headers = head.headers
    tokens = connection_tokens(headers)
    extra_names = extra.names if extra else ()
    out = [b"HTTP/1.1 %d " % head.status, head.reason or reason(head.status), b"\r\n"]
    status = head.status
    for name, value in headers:
        lname = name.lower()
        if lname in HOP_BY_HOP or lname in tokens or lname in extra_names:
            # A bodiless response (HEAD, 304) keeps its Content-Length: it
            # describes the representation, not this message; a 204 has none.
            if lname == b"content-length" and not head.has_body and status >= 200 and status != 204:
                out += (name, b": ", value, b"\r\n")
            continue
        out += (name, b": ", value, b"\r\n")
    if extra:
        out.append(extra.lines)  # nothing edge manages in a response: written as set
    if status == 101:
        out += (b"Connection: Upgrade\r\nUpgrade: ", _header(headers, b"upgrade"), b"\r\n\r\n")
        return b"".join(out)
    if head.has_body:
        if head.content_length is not None:
            out += (b"Content-Length: ", b"%d" % head.content_length, b"\r\n")
        elif chunked:
            out.append(b"Transfer-Encoding: chunked\r\n")
    if not keep_alive:
        out.append(b"Connection: close\r\n")
    out.append(b"\r\n")
    return b"".join(out)


def own_response(
    status: int,
    body: bytes = b"",
    *,
    close: bool,
    content_type: bytes = b"text/plain; charset=utf-8",
    lines: bytes = b"",
    edits: HeaderEdits | None = None,
) -> bytes:
    """A complete response of edge's own (errors, /ping, redirects): the one writer of those.

    ``edits``: a route's response header edits, for an answer given for that route
    (its Content-Type replaced or, empty, removed; framing stays edge's)."""
    if edits is not None:
        extra = [*edits.values, *edits.managed.values()]
        lines += b"".join(
            b"%s: %s\r\n" % (n, v) for n, v in extra if v and n.lower() != b"content-type"
        )
        if b"content-type" in edits.names:
            content_type = next(v for n, v in edits.pairs if n.lower() == b"content-type")
    return b"HTTP/1.1 %d %s\r\n%s%sContent-Length: %d\r\n%s\r\n%s" % (
        status,
        reason(status) or b"Error",
        lines,
        b"Content-Type: %s\r\n" % content_type if body and content_type else b"",
        len(body),
        b"Connection: close\r\n" if close else b"",
        body,
    )


def error_response(status: int, *, close: bool, edits: HeaderEdits | None = None) -> bytes:
    """The answer to an error edge answers itself; the body names nothing internal."""
    body = (
        b"404 page not found\n"
        if status == 404
        else b"%d %s\n" % (status, reason(status) or b"Error")
    )
    return own_response(status, body, close=close, edits=edits)


def _header(headers: list[Header], lname: bytes) -> bytes:
    for name, value in headers:
        if name.lower() == lname:
            return value
    return b""
