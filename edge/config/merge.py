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
from typing import TypeVar

import msgspec

from edge.config.dynamic import (
    CertAndStores,
    Configuration,
    HighestRandomWeight,
    HTTPConfiguration,
    Middleware,
    Router,
    ServersTransport,
    Service,
    TCPConfiguration,
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
_Provider = tuple[str, Configuration, _Qualifier]
"""A provider's name, its configuration and the function qualifying its names."""


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
    providers: list[_Provider] = []
    for provider in sorted(configs):
        if not provider or "@" in provider:
            raise ValueError(f"invalid provider name {provider!r}")
        providers.append((provider, configs[provider], _qualifier(provider)))
    return Configuration(
        http=_merge_http(providers, memo),
        tcp=_merge_tcp(providers),
        udp=_merge_udp(providers),
        tls=_merge_tls(providers),
    )


def _qualifier(provider: str) -> _Qualifier:
    def q(name: str) -> str:
        return qualify(name, provider)

    return q


def _merge_http(providers: list[_Provider], memo: RouterMemo | None) -> HTTPConfiguration | None:
    """The providers' HTTP sections in one, or None when none has one."""
    sections = [(p, conf.http, q) for p, conf, q in providers if conf.http is not None]
    if not sections:
        return None
    routers: dict[str, Router] = {}
    services: dict[str, Service] = {}
    middlewares: dict[str, Middleware] = {}
    transports: dict[str, ServersTransport] = {}
    for provider, http, q in sections:
        last = memo.get(provider) if memo is not None else None
        if last is not None and last[0] is http.routers:
            qualified = last[1]
        else:
            qualified = [(q(n), _router(r, q)) for n, r in http.routers.items()]
        given = http.services
        if last is not None and (last[2] is given or list(last[2]) == list(given)):
            was = last[2].values()
            http_services = [
                done if s is before else (done[0], _service(s, q))
                for done, s, before in zip(last[3], given.values(), was, strict=True)
            ]
        else:
            http_services = [(q(n), _service(s, q)) for n, s in given.items()]
        if memo is not None:
            memo[provider] = (http.routers, qualified, given, http_services)
        routers.update(qualified)
        services.update(http_services)
        middlewares.update((q(n), m) for n, m in http.middlewares.items())
        transports.update((q(n), t) for n, t in http.servers_transports.items())
    return HTTPConfiguration(
        routers=routers, services=services, middlewares=middlewares, servers_transports=transports
    )


def _merge_tcp(providers: list[_Provider]) -> TCPConfiguration | None:
    """The providers' TCP sections in one, or None when none has one."""
    sections = [(conf.tcp, q) for _, conf, q in providers if conf.tcp is not None]
    if not sections:
        return None
    routers: dict[str, TCPRouter] = {}
    services: dict[str, TCPService] = {}
    middlewares: dict[str, TCPMiddleware] = {}
    transports: dict[str, TCPServersTransport] = {}
    for tcp, q in sections:
        routers.update((q(n), _router(r, q)) for n, r in tcp.routers.items())
        services.update((q(n), _service(s, q)) for n, s in tcp.services.items())
        middlewares.update((q(n), m) for n, m in tcp.middlewares.items())
        transports.update((q(n), t) for n, t in tcp.servers_transports.items())
    return TCPConfiguration(
        routers=routers, services=services, middlewares=middlewares, servers_transports=transports
    )


def _merge_udp(providers: list[_Provider]) -> UDPConfiguration | None:
    """The providers' UDP sections in one, or None when none has one."""
    sections = [(conf.udp, q) for _, conf, q in providers if conf.udp is not None]
    if not sections:
        return None
    routers: dict[str, UDPRouter] = {}
    services: dict[str, UDPService] = {}
    transports: dict[str, UDPServersTransport] = {}
    for udp, q in sections:
        routers.update((q(n), _replace(r, service=q(r.service))) for n, r in udp.routers.items())
        services.update((q(n), _service(s, q)) for n, s in udp.services.items())
        transports.update((q(n), t) for n, t in udp.servers_transports.items())
    return UDPConfiguration(routers=routers, services=services, servers_transports=transports)


def _merge_tls(providers: list[_Provider]) -> TLSConfiguration:
    """The providers' TLS sections in one: certificates concatenated, options and stores
    qualified; ``default`` options and store kept from the one provider defining them."""
    certificates: list[CertAndStores] = []
    options: dict[str, TLSOptions] = {}
    stores: dict[str, TLSStore] = {}
    default_options_from: list[str] = []
    default_store_from: list[str] = []
    for provider, conf, q in providers:
        if conf.tls is None:
            continue
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
    return TLSConfiguration(certificates=certificates, options=options, stores=stores)


def _tls_name(name: str, q: _Qualifier) -> str:
    return name if name == DEFAULT_TLS else q(name)


_R = TypeVar("_R", Router, TCPRouter)
_S = TypeVar("_S", Service, TCPService, UDPService)
_W = TypeVar("_W", Weighted, HighestRandomWeight)


def _router(router: _R, q: _Qualifier) -> _R:
    """An HTTP or TCP router with its service, middlewares and TLS options qualified."""
    tls = router.tls
    if tls is not None and tls.options:
        tls = _replace(tls, options=_tls_name(tls.options, q))
    return _replace(
        router, service=q(router.service), middlewares=[q(m) for m in router.middlewares], tls=tls
    )


def _weighted(weighted: _W, q: _Qualifier) -> _W:
    return _replace(weighted, services=[_replace(s, name=q(s.name)) for s in weighted.services])


def _service(service: _S, q: _Qualifier) -> _S:
    """A service with its weighted (or highestRandomWeight) members or its serversTransport
    qualified."""
    if service.weighted is not None:
        return _replace(service, weighted=_weighted(service.weighted, q))
    hrw = getattr(service, "highest_random_weight", None)  # HTTP's alone
    if hrw is not None:
        return _replace(service, highest_random_weight=_weighted(hrw, q))
    lb = service.load_balancer
    if lb is not None and lb.servers_transport:
        return _replace(
            service, load_balancer=_replace(lb, servers_transport=q(lb.servers_transport))
        )
    return service
