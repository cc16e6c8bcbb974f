"""Entrypoints: the listening sockets and the router each one serves.

An :class:`HTTPEntryPoint` binds one TCP address and holds the current
:class:`~edge.router.http.HTTPRouter` in a single attribute of its shared
context; :meth:`switch` replaces it with one assignment, so a request reads
either the old router or the new one, never a mix, and requests already routed
finish where they are. :class:`EntryPoints` owns them all, runs the deadline
sweep (connection timeouts, idle upstream connections) and drains them on stop.

With ``reuse_port`` (worker processes, ``workers: N``) each process binds the same
port with SO_REUSEPORT and the kernel spreads new connections among them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from edge.config.static import EntryPoint
from edge.http.codec import parser_classes
from edge.http.server import EntryPointContext, HTTPConnection
from edge.router.http import HTTPRouter
from edge.transports import TransportRegistry

log = logging.getLogger("edge.entrypoints")

SWEEP_MAX = 1.0
SWEEP_MIN = 0.05


class HTTPEntryPoint:
    def __init__(
        self,
        name: str,
        config: EntryPoint,
        loop: asyncio.AbstractEventLoop,
        *,
        parser: str | None = None,
        internal: Callable[[bytes], tuple[int, bytes] | None] | None = None,
        access_log: Callable[..., None] | None = None,
        reuse_port: bool = False,
    ) -> None:
        self.name = name
        self.config = config
        self.loop = loop
        self.reuse_port = reuse_port
        self.parser = parser or config.http.parser
        request_parser, response_parser = parser_classes(self.parser)
        timeouts = config.transport.responding_timeouts
        self.ctx = EntryPointContext(
            name=name,
            port=config.port,
            loop=loop,
            request_parser=request_parser,
            response_parser=response_parser,
            max_header_bytes=config.http.max_header_bytes,
            read_timeout=timeouts.read_timeout,
            write_timeout=timeouts.write_timeout,
            idle_timeout=timeouts.idle_timeout,
            trusted_ips=config.forwarded_headers.trusted_ips,
            insecure=config.forwarded_headers.insecure,
            internal=internal,
            access_log=access_log,
        )
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one the OS chose for port 0)."""
        if self.server is not None and self.server.sockets:
            return self.server.sockets[0].getsockname()[1]
        return self.config.port

    @property
    def router(self) -> HTTPRouter:
        return self.ctx.router

    def switch(self, router: HTTPRouter) -> None:
        self.ctx.router = router

    async def start(self) -> None:
        host = self.config.host or None
        self.server = await self.loop.create_server(
            lambda: HTTPConnection(self.ctx),
            host,
            self.config.port,
            family=socket.AF_UNSPEC,
            backlog=4096,
            reuse_address=True,
            reuse_port=self.reuse_port or None,
        )
        self.ctx.port = self.port
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
        self.ctx.sweep(now)

    def sweep_interval(self) -> float:
        t = self.config.transport.responding_timeouts
        shortest = min((x for x in (t.read_timeout, t.write_timeout, t.idle_timeout) if x > 0), default=SWEEP_MAX)
        return max(SWEEP_MIN, min(SWEEP_MAX, shortest / 4))

    async def drain(self, grace: float) -> None:
        """Finish in-flight requests within ``grace`` seconds, then close what is left."""
        ctx = self.ctx
        ctx.shutdown()
        deadline = self.loop.time() + grace
        while ctx.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(ctx.connections):
            if conn.transport is not None:
                conn.transport.abort()
        if ctx.connections:
            log.warning("entrypoint %s: %d connections cut after graceTimeOut", self.name, len(ctx.connections))


class EntryPoints:
    """Every entrypoint of this process, their periodic sweep and their shutdown."""

    def __init__(self, loop: asyncio.AbstractEventLoop, transports: TransportRegistry) -> None:
        self.loop = loop
        self.transports = transports
        self.http: dict[str, HTTPEntryPoint] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    def add(self, entrypoint: HTTPEntryPoint) -> None:
        self.http[entrypoint.name] = entrypoint

    async def start(self) -> None:
        for ep in self.http.values():
            await ep.start()
        self._schedule_sweep()

    def switch(self, routers: dict[str, HTTPRouter]) -> None:
        """Swap in the new routers: one assignment per entrypoint."""
        for name, ep in self.http.items():
            router = routers.get(name)
            if router is not None:
                ep.switch(router)

    def _schedule_sweep(self) -> None:
        interval = min((ep.sweep_interval() for ep in self.http.values()), default=SWEEP_MAX)
        self._sweeper = self.loop.call_later(interval, self._sweep)

    def _sweep(self) -> None:
        now = self.loop.time()
        for ep in self.http.values():
            try:
                ep.sweep(now)
            except Exception:
                log.exception("entrypoint %s: sweep failed", ep.name)
        self.transports.sweep()
        self._schedule_sweep()

    async def stop(self, grace: float | dict[str, float]) -> None:
        """Stop accepting everywhere, then drain every entrypoint in parallel."""
        for ep in self.http.values():
            ep.stop_accepting()
        graces = grace if isinstance(grace, dict) else dict.fromkeys(self.http, grace)
        await asyncio.gather(*(ep.drain(graces.get(name, 10.0)) for name, ep in self.http.items()))
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.transports.close()


def format_address(addr: tuple) -> str:
    """A socket address as ``host:port`` or ``[v6]:port``."""
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
