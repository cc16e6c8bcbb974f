"""forwardAuth: each request is asked of an auth server first, as Traefik v3's
(pkg/middlewares/auth/forward.go).

What the auth server gets: a request to ``address`` (GET, or the client's method
with ``preserveRequestMethod``) carrying the client's headers as Traefik's
middleware sees them (:func:`entrypoint_headers`: the entrypoint's
X-Forwarded-* already in place), less the hop-by-hop ones, only those
``authRequestHeaders`` names when set, and the X-Forwarded-For/-Proto/-Method/
-Host/-Uri (and -Port) Traefik writes (:func:`auth_request_headers`, its
``writeHeader`` and ``oldWriteHeader``: ``trustForwardHeader`` unset, true and
false are three behaviours). What follows its answer:

- a 2xx: the request goes on, with the answer's ``authResponseHeaders`` and the
  headers ``authResponseHeadersRegex`` matches (on Go's canonical names) in place
  of the client's (:func:`copied_headers`), and its cookies named in
  ``addAuthCookiesToResponse`` in place of the upstream's on the response;
- anything else: that answer is the client's (:func:`refusal`): its status, its
  headers less the hop-by-hop ones (Location resolved against ``address`` unless
  ``preserveLocationHeader``; Set-Cookie, WWW-Authenticate as they came), its body;
  a 401 with ``authSigninURL`` is a 302 there instead;
- no answer (refused, reset, invalid, not within the middleware's ``timeout``:
  :data:`AUTH_TIMEOUT`, Go's client's 30 s, unless the one who builds it says
  otherwise, as tests do; no key sets it): 500 with no body; an answer body over
  ``maxResponseBodySize``: 401.

With ``forwardBody`` the auth request carries the client's body too, framed as it
came (its Content-Length, or chunked: Traefik copies both onto the auth request),
read in full first (:meth:`Forward.read_body`: the entrypoint's readTimeout bounds
that read, the auth timeout the exchange with the server after it); the upstream
then gets the same body, whole. A body over ``maxBodySize`` (-1: no limit,
Traefik's default) is answered 401 with no body, the auth server not asked; a
declared Content-Length over it is answered before the body is read. (Traefik
leaves a CONNECT's body of unknown length alone, as tunnel bytes; edge's codecs
refuse CONNECT.)

The client (:class:`AuthPool`) is edge's own on the loop: asyncio protocols over
the sans-IO response parser (:mod:`edge.http.codec`), keep-alive connections
kept in a LIFO pool of at most :data:`IDLE_KEPT` (each for :data:`IDLE_TIMEOUT`,
Go's default transport's), at most :data:`MAX_CONNECTIONS` open at once (a
request beyond waits for one, within its timeout). It is built once per
configuration with the middleware (its TLS context too, off the loop), binds to
the loop at its first request, and closes its idle connections when the
middleware goes away with its configuration (``weakref.finalize``: nothing in
the pool refers back to the middleware, so reference counting frees it).

Where edge differs from Traefik: Set-Cookie values go as the auth server and the
upstream wrote them (Go re-serializes them through its cookie parser); no
``Accept-Encoding: gzip`` is added to the auth request (Go's transport adds one
and decompresses the answer: the client gets the same body); an answer without
Content-Type goes without one (Go's server would sniff one); an auth request
never carries a User-Agent the client did not send (Go's writes none either, as
Traefik sets it empty); ``headerField`` is read and not used (Traefik logs that
answer header as the access log's user, a field edge's access log lacks).
``addAuthCookiesToResponse`` reaches every response of the upstream, those without
a body (to a HEAD, a 204, a 304) included: the response filter changes heads only.

Cost per request: the auth request's head is made from the client's headers
(tens of microseconds); a 2xx's headers are copied by name, the regexp's verdict
kept per header name (:class:`Matcher`); cookies for the response wait in
``ForwardAuth.kept`` under the Forward's id until its exchange ends (a Forward
has no room for a middleware's own state).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import ssl
import weakref
from collections.abc import Iterable
from functools import partial
from urllib.parse import unquote, urljoin, urlsplit

from edge.config.dynamic import ClientCertificate, forward_auth_address
from edge.config.dynamic import ForwardAuth as ForwardAuthConfig
from edge.config.runtime.tls import client_tls_context
from edge.errors import ConfigError, ProtocolError
from edge.http.codec import Header, ResponseHead
from edge.http.codec.headers import FORWARDED, FORWARDED_KEPT, HOP_BY_HOP, RFC_FORWARDED
from edge.http.codec.parsers import parser_classes
from edge.http.middlewares import Answer, BodyTooLarge, Forward, Middleware, Reply
from edge.http.middlewares.goregexp import GoRegexp

__all__ = [
    "AuthPool",
    "ForwardAuth",
    "Matcher",
    "auth_request_headers",
    "canonical",
    "copied_headers",
    "entrypoint_headers",
    "forward_auth",
    "refusal",
]

log = logging.getLogger("edge.middlewares")

AUTH_TIMEOUT = 30.0
"""Seconds an auth request may take, dial to the answer's last byte (Traefik's
client's ``Timeout``)."""
IDLE_KEPT = 64
"""Idle keep-alive connections a forwardAuth middleware keeps to its server."""
IDLE_TIMEOUT = 90.0
"""Seconds an idle connection is kept (Go's DefaultTransport's IdleConnTimeout)."""
MAX_CONNECTIONS = 512
"""Connections a forwardAuth middleware has open at once; a request beyond waits."""
MATCHES_KEPT = 1024
"""Header names whose authResponseHeadersRegex verdict a middleware keeps."""
COOKIES_KEPT = 4096
"""Requests in flight whose auth cookies a middleware holds for their responses."""

