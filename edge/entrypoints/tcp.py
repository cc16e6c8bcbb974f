"""The TCP entrypoint: one listening address, and what each connection becomes.

A :class:`TCPEntryPoint` binds one TCP address and holds the current
:class:`~edge.router.set.RouterSet` in a single attribute of its shared
context; :meth:`switch` replaces it with one assignment, so a request reads
either the old routers or the new ones, never a mix, and requests already
routed finish where they are.

With ``reuse_port`` (worker processes, ``workers: N``) each process binds the same
port with SO_REUSEPORT and the kernel spreads new connections among them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from edge.config.static import EntryPoint
from edge.entrypoints.base import SWEEP_MAX, SWEEP_MIN, format_address
from edge.http.codec import parser_classes
from edge.http.server import EntryPointContext, HTTPConnection
from edge.router.http import HTTPRouter
from edge.router.set import RouterSet

log = logging.getLogger("edge.entrypoints")



class TCPEntryPoint:
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

    def switch(self, routers: RouterSet) -> None:
        self.ctx.router = routers.http

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
