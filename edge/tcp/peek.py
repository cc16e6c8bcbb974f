"""The peek: what a connection becomes on an entrypoint with TCP or TLS routers.

Owns :class:`Peek`, the protocol of a connection accepted on an entrypoint whose
router set has a connection-level router (:class:`edge.router.tcp.TCPRouter`), and
:class:`Relay`, a connection relayed to a TCP server as the entrypoint tracks it.
The peek reads the first bytes, parses them as a ClientHello
(:class:`~edge.tls.clienthello.ClientHelloParser`) and applies Traefik's precedence
(the router answers, this module acts):

1. a ``HostSNI(`*`)`` TCP router without TLS, on an entrypoint with nothing that
   needs a ClientHello, takes the connection at once, before it sends a byte;
2. not TLS: a TCP router without TLS, else HTTP (the HTTP routers; their 404);
3. TLS: passthrough to a TCP service, or termination with the certificate for
   the SNI followed by HTTP (HTTPS routers) or a relay to a TCP service; nothing
   for the name: a TLS alert.
4. PostgreSQL's STARTTLS (its SSLRequest first, on an entrypoint with TCP routers
   on TLS): answered ``S``, and the TLS that follows is routed by the TCP routers
   on TLS alone (Traefik's servePostgres); passthrough gives the server the
   SSLRequest and takes its ``S`` before the ClientHello goes.

Invariants:
- No byte is lost or reordered: everything read while peeking goes first to
  whatever the connection becomes (the TCP server, the TLS terminator, the HTTP
  protocol), before anything read later.
- A connection peeks for at most ``PeekContext.timeout`` seconds: it is in the
  entrypoint's ``connections`` with that deadline, which the entrypoint's sweep
  enforces (closed when it passes), and a drain closes it at once.
- A connection reads its router once, at arrival.
- The client is the peer, or the address a trusted PROXY protocol header named
  (``source``/``destination``, read before the peek by :mod:`edge.tcp.proxied`):
  ClientIP rules, TCP middlewares, the PROXY header edge sends on and the HTTP
  connection's Arrival all see that one.
- A route's TCP middlewares (:mod:`edge.tcp.middlewares`) admit the connection
  before a server is picked (after the handshake for a terminating router) and
  the relay leaves them exactly once when it ends.
- Every connection is tracked by the entrypoint while it lives: a peeking one by
  its :class:`Peek`, a relayed one by its :class:`Relay` (from the dial to the
  splice's end), an HTTP one by the HTTP protocol itself, a TLS handshake in
  progress by its :class:`~edge.tls.terminate.TLSTransport` (the handshake
  timeout, enforced by the same sweep).
- An entrypoint whose precedence needs no ClientHello (no TCP router, one set of
  TLS options for every HTTPS name) has no peek stage: its connections start as
  :class:`~edge.tls.terminate.TLSAccept` (:meth:`PeekContext.protocol`; after a
  PROXY protocol header too, with the client it named), and
  OpenSSL's SNI callback picks the certificate as the peek would have.

This module is glue: it never imports the router or the HTTP server (they sit
above it); the entrypoint hands it the router and the factories of the HTTP
protocols.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edge.deadlines import NO_DEADLINE, PEEK
from edge.tcp.proxyproto import encode_v1, encode_v2
from edge.tcp.reencrypt import dial_tls_splice
from edge.tcp.splice import CLIENT_KEEP_ALIVE, DialError, Pending, Splice, dial_splice, keep_alive
from edge.tls.clienthello import (
    NEED_MORE,
    NOT_TLS,
    PEEK_TIMEOUT,
    ClientHello,
    ClientHelloError,
    ClientHelloParser,
)
from edge.tls.terminate import (
    ALERT_INTERNAL_ERROR,
    ALERT_UNRECOGNIZED_NAME,
    HANDSHAKE_TIMEOUT,
    Acceptor,
    Handshakes,
    TLSAccept,
    refuse,
    start_tls,
)

if TYPE_CHECKING:
    from edge.entrypoints.base import Swept
    from edge.router.tcp import TCPRoute, TCPRouter
    from edge.tcp.middlewares import TCPChain

log = logging.getLogger("edge.tcp")

__all__ = ["Peek", "PeekContext", "Relay"]

# PostgreSQL's SSLRequest (int32 length 8, int32 code 80877103) and the server's yes.
POSTGRES_SSL_REQUEST = b"\x00\x00\x00\x08\x04\xd2\x16\x2f"
POSTGRES_SSL_YES = b"S"

Address = tuple[str, int]


class PeekContext:
    """What every connection of one entrypoint needs to become something.

    ``http(client)`` makes the HTTP protocol for a plain connection; ``https(sni,
    client, options)`` the one for a connection edge terminated under TLS
    ``options`` (X-Forwarded-Proto https; a Host needing other options gets 421);
    ``client`` is the (ip, port) a PROXY protocol header named, or the peer's
    (``https``; None for ``http``: the peer). ``connections`` is the entrypoint's set of live connections.
    """

    def __init__(
        self,
        *,
        name: str,
        loop: asyncio.AbstractEventLoop,
        connections: set[Swept],
        http: Callable[[Address | None], asyncio.Protocol],
        https: Callable[..., asyncio.Protocol],
        timeout: float = PEEK_TIMEOUT,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        self.name = name
        self.loop = loop
        self.connections = connections
        self.http = http
        self.https = https
        self.timeout = timeout
        self.handshake_timeout = handshake_timeout
        self.tasks: set[asyncio.Task] = set()  # dials in flight
        # What the relays of each (TCP router, service) did: read by the metrics at scrape.
        self.tcp_counters: dict[tuple[str, str], TCPCounters] = {}
        # How the TLS handshakes edge terminated here ended: read by the metrics too.
        self.handshakes = Handshakes()
        # What each relay calls when it ends (the access log's), set by the entry point.
        self.log_relay: Callable[[Relay], None] | None = None
        # The router the acceptor below was made for (see protocol()).
        self._router: TCPRouter | None = None
        self._acceptor: Acceptor | None = None

    def protocol(
        self, router: TCPRouter, source: Address | None = None, destination: Address | None = None
    ) -> asyncio.Protocol:
        """What a connection accepted under ``router`` starts as: a :class:`Peek`, or
        on an entrypoint that only terminates TLS into HTTPS under one set of TLS
        options, a :class:`~edge.tls.terminate.TLSAccept` (no peek stage: OpenSSL's
        SNI callback picks the certificate; see :meth:`acceptor`). ``source`` and
        ``destination``: what a PROXY protocol header named (see :class:`Peek`)."""
        if router is not self._router:
            self._router = router
            self._acceptor = self.acceptor(router)
        acceptor = self._acceptor
        if acceptor is None:
            return Peek(self, router, source, destination)
        return TLSAccept(acceptor, source)

    def acceptor(self, router: TCPRouter) -> Acceptor | None:
        """The :class:`Acceptor` for ``router`` when its precedence needs no ClientHello.

        That is: no TCP router (so nothing is relayed, and no TCP router on TLS
        can claim a name or an ALPN value before HTTPS), and every server name
        the HTTPS routers claim has the TLS options of the others (the default
        route's; Python cannot change an SSL object's verify mode, versions or
        ciphers once it exists, only its certificate). Then the precedence of
        :meth:`TCPRouter.tls` is: every TLS connection is terminated into HTTPS
        with those options and the certificate for its name; not TLS: HTTP.
        """
        route = router.https_any
        if len(router) or route is None:
            return None
        options = route.options
        if any(named.options != options for named in router.https_names.values()):
            return None
        context = router.certs.selecting_context(options)
        if (
            context is None
        ):  # unusable options or default certificate (the peek refuses them), or sniStrict with TLS 1.2
            return None
        return Acceptor(
            context=context,
            loop=self.loop,
            connections=self.connections,
            https=self.https,
            plain=self.plain_http,
            first_timeout=self.timeout,
            handshake_timeout=self.handshake_timeout,
            handshakes=self.handshakes,
        )

    def plain_http(
        self, transport: asyncio.Transport, first: bytes, source: Address | None = None
    ) -> None:
        """HTTP on a connection whose ``first`` bytes are not TLS and no TCP router took:
        the HTTP protocol takes the transport as if it had been its own from the start."""
        protocol = self.http(source)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(first)


class Peek(asyncio.Protocol):
    """The protocol of an accepted connection until its first bytes decide what it becomes."""

    def __init__(
        self,
        ctx: PeekContext,
        router: TCPRouter,
        source: Address | None = None,
        destination: Address | None = None,
    ) -> None:
        self.ctx = ctx
        self.router = router
        self.transport: asyncio.Transport | None = None
        self.client_ip = ""
        self.client: Address | None = None
        self.source = source  # the client a PROXY protocol header named (None: the peer)
        self.destination = destination  # the address it reached, per that header
        self.buf = b""
        self.parser = ClientHelloParser()
        # PostgreSQL STARTTLS: None undecided (TCP routers on TLS exist), True once
        # answered, False not (or not looked for).
        self.postgres: bool | None = None if router.starttls else False
        self.deadline_kind = NO_DEADLINE
        self.deadline = 0.0

    # -- asyncio callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = self.source or transport.get_extra_info("peername")
        ip = peer[0] if peer else ""
        if ip.startswith("::ffff:") and "." in ip:
            ip = ip[7:]
        self.client_ip = ip
        self.client = (ip, peer[1]) if peer else None
        # A HostSNI(`*`) TCP router without TLS, and nothing on this entrypoint that
        # needs to see a ClientHello: the connection is that router's now. A client
        # that waits for the server to speak first (SMTP, MySQL, SSH) would
        # otherwise wait out the peek (Traefik handles this case first for that reason).
        router = self.router
        route = router.at_once(ip) if router.immediate else None
        if route is not None:
            self._relay(route, b"")
            return
        self.ctx.connections.add(self)
        self.deadline_kind = PEEK
        self.deadline = self.ctx.loop.time() + self.ctx.timeout

    def data_received(self, data: bytes) -> None:
        buf = self.buf = self.buf + data if self.buf else data
        if self.postgres is None:
            buf = self._postgres(buf)
            if not buf:
                return
        try:
            hello = self.parser.parse(buf)
        except ClientHelloError as exc:
            log.debug("%s: %s: not a usable ClientHello: %s", self.ctx.name, self.client_ip, exc)
            self._leave()
            refuse(self.transport, exc.alert)  # type: ignore[arg-type]
            return
        if hello is NEED_MORE:
            return
        self._leave()
        self.buf = b""
        if self.postgres:
            self._starttls(hello, buf)
        elif hello is NOT_TLS:
            self._plain(buf)
        else:
            self._tls(hello, buf)  # type: ignore[arg-type]

    def _postgres(self, buf: bytes) -> bytes:
        """Look for PostgreSQL's SSLRequest, a byte at a time as Traefik does (a
        client that sends less and waits is not held up): what is left to peek
        (empty: wait for more). Answered ``S``, the ClientHello follows it."""
        n = len(buf)
        if n < 8 and buf == POSTGRES_SSL_REQUEST[:n]:
            return b""
        if buf[:8] != POSTGRES_SSL_REQUEST:
            self.postgres = False
            return buf
        self.postgres = True
        self.transport.write(POSTGRES_SSL_YES)  # type: ignore[union-attr]
        self.buf = buf = buf[8:]
        return buf

    def _starttls(self, hello: ClientHello | object, peeked: bytes) -> None:
        """TLS after PostgreSQL's STARTTLS: routed by the TCP routers on TLS only
        (Traefik's servePostgres); anything else is closed."""
        transport = self.transport
        assert transport is not None
        route = self.router.starttls_route(hello, self.client_ip) if hello is not NOT_TLS else None  # type: ignore[arg-type]
        if route is None:
            log.debug(
                "%s: %s: PostgreSQL STARTTLS with no TCP router for it; closed",
                self.ctx.name,
                self.client_ip,
            )
            if hello is NOT_TLS:
                transport.close()
            else:
                refuse(transport, ALERT_UNRECOGNIZED_NAME)
            return
        if route.mode == "passthrough":  # the server gets the SSLRequest first, and answers it
            self._relay(route, peeked, postgres=True)
        else:
            self._tls(hello, peeked, route)  # type: ignore[arg-type]

    def eof_received(self) -> bool:
        # The client stopped sending before its first bytes could decide anything.
        log.debug("%s: %s closed while its first bytes were read", self.ctx.name, self.client_ip)
        self._leave()
        return False  # close

    def connection_lost(self, exc: Exception | None) -> None:
        self._leave()
        self.transport = None

    # -- deadlines and drain (read by the entrypoint) -----------------------------------

    def deadline_passed(self) -> None:
        self._leave()
        if self.transport is not None:
            log.debug(
                "%s: %s sent no decisive first bytes within %gs; closed",
                self.ctx.name,
                self.client_ip,
                self.ctx.timeout,
            )
            self.transport.close()

    def shutdown(self) -> None:
        """The entrypoint drains: nothing is in flight on a peeking connection."""
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _leave(self) -> None:
        """No longer peeking: whatever the connection becomes tracks itself."""
        self.deadline_kind = NO_DEADLINE
        self.ctx.connections.discard(self)

    # -- the precedence, once the first bytes are in -------------------------------------

    def _plain(self, peeked: bytes) -> None:
        transport = self.transport
        assert transport is not None
        # Not TLS. A TCP router without TLS for this client (HostSNI(`*`), perhaps
        # with ClientIP) comes first: it asked for every connection, and Traefik
        # matches TCP routes before handing cleartext to HTTP.
        route = self.router.plain(self.client_ip)
        if route is not None:
            self._relay(route, peeked)
            return
        # Otherwise HTTP: the HTTP routers, whose 404 answers what none of them matches.
        self.ctx.plain_http(transport, peeked, self.source)

    def _tls(self, hello: ClientHello, peeked: bytes, route: TCPRoute | None = None) -> None:
        transport = self.transport
        assert transport is not None
        if route is None:
            route = self.router.tls(hello, self.client_ip)
        if route is None:
            # No HTTPS router and no TCP router on TLS wants this name: a TLS
            # client understands an alert, not a 404.
            log.debug(
                "%s: %s: no router for TLS server name %r",
                self.ctx.name,
                self.client_ip,
                hello.server_name,
            )
            refuse(transport, ALERT_UNRECOGNIZED_NAME)
            return
        if route.mode == "passthrough":  # edge.router.tcp.PASSTHROUGH
            # Passthrough: the backend terminates; it gets the ClientHello as sent.
            self._relay(route, peeked)
            return
        # Termination (an HTTPS router or a terminating TCP router): the certificate
        # for this name, under the route's TLS options, from this configuration's snapshot
        # (into HTTPS: offering only the ALPN names edge speaks to HTTP clients).
        certs = self.router.certs
        context = certs.context_for(hello.server_name, route.options, tcp=route.service is not None)
        if context is None:
            broken = certs.options_error(route.options) is not None
            log.debug(
                "%s: %s: TLS for %r refused: %s",
                self.ctx.name,
                self.client_ip,
                hello.server_name,
                f"TLS options {route.options!r} unusable"
                if broken
                else "no certificate for the name (sniStrict)",
            )
            self.ctx.handshakes.add("error")  # as the no-peek path counts its alert
            refuse(transport, ALERT_INTERNAL_ERROR if broken else ALERT_UNRECOGNIZED_NAME)
            return
        if route.service is None:
            # The client as read above (the HTTP connection need not ask the TLS transport).
            # Under the route's options: the request's Host must need those (snicheck).
            app: asyncio.Protocol = self.ctx.https(
                hello.server_name, self.source or self.client, route.options
            )
        else:
            app = _Terminated(self, route)
        start_tls(
            transport,
            context,
            app,
            peeked,
            handshake_timeout=self.ctx.handshake_timeout,
            connections=self.ctx.connections,
            handshakes=self.ctx.handshakes,
        )

    # -- relaying to a TCP service ----------------------------------------------------------

    def _relay(
        self,
        route: TCPRoute,
        first: bytes,
        client: asyncio.Transport | None = None,
        *,
        postgres: bool = False,
    ) -> None:
        """Dial a server of ``route``'s service and splice ``client`` (the raw transport by default) to it
        (``postgres``: the server must answer PostgreSQL's SSLRequest before ``first`` goes)."""
        client = client or self.transport
        assert client is not None and route.service is not None
        chain = route.middlewares
        if chain is not None:
            refused = chain.enter(self.client_ip)
            if refused is not None:
                log.debug(
                    "tcp router %s: middleware %s refuses %s; connection closed",
                    route.name,
                    refused.name,
                    self.client_ip,
                )
                client.close()
                return
        server = route.service.pick()
        if server is None:
            log.warning(
                "tcp router %s: service %s has no server; connection closed",
                route.name,
                route.service.name,
            )
            if chain is not None:
                chain.leave(self.client_ip)
            client.close()
            return
        # Park the client now: bytes that arrive before the splice exists are kept,
        # and the holder remembers the client's EOF or loss while the dial runs.
        held = Pending.attach(client)
        # A relay has no idle deadline: a client that vanishes is found by keep-alive
        # (Traefik's entrypoints: every accepted connection, a 3-minute period).
        keep_alive(self.transport, CLIENT_KEEP_ALIVE)  # type: ignore[arg-type]
        # The server learns who the client is: a PROXY header before any client byte
        # (and before TLS, to a server edge speaks TLS to).
        header = self._proxy_header(server.proxy_protocol, client) if server.proxy_protocol else b""
        relay = Relay(
            self.ctx.connections,
            held,
            chain,
            self.client_ip,
            self.ctx.tcp_counters,
            log=self.ctx.log_relay,
            peer=self.client,
        )
        task = self.ctx.loop.create_task(relay.run(route, server, header, first, postgres))
        self.ctx.tasks.add(task)
        task.add_done_callback(self.ctx.tasks.discard)

    def _proxy_header(self, version: int, client: asyncio.BaseTransport) -> bytes:
        """PROXY protocol ``version`` header: the client's address and the one it reached."""
        local = self.destination or client.get_extra_info("sockname")
        if self.client is None or not local:
            return encode_v2(None, None, command="LOCAL") if version == 2 else b"PROXY UNKNOWN\r\n"
        src, dst = self.client, (local[0], local[1])
        return encode_v1(src, dst) if version == 1 else encode_v2(src, dst)


class _Terminated(asyncio.Protocol):
    """The application of a TLS connection a terminating TCP router took: once the
    handshake is done, the plaintext stream is relayed to the router's service."""

    def __init__(self, peek: Peek, route: TCPRoute) -> None:
        self.peek = peek
        self.route = route

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.peek._relay(self.route, b"", transport)  # type: ignore[arg-type]


class TCPCounters:
    """Plain integers for one (TCP router, service) of an entry point: connections
    relayed (dialed), dials that failed, and the bytes each way of relays that ended
    (an open relay's are its splice's)."""

    __slots__ = (
        "bytes_to_client",
        "bytes_to_server",
        "connections",
        "dial_errors",
        "router",
        "service",
    )

    def __init__(self, router: str, service: str) -> None:
        self.router = router
        self.service = service
        self.connections = 0
        self.dial_errors = 0
        self.bytes_to_server = 0
        self.bytes_to_client = 0


class Relay:
    """A connection relayed to a TCP server, as the entrypoint tracks it (dial, then splice).

    ``chain`` (the route's TCP middlewares, which admitted the connection) is left
    once, when the relay ends: dial failed, or both sides of the splice gone.
    ``counters``: the entry point's :class:`TCPCounters` by (router, service).
    ``log``: called with the relay once it ended (the access log's; see
    :mod:`edge.entrypoints.accesslog`), ``peer`` the client's (ip, port).
    """

    __slots__ = (
        "chain",
        "client",
        "client_ip",
        "connections",
        "counted",
        "counters",
        "log",
        "opened",
        "peer",
        "route_name",
        "server",
        "splice",
    )
    deadline_kind = NO_DEADLINE
    deadline = 0.0

    def __init__(
        self,
        connections: set[Swept],
        client: Pending,
        chain: TCPChain | None = None,
        client_ip: str = "",
        counters: dict[tuple[str, str], TCPCounters] | None = None,
        *,
        log: Callable[[Relay], None] | None = None,
        peer: Address | None = None,
    ) -> None:
        self.connections = connections
        self.client = client  # the client's transport, parked until the splice takes it
        self.splice: Splice | None = None
        self.chain = chain
        self.client_ip = client_ip
        self.counters = counters
        self.counted: TCPCounters | None = None  # this relay's, once its server is known
        self.log = log
        self.peer = peer
        self.opened = time.monotonic() if log is not None else 0.0
        self.route_name = ""  # the router's and the server picked, once run
        self.server: Any = None
        connections.add(self)

    async def run(
        self, route: TCPRoute, server: Any, header: bytes, first: bytes, postgres: bool = False
    ) -> None:
        self.route_name = route.name
        self.server = server
        if self.counters is not None:
            key = (route.name, server.service)
            counted = self.counted = self.counters.get(key)
            if counted is None:
                counted = self.counted = self.counters[key] = TCPCounters(*key)
        try:
            if server.tls is None:
                self.splice = await dial_splice(
                    self.client,
                    server.host,
                    server.port,
                    first=first if postgres else header + first,
                    timeout=server.dial_timeout,
                    termination_delay=server.termination_delay,
                    on_close=self._closed,
                    preamble=(header + POSTGRES_SSL_REQUEST, POSTGRES_SSL_YES)
                    if postgres
                    else None,
                    keep_alive_period=server.keep_alive,
                )
            else:
                self.splice = await dial_tls_splice(
                    self.client,
                    server.host,
                    server.port,
                    context=server.tls,
                    server_hostname=server.server_name,
                    header=header,
                    first=first,
                    timeout=server.dial_timeout,
                    termination_delay=server.termination_delay,
                    on_close=self._closed,
                    keep_alive_period=server.keep_alive,
                )
        except Exception as exc:  # a DialError, or a defect: either way the client is told
            if isinstance(exc, DialError):
                log.warning(
                    "tcp router %s: service %s: %s; connection closed",
                    route.name,
                    server.service,
                    exc,
                )
            else:
                log.exception(
                    "tcp router %s: service %s: dial %s failed; connection closed",
                    route.name,
                    server.service,
                    server.address,
                )
            if self.counted is not None:
                self.counted.dial_errors += 1
            self._end()
            if self.client.transport is not None:
                self.client.transport.close()
            return
        if self.counted is not None:
            self.counted.connections += 1
        if self.splice.closed:
            self._end()

    def _closed(self, _: Splice) -> None:
        self._end()

    def _end(self) -> None:
        if self in self.connections:  # the first end: the bytes are counted once
            counted, splice = self.counted, self.splice
            if counted is not None and splice is not None:
                counted.bytes_to_server += splice.bytes_a_to_b
                counted.bytes_to_client += splice.bytes_b_to_a
            if self.log is not None:
                self.log(self)
        self.connections.discard(self)
        chain, self.chain = self.chain, None  # left once, however the relay ends
        if chain is not None:
            chain.leave(self.client_ip)

    def deadline_passed(self) -> None: ...

    def shutdown(self) -> None: ...  # a relay ends when its peers end it, or at the drain's end

    def abort(self) -> None:
        if self.splice is not None:
            self.splice.abort()
        elif self.client.transport is not None:
            self.client.transport.abort()
