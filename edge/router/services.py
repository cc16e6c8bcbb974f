"""A configuration's services turned into balancers: the walk the HTTP and TCP builders share.

Owns :func:`build_service`: a service is built once per table and name (``built``
memoises it); a ``weighted`` service's members are built first, each member that
cannot be built is left out of the rotation, and a weighted cycle resolves to None
(validation reported it and disabled those services). A service validation
disabled, or one that does not exist, is None. What a ``loadBalancer`` becomes is the
caller's (HTTP backends with their transport, TCP servers with their dialer settings),
as is the weighted balancer's class.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from edge.balancer import HighestRandomWeight, PowerOfTwoChoices, SmoothWeightedRoundRobin
from edge.config.runtime import DISABLED, ServiceInfo
from edge.http.codec import Header, RequestHead, ResponseHead
from edge.http.codec.parsers import PARSERS
from edge.router.http import Backend, LoadBalancer, Service

if TYPE_CHECKING:
    from edge.router.health import PassiveHealth

__all__ = [
    "HighestRandomWeightService",
    "InFlight",
    "Mirror",
    "MirrorCopy",
    "Mirroring",
    "P2CLoadBalancer",
    "build_service",
    "mirror_head",
]

log = logging.getLogger("edge.router")

S = TypeVar("S")


def build_service(
    name: str,
    built: dict[str, S | None],
    infos: Mapping[str, ServiceInfo[Any]],
    load_balancer: Callable[[str, Any], S | None],
    weighted: Callable[[str, list[tuple[S, int]]], S],
    answer: Callable[[str, int], S] | None = None,
) -> S | None:
    """The balancer of service ``name`` (see the module doc), from ``built`` when made before.

    ``load_balancer(name, config.load_balancer)`` makes a loadBalancer service (None when
    it cannot); ``weighted(name, [(member, weight), ...])`` a weighted one;
    ``answer(name, status)`` a member with a ``status`` (HTTP's; validation disables
    other protocols' weighted services holding one).
    """
    if name in built:
        return built[name]
    built[name] = None  # a cycle resolves to None (validation reports it)
    info = infos.get(name)
    result: S | None = None
    if info is not None and info.status != DISABLED:
        config = info.config
        if config.load_balancer is not None:
            result = load_balancer(name, config.load_balancer)
        elif config.weighted is not None or getattr(config, "highest_random_weight", None):
            # highestRandomWeight (HTTP's): members as weighted has; ``weighted`` makes it
            members = (config.weighted or config.highest_random_weight).services
            children = []
            for member in members:
                if getattr(member, "status", None) is not None:
                    if answer is not None:
                        children.append((answer(member.name, member.status), member.weight))
                    continue
                child = build_service(member.name, built, infos, load_balancer, weighted, answer)
                if child is not None:
                    children.append((child, member.weight))
            result = weighted(name, children)
    built[name] = result
    return result


# --- highestRandomWeight ------------------------------------------------------------


class HighestRandomWeightService:
    """A ``highestRandomWeight`` service: the child that rendezvous hashing of the
    client's address ranks first (:class:`edge.balancer.HighestRandomWeight`), so a
    client keeps its child, each child gets its weight's share of the clients, and a
    child added or removed moves only the clients it takes or had. The address is
    Traefik's key: the peer's (after a PROXY header), never X-Forwarded-For. Each child
    hashes by its name as Traefik knows it (a child of the parent's provider by its
    name in that provider), so a client lands on the child Traefik would choose.

    A child with no server up gives way to the next in that client's ranking, as a
    weighted service's children do. The exchange hands the address to
    ``pick_sticky`` (``sticks``: never the express path); ``pick()``, without one (a
    mirror's copy), ranks for the empty key.
    """

    __slots__ = ("_hrw", "name", "pass_host", "pooled")
    single = None  # the client chooses: never one server to skip the choice for
    sticks = True

    def __init__(self, name: str, children: Iterable[tuple[Service, int]]) -> None:
        self.name = name
        children = list(children)
        _, at, provider = name.rpartition("@")
        suffix = "@" + provider if at else ""
        self._hrw = HighestRandomWeight(
            [
                (child, child.name.removesuffix(suffix) if suffix else child.name, w)
                for child, w in children
            ]
        )
        self.pass_host = all(child.pass_host for child, _ in children)
        self.pooled = all(child.pooled for child, _ in children)

    def pick(self) -> Backend | None:
        return self.pick_sticky([], [], "")

    def pick_sticky(
        self, cookies: list[bytes], out: list[bytes], client: str = ""
    ) -> Backend | None:
        for child in self._hrw.ranked(client):
            mark = len(out)
            backend = child.pick_sticky(cookies, out, client)
            if backend is not None:
                return backend
            del out[mark:]
        return None


# --- p2c ---------------------------------------------------------------------------


class InFlight:
    """The requests in flight per server URL of a ``p2c`` load balancer, and its
    servers' passive health check (None without one). Kept across endpoint updates
    (keyed by URL)."""

    __slots__ = ("counts", "passive")

    def __init__(self, passive: PassiveHealth | None = None) -> None:
        self.counts: dict[str, int] = {}
        self.passive = passive

    def load(self, backend: Backend) -> int:
        return self.counts.get(backend.server.url, 0)

    def started(self, url: str) -> None:
        self.counts[url] = self.counts.get(url, 0) + 1

    def finished(self, url: str) -> None:
        n = self.counts.get(url, 0)
        if n > 1:
            self.counts[url] = n - 1
        else:
            self.counts.pop(url, None)


class _Ticket:
    """One p2c pick's request in flight, as the health of the backend the pick hands
    out: the exchange's first report of the server's answer (its head) or failure
    ends it; every report goes on to the passive health check, as a plain load
    balancer's do. An exchange that reports nothing (the client gone first) ends it
    when it lets the backend go."""

    __slots__ = ("inflight", "passive", "url")

    def __init__(self, inflight: InFlight, url: str) -> None:
        self.inflight: InFlight | None = inflight
        self.passive = inflight.passive
        self.url = url
        inflight.started(url)

    def _end(self) -> None:
        inflight = self.inflight
        if inflight is not None:
            self.inflight = None
            inflight.finished(self.url)

    def answered(self, url: str, status: int) -> None:
        self._end()
        if self.passive is not None:
            self.passive.answered(url, status)

    def failed(self, url: str) -> None:
        self._end()
        if self.passive is not None:
            self.passive.failed(url)

    def __del__(self) -> None:
        self._end()


class P2CLoadBalancer(LoadBalancer):
    """A loadBalancer service with ``strategy: p2c``: two servers up drawn at random,
    the one with fewer requests in flight (:class:`edge.balancer.PowerOfTwoChoices`).

    Each pick hands out a backend of its own for the server drawn (the same server,
    pool and transport) whose health is a :class:`_Ticket` counting the request in
    flight until its outcome; ``backends`` stay the servers as configured, with
    their passive health, which the health registry reads and the sticky cookie
    picks from (a sticky pick is not counted).
    """

    __slots__ = ("_p2c", "inflight", "rng")

    def __init__(
        self,
        name: str,
        backends: Iterable[tuple[Backend, int]],
        pass_host: bool,
        pooled: bool,
        *,
        rng: random.Random | None = None,
        **kwargs: Any,
    ) -> None:
        self.inflight = InFlight()
        self.rng = rng if rng is not None else random.Random()
        super().__init__(name, backends, pass_host, pooled, **kwargs)

    def _set(
        self,
        backends: list[tuple[Backend, int]],
        old: SmoothWeightedRoundRobin[Backend] | None = None,
    ) -> None:
        super()._set(backends, old)
        health = (b.health for b, _ in backends if b.health is not None)
        self.inflight.passive = next(health, None)
        self._p2c = PowerOfTwoChoices([b for b, _ in backends], self.rng)
        # Every pick counts its request: never skipped for a single server.
        self.single = None

    def pick(self) -> Backend | None:
        down = self.down
        chosen = self._p2c.pick(self.inflight.load, self._up if down else None)
        if chosen is None:
            return None
        ticket = _Ticket(self.inflight, chosen.server.url)
        return Backend(chosen.service, chosen.server, chosen.transport, chosen.pass_host, ticket)  # type: ignore[arg-type]


# --- mirroring ---------------------------------------------------------------------

MIRROR_CONCURRENCY = 32
"""Copies in flight to one mirror at most; past it a copy is dropped, not queued."""

MIRROR_MEMORY = 64 * 1024 * 1024
"""Bytes of request copies one mirroring service holds at most, all copies together
(``maxBodySize`` -1, Traefik's default, is bounded by it): a request whose copy would
go past it is not mirrored (it is still served)."""

MIRROR_TIMEOUT = 30.0
"""Seconds a copy may take, dial to the end of the mirror's answer, before it is
aborted (a hung mirror holds none of its slots for longer)."""

MIRROR_IDLE = 90.0
"""Seconds a mirror's connection is kept idle at most (Go's and Traefik's default
idleConnTimeout), whatever its transport allows."""


def _expire(idle: list[_MirrorConnection], conn: _MirrorConnection) -> None:
    conn.expiry = None
    if conn in idle:
        idle.remove(conn)
    conn.abort()


_FRAMING = (b"host", b"content-length", b"transfer-encoding", b"connection", b"expect")


def mirror_head(up_head: bytes, host: bytes, length: int) -> bytes:
    """The head a mirror gets: ``up_head`` (the request head as it went to the main
    service) with ``host`` as its Host and the body framed by ``Content-Length:
    length`` (the copy is whole before it goes; 0 and no body without mirrorBody)."""
    lines = up_head.split(b"\r\n")
    out = [lines[0], b"Host: " + host]
    for line in lines[1:]:
        if line and line.split(b":", 1)[0].strip().lower() not in _FRAMING:
            out.append(line)
    if length:
        out.append(b"Content-Length: %d" % length)
    out.append(b"")
    out.append(b"")
    return b"\r\n".join(out)


class _MirrorConnection(asyncio.Protocol):
    """A connection to a mirror's server: one copy at a time, its answer read and
    dropped. Kept alive between copies in its mirror's own idle list (never in the
    transports' pools, which hold the exchanges' upstream connections)."""

    def __init__(self, parser_cls: type) -> None:
        self.parser = parser_cls(self)
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[int] | None = None
        self.status = 0
        self.keep_alive = False
        self.expiry: asyncio.TimerHandle | None = None  # while idle

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed(data)
        except Exception as exc:  # an invalid answer: this connection is done
            self._finish(exc)

    def eof_received(self) -> bool | None:
        self.keep_alive = False
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.keep_alive = False
        self._finish(exc or ConnectionResetError("the mirror closed the connection"))

    def on_head(self, head: ResponseHead) -> None:
        self.status = head.status
        self.keep_alive = head.keep_alive

    def on_body(self, data: bytes) -> None:
        pass  # a mirror's answer is dropped

    def on_end(self) -> None:
        done = self.done
        if done is not None and not done.done():
            done.set_result(self.status)

    def on_upgrade(self, rest: bytes) -> None:
        self._finish(ConnectionError("the mirror switched protocols"))

    def _finish(self, exc: Exception) -> None:
        self.keep_alive = False
        done = self.done
        if done is not None and not done.done():
            done.set_exception(exc)

    def send(self, parts: list[bytes], method: bytes) -> asyncio.Future[int]:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        self.status = 0
        self.parser.expect(method)
        assert self.transport is not None
        self.transport.writelines(parts)
        return self.done

    def reusable(self) -> bool:
        t = self.transport
        return self.keep_alive and t is not None and not t.is_closing()

    def abort(self) -> None:
        t = self.transport
        if t is not None:
            t.abort()


Connect = Callable[..., Awaitable[Any]]
"""How a copy gets an HTTP/2 stream to an ``h2c://`` server:
``connect(transport, server, request_parser, response_parser)``, which is
:func:`edge.http.server.upstream_h2.connect` (a layer above this one: it is given)."""

_REQUEST_PARSERS: dict[type, type] = {resp: req for req, resp in PARSERS.values()}
"""A codec's request parser, by its response parser (a mirror's ``parser``)."""


class StreamAnswer:
    """The owner of a request edge makes itself on an HTTP/2 stream (a mirror's copy,
    a gRPC health check): the stream's
    :class:`~edge.http.server.upstream.UpstreamOwner`; ``done`` says the answer's
    status. The answer's body and trailers are kept up to ``keep`` bytes of body
    (0: dropped, as :class:`_MirrorConnection` drops a copy's answer)."""

    express = False  # never the parser's quick path

    def __init__(self, loop: asyncio.AbstractEventLoop, keep: int = 0) -> None:
        self.done: asyncio.Future[int] = loop.create_future()
        self.status = 0
        self.keep = keep
        self.head: ResponseHead | None = None
        self.body = bytearray()
        self.trailers: list[Header] = []

    def _finish(self, exc: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(exc)

    def upstream_quick(self, conn: Any, head: ResponseHead, data: bytes) -> None:
        self.status = head.status
        self.upstream_end(conn)

    def upstream_head(self, head: ResponseHead) -> None:
        self.status = head.status
        if self.keep:
            self.head = head

    def upstream_body(self, data: bytes) -> None:
        if len(self.body) + len(data) <= self.keep:
            self.body += data
        elif self.keep:
            self._finish(ConnectionError(f"an answer over {self.keep} bytes"))

    def upstream_trailers(self, fields: list[Header]) -> None:
        if self.keep:
            self.trailers = fields

    def upstream_interim(self, head: ResponseHead) -> None:
        pass

    def upstream_end(self, conn: Any) -> None:
        if not self.done.done():
            self.done.set_result(self.status)

    def upstream_upgrade(self, rest: bytes) -> None:
        self._finish(ConnectionError("the mirror switched protocols"))

    def upstream_lost(self, conn: Any, exc: Exception | None) -> None:
        self._finish(exc or ConnectionResetError("the mirror reset the stream"))

    def upstream_failed(self, exc: Exception, conn: Any) -> None:
        self._finish(exc)

    def hold_writes(self) -> None:
        pass

    def release_writes(self) -> None:
        pass

    def pause_sending(self) -> None:
        pass  # the copy is whole and bounded (MIRROR_MEMORY): the stream queues it

    def resume_sending(self) -> None:
        pass


class Mirror:
    """One of a mirroring service's mirrors: a service (of any kind) that gets copies.

    Holds its share (``percent``) and Traefik's counter of copies sent, its copies in
    flight (at most :data:`MIRROR_CONCURRENCY`, each its own task), and its idle
    connections, keyed by server. Given ``connect`` (:data:`Connect`), a copy to an
    ``h2c://`` server goes on an HTTP/2 stream of the connections its ServersTransport
    shares with the exchanges, the request parser of ``parser``'s codec reading the
    copy into frames; without it every server gets HTTP/1.1.
    """

    __slots__ = (
        "connect",
        "count",
        "dropped",
        "idle",
        "inflight",
        "parser",
        "percent",
        "request_parser",
        "sent",
        "service",
        "tasks",
    )

    def __init__(
        self, service: Service, percent: int, parser: type, connect: Connect | None = None
    ) -> None:
        self.service = service
        self.percent = percent
        self.parser = parser
        self.request_parser = _REQUEST_PARSERS.get(parser)
        self.connect = connect if self.request_parser is not None else None
        self.count = 0  # requests given to this mirror (Traefik's counter)
        self.inflight = 0
        self.sent = 0  # copies the mirror answered
        self.dropped = 0  # copies not sent: no room, no server, or failed
        self.tasks: set[asyncio.Task] = set()
        self.idle: dict[tuple, list[_MirrorConnection]] = {}

    def send(self, copy: MirrorCopy, body: list[bytes]) -> None:
        """Send ``copy`` from its own task; never blocks, never raises."""
        backend = self.service.pick()
        if backend is None or backend.status or self.inflight >= MIRROR_CONCURRENCY:
            self.dropped += 1
            copy.done()
            return
        host = copy.host if backend.pass_host else backend.server.authority
        head = mirror_head(copy.up_head, host, copy.size)
        self.inflight += 1
        task = backend.transport.loop.create_task(self._send(backend, [head, *body], copy.method))
        self.tasks.add(task)
        task.add_done_callback(lambda task: self._done(task, copy))

    def _done(self, task: asyncio.Task, copy: MirrorCopy) -> None:
        self.tasks.discard(task)
        self.inflight -= 1
        copy.done()
        if not task.cancelled() and task.result():
            self.sent += 1
        else:
            self.dropped += 1

    async def _send(self, backend: Backend, parts: list[bytes], method: bytes) -> bool:
        server = backend.server
        if server.h2c and self.connect is not None:
            return await self._send_h2(self.connect, backend, parts, method)
        idle = self.idle.get(server.key)
        conn: _MirrorConnection | None = None
        while idle:
            candidate = idle.pop()
            if candidate.expiry is not None:
                candidate.expiry.cancel()
                candidate.expiry = None
            if candidate.reusable():
                conn = candidate
                break
            candidate.abort()
        try:
            async with asyncio.timeout(MIRROR_TIMEOUT):
                if conn is None:
                    dialed = await backend.transport.dial(
                        server, lambda: _MirrorConnection(self.parser)
                    )
                    assert isinstance(dialed, _MirrorConnection)
                    conn = dialed
                status = await conn.send(parts, method)
        except asyncio.CancelledError:
            if conn is not None:
                conn.abort()
            raise
        except Exception as exc:
            if conn is not None:
                conn.abort()
            log.debug("mirror %s server %s: copy dropped: %r", self.service.name, server.url, exc)
            backend.failed()
            return False
        backend.answered(status)
        idle = self.idle.setdefault(server.key, [])
        if conn.reusable() and len(idle) < MIRROR_CONCURRENCY:
            # Closed after the transport's idleConnTimeout (MIRROR_IDLE at most):
            # the idle connections of a mirror a new configuration replaced go too.
            wait = min(backend.transport.idle_timeout, MIRROR_IDLE)
            conn.expiry = backend.transport.loop.call_later(wait, _expire, idle, conn)
            idle.append(conn)
        else:
            conn.abort()
        return True

    async def _send_h2(
        self, connect: Connect, backend: Backend, parts: list[bytes], method: bytes
    ) -> bool:
        """A copy on an HTTP/2 stream (see the class doc), which ends with its answer."""
        server = backend.server
        owner = StreamAnswer(backend.transport.loop)
        stream = None
        try:
            async with asyncio.timeout(MIRROR_TIMEOUT):
                stream = await connect(backend.transport, server, self.request_parser, self.parser)
                stream.owner = owner
                stream.parser.expect(method)
                stream.transport.writelines(parts)
                status = await owner.done
        except asyncio.CancelledError:
            if stream is not None:
                stream.abort()
            raise
        except Exception as exc:
            if stream is not None:
                stream.abort()
            log.debug("mirror %s server %s: copy dropped: %r", self.service.name, server.url, exc)
            backend.failed()
            return False
        stream.close()
        backend.answered(status)
        return True

    def close(self) -> None:
        """Cancel the copies in flight and close the idle connections (a tool's or a
        test's end; a swapped-out snapshot's copies finish on their own)."""
        for task in list(self.tasks):
            task.cancel()
        for conns in self.idle.values():
            for conn in conns:
                if conn.expiry is not None:
                    conn.expiry.cancel()
                conn.abort()
        self.idle.clear()


class MirrorCopy:
    """One request's copy for the mirrors that get it (the
    :class:`edge.http.middlewares.Tee` the exchange feeds): the request body as it
    goes upstream, held until complete, then sent to each mirror. Holding more than
    ``maxBodySize`` of body, or taking its mirroring past :data:`MIRROR_MEMORY`,
    drops the copy; so does the exchange ending first (``abort``). What it holds
    counts against its mirroring until the last mirror is done with it."""

    __slots__ = (
        "chunks",
        "host",
        "length",
        "method",
        "mirroring",
        "mirrors",
        "pending",
        "size",
        "up_head",
    )

    def __init__(
        self, mirroring: Mirroring, mirrors: list[Mirror], head: RequestHead, up_head: bytes
    ) -> None:
        self.mirroring = mirroring
        self.mirrors = mirrors
        self.method = head.method
        self.host = head.host
        self.length = head.content_length
        self.up_head = up_head
        self.chunks: list[bytes] | None = []
        self.size = 0  # body bytes held
        self.pending = 0  # mirrors still sending it
        mirroring.held += len(up_head)

    def body(self, data: bytes) -> None:
        chunks = self.chunks
        mirroring = self.mirroring
        if chunks is None or not mirroring.mirror_body:
            return
        self.size += len(data)
        mirroring.held += len(data)
        limit = mirroring.max_body_size
        if 0 <= limit < self.size or mirroring.held > MIRROR_MEMORY:
            mirroring.not_mirrored += 1
            self.abort()
            return
        chunks.append(data)

    def end(self) -> None:
        chunks = self.chunks
        if chunks is None:
            return
        mirroring = self.mirroring
        if mirroring.mirror_body and self.length is not None and self.size != self.length:
            # Not the whole body (bytes the exchange read before it asked for the
            # copy): a mirror gets the request as sent or nothing.
            mirroring.not_mirrored += 1
            self.abort()
            return
        self.chunks = None
        self.pending = len(self.mirrors) + 1
        for mirror in self.mirrors:
            mirror.send(self, chunks)
        self.done()

    def abort(self) -> None:
        if self.chunks is not None:
            self.chunks = None
            self.pending = 1
            self.done()

    def __del__(self) -> None:
        # An exchange that dropped its copy unended (neither end nor abort) must not
        # keep its bytes counted against MIRROR_MEMORY for ever.
        if self.chunks is not None:
            self.abort()

    def done(self) -> None:
        """One mirror is done with the copy (or none will take it): the last frees it."""
        self.pending -= 1
        if self.pending == 0:
            self.mirroring.held -= len(self.up_head) + self.size


class Mirroring:
    """A mirroring service: ``main`` answers every request; each mirror gets a copy of
    its share of them, Traefik's way: the n-th request goes to a mirror of ``percent``
    when ``count * 100 < n * percent`` (so 10 % is exactly 1 request in 10, spread
    evenly, not drawn). Fire and forget: a copy is sent from its own task once the
    request is whole, its answer dropped; a mirror slow, dead or full
    (:data:`MIRROR_CONCURRENCY`) costs the client nothing.

    To the exchange it is its main service (``pick``, ``pick_sticky``), plus ``tee``,
    the hook that asks it for each request's copy. Its health is its main service's.
    ``pooled`` is False so that no route serving it takes the express path, which
    offers no request to ``tee``.
    """

    __slots__ = (
        "held",
        "main",
        "max_body_size",
        "mirror_body",
        "mirrors",
        "name",
        "not_mirrored",
        "pass_host",
        "sticks",
        "total",
    )
    single = None
    pooled = False

    def __init__(
        self,
        name: str,
        main: Service | None,
        mirrors: list[Mirror],
        *,
        mirror_body: bool = True,
        max_body_size: int = -1,
    ) -> None:
        self.name = name
        self.main = main
        self.mirrors = mirrors
        self.mirror_body = mirror_body
        self.max_body_size = max_body_size
        self.pass_host = main.pass_host if main is not None else True
        self.sticks = main.sticks if main is not None else False
        self.total = 0  # requests seen (Traefik's counter)
        self.held = 0  # bytes of copies held (MIRROR_MEMORY)
        self.not_mirrored = 0  # requests whose copy was dropped for its size

    def pick(self) -> Backend | None:
        main = self.main
        return main.pick() if main is not None else None

    def pick_sticky(
        self, cookies: list[bytes], out: list[bytes], client: str = ""
    ) -> Backend | None:
        main = self.main
        return main.pick_sticky(cookies, out, client) if main is not None else None

    def choose(self) -> list[Mirror]:
        """The mirrors that get a copy of the next request (Traefik's counters)."""
        self.total = total = self.total + 1
        chosen = []
        for mirror in self.mirrors:
            if mirror.count * 100 < total * mirror.percent:
                mirror.count += 1
                chosen.append(mirror)
        return chosen

    def tee(self, head: RequestHead, up_head: bytes) -> MirrorCopy | None:
        """This request's copy, or None when no mirror gets one (module
        :mod:`edge.http.middlewares`: the exchange's ``tee`` hook)."""
        mirrors = self.choose()
        if not mirrors or head.upgrade:
            return None
        length = head.content_length
        if self.mirror_body and length is not None and 0 <= self.max_body_size < length:
            self.not_mirrored += 1
            return None
        return MirrorCopy(self, mirrors, head, up_head)

    def close(self) -> None:
        for mirror in self.mirrors:
            mirror.close()
