"""One exchange: a client's request and its response, from routing to the last byte.

An :class:`Exchange` is created for each request a client connection takes up
and owns everything about it: the route and its pipeline, the upstream
connection (taken from the pool or dialed, given back or dropped), the request
body on its way up, the response on its way down, edge's own answers, and the
record the access log (and later metrics) read when it ends. It writes to the
client only through its client side (:class:`ClientSide`: the HTTP/1.1
connection, or an HTTP/2 stream), which keeps the order of writes and batches
them, and it tells that side when it is over (``exchange_done``).

Invariants:
- The router is read once, when the exchange starts; a swap never affects it.
- The pipeline decides what is rewritten. The express path (:meth:`express`)
  is taken only when the route's pipeline does nothing (``Route.express``), and
  writes heads with the same writers as the general path (:mod:`edge.http.codec.forward`):
  the bytes each path sends are the same.
- What a middleware registered for the exchange's end (``Forward.on_end``) runs
  exactly once, whichever way the exchange ends: its response complete (edge's
  own included), the tunnel it was handed over to closed, or the client gone (which an upstream
  failure in the middle of a response also comes to). Express exchanges have
  none and never check.
- The middleware hooks (:mod:`edge.http.middlewares`: waiting steps, response
  filters, the outcome, the client certificate, a service's request tee) are
  read on the general path only, each where the pipeline (or the service) has
  one; an express exchange never reads them.
- It is the upstream connection's owner (the interface ``UpstreamConnection``
  calls is :class:`edge.http.server.upstream.UpstreamOwner`); an upstream connection is
  owned by one exchange at a time, and by none while pooled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from edge.errors import HTTPError, ProtocolError, UpstreamConnectError, UpstreamTimeout
from edge.http.codec import Header, RequestHead, ResponseHead, forward
from edge.http.codec.base import last_chunk, trailer_fields
from edge.http.codec.forward import HeaderEdits
from edge.http.codec.grpc import DEADLINE_EXCEEDED, timeout_of, trailers_only
from edge.http.middlewares import Answer, BodyFilter, BodyTooLarge, Forward, Reply, Tee
from edge.http.middlewares.buffering import MAX_TRIES
from edge.http.middlewares.headers import vary_origin
from edge.http.middlewares.nginx_errors import Page
from edge.http.middlewares.retry import replayable
from edge.http.server import upstream_h2
from edge.http.server.upstream import UpstreamConnection
from edge.http.server.upstream_h2 import wants_h2
from edge.rules import RequestView

if TYPE_CHECKING:
    from edge.http.server.connection import HTTPContext
    from edge.router.http import Backend, Route

log = logging.getLogger("edge.http")

HIGH_WATER = 64 * 1024  # bytes of request body buffered while dialing before reading pauses
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
CHUNK_END = b"0\r\n\r\n"
CRLF = b"\r\n"


# Statuses whose response has no body whatever the request (1xx are interim, 101 apart).
NO_BODY = frozenset((204, 304))


class _NoBody(BodyFilter):
    """Drops a body the client's response does not have (a divert's page, to a HEAD)."""

    __slots__ = ()

    def data(self, chunk: bytes) -> bytes:
        return b""


_NO_BODY = _NoBody()

# Request headers a divert's GET does not carry (it has no body, and its own framing).
_NOT_DIVERTED = frozenset((b"content-length", b"transfer-encoding", b"expect", b"connection"))


class ClientSide(Protocol):
    """The exchange's client side: everything it reads and writes of its client.

    :class:`~edge.http.server.connection.HTTPConnection` implements it for HTTP/1.1
    (the connection), :class:`~edge.http.server.h2.H2Stream` for HTTP/2 (one per
    stream). ``send`` takes HTTP/1.1 bytes as edge's writers make them (a stream
    reads them back into frames); while an upstream read is parsed the exchange
    collects writes in ``out`` and ``up_out`` (``hold_writes``), which
    ``flush_batch`` and ``flush_upstream`` send. ``pause_reading`` and
    ``resume_reading`` (``PAUSE_UPSTREAM``, ``PAUSE_BUFFER``) hold the request body
    back; ``write_paused`` says the client takes no more response now;
    ``exchange_done`` ends the exchange, ``abort`` ends the client side with it
    unfinished (the exchange then hears ``client_gone``). ``ex`` is the exchange in
    progress, ``transport`` the client's transport (None once gone).
    """

    ctx: HTTPContext
    loop: asyncio.AbstractEventLoop
    transport: Any
    ex: Exchange | None
    out: list[bytes] | None
    up_out: list[bytes] | None
    write_paused: bool
    client_ip: str
    client_ip_b: bytes
    trusted: bool
    PAUSE_UPSTREAM: int
    PAUSE_BUFFER: int

    def send(self, *parts: bytes) -> None: ...
    def flush_batch(self) -> None: ...
    def flush_upstream(self) -> None: ...
    def exchange_done(self, ex: Exchange) -> None: ...
    def pause_reading(self, why: int) -> None: ...
    def resume_reading(self, why: int) -> None: ...
    def request_read(self) -> None: ...
    def trailers(self, fields: list[Header], chunked: bool) -> None:
        """The response's trailer fields (``trailer_fields`` kept), before its end: in the
        last chunk when ``chunked`` (the exchange then writes no chunk end of its own),
        else as the client's protocol carries them, or dropped."""

    def host_port(self, authority: bytes) -> tuple[str | None, bytes]: ...
    def abort(self) -> None: ...
    def tunnel(
        self,
        upstream: asyncio.Transport,
        to_client: bytes,
        to_upstream: bytes,
        on_end: Callable[[], None] | None = None,
    ) -> None: ...


class General:
    """What an exchange on the general path keeps beside the express path's fields (one
    slot of the exchange, so an express exchange allocates and frees no more than before
    the middleware hooks): made by :meth:`Exchange.begin`, read only when not express."""

    __slots__ = (
        "attempt",
        "began",
        "body_limit",
        "body_size",
        "body_wait",
        "deadline",
        "divert",
        "filtered",
        "filters",
        "fwd",
        "held_body",
        "origin",  # set by _connect where the access log is on (read with getattr)
        "page_status",
        "received",
        "req_trailers",
        "resp_held",
        "send_left",
        "send_timer",
        "set_cookies",
        "sink",
        "spool_iter",
        "tee",
        "trace",  # set by _forward where tracing is on (read with getattr)
        "try_timer",
        "up_args",
    )
    # Set only where they are on, outside __init__ and partly by other modules, so
    # declared here: their one type is written once, for mypy and the reader; unset,
    # getattr's default answers.
    origin: float
    trace: Any

    def __init__(self) -> None:
        self.fwd: Forward | None = None  # the pipeline's
        # A waiting step's Forward.read_body while the body comes: its future, its
        # limit and the payload's size so far.
        self.body_wait: asyncio.Future | None = None
        self.body_limit = -1
        self.body_size = 0
        self.filters: list[BodyFilter] | None = None  # response filters of this response
        self.tee: Tee | None = None  # a service's copy of the body (mirroring)
        self.set_cookies: list[bytes] | None = None  # a sticky service's Set-Cookie lines
        self.divert = 0  # the status a divert (Reply.divert) answers with
        self.page_status = False  # ...unless the page keeps its own (nginx_errors.Page)
        self.send_timer: asyncio.TimerHandle | None = None  # writeTimeout, while paused
        self.send_left = 0  # ...and the upstream transport's buffer when it was armed
        self.sink: Any = None  # the spool the request body goes to (buffering), while it comes
        self.spool_iter: Iterator[bytes] | None = None  # ...what of it is still to go upstream
        self.held_body: Any = None  # ...and all of it, once in (a retry sends it again)
        self.req_trailers: list[Header] | None = None  # the request's, for its last chunk
        self.received = 0  # the request body's bytes read (metrics, the access log)
        self.resp_held = False  # a filter holds the response until its end (Reply.hold)
        self.filtered = False  # the filters ran on this response's head
        self.attempt = 1  # tries of the request (retry)
        self.began = 0.0  # when its first try began (loop time: retry's timeout)
        self.deadline = 0.0  # when the route's timeouts.request runs out (loop time)
        self.try_timer: asyncio.TimerHandle | None = None  # ...and this try's backendRequest
        self.up_args: tuple = ()  # what a head for another server is made with (retry)