# What never goes to the auth server from the client's headers: the hop-by-hop
# ones Traefik removes (and those Go's request writer writes itself: framing,
# Host; and Expect, which edge answers); Proxy-Authorization and
# Proxy-Authenticate go, as in Traefik.
_NOT_SENT = (HOP_BY_HOP - {b"proxy-authorization", b"proxy-authenticate"}) | {
    b"trailers",
    b"host",
}
# What never goes from a refusing answer to the client (Traefik's hopHeaders), and
# the framing edge writes itself.
_NOT_ANSWERED = frozenset(
    (
        b"connection",
        b"keep-alive",
        b"te",
        b"trailers",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"content-type",
        b"location",
    )
)
# The X- headers Traefik manages (its XHeadersSet, every spelling with `_`): what
# trustForwardHeader false removes, and what true adds to authRequestHeaders.
_MANAGED_X = FORWARDED | FORWARDED_KEPT
_MANAGED_X_NAMES = (
    b"X-Forwarded-Proto",
    b"X-Forwarded-Scheme",
    b"X-Forwarded-For",
    b"X-Forwarded-Host",
    b"X-Forwarded-Port",
    b"X-Forwarded-Server",
    b"X-Forwarded-Uri",
    b"X-Forwarded-Method",
    b"X-Forwarded-Prefix",
    b"X-Forwarded-Tls-Client-Cert",
    b"X-Forwarded-Tls-Client-Cert-Info",
    b"X-Scheme",
    b"X-Real-Ip",
)
_IDEMPOTENT = frozenset((b"GET", b"HEAD", b"OPTIONS", b"TRACE"))
_EMPTY_BODY_LENGTH = frozenset((b"POST", b"PUT", b"PATCH"))


# -- the headers, as pure functions ---------------------------------------------------


def canonical(name: bytes) -> bytes:
    """Go's ``CanonicalHeaderKey``: the first letter and each after a ``-`` upper
    case, the rest lower; a name with a byte no token holds (a space) unchanged."""
    if _TOKEN.fullmatch(name) is None:
        return name
    return b"-".join(part[:1].upper() + part[1:].lower() for part in name.split(b"-"))


_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _get(headers: Iterable[Header], lname: bytes) -> bytes | None:
    for n, v in headers:
        if n.lower() == lname:
            return v
    return None


def _has(headers: Iterable[Header], lname: bytes) -> bool:
    return any(n.lower() == lname for n, _ in headers)


