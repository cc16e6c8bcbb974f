"""RuntimeConfig -> routers: the listener that builds a new router set.

Runs once per applied configuration, never on the hot path. Services are built
once and shared by every router that uses them; every router's rule was
compiled by the runtime validation and is reused here. A router or service that
validation disabled is left out (its reason is in the runtime snapshot and the
log); everything else is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from edge.config.dynamic import RouterObservability
from edge.config.runtime import DISABLED, RuntimeConfig
from edge.config.runtime.http import failover_members, mirroring_members
from edge.http.codec.parsers import parser_classes
from edge.http.middlewares import EMPTY_PIPELINE, Middleware, Pipeline
from edge.http.middlewares.builtin import from_config
from edge.router.health import HealthRegistry
from edge.router.http import (
    Backend,
    Failover,
    HTTPRouter,
    LoadBalancer,
    Observers,
    Route,
    Service,
    StatusService,
    Weighted,
)
from edge.router.services import (
    Connect,
    HighestRandomWeightService,
    Mirror,
    Mirroring,
    P2CLoadBalancer,
    build_service,
)
from edge.router.set import RouterSet
from edge.router.tcp import TCPService, build_tcp_routers
from edge.router.udp import UDPService, build_udp_routers
from edge.rules import RouteTable
from edge.tls.certs import TLSCertificates
from edge.transports import DEFAULT_TRANSPORT, ServerURL, TransportRegistry

log = logging.getLogger("edge.router")

MIRROR_PARSER = parser_classes("httptools")[1]
"""How a mirror's answer is read (and dropped): the default codec's response parser."""

Observe = Callable[[str, bool, RouterObservability | None], Observers]
"""What a router's exchanges on entry point ``name`` report to: ``(name, secure, the
router's observability)`` -> :class:`~edge.router.http.Observers`, asked once per
router and entry point as the router set is built (``secure``: the entry point's
HTTPS router; :meth:`edge.entrypoints.observability.Observability.route`)."""


class _Builder:
    def __init__(
        self,
        runtime: RuntimeConfig,
        transports: TransportRegistry,
        health: HealthRegistry | None = None,
        mirror_connect: Connect | None = None,
    ) -> None:
        self.runtime = runtime
        self.transports = transports
        self.health = health
        self.mirror_connect = mirror_connect
        self.services: dict[str, Service | None] = {}
        # A middleware by name, or by (router, name) for the kinds with state of
        # their own per router (PER_ROUTER); a pipeline by its names, or by (router,
        # names) when it holds one of those.
        self.middlewares: dict[str | tuple[str, str], Middleware] = {}
        self.pipelines: dict[tuple, Pipeline] = {}
        self._visiting: set[str] = set()

    def service(self, name: str) -> Service | None:
        if name in self.services or name in self._visiting:
            return self.services.get(name)
        info = self.runtime.http_services.get(name)
        config = info.config if info is not None and info.status != DISABLED else None
        if config is not None and config.failover is not None:
            self.services[name] = None  # a cycle resolves to None (validation reports it)
            main, fallback = failover_members(name, config.failover)
            built: Service = Failover(name, self.service(main), self.service(fallback))
            self.services[name] = built
            return built
        if config is not None and config.mirroring is not None:
            self.services[name] = None  # a cycle resolves to None (validation reports it)
            mirroring = config.mirroring
            main, members = mirroring_members(name, mirroring)
            mirrors = []
            for mirror_name, percent in members:
                child = self.service(mirror_name)
                if child is not None:
                    mirrors.append(Mirror(child, percent, MIRROR_PARSER, self.mirror_connect))
            mirrored = Mirroring(
                name,
                self.service(main),
                mirrors,
                mirror_body=mirroring.mirror_body,
                max_body_size=mirroring.max_body_size,
            )
            # The exchange reads a service's kind through its attributes (tee): typed
            # as the services it stands among.
            self.services[name] = mirrored  # type: ignore[assignment]
            return mirrored  # type: ignore[return-value]
        group = None if config is None else config.weighted or config.highest_random_weight
        if group is not None:
            # Members first, so a failover among them (which build_service does not
            # make) is there when build_service looks.
            self._visiting.add(name)
            for member in group.services:
                if getattr(member, "status", None) is None:
                    self.service(member.name)
            self._visiting.discard(name)
        # Typed as making any service: mypy cannot infer build_service's S from the class.
        weighted: Callable[[str, list[tuple[Service, int]]], Service] = self.weighted
        return build_service(
            name,
            self.services,
            self.runtime.http_services,
            self.load_balancer,
            weighted,
            StatusService,
        )

    def weighted(self, name: str, children: list[tuple[Service, int]]) -> Service:
        if self.runtime.http_services[name].config.highest_random_weight is not None:
            # The exchange reads a service's kind through its attributes: typed as those.
            return HighestRandomWeightService(name, children)  # type: ignore[return-value]
        config = self.runtime.http_services[name].config.weighted
        sticky = config.sticky if config is not None else None
        return Weighted(name, children, sticky.cookie if sticky is not None else None)

    def load_balancer(self, name: str, lb) -> LoadBalancer:
        transport = self.transports.get(lb.servers_transport or DEFAULT_TRANSPORT)
        # Health of any kind: the servers down are the registry's set for this name,
        # the same across snapshots; without a registry (a tool), a set no check fills.
        down = None
        if lb.health_check is not None or lb.passive_health_check is not None:
            down = self.health.down_for(name) if self.health is not None else set()
        sticky = lb.sticky.cookie if lb.sticky is not None else None
        backends = self.backends(name, lb)
        if lb.strategy == "p2c":
            return P2CLoadBalancer(
                name,
                backends,
                lb.pass_host_header,
                transport.pools,
                down=down,
                health_check=lb.health_check,
                sticky=sticky,
            )
        return LoadBalancer(
            name,
            backends,
            lb.pass_host_header,
            transport.pools,
            down=down,
            health_check=lb.health_check,
            sticky=sticky,
        )

    def backends(self, name: str, lb) -> list[tuple[Backend, int]]:
        transport = self.transports.get(lb.servers_transport or DEFAULT_TRANSPORT)
        passive = None
        check = lb.passive_health_check
        if check is not None and self.health is not None:
            passive = self.health.passive_for(
                name,
                float(check.failure_window),
                check.max_failed_attempts,
                active=lb.health_check is not None,
            )
        return [
            (Backend(name, ServerURL(s.url), transport, lb.pass_host_header, passive), s.weight)
            for s in lb.servers
        ]

    def per_router(self, name: str) -> bool:
        """Whether middleware ``name`` is built once per router naming it: Traefik
        builds every middleware per router, so a rateLimit's buckets, an
        inFlightReq's counts and a circuitBreaker's window and state are the router's
        own; the stateless kinds are shared."""
        config = self.runtime.http_middlewares[name].config
        return (
            config.rate_limit is not None
            or config.in_flight_req is not None
            or config.circuit_breaker is not None
        )

    def middleware(self, name: str, router: str) -> Middleware:
        key: str | tuple[str, str] = (router, name) if self.per_router(name) else name
        built = self.middlewares.get(key)
        if built is None:
            # errors (and any kind that sends to a service) builds it through us.
            built = self.middlewares[key] = from_config(
                name, self.runtime.http_middlewares[name].config, self.service
            )
        return built

    def pipeline(self, names: list[str], router: str) -> Pipeline:
        """The pipeline of these middlewares for ``router``: one per list of names
        (pipelines are immutable), one per router where it holds a per-router kind."""
        if not names:
            return EMPTY_PIPELINE
        key: tuple = tuple(names)
        if any(self.per_router(m) for m in names):
            key = (router, key)
        built = self.pipelines.get(key)
        if built is None:
            built = self.pipelines[key] = Pipeline([self.middleware(m, router) for m in names])
        return built

    def route(self, name: str, info) -> Route | None:
        service = self.service(info.config.service)
        if service is None:
            return None
        pipeline = self.pipeline(info.config.middlewares, name)
        timeouts = info.config.timeouts
        if timeouts is None:
            return Route(name, service, pipeline)
        return Route(name, service, pipeline, timeouts.request, timeouts.backend_request)


def build_router_sets(
    runtime: RuntimeConfig,
    transports: TransportRegistry,
    entry_points: Iterable[str],
    services: dict[str, Service | None] | None = None,
    certs: TLSCertificates | None = None,
    *,
    tcp_services: dict[str, TCPService | None] | None = None,
    udp_services: dict[str, UDPService | None] | None = None,
    health: HealthRegistry | None = None,
    mirror_connect: Connect | None = None,
    observe: Observe | None = None,
) -> dict[str, RouterSet]:
    """One RouterSet per named entrypoint.

    ``services``, when given, receives the HTTP services built, by name: what
    :func:`servers_for` changes in place on an endpoints-only change;
    ``tcp_services`` and ``udp_services`` likewise (:func:`tcp_servers_for`,
    :func:`udp_servers_for`).
    ``certs`` is the configuration's certificate snapshot (built here from
    ``runtime.tls`` when not given and some entrypoint terminates TLS).
    ``health``: the process's server health, which load balancers with health checks
    read (:mod:`edge.router.health`).
    ``mirror_connect``: how a mirror reaches an ``h2c://`` server
    (:data:`edge.router.services.Connect`; without it mirrors speak HTTP/1.1 only).
    ``observe``: what each route reports to on each entry point (:data:`Observe`;
    without it, nothing).
    """
    if services is None:
        services = {}
    http = build_http_routers(
        runtime,
        transports,
        entry_points,
        services,
        health=health,
        mirror_connect=mirror_connect,
        observe=observe,
    )
    udp = build_udp_routers(runtime, transports, http, udp_services)
    # Routers with tls serve TLS connections only, through the entrypoint's peek.
    secure = any(info.config.tls is not None for info in runtime.http_routers.values())
    https = (
        build_http_routers(
            runtime,
            transports,
            http,
            services,
            secure=True,
            health=health,
            mirror_connect=mirror_connect,
            observe=observe,
        )
        if secure
        else {}
    )
    tcp = build_tcp_routers(
        runtime,
        http,
        certs if certs is not None else lambda: TLSCertificates(runtime.tls),
        tcp_services,
    )
    return {
        ep: RouterSet(
            http=router, https=https[ep] if https.get(ep) else None, tcp=tcp[ep], udp=udp.get(ep)
        )
        for ep, router in http.items()
    }


def servers_for(
    services: dict[str, Service | None],
    runtime: RuntimeConfig,
    names: Iterable[str],
    transports,
    health: HealthRegistry | None = None,
) -> list[tuple[LoadBalancer, list[tuple[Backend, int]]]]:
    """The live load balancers ``names`` and the servers ``runtime`` gives them.

    The endpoints-only path (see :func:`edge.config.diff.changed_servers`): the
    caller hands each its servers with ``LoadBalancer.update``; no router is
    rebuilt, pools stay (keyed by server in their transport), and the
    round-robin goes on for the servers that stay. Builds only (any thread).
    """
    builder = _Builder(runtime, transports, health)
    out = []
    for name in names:
        service = services.get(name)
        if isinstance(service, LoadBalancer):
            backends = builder.backends(name, runtime.http_services[name].config.load_balancer)
            out.append((service, backends))
    return out


def build_http_routers(
    runtime: RuntimeConfig,
    transports: TransportRegistry,
    entry_points: Iterable[str],
    services: dict[str, Service | None] | None = None,
    *,
    secure: bool = False,
    health: HealthRegistry | None = None,
    mirror_connect: Connect | None = None,
    observe: Observe | None = None,
) -> dict[str, HTTPRouter]:
    """One HTTPRouter per named HTTP entrypoint (an empty one where nothing routes).

    The routers without ``tls``; with ``secure``, the routers with ``tls`` instead
    (for TLS connections only: a router that asks for TLS never answers without it).
    ``observe``: each router's route on each entry point reports to what it says
    (the same service and pipeline: :meth:`~edge.router.http.Route.observed`).
    """
    builder = _Builder(runtime, transports, health, mirror_connect)
    if services is not None:
        builder.services = services
    entries: dict[str, list] = {ep: [] for ep in entry_points}
    for name, info in runtime.http_routers.items():
        if info.status == "disabled" or (info.config.tls is not None) != secure:
            continue
        route = builder.route(name, info)
        if route is None:
            log.error(
                "router %s: service %s could not be built; router skipped",
                name,
                info.config.service,
            )
            continue
        for ep in info.entry_points:
            if ep in entries:
                here = (
                    route
                    if observe is None
                    else route.observed(observe(ep, secure, info.config.observability))
                )
                entries[ep].append((name, info.rule, info.priority, here))
    return {ep: HTTPRouter(RouteTable(items)) for ep, items in entries.items()}
