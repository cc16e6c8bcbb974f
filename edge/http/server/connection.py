"""The HTTP server side of a client connection: bytes in and out, one exchange at a time.

:class:`HTTPConnection` is the asyncio protocol of a client connection that is
(or became) HTTP: over a socket, or over any object with the asyncio.Transport
interface (a TLS-terminating adapter); it never asks which. It owns the bytes:
feeding the request parser, writing to the client in order and in batches,
flow control both ways, the connection's deadlines, pipelined requests waiting
their turn, and handing the connection over to a splice after an upgrade.
Each request becomes an :class:`~edge.http.server.exchange.Exchange`, which owns the
routing, the pipeline and the upstream side.

State is grouped as shared (:class:`HTTPContext`, one per entrypoint and
scheme), per connection (this object, with its :class:`Arrival` facts), and
per request (the exchange).

Invariants:
- One exchange at a time; pipelined requests are queued as parser events (and
  reading pauses) until the exchange before them is done, so responses leave in
  request order.
- Flow control both ways: a client that does not read pauses reading from the
  upstream; an upstream that does not read pauses reading from the client; a
  request body waiting for a dial is bounded the same way.
- Few syscalls: while one side's bytes are being parsed, everything written to
  the other side is collected and leaves in one ``writelines`` when that parse
  returns. Every write to the client goes through :meth:`send`.
- Timeouts are deadlines checked by the entrypoint's periodic sweep, not timers
  per request: ``readTimeout`` for the first request's first bytes (from the
  accept, then closed in silence), ``idleTimeout`` between requests,
  ``readTimeout`` for a whole request from its first byte, head (408) and body
  (408 before an answer began, else an abort), ``writeTimeout`` for a whole
  exchange; as Go's server bounds them for Traefik.
- A client that leaves takes its request with it (nginx's 499): a client EOF
  before its request ended, a reset, or (after a complete request) a half-close
  that the probe below finds to be a close, aborts the upstream connection (never
  pooled again) and frees the client's socket at once. A client that half-closed
  after a complete request and still reads gets its answer.

The half-close probe. A FIN after a complete request means either "done
sending, still reading" (``shutdown(SHUT_WR)``: answer it, as HAProxy and edge
always did) or "gone" (``close()``); the two are the same FIN on the wire. Only
a write tells them apart: the kernel of a client that closed answers it with a
reset. So when no answer began ``PROBE_AFTER`` seconds after the FIN, edge
writes an interim ``100 Continue`` (RFC 9110 15.2: an HTTP/1.1 client must
accept a 1xx it did not ask for) and then reads the socket's TCP state
(``peer_reset``) a few times: a reset frees everything; a client still there
ignores the 100 and gets its answer. The response's own bytes probe the same
way once it began. HTTP/1.0 clients cannot be sent a 1xx: they are told apart
by the response's bytes only.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from edge.config.static import EntryPointHTTP2
from edge.deadlines import BODY, FIRST, HEAD, IDLE, NO_DEADLINE, WRITE, DeadlineKind
from edge.errors import HTTPError
from edge.http.codec import Header, RequestHead, forward
from edge.http.codec.base import last_chunk
from edge.http.codec.h2 import PREFACE
from edge.http.server.exchange import CONTINUE, HIGH_WATER, Exchange
from edge.http.server.h2 import H2Connection
from edge.router.http import EMPTY_ROUTER
from edge.rules import unmapped_network
from edge.tcp.splice import Splice, peer_reset, splice

if TYPE_CHECKING:
    from collections.abc import Mapping

    from edge.entrypoints.base import Swept
    from edge.router.http import Route
    from edge.rules import RequestView

log = logging.getLogger("edge.http")

PROBE_AFTER = 0.5  # seconds after a half-close with no answer begun before edge probes (module doc)
PROBE_CHECKS = (0.1, 0.3, 1.0)  # then the TCP state is read after these delays, the last repeated
TUNNEL_TERMINATION = 1.0  # seconds a tunnel's other side may go on sending after one side's EOF

# Host values (and client, Host pairs) an entrypoint remembers the parse of (HTTPContext.host_port,
# HTTPContext.forwarding), and the longest it remembers: a bound on what clients can make it keep.
MAX_REMEMBERED_HOSTS = 1024
LINGER = 2.0  # seconds a connection closed before its request body ended reads on (_linger)
MAX_REMEMBERED_HOST = 256
# entryPoints.<n>.http2's defaults: an HTTP context serves HTTP/2 unless told None (a
# TLS context offers h2 whatever the context, from the options' alpnProtocols).
HTTP2 = EntryPointHTTP2()


class Router(Protocol):
    """What an HTTP context routes with: the entrypoint's
    :class:`~edge.router.http.HTTPRouter`, or a wrapper of the entrypoint's around
    it (a redirect to another entrypoint, the TLS options check).

    ``by_host``: the routes the Host alone picks (the express path reads it);
    ``match``: the route for a request, or None (404).
    """

    @property
    def by_host(self) -> Mapping[str, Route]: ...

    def match(self, view: RequestView) -> Route | None: ...


class Metered(NamedTuple):
    """An HTTP context's ``access_log`` where anything observes exchanges (access log,
    metrics, tracing): the meter and the record hook of the entry point's exchanges no
    route takes, either None (:mod:`edge.entrypoints.observability`). How the entry
    point, which hands every context its ``access_log``, hands it the meter too; with
    it, every exchange is timed, since routes carry their own (``Route.meter``,
    ``Route.record``)."""

    meter: Any
    access_log: Callable[..., None] | None


class HTTPContext:
    """What every HTTP connection of one entrypoint and one scheme shares.

    ``router`` is the entrypoint's current router for this scheme (one
    reference, replaced by the entrypoint); ``connections`` and ``closing`` are
    the entrypoint's: its live connections (for the sweep and the drain) and
    whether it is draining.
    """

    def __init__(
        self,
        *,
        name: str,
        port: int,
        loop: asyncio.AbstractEventLoop,
        request_parser: type,
        response_parser: type,
        max_header_bytes: int = 1 << 20,
        max_header_count: int = 100,
        read_timeout: float = 60.0,
        write_timeout: float = 0.0,
        idle_timeout: float = 180.0,
        trusted_ips: list[str] | tuple[str, ...] = (),
        insecure: bool = False,
        scheme: bytes = b"http",
        internal: Callable[[bytes, bytes], tuple[int, bytes, bytes, bytes] | None] | None = None,
        access_log: Callable[..., None] | Metered | None = None,
        metrics: Any = None,
        connections: set[Swept] | None = None,
        sanitize_path: bool = True,
        http2: EntryPointHTTP2 | None = HTTP2,
    ) -> None:
        self.name = name
        self.port = port
        self.loop = loop
        self.request_parser = request_parser
        self.request_memo = request_parser.memo()  # what this entrypoint's request parsers share
        self.response_parser = response_parser
        self.max_header_bytes = max_header_bytes
        self.max_header_count = max_header_count
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.idle_timeout = idle_timeout
        self.insecure = insecure
        self.trusted_networks = tuple(
            unmapped_network(ipaddress.ip_network(n, strict=False)) for n in trusted_ips
        )
        self.scheme = scheme
        self.default_port = b"443" if scheme == b"https" else b"80"
        self.internal = internal
        timed: object | None = None
        if isinstance(access_log, Metered):
            timed = access_log  # routes may observe what the entry point does not
            metrics, access_log = access_log.meter, access_log.access_log
            if scheme == b"https" and metrics is not None:  # counted by TLS version too
                metrics = metrics.tls
        self.access_log = access_log
        # metrics.prometheus: this entrypoint's Meter (edge.entrypoints.metrics), which
        # each exchange no route took counts itself into at its end (Exchange.log; a
        # routed one, into its route's); None: no metrics.
        self.metrics = metrics
        # What reads an exchange's record at its end (the meter, else the access log),
        # so Exchange.log runs and the exchange is timed; None: nothing does. An object
        # or None rather than a bool: ``is not None`` costs the express path least.
        if timed is None:
            timed = metrics if metrics is not None else access_log
        self.timed = timed
        self.sanitize_path = (
            sanitize_path  # entryPoints.<n>.http.sanitizePath (forward.sanitize_path)
        )
        self.router: Router = EMPTY_ROUTER
        self.connections: set[Swept] = set() if connections is None else connections
        self.closing = False
        # entryPoints.<n>.http2 (edge.http.server.h2); None: HTTP/1.1 only. A connection
        # is HTTP/2 when it starts with the preface (over TLS, once ALPN chose h2).
        self.http2 = http2
        # What every connection would otherwise work out for itself:
        self.quick_parse = internal is None and hasattr(request_parser, "quick")  # the express path
        self.trust_some = bool(self.trusted_networks)
        self.hosts: dict[bytes, tuple[str, bytes]] = {}  # Host value -> (host, forwarded port)
        self.forwardings: dict[
            tuple[bytes, bytes], bytes
        ] = {}  # (client IP, Host value) -> forwarding lines

    def host_port(self, authority: bytes) -> tuple[str | None, bytes]:
        """(host, forwarded port) of a Host value, remembered for the next connection
        that names it (the one normalisation: :func:`edge.rules.split_authority`).
        The host is None for a malformed value (answered 400), which no router holds."""
        hostport = self.hosts.get(authority)
        if hostport is None:
            try:
                host, port = forward.split_host_port(authority)
            except ValueError:
                return None, self.default_port
            hostport = (host, port.encode() if port else self.default_port)
            if len(authority) <= MAX_REMEMBERED_HOST:
                if len(self.hosts) >= MAX_REMEMBERED_HOSTS:
                    self.hosts.clear()
                self.hosts[authority] = hostport
        return hostport

    def forwarding(self, client_ip: bytes, authority: bytes, port: bytes) -> bytes:
        """The forwarding lines of a passthrough head (:func:`edge.http.codec.forward.forwarding_lines`)
        for a client and a Host value, remembered for the next connection of that
        client (bounded as :meth:`host_port` is)."""
        key = (client_ip, authority)
        lines = self.forwardings.get(key)
        if lines is None:
            lines = forward.forwarding_lines(client_ip, self.scheme, authority, port)
            if len(authority) <= MAX_REMEMBERED_HOST:
                if len(self.forwardings) >= MAX_REMEMBERED_HOSTS:
                    self.forwardings.clear()
                self.forwardings[key] = lines
        return lines

    def is_trusted(self, ip: str) -> bool:
        if self.insecure:
            return True
        if not self.trusted_networks:
            return False
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return False
        if addr.version == 6 and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self.trusted_networks)


class Arrival:
    """Facts about a connection decided before HTTP: who the client is, what TLS said.

    ``client``: the client's (ip, port) when it is not the peer (a PROXY
    protocol header named it); ``sni`` and ``alpn`` from a terminated TLS
    handshake.
    """

    __slots__ = ("alpn", "client", "sni")

    def __init__(
        self, client: tuple[str, int] | None = None, sni: str | None = None, alpn: str | None = None
    ) -> None:
        self.client = client
        self.sni = sni
        self.alpn = alpn


class Tunnel:
    """A connection handed over to a splice (after a 101), as the entrypoint tracks it."""

    __slots__ = ("splice",)
    deadline_kind = NO_DEADLINE
    deadline = 0.0

    def __init__(self, splice: Splice) -> None:
        self.splice = splice

    def deadline_passed(self) -> None: ...

    def shutdown(self) -> None: ...  # a tunnel ends when its peers end it, or at the drain's end

    def abort(self) -> None:
        self.splice.abort()


class Lingering(asyncio.Protocol):
    """A client connection edge has answered and half-closed while its request body
    still came (:meth:`HTTPConnection._linger`): what arrives is dropped; the client's
    close, or the connection's deadline, ends it."""

    __slots__ = ("conn",)

    def __init__(self, conn: HTTPConnection) -> None:
        self.conn = conn

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool | None:
        return None  # the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.connection_lost(exc)