def _connection_tokens(headers: Iterable[Header]) -> set[bytes]:
    tokens = set()
    for n, v in headers:
        if n.lower() == b"connection":
            for token in v.split(b","):
                token = token.strip().lower()
                if token:
                    tokens.add(token)
    return tokens


def entrypoint_headers(
    headers: Iterable[Header],
    *,
    trusted: bool,
    client_ip: bytes,
    proto: bytes,
    host: bytes,
    port: bytes,
    prefix: bytes = b"",
    edits: Iterable[Header] = (),
) -> list[Header]:
    """The request's headers as Traefik's middlewares see them: after its
    entrypoint's forwarded-headers step (an untrusted client's X-Forwarded-*,
    X-Real-Ip and Forwarded removed; X-Real-Ip, X-Forwarded-Proto, -Port and
    -Host set where absent; X-Forwarded-For's values joined into one) and the
    earlier middlewares (``prefix``: a stripPrefix's X-Forwarded-Prefix; ``edits``:
    headers set per request, an empty value removing)."""
    out: list[Header] = []
    xff: list[bytes] = []
    present = set()
    for name, value in headers:
        lname = name.lower()
        if lname in _MANAGED_X or lname == RFC_FORWARDED:
            if not trusted:
                continue
            if lname == b"x-forwarded-for":
                xff.append(value)
                continue
        out.append((name, value))
        present.add(lname)
    if xff:
        out.append((b"X-Forwarded-For", b", ".join(xff)))
    for name, lname, value in (
        (b"X-Real-Ip", b"x-real-ip", client_ip),
        (b"X-Forwarded-Proto", b"x-forwarded-proto", proto),
        (b"X-Forwarded-Port", b"x-forwarded-port", port),
        (b"X-Forwarded-Host", b"x-forwarded-host", host),
    ):
        if value and lname not in present:
            out.append((name, value))
    if prefix:
        if b"x-forwarded-prefix" in present:
            out = [(n, v) for n, v in out if n.lower() != b"x-forwarded-prefix"]
        out.append((b"X-Forwarded-Prefix", prefix))
    edits = list(edits)
    if edits:
        names = {n.lower() for n, _ in edits}
        out = [(n, v) for n, v in out if n.lower() not in names]
        out.extend((n, v) for n, v in edits if v)
    return out


def auth_request_headers(
    headers: Iterable[Header],
    *,
    trust: bool | None,
    allowed: frozenset[bytes] | None,
    client_ip: bytes,
    tls: bool,
    method: bytes,
    host: bytes,
    uri: bytes,
) -> list[Header]:
    """The headers of the request to the auth server, from ``headers`` (the
    request's as the middleware sees them: :func:`entrypoint_headers`).

    Traefik's three behaviours: ``trust`` None (``trustForwardHeader`` unset: its
    oldWriteHeader) sets X-Forwarded-For, -Proto, -Method, -Host and -Uri over
    whatever came; False removes every X- header it manages, then sets those and
    X-Forwarded-Port; True keeps them as they are, setting only those absent
    (X-Forwarded-For gets the client's address appended). ``allowed`` (lowercased
    ``authRequestHeaders``; None: all) filters the client's before they are set,
    and with ``trust`` True includes the managed X- headers.
    """
    lowered = [(n.lower(), n, v) for n, v in headers]
    tokens = _connection_tokens((ln, v) for ln, _, v in lowered if ln == b"connection")
    out: list[Header] = []
    present: dict[bytes, bytes] = {}  # lowercased name -> its first value
    prior: list[bytes] = []  # X-Forwarded-For's values (trust set)
    for ln, name, value in lowered:
        if ln in _NOT_SENT or (ln in tokens and ln not in _MANAGED_X):
            continue
        if trust is False and ln in _MANAGED_X:
            continue
        if allowed is not None and ln not in allowed:
            continue
        if trust is None:
            if ln in _OLD_SET:
                continue
        elif ln == b"x-forwarded-for":
            prior.append(value)
            continue
        out.append((name, value))
        present.setdefault(ln, value)
    proto = b"https" if tls else b"http"
    if trust is None:
        out += (
            (b"X-Forwarded-For", client_ip),
            (b"X-Forwarded-Proto", proto),
            (b"X-Forwarded-Method", method),
            (b"X-Forwarded-Host", host),
            (b"X-Forwarded-Uri", uri),
        )
        return out
    out.append((b"X-Forwarded-For", b", ".join((*prior, client_ip))))
    if b"x-forwarded-method" not in present:
        out.append((b"X-Forwarded-Method", method))
    if b"x-forwarded-proto" not in present:
        out.append((b"X-Forwarded-Proto", proto))
    if b"x-forwarded-port" not in present:
        port = _forwarded_port(host, present.get(b"x-forwarded-proto"), tls)
        out.append((b"X-Forwarded-Port", port))
    if b"x-forwarded-host" not in present and host:
        out.append((b"X-Forwarded-Host", host))
    if b"x-forwarded-uri" not in present:
        out.append((b"X-Forwarded-Uri", uri))
    return out


