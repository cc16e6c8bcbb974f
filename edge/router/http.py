"""HTTP routers: immutable snapshots built once per configuration.

An :class:`HTTPRouter` answers one question per request, ``match(view)``: which
:class:`Route` serves it. Everything a request needs from the configuration is
resolved when the router is built (rules compiled and indexed by host, services
turned into balancers over :class:`Backend` objects holding their transport,
middlewares built into a pipeline), so the hot path only reads.

The only mutable state is inside balancers (round-robin scores), which belong to
the snapshot and die with it.
"""

from __future__ import annotations

from collections.abc import Iterable

from edge.balancer import SmoothWeightedRoundRobin
from edge.http.middlewares import EMPTY_PIPELINE, Pipeline
from edge.rules import RouteTable
from edge.transports import ServerURL, Transport


class Backend:
    """One server of a load balancer, with what is needed to reach it."""

    __slots__ = ("pass_host", "server", "service", "transport")

    def __init__(
        self, service: str, server: ServerURL, transport: Transport, pass_host: bool
    ) -> None:
        self.service = service
        self.server = server
        self.transport = transport
        self.pass_host = pass_host


class LoadBalancer:
    """A loadBalancer service: smooth weighted round robin over its servers.

    Its server list may be replaced in place (:meth:`update`: an endpoints-only
    configuration change) with one assignment; what routes derived from the
    service (``pass_host``, ``pooled``) comes from its configuration and its
    transport, never from the servers, so it cannot go stale.
    """

    __slots__ = ("_wrr", "name", "pass_host", "pooled", "single")

    def __init__(
        self, name: str, backends: Iterable[tuple[Backend, int]], pass_host: bool, pooled: bool
    ) -> None:
        self.name = name
        # Every server gets the client's Host (passHostHeader, the default).
        self.pass_host = pass_host
        # Every server's connections are kept alive between requests.
        self.pooled = pooled
        self._set(SmoothWeightedRoundRobin(list(backends)))

    def _set(self, wrr: SmoothWeightedRoundRobin[Backend]) -> None:
        self._wrr = wrr
        # One server (the common case): nothing to balance.
        self.single: Backend | None = wrr.single

    def update(self, backends: Iterable[tuple[Backend, int]]) -> None:
        """New servers, in place; the rotation goes on for the servers that stay."""
        wrr = SmoothWeightedRoundRobin(list(backends))
        wrr.inherit(self._wrr, lambda b: b.server.key)
        self._set(wrr)

    def pick(self) -> Backend | None:
        return self._wrr.pick()


class Weighted:
    """A weighted service: smooth weighted round robin over child services."""

    __slots__ = ("_wrr", "name", "pass_host", "pooled")
    single = None  # never one server to skip the balancing for

    _wrr: SmoothWeightedRoundRobin[LoadBalancer | Weighted]
    name: str
    pass_host: bool  # every server of every child gets the client's Host
    pooled: bool  # every child keeps its connections alive

    def __init__(self, name: str, children: Iterable[tuple[LoadBalancer | Weighted, int]]) -> None:
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


Service = LoadBalancer | Weighted


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
