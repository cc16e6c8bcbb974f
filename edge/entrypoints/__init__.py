"""Entrypoints: where connections and datagrams arrive.

Each entrypoint binds one address and holds the current
:class:`~edge.router.set.RouterSet` for it (one reference, swapped with one
assignment); it decides per connection what the connection becomes (HTTP
today; a TLS peek, a splice or a UDP session as the kinds grow).
:class:`EntryPoints` owns them all, runs the one periodic sweep (connection
deadlines, idle upstream connections, UDP sessions) and drains them on stop.
With ``api`` set (:func:`edge.entrypoints.internal.attach_api`), the routes naming
``api@internal`` answer with the API; with ``metrics.prometheus.manualRouting``, those
naming ``prometheus@internal`` with ``/metrics``' text.
"""

from __future__ import annotations

import asyncio
import logging

from edge import eventloop
from edge.entrypoints.base import SWEEP_MAX, EntryPoint, format_address
from edge.entrypoints.internal import serve_api
from edge.http.middlewares import Middleware
from edge.router.set import RouterSet
from edge.transports import TransportRegistry

__all__ = ["EntryPoint", "EntryPoints", "format_address"]

log = logging.getLogger("edge.entrypoints")


class EntryPoints:
    """Every entrypoint of this process, their periodic sweep and their shutdown."""

    def __init__(self, loop: asyncio.AbstractEventLoop, transports: TransportRegistry) -> None:
        self.loop = loop
        self.transports = transports
        self.all: dict[str, EntryPoint] = {}
        # What routes naming api@internal, prometheus@internal answer with (by service).
        self.internal: dict[str, Middleware] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._table = eventloop.transport_table(loop)  # pruned by the sweep (edge.eventloop)
        self._pruned = loop.time()

    def add(self, entrypoint: EntryPoint) -> None:
        self.all[entrypoint.name] = entrypoint

    async def start(self) -> None:
        """Bind every entrypoint; an ``OSError`` names the entrypoint that could not bind."""
        for name, ep in self.all.items():
            try:
                await ep.start()
            except OSError as exc:
                raise OSError(exc.errno, f"entrypoint {name}: {exc.strerror or exc}") from exc
        ports = {name: ep.port for name, ep in self.all.items()}
        for ep in self.all.values():
            ep.bound(ports)
        self._schedule_sweep()

    def switch(self, routers: dict[str, RouterSet]) -> None:
        """Swap in the new routers: one assignment per entrypoint."""
        for name, ep in self.all.items():
            router = routers.get(name)
            if router is not None:
                ep.switch(serve_api(router, self.internal) if self.internal else router)

    def _schedule_sweep(self) -> None:
        interval = min((ep.sweep_interval() for ep in self.all.values()), default=SWEEP_MAX)
        self._sweeper = self.loop.call_later(interval, self._sweep)

    def _sweep(self) -> None:
        now = self.loop.time()
        for ep in self.all.values():
            try:
                ep.sweep(now)
            except Exception:
                log.exception("entrypoint %s: sweep failed", ep.name)
        self.transports.sweep()
        if self._table is not None and now - self._pruned >= eventloop.PRUNE_EVERY:
            self._pruned = now
            eventloop.prune(self._table)
        self._schedule_sweep()

    async def stop(self, grace: float | dict[str, float]) -> None:
        """Stop accepting everywhere, then drain every entrypoint in parallel."""
        for ep in self.all.values():
            ep.stop_accepting()
        graces = grace if isinstance(grace, dict) else dict.fromkeys(self.all, grace)
        await asyncio.gather(*(ep.drain(graces.get(name, 10.0)) for name, ep in self.all.items()))
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.transports.close()
