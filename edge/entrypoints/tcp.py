"""The TCP entrypoint: one listening address, and what each connection becomes.

A :class:`TCPEntryPoint` binds one TCP address and holds the current
:class:`~edge.router.set.RouterSet` in a single attribute of its shared
context; :meth:`switch` replaces it with one assignment, so a request reads
either the old routers or the new ones, never a mix, and requests already
routed finish where they are.

What a connection becomes (:meth:`TCPEntryPoint.arrive`): on an entrypoint with
no TCP router and no HTTPS router, HTTP at once (the HTTP protocol is the
accepted connection's own: plain HTTP pays nothing); otherwise the peek
(:mod:`edge.tcp.peek`), which applies Traefik's precedence: raw TCP, TLS
passthrough, TLS terminated into HTTPS or a TCP relay, or plain HTTP. Two HTTP
contexts share the entrypoint's connections: ``http`` for plain requests and
``https`` for requests on TLS edge terminated (X-Forwarded-Proto https, port 443
by default).

Entry point options decided here, before routing:

- ``proxyProtocol``: every connection first goes through
  :class:`~edge.tcp.proxied.ProxyHeaderReader`, which reads a PROXY protocol
  header from a trusted peer (refuses one from anyone else) and then makes the
  connection what it would have been, with the client address the header named
  (``Arrival(client=...)`` for HTTP, the peek's source for TCP routers).
- ``http.redirections.entryPoint``: the plain HTTP router slot holds a
  :class:`RedirectRouter`, which answers every request naming a host with a
  redirect to the target entry point (Traefik's internal router
  ``HostRegexp(`^.+$`)`` at its ``priority``, the highest but one by default:
  routers ranked above it still answer); the express path defers to it as to
  any route with a middleware. A target entry point on port 0 is named with
  the port it was bound to (:meth:`TCPEntryPoint.bound`). HTTPS on this entry
  point is routed as usual.
- ``http.tls`` is applied to the routers by the runtime validation
  (:class:`~edge.config.static.EntryPointKind`).

With ``reuse_port`` (worker processes, ``workers: N``) each process binds the same
port with SO_REUSEPORT and the kernel spreads new connections among them; the entry
point's ``reusePort`` sets SO_REUSEPORT alone, for other processes to share the port.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

import msgspec

from edge.config.static import EntryPoint, RedirectEntryPoint
from edge.descriptors import Budget
from edge.entrypoints.base import SWEEP_MAX, SWEEP_MIN, Swept, format_address
from edge.http.codec.parsers import parser_classes
from edge.http.middlewares import Answer, Forward, Middleware, Pipeline
from edge.http.middlewares.builtin import RedirectScheme
from edge.http.server.connection import Arrival, HTTPConnection, HTTPContext, Router
from edge.router.http import EMPTY_ROUTER, UNOBSERVED, HTTPRouter, Observers, Route
from edge.router.set import EMPTY_SET, RouterSet
from edge.router.tcp import TCPRouter
from edge.rules import RouteTable
from edge.tcp.peek import PeekContext
from edge.tcp.proxied import ProxyContext, ProxyHeaderReader, trust
from edge.tls.clienthello import PEEK_TIMEOUT
from edge.tls.terminate import HANDSHAKE_TIMEOUT

Address = tuple[str, int]

log = logging.getLogger("edge.entrypoints")


class TCPEntryPoint:
    def __init__(
        self,
        name: str,
        config: EntryPoint,
        loop: asyncio.AbstractEventLoop,
        *,
        parser: str | None = None,
        internal: Callable[[bytes, bytes], tuple[int, bytes, bytes, bytes] | None] | None = None,
        access_log: Callable[..., None] | None = None,
        reuse_port: bool = False,
        budget: Budget | None = None,
    ) -> None:
        """``budget``: the process's descriptor budget, which admits each connection
        (:mod:`edge.descriptors`; an entry point with ``internal`` answers, /ping or the
        API, keeps serving when the data plane's share is spent); None admits all."""
        self.name = name
        self.config = config
        self.loop = loop
        self.reuse_port = reuse_port
        self.budget = budget
        self.internal = internal is not None
        self.shed = 0  # connections closed at once (no descriptor to spare) since the last sweep
        self.parser = parser or config.http.parser
        self._parsers = parser_classes(self.parser)
        self._internal = internal  # what it answers itself (/ping, the API), or None
        self._access_log = access_log
        timeouts = config.transport.responding_timeouts
        # Every live connection of this entrypoint, whatever it became (HTTP, a
        # tunnel): the sweep reads their deadlines, the drain waits for them.
        self.connections: set[Swept] = set()
        self.routers = EMPTY_SET
        self.http = self._http_context(b"http")
        self.https = self._http_context(b"https")
        # Where HTTPS hosts differ in TLS options (clientAuth, versions): one HTTPS
        # context per options name a handshake used, routing with SNICheckRouter.
        self.https_checked: dict[str, HTTPContext] = {}
        # The first bytes are part of the first request's head: a client gets at
        # most readTimeout (and PEEK_TIMEOUT) to send enough of them to decide, and
        # readTimeout (and HANDSHAKE_TIMEOUT) for a TLS handshake, as Traefik's read
        # deadline bounds its handshakes.
        read = timeouts.read_timeout
        peek_timeout = min(PEEK_TIMEOUT, read) if read > 0 else PEEK_TIMEOUT
        handshake_timeout = min(HANDSHAKE_TIMEOUT, read) if read > 0 else HANDSHAKE_TIMEOUT
        self.peek = PeekContext(
            name=name,
            loop=loop,
            connections=self.connections,
            http=lambda client: HTTPConnection(
                self.http, Arrival(client=client) if client else None
            ),
            https=self._https_connection,
            timeout=peek_timeout,
            handshake_timeout=handshake_timeout,
        )
        # proxyProtocol: a header from a trusted peer names the client.
        pp = config.proxy_protocol
        self.proxied = (
            ProxyContext(
                name=name,
                loop=loop,
                connections=self.connections,
                trusted=trust(pp.trusted_ips, pp.insecure),
                arrive=self._arrive,
                timeout=peek_timeout,
            )
            if pp is not None
            else None
        )
        self.redirect = config.http.redirect
        self.server: asyncio.Server | None = None

    def _http_context(self, scheme: bytes) -> HTTPContext:
        """A new HTTP context of this entrypoint for ``scheme``: every HTTP context of
        the entrypoint shares these settings and its set of connections."""
        config = self.config
        timeouts = config.transport.responding_timeouts
        request_parser, response_parser = self._parsers
        return HTTPContext(
            name=self.name,
            port=config.port,
            loop=self.loop,
            request_parser=request_parser,
            response_parser=response_parser,
            max_header_bytes=config.http.max_header_bytes,
            max_header_count=config.http.max_header_count,
            sanitize_path=config.http.sanitize_path,
            read_timeout=timeouts.read_timeout,
            write_timeout=timeouts.write_timeout,
            idle_timeout=timeouts.idle_timeout,
            trusted_ips=config.forwarded_headers.trusted_ips,
            insecure=config.forwarded_headers.insecure,
            internal=self._internal,
            access_log=self._access_log,
            connections=self.connections,
            scheme=scheme,
            http2=config.http2,
        )

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one the OS chose for port 0)."""
        if self.server is not None and self.server.sockets:
            return self.server.sockets[0].getsockname()[1]
        return self.config.port

    @property
    def router(self) -> Router:
        return self.http.router

    def switch(self, routers: RouterSet) -> None:
        """Serve ``routers`` from now on (each slot is one assignment)."""
        self.routers = routers
        self.http.router = (
            RedirectRouter(self.name, self.redirect, routers.http, _observers(self.http))
            if self.redirect
            else routers.http
        )
        self.https.router = routers.https or EMPTY_ROUTER
        for options, ctx in self.https_checked.items():
            ctx.router = self._checked_router(options)

    def _https_connection(
        self, sni: str | None, client: Address | None, options: str | None = None
    ) -> HTTPConnection:
        """The HTTP connection over TLS edge terminated for ``sni`` with TLS ``options``
        (None: the entrypoint's only options, which every host shares)."""
        if options is None:
            ctx = self.https
        else:
            checked = self.https_checked.get(options)
            if checked is None:
                checked = self.https_checked[options] = self._http_context(b"https")
                checked.port = self.https.port
                checked.closing = self.https.closing
                checked.router = self._checked_router(options)
            ctx = checked
        return HTTPConnection(ctx, Arrival(client=client, sni=sni))

    def _checked_router(self, options: str) -> HTTPRouter | SNICheckRouter:
        https = self.routers.https or EMPTY_ROUTER
        tcp = self.routers.tcp
        return (
            SNICheckRouter(https, options, tcp, _observers(self.https_checked[options]))
            if tcp is not None and tcp.mixed_options
            else https
        )

    def bound(self, ports: dict[str, int]) -> None:
        """Every entry point is bound (``ports``: name -> bound port): a redirect to
        an entry point configured on port 0 names the port it got."""
        redirect = self.redirect
        if redirect is None or redirect.port or redirect.to.startswith(":"):
            return
        if ports.get(redirect.to):
            self.redirect = msgspec.structs.replace(redirect, port=str(ports[redirect.to]))
            self.switch(self.routers)

    def arrive(self) -> asyncio.Protocol:
        """What a new connection becomes: the arrival seam.

        No connection-level router (no TCP router, no HTTPS router: see
        :class:`~edge.router.set.RouterSet`): HTTP, as the accepted connection's own
        protocol, with no peek stage. Otherwise the peek, with the router read now.
        With ``proxyProtocol``, the PROXY header reader first, which then makes
        the connection one of those (:meth:`_arrive`) with the client it names.
        When the descriptor budget has no room for it, :class:`Shed` closes it.
        """
        budget = self.budget
        if budget is not None and not budget.admit(self.internal):
            self.shed += 1
            return SHED
        if self.proxied is not None:
            return ProxyHeaderReader(self.proxied)
        tcp = self.routers.tcp
        if tcp is None:
            return HTTPConnection(self.http)
        return self.peek.protocol(tcp)  # the peek, or TLS at once where it needs no peek

    def _arrive(self, source: Address | None, destination: Address | None) -> asyncio.Protocol:
        """What a connection becomes once its PROXY header (or its absence) is known."""
        tcp = self.routers.tcp
        if tcp is None:
            return HTTPConnection(self.http, Arrival(client=source) if source else None)
        return self.peek.protocol(tcp, source, destination)

    async def start(self) -> None:
        host = self.config.host or None
        self.server = await self.loop.create_server(
            self.arrive,
            host,
            self.config.port,
            family=socket.AF_UNSPEC,
            backlog=4096,
            reuse_address=True,
            # workers share every port; reusePort lets any other process share this one
            reuse_port=self.reuse_port or self.config.reuse_port or None,
        )
        self.http.port = self.https.port = self.port
        for ctx in self.https_checked.values():
            ctx.port = self.port
        where = ", ".join(format_address(s.getsockname()) for s in self.server.sockets)
        if self.reuse_port:
            # One of several processes sharing the port: whoever owns the port (the
            # supervisor) says "listening on" once; this line must not look like it.
            log.info("entrypoint %s: sharing %s (SO_REUSEPORT, %s)", self.name, where, self.parser)
        else:
            log.info("entrypoint %s: listening on %s (%s)", self.name, where, self.parser)

    def stop_accepting(self) -> None:
        if self.server is not None:
            self.server.close()

    def sweep(self, now: float) -> None:
        """Enforce the deadlines of every connection; log the connections shed since."""
        if self.shed:
            budget = self.budget
            assert budget is not None  # only a budget sheds connections
            log.warning(
                "entrypoint %s: %d connections closed at once: %d of %d descriptors in use,"
                " %d kept for /ping, the API and the providers",
                self.name,
                self.shed,
                budget.in_use,
                budget.limit(),
                budget.internal_reserve if self.internal else budget.reserve,
            )
            self.shed = 0
        for conn in list(self.connections):
            if conn.deadline_kind and conn.deadline <= now:
                conn.deadline_passed()

    def sweep_interval(self) -> float:
        t = self.config.transport.responding_timeouts
        shortest = min(
            (x for x in (t.read_timeout, t.write_timeout, t.idle_timeout) if x > 0),
            default=SWEEP_MAX,
        )
        return max(SWEEP_MIN, min(SWEEP_MAX, shortest / 4))

    async def drain(self, grace: float) -> None:
        """Finish in-flight requests within ``grace`` seconds, then close what is left."""
        # No keep-alive from now on: idle connections close now, busy ones after their response.
        self.http.closing = True
        self.https.closing = True
        for ctx in self.https_checked.values():
            ctx.closing = True
        for conn in list(self.connections):
            conn.shutdown()
        deadline = self.loop.time() + grace
        while self.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        left = len(self.connections)
        for conn in list(self.connections):
            conn.abort()
        if left:
            log.warning("entrypoint %s: %d connections cut after graceTimeOut", self.name, left)


class Shed(asyncio.Protocol):
    """A connection the descriptor budget has no room for: closed as soon as it is made
    (its client sees the connection close, as a full backlog's would be dropped)."""

    __slots__ = ()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        pass


SHED = Shed()  # stateless: one serves every shed connection


# -- TLS options and the Host: Traefik's snicheck -------------------------------------------


def _observers(ctx: HTTPContext) -> Observers:
    """What the entry point's own routes (a redirect, the 421 of a misdirected host)
    report to: the context's meter and access log, as an exchange no route took does;
    the meter and the log leave them out unless ``addInternals`` (their names end in
    ``@internal``)."""
    return Observers(ctx.metrics, ctx.access_log)


class SNICheckRouter:
    """The HTTPS router of connections whose handshake used TLS options ``options``,
    on an entry point whose HTTPS hosts do not all share one options name.

    A handshake is made under the options of its server name (client
    certificates asked for and verified, versions, ciphers); the request's Host
    then picks the router. A request whose Host needs other options (Traefik's
    snicheck: those of the routers naming the host, else the default ones) is
    answered 421 Misdirected Request, as Traefik does: otherwise a client could
    skip a router's ``clientAuth`` by shaking hands for another name. Hosts that
    need the handshake's options keep the host-only routing of the express path.
    """

    __slots__ = ("by_host", "inner", "misdirected", "options", "tcp")

    def __init__(
        self, inner: HTTPRouter, options: str, tcp: TCPRouter, observers: Observers = UNOBSERVED
    ) -> None:
        self.inner = inner
        self.options = options
        self.tcp = tcp
        self.by_host = {
            host: route
            for host, route in inner.by_host.items()
            if tcp.https_options(host) == options
        }
        self.misdirected = Route(
            "snicheck@internal",
            _NoService(),  # type: ignore[arg-type]
            Pipeline([_Misdirected(options)]),
            observers=observers,
        )

    def match(self, view) -> Route | None:
        if self.tcp.https_options(view.host) != self.options:
            return self.misdirected
        return self.inner.match(view)

    def __len__(self) -> int:
        return len(self.inner)


class _Misdirected(Middleware):
    __slots__ = ("options",)

    def __init__(self, options: str) -> None:
        super().__init__("snicheck@internal")
        self.options = options

    def request(self, fwd: Forward) -> Answer | None:
        log.debug(
            "TLS options differ: the connection's %s, host %s's others: 421", self.options, fwd.host
        )
        return Answer(421, b"", b"Misdirected Request\n")


# -- http.redirections.entryPoint ------------------------------------------------------------


class _Redirect(RedirectScheme):
    """A redirect to the target entry point with a fixed status (one per kind of method)."""

    __slots__ = ("status",)

    def __init__(self, name: str, redirect: RedirectEntryPoint, status: int) -> None:
        super().__init__(name, redirect.scheme, redirect.port, redirect.permanent)
        self.status = status

    def request(self, fwd: Forward) -> Answer | None:
        target = fwd.path + b"?" + fwd.query if fwd.query else fwd.path
        location = self.location(fwd.host, target)
        return Answer(self.status, b"Location: %s\r\n" % location, _REASONS[self.status])


_REASONS = {
    301: b"Moved Permanently",
    302: b"Found",
    307: b"Temporary Redirect",
    308: b"Permanent Redirect",
}


class _NoService:
    """The service of the redirect route: never picked (the redirect answers first)."""

    __slots__ = ()
    name = "noop@internal"
    pass_host = True
    pooled = False
    single = None

    def pick(self) -> None:
        return None


class RedirectRouter:
    """The plain HTTP router of an entry point with ``http.redirections.entryPoint``.

    Every request with a host gets the redirect (Traefik's router for it matches
    ``HostRegexp(`^.+$`)`` at ``priority``, MaxInt32-1 by default: above every
    router a user writes with a default priority), unless a router of the entry
    point ranked above that priority matches it; a request without a host falls
    through to the entry point's routers. Status as Traefik's redirect: 301 for
    GET and 308 for other methods when permanent, else 302 and 307.
    """

    __slots__ = ("above", "by_host", "get", "inner", "other")

    def __init__(
        self,
        entry_point: str,
        redirect: RedirectEntryPoint,
        inner: HTTPRouter,
        observers: Observers = UNOBSERVED,
    ) -> None:
        name = f"{entry_point}-to-{redirect.to.lstrip(':')}@internal"
        middleware = f"redirect-{name}"
        get, other = (301, 308) if redirect.permanent else (302, 307)
        self.get = Route(
            name,
            _NoService(),  # type: ignore[arg-type]
            Pipeline([_Redirect(middleware, redirect, get)]),
            observers=observers,
        )
        self.other = Route(
            name,
            _NoService(),  # type: ignore[arg-type]
            Pipeline([_Redirect(middleware, redirect, other)]),
            observers=observers,
        )
        self.inner = inner
        # The routers ranked above the redirect, in their own table (usually none).
        above = [entry for entry in inner.table.entries if entry[2] > redirect.priority]
        self.above: RouteTable | None = RouteTable(above) if above else None
        # Hosts the host alone routes: only above the redirect (it takes every other host).
        self.by_host: dict = self.above.by_host if self.above is not None else {}

    def match(self, view) -> Route | None:
        if not view.host:
            return self.inner.match(view)
        if self.above is not None:
            route = self.above.match(view)
            if route is not None:
                return route
        return self.get if view.method == "GET" else self.other

    def __len__(self) -> int:
        return len(self.inner) + 1
