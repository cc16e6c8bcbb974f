"""Wiring: providers -> watcher -> listeners -> entrypoints.

:class:`Edge` owns one process's pieces and their life cycle. The listeners run
in order for every validated configuration: update the ServersTransports (by
diff), build the new routers, swap them into the entrypoints. SIGTERM/SIGINT
drain (stop accepting, finish in-flight requests within graceTimeOut); SIGHUP
makes the providers re-read their sources.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from edge.config.runtime import RuntimeConfig
from edge.config.static import StaticConfig
from edge.entrypoints import EntryPoints, HTTPEntryPoint
from edge.logs import AccessLogger
from edge.providers.base import Provider
from edge.providers.file import FileProvider
from edge.router.factory import build_http_routers
from edge.transports import TransportRegistry
from edge.watcher import Watcher

log = logging.getLogger("edge")


class Edge:
    def __init__(self, static: StaticConfig, *, parser: str | None = None) -> None:
        self.static = static
        self.parser = parser
        self.loop = asyncio.get_running_loop()
        self.transports = TransportRegistry(self.loop)
        self.entrypoints = EntryPoints(self.loop, self.transports)
        self.runtime: RuntimeConfig | None = None
        self.providers: list[Provider] = []
        self._tasks: set[asyncio.Task] = set()
        self._stopped = asyncio.Event()
        self._stopping = False
        self.access_log = AccessLogger(static.access_log, self.loop) if static.access_log is not None else None
        self.watcher = Watcher(
            entry_points=static.entry_point_protocols(),
            throttle=static.providers_throttle_duration,
            listeners=[self._update_transports, self._switch_routers],
            loop=self.loop,
        )
        ping_ep = static.ping.entry_point if static.ping is not None else None
        for name, config in static.entry_points.items():
            if config.protocol != "tcp":
                log.warning("entrypoint %s: UDP entrypoints are not served yet; %s ignored", name, config.address)
                continue
            self.entrypoints.add(
                HTTPEntryPoint(
                    name,
                    config,
                    self.loop,
                    parser=parser,
                    internal=self._internal if name == ping_ep else None,
                    access_log=self.access_log,
                )
            )
        providers = static.providers
        if providers.file is not None:
            f = providers.file
            self.providers.append(
                FileProvider(filename=f.filename or None, directory=f.directory or None, watch=f.watch)
            )
        if providers.kubernetes_ingress is not None or providers.kubernetes_gateway is not None:
            log.warning("the Kubernetes providers are not available in this version; ignored")

    # -- listeners ---------------------------------------------------------------

    def _update_transports(self, runtime: RuntimeConfig) -> None:
        self.transports.update(runtime.servers_transports)

    def _switch_routers(self, runtime: RuntimeConfig) -> None:
        routers = build_http_routers(runtime, self.transports, self.entrypoints.http)
        self.entrypoints.switch(routers)
        self.runtime = runtime
        log.info(
            "configuration applied: %s",
            ", ".join(f"{ep}: {len(r)} routers" for ep, r in routers.items()) or "no HTTP entrypoint",
        )

    # -- internal endpoints --------------------------------------------------------

    def _internal(self, path: bytes) -> tuple[int, bytes] | None:
        if path == b"/ping":
            return (503, b"Service Unavailable") if self._stopping else (200, b"OK")
        if path == b"/ready":
            return (200, b"ready") if self.watcher.ready and not self._stopping else (503, b"not ready")
        return None

    # -- life cycle ----------------------------------------------------------------

    async def start(self) -> None:
        await self.entrypoints.start()
        for provider in self.providers:
            self.watcher.expect(provider.name)
            task = self.loop.create_task(provider.run(self.watcher.publish))
            self._tasks.add(task)
            task.add_done_callback(self._provider_done)

    def _provider_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("provider stopped: %s", task.exception(), exc_info=task.exception())

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.request_stop)
        self.loop.add_signal_handler(signal.SIGHUP, self.reload)

    def reload(self) -> None:
        log.info("SIGHUP: re-reading the providers")
        for provider in self.providers:
            provider.reload()

    def request_stop(self) -> None:
        if not self._stopping:
            self._stopping = True
            task = self.loop.create_task(self.stop())
            self._tasks.add(task)

    async def stop(self) -> None:
        self._stopping = True
        log.info("stopping: draining in-flight requests")
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        graces = {
            name: ep.config.transport.life_cycle.grace_time_out for name, ep in self.entrypoints.http.items()
        }
        await self.entrypoints.stop(graces)
        await self.watcher.close()
        if self.access_log is not None:
            self.access_log.close()
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


async def run(static: StaticConfig, *, parser: str | None = None) -> None:
    edge = Edge(static, parser=parser)
    edge.install_signal_handlers()
    try:
        await edge.start()
    except OSError as exc:
        log.error("cannot start: %s", exc)
        with contextlib.suppress(Exception):
            await edge.stop()
        raise SystemExit(1) from None
    await edge.wait_stopped()
