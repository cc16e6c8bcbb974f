"""Merging every provider's configuration into one, with provider-qualified names (Traefik's rules).

Owns the ``name@provider`` naming. Invariants of :func:`merge`'s result:

* every element (router, service, middleware, serversTransport, TLS options and
  stores except ``default``) is named ``name@provider``;
* every reference without ``@`` (router ``service``, ``middlewares``, ``tls.options``;
  weighted ``services[].name``; load balancer ``serversTransport``; certificate
  ``stores``) is qualified with the provider it came from; references with ``@`` are
  kept as written, ``""`` stays ``""`` (the default), and ``"default"`` TLS options and
  stores keep their name;
* TLS certificates are concatenated; TLS options ``default`` exist exactly once: the
  built-in defaults when no provider defines them, dropped (with an error logged, so the
  routers needing them fail visibly) when several do, as Traefik does;
* the order is deterministic: providers sorted by name, then each provider's own order.

References are not checked here; :mod:`edge.config.runtime` does that.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import msgspec

from edge.config.dynamic import (
    CertAndStores,
    Configuration,
    HTTPConfiguration,
    Middleware,
    Router,
    ServersTransport,
    Service,
    TCPConfiguration,
    TCPLoadBalancer,
    TCPMiddleware,
    TCPRouter,
    TCPServersTransport,
    TCPService,
    TLSConfiguration,
    TLSOptions,
    TLSStore,
    UDPConfiguration,
    UDPRouter,
    UDPServersTransport,
    UDPService,
    Weighted,
)

__all__ = ["DEFAULT_TLS", "RouterMemo", "merge", "qualify", "split_name"]

log = logging.getLogger(__name__)

DEFAULT_TLS = "default"
"""The name of the default TLS options and store: never qualified."""

_replace = msgspec.structs.replace
_Qualifier = Callable[[str], str]


def qualify(name: str, provider: str) -> str:
    """``name@provider`` unless ``name`` already names its provider."""
    return name if "@" in name else f"{name}@{provider}"


def split_name(qualified: str) -> tuple[str, str]:
    """``"whoami@file"`` -> ``("whoami", "file")``; ``("x", "")`` when unqualified."""
    name, _, provider = qualified.rpartition("@")
    return (name, provider) if name else (qualified, "")


RouterMemo = dict[
    str,
    tuple[
        Mapping[str, Router],
        list[tuple[str, Router]],
        Mapping[str, Service],
        list[tuple[str, Service]],
    ],
]
"""What :func:`merge` made of each provider's HTTP routers and services: provider -> (the
routers it was given, what they became, the services it was given, what they became)."""


def merge(configs: Mapping[str, Configuration], memo: RouterMemo | None = None) -> Configuration:
    """One configuration from every provider's (provider name -> its configuration).

    ``memo`` (kept by the caller from one merge to the next) spares qualifying again a
    provider's HTTP routers when its configuration holds the very same routers table
    as last time: a provider that changed only its services (the Kubernetes provider's
    endpoint churn: 5,000 routers) passes the table on, and configurations are never
    changed once published. Likewise its HTTP services: when they are named in the
    order they were last time, each one that is the very same object as last time
    keeps what it became (endpoint churn replaces a few of thousands).
    """
    if memo is not None:
        for gone in memo.keys() - configs.keys():
            del memo[gone]
    has_http = has_tcp = has_udp = False
    routers: dict[str, Router] = {}
    services: dict[str, Service] = {}
    middlewares: dict[str, Middleware] = {}
    transports: dict[str, ServersTransport] = {}
    tcp_routers: dict[str, TCPRouter] = {}
    tcp_services: dict[str, TCPService] = {}
    tcp_middlewares: dict[str, TCPMiddleware] = {}
    tcp_transports: dict[str, TCPServersTransport] = {}
    udp_routers: dict[str, UDPRouter] = {}
    udp_services: dict[str, UDPService] = {}
    udp_transports: dict[str, UDPServersTransport] = {}
    certificates: list[CertAndStores] = []
    options: dict[str, TLSOptions] = {}
    stores: dict[str, TLSStore] = {}
    default_options_from: list[str] = []
    default_store_from: list[str] = []

    for provider in sorted(configs):
        if not provider or "@" in provider:
            raise ValueError(f"invalid provider name {provider!r}")
        conf = configs[provider]

        def q(name: str, provider: str = provider) -> str:
            return qualify(name, provider)

        if conf.http is not None:
            has_http = True
            last = memo.get(provider) if memo is not None else None
            if last is not None and last[0] is conf.http.routers:
                qualified = last[1]
            else:
                qualified = [(q(n), _http_router(r, q)) for n, r in conf.http.routers.items()]
            given = conf.http.services
            if last is not None and (last[2] is given or list(last[2]) == list(given)):
                was = last[2].values()
                http_services = [
                    done if s is before else (done[0], _http_service(s, q))
                    for done, s, before in zip(last[3], given.values(), was, strict=True)
                ]
            else:
                http_services = [(q(n), _http_service(s, q)) for n, s in given.items()]
            if memo is not None:
                memo[provider] = (conf.http.routers, qualified, given, http_services)
            routers.update(qualified)
            services.update(http_services)
            middlewares.update((q(n), m) for n, m in conf.http.middlewares.items())
            transports.update((q(n), t) for n, t in conf.http.servers_transports.items())

        if conf.tcp is not None:
            has_tcp = True
            tcp_routers.update((q(n), _tcp_router(r, q)) for n, r in conf.tcp.routers.items())
            tcp_services.update((q(n), _tcp_service(s, q)) for n, s in conf.tcp.services.items())
            tcp_middlewares.update((q(n), m) for n, m in conf.tcp.middlewares.items())
            tcp_transports.update((q(n), t) for n, t in conf.tcp.servers_transports.items())

        if conf.udp is not None:
            has_udp = True
            udp_routers.update(
                (q(n), _replace(r, service=q(r.service))) for n, r in conf.udp.routers.items()
            )
            udp_services.update((q(n), _udp_service(s, q)) for n, s in conf.udp.services.items())
            udp_transports.update((q(n), t) for n, t in conf.udp.servers_transports.items())

        if conf.tls is not None:
            for cert in conf.tls.certificates:
                if cert.stores:
                    cert = _replace(cert, stores=[_tls_name(s, q) for s in cert.stores])
                certificates.append(cert)
            for name, opts in conf.tls.options.items():
                if name == DEFAULT_TLS:
                    default_options_from.append(provider)
                options[_tls_name(name, q)] = opts
            for name, store in conf.tls.stores.items():
                if name == DEFAULT_TLS:
                    default_store_from.append(provider)
                stores[_tls_name(name, q)] = store

    if not default_options_from:
        options = {DEFAULT_TLS: TLSOptions(), **options}
    elif len(default_options_from) > 1:
        log.error(
            "TLS options 'default' defined by several providers (%s): none is used, "
            "routers needing them are disabled",
            ", ".join(default_options_from),
        )
        del options[DEFAULT_TLS]
    if len(default_store_from) > 1:
        log.error(
            "TLS store 'default' defined by several providers (%s): none is used",
            ", ".join(default_store_from),
        )
        del stores[DEFAULT_TLS]

    return Configuration(
        http=HTTPConfiguration(
            routers=routers,
            services=services,
            middlewares=middlewares,
            servers_transports=transports,
        )
        if has_http
        else None,
        tcp=TCPConfiguration(
            routers=tcp_routers,
            services=tcp_services,
            middlewares=tcp_middlewares,
            servers_transports=tcp_transports,
        )
        if has_tcp
        else None,
        udp=UDPConfiguration(
            routers=udp_routers, services=udp_services, servers_transports=udp_transports
        )
        if has_udp
        else None,
        tls=TLSConfiguration(certificates=certificates, options=options, stores=stores),
    )


def _tls_name(name: str, q: _Qualifier) -> str:
    return name if name == DEFAULT_TLS else q(name)


def _http_router(router: Router, q: _Qualifier) -> Router:
    tls = router.tls
    if tls is not None and tls.options:
        tls = _replace(tls, options=_tls_name(tls.options, q))
    return _replace(
        router,
        service=q(router.service),
        middlewares=[q(m) for m in router.middlewares],
        tls=tls,
    )


def _weighted(weighted: Weighted, q: _Qualifier) -> Weighted:
    return _replace(weighted, services=[_replace(s, name=q(s.name)) for s in weighted.services])


def _http_service(service: Service, q: _Qualifier) -> Service:
    if service.weighted is not None:
        return _replace(service, weighted=_weighted(service.weighted, q))
    lb = service.load_balancer
    if lb is not None and lb.servers_transport:
        lb = _replace(lb, servers_transport=q(lb.servers_transport))
        return _replace(service, load_balancer=lb)
    return service


def _tcp_router(router: TCPRouter, q: _Qualifier) -> TCPRouter:
    tls = router.tls
    if tls is not None and tls.options:
        tls = _replace(tls, options=_tls_name(tls.options, q))
    return _replace(
        router, service=q(router.service), middlewares=[q(m) for m in router.middlewares], tls=tls
    )


def _tcp_service(service: TCPService, q: _Qualifier) -> TCPService:
    if service.weighted is not None:
        return _replace(service, weighted=_weighted(service.weighted, q))
    lb: TCPLoadBalancer | None = service.load_balancer
    if lb is not None and lb.servers_transport:
        return _replace(
            service, load_balancer=_replace(lb, servers_transport=q(lb.servers_transport))
        )
    return service


def _udp_service(service: UDPService, q: _Qualifier) -> UDPService:
    if service.weighted is not None:
        return _replace(service, weighted=_weighted(service.weighted, q))
    lb = service.load_balancer
    if lb is not None and lb.servers_transport:
        return _replace(
            service, load_balancer=_replace(lb, servers_transport=q(lb.servers_transport))
        )
    return service
