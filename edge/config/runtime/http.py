"""The HTTP section's walk: serversTransports, services (weighted ones after the others),
middlewares (their values, then chains), then routers with their entry points' models
applied (Traefik's ``applyModel``) and the chains they name unrolled."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import msgspec

from edge.config.dynamic import (
    UNSUPPORTED,
    Failover,
    HTTPConfiguration,
    Middleware,
    Mirroring,
    Router,
    RouterTLS,
    ServersTransport,
    Service,
)
from edge.config.merge import DEFAULT_TLS, qualify, split_name
from edge.config.runtime.checks import (
    _check_entry_points,
    _check_references,
    _check_rule,
    _check_transport,
    _check_weighted,
    _RuleCache,
)
from edge.config.runtime.model import (
    DEFAULT_TRANSPORT,
    DISABLED,
    RouterInfo,
    RuntimeConfig,
    ServiceInfo,
)
from edge.config.runtime.tls import _TransportTLS


def _build_http(
    rt: RuntimeConfig,
    http: HTTPConfiguration,
    entry_points: Mapping[str, str],
    *,
    defaults: list[str],
    rules: _RuleCache,
    tls_errors: _TransportTLS,
) -> None:
    """Validate ``http`` into ``rt``'s HTTP tables (routers attach to TCP entry points,
    ``defaults`` when they name none)."""
    rt.servers_transports.update(http.servers_transports)
    rt.http_services = {n: ServiceInfo(n, s) for n, s in http.services.items()}
    rt.http_middlewares = {n: ServiceInfo(n, m) for n, m in http.middlewares.items()}
    _check_middlewares(rt.http_middlewares)
    for info in rt.http_services.values():
        _check_http_service(info, rt.servers_transports, tls_errors)
    _check_weighted(rt.http_services, answers=True)
    _check_failovers(rt.http_services)
    _check_mirrorings(rt.http_services)
    for name, router in _apply_models(http.routers, entry_points, defaults).items():
        r = RouterInfo(name, router)
        rt.http_routers[name] = r
        if router.problems:  # a stand-in for what a provider could not make: disabled
            _check_entry_points(r, router.entry_points, "tcp", defaults, entry_points)
            continue
        _check_rule(r, router.rule, "http", rules)
        _check_entry_points(r, router.entry_points, "tcp", defaults, entry_points)
        options = None if router.tls is None else router.tls.options or DEFAULT_TLS
        origins = _middleware_origins(name, router, entry_points)
        _check_references(
            r, rt.http_services, rt.http_middlewares, rt.tls.options, options, origins
        )
        if r.status != DISABLED and any(
            rt.http_middlewares[m].config.chain is not None for m in router.middlewares
        ):
            # The router runs a chain's middlewares in its place (Traefik's chain is
            # a handler made of them); what the factory builds is the unrolled list.
            r.config = msgspec.structs.replace(
                router, middlewares=_unrolled(router.middlewares, rt.http_middlewares)
            )


def _check_middlewares(middlewares: Mapping[str, ServiceInfo[Middleware]]) -> None:
    """Each middleware's values (:meth:`Middleware.check`), then each chain: its
    members exist, are enabled and do not lead back to it."""
    for info in middlewares.values():
        if info.status != DISABLED:
            for error in info.config.check():
                info.add_error(error)
    done: set[str] = set()
    for name, info in middlewares.items():
        if info.config.chain is not None:
            _check_chain(name, middlewares, done, [])


def _chain_members(name: str, chain: list[str]) -> list[str]:
    """A chain's members, qualified by the chain's provider where they name none
    (as the router's own references are, edge.config.merge)."""
    provider = split_name(name)[1]
    return [m if "@" in m or not provider else qualify(m, provider) for m in chain]


def _check_chain(
    name: str, middlewares: Mapping[str, ServiceInfo[Middleware]], done: set[str], path: list[str]
) -> None:
    """Depth first, so a member chain is judged before the chains naming it."""
    info = middlewares[name]
    chain = info.config.chain
    if name in done or chain is None:
        return
    if name in path:
        cycle = " -> ".join([*path[path.index(name) :], name])
        for member in path[path.index(name) :]:
            middlewares[member].add_error(f"chain: a cycle of chains: {cycle}")
            done.add(member)
        return
    path.append(name)
    for i, member in enumerate(_chain_members(name, chain.middlewares)):
        m = middlewares.get(member)
        if m is None:
            info.add_error(f"chain.middlewares[{i}]: middleware {member!r} does not exist")
            continue
        _check_chain(member, middlewares, done, path)
        if name in done:
            break  # on a cycle: judged there
        if m.status == DISABLED:
            info.add_error(f"chain.middlewares[{i}]: middleware {member!r} is disabled")
        if name not in m.used_by:
            m.used_by.append(name)
    path.pop()
    done.add(name)


def _unrolled(names: list[str], middlewares: Mapping[str, ServiceInfo[Middleware]]) -> list[str]:
    """``names`` with each chain replaced by its members, in order (all of them
    enabled: a router naming a disabled chain is disabled itself)."""
    out: list[str] = []
    for name in names:
        chain = middlewares[name].config.chain
        if chain is None:
            out.append(name)
        else:
            out += _unrolled(_chain_members(name, chain.middlewares), middlewares)
    return out


def _check_http_service(
    info: ServiceInfo[Service],
    transports: Mapping[str, ServersTransport],
    tls_errors: _TransportTLS,
) -> None:
    """A service's own checks: its transport exists and, for ``https`` servers, its TLS
    files can be used; no servers is a warning. Weighted services are judged later. A
    stand-in that did not decode (``problems``, disabled with them) has nothing else to
    check: its real reason is all it shows."""
    lb = info.config.load_balancer
    if lb is None or info.config.problems:
        return
    _check_transport(info, lb.servers_transport, transports)
    for key, check in (
        ("healthCheck", lb.health_check),
        ("passiveHealthCheck", lb.passive_health_check),
    ):
        if check is not None:
            try:
                check.check()
            except ValueError as exc:
                info.add_error(f"loadBalancer.{key}.{exc}")
    if lb.strategy not in ("", "wrr", "p2c"):
        if lb.strategy in ("hrw", "leasttime"):
            info.add_error(
                f"loadBalancer.strategy {lb.strategy!r}: {UNSUPPORTED} (it has wrr, p2c)"
            )
        else:
            info.add_error(
                f"loadBalancer.strategy {lb.strategy!r}: unknown (Traefik's: wrr, p2c, hrw, leasttime)"
            )
    if not lb.servers:
        info.add_error("no servers: requests get 503", critical=False)
    name = lb.servers_transport or DEFAULT_TRANSPORT
    transport = transports.get(name)
    if transport is not None and any(s.url[:6].lower() == "https:" for s in lb.servers):
        error = tls_errors.check(name, transport)
        if error is not None:
            info.add_error(f"serversTransport {name!r}: {error}")


def _apply_models(
    routers: Mapping[str, Router], entry_points: Mapping[str, str], defaults: list[str]
) -> Mapping[str, Router]:
    """The HTTP routers with their entry points' models applied (Traefik's applyModel):
    ``http.tls`` and ``http.middlewares``.

    A router on an entry point whose kind carries ``http_tls`` or ``http_middlewares``
    (see :class:`edge.config.static.EntryPointKind`) serves there with that ``tls``
    unless it has its own, and with those middlewares before its own
    (:func:`entry_point_middlewares`). A router on several entry points of which some
    have a model is split: one router per model entry point, named
    ``<entrypoint>-<name>``, and the router itself keeps the other entry points.
    """
    models = {
        name: kind
        for name, kind in entry_points.items()
        if getattr(kind, "http_tls", None) or getattr(kind, "http_middlewares", ())
    }
    if not models:
        return routers
    out: dict[str, Router] = {}
    for name, router in routers.items():
        eps = router.entry_points or defaults
        if not any(ep in models for ep in eps):
            out[name] = router
            continue
        rest = []
        for ep in eps:
            model = models.get(ep)
            if model is None:
                rest.append(ep)
                continue
            tls = router.tls
            model_tls = getattr(model, "http_tls", None)
            if tls is None and model_tls is not None:
                options = model_tls.options
                if options and options != DEFAULT_TLS:
                    options = qualify(options, split_name(name)[1] or "internal")
                tls = RouterTLS(
                    cert_resolver=model_tls.cert_resolver,
                    options=options,
                    domains=list(model_tls.domains),
                )
            middlewares = entry_point_middlewares(model, name) + router.middlewares
            out[f"{ep}-{name}" if len(eps) > 1 else name] = msgspec.structs.replace(
                router, entry_points=[ep], tls=tls, middlewares=middlewares
            )
        if rest:
            out[name] = msgspec.structs.replace(router, entry_points=rest)
    return out


def _middleware_origins(
    name: str, router: Router, entry_points: Mapping[str, str]
) -> dict[str, str]:
    """For the router ``name`` as :func:`_apply_models` made it (one entry point when a
    model applied): the middlewares its entry point put before its own, each to the
    note its messages end with (``" (entryPoints.web.http.middlewares)"``)."""
    if len(router.entry_points) != 1:
        return {}
    ep = router.entry_points[0]
    note = f" (entryPoints.{ep}.http.middlewares)"
    return {m: note for m in entry_point_middlewares(entry_points.get(ep), name)}


def entry_point_middlewares(kind: object, router: str) -> list[str]:
    """The ``http.middlewares`` of the entry point ``kind`` as the HTTP router ``router``
    names them: qualified by the router's provider where they name none (Traefik
    resolves them as the router's own, so ``auth`` on an entry point is ``auth@file``
    for a file router and ``auth@kubernetescrd`` for an IngressRoute's)."""
    provider = split_name(router)[1]
    return [
        m if not provider else qualify(m, provider) for m in getattr(kind, "http_middlewares", ())
    ]


def failover_members(name: str, failover: Failover) -> tuple[str, str]:
    """A failover's ``service`` and ``fallback``, qualified by its own provider where
    they name none (as a router's references are, edge.config.merge)."""
    provider = split_name(name)[1]
    main, fallback = failover.service, failover.fallback
    if provider:
        main = main if "@" in main else qualify(main, provider)
        fallback = fallback if "@" in fallback else qualify(fallback, provider)
    return main, fallback


def _check_failovers(services: Mapping[str, ServiceInfo[Service]]) -> None:
    """Disable failover services whose ``service`` or ``fallback`` is missing, disabled,
    or leads back to them; depth first, so a member's status is final first (weighted
    services were judged before)."""
    done: set[str] = set()
    for name in services:
        _check_failover(name, services, done, [])


def _check_failover(
    name: str, services: Mapping[str, ServiceInfo[Service]], done: set[str], path: list[str]
) -> None:
    info = services[name]
    failover = None if info.config.problems else info.config.failover
    if name in done or failover is None:
        return
    keys = zip(("service", "fallback"), failover_members(name, failover), strict=True)
    _check_members(name, "failover", keys, services, done, path, _check_failover)


def _check_members(
    name: str,
    kind: str,
    members: Iterable[tuple[str, str]],
    services: Mapping[str, ServiceInfo[Service]],
    done: set[str],
    path: list[str],
    visit: Callable[[str, Mapping[str, ServiceInfo[Service]], set[str], list[str]], None],
) -> None:
    """The members of the ``kind`` service ``name`` (failover, mirroring), each (its key,
    its qualified name): one missing, leading back to ``name`` (a cycle) or disabled
    once ``visit`` judged it (depth first) disables ``name``, naming the key."""
    info = services[name]
    path.append(name)
    for key, member in members:
        child = services.get(member)
        if child is None:
            info.add_error(f"{kind}.{key}: service {member!r} does not exist")
            continue
        if name not in child.used_by:
            child.used_by.append(name)
        if member in path:
            cycle = " -> ".join([*path[path.index(member) :], member])
            info.add_error(f"{kind}.{key}: services form a cycle: {cycle}")
            continue
        visit(member, services, done, path)
        if child.status == DISABLED:
            info.add_error(f"{kind}.{key}: service {member!r} is disabled")
    path.pop()
    done.add(name)


def mirroring_members(name: str, mirroring: Mirroring) -> tuple[str, list[tuple[str, int]]]:
    """A mirroring's ``service`` and its mirrors' (name, percent), qualified by its own
    provider where they name none (as a router's references are, edge.config.merge)."""
    provider = split_name(name)[1]

    def q(member: str) -> str:
        return member if not member or not provider or "@" in member else qualify(member, provider)

    return q(mirroring.service), [(q(m.name), m.percent) for m in mirroring.mirrors]


def _check_mirrorings(services: Mapping[str, ServiceInfo[Service]]) -> None:
    """Disable mirroring services with a value out of range, or whose service or a
    mirror is missing, disabled or leads back to them; depth first, so a member
    mirroring's status is final first. A mirror is a service like any other (a load
    balancer, weighted, failover or mirroring one)."""
    done: set[str] = set()
    for name in services:
        _check_mirroring(name, services, done, [])
    for info in services.values():
        if info.config.mirroring is None or info.status == DISABLED:
            continue
        parents = sorted(p for p in info.used_by if p in services)
        if parents:
            info.add_error(
                f"used by service {', '.join(repr(p) for p in parents)}: edge mirrors only "
                "for routers naming this service; through another service it serves its "
                "service alone",
                critical=False,
            )


def _check_mirroring(
    name: str, services: Mapping[str, ServiceInfo[Service]], done: set[str], path: list[str]
) -> None:
    info = services[name]
    mirroring = None if info.config.problems else info.config.mirroring
    if name in done or mirroring is None:
        return
    try:
        mirroring.check()
    except ValueError as exc:
        info.add_error(f"mirroring.{exc}")
    main, mirrors = mirroring_members(name, mirroring)
    keys = [("service", main)] + [(f"mirrors[{i}]", m) for i, (m, _) in enumerate(mirrors)]
    # An empty name is check()'s to report.
    members = [(key, member) for key, member in keys if member]
    _check_members(name, "mirroring", members, services, done, path, _check_mirroring)
