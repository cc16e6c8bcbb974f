"""TLS termination over a transport that is already open: ``ssl.SSLObject`` + ``MemoryBIO``.

:func:`start_tls` takes a connection whose first bytes were already read (the
peek that found the ClientHello), installs a :class:`TLSTransport` as its
protocol, replays those bytes into the handshake, and once the handshake is
done hands the application protocol (the HTTP server's connection, a splice) a
transport it cannot tell from a socket's: plaintext in, plaintext out.
:func:`connect_tls` is the same transport as a client (``servers[].tls``: edge
re-encrypting to a TCP server), awaited until its handshake is done; unlike
asyncio's ``start_tls`` transports it half-closes under TLS 1.3.

:class:`TLSTransport` is both sides of the seam: to the raw transport it is the
protocol (``data_received``, ``eof_received``, ``connection_lost``,
``pause_writing``/``resume_writing``), to the application the transport
(``write``, ``close``, ``pause_reading``, ``get_extra_info``, ...): it is an
``asyncio.Transport`` and an ``asyncio.Protocol`` at once.

Invariants:
- No byte is lost or reordered: the peeked bytes enter the incoming BIO before any
  later read; encrypted output leaves in the order OpenSSL produced it.
- The application sees nothing before the handshake completes: no
  ``connection_made`` for a refused client; a failed handshake sends the alert
  OpenSSL produced and closes (logged at debug, with the reason).
- Encrypted output is written to the raw transport as soon as it is produced,
  so the raw transport's write buffer is the only buffer: its flow control is
  the application's (``pause_writing`` passes through), and the application's
  ``pause_reading`` pauses the raw transport. One exception: a TLS 1.3 server's
  session tickets (and anything OpenSSL produces while reading before edge
  first sends) leave with edge's first write, close_notify or flush, not in a
  write of their own (one write per connection less; a client has sent its
  request by then, and nothing it waits for is held).
- Per read: one BIO write, one ``SSLObject.read`` per record until the incoming
  BIO is empty (no read that can only fail), one ``data_received`` with
  everything decrypted; per ``write``/``writelines``: one ``SSLObject.write``
  and one raw write.
- Ends as on a socket: the peer's close_notify or TCP FIN (a truncation) is one
  ``eof_received`` for the application, whose answer keeps the connection open
  or closes it; ``close()`` sends close_notify after what is buffered.
  ``can_write_eof()`` is true under TLS 1.3 only (TLS 1.2 expects the peer to
  close at once): ``write_eof()`` sends close_notify and FIN, and once both
  halves have ended the connection closes by itself.

Handshake deadline: ``handshake_timeout`` seconds (10 by default, 0 for none)
from :func:`start_tls`; past it the connection is aborted. The peek before it
is the caller's to bound.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from edge.deadlines import HANDSHAKE, NO_DEADLINE

if TYPE_CHECKING:
    from edge.entrypoints.base import Swept

log = logging.getLogger("edge.tls")

__all__ = [
    "ALERT_HANDSHAKE_FAILURE",
    "ALERT_INTERNAL_ERROR",
    "ALERT_UNRECOGNIZED_NAME",
    "HANDSHAKE_TIMEOUT",
    "Acceptor",
    "Handshakes",
    "TLSAccept",
    "TLSTransport",
    "connect_tls",
    "refuse",
    "start_tls",
]

HANDSHAKE_TIMEOUT = 10.0
Address = tuple[str, int]
READ_SIZE = 16 * 1024 + 256  # SSLObject.read returns one record at most (16 KiB of plaintext)

# TLS alert descriptions (RFC 8446 6.2) a caller may refuse a ClientHello with.
ALERT_HANDSHAKE_FAILURE = 40
ALERT_INTERNAL_ERROR = 80
ALERT_UNRECOGNIZED_NAME = 112


def refuse(transport: asyncio.WriteTransport, description: int = ALERT_UNRECOGNIZED_NAME) -> None:
    """Answer a ClientHello with a fatal alert and close (no handshake: nothing to
    encrypt, so the alert is a plain record, as a TLS server sends it before keys exist).

    For a refusal decided before any TLS state exists: no certificate for the name
    under ``sniStrict`` (``unrecognized_name``), no router for it.
    """
    transport.write(bytes((21, 3, 3, 0, 2, 2, description)))  # alert record: fatal, description
    transport.close()


class Handshakes:
    """How the handshakes of one entry point's terminated TLS connections ended, read
    by the metrics at scrape (``edge_tls_handshakes_total``): (outcome, TLS version) ->
    count. Outcomes: ``ok`` (with the version, Traefik's way: ``1.3``), ``error`` (a
    TLS error or alert, a refusal by ``sniStrict`` included), ``closed`` (the client
    left first), ``timeout``."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, outcome: str, version: str = "") -> None:
        key = (outcome, version)
        self.counts[key] = self.counts.get(key, 0) + 1


