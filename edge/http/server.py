"""The HTTP entrypoint: one asyncio protocol per client connection.

The protocol is glue between a sans-IO request parser, the current router, and
an upstream connection; it never awaits in a callback (dialing a new upstream
connection is the one task it spawns). State is grouped as shared entrypoint
state (:class:`EntryPointContext`), per-connection state and per-request state.

Invariants:
- One request is in flight per client connection; pipelined requests are queued
  as parser events (and reading pauses) until the response before them is done,
  so responses leave in request order.
- Flow control both ways: a client that does not read pauses reading from the
  upstream; an upstream that does not read pauses reading from the client; a
  request body waiting for a dial is bounded the same way. Memory per
  connection stays at about the transports' high-water marks.
- The router is read once per request (``ctx.router``); a swap never affects a
  request already routed.
- Few syscalls: while one side's bytes are being parsed, everything written
  to the other side is collected and leaves in one ``writelines`` (a single
  ``writev``) when that parse returns: a small response's head and body go out
  together, a request's head and body too. Every write goes through
  :meth:`_send` / :meth:`_send_upstream`, so order is kept.
- Timeouts are deadlines checked by a periodic sweep of the entrypoint, not
  timers per request: ``idleTimeout`` between requests, ``readTimeout`` for a
  request head (408), ``writeTimeout`` for a whole exchange.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import deque
from collections.abc import Callable

from edge.errors import HTTPError, ProtocolError, UpstreamConnectError, UpstreamTimeout
from edge.http import forward
from edge.http.codec import RequestHead, ResponseHead
from edge.http.upstream import UpstreamConnection
from edge.router.http import EMPTY_ROUTER, Backend, HTTPRouter, Route
from edge.rules import RequestView

log = logging.getLogger("edge.http")

HIGH_WATER = 64 * 1024  # bytes of request body buffered while dialing before reading pauses
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
CHUNK_END = b"0\r\n\r\n"
CRLF = b"\r\n"

# deadline kinds
NO_DEADLINE, IDLE, HEAD, WRITE = 0, 1, 2, 3


class EntryPointContext:
    """What every connection of one HTTP entrypoint shares."""

    def __init__(
        self,
        *,
        name: str,
        port: int,
        loop: asyncio.AbstractEventLoop,
        request_parser: type,
        response_parser: type,
        max_header_bytes: int = 1 << 20,
        read_timeout: float = 60.0,
        write_timeout: float = 0.0,
        idle_timeout: float = 180.0,
        trusted_ips: list[str] | tuple[str, ...] = (),
        insecure: bool = False,
        scheme: bytes = b"http",
        internal: Callable[[bytes], tuple[int, bytes] | None] | None = None,
        access_log: Callable[..., None] | None = None,
    ) -> None:
        self.name = name
        self.port = port
        self.loop = loop
        self.request_parser = request_parser
        self.response_parser = response_parser
        self.max_header_bytes = max_header_bytes
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.idle_timeout = idle_timeout
        self.insecure = insecure
        self.trusted_networks = tuple(ipaddress.ip_network(n, strict=False) for n in trusted_ips)
        self.scheme = scheme
        self.default_port = b"443" if scheme == b"https" else b"80"
        self.internal = internal
        self.access_log = access_log
        self.router: HTTPRouter = EMPTY_ROUTER
        self.connections: set[HTTPConnection] = set()
        self.closing = False

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

    def sweep(self, now: float) -> None:
        """Enforce the deadlines of every connection."""
        for conn in list(self.connections):
            if conn.deadline_kind and conn.deadline <= now:
                conn.deadline_passed()

    def shutdown(self) -> None:
        """Stop keep-alive: idle connections close now, busy ones after their response."""
        self.closing = True
        for conn in list(self.connections):
            conn.shutdown()


class HTTPConnection(asyncio.Protocol):
    PAUSE_UPSTREAM = 1  # the upstream does not read the request body fast enough
    PAUSE_PIPELINE = 2  # a pipelined request waits for the response before it
    PAUSE_BUFFER = 4  # request body buffered while the upstream is being dialed

    def __init__(self, ctx: EntryPointContext) -> None:
        self.ctx = ctx
        self.loop = ctx.loop
        self.parser = ctx.request_parser(self, ctx.max_header_bytes)
        self.transport: asyncio.Transport | None = None
        self.client_ip = ""
        self.client_ip_b = b""
        self.trusted = False
        self.paused = 0
        self.write_paused = False
        self.deadline = 0.0
        self.deadline_kind = NO_DEADLINE
        self.pending: deque | None = None
        self.draining = False
        self.tunnel = False
        self.eofs = 0
        self.authority = b""  # the last Host of this connection, and its parse
        self.host_port: tuple[str, bytes] = ("", b"")
        self.out: list[bytes] | None = None  # client writes batched during an upstream feed
        self.up_out: list[bytes] | None = None  # upstream writes batched during a client feed
        # The parser's quick path (httptools only), for the express path; not on
        # the entrypoint that answers /ping and /ready itself.
        self.quick = getattr(self.parser, "quick", None) if ctx.internal is None else None
        self._reset_request()

    def _reset_request(self) -> None:
        self.active = False
        self.express = False  # the response may take the upstream parser's quick path
        self.head: RequestHead | None = None
        self.keep_alive = True
        self.req_done = False
        self.resp_started = False
        self.resp_done = False
        self.resp_chunked = False
        self.resp_head: ResponseHead | None = None
        self.route: Route | None = None
        self.backend: Backend | None = None
        self.upstream: UpstreamConnection | None = None
        self.up_head = b""
        self.buffered: list[bytes] | None = None
        self.buffered_size = 0
        self.dial_task: asyncio.Task | None = None
        self.header_timer: asyncio.TimerHandle | None = None
        self.upgrade_rest: bytes | None = None
        self.retried = False
        self.status = 0
        self.sent = 0
        self.started = 0.0

    # -- asyncio callbacks: client side ---------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        ip = peer[0] if peer else ""
        if ip.startswith("::ffff:") and "." in ip:
            ip = ip[7:]
        self.client_ip = ip
        self.client_ip_b = ip.encode()
        self.trusted = self.ctx.is_trusted(ip)
        self.ctx.connections.add(self)
        self._set_deadline(IDLE, self.ctx.idle_timeout)
        if self.ctx.closing:
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self.quick is not None and not self.active and self.pending is None:
            head = self.quick(data)
            if head is not None:
                self._express(head)
                return
        if self.tunnel:
            self.upstream.transport.write(data)
            return
        if self.upgrade_rest is not None:
            # Between an upgrade request and the upstream's answer.
            self.upgrade_rest += data
            if len(self.upgrade_rest) > HIGH_WATER:
                self.pause_reading(self.PAUSE_BUFFER)
            return
        if self.deadline_kind == IDLE:
            self._set_deadline(HEAD, self.ctx.read_timeout)
        self.up_out = []
        try:
            self.parser.feed(data)
        except HTTPError as exc:
            self.up_out = None
            self._bad_request(exc)
        finally:
            self.flush_upstream()

    def eof_received(self) -> bool | None:
        if self.tunnel:
            return self.tunnel_eof(from_upstream=False)
        if self.active:
            # The client half-closed after its request: answer it, then close.
            self.keep_alive = False
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.ctx.connections.discard(self)
        self.transport = None
        self.pending = None
        upstream = self.upstream
        if upstream is not None:
            self.upstream = None
            upstream.owner = None
            # A tunnel flushes what the client sent last; a request cut short
            # leaves the upstream connection unusable.
            upstream.close() if self.tunnel else upstream.abort()
        if self.dial_task is not None:
            self.dial_task.cancel()
        if self.header_timer is not None:
            self.header_timer.cancel()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.upstream is not None:
            self.upstream.resume_reading()

    def pause_reading(self, why: int) -> None:
        if not self.paused and self.transport is not None:
            self.transport.pause_reading()
        self.paused |= why

    def resume_reading(self, why: int) -> None:
        if self.paused & why:
            self.paused &= ~why
            if not self.paused and self.transport is not None:
                self.transport.resume_reading()

    # -- parser events --------------------------------------------------------------

    def _busy(self) -> bool:
        """Events now belong to a later request and must wait."""
        return self.pending is not None or (self.active and self.req_done)

    def _queue(self, event: tuple) -> None:
        if self.pending is None:
            self.pending = deque()
        self.pending.append(event)
        self.pause_reading(self.PAUSE_PIPELINE)

    def on_head(self, head: RequestHead) -> None:
        if self.active or self.pending is not None:
            self._queue((self._begin, head))
        else:
            self._begin(head)

    def on_body(self, data: bytes) -> None:
        if self._busy():
            self._queue((self._request_body, data))
        else:
            self._request_body(data)

    def on_end(self) -> None:
        if self._busy():
            self._queue((self._request_end, None))
        else:
            self._request_end(None)

    def on_upgrade(self, rest: bytes) -> None:
        # Follows on_end of the upgrade request itself: it belongs to it.
        if self.pending is not None:
            self._queue((self._set_upgrade, rest))
        else:
            self._set_upgrade(rest)

    def _set_upgrade(self, rest: bytes) -> None:
        self.upgrade_rest = rest

    # -- a request ------------------------------------------------------------------

    def _express(self, head: RequestHead) -> None:
        """A plain request alone in its read, on an idle connection (see RequestParser.quick).

        When its route rewrites nothing, it goes upstream as its own bytes plus
        edge's forwarding headers, and its response may take the quick path too
        (:meth:`upstream_quick`); anything else is the general path's.
        """
        ctx = self.ctx
        authority = head.host
        host, forwarded_port = self.host_port if authority == self.authority else self._host_port(authority)
        route = ctx.router.by_host.get(host)
        raw = head.cut
        if route is None or not route.express or raw is None or head.version != b"1.1":
            self._begin(head)
            self._request_end(None)
            return
        backend = route.backend or route.service.pick()
        if backend is None:
            self._begin(head)  # 503, naming the service
            self._request_end(None)
            return
        self._start(head)
        self.express = True
        self.req_done = True
        self.route = route
        self.backend = backend
        self.up_head = forward.passthrough_request(raw, self.client_ip_b, ctx.scheme, authority, forwarded_port)
        self._connect()

    def _start(self, head: RequestHead) -> None:
        """The connection takes up a request: its deadline, its clock."""
        ctx = self.ctx
        self.active = True
        self.head = head
        self.keep_alive = head.keep_alive and not ctx.closing
        if ctx.write_timeout:
            self._set_deadline(WRITE, ctx.write_timeout)
        else:
            self.deadline_kind = NO_DEADLINE
        if ctx.access_log is not None:
            self.started = self.loop.time()

    def _host_port(self, authority: bytes) -> tuple[str, bytes]:
        """(host, forwarded port) of a Host value, kept for the next request with the same one."""
        host, port = forward.split_host_port(authority)
        self.authority = authority
        self.host_port = (host, port.encode() if port else self.ctx.default_port)
        return self.host_port

    def _begin(self, head: RequestHead) -> None:
        ctx = self.ctx
        self._start(head)
        try:
            path, query, authority = forward.split_target(head.target)
        except ValueError as exc:
            self._answer_error(ProtocolError(str(exc)))
            return
        if authority is None:
            authority = head.host
        # A keep-alive client names the same host request after request.
        host, forwarded_port = self.host_port if authority == self.authority else self._host_port(authority)

        if ctx.internal is not None and head.method in (b"GET", b"HEAD"):
            answer = ctx.internal(path)
            if answer is not None:
                status, body = answer
                close = not self._answer_keeps_alive()
                self._answer(forward.simple_response(status, body, content_type=b"text/plain; charset=utf-8", close=close), status)
                return

        router = ctx.router
        route = router.by_host.get(host)
        if route is None:  # the rule looks beyond the host (or nothing matches)
            view = RequestView(
                host=host,
                path=path.decode("latin-1"),
                query=query.decode("latin-1"),
                method=head.method.decode("latin-1"),
                client_ip=self.client_ip,
                headers=head.headers,
            )
            route = router.match(view)
        if route is None:
            self._answer_error(HTTPError("no router matched", status=404))
            return
        self.route = route
        if route.redirect is not None:
            location = route.redirect.location(host, path + b"?" + query if query else path)
            status = 301 if route.redirect.permanent else 302
            close = not self._answer_keeps_alive()
            self._answer(
                b"HTTP/1.1 %d %s\r\nLocation: %s\r\nContent-Length: 0\r\n%s\r\n"
                % (status, forward.reason(status), location, b"Connection: close\r\n" if close else b""),
                status,
            )
            return
        backend = route.service.pick()
        if backend is None:
            self._answer_error(HTTPError(f"router {route.name}: service {route.service.name} has no server", status=503))
            return
        self.backend = backend

        through = head.passthrough
        up_head = None
        if through is not None and route.plain and backend.pass_host and head.version == b"1.1" and head.target[:1] == b"/":
            # The common case: forward the client's own bytes, plus X-Forwarded-*.
            raw = forward.cut_connection(head.raw, through, keep_alive=backend.transport.pools)
            if raw is not None:
                up_head = forward.passthrough_request(raw, self.client_ip_b, ctx.scheme, authority, forwarded_port)
        if up_head is None:
            prefix = b""
            if route.strip_prefixes or route.add_prefix:
                path, prefix = route.rewrite_path(path)
            up_head = forward.request_head(
                head,
                target=path + b"?" + query if query else path,
                host=authority if backend.pass_host else backend.server.authority,
                client_ip=self.client_ip_b,
                trusted=self.trusted,
                proto=(b"wss" if ctx.scheme == b"https" else b"ws") if head.upgrade else ctx.scheme,
                forwarded_host=authority,
                forwarded_port=forwarded_port,
                extra=route.request_headers,
                prefix=prefix,
            )
        self.up_head = up_head
        self.express = route.response_headers is None and not head.upgrade
        if head.expect_continue and (head.chunked or head.content_length):
            self._send(CONTINUE)
        self._connect()

    def _request_body(self, data: bytes) -> None:
        if self.resp_done or self.head is None:
            return  # answered already (an error, or an early response): drop
        if self.head.chunked:
            self._send_upstream((b"%x\r\n" % len(data), data, CRLF))
        else:
            self._send_upstream((data,))

    def _request_end(self, _: None) -> None:
        self.req_done = True
        if self.head is not None and self.head.chunked and not self.resp_done:
            self._send_upstream((CHUNK_END,))
        if self.resp_done:
            self._finish()

    def _send_upstream(self, parts: tuple[bytes, ...]) -> None:
        upstream = self.upstream
        if upstream is not None:
            if self.up_out is not None:
                self.up_out.extend(parts)
            else:
                upstream.transport.writelines(parts)
            return
        if self.buffered is None:
            self.buffered = []
        self.buffered.extend(parts)
        self.buffered_size += sum(map(len, parts))
        if self.buffered_size > HIGH_WATER:
            self.pause_reading(self.PAUSE_BUFFER)

    # -- upstream connection ----------------------------------------------------------

    def _connect(self) -> None:
        backend = self.backend
        conn = backend.transport.take_idle(backend.server)
        if conn is not None:
            conn.reused = True
            self._attach(conn)
        else:
            self.dial_task = self.loop.create_task(self._dial())

    async def _dial(self) -> None:
        backend = self.backend
        parser = self.ctx.response_parser
        try:
            conn = await backend.transport.dial(backend.server, lambda: UpstreamConnection(parser))
        except UpstreamConnectError as exc:
            self.dial_task = None
            if self.active and self.backend is backend:
                self._upstream_error(exc)
            return
        self.dial_task = None
        if self.transport is None or not self.active or self.backend is not backend:
            backend.transport.put_idle(backend.server, conn)
            return
        self._attach(conn)

    def _attach(self, conn: UpstreamConnection) -> None:
        conn.owner = self
        conn.received = False
        self.upstream = conn
        conn.parser.expect(self.head.method)
        buffered = self.buffered
        if buffered:
            parts = [self.up_head, *buffered]
            self.buffered = None
            self.buffered_size = 0
            self.resume_reading(self.PAUSE_BUFFER)
        else:
            parts = None
        if self.up_out is not None:
            self.up_out += parts or (self.up_head,)
        elif parts:
            conn.transport.writelines(parts)
        else:
            conn.transport.write(self.up_head)
        if self.write_paused:
            conn.pause_reading()
        timeout = self.backend.transport.response_header_timeout
        if timeout:
            self.header_timer = self.loop.call_later(timeout, self._response_header_timeout)

    def _response_header_timeout(self) -> None:
        self.header_timer = None
        if self.active and not self.resp_started:
            self._upstream_error(UpstreamTimeout(f"no response head within {self.backend.transport.response_header_timeout}s"))

    def _release_upstream(self, reuse: bool) -> None:
        conn = self.upstream
        if conn is None:
            return
        self.upstream = None
        conn.owner = None
        if self.up_out:
            self.up_out = []  # the exchange is over: nothing more goes to that connection
        if conn.paused:
            conn.resume_reading()
        if reuse:
            self.backend.transport.put_idle(self.backend.server, conn)
        else:
            conn.abort()

    # -- upstream events (called by UpstreamConnection) ---------------------------------

    def upstream_head(self, head: ResponseHead) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None
        if head.status == 101 and not (self.head.upgrade and self.upgrade_rest is not None):
            self._upstream_error(UpstreamConnectError("upstream switched protocols without an upgrade request"))
            return
        self.resp_head = head
        self.resp_started = True
        self.status = head.status
        chunked = False
        if head.has_body and head.content_length is None:
            if self.head.version == b"1.1":
                chunked = True
            else:
                self.keep_alive = False
        if self.head.upgrade and head.status != 101:
            self.keep_alive = False  # the request parser stopped at the upgrade
        self.resp_chunked = chunked
        self._send(self._client_head(head, chunked))

    def _client_head(self, head: ResponseHead, chunked: bool) -> bytes:
        """The response head for the client (``head.raw`` itself when it goes through as it is)."""
        route = self.route
        extra = route.response_headers if route is not None else None
        through = head.passthrough
        if (
            through is not None
            and extra is None
            and head.version == b"1.1"
            and head.status != 101
            and (chunked or not head.chunked)
        ):
            # The upstream's own bytes: same framing, nothing hop-by-hop but a
            # plain Connection header, which is cut.
            raw = forward.cut_connection(head.raw, through, keep_alive=self.keep_alive)
            if raw is not None:
                return raw if self.keep_alive else raw[:-2] + b"Connection: close\r\n\r\n"
        return forward.response_head(head, chunked=chunked, keep_alive=self.keep_alive, extra=extra)

    def upstream_quick(self, conn: UpstreamConnection, head: ResponseHead, data: bytes) -> None:
        """A whole response in one read (ResponseParser.quick) to an express exchange.

        The same outcome as ``upstream_head``, ``upstream_body`` and
        ``upstream_end`` for it, in one call: a status of 200 or more, a
        Content-Length body, no upgrade asked, no response header edits.
        """
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None
        self.resp_head = head
        self.resp_started = True
        self.resp_done = True
        self.status = head.status
        # What _client_head gives, already worked out by the quick parse.
        out = head.cut if self.keep_alive else self._client_head(head, False)
        size = len(head.raw)
        self.sent = len(data) - size
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if out is head.raw:
                transport.write(data)
            else:
                transport.writelines((out, data[size:]))
        self._exchange_done()

    def upstream_body(self, data: bytes) -> None:
        self.sent += len(data)
        if self.resp_chunked:
            self._send(b"%x\r\n" % len(data), data, CRLF)
        else:
            self._send(data)

    def upstream_end(self, conn: UpstreamConnection) -> None:
        if self.resp_head.status == 101:
            return  # upstream_upgrade follows with the first tunnel bytes
        if self.resp_chunked:
            self._send(CHUNK_END)
        self.resp_done = True
        self._exchange_done()

    def _exchange_done(self) -> None:
        """The response is complete: the upstream connection goes back or away."""
        reuse = self.req_done and self.resp_head.keep_alive
        self._release_upstream(reuse)
        if not self.req_done:
            # The upstream answered before the whole request body arrived: the
            # rest of it cannot be told from the next request.
            self.keep_alive = False
        self._finish()

    def upstream_upgrade(self, rest: bytes) -> None:
        self.tunnel = True
        self.resp_done = True
        conn = self.upstream
        if rest:
            self._send(rest)
        self.flush()
        if self.upgrade_rest:
            conn.transport.write(self.upgrade_rest)
        self.upgrade_rest = None
        self.resume_reading(self.PAUSE_BUFFER)
        self.deadline_kind = NO_DEADLINE
        self._log_access()

    def tunnel_eof(self, *, from_upstream: bool) -> bool:
        """Half-close in tunnel mode: pass the EOF on, close when both sides are done."""
        self.eofs += 1
        other = self.transport if from_upstream else (self.upstream.transport if self.upstream else None)
        if self.eofs >= 2 or other is None or not other.can_write_eof():
            if self.transport is not None:
                self.transport.close()
            if self.upstream is not None:
                self.upstream.close()
            return False
        other.write_eof()
        return True

    def upstream_lost(self, conn: UpstreamConnection, exc: Exception | None) -> None:
        if self.tunnel:
            self.upstream = None
            if self.transport is not None:
                self.transport.close()
            return
        if self.resp_started:
            # Cut in the middle of a body: the client can only learn it by a close.
            log.warning(
                "router %s: upstream %s closed during the response",
                self.route.name if self.route else "?",
                self.backend.server.url if self.backend else "?",
            )
            self.upstream = None
            if self.transport is not None:
                self.transport.abort()
            return
        head = self.head
        if (
            conn.reused
            and not conn.received
            and not self.retried
            and not head.chunked
            and not head.content_length
            and not head.upgrade
        ):
            # A pooled connection the server had closed while idle: nothing was
            # processed, so the request can safely go out again on a new one.
            self.retried = True
            self.upstream = None
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None
            self.dial_task = self.loop.create_task(self._dial())
            return
        self.upstream = None
        self._upstream_error(UpstreamConnectError(f"upstream closed the connection before responding ({exc or 'EOF'})"))

    def upstream_failed(self, exc: HTTPError, conn: UpstreamConnection) -> None:
        """The upstream sent bytes that are not a valid response."""
        if self.upstream is conn:
            self.upstream = None
        if self.resp_started:
            if self.transport is not None:
                self.transport.abort()
            return
        self._upstream_error(UpstreamConnectError(f"invalid response: {exc.detail}"))

    def _upstream_error(self, exc: HTTPError) -> None:
        route = self.route.name if self.route else "?"
        backend = self.backend
        log.warning(
            "router %s service %s server %s: %s",
            route,
            backend.service if backend else "?",
            backend.server.url if backend else "?",
            exc.detail,
        )
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None
        self._release_upstream(reuse=False)
        if self.resp_started:
            if self.transport is not None:
                self.transport.abort()
            return
        self._answer_error(exc)

    # -- writing --------------------------------------------------------------------

    def _send(self, *parts: bytes) -> None:
        """Write to the client, batched while an upstream feed is being parsed."""
        if self.out is not None:
            self.out += parts
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(parts)

    def flush(self) -> None:
        """Write what was batched for the client."""
        out = self.out
        if out:
            self.out = []
            if self.transport is not None and not self.transport.is_closing():
                self.transport.writelines(out)

    def flush_upstream(self) -> None:
        """Write what was batched for the upstream; batching ends."""
        out = self.up_out
        self.up_out = None
        upstream = self.upstream
        if out and upstream is not None and not upstream.transport.is_closing():
            upstream.transport.writelines(out)

    # -- answering and finishing ----------------------------------------------------

    def _answer_keeps_alive(self) -> bool:
        """Decide (once, before writing) whether the connection survives edge's own answer.

        A small unread request body is read and dropped to keep the connection;
        a large, chunked or upgrade one is not worth reading: close instead.
        """
        if self.keep_alive and not self.req_done:
            head = self.head
            if head is None or head.chunked or head.upgrade or (head.content_length or 0) > HIGH_WATER:
                self.keep_alive = False
        return self.keep_alive

    def _answer(self, data: bytes, status: int) -> None:
        """Send a complete response of edge's own for the current request."""
        self.status = status
        self.resp_started = True
        self.resp_done = True
        self._send(data)
        if self.req_done or not self.keep_alive:
            self._finish()

    def _answer_error(self, exc: HTTPError) -> None:
        close = not self._answer_keeps_alive()
        self._answer(forward.error_response(exc.status, close=close), exc.status)

    def _bad_request(self, exc: HTTPError) -> None:
        """The client sent bytes that are not HTTP: answer (after any response in flight) and close."""
        log.debug("%s: bad request from %s: %s", self.ctx.name, self.client_ip, exc.detail)
        if self.active and not self.req_done and self.pending is None:
            # Broken inside the body of the request being forwarded: what the
            # upstream got so far is incomplete, so that exchange is abandoned.
            self._release_upstream(reuse=False)
            if self.dial_task is not None:
                self.dial_task.cancel()
                self.dial_task = None
            if self.resp_started:
                if self.transport is not None:
                    self.transport.abort()
                return
        elif self.active or self.pending is not None:
            # Broken in a pipelined request: answer the ones before it first.
            self.keep_alive = False
            self._queue((self._reject, exc))
            return
        self._reject(exc)

    def _reject(self, exc: HTTPError) -> None:
        self.status = exc.status
        self._send(forward.error_response(exc.status, close=True))
        self.flush()
        if self.transport is not None:
            self.transport.close()
        self.pending = None

    def _finish(self) -> None:
        if self.out:
            self.flush()
        if self.ctx.access_log is not None:
            self._log_access()
        keep_alive = self.keep_alive and not self.ctx.closing
        self._reset_request()
        transport = self.transport
        if transport is None:
            return
        if not keep_alive:
            self.pending = None
            transport.close()
            return
        self._set_deadline(IDLE, self.ctx.idle_timeout)
        if self.pending is not None and not self.draining:
            self._drain_pending()

    def _drain_pending(self) -> None:
        pending = self.pending
        self.pending = None
        self.draining = True
        try:
            while pending:
                if self.transport is None:
                    return
                if self.active and self.req_done:
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

    def _log_access(self) -> None:
        access_log = self.ctx.access_log
        if access_log is not None and self.head is not None:
            access_log(self, self.loop.time() - self.started)

    # -- deadlines --------------------------------------------------------------------

    def _set_deadline(self, kind: int, seconds: float) -> None:
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
        if kind == HEAD:
            log.debug("%s: request head from %s not complete within readTimeout", self.ctx.name, self.client_ip)
            transport.write(forward.error_response(408, close=True))
            transport.close()
        elif kind == WRITE:
            log.warning("%s: response to %s not complete within writeTimeout", self.ctx.name, self.client_ip)
            transport.abort()
        else:
            transport.close()

    def shutdown(self) -> None:
        if not self.active and self.transport is not None:
            self.transport.close()
        else:
            self.keep_alive = False