class Exchange:
    __slots__ = (
        "backend",
        "buffered",
        "buffered_size",
        "conn",
        "dial_task",
        "ends",
        "express",
        "head",
        "header_timer",
        "keep_alive",
        "origin",  # set by express_start where the access log is on (read with getattr)
        "req_done",
        "resp_chunked",
        "resp_done",
        "resp_head",
        "resp_out",
        "resp_started",
        "response_edits",
        "retried",
        "route",
        "sent",
        "started",
        "status",
        "up_head",
        "upgrade_rest",
        "upstream",
        "x",
    )

    def __init__(self, conn: ClientSide, head: RequestHead) -> None:
        self.conn = conn
        self.head = head
        self.keep_alive = head.keep_alive and not conn.ctx.closing
        self.express = False  # the response may take the upstream parser's quick path
        self.req_done = False
        self.resp_started = False
        self.resp_done = False
        self.resp_chunked = False
        self.resp_head: ResponseHead | None = None
        self.resp_out: bytes | None = None  # the response head as written to the client
        self.route: Route | None = None
        self.response_edits: HeaderEdits | None = None
        self.backend: Backend | None = None
        self.upstream: UpstreamConnection | None = None
        self.up_head = b""
        self.buffered: list[bytes] | None = None
        self.buffered_size = 0
        self.dial_task: asyncio.Task | None = None
        self.header_timer: asyncio.TimerHandle | None = None
        self.upgrade_rest: bytes | None = None
        self.retried = False
        # ends (Forward.on_end's) is set by begin(), the general path, and read only
        # when not self.express: the express path never pays for it. So is x (General:
        # the pipeline's Forward, response filters, a service's tee, a sticky service's
        # Set-Cookie lines, held bodies, retries).
        self.status = 0
        self.sent = 0
        # For the access log and the metrics (Exchange.log); loop.time() has 1 ms steps
        # under uvloop.
        self.started = perf_counter() if conn.ctx.timed is not None else 0.0

    # -- starting -------------------------------------------------------------------

    def express_start(self, route: Route, forwarding: bytes) -> bool:
        """The express path: a quick HTTP/1.1 request whose route does nothing to it (``Route.express``).

        Goes upstream as its own bytes plus edge's forwarding headers
        (``forwarding``: :func:`edge.http.codec.forward.forwarding_lines` for its
        client and Host), and its response may take the quick path too
        (:meth:`upstream_quick`). False when it cannot (no server to pick): the
        caller takes the general path.
        """
        service = route.service
        backend = service.single or service.pick()
        if backend is None:
            return False
        self.express = True
        self.req_done = True
        self.route = route
        self.backend = backend
        if route.record is not None:  # the access log's OriginDuration runs from here
            self.origin = perf_counter()
        # What forward.upstream_request writes for it (a quick HTTP/1.1 head in
        # origin-form, to a connection kept alive: its cut, passed through), without
        # the calls; test_express compares the bytes with the general path's.
        up_head = self.up_head = self.head.cut[:-2] + forwarding
        transport = backend.transport
        # What _connect does: transport.take_idle, without the call where the
        # server's pool (bound to this transport) ends with a connection that serves.
        server = backend.server
        idle = server.idle
        if idle and server.pooler is transport and idle[-1].idle_deadline > transport.loop.time():
            upstream = idle.pop()
        else:
            upstream = transport.take_idle(server)
        if upstream is None:
            self.dial_task = self.conn.loop.create_task(self._dial())
            return True
        # What _attach does with a pooled connection and no body buffered, without the call.
        upstream.reused = True
        upstream.owner = self
        upstream.received = False
        self.upstream = upstream
        upstream.parser.expect(self.head.method)
        conn = self.conn
        if conn.up_out is not None:
            conn.up_out.append(up_head)
        else:
            upstream.transport.write(up_head)
        if conn.write_paused:
            upstream.pause_reading()
        if transport.response_header_timeout:
            self.header_timer = conn.loop.call_later(
                transport.response_header_timeout, self._response_header_timeout
            )
        return True

    def begin(self) -> None:
        """The general path: route, run the pipeline, write the head for upstream, connect."""
        conn = self.conn
        ctx = conn.ctx
        head = self.head
        self.ends: list[Callable[[], None]] | None = None
        self.x = General()
        try:
            path, query, authority = forward.split_target(head.target)
        except ValueError as exc:
            self.answer_error(ProtocolError(str(exc)))
            return
        clean = forward.sanitize_path(path) if ctx.sanitize_path else path
        cleaned = clean is not path  # then routed, and sent upstream, as cleaned
        path = clean
        if authority is None:
            authority = head.host
        host, forwarded_port = conn.host_port(authority)
        if host is None:
            self.answer_error(ProtocolError("malformed Host header"))
            return

        if ctx.internal is not None and head.method in (b"GET", b"HEAD"):
            answer = ctx.internal(path, query)
            if answer is not None:
                status, body, content_type, lines = answer
                close = not self.answer_keeps_alive()
                own = forward.own_response(
                    status, body, close=close, content_type=content_type, lines=lines
                )
                self._answer(own, status)
                return

        router = ctx.router
        route = router.by_host.get(host)
        if route is None:  # the rule looks beyond the host (or nothing matches)
            view = RequestView(
                host=host,
                path=path.decode("latin-1"),
                query=query.decode("latin-1"),
                method=head.method.decode("latin-1"),
                client_ip=conn.client_ip,
                headers=head.headers,
            )
            route = router.match(view)
        if route is None:
            self.answer_error(HTTPError("no router matched", status=404))
            return
        self.route = route
        if route.deadline:
            self.x.deadline = conn.loop.time() + route.deadline
        pipeline = route.pipeline
        fwd = None
        if pipeline.forwards:
            fwd = self.x.fwd = Forward(
                host,
                path,
                query,
                head.method,
                authority,
                ctx.scheme,
                head if conn.trusted else None,
                head,
                conn.client_ip,
                conn.transport,
            )
            args = (route, fwd, path, query, authority, forwarded_port, cleaned)
            if pipeline.waits is not None:
                # A step waits for I/O (middlewares' module doc): the steps run in a
                # task, which abandon() cancels with the client.
                self.dial_task = conn.loop.create_task(self._steps(args))
                return
            for i, step in enumerate(pipeline.steps):
                answered = step.request(fwd)
                if answered is not None:
                    self.ends = fwd.ends
                    self._answer_own(answered, pipeline.answer_edits(i, fwd))
                    return
            if fwd.spool is not None or fwd.delay:
                self._stepped(args)
                return
            self.ends = fwd.ends  # what _stepped does for the rest, without the call
        self._forward(route, fwd, path, query, authority, forwarded_port, cleaned)

    def _stepped(self, args: tuple) -> None:
        """The steps let the request through: hold it if one asked, else forward it."""
        fwd: Forward = args[1]
        self.ends = fwd.ends
        spool = fwd.spool
        if spool is not None:
            if self.buffered and self.head.chunked:
                fwd.spool = None  # its framing went in already (a step waited): streamed
            else:
                fits = all([spool.write(part) for part in self.buffered or ()])
                self.buffered = None
                self.buffered_size = 0
                self.conn.resume_reading(self.conn.PAUSE_BUFFER)
                if not fits:
                    self.x.sink = spool
                    self._spool_overflow()
                    return
                if not self.req_done:
                    self.x.sink = spool
                    self.x.up_args = args  # _forward's, once the body is in (request_end)
                    if self.head.expect_continue:
                        self.conn.send(CONTINUE)  # the body is wanted now, not upstream's say
                    return
        if fwd.delay:
            # A step holds the request (a rateLimit waiting for its token, where
            # Traefik's handler sleeps): header_timer holds the wait, which
            # abandon() cancels with it; no response header timer runs before.
            self.header_timer = self.conn.loop.call_later(fwd.delay, self._held, args)
            return
        self._forward(*args)

    async def _steps(self, args: tuple) -> None:
        """The pipeline's steps where one waits (``request_async``), in order."""
        route: Route = args[0]
        fwd: Forward = args[1]
        pipeline = route.pipeline
        waits = pipeline.waits
        assert waits is not None
        answer = None
        i = 0
        try:
            fwd.reader = self._read_body  # a step may read the body (Forward.read_body)
            for i, step in enumerate(pipeline.steps):
                if waits[i]:
                    # What the client's leaving runs meanwhile, the step's own included.
                    if fwd.ends is None:
                        fwd.ends = []
                    self.ends = fwd.ends
                    answer = await step.request_async(fwd)
                else:
                    answer = step.request(fwd)
                if answer is not None:
                    break
        except Exception:
            log.exception("router %s: middleware %s failed", route.name, pipeline.steps[i].name)
            answer = Answer(500, body=b"Internal Server Error")
        finally:
            fwd.reader = None  # no cycle left: the exchange goes by reference counting
        self.dial_task = None
        if self.conn.ex is not self or self.resp_done:
            return  # the client left (or the request broke) meanwhile
        if answer is not None:
            self.ends = fwd.ends
            self._answer_own(answer, pipeline.answer_edits(i, fwd))
            return
        self._stepped(args)

    async def _read_body(self, limit: int) -> bytes:
        """Forward.read_body: the request body read to its end and held in ``buffered``
        (as it goes upstream once the steps let it), its payload returned; past
        ``limit`` bytes (-1: none), BodyTooLarge, reading paused (the step answers)."""
        head = self.head
        if not (head.chunked or head.content_length):
            return b""
        if 0 <= limit < (head.content_length or 0):
            raise BodyTooLarge(f"a request body of {head.content_length} bytes, over {limit}")
        x = self.x
        if not self.req_done:
            conn = self.conn
            x.body_size = sum(map(len, self._held_payload()))
            x.body_limit = limit
            if 0 <= limit < x.body_size:
                raise BodyTooLarge(f"a request body over {limit} bytes")
            waiter = x.body_wait = conn.loop.create_future()
            conn.resume_reading(conn.PAUSE_BUFFER)  # past HIGH_WATER too, up to the limit
            if head.expect_continue:
                conn.send(CONTINUE)  # the body is wanted now
            try:
                await waiter
            finally:
                x.body_wait = None
        body = b"".join(self._held_payload())
        if 0 <= limit < len(body):  # a chunked one, in before the step asked
            raise BodyTooLarge(f"a request body over {limit} bytes")
        return body

    def _body_read(self, size: int) -> None:
        """``size`` more bytes of payload while a step reads the body (read_body)."""
        x = self.x
        waiter = x.body_wait
        assert waiter is not None
        x.body_size += size
        if 0 <= x.body_limit < x.body_size:
            x.body_wait = None
            self.conn.pause_reading(self.conn.PAUSE_BUFFER)
            if not waiter.done():
                waiter.set_exception(BodyTooLarge(f"a request body over {x.body_limit} bytes"))

    def _held_payload(self) -> list[bytes]:
        """The request body held in ``buffered`` (request_body's parts: a size line,
        the data and CRLF each when chunked, then CHUNK_END; the data alone
        otherwise), without its framing."""
        buffered = self.buffered
        if not buffered:
            return []
        return buffered[1::3] if self.head.chunked else buffered

    def _held(self, args: tuple) -> None:
        self.header_timer = None
        if self.conn.ex is self and not self.resp_done:
            self._forward(*args)

    def _forward(
        self,
        route: Route,
        fwd: Forward | None,
        path: bytes,
        query: bytes,
        authority: bytes,
        forwarded_port: bytes,
        cleaned: bool,
    ) -> None:
        """The general path after the pipeline: pick the server, write the head, connect."""
        conn = self.conn
        head = self.head
        pipeline = route.pipeline
        # From here on every answer, the service's errors included, takes the route's
        # response header edits (Traefik's headers middleware modifies what the
        # handlers after it write), with those the pipeline set for this request.
        self.response_edits = pipeline.response_edits if fwd is None else pipeline.respond(fwd)
        service = route.service
        if service.sticks:
            cookies = [v for n, v in head.headers if len(n) == 6 and n.lower() == b"cookie"]
            self.x.set_cookies = out = []
            backend = service.pick_sticky(cookies, out, conn.client_ip)
        else:
            self.x.set_cookies = None
            backend = service.pick()
        if backend is None or backend.status:
            self._unserved(route, backend)
            return
        if route.deadline or route.try_timeout:
            self._arm_timeouts(route)
        if head.version == b"2.0":  # gRPC's clients speak HTTP/2 only
            timeout = timeout_of(head.headers)
            if timeout is not None:
                self._arm_grpc_deadline(route, timeout)
        self.backend = backend
        edits = pipeline.request_edits
        target = None
        prefix = b""
        if fwd is not None:
            if cleaned or fwd.path is not path or fwd.query is not query or fwd.prefix:
                target = fwd.path + b"?" + fwd.query if fwd.query else fwd.path
            prefix = fwd.prefix
            if fwd.headers:
                edits = HeaderEdits([*(edits.pairs if edits else ()), *fwd.headers])
        elif cleaned:
            target = path + b"?" + query if query else path
        trace = route.trace
        if trace is not None:
            # tracing: the route's Traced (edge.entrypoints.tracing), which chains to
            # the access log, adds the upstream's traceparent.
            edits = trace(self, edits)
        if fwd is not None and fwd.spool is not None:
            # A held body (buffering) goes with its length, not re-framed.
            spool = fwd.spool
            fwd.spool = None
            length = spool.size
            headers = [
                (n, v)
                for n, v in head.headers
                if n.lower() not in (b"content-length", b"transfer-encoding")
            ]
            headers.append((b"Content-Length", b"%d" % length))
            head = self.head = RequestHead(
                head.method,
                head.target,
                head.version,
                headers,
                head.keep_alive,
                False,
                length,
                head.upgrade,
                False,
                host=head.host,
            )
            if target is None:  # rebuilt, not passed through: origin-form
                origin_path, origin_query, _ = forward.split_target(head.target)
                target = origin_path + b"?" + origin_query if origin_query else origin_path
            if length:
                self.x.held_body = spool
                self.x.spool_iter = spool.chunks()
            else:
                spool.close()
        # What _up_head makes, without the call (one per request on the general path).
        self.up_head = forward.upstream_request(
            head,
            backend.transport.pools,
            conn.client_ip_b,
            conn.ctx.scheme,
            authority,
            forwarded_port,
            conn.trusted,
            target,
            None if backend.pass_host else backend.server.authority,
            edits,
            prefix,
        )
        if fwd is not None and (fwd.retry is not None or fwd.replay is not None):
            # What a retry makes another head with (_retry), for the server it picks.
            self.x.up_args = (authority, forwarded_port, target, edits, prefix)
            self.x.attempt = 1
            self.x.began = conn.loop.time()
        # A mirroring service's tee (middlewares' module doc), looked up in its class: a
        # getattr that misses costs an exception per request.
        tee = type(service).__dict__.get("tee")
        if tee is not None:
            self.x.tee = tee(service, head, self.up_head)
            if self.x.tee is not None:
                self._tee_catch_up()
        # (Not for HTTP/1.0: its answer must say keep-alive, see upstream_head.)
        self.express = (
            self.response_edits is None
            and not self.x.set_cookies  # written by upstream_head
            and self.ends is None  # upstream_quick runs no ends
            and not pipeline.responders  # run by upstream_head
            and self.x.tee is None  # read by request_body
            and (fwd is None or fwd.retry is None)  # read by _upstream_error
            and self.x.spool_iter is None  # a held body, pumped by _attach
            and not head.upgrade
            and head.version == b"1.1"
        )
        if head.expect_continue and not self.req_done and (head.chunked or head.content_length):
            conn.send(CONTINUE)
        self._connect()

    def _up_head(self, backend: Backend, up_args: tuple) -> bytes:
        """The request's head for ``backend``: ``up_args`` is what _forward worked out
        (authority, forwarded port, target, header edits, prefix)."""
        conn = self.conn
        authority, forwarded_port, target, edits, prefix = up_args
        return forward.upstream_request(
            self.head,
            backend.transport.pools,
            conn.client_ip_b,
            conn.ctx.scheme,
            authority,
            forwarded_port,
            conn.trusted,
            target,
            None if backend.pass_host else backend.server.authority,
            edits,
            prefix,
        )

    # -- retries (edge.http.middlewares.retry) -------------------------------------------

    def _retry(self, sent: bool | None, status: int) -> bool:
        """Whether the request goes again after a try answered with ``status`` (edge's
        own for a failure; ``sent``: None for no network failure, else whether the
        request may have reached the server), as the retry middleware's policy says;
        if so the next try is planned after its backoff."""
        fwd = self.x.fwd
        assert fwd is not None and fwd.retry is not None
        head = self.head
        if head.upgrade or self.upgrade_rest is not None:
            return False
        x = self.x
        # A body not held is gone once sent (a held one is edge's to send again).
        streamed = bool(head.chunked or (head.content_length and x.held_body is None))
        elapsed = self.conn.loop.time() - x.began
        wait = fwd.retry.again(x.attempt, elapsed, status, sent, replayable(head), streamed)
        if wait is None:
            return False
        x.attempt += 1
        # header_timer holds the wait, which abandon() cancels with the client.
        self.header_timer = self.conn.loop.call_later(wait, self._try_again)
        return True

    def _retried(self, head: ResponseHead) -> bool:
        """Whether the retry middleware sends the request again instead of this answer
        (its status is one it retries): the answer goes to no client then, its
        connection dropped (passive health still counts it)."""
        if self.x.divert or not self._retry(None, head.status):
            return False
        backend = self.backend
        if backend.health is not None:
            backend.health.answered(backend.server.url, head.status)
        self.release_upstream(reuse=False)
        return True

    def _replay(self, status: int) -> bool:
        """Whether buffering's retryExpression sends the request again after a try that
        ended with ``status`` (its response held, or a network failure); if so the next
        try is planned."""
        fwd = self.x.fwd
        assert fwd is not None and fwd.replay is not None
        head = self.head
        if self.x.attempt >= MAX_TRIES or head.upgrade:
            return False
        if (head.chunked or head.content_length) and self.x.held_body is None:
            return False  # a body not held cannot go twice
        if not fwd.replay(self.x.attempt, status, head.method):
            return False
        self.x.attempt += 1
        self.header_timer = self.conn.loop.call_later(0, self._try_again)
        return True

    def _unserved(self, route: Route, backend: Backend | None) -> None:
        """Edge's answer where the route's service gave no server to send to: 503 when
        it had none, a :class:`~edge.router.http.StatusBackend`'s status when it picked
        one (a weighted member that answers: the Gateway API's 500 for a backendRef
        that cannot be served)."""
        service = route.service.name
        if backend is None:
            error = HTTPError(f"router {route.name}: service {service} has no server", status=503)
        else:
            error = HTTPError(
                f"router {route.name}: service {service}: member {backend.service} answers "
                f"{backend.status}",
                status=backend.status,
            )
        self.answer_error(error)

    def _arm_timeouts(self, route: Route) -> None:
        """The route's ``timeouts`` as its request goes upstream: ``request`` from the
        request's arrival (the steps before bound their own waits) over every try and
        the response's end, ``backendRequest`` over this try (each retry arms its
        own); they go with the exchange however it ends."""
        if self.ends is None:
            self.ends = []
        if route.deadline:
            timer = self.conn.loop.call_at(self.x.deadline, self._deadline_passed, route)
            self.ends.append(timer.cancel)
        if route.try_timeout:
            self.ends.append(self._cancel_try)
            self._arm_try(route)

    def _arm_grpc_deadline(self, route: Route, timeout: float) -> None:
        """A gRPC request's ``grpc-timeout`` bounds its exchange (codec.grpc)."""
        if self.ends is None:
            self.ends = []
        timer = self.conn.loop.call_later(timeout, self._grpc_deadline_passed, route, timeout)
        self.ends.append(timer.cancel)

    def _grpc_deadline_passed(self, route: Route, timeout: float) -> None:
        """grpc-timeout passed: the upstream request is cancelled and the client answered
        DEADLINE_EXCEEDED, trailers-only; a response begun is cut (its client's own
        deadline, the same, tells it why)."""
        if self.conn.ex is not self or self.resp_done:
            return
        log.info("router %s: grpc-timeout %gs passed: cancelled", route.name, timeout)
        self.abandon()
        if self.resp_started:
            self.conn.abort()
            return
        self.keep_alive = False  # the request's rest is not wanted
        answer = trailers_only(DEADLINE_EXCEEDED, "deadline exceeded (edge)")
        self.resp_out = answer
        self.status = 200
        self.resp_started = self.resp_done = True
        self.conn.send(answer)
        if self.ends is not None:
            self.run_ends()
        self.conn.exchange_done(self)

    def _deadline_passed(self, route: Route) -> None:
        if self.conn.ex is not self or self.resp_done:
            return
        why = f"router {route.name}: no whole response within timeouts.request {route.deadline:g}s"
        self.abandon()
        if self.resp_started:
            log.warning("%s: the response is cut", why)
            self.conn.abort()
            return
        self.answer_error(UpstreamTimeout(why))

    def _arm_try(self, route: Route) -> None:
        x = self.x
        if x.try_timer is not None:
            x.try_timer.cancel()
        x.try_timer = self.conn.loop.call_later(
            route.try_timeout, self._try_passed, route, x.attempt
        )

    def _cancel_try(self) -> None:
        timer = self.x.try_timer
        if timer is not None:
            self.x.try_timer = None
            timer.cancel()

    def _try_passed(self, route: Route, attempt: int) -> None:
        """``backendRequest`` ran out on try ``attempt``: a timeout of its server (a
        retry may send the request again), or the response cut if it began."""
        self.x.try_timer = None
        if self.conn.ex is not self or self.resp_done or self.x.attempt != attempt:
            return
        if self.dial_task is not None:  # this try's dial: it must not attach later
            self.dial_task.cancel()
            self.dial_task = None
        timeout = route.try_timeout
        self._upstream_error(
            UpstreamTimeout(f"no whole response within timeouts.backendRequest {timeout:g}s"),
            sent=True,
        )

    def _try_again(self) -> None:
        self.header_timer = None
        if self.conn.ex is not self or self.resp_done or self.route is None:
            return
        route = self.route
        meter = route.meter
        if meter is not None:  # traefik_service_retries_total
            meter.retry(route.service.name)
        service = route.service
        # The server the service picks next (a client's address chooses for some).
        backend = (
            service.pick_sticky([], [], self.conn.client_ip) if service.sticks else service.pick()
        )
        if backend is None or backend.status:
            self._unserved(route, backend)
            return
        if route.try_timeout:
            self._arm_try(route)
        self.backend = backend
        self.up_head = self._up_head(backend, self.x.up_args)
        # What the filters made of the failed try's response (a held one) starts over.
        self.x.filters = None
        self.x.filtered = self.x.resp_held = False
        if self.x.held_body is not None:
            self.x.spool_iter = self.x.held_body.chunks()  # the held body goes again
        self._connect()

    # -- the request body -----------------------------------------------------------

    def request_body(self, data: bytes) -> None:
        if self.resp_done:
            if not self.express and self.x.tee is not None:
                self._drop_tee()
            return  # answered already (an error, or an early response): drop
        self.x.received += len(data)  # (a request with a body is never express_start's)
        if not self.express:
            if self.x.sink is not None:
                if not self.x.sink.write(data):
                    self._spool_overflow()
                return
            if self.x.tee is not None:
                self.x.tee.body(data)
            if self.x.body_wait is not None:
                self._body_read(len(data))
        if self.head.chunked:
            self._send_upstream((b"%x\r\n" % len(data), data, CRLF))
        else:
            self._send_upstream((data,))

    def request_end(self) -> None:
        self.req_done = True
        if not self.express and self.x.sink is not None and not self.resp_done:
            # The held body is in: the request goes, with it (buffering).
            self.x.sink = None
            self.conn.request_read()
            self._stepped(self.x.up_args)  # a step's delay (rateLimit) still holds it
            return
        if not self.express and self.x.tee is not None:
            if self.resp_done:
                self._drop_tee()
            else:
                self.x.tee.end()
                self.x.tee = None
        head = self.head
        if head.chunked or head.content_length:
            self.conn.request_read()  # readTimeout's bound on the body ends
        if self.head.chunked and not self.resp_done:
            trailers = self.x.req_trailers  # (a chunked request is never express_start's)
            self._send_upstream((last_chunk(trailers) if trailers else CHUNK_END,))
        if not self.express and self.x.body_wait is not None:
            waiter = self.x.body_wait
            self.x.body_wait = None
            if not waiter.done():
                waiter.set_result(None)  # a step reading the body has it all
        if self.upstream is not None and not self.resp_started:
            self._start_header_timer()
        if self.resp_done:
            self.conn.exchange_done(self)

    def request_trailers(self, fields: list[Header]) -> None:
        """The request's trailer fields, before its end (``request_end``): upstream in
        the last chunk of a body sent chunked as it comes; dropped where it goes with a
        length (a held body, an HTTP/2 request that stated one)."""
        if self.head.chunked and self.x.sink is None:  # (never express_start's)
            fields = trailer_fields(fields)
            if fields:
                self.x.req_trailers = fields

    def _spool_overflow(self) -> None:
        """The held request body passed its limit: 413, the connection closed after it."""
        sink = self.x.sink
        self.x.sink = None
        if sink is not None:
            sink.close()
        self.keep_alive = False
        self._answer_own(Answer(413, body=b"Request Entity Too Large"), self.response_edits)

    def _pump(self) -> None:
        """Write the held request body upstream while the connection takes it."""
        upstream = self.upstream
        chunks = self.x.spool_iter
        if upstream is None or chunks is None or upstream.transport is None:
            return
        if self.conn.up_out is not None:
            # Writes of this read are batched (the head among them): after them.
            self.conn.loop.call_soon(self._pump)
            return
        transport = upstream.transport
        while transport.get_write_buffer_size() < HIGH_WATER:
            chunk = next(chunks, None)
            if chunk is None:
                self.x.spool_iter = None
                return
            transport.write(chunk)

    def _send_upstream(self, parts: tuple[bytes, ...]) -> None:
        upstream = self.upstream
        if upstream is not None:
            up_out = self.conn.up_out
            if up_out is not None:
                up_out.extend(parts)
            else:
                upstream.transport.writelines(parts)
            return
        if self.buffered is None:
            self.buffered = []
        self.buffered.extend(parts)
        self.buffered_size += sum(map(len, parts))
        if self.buffered_size > HIGH_WATER and (self.express or self.x.body_wait is None):
            self.conn.pause_reading(self.conn.PAUSE_BUFFER)

    # -- the upstream connection ------------------------------------------------------

    def _connect(self) -> None:
        if self.started:  # the access log's OriginDuration runs from here (General.origin)
            self.x.origin = time.perf_counter()
        backend = self.backend
        server = backend.server
        if server.tls and server.h2 and wants_h2(server, self.head):  # (h2c: take_idle's)
            conn = backend.transport.take_stream(server)
        else:
            conn = backend.transport.take_idle(server)
        if conn is not None:
            conn.reused = True
            self._attach(conn)
        else:
            self.dial_task = self.conn.loop.create_task(self._dial())

    async def _dial(self) -> None:
        backend = self.backend
        ctx = self.conn.ctx
        parser = ctx.response_parser
        try:
            if backend.server.h2 and wants_h2(backend.server, self.head):
                conn = await upstream_h2.connect(
                    backend.transport, backend.server, ctx.request_parser, parser
                )
            else:
                conn = await backend.transport.dial(
                    backend.server, lambda: UpstreamConnection(parser)
                )
        except UpstreamConnectError as exc:
            self.dial_task = None
            if self.conn.ex is self:
                self._upstream_error(exc, sent=False)
            return
        self.dial_task = None
        if self.conn.transport is None or self.conn.ex is not self:
            backend.transport.put_idle(backend.server, conn)
            return
        self._attach(conn)

    def _attach(self, upstream: UpstreamConnection) -> None:
        conn = self.conn
        upstream.owner = self
        upstream.received = False
        self.upstream = upstream
        # A divert's page is asked for with GET, whatever the client's method.
        upstream.parser.expect(self.head.method if self.express or not self.x.divert else b"GET")
        buffered = self.buffered
        if buffered:
            parts = [self.up_head, *buffered]
            self.buffered = None
            self.buffered_size = 0
            conn.resume_reading(conn.PAUSE_BUFFER)
        else:
            parts = None
        if conn.up_out is not None:
            conn.up_out += parts or (self.up_head,)
        elif parts:
            upstream.transport.writelines(parts)
        else:
            upstream.transport.write(self.up_head)
        if conn.write_paused:
            upstream.pause_reading()
        if not self.express and self.x.spool_iter is not None:
            self._pump()
        if self.req_done:
            self._start_header_timer()

    def _start_header_timer(self) -> None:
        """responseHeaderTimeout runs from the end of the request, body included, as
        Go's ResponseHeaderTimeout does (an upload may take longer than it)."""
        timeout = self.backend.transport.response_header_timeout
        if timeout and self.header_timer is None:
            self.header_timer = self.conn.loop.call_later(timeout, self._response_header_timeout)

    def _response_header_timeout(self) -> None:
        self.header_timer = None
        if self.conn.ex is self and not self.resp_started:
            self._upstream_error(
                UpstreamTimeout(
                    f"no response head within {self.backend.transport.response_header_timeout}s"
                )
            )

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def release_upstream(self, reuse: bool) -> None:
        upstream = self.upstream
        if upstream is None:
            return
        self.upstream = None
        upstream.owner = None
        if self.conn.up_out:
            self.conn.up_out = []  # the exchange is over: nothing more goes to that connection
        if upstream.paused:
            upstream.resume_reading()
        if reuse:
            self.backend.transport.put_idle(self.backend.server, upstream)
        else:
            upstream.abort()

    def _tee_catch_up(self) -> None:
        """What the body brought before the tee was made (while a step waited or a
        delay held the request, or a held body) goes to it first, without framing;
        a body already complete ends it."""
        tee = self.x.tee
        assert tee is not None
        held = self.x.held_body
        if held is not None:
            for chunk in held.chunks():
                tee.body(chunk)
        else:
            for data in self._held_payload():
                tee.body(data)
        if self.req_done:
            tee.end()
            self.x.tee = None

    def _drop_tee(self) -> None:
        tee = self.x.tee
        self.x.tee = None
        if tee is not None:
            tee.abort()

    def abandon(self) -> None:
        """The client is gone or broke the request: drop the upstream side."""
        if not self.express:
            if self.x.tee is not None:
                self._drop_tee()
            if self.x.sink is not None:
                self.x.sink.close()
                self.x.sink = None
        upstream = self.upstream
        if upstream is not None:
            self.upstream = None
            upstream.owner = None
            upstream.abort()
        if self.dial_task is not None:
            self.dial_task.cancel()
            self.dial_task = None
        self._cancel_header_timer()

    def client_gone(self, status: int = 499) -> None:
        """The client left before this exchange ended: the upstream request is
        aborted and the exchange logged, as nginx logs a client's close with 499
        (``status``) when no answer began."""
        if not self.resp_started:
            self.status = status
        self.abandon()
        if not self.express and self.ends is not None:
            self.run_ends()
        self.log()

    # -- UpstreamOwner: events from the upstream connection -----------------------------

    def hold_writes(self) -> None:
        conn = self.conn
        conn.out = []
        # ...and what they write upstream: a pipelined request taken up once this
        # response ends may be given this very connection, which the parse's end
        # aborts if more than the response came (edge.http.server.upstream); written at
        # once, the request would reach the server there and again on the new
        # connection its loss makes it retried on.
        conn.up_out = []

    def release_writes(self) -> None:
        conn = self.conn
        conn.flush_batch()
        conn.flush_upstream()

    def pause_sending(self) -> None:
        self.conn.pause_reading(self.conn.PAUSE_UPSTREAM)
        x = getattr(self, "x", None)  # none on an express start: it sends a head alone
        if x is not None and x.send_timer is None and self.upstream is not None:
            timeout = self.backend.transport.config.forwarding_timeouts.write_timeout
            if timeout:
                self._arm_send_timer(x, self.upstream, timeout)

    def resume_sending(self) -> None:
        self.conn.resume_reading(self.conn.PAUSE_UPSTREAM)
        x = getattr(self, "x", None)
        if x is not None and x.send_timer is not None:
            x.send_timer.cancel()
            x.send_timer = None
        if not self.express and self.x.spool_iter is not None:
            self._pump()

    def _arm_send_timer(self, x: General, upstream: UpstreamConnection, timeout: float) -> None:
        """writeTimeout (ingress-nginx's proxy-send-timeout, nginx's "between two
        successive write operations"): while the upstream connection is paused for
        writing, each ``timeout`` must see it take some of what edge holds for it (its
        transport's buffer shrank), else 504. So the upstream is given up after taking
        nothing for between one and two timeouts."""
        transport = upstream.transport
        if transport is not None:
            x.send_left = transport.get_write_buffer_size()
            x.send_timer = self.conn.loop.call_later(timeout, self._send_timeout, upstream, timeout)

    def _send_timeout(self, upstream: UpstreamConnection, timeout: float) -> None:
        x = self.x
        x.send_timer = None
        transport = upstream.transport
        if self.upstream is not upstream or self.resp_started or transport is None:
            return  # another try, an answer begun, or the connection gone
        if transport.get_write_buffer_size() < x.send_left:
            self._arm_send_timer(x, upstream, timeout)  # it took some: wait again
            return
        self._upstream_error(
            UpstreamTimeout(f"the upstream took none of the request for {timeout:g}s")
        )

    def upstream_head(self, head: ResponseHead) -> None:
        self._cancel_header_timer()
        if head.status == 101 and not (self.head.upgrade and self.upgrade_rest is not None):
            self._upstream_error(
                UpstreamConnectError("upstream switched protocols without an upgrade request")
            )
            return
        if not self.express:
            if self.ends is not None:
                fwd = self.x.fwd  # None where only the route's timeouts registered ends
                if fwd is not None and fwd.started:  # a step reads the time to the head
                    fwd.elapsed = time.perf_counter() - fwd.started
            if self.x.fwd is not None and self.x.fwd.retry is not None and self._retried(head):
                return  # another try is on its way
            if self.x.divert:
                head = self._diverted(head)
                if head.has_body and (self.head.method == b"HEAD" or head.status in NO_BODY):
                    head = self._without_body(head)
            if (
                self.x.fwd is not None
                and not self.head.upgrade
                and not self.x.filtered
                and self.route.pipeline.responders
            ):
                filtered = self._filter(head)
                if filtered is None:
                    return  # diverted: another request is on its way
                head = filtered
                if self.x.resp_held:
                    self.resp_head = head  # sent with the body, at its end
                    return
        self.resp_head = head
        self.resp_started = True
        self.status = head.status
        health = self.backend.health
        if health is not None:  # passive health: a 5xx is a failed attempt
            health.answered(self.backend.server.url, head.status)
        if not self.req_done and self.keep_alive:
            self.answer_keeps_alive()  # an answer before the body's end: see early_end
        chunked = False
        if head.has_body and head.content_length is None:
            if self.head.version == b"1.1":
                chunked = True
            else:
                self.keep_alive = False
        if self.head.upgrade and head.status != 101:
            self.keep_alive = False  # the request parser stopped at the upgrade
        self.resp_chunked = chunked
        edits = self.response_edits
        if edits is not None and self.route is not None and self.route.pipeline.vary:
            edits = vary_origin(edits, head.headers)  # Origin joins the response's own Vary
        out = forward.client_response(head, self.keep_alive, chunked, edits)
        if not self.express and self.x.set_cookies:
            # After the status line, beside the upstream's own Set-Cookie headers.
            end = out.index(b"\r\n") + 2
            out = b"".join((out[:end], *self.x.set_cookies, out[end:]))
        if self.keep_alive and self.head.version == b"1.0" and head.status != 101:
            out = forward.keep_alive_for_http10(out)
        self.resp_out = out  # upstream_failed looks for it among the writes held back
        self.conn.send(out)

    def upstream_quick(self, upstream: UpstreamConnection, head: ResponseHead, data: bytes) -> None:
        """A whole response in one read (ResponseParser.quick) to an express exchange.

        The same outcome as ``upstream_head``, ``upstream_body`` and
        ``upstream_end`` for it, in one call: a status of 200 or more, a
        Content-Length body, no upgrade asked, no response header edits.
        """
        if self.header_timer is not None:
            self._cancel_header_timer()
        if not self.req_done and self.keep_alive:
            self.answer_keeps_alive()  # an answer before the body's end: see early_end
        self.resp_head = head
        self.resp_started = True
        self.resp_done = True
        self.status = head.status
        backend = self.backend
        if backend.health is not None:  # passive health: a 5xx is a failed attempt
            backend.health.answered(backend.server.url, head.status)
        # What forward.client_response gives, here without the call: a quick head's
        # cut when the client connection stays open, else its closing form once made.
        if self.keep_alive:
            out = head.cut
        else:
            out = head.closing or forward.client_response(head, False, False, None)
        self.sent = head.content_length  # data holds exactly the head and its body
        conn = self.conn
        transport = conn.transport
        if transport is not None and not transport.is_closing():
            if out is head.raw:
                transport.write(data)
            else:
                transport.writelines((out, data[len(head.raw) :]))
        # What _response_done does, without the call: the upstream connection
        # (``upstream`` is this exchange's: only its owner hears from it) goes back or away.
        self.upstream = None
        upstream.owner = None
        if conn.up_out:
            conn.up_out = []  # the exchange is over: nothing more goes to that connection
        if upstream.paused:
            upstream.resume_reading()
        if self.req_done and head.keep_alive:
            # transport.put_idle, without the call where the server's pool is bound
            # to this transport and has room (a nonzero idle_deadline: it can serve).
            transport = backend.transport
            server = backend.server
            idle = server.idle
            if server.pooler is transport and len(idle) < transport.keep and upstream.idle_deadline:
                upstream.idle_deadline = transport.loop.time() + transport.idle_timeout
                idle.append(upstream)
            else:
                transport.put_idle(server, upstream)
        else:
            upstream.abort()
            if not self.req_done:
                self.early_end()
                return
        conn.exchange_done(self)

    def _filter(self, head: ResponseHead) -> ResponseHead | None:
        """Run the route's response filters on a response, with a body or without
        (middlewares' module doc); the head the client gets, or None when one
        diverted it."""
        fwd = self.x.fwd
        assert fwd is not None and self.route is not None
        reply = Reply(
            head.status,
            head.reason,
            list(head.headers),
            None if head.chunked else head.content_length,
            diverted=self.x.divert != 0,
            bodiless=not head.has_body,
        )
        filters = []
        self.x.filtered = True
        for m in self.route.pipeline.responders:
            f = m.response(fwd, reply)
            if reply.divert_to is not None and self.req_done:
                backend = self.backend
                if backend.health is not None:
                    backend.health.answered(backend.server.url, head.status)
                self.release_upstream(reuse=False)  # its body is not wanted
                self._divert(*reply.divert_to)
                return None
            if f is not None:
                filters.append(f)
        if filters:  # after a divert's _NO_BODY, if any
            self.x.filters = [*self.x.filters, *filters] if self.x.filters else filters
        self.x.resp_held = reply.hold
        if not reply.changed and reply.length == head.content_length:
            return head
        return ResponseHead(
            reply.status,
            reply.reason,
            b"1.1",
            reply.headers,
            head.keep_alive,
            False,
            reply.length,
            head.has_body,
        )

    def _diverted(self, head: ResponseHead) -> ResponseHead:
        """The head of a diverted request's answer, with the status the divert asked for
        (a :class:`Page`'s keeps its own)."""
        own = self.x.page_status
        return ResponseHead(
            head.status if own else self.x.divert,
            head.reason if own else b"",
            b"1.1",
            head.headers,
            head.keep_alive,
            head.chunked,
            head.content_length,
            head.has_body,
        )

    def _without_body(self, head: ResponseHead) -> ResponseHead:
        """A diverted answer's head where the client's response has no body (a HEAD's,
        a 204 or 304 sent): its body is read and dropped, as Go's server drops what a
        handler writes there."""
        self.x.filters = [_NO_BODY]
        return ResponseHead(
            head.status,
            head.reason,
            b"1.1",
            head.headers,
            head.keep_alive,
            head.chunked,
            head.content_length,
            False,
        )

    def _divert(self, service, target: bytes, status: int) -> None:
        """Answer with ``service``'s response to a GET of ``target`` instead (Reply.divert):
        the client's headers go with it, no body. A :class:`Page` (ingress-nginx's custom
        errors) adds its headers, and its page keeps its own status."""
        extra: Sequence[tuple[bytes, bytes]] = ()
        if isinstance(service, Page):
            service, extra = service
        self.x.divert = status
        self.x.page_status = bool(extra)
        self.x.filters = None
        self.x.filtered = self.x.resp_held = False
        route = self.route
        assert route is not None
        backend = service.pick() if service is not None else None
        if backend is None or backend.status:
            self.answer_error(
                HTTPError(f"router {route.name}: the errors service has no server", status=status)
            )
            return
        conn = self.conn
        head = self.head
        headers = [(n, v) for n, v in head.headers if n.lower() not in _NOT_DIVERTED]
        if extra:
            replaced = {n.lower() for n, _ in extra}
            headers = [h for h in headers if h[0].lower() not in replaced]
            headers.extend(extra)
        page = RequestHead(b"GET", target, b"1.1", headers, True, False, None, False, False)
        authority = head.host
        _, forwarded_port = conn.host_port(authority)
        self.backend = backend
        self.x.set_cookies = None
        edits = None
        trace = route.trace  # tracing, as in _forward
        if trace is not None:
            edits = trace(self, None)
        self.up_head = forward.upstream_request(
            page,
            backend.transport.pools,
            conn.client_ip_b,
            conn.ctx.scheme,
            authority,
            forwarded_port,
            conn.trusted,
            target,
            None if backend.pass_host else backend.server.authority,
            edits,
        )
        self._connect()

    def upstream_body(self, data: bytes) -> None:
        if not self.express and self.x.filters is not None:
            try:
                for f in self.x.filters:
                    data = f.data(data)
                    if not data:
                        return
            except BodyTooLarge as exc:
                self._held_too_large(str(exc))
                return
        self.sent += len(data)
        if self.resp_chunked:
            self.conn.send(b"%x\r\n" % len(data), data, CRLF)
        else:
            self.conn.send(data)

    def upstream_interim(self, head: ResponseHead) -> None:
        """A 1xx but 101 before the response (103 Early Hints): to the client as it came,
        hop-by-hop fields gone, as Go's ReverseProxy passes them for Traefik. Not a 100
        Continue (edge answers Expect itself), and not to an HTTP/1.0 client (RFC 9110
        15.2) nor after a divert or a response already begun."""
        if (
            head.status == 100
            or self.resp_started
            or self.head.version == b"1.0"
            or (not self.express and self.x.divert)
        ):
            return
        self.conn.send(forward.response_head(head, chunked=False, keep_alive=True))

    def upstream_trailers(self, fields: list[Header]) -> None:
        """The response's trailer fields, before its end (``upstream_end``): to the client
        as its side carries them (``ClientSide.trailers``), hop-by-hop and framing ones
        gone (``trailer_fields``). A held response goes with a length: dropped."""
        if self.resp_done or not self.resp_started:
            return
        fields = trailer_fields(fields)
        if not fields:
            return
        if not self.express and self.x.filters is not None:
            self._filters_end()  # what the filters emit last goes before them
        self.conn.trailers(fields, self.resp_chunked)
        self.resp_chunked = False  # a chunked body's last chunk carried them

    def upstream_end(self, upstream: UpstreamConnection) -> None:
        if self.resp_head.status == 101:
            return  # upstream_upgrade follows with the first tunnel bytes
        if not self.express and self.x.resp_held:
            self._release_held()
            return
        if not self.express and self.x.filters is not None:
            self._filters_end()
        if self.resp_chunked:
            self.conn.send(CHUNK_END)
        self.resp_done = True
        self._response_done()

    def _held_too_large(self, why: str) -> None:
        """A held response passed its limit: 413 in its place, its connection dropped."""
        log.info("router %s: %s", self.route.name if self.route else "?", why)
        self.x.filters = None
        self.x.resp_held = False
        self.release_upstream(reuse=False)
        self.answer_error(HTTPError(why, status=413))

    def _release_held(self) -> None:
        """A held response ended: its head, with the length of what the filters emit, and
        that; or, when buffering's retryExpression says so, another try instead."""
        filters = self.x.filters
        self.x.filters = None
        self.x.resp_held = False
        held = self.resp_head
        assert held is not None
        fwd = self.x.fwd
        if fwd is not None and fwd.replay is not None and self._replay(held.status):
            self.release_upstream(reuse=self.req_done and held.keep_alive)
            return
        tail = b""
        for f in filters or ():
            if tail:
                tail = f.data(tail)
            tail += f.end()
        has_body = held.has_body  # a bodiless one goes as it came (its Content-Length)
        head = ResponseHead(
            held.status,
            held.reason,
            b"1.1",
            held.headers,
            held.keep_alive,
            False,
            len(tail) if has_body else held.content_length,
            has_body,
        )
        self.upstream_head(head)  # filtered already: sent as it is
        if tail and has_body:
            self.upstream_body(tail)
        self.resp_done = True
        self._response_done()

    def _filters_end(self) -> None:
        """The body's end through the filters: what each emits last passes through
        the filters after it."""
        filters = self.x.filters
        assert filters is not None
        self.x.filters = None
        tail = b""
        for f in filters:
            if tail:
                tail = f.data(tail)
            tail += f.end()
        if tail and self.resp_head.has_body:  # a bodiless response's filters emit nothing
            self.sent += len(tail)
            if self.resp_chunked:
                self.conn.send(b"%x\r\n" % len(tail), tail, CRLF)
            else:
                self.conn.send(tail)

    def _response_done(self) -> None:
        """The response is complete: the upstream connection goes back or away."""
        if not self.express and self.ends is not None:
            self.run_ends()
        upstream = self.upstream
        if upstream is not None:  # release_upstream, without the call
            self.upstream = None
            upstream.owner = None
            conn = self.conn
            if conn.up_out:
                conn.up_out = []  # the exchange is over: nothing more goes to that connection
            if upstream.paused:
                upstream.resume_reading()
            if self.req_done and self.resp_head.keep_alive:
                self.backend.transport.put_idle(self.backend.server, upstream)
            else:
                upstream.abort()
        if not self.req_done:
            self.early_end()
            return
        self.conn.exchange_done(self)

    def early_end(self) -> None:
        """The response ended before the request body did. Whether the client
        connection survives was decided when the response head went out
        (``answer_keeps_alive``, as for edge's own answers; Go's server decides the
        same way): a small rest is read and dropped, and ``request_end`` ends the
        exchange; else the head said ``Connection: close`` and the connection closes
        now (the rest cannot be told from a next request)."""
        if self.keep_alive:
            self.conn.resume_reading(self.conn.PAUSE_UPSTREAM)  # the body now goes nowhere
            return
        self.conn.exchange_done(self)

    def upstream_upgrade(self, rest: bytes) -> None:
        self.resp_done = True
        upstream = self.upstream
        self.upstream = None
        upstream.owner = None
        # What middlewares registered for the end runs when the tunnel ends (an
        # inFlightReq slot is the tunnel's while it lives, as in Traefik).
        ends = None if self.express or self.ends is None else self.run_ends
        self.conn.tunnel(upstream.transport, rest, self.upgrade_rest or b"", ends)
        self.upgrade_rest = None
        self.log()

    def upstream_lost(self, upstream: UpstreamConnection, exc: Exception | None) -> None:
        if self.resp_started:
            # Cut in the middle of a body: the client can only learn it by a close.
            if not self.express and self.x.fwd is not None:
                self.x.fwd.network_error = True
            log.warning(
                "router %s: upstream %s closed during the response",
                self.route.name if self.route else "?",
                self.backend.server.url if self.backend else "?",
            )
            self.upstream = None
            self.conn.abort()
            return
        head = self.head
        if (
            upstream.reused
            and not upstream.received
            and not self.retried
            and not head.chunked
            and not head.content_length
            and not head.upgrade
            and (upstream.withheld or replayable(head))
        ):
            # A pooled connection the server closed as it was reused: most likely
            # while idle, before the request came, but it may have read and acted
            # on it; so only a request that may safely be sent twice goes out
            # again on a new one, or one edge knows it never sent (withheld).
            self.retried = True
            self.upstream = None
            self._cancel_header_timer()
            self.dial_task = self.conn.loop.create_task(self._dial())
            return
        self.upstream = None
        self._upstream_error(
            UpstreamConnectError(
                f"upstream closed the connection before responding ({exc or 'EOF'})"
            ),
            sent=True,
        )

    def upstream_failed(self, exc: HTTPError, upstream: UpstreamConnection) -> None:
        """The upstream sent bytes that are not a valid response: a 502 while nothing
        of the response reached the client, else the client's connection is cut;
        logged with the server either way."""
        conn = self.conn
        out = conn.out
        conn.out = None  # what the invalid response wrote to the client so far is dropped
        if self.upstream is upstream:
            self.upstream = None
        # Nothing reached the client if this read began the response (its head is in the batch).
        if self.resp_started and out and any(part is self.resp_out for part in out):
            self.resp_started = False
            self.resp_chunked = False
            self.sent = 0
        self._upstream_error(UpstreamConnectError(f"invalid response: {exc.detail}"))

    def _upstream_error(self, exc: HTTPError, sent: bool | None = None) -> None:
        """No usable answer from the server: a retry, or ``exc``'s answer. ``sent``:
        None for an answer that is not to be retried (an invalid response, a
        timeout), else whether the request may have reached the server."""
        fwd = None if self.express else self.x.fwd
        if fwd is not None:
            fwd.network_error = True
        backend = self.backend
        log.warning(
            "router %s service %s server %s: %s",
            self.route.name if self.route else "?",
            backend.service if backend else "?",
            backend.server.url if backend else "?",
            exc.detail,
        )
        if backend is not None and backend.health is not None:
            # Passive health: no usable answer from this server (refused, reset, timed
            # out, invalid) is a failed attempt, as Traefik counts one.
            backend.health.failed(backend.server.url)
        self._cancel_header_timer()
        self.release_upstream(reuse=False)
        if self.resp_started:
            self.conn.abort()
            return
        if fwd is not None and fwd.replay is not None and self._replay(exc.status):
            return
        if fwd is not None and fwd.retry is not None and self._retry(sent, exc.status):
            return
        self.answer_error(exc)

    # -- edge's own answers -----------------------------------------------------------

    def answer_keeps_alive(self) -> bool:
        """Decide (once, before writing) whether the connection survives edge's own answer.

        A small unread request body is read and dropped to keep the connection;
        a large, chunked or upgrade one is not worth reading: close instead.
        """
        if self.keep_alive and not self.req_done:
            head = self.head
            if head.chunked or head.upgrade or (head.content_length or 0) > HIGH_WATER:
                self.keep_alive = False
        return self.keep_alive

    def _answer(self, data: bytes, status: int) -> None:
        """Send a complete response of edge's own for this request."""
        self.status = status
        self.sent = len(data) - data.index(b"\r\n\r\n") - 4  # the body's size, for the access log
        self.resp_out = data  # ...and its head (downstream_ headers)
        if self.keep_alive and self.head.version == b"1.0":
            data = forward.keep_alive_for_http10(data)
        self.resp_started = True
        self.resp_done = True
        self.conn.send(data)
        if not self.express and self.ends is not None:
            fwd = self.x.fwd
            if fwd is not None and fwd.started:
                fwd.elapsed = time.perf_counter() - fwd.started
            self.run_ends()
        if self.req_done or not self.keep_alive:
            self.conn.exchange_done(self)

    def _answer_own(self, answer: Answer, edits: HeaderEdits | None) -> None:
        close = not self.answer_keeps_alive()
        self._answer(
            forward.own_response(
                answer.status,
                answer.body,
                close=close,
                content_type=answer.content_type,
                lines=answer.lines,
                edits=edits,
            ),
            answer.status,
        )

    def _divert_own(self, status: int) -> bool:
        """Whether a filter that sees edge's own answers (``own_answers``: errors)
        diverts this one, an error of the route's service (502, 503, 504)."""
        fwd = self.x.fwd
        assert fwd is not None and self.route is not None
        reply = Reply(status, b"", [], 0, bodiless=self.head.method == b"HEAD")
        for m in self.route.pipeline.responders:
            if getattr(m, "own_answers", False):
                m.response(fwd, reply)
                if reply.divert_to is not None:
                    self._divert(*reply.divert_to)
                    return True
        return False

    def run_ends(self) -> None:
        """Run what middlewares registered for the exchange's end (Forward.on_end), once."""
        ends = self.ends
        self.ends = None
        fwd = self.x.fwd
        if fwd is not None:
            fwd.status = self.status
        if ends:
            for end in ends:
                try:
                    end()
                except Exception:  # one middleware's bug must not keep the others' slots
                    log.exception(
                        "router %s: a middleware's end of exchange failed",
                        self.route.name if self.route else "?",
                    )

    def answer_error(self, exc: HTTPError) -> None:
        if (
            not self.express
            and self.x.fwd is not None
            and not self.x.divert
            and self.req_done
            and self.route is not None
            and self.route.pipeline.responders
            and self._divert_own(exc.status)
        ):
            return
        if isinstance(exc, ProtocolError):  # a malformed request: 4xx, then the connection closes
            self.keep_alive = False
        close = not self.answer_keeps_alive()
        self._answer(
            forward.error_response(exc.status, close=close, edits=self.response_edits), exc.status
        )

    # -- the record --------------------------------------------------------------------

    def log(self) -> None:
        """The exchange ended: count it in the metrics, then hand it to the access log
        (tracing's hook before it), as its route decided (``Route.meter``,
        ``Route.record``: :mod:`edge.entrypoints.observability`), or, with no route,
        its entry point (the context's). The counting is the metrics' hot path, here
        rather than in a call: its cell found by route, status and method (one made by
        the meter on a miss), then two appends (:class:`edge.entrypoints.metrics.Meter`
        and ``Cell`` say what each holds)."""
        duration = perf_counter() - self.started
        route = self.route
        if route is not None:
            meter = route.meter
            access_log = route.record
        else:
            ctx = self.conn.ctx
            meter = ctx.metrics
            access_log = ctx.access_log
        if meter is not None:
            head = self.head
            if self.resp_out is None and head.cut is not None:  # a quick head, quick answer
                try:
                    index = meter.index if self.backend is not None else meter.unserved
                    cell = index[route][self.status][head.method]
                except KeyError:
                    cell = meter.cell(self)
            else:  # any protocol (Traefik's label): the meter reads it from the request
                cell = meter.cell(self)
                if head.content_length or head.chunked:  # (a quick head has no body)
                    cell.req_bytes += self.x.received  # the body bytes read
            cell.durations.append(duration)
            if duration > meter.first:  # past the first bucket: rare, sorted at the fold
                cell.slow.append(duration)
            cell.sent.append(self.sent)
        if access_log is not None:
            access_log(self, duration)