def start_tls(
    raw: asyncio.Transport,
    context: ssl.SSLContext,
    protocol: asyncio.Protocol,
    peeked: bytes = b"",
    *,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
    connections: set[Swept] | None = None,
    handshakes: Handshakes | None = None,
) -> TLSTransport:
    """Terminate TLS on ``raw``, starting with the bytes already read from it.

    ``protocol.connection_made(tls_transport)`` is called when the handshake is
    done; nothing is called on it if the handshake fails. Call on the loop's thread.
    ``connections``: the entrypoint's set of live connections, whose sweep then
    enforces the handshake deadline (the transport is in it until the handshake
    ends); without it, a timer of the loop does. ``handshakes``: where its outcome
    is counted.
    """
    tls = TLSTransport(raw, context, protocol, handshake_timeout, connections=connections)
    tls._handshakes = handshakes
    raw.set_protocol(tls)
    if not raw.is_reading():
        raw.resume_reading()
    if peeked:
        tls.data_received(peeked)
    return tls


async def connect_tls(
    raw: asyncio.Transport,
    context: ssl.SSLContext,
    protocol: asyncio.Protocol,
    server_hostname: str | None,
    *,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
) -> TLSTransport:
    """The client side: speak TLS as a client on ``raw`` (a connection just made) and
    return once the handshake is done; ``protocol.connection_made`` has then been called.

    Unlike asyncio's ``loop.start_tls``, the transport can half-close under TLS 1.3
    (``write_eof``: close_notify, then FIN, and reading goes on). Raises the
    ``ssl.SSLError`` of a failed handshake, ``ConnectionError`` when the server
    closes during it, ``TimeoutError`` past ``handshake_timeout`` (0: none; the
    caller may bound it instead); the raw transport is then closed or aborted.
    """
    waiter = asyncio.get_running_loop().create_future()
    tls = TLSTransport(
        raw, context, protocol, handshake_timeout, server_hostname=server_hostname, waiter=waiter
    )
    raw.set_protocol(tls)
    if not raw.is_reading():
        raw.resume_reading()
    tls._handshake()  # the ClientHello
    await waiter
    return tls


