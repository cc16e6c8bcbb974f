"""The HTTP section's walk: serversTransports, services (weighted ones after the others),
middlewares, then routers with their entry points' models applied (Traefik's
``applyModel``)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from edge.config.dynamic import (
    HTTPConfiguration,
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
from edge.config.runtime.model import DEFAULT_TRANSPORT, RouterInfo, RuntimeConfig, ServiceInfo
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
    for info in rt.http_services.values():
        _check_http_service(info, rt.servers_transports, tls_errors)
    _check_weighted(rt.http_services)
    for name, router in _apply_models(http.routers, entry_points, defaults).items():
        r = RouterInfo(name, router)
        rt.http_routers[name] = r
        if router.problems:  # a stand-in for what a provider could not make: disabled
            _check_entry_points(r, router.entry_points, "tcp", defaults, entry_points)
            continue
        _check_rule(r, router.rule, "http", rules)
        _check_entry_points(r, router.entry_points, "tcp", defaults, entry_points)
        options = None if router.tls is None else router.tls.options or DEFAULT_TLS
        _check_references(r, rt.http_services, rt.http_middlewares, rt.tls.options, options)


def _check_http_service(
    info: ServiceInfo[Service],
    transports: Mapping[str, ServersTransport],
    tls_errors: _TransportTLS,
) -> None:
    """A service's own checks: its transport exists and, for ``https`` servers, its TLS
    files can be used; no servers is a warning. Weighted services are judged later."""
    lb = info.config.load_balancer
    if lb is None:
        return
    _check_transport(info, lb.servers_transport, transports)
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
    """The HTTP routers with their entry points' ``http.tls`` applied (Traefik's applyModel).

    A router on an entry point whose kind carries ``http_tls`` (see
    :class:`edge.config.static.EntryPointKind`) serves there with that ``tls``
    unless it has its own. A router on several entry points of which some have a
    model is split: one router per model entry point, named ``<entrypoint>-<name>``,
    and the router itself keeps the other entry points.
    """
    models = {
        name: tls for name, kind in entry_points.items() if (tls := getattr(kind, "http_tls", None))
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
            if tls is None:
                options = model.options
                if options and options != DEFAULT_TLS:
                    options = qualify(options, split_name(name)[1] or "internal")
                tls = RouterTLS(
                    cert_resolver=model.cert_resolver, options=options, domains=list(model.domains)
                )
            out[f"{ep}-{name}" if len(eps) > 1 else name] = msgspec.structs.replace(
                router, entry_points=[ep], tls=tls
            )
        if rest:
            out[name] = msgspec.structs.replace(router, entry_points=rest)
    return out