_OLD_SET = frozenset(
    (
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-method",
        b"x-forwarded-host",
        b"x-forwarded-uri",
    )
)


def _forwarded_port(host: bytes, proto: bytes | None, tls: bool) -> bytes:
    """Traefik's forwardedPort: the Host's port, else 443 for https/wss or TLS, else 80."""
    if host.startswith(b"["):
        _, _, rest = host.partition(b"]")
        port = rest[1:] if rest.startswith(b":") else b""
    else:
        _, colon, port = host.rpartition(b":")
        if not colon:
            port = b""
    if port:
        return port
    if proto in (b"https", b"wss") or tls:
        return b"443"
    return b"80"


def copied_headers(
    request: Iterable[bytes],
    response: Iterable[Header],
    names: tuple[bytes, ...],
    regex: Matcher | None,
) -> list[Header]:
    """What a 2xx answer sets on the request (for :meth:`Forward.set_header`: an
    empty value removes): each of ``names`` (``authResponseHeaders``, canonical)
    replaced by the answer's values of it, or removed; with ``regex``, every
    header of the ``request`` (its names) whose canonical name matches removed,
    then every header of the answer whose canonical name matches added."""
    response = list(response)
    out: list[Header] = []
    for name in names:
        out.append((name, b""))
        lname = name.lower()
        out.extend((name, v) for n, v in response if n.lower() == lname)
    if regex is not None:
        for name in request:
            key = regex.match(name)
            if key is not None:
                out.append((key, b""))
        for name, value in response:
            key = regex.match(name)
            if key is not None:
                out.append((key, value))
    return out


class Matcher:
    """``authResponseHeadersRegex`` on Go's canonical header names: :meth:`match`
    gives a name's canonical form when it matches, else None. A route sees few
    names, so each verdict is kept (up to :data:`MATCHES_KEPT`, then made afresh)."""

    __slots__ = ("kept", "regex")

    def __init__(self, pattern: str) -> None:
        self.regex = GoRegexp(pattern, "authResponseHeadersRegex")
        self.kept: dict[bytes, bytes | None] = {}

    def match(self, name: bytes) -> bytes | None:
        try:
            return self.kept[name]
        except KeyError:
            pass
        key = canonical(name)
        verdict = key if self.regex.search(key) is not None else None
        if len(self.kept) < MATCHES_KEPT:
            self.kept[name] = verdict
        return verdict


def refusal(
    head: ResponseHead,
    body: bytes,
    *,
    address: str,
    preserve_location: bool,
) -> Answer:
    """The answer a non-2xx auth response makes: its status, headers (less the
    hop-by-hop and framing ones), Location resolved against ``address`` (Go's
    ``Response.Location``) unless ``preserve_location``, and body."""
    lines = []
    content_type = b""
    for name, value in head.headers:
        lname = name.lower()
        if lname not in _NOT_ANSWERED:
            lines.append(b"%s: %s\r\n" % (name, value))
        elif lname == b"content-type" and not content_type:
            content_type = value
    location = _get(head.headers, b"location")
    if location:
        if not preserve_location:
            text = location.decode("latin-1")
            with contextlib.suppress(ValueError):
                location = urljoin(address, text).encode("latin-1")
        lines.append(b"Location: %s\r\n" % location)
    return Answer(head.status, b"".join(lines), body, content_type)