class PrefaceWait(asyncio.Protocol):
    """A connection whose first bytes are a proper prefix of HTTP/2's preface
    (:meth:`HTTPConnection._preface`): the rest is awaited, then the bytes go back to
    the connection, which decides. Its deadline (the first request's) still holds."""

    __slots__ = ("conn", "data")

    def __init__(self, conn: HTTPConnection, data: bytes) -> None:
        self.conn = conn
        self.data = data

    def data_received(self, data: bytes) -> None:
        data = self.data + data
        if len(data) < len(PREFACE) and PREFACE.startswith(data):
            self.data = data
            return
        conn = self.conn
        if conn.transport is not None:
            conn.transport.set_protocol(conn)
        conn.data_received(data)

    def eof_received(self) -> bool | None:
        return None  # no request came: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.connection_lost(exc)


class HTTPConnection(asyncio.Protocol):
    # Slots: one made per connection, its attributes read on every request.
    __slots__ = (
        "arrival",
        "authority",
        "client_ip",
        "client_ip_b",
        "ctx",
        "deadline",
        "deadline_kind",
        "draining",
        "ex",
        "fed",
        "forwarding",
        "hostport",
        "loop",
        "out",
        "parser",
        "paused",
        "pending",
        "probe",
        "quick",
        "transport",
        "trusted",
        "up_out",
        "write_deadline",
        "write_paused",
    )

    PAUSE_UPSTREAM = 1  # the upstream does not read the request body fast enough
    PAUSE_PIPELINE = 2  # a pipelined request waits for the response before it
    PAUSE_BUFFER = 4  # request body buffered while the upstream is being dialed

    def __init__(self, ctx: HTTPContext, arrival: Arrival | None = None) -> None:
        self.ctx = ctx
        self.loop = ctx.loop
        self.arrival = arrival
        self.parser = ctx.request_parser(
            self, ctx.max_header_bytes, ctx.max_header_count, ctx.request_memo
        )
        # transport, client_ip, client_ip_b, deadline and deadline_kind: set by
        # connection_made, which comes before any other call (not twice per connection).
        self.trusted = False
        self.paused = 0
        self.write_paused = False
        self.ex: Exchange | None = None  # the exchange in progress
        self.pending: deque | None = None
        self.draining = False
        self.fed = False  # the parser's feed ran (not its quick path alone): it may hold a cycle
        self.authority = b""  # the last Host of this connection, its parse,
        self.hostport: tuple[str | None, bytes] = ("", b"")
        self.forwarding = (
            b""  # ...and the forwarding lines of a passthrough head (made on first use)
        )
        self.out: list[bytes] | None = None  # client writes batched during an upstream feed
        self.up_out: list[bytes] | None = None  # upstream writes batched during a client feed
        self.write_deadline = 0.0  # writeTimeout's, while a BODY deadline comes first
        self.probe: asyncio.TimerHandle | None = None  # the half-close probe (module doc)
        # The parser's quick path (httptools only), for the express path; not on
        # the entrypoint that answers /ping and /ready itself.
        self.quick = self.parser.quick if ctx.quick_parse else None

    # -- asyncio callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        arrival = self.arrival
        peer = (
            arrival.client
            if arrival is not None and arrival.client
            else transport.get_extra_info("peername")
        )
        ip = peer[0] if peer else ""
        if (
            ":" in ip and ip.startswith("::ffff:") and "." in ip
        ):  # an IPv4 client of a dual-stack socket
            ip = ip[7:]
        self.client_ip = ip
        self.client_ip_b = ip.encode()
        ctx = self.ctx
        if ctx.insecure or ctx.trust_some:
            self.trusted = ctx.is_trusted(ip)
        ctx.connections.add(self)
        if (
            ctx.read_timeout > 0
        ):  # Go's server reads the first request against readTimeout from the accept
            self.deadline_kind = FIRST
            self.deadline = self.loop.time() + ctx.read_timeout
        elif ctx.idle_timeout > 0:
            self.deadline_kind = IDLE
            self.deadline = self.loop.time() + ctx.idle_timeout
        else:
            self.deadline_kind = NO_DEADLINE
            self.deadline = 0.0
        if ctx.closing:
            transport.close()

    def data_received(self, data: bytes) -> None:
        ex = self.ex
        if ex is None:
            if self.quick is not None and self.pending is None:
                head = self.quick(data)
                if head is not None:
                    # The express path: a plain request alone in its read, on an
                    # idle connection (see RequestParser.quick); here, not in a
                    # method of its own, to save the call on every request.
                    authority = head.host
                    ctx = self.ctx
                    if authority != self.authority:  # host_port, without the call
                        self.hostport = ctx.host_port(authority)
                        self.authority = authority
                        self.forwarding = b""
                    route = ctx.router.by_host.get(self.hostport[0])
                    ex = self.ex = Exchange(self, head)  # what _start does, without the call
                    if ctx.write_timeout:
                        self._set_deadline(WRITE, ctx.write_timeout)
                    else:
                        self.deadline_kind = NO_DEADLINE
                    if route is not None and route.express and head.version == b"1.1":
                        forwarding = self.forwarding
                        if not forwarding:
                            forwarding = self.forwarding = ctx.forwarding(
                                self.client_ip_b, authority, self.hostport[1]
                            )
                        if ex.express_start(route, forwarding):
                            return
                    ex.begin()
                    if self.ex is ex:
                        ex.request_end()
                    return
        elif ex.upgrade_rest is not None:
            # Between an upgrade request and the upstream's answer.
            ex.upgrade_rest += data
            if len(ex.upgrade_rest) > HIGH_WATER:
                self.pause_reading(self.PAUSE_BUFFER)
            return
        if not self.fed and data[:1] == b"P" and self.ctx.http2 is not None and self._preface(data):
            return
        kind = self.deadline_kind
        if kind is IDLE or (ex is None and kind is NO_DEADLINE):
            # The first bytes of a head: readTimeout bounds it from here, whether or
            # not idleTimeout bounded the wait for it (with idleTimeout 0 there is
            # no deadline between requests, and a head that never ends must not
            # keep the connection: Go's server bounds a request's read the same way).
            self._set_deadline(HEAD, self.ctx.read_timeout)
        elif kind is FIRST:
            self.deadline_kind = HEAD  # the first request: readTimeout runs from the accept
        self.up_out = []
        self.fed = True
        try:
            self.parser.feed(data)
        except HTTPError as exc:
            # What the requests before the broken one wrote upstream still goes.
            self._bad_request(exc)
        finally:
            self.flush_upstream()

    def eof_received(self) -> bool | None:
        ex = self.ex
        if ex is None:
            return None
        ex.keep_alive = False
        if ex.resp_done:
            # Answered early; the rest of the body was being read and dropped.
            self._end_now(ex)
            return None
        if not ex.req_done:
            # The request can never end: the client is gone.
            self.client_gone("closed before the end of its request")
            return None
        # A complete request, then a FIN: done sending, or gone (the module doc).
        self.probe = self.loop.call_later(PROBE_AFTER, self._probe, -1)
        return True  # answer it, then close

    def connection_lost(self, exc: Exception | None) -> None:
        self.ctx.connections.discard(self)
        self.transport = None
        self.pending = None
        # The parser and an exchange in progress refer to this connection: let go of
        # them (and the parser of its own cycle with llhttp's), so that all are freed
        # now rather than left for the cyclic GC (its passes over the youngest
        # generation cost 4,300 instructions per connection; one frozen by the data
        # plane's gc.freeze() would never be freed). No event follows connection_lost.
        parser = self.parser
        self.quick = self.parser = None
        if self.fed:  # a parser only asked for quick heads holds no cycle: no call
            parser.close()
        if self.probe is not None:
            self.probe.cancel()
            self.probe = None
        ex = self.ex
        if ex is not None:
            self.ex = None
            ex.client_gone()

    def pause_writing(self) -> None:
        self.write_paused = True
        ex = self.ex
        if ex is not None and ex.upstream is not None:
            ex.upstream.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        ex = self.ex
        if ex is not None and ex.upstream is not None:
            ex.upstream.resume_reading()

    def pause_reading(self, why: int) -> None:
        if not self.paused and self.transport is not None:
            self.transport.pause_reading()
        self.paused |= why

    def resume_reading(self, why: int) -> None:
        if self.paused & why:
            self.paused &= ~why
            if not self.paused and self.transport is not None:
                self.transport.resume_reading()

    def _preface(self, data: bytes) -> bool:
        """Whether the connection's first bytes are HTTP/2's preface (h2c with prior
        knowledge; over TLS, ALPN h2): if so :class:`~edge.http.server.h2.H2Connection`
        takes the connection over; a proper prefix of it waits for the rest
        (:class:`PrefaceWait`). Asked only before the parser's first feed (the express
        path never asks), and true only before any request."""
        if self.ex is not None or self.pending is not None or self.authority:
            return False
        transport = self.transport
        if transport is None:
            return False
        if len(data) < len(PREFACE):
            if not PREFACE.startswith(data):
                return False
            transport.set_protocol(PrefaceWait(self, data))
            return True
        if not data.startswith(PREFACE):
            return False
        if self.ctx.scheme == b"https":
            tls = transport.get_extra_info("ssl_object")
            if tls is None or tls.selected_alpn_protocol() != "h2":
                return False  # the TLS options offer no h2 (alpnProtocols): HTTP/1.1's 400
        self.ctx.connections.discard(self)
        self.transport = None
        self.quick = self.parser = None  # the parser refers back to this connection
        H2Connection(
            self.ctx, transport, self.client_ip, self.client_ip_b, self.trusted
        ).data_received(data)
        return True

    # -- parser events ----------------------------------------------------------------

    def _busy(self) -> bool:
        """Events now belong to a later request and must wait."""
        return self.pending is not None or (self.ex is not None and self.ex.req_done)

    def _queue(self, event: tuple) -> None:
        if self.pending is None:
            self.pending = deque()
        self.pending.append(event)
        self.pause_reading(self.PAUSE_PIPELINE)

    def on_head(self, head: RequestHead) -> None:
        if self.ex is not None or self.pending is not None:
            self._queue((self._begin, head))
        else:
            self._begin(head)

    def on_body(self, data: bytes) -> None:
        if self._busy():
            self._queue((self._body, data))
        else:
            self._body(data)

    def on_end(self) -> None:
        if self._busy():
            self._queue((self._end, None))
        else:
            self._end(None)

    def on_upgrade(self, rest: bytes) -> None:
        # Follows on_end of the upgrade request itself: it belongs to it.
        if self.pending is not None:
            self._queue((self._set_upgrade, rest))
        else:
            self._set_upgrade(rest)

    def on_trailers(self, fields: list[Header]) -> None:
        if self._busy():
            self._queue((self._trailers, fields))
        else:
            self._trailers(fields)

    def _body(self, data: bytes) -> None:
        if self.ex is not None:
            self.ex.request_body(data)

    def _trailers(self, fields: list[Header]) -> None:
        if self.ex is not None:
            self.ex.request_trailers(fields)

    def _end(self, _: None) -> None:
        if self.ex is not None:
            self.ex.request_end()

    def _set_upgrade(self, rest: bytes) -> None:
        if self.ex is not None:
            self.ex.upgrade_rest = rest

    # -- exchanges ----------------------------------------------------------------------

    def _start(self, head: RequestHead) -> Exchange:
        """The connection takes up a request: its exchange, its deadlines.

        readTimeout keeps bounding a request with a body until the body's end
        (from the head's first byte, as Go's server does), and writeTimeout the
        whole exchange from here: while the body comes, the earlier of the two is
        the deadline, and writeTimeout's is kept for when the body has ended
        (:meth:`request_read`).
        """
        ex = self.ex = Exchange(self, head)
        ctx = self.ctx
        write = self.loop.time() + ctx.write_timeout if ctx.write_timeout > 0 else 0.0
        if (head.chunked or head.content_length) and ctx.read_timeout > 0:
            body = (
                self.deadline if self.deadline_kind is HEAD else self.loop.time() + ctx.read_timeout
            )
            if not write or body < write:
                self.deadline_kind = BODY
                self.deadline = body
                self.write_deadline = write
                return ex
        if write:
            self.deadline_kind = WRITE
            self.deadline = write
        else:
            self.deadline_kind = NO_DEADLINE
        return ex

    def request_read(self) -> None:
        """The request's body ended: only writeTimeout (if any) bounds the exchange now."""
        if self.deadline_kind is not BODY:
            return
        if self.write_deadline:
            self.deadline_kind = WRITE
            self.deadline = self.write_deadline
            self.write_deadline = 0.0
        else:
            self.deadline_kind = NO_DEADLINE

    def _begin(self, head: RequestHead) -> None:
        self._start(head).begin()

    def host_port(self, authority: bytes) -> tuple[str | None, bytes]:
        """(host, forwarded port) of a Host value; a keep-alive client names the same one request after request."""
        if authority != self.authority:
            self.hostport = self.ctx.host_port(authority)
            self.authority = authority
            self.forwarding = b""
        return self.hostport

    def exchange_done(self, ex: Exchange) -> None:
        """``ex`` is over: log it, then keep the connection for the next request or close it."""
        if self.out:
            self.flush()
        ctx = self.ctx
        if ctx.timed is not None:
            ex.log()
        self.ex = None
        if self.probe is not None:
            self.probe.cancel()
            self.probe = None
        transport = self.transport
        if transport is None:
            return
        if not ex.keep_alive or ctx.closing:
            self.pending = None
            if ex.req_done or not transport.can_write_eof():
                transport.close()
            else:
                self._linger(transport)
            return
        if self.parser.head_started:
            # The next head began to arrive during this exchange: readTimeout bounds it.
            self._set_deadline(HEAD, ctx.read_timeout)
        elif ctx.idle_timeout > 0:  # _set_deadline(IDLE, ...) without the call
            self.deadline_kind = IDLE
            self.deadline = self.loop.time() + ctx.idle_timeout
        else:
            self.deadline_kind = NO_DEADLINE
        if self.pending is not None and not self.draining:
            self._drain_pending()

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close with the request body still coming (an answer before its end): close
        the sending side and read on, dropping what comes, until the client closes or
        LINGER seconds pass, as Go's server and nginx do. Closed at once, the kernel
        answers the body's next bytes with a reset, which the client sees instead of
        the answer (and which can destroy the answer still in flight)."""
        transport.set_protocol(Lingering(self))
        transport.write_eof()
        if self.paused:
            self.paused = 0
            transport.resume_reading()
        self.deadline_kind = IDLE  # deadline_passed closes it
        self.deadline = self.loop.time() + LINGER

    def _drain_pending(self) -> None:
        pending = self.pending
        self.pending = None
        self.draining = True
        try:
            while pending:
                if self.transport is None:
                    return
                if self.ex is not None and self.ex.req_done:
                    # The next request is in flight again: the rest waits.
                    if self.pending is not None:
                        pending.extend(self.pending)
                    self.pending = pending
                    return
                handler, arg = pending.popleft()
                handler(arg)
        finally:
            self.draining = False
        if self.pending is None:
            self.resume_reading(self.PAUSE_PIPELINE)

    def tunnel(
        self,
        upstream: asyncio.Transport,
        to_client: bytes,
        to_upstream: bytes,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        """After a 101: hand the client and the upstream over to a splice.

        ``on_end`` runs once when the tunnel is over (both sides closed), or at once
        when the client is gone already: the exchange's ``Forward.on_end`` work, so an
        inFlightReq slot is held while the tunnel lives, as Traefik holds it."""
        self.flush()
        transport = self.transport
        self.ex = None
        self.pending = None
        self.deadline_kind = NO_DEADLINE
        self.ctx.connections.discard(self)
        if transport is None or transport.is_closing():
            upstream.close()
            if on_end is not None:
                on_end()
            return
        entry: list[Tunnel] = []
        connections = self.ctx.connections

        def closed(_: Splice) -> None:
            if entry:
                connections.discard(entry[0])
            if on_end is not None:
                on_end()

        tunnel = Tunnel(
            splice(
                transport,
                upstream,
                a_to_b=to_upstream,
                b_to_a=to_client,
                termination_delay=TUNNEL_TERMINATION,
                on_close=closed,
            )
        )
        if not tunnel.splice.closed:
            entry.append(tunnel)
            connections.add(tunnel)
        self.transport = None

    # -- writing ----------------------------------------------------------------------

    def send(self, *parts: bytes) -> None:
        """Write to the client, batched while an upstream feed is being parsed."""
        if self.out is not None:
            self.out += parts
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(parts)

    def trailers(self, fields: list[Header], chunked: bool) -> None:
        """The response's trailer fields: in its last chunk when it is chunked, whatever
        the client's TE (as Go's server writes them for Traefik; RFC 9112 7.1.2 has every
        HTTP/1.1 recipient read the section); a response framed otherwise drops them."""
        if chunked:
            self.send(last_chunk(fields))

    def flush(self) -> None:
        """Write what was batched for the client."""
        out = self.out
        if out:
            self.out = []
            if self.transport is not None and not self.transport.is_closing():
                self.transport.writelines(out)

    def flush_batch(self) -> None:
        """Write what was batched for the client; batching ends."""
        out = self.out
        self.out = None
        transport = self.transport
        if out and transport is not None and not transport.is_closing():
            transport.writelines(out)

    def flush_upstream(self) -> None:
        """Write what was batched for the upstream; batching ends."""
        out = self.up_out
        self.up_out = None
        ex = self.ex
        if (
            out
            and ex is not None
            and ex.upstream is not None
            and not ex.upstream.transport.is_closing()
        ):
            ex.upstream.transport.writelines(out)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- refusing -----------------------------------------------------------------------

    def _bad_request(self, exc: HTTPError) -> None:
        """The client sent bytes that are not HTTP: answer (after any response in flight) and close."""
        log.debug("%s: bad request from %s: %s", self.ctx.name, self.client_ip, exc.detail)
        ex = self.ex
        if ex is not None and not ex.req_done and self.pending is None:
            # Broken inside the body of the request being forwarded: what the
            # upstream got so far is incomplete, so that exchange is abandoned.
            self.up_out = None
            ex.abandon()
            if ex.resp_started:
                self.abort()
                return
        elif ex is not None or self.pending is not None:
            # Broken in a request that came after complete ones (pipelined, or
            # in the same read): those are answered first, as they would have
            # been had the bad bytes come later, and their responses keep the
            # connection open for the refusal that follows them.
            self._queue((self._reject, exc))
            return
        self._reject(exc)

    def _reject(self, exc: HTTPError) -> None:
        self.send(forward.error_response(exc.status, close=True))
        self.flush()
        if self.transport is not None:
            self.transport.close()
        self.pending = None

    # -- deadlines (read by the entrypoint's sweep) ---------------------------------------

    def _set_deadline(self, kind: DeadlineKind, seconds: float) -> None:
        if seconds > 0:
            self.deadline_kind = kind
            self.deadline = self.loop.time() + seconds
        else:
            self.deadline_kind = NO_DEADLINE

    def deadline_passed(self) -> None:
        kind = self.deadline_kind
        self.deadline_kind = NO_DEADLINE
        transport = self.transport
        if transport is None:
            return
        if kind is HEAD:
            log.debug(
                "%s: request head from %s not complete within readTimeout",
                self.ctx.name,
                self.client_ip,
            )
            transport.write(forward.error_response(408, close=True))
            transport.close()
        elif kind is BODY:
            self._body_timed_out()
        elif kind is WRITE:
            log.warning(
                "%s: response to %s not complete within writeTimeout", self.ctx.name, self.client_ip
            )
            transport.abort()
        else:
            transport.close()

    def _body_timed_out(self) -> None:
        """readTimeout passed with the request's body unfinished: as nginx's
        client_body_timeout, 408 if no answer began (else an abort); the upstream
        request is aborted either way."""
        ex = self.ex
        log.info(
            "%s: request body from %s not complete within readTimeout",
            self.ctx.name,
            self.client_ip,
        )
        if ex is None or ex.resp_started:
            self.client_gone("request body not complete within readTimeout", status=408)
            return
        ex.abandon()
        ex.keep_alive = False
        ex.answer_error(HTTPError("request body not complete within readTimeout", status=408))

    # -- the client leaving (module doc) ------------------------------------------------

    def client_gone(self, why: str, status: int = 499) -> None:
        """The client left (or is made to) with its exchange in flight: the upstream
        side is aborted, the exchange logged, and the client's socket freed at once."""
        ex = self.ex
        log.debug("%s: client %s %s", self.ctx.name, self.client_ip, why)
        self.pending = None
        transport = self.transport
        if ex is not None:
            self.ex = None
            ex.client_gone(status)
        if self.probe is not None:
            self.probe.cancel()
            self.probe = None
        if transport is not None:
            transport.abort()

    def _end_now(self, ex: Exchange) -> None:
        """``ex`` was answered in full and its client sent its EOF: close after the answer."""
        self.flush()
        if self.ctx.timed is not None:
            ex.log()
        self.ex = None
        self.pending = None
        if self.transport is not None:
            self.transport.close()

    def _probe(self, step: int) -> None:
        """The half-close probe's steps (module doc): step -1 writes the probe, each
        later one reads the TCP state and plans the next."""
        self.probe = None
        ex = self.ex
        transport = self.transport
        if ex is None or transport is None:
            return
        if step < 0 and not ex.resp_started and ex.head.version == b"1.1":
            self.send(CONTINUE)
        elif peer_reset(transport):
            self.client_gone("closed after its request (reset by the probe)")
            return
        delay = PROBE_CHECKS[min(step + 1, len(PROBE_CHECKS) - 1)]
        self.probe = self.loop.call_later(delay, self._probe, step + 1)

    def shutdown(self) -> None:
        """The entrypoint drains: idle now closes, busy closes after its response."""
        if self.ex is None and self.transport is not None:
            self.transport.close()
        elif self.ex is not None:
            self.ex.keep_alive = False