class TLSTransport(asyncio.Transport, asyncio.Protocol):
    """The application's transport over one TLS connection; the raw transport's protocol."""

    __slots__ = (
        "_app",
        "_closing",
        "_connected",
        "_connections",
        "_context",
        "_encrypt",
        "_eof",
        "_eof_written",
        "_failed",
        "_handshakes",
        "_held",
        "_in",
        "_out",
        "_raw",
        "_raw_eof",
        "_read_record",
        "_reading_paused",
        "_server",
        "_ssl",
        "_sslobj",
        "_timer",
        "_waiter",
        "_writing_paused",
        "deadline",
        "deadline_kind",
    )

    def __init__(
        self,
        raw: asyncio.Transport,
        context: ssl.SSLContext,
        protocol: asyncio.Protocol,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        *,
        server_hostname: str | None = None,
        waiter: asyncio.Future | None = None,
        connections: set[Swept] | None = None,
    ) -> None:
        """Server side unless ``server_hostname`` is given (see :func:`connect_tls`);
        ``waiter`` gets the handshake's outcome (None, or the exception); ``connections``
        (see :func:`start_tls`) bounds the handshake instead of a timer."""
        # (asyncio.BaseTransport.__init__ only makes the extra-info dict, unused here.)
        self._raw = raw
        self._context = context
        self._app = protocol
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        # Edge calls the C object under ssl.SSLObject (CPython's ``_sslobj``): the
        # wrapper's methods are these calls, one Python frame more each. A server side
        # is made without the wrapper (three Python calls per connection), which is
        # made if the application asks for it (``get_extra_info("ssl_object")``).
        self._ssl: ssl.SSLObject | None
        if server_hostname is None:
            self._ssl = None
            sslobj = context._wrap_bio(  # type: ignore[attr-defined]  # CPython's, see above
                self._in, self._out, server_side=True, server_hostname=None
            )
        else:
            self._ssl = context.wrap_bio(
                self._in, self._out, server_side=False, server_hostname=server_hostname
            )
            sslobj = self._ssl._sslobj  # type: ignore[attr-defined]
        self._sslobj = sslobj
        self._waiter = waiter
        self._read_record = sslobj.read
        self._encrypt = sslobj.write
        self._connected = False  # handshake done, app protocol told
        self._failed = False  # handshake failed or timed out: ignore whatever comes
        self._handshakes: Handshakes | None = None  # where the outcome is counted
        self._closing = False
        self._eof = False  # the application was told the peer is done sending
        self._raw_eof = False  # the peer's TCP FIN arrived
        self._eof_written = False  # write_eof: our close_notify and FIN are sent
        self._reading_paused = False  # by the application
        self._writing_paused = False  # by the raw transport
        # Server side, from the handshake's end until edge first sends: OpenSSL's
        # session tickets wait in the outgoing BIO to leave in one write with the
        # first response (or close_notify) instead of a write of their own.
        self._held = False
        self._server = server_hostname is None
        self._timer: asyncio.TimerHandle | None = None
        self._connections: set[Swept] | None = None
        self.deadline_kind = NO_DEADLINE
        self.deadline = 0.0
        if handshake_timeout > 0:
            loop = asyncio.get_running_loop()
            if connections is None:
                self._timer = loop.call_later(handshake_timeout, self._handshake_timed_out)
            else:
                # In the entrypoint's set, whose sweep reads the deadline (cheaper than
                # a timer per connection); left when the handshake ends.
                self._connections = connections
                self.deadline_kind = HANDSHAKE
                self.deadline = loop.time() + handshake_timeout
                connections.add(self)

    # -- raw side: the protocol of the raw transport ---------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Not called: the raw transport was made before this protocol was installed."""

    def data_received(self, data: bytes) -> None:
        if not self._connected:
            if not self._failed:
                self._handshake_data(data)
            return
        incoming = self._in
        incoming.write(data)
        if self._reading_paused:
            return  # left in the BIOs until resume_reading
        # The common case in this frame: the read was whole records of application
        # data, and reading them made OpenSSL answer nothing: hand them on.
        try:
            chunk = self._read_record(READ_SIZE)
        except ssl.SSLWantReadError:  # not a whole record yet
            if self._out.pending and not self._held:
                self._flush()
            return
        except ssl.SSLError:  # close_notify after ours, or a fatal error: _read says which
            self._read()
            return
        if chunk and not incoming.pending and not self._out.pending:
            self._app.data_received(chunk)
            return
        self._read(chunk)

    def eof_received(self) -> bool | None:
        # TCP EOF: with or after close_notify, or a truncation; the application
        # decides either way, as it would on a socket.
        if not self._connected:
            if not self._failed:
                self._fail("connection closed during the handshake", outcome="closed")
            return False
        self._raw_eof = True
        if self._eof or self._closing:
            # Told already (close_notify), or closing on our side: once both halves
            # are done nothing can happen any more, so the connection closes.
            return not self._eof_written
        self._eof = True
        if not self._app.eof_received():
            self.close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if not self._connected and not self._failed and self._handshakes is not None:
            self._handshakes.add("closed")  # reset during the handshake
        if self._waiter is not None:
            self._settle(exc or ConnectionResetError("connection lost during the TLS handshake"))
        if self._timer is not None or self._connections is not None:
            self._end_deadline()
        if self._connected:
            self._connected = False
            self._app.connection_lost(exc)

    def pause_writing(self) -> None:
        self._writing_paused = True
        if self._connected:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._connected:
            self._app.resume_writing()

    # -- deadlines and drain (read by the entrypoint while the handshake runs) ---------

    def deadline_passed(self) -> None:
        self._handshake_timed_out()

    def shutdown(self) -> None:
        """The entrypoint drains: nothing is in flight before the handshake's end."""
        if self._raw is not None:
            self._raw.close()

    def _end_deadline(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        connections = self._connections
        if connections is not None:
            self._connections = None
            self.deadline_kind = NO_DEADLINE
            connections.discard(self)

    # -- handshake ------------------------------------------------------------------

    def _handshake_data(self, data: bytes) -> None:
        self._in.write(data)
        self._handshake()

    def _handshake(self) -> None:
        try:
            # A client's through its wrapper, whose class its context may choose to
            # check more (peerCertSANs: edge.config.runtime.client_tls_context).
            (self._sslobj if self._ssl is None else self._ssl).do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except ssl.SSLError as exc:
            self._flush()  # the alert OpenSSL produced
            self._fail(f"handshake failed: {exc.reason or exc}", exc)
            return
        version = self._sslobj.version()
        if self._server and version == "TLSv1.3":
            self._held = True  # TLS 1.3 session tickets: sent with the first response
        else:
            self._flush()  # the client's Finished; a TLS 1.2 server's last flight
        if self._handshakes is not None:
            self._handshakes.add("ok", version.removeprefix("TLSv"))
        if self._timer is not None or self._connections is not None:
            self._end_deadline()
        self._connected = True
        app = self._app
        if app is None:  # TLSAccept: made now, with what the handshake said
            app = self._app = self._make_app()
        app.connection_made(self)
        if self._waiter is not None:
            self._settle(None)
        if self._writing_paused:
            self._app.pause_writing()
        if self._in.pending and not self._closing:
            self._read()  # data sent with the client's Finished

    def _make_app(self) -> asyncio.Protocol:
        raise NotImplementedError  # only TLSAccept starts without its application

    def _handshake_timed_out(self) -> None:
        self._timer = None
        self._end_deadline()
        if not self._connected and not self._failed:
            self._failed = True
            if self._handshakes is not None:
                self._handshakes.add("timeout")
            log.debug("TLS with %s: no handshake within its timeout; aborted", self._peer())
            self._settle(TimeoutError("no TLS handshake within its timeout"))
            self._raw.abort()

    def _fail(self, why: str, exc: BaseException | None = None, outcome: str = "error") -> None:
        self._failed = True
        if self._handshakes is not None:
            self._handshakes.add(outcome)
        log.debug("TLS with %s: %s", self._peer(), why)
        self._settle(exc or ConnectionResetError(why))
        self._raw.close()

    def _settle(self, exc: BaseException | None) -> None:
        """Tell :func:`connect_tls` how the handshake ended (once)."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def _peer(self) -> str:
        peer = self._raw.get_extra_info("peername")
        return f"{peer[0]}:{peer[1]}" if peer else "?"

    # -- reading --------------------------------------------------------------------

    def _read(self, first: bytes | None = None) -> None:
        """Read every whole record in the incoming BIO; ``first``: one read already."""
        if self._reading_paused:
            return  # left in the BIOs until resume_reading
        read = self._read_record
        incoming = self._in
        chunks = []
        peer_closed = False
        try:
            chunk = read(READ_SIZE) if first is None else first
            while True:
                if not chunk:  # close_notify
                    peer_closed = True
                    break
                chunks.append(chunk)
                if not incoming.pending:  # READ_SIZE takes a whole record: nothing is left
                    break
                chunk = read(READ_SIZE)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            # close_notify after ours (write_eof): CPython returns b"" for a close_notify
            # only while ours is unsent, and raises this once both are.
            peer_closed = True
        except ssl.SSLError as exc:
            if self._out.pending:
                self._flush()
            log.debug("TLS from %s: %s; closed", self._peer(), exc.reason or exc)
            self._closing = True
            self._raw.close()
            return
        if self._out.pending and not self._held:  # e.g. an answer to a KeyUpdate
            self._flush()
        if chunks:
            self._app.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if peer_closed and self._connected and not self._closing and not self._eof:
            self._eof = True
            if not self._app.eof_received():
                self.close()

    # -- writing --------------------------------------------------------------------

    def _flush(self) -> None:
        self._held = False
        data = self._out.read()
        if data:
            self._raw.write(data)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        try:
            self._encrypt(data)
        except ssl.SSLError as exc:
            log.debug("TLS to %s: write failed: %s; aborted", self._peer(), exc.reason or exc)
            self.abort()
            return
        self._held = False
        self._raw.write(self._out.read())

    def writelines(self, list_of_data) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        # TLS 1.3 lets a side close its half with close_notify and keep reading;
        # TLS 1.2 expects the peer to close at once.
        return self._connected and self._sslobj.version() == "TLSv1.3"

    def write_eof(self) -> None:
        if self._closing or self._eof_written:
            return
        self._eof_written = True
        self._send_close_notify()
        if self._raw_eof:
            self._raw.close()  # the peer's half ended already: nothing is left to do
        else:
            self._raw.write_eof()

    def _send_close_notify(self) -> None:
        # SSLWantReadError: ours is sent, the peer's is not read (edge does not wait for
        # it). try/except, not contextlib.suppress: a context manager per connection costs more.
        try:  # noqa: SIM105
            self._sslobj.shutdown()
        except ssl.SSLError:
            pass
        self._flush()

    # -- the application's transport --------------------------------------------------

    def close(self) -> None:
        """Send close_notify after what is buffered, then close the raw transport."""
        if self._closing:
            return
        self._closing = True
        if self._connected:
            self._send_close_notify()
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        if not self._reading_paused:
            self._reading_paused = True
            self._raw.pause_reading()

    def resume_reading(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            self._raw.resume_reading()
            if self._connected and (self._in.pending or self._sslobj.pending()):
                self._read()

    def is_reading(self) -> bool:
        return not self._reading_paused and not self._closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        # Every application edge hands a transport to reads it (an asyncio.Protocol).
        self._app = cast(asyncio.Protocol, protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._app

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._ssl_object()
        if name == "sslcontext":
            return self._context
        if name == "peercert":
            return self._sslobj.getpeercert() if self._connected else default
        if name == "cipher":
            return self._sslobj.cipher() if self._connected else default
        return self._raw.get_extra_info(name, default)

    def _ssl_object(self) -> ssl.SSLObject:
        """The ``ssl.SSLObject`` over this connection's C object, made on first use."""
        obj = self._ssl
        if obj is None:
            obj = self._ssl = ssl.SSLObject.__new__(ssl.SSLObject)
            obj._sslobj = self._sslobj  # type: ignore[attr-defined]
            self._sslobj.owner = obj
        return obj


class Acceptor:
    """What every connection :class:`TLSAccept` takes on one entrypoint needs (one per
    router snapshot; see :class:`TLSAccept`).

    ``context`` chooses each connection's certificate in OpenSSL's SNI callback
    (:meth:`edge.tls.certs.TLSCertificates.selecting_context`); ``https(sni, client)``
    makes the application once the handshake is done; ``plain(raw, data, client)``
    takes a connection whose first bytes are not TLS (``client``: the address a PROXY
    protocol header named, None for the peer). ``first_timeout``: seconds from the
    accept for the first bytes; ``handshake_timeout``: from the accept for the
    whole handshake (0: no bound once the first bytes are in).
    """

    __slots__ = (
        "connections",
        "context",
        "extend",
        "first_timeout",
        "handshakes",
        "https",
        "loop",
        "plain",
    )

    def __init__(
        self,
        *,
        context: ssl.SSLContext,
        loop: asyncio.AbstractEventLoop,
        connections: set[Swept],
        https: Callable[[str | None, Address | None], asyncio.Protocol],
        plain: Callable[[asyncio.Transport, bytes, Address | None], None],
        first_timeout: float,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        handshakes: Handshakes | None = None,
    ) -> None:
        self.context = context
        self.handshakes = handshakes  # where each handshake's outcome is counted
        self.loop = loop
        self.connections = connections
        self.https = https
        self.plain = plain
        self.first_timeout = first_timeout
        # Added to the first bytes' deadline when they come (None: no deadline then).
        self.extend = max(0.0, handshake_timeout - first_timeout) if handshake_timeout > 0 else None


class TLSAccept(TLSTransport):
    """A connection that is TLS from its first byte, terminated with no peek stage.

    The accepted connection's own protocol (no handoff): on an entrypoint whose
    every TLS connection is terminated into HTTPS under one set of TLS options,
    the first bytes go straight into the handshake and OpenSSL's SNI callback
    picks the certificate (``context``, ``sni``: set by that callback), so no
    ClientHello is parsed in Python. With no certificate to choose among (only
    the default one, no ``sniStrict``) the context has no callback and ``sni``
    stays None (the HTTP connection's ``Arrival.sni``, which nothing reads yet). First bytes that are not a TLS record
    (byte 22) are not TLS: the connection is ``Acceptor.plain``'s. The application
    (``Acceptor.https``) is made when the handshake is done.

    Deadlines, enforced by the entrypoint's sweep (the transport is in its
    ``connections`` until the handshake ends): the first bytes within
    ``first_timeout`` of the accept, the handshake done within
    ``handshake_timeout`` of it.
    """

    __slots__ = ("__weakref__", "_acceptor", "_client", "_started", "sni")

    def __init__(self, acceptor: Acceptor, client: Address | None = None) -> None:
        """``client``: the address a PROXY protocol header named (None: the peer)."""
        super().__init__(None, acceptor.context, None, 0)  # type: ignore[arg-type]
        self._acceptor = acceptor
        self._client = client
        self._started = False  # the first bytes came, and were TLS
        self.sni: str | None = None
        if acceptor.context.sni_callback is not None:
            # The SNI callback is handed this object (the C object's owner), whose
            # ``sni`` and ``context`` it sets.
            self._sslobj.owner = self

    @property
    def context(self) -> ssl.SSLContext:
        return self._context

    @context.setter
    def context(self, context: ssl.SSLContext) -> None:
        """The certificate's context, chosen during the handshake (OpenSSL's SNI callback)."""
        self._context = context
        self._sslobj.context = context

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = transport  # type: ignore[assignment]
        acceptor = self._acceptor
        self._connections = acceptor.connections
        self.deadline_kind = HANDSHAKE
        self.deadline = acceptor.loop.time() + acceptor.first_timeout
        acceptor.connections.add(self)

    def _handshake_data(self, data: bytes) -> None:
        if not self._started:  # the first bytes
            acceptor = self._acceptor
            if data[0] != 22:  # not a TLS handshake record: not TLS
                self._failed = True  # nothing more comes here
                self._end_deadline()
                acceptor.plain(self._raw, data, self._client)
                return
            self._started = True
            self._handshakes = acceptor.handshakes  # a TLS handshake: its outcome counts
            if acceptor.extend is None:
                self.deadline_kind = NO_DEADLINE  # tracked still, for a drain
            else:
                self.deadline += acceptor.extend
        self._in.write(data)
        self._handshake()

    def _make_app(self) -> asyncio.Protocol:
        return self._acceptor.https(self.sni, self._client)