def cookie_name(value: bytes) -> bytes:
    """The name of a Set-Cookie value (before its ``=``), trimmed as Go trims it."""
    return value.partition(b";")[0].partition(b"=")[0].strip(b" \t")


# -- the client --------------------------------------------------------------------


class AuthError(Exception):
    """No usable answer from the auth server (the reason, for the log)."""


class _TooLarge(Exception):
    pass


class _AuthConnection(asyncio.Protocol):
    """One connection to the auth server; owned by one request at a time, or idle.
    Refers to nothing of the pool or the middleware."""

    __slots__ = (
        "body",
        "dead",
        "ended",
        "head",
        "idle_deadline",
        "limit",
        "parser",
        "received",
        "size",
        "transport",
        "waiter",
    )

    def __init__(self, parser_cls: type) -> None:
        self.parser = parser_cls(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future | None = None
        self.head: ResponseHead | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.limit = -1
        self.ended = False
        self.received = False
        self.idle_deadline = 0.0  # while pooled: when it is closed unused
        self.dead = False  # it cannot serve another request

    def send(self, data: bytes, method: bytes, limit: int, waiter: asyncio.Future) -> None:
        self.waiter = waiter
        self.head = None
        self.body = []
        self.size = 0
        self.limit = limit
        self.ended = False
        self.received = False
        self.parser.expect(method)
        assert self.transport is not None
        self.transport.write(data)

    def abort(self) -> None:
        self.dead = True
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        self.dead = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _fail(self, exc: BaseException) -> None:
        waiter = self.waiter
        self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    # asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes on an idle connection: it cannot serve
            self.abort()
            return
        self.received = True
        try:
            self.parser.feed(data)
        except ProtocolError as exc:
            self.abort()
            self._fail(AuthError(f"invalid response: {exc.detail}"))
            return
        if self.ended and self.parser.held.lstrip(b"\r\n"):
            self.dead = True  # more than the answer came: not to be reused

    def eof_received(self) -> bool | None:
        self.dead = True
        if self.waiter is not None:
            try:
                self.parser.feed_eof()
            except ProtocolError as exc:
                self._fail(AuthError(f"invalid response: {exc.detail}"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.dead = True
        self._fail(ConnectionError(f"connection closed ({exc or 'EOF'})"))

    # parser events

    def on_head(self, head: ResponseHead) -> None:
        self.head = head

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        if 0 <= self.limit < self.size:
            self.abort()
            self._fail(_TooLarge())
            return
        self.body.append(data)

    def on_end(self) -> None:
        self.ended = True
        waiter = self.waiter
        self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_upgrade(self, rest: bytes) -> None:
        self.abort()
        self._fail(AuthError("the auth server switched protocols"))


class AuthPool:
    """The connections of one forwardAuth middleware to its server (module doc)."""

    __slots__ = (
        "closed",
        "error",
        "host",
        "idle",
        "loop",
        "open",
        "parser_cls",
        "port",
        "server_hostname",
        "ssl",
        "waiting",
    )

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        parser_cls: type,
        error: str | None = None,
    ) -> None:
        self.error = error  # why no request can be made (a TLS context not built)
        self.host = host
        self.port = port
        self.ssl = ssl_context
        self.server_hostname = host if ssl_context is not None else None
        self.parser_cls = parser_cls
        self.idle: list[_AuthConnection] = []
        self.loop: asyncio.AbstractEventLoop | None = None  # bound at the first request
        self.open = 0  # connections open or being dialed
        self.waiting: list[asyncio.Future] = []  # requests waiting for a connection slot
        self.closed = False

    async def exchange(
        self, request: bytes, method: bytes, limit: int, replayable: bool
    ) -> tuple[ResponseHead, bytes]:
        """Send ``request`` and read its answer, its body up to ``limit`` bytes (-1:
        no limit); raises AuthError, _TooLarge, OSError. The caller bounds the time."""
        if self.error is not None:
            raise AuthError(self.error)
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        conn = self._take(loop)
        reused = conn is not None
        if conn is None:
            conn = await self._dial(loop)
        try:
            while True:
                waiter = loop.create_future()
                conn.send(request, method, limit, waiter)
                try:
                    await waiter
                except ConnectionError:
                    if not (reused and not conn.received and replayable):
                        raise
                    # A pooled connection the server closed as it was reused: once more
                    # on a new one (Go's transport does so for a replayable request).
                    self._release(conn, keep=False)
                    conn = None
                    reused = False
                    conn = await self._dial(loop)
                    continue
                break
        except BaseException:
            if conn is not None:
                self._release(conn, keep=False)
            raise
        head = conn.head
        assert head is not None
        self._release(conn, keep=head.keep_alive)
        return head, b"".join(conn.body)

    def _take(self, loop: asyncio.AbstractEventLoop) -> _AuthConnection | None:
        idle = self.idle
        now = loop.time()
        while idle:
            conn = idle.pop()
            if conn.idle_deadline > now and not conn.dead:
                return conn
            self.open -= 1
            conn.close()
        return None

    async def _dial(self, loop: asyncio.AbstractEventLoop) -> _AuthConnection:
        while self.open >= MAX_CONNECTIONS:
            slot = loop.create_future()
            self.waiting.append(slot)
            try:
                await slot
            except BaseException:
                if slot.done() and not slot.cancelled():
                    self._wake()  # woken, and leaving: the slot goes to the next waiter
                raise
            finally:
                with contextlib.suppress(ValueError):
                    self.waiting.remove(slot)
            conn = self._take(loop)
            if conn is not None:
                return conn
        self.open += 1
        try:
            _, conn = await loop.create_connection(
                partial(_AuthConnection, self.parser_cls),
                self.host,
                self.port,
                ssl=self.ssl,
                server_hostname=self.server_hostname,
            )
        except BaseException:
            self.open -= 1
            self._wake()
            raise
        return conn  # type: ignore[return-value]

    def _release(self, conn: _AuthConnection, keep: bool) -> None:
        conn.waiter = None
        if (
            keep
            and not self.closed
            and conn.ended
            and not conn.dead
            and conn.transport is not None
            and not conn.transport.is_closing()
            and len(self.idle) < IDLE_KEPT
            and self.loop is not None
        ):
            conn.idle_deadline = self.loop.time() + IDLE_TIMEOUT
            self.idle.append(conn)
        else:
            self.open -= 1
            if conn.ended:
                conn.close()
            else:
                conn.abort()  # in the middle of an answer: nothing more is read
        self._wake()

    def _wake(self) -> None:
        for slot in self.waiting:
            if not slot.done():
                slot.set_result(None)
                break

    def close(self) -> None:
        """Close the idle connections, and those in use as they come back (the
        configuration that built this pool is gone). Safe from any thread."""
        loop = self.loop
        if loop is None:
            self.closed = True
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._close_now()
        elif not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._close_now)

    def _close_now(self) -> None:
        self.closed = True
        idle, self.idle = self.idle, []
        for conn in idle:
            self.open -= 1
            conn.close()


# -- the middleware -------------------------------------------------------------------


class ForwardAuth(Middleware):
    """Asks the auth server about each request before it goes on (module doc)."""

    __slots__ = (
        "__weakref__",
        "address",
        "allowed",
        "authorization",
        "cookies",
        "forward_body",
        "kept",
        "max_body",
        "max_response",
        "names",
        "pool",
        "preserve_location",
        "preserve_method",
        "regex",
        "request_line",
        "signin",
        "timeout",
        "trust",
    )

    def __init__(
        self,
        name: str,
        config: ForwardAuthConfig,
        pool: AuthPool,
        timeout: float = AUTH_TIMEOUT,
    ) -> None:
        super().__init__(name)
        c = config
        self.address = c.address
        _, _, _, authority, target = forward_auth_address(c.address)
        self.request_line = (target, b"Host: %s\r\n" % authority)
        parts = urlsplit(c.address)
        self.authorization = None
        if parts.username is not None:  # Go's client sends the URL's user as Basic auth
            user = unquote(parts.username) + ":" + unquote(parts.password or "")
            self.authorization = b"Basic " + base64.b64encode(user.encode())
        self.trust = c.trust_forward_header
        allowed = [h.encode().lower() for h in c.auth_request_headers]
        if allowed and self.trust:
            allowed += [h.lower() for h in _MANAGED_X_NAMES]
        self.allowed = frozenset(allowed) if allowed else None
        self.names = tuple(canonical(h.encode()) for h in c.auth_response_headers)
        self.regex = (
            Matcher(c.auth_response_headers_regex) if c.auth_response_headers_regex else None
        )
        self.cookies = frozenset(n.encode() for n in c.add_auth_cookies_to_response)
        self.max_response = c.max_response_body_size
        self.forward_body = c.forward_body
        self.max_body = c.max_body_size
        self.preserve_location = c.preserve_location_header
        self.preserve_method = c.preserve_request_method
        self.signin = c.auth_signin_url.encode()
        self.timeout = timeout  # seconds an auth request may take (AUTH_TIMEOUT)
        self.pool = pool
        # Per request in flight whose response gets auth cookies: the cookies (keyed
        # by the Forward's id, dropped when its exchange ends).
        self.kept: dict[int, list[bytes]] = {}
        weakref.finalize(self, pool.close)

    def _request(self, fwd: Forward, body: bytes | None = None) -> tuple[bytes, bytes]:
        """(the auth request's bytes, its method); ``body``: the client's, with
        ``forwardBody`` (framed as the client's was)."""
        head = fwd.head
        client = head.headers if head is not None else []
        tls = fwd.scheme == b"https"
        upgrade = head is not None and head.upgrade
        proto = (b"wss" if tls else b"ws") if upgrade else fwd.scheme
        port = _forwarded_port(fwd.authority, None, tls)
        seen = entrypoint_headers(
            client,
            trusted=fwd.trusted_head is not None,
            client_ip=fwd.client_ip.encode(),
            proto=proto,
            host=fwd.authority,
            port=port,
            prefix=fwd.prefix,
            edits=fwd.headers or (),
        )
        uri = fwd.path + b"?" + fwd.query if fwd.query else fwd.path
        headers = auth_request_headers(
            seen,
            trust=self.trust,
            allowed=self.allowed,
            client_ip=fwd.client_ip.encode(),
            tls=tls,
            method=fwd.method,
            host=fwd.authority,
            uri=uri,
        )
        method = fwd.method if self.preserve_method else b"GET"
        target, host_line = self.request_line
        out = [method, b" ", target, b" HTTP/1.1\r\n", host_line]
        for name, value in headers:
            out += (name, b": ", value, b"\r\n")
        if self.authorization is not None and not _has(headers, b"authorization"):
            out += (b"Authorization: ", self.authorization, b"\r\n")
        chunked = head is not None and head.chunked
        if body and not chunked:
            out += (b"Content-Length: %d\r\n\r\n" % len(body), body)
        elif body is not None and chunked:  # as Traefik copies TransferEncoding
            out.append(b"Transfer-Encoding: chunked\r\n\r\n")
            if body:
                out += (b"%x\r\n" % len(body), body, b"\r\n")
            out.append(b"0\r\n\r\n")
        else:  # no body: Go writes Content-Length: 0 for these methods without one
            out.append(b"Content-Length: 0\r\n\r\n" if method in _EMPTY_BODY_LENGTH else b"\r\n")
        return b"".join(out), method

    async def request_async(self, fwd: Forward) -> Answer | None:
        sent = None
        if self.forward_body:
            try:
                sent = await fwd.read_body(self.max_body)
            except BodyTooLarge:
                log.debug(
                    "middleware %s: the request body is over maxBodySize %d",
                    self.name,
                    self.max_body,
                )
                return Answer(401, b"", b"", b"")
        data, method = self._request(fwd, sent)
        try:
            async with asyncio.timeout(self.timeout):
                head, body = await self.pool.exchange(
                    data, method, self.max_response, method in _IDEMPOTENT and not sent
                )
        except _TooLarge:
            log.debug(
                "middleware %s: the auth answer's body is over maxResponseBodySize %d",
                self.name,
                self.max_response,
            )
            return Answer(401, b"", b"", b"")
        except (TimeoutError, OSError, AuthError, ssl.SSLError) as exc:
            reason = (
                f"no answer within {self.timeout:g}s"
                if isinstance(exc, TimeoutError)
                else str(exc) or type(exc).__name__
            )
            log.error("middleware %s: calling %s: %s", self.name, self.address, reason)
            return Answer(500, b"", b"", b"")
        status = head.status
        if status == 401 and self.signin:
            return _redirect(self.signin, fwd.method)
        if not 200 <= status < 300:
            return refusal(
                head, body, address=self.address, preserve_location=self.preserve_location
            )
        if self.names or self.regex is not None:
            client = fwd.head.headers if fwd.head is not None else []
            request_names = [n for n, _ in client]
            if fwd.headers:
                request_names += [n for n, v in fwd.headers if v]
            for name, value in copied_headers(request_names, head.headers, self.names, self.regex):
                fwd.set_header(name, value)
        if self.cookies:
            cookies = [
                v
                for n, v in head.headers
                if n.lower() == b"set-cookie" and cookie_name(v) in self.cookies
            ]
            if cookies and len(self.kept) < COOKIES_KEPT:
                key = id(fwd)
                self.kept[key] = cookies
                fwd.on_end(partial(self.kept.pop, key, None))
        return None

    def response(self, fwd: Forward, reply: Reply):  # type: ignore[no-untyped-def]
        cookies = self.kept.get(id(fwd)) if self.kept else None
        if cookies is None:
            return None
        names = self.cookies
        reply.headers = [
            (n, v)
            for n, v in reply.headers
            if n.lower() != b"set-cookie" or cookie_name(v) not in names
        ]
        reply.changed = True
        reply.headers.extend((b"Set-Cookie", c) for c in cookies)
        return None


def _redirect(url: bytes, method: bytes) -> Answer:
    """Go's ``http.Redirect`` to ``url`` with 302: a short HTML body for GET and HEAD."""
    body = b""
    if method in (b"GET", b"HEAD"):
        body = b'<a href="%s">Found</a>.\n\n' % _html_escape(url)
    return Answer(302, b"Location: %s\r\n" % url, body, b"text/html; charset=utf-8")


def _html_escape(text: bytes) -> bytes:
    for old, new in (
        (b"&", b"&amp;"),
        (b"<", b"&lt;"),
        (b">", b"&gt;"),
        (b'"', b"&#34;"),
        (b"'", b"&#39;"),
    ):
        text = text.replace(old, new)
    return text


def forward_auth(
    name: str, config: ForwardAuthConfig, timeout: float = AUTH_TIMEOUT
) -> ForwardAuth:
    """The middleware ``config`` describes, its client ready (TLS context built);
    ``timeout``: seconds an auth request may take (no key sets it: Traefik's is fixed)."""
    tls, host, port, _, _ = forward_auth_address(config.address)
    context = None
    error = None
    if tls:
        t = config.tls
        try:
            context = client_tls_context(
                insecure_skip_verify=t is not None and t.insecure_skip_verify,
                root_cas=[t.ca] if t is not None and t.ca else [],
                certificates=(
                    [ClientCertificate(cert_file=t.cert, key_file=t.key)]
                    if t is not None and t.cert
                    else []
                ),
            )
        except ConfigError as exc:  # what validation's reading could not tell (a file gone since)
            error = f"tls: {exc}"
            log.error("middleware %s: %s", name, error)
        else:
            context.set_alpn_protocols(["http/1.1"])
    pool = AuthPool(host, port, context, parser_classes("httptools")[1], error)
    return ForwardAuth(name, config, pool, timeout)
