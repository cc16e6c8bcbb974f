"""HTTP routers: immutable snapshots built once per configuration.

An :class:`HTTPRouter` answers one question per request, ``match(view)``: which
:class:`Route` serves it. Everything a request needs from the configuration is
resolved when the router is built (rules compiled and indexed by host, services
turned into balancers over :class:`Backend` objects holding their transport,
middlewares built into a pipeline), so the hot path only reads.

The only mutable state is inside balancers (round-robin scores), which belong to
the snapshot and die with it, and the health of servers: a load balancer with a
health check reads the set of its servers that are down, which outlives snapshots
(:mod:`edge.health` owns it and the checks that change it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from edge.balancer import SmoothWeightedRoundRobin
from edge.config.dynamic import ServerHealthCheck
from edge.http.middlewares import EMPTY_PIPELINE, Pipeline
from edge.rules import RouteTable
from edge.transports import ServerURL, Transport

if TYPE_CHECKING:
    from edge.router.health import PassiveHealth


class Backend:
    """One server of a load balancer, with what is needed to reach it.

    ``health``: its load balancer's passive health check (None without one), told of
    each request's outcome by whoever sends it (``failed()``, ``answered(status)``).
    """

    __slots__ = ("health", "pass_host", "server", "service", "transport")

    def __init__(
        self,
        service: str,
        server: ServerURL,
        transport: Transport,
        pass_host: bool,
        health: PassiveHealth | None = None,
    ) -> None:
        self.service = service
        self.server = server
        self.transport = transport
        self.pass_host = pass_host
        self.health = health

    def failed(self) -> None:
        """A request to this server got no answer (refused, reset, timed out)."""
        if self.health is not None:
            self.health.failed(self.server.url)

    def answered(self, status: int) -> None:
        """This server answered a request with ``status`` (a 5xx counts as a failure)."""
        if self.health is not None:
            self.health.answered(self.server.url, status)


class LoadBalancer:
    """A loadBalancer service: smooth weighted round robin over its servers.

    Its server list may be replaced in place (:meth:`update`: an endpoints-only
    configuration change) with one assignment; what routes derived from the
    service (``pass_host``, ``pooled``) comes from its configuration and its
    transport, never from the servers, so it cannot go stale.
    """

    __slots__ = (
        "_wrr",
        "backends",
        "down",
        "health_check",
        "name",
        "pass_host",
        "pooled",
        "single",
    )

    def __init__(
        self,
        name: str,
        backends: Iterable[tuple[Backend, int]],
        pass_host: bool,
        pooled: bool,
        *,
        down: set[str] | None = None,
        health_check: ServerHealthCheck | None = None,
    ) -> None:
        """``down``: the URLs of its servers that are down (the health registry's set for
        this service, which checks change in place; None: no health check of any kind);
        ``health_check``: its active health check, which the registry runs."""
        self.name = name
        # Every server gets the client's Host (passHostHeader, the default).
        self.pass_host = pass_host
        # Every server's connections are kept alive between requests.
        self.pooled = pooled
        self.down = down
        self.health_check = health_check
        self._set(list(backends))

    def _set(
        self,
        backends: list[tuple[Backend, int]],
        old: SmoothWeightedRoundRobin[Backend] | None = None,
    ) -> None:
        wrr = SmoothWeightedRoundRobin(backends)
        if old is not None:
            wrr.inherit(old, lambda b: b.server.key)
        self._wrr = wrr
        # Every server, the checks' targets (weight 0 ones too, as Traefik checks them).
        self.backends: list[Backend] = [b for b, _ in backends]
        # One server (the common case) and no health to read: nothing to balance.
        self.single: Backend | None = wrr.single if self.down is None else None

    def update(self, backends: Iterable[tuple[Backend, int]]) -> None:
        """New servers, in place; the rotation goes on for the servers that stay."""
        self._set(list(backends), self._wrr)

    def pick(self) -> Backend | None:
        """The next server up; None when none is (the service answers 503)."""
        down = self.down
        if not down:
            return self._wrr.pick()
        for _ in range(len(self._wrr)):
            backend = self._wrr.pick()
            if backend is None:
                return None
            if backend.server.url not in down:
                return backend
        return None


class Weighted:
    """A weighted service: smooth weighted round robin over child services."""

    __slots__ = ("_wrr", "name", "pass_host", "pooled")
    single = None  # never one server to skip the balancing for

    _wrr: SmoothWeightedRoundRobin[Service]
    name: str
    pass_host: bool  # every server of every child gets the client's Host
    pooled: bool  # every child keeps its connections alive

    def __init__(self, name: str, children: Iterable[tuple[Service, int]]) -> None:
        self.name = name
        children = list(children)
        self._wrr = SmoothWeightedRoundRobin(children)
        self.pass_host = all(child.pass_host for child, _ in children)
        self.pooled = all(child.pooled for child, _ in children)

    def pick(self) -> Backend | None:
        # A child with no server does not starve the others: try each once.
        for _ in range(len(self._wrr)):
            child = self._wrr.pick()
            if child is None:
                return None
            backend = child.pick()
            if backend is not None:
                return backend
        return None


class Failover:
    """A failover service: its main service while that has a server up, else its fallback.

    A child with no server up (every one down, or none at all) picks None, so the
    health of a child, whatever its kind, is what it picks; a failover with neither
    picks None itself, which a weighted or failover parent skips in turn.
    """

    __slots__ = ("fallback", "main", "name", "pass_host", "pooled")
    single = None  # never one server to skip the choice for

    main: Service | None
    fallback: Service | None
    name: str
    pass_host: bool  # every server of both children gets the client's Host
    pooled: bool  # both children keep their connections alive

    def __init__(self, name: str, main: Service | None, fallback: Service | None) -> None:
        self.name = name
        self.main = main
        self.fallback = fallback
        children = [c for c in (main, fallback) if c is not None]
        self.pass_host = all(c.pass_host for c in children)
        self.pooled = all(c.pooled for c in children)

    def pick(self) -> Backend | None:
        main = self.main
        backend = main.pick() if main is not None else None
        if backend is None and self.fallback is not None:
            return self.fallback.pick()
        return backend


Service = LoadBalancer | Weighted | Failover


class Route:
    """What a matched router resolves to: its service and its middleware pipeline."""

    __slots__ = ("express", "name", "pipeline", "service")

    def __init__(self, name: str, service: Service, pipeline: Pipeline = EMPTY_PIPELINE) -> None:
        self.name = name
        self.service = service
        self.pipeline = pipeline
        # The connection's express path: nothing of the exchange changes (derived
        # from the pipeline, so a middleware added later is never skipped), every
        # server gets the client's Host, and the upstream connection is pooled
        # (a lone Connection: keep-alive holds both ways).
        self.express = pipeline.empty and service.pass_host and service.pooled


class HTTPRouter:
    """The routes of one entrypoint."""

    __slots__ = ("by_host", "table")

    def __init__(self, table: RouteTable) -> None:
        self.table = table
        # host -> Route for hosts the host alone routes (RouteTable.match_host).
        self.by_host = table.by_host

    def match(self, view) -> Route | None:
        return self.table.match(view)

    def __len__(self) -> int:
        return len(self.table)


EMPTY_ROUTER = HTTPRouter(RouteTable(()))
