"""The TCP section's walk: serversTransports, services (weighted ones after the others),
middlewares, then routers (a HostSNI rule needs TLS: without it there is no server
name)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from edge.config.dynamic import (
    TCPConfiguration,
    TCPMiddleware,
    TCPServersTransport,
    TCPService,
)
from edge.config.merge import DEFAULT_TLS
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


def _build_tcp(
    rt: RuntimeConfig,
    tcp: TCPConfiguration,
    entry_points: Mapping[str, str],
    *,
    defaults: list[str],
    rules: _RuleCache,
    tls_errors: _TransportTLS,
) -> None:
    """Validate ``tcp`` into ``rt``'s TCP tables (routers attach to TCP entry points,
    ``defaults`` when they name none)."""
    rt.tcp_servers_transports.update(tcp.servers_transports)
    rt.tcp_services = {n: ServiceInfo(n, s) for n, s in tcp.services.items()}
    for info in rt.tcp_services.values():
        _check_tcp_service(info, rt.tcp_servers_transports, tls_errors)
    _check_weighted(rt.tcp_services)
    rt.tcp_middlewares = {n: ServiceInfo(n, m) for n, m in tcp.middlewares.items()}
    for mw in rt.tcp_middlewares.values():
        _check_tcp_middleware(mw)
    for name, router in tcp.routers.items():
        r = RouterInfo(name, router)
        rt.tcp_routers[name] = r
        _check_rule(r, router.rule, "tcp", rules)
        if router.tls is None and r.rule is not None and r.rule.hosts is not None:
            # Traefik refuses it too: without TLS there is no server name to match.
            r.add_error(
                "HostSNI names a server, but a connection without TLS has no server name: "
                "use HostSNI(`*`), or add tls"
            )
        _check_entry_points(r, router.entry_points, "tcp", defaults, entry_points)
        options = None
        if router.tls is not None and not router.tls.passthrough:  # TLS terminated here
            options = router.tls.options or DEFAULT_TLS
        _check_references(r, rt.tcp_services, rt.tcp_middlewares, rt.tls.options, options)


def _check_tcp_service(
    info: ServiceInfo[TCPService],
    transports: Mapping[str, TCPServersTransport],
    tls_errors: _TransportTLS,
) -> None:
    """A service's own checks: its transport exists and suits its load balancer; no
    servers is a warning. Weighted services are judged later. A stand-in for a service
    that did not decode (``problems``, disabled with them) has nothing else to check:
    its reason alone is shown."""
    lb = info.config.load_balancer
    if lb is None or info.config.problems:
        return
    usable = _check_transport(info, lb.servers_transport, transports)
    if not lb.servers:
        info.add_error("no servers: connections are closed", critical=False)
    if usable:
        transport = transports[lb.servers_transport or DEFAULT_TRANSPORT]
        _check_tcp_transport(info, lb.servers_transport, transport, tls_errors)


def _check_tcp_transport(
    info: ServiceInfo[TCPService],
    named: str,
    transport: TCPServersTransport,
    tls_errors: _TransportTLS,
) -> None:
    lb = info.config.load_balancer
    assert lb is not None
    name = named or DEFAULT_TRANSPORT
    if named and lb.proxy_protocol is not None and transport.proxy_protocol is None:
        info.add_error(
            f"loadBalancer.proxyProtocol is not used with serversTransport {name!r} "
            "(its own proxyProtocol is, as in Traefik v3): no PROXY header is sent",
            critical=False,
        )
    if named and lb.termination_delay is not None:
        info.add_error(
            f"loadBalancer.terminationDelay is not used with serversTransport {name!r} "
            "(its own terminationDelay is, as in Traefik v3)",
            critical=False,
        )
    if any(s.tls for s in lb.servers):
        error = tls_errors.check(name, transport)
        if error is not None:
            info.add_error(f"serversTransport {name!r}: tls: {error}")
    elif transport.tls is not None and named:
        info.add_error(
            f"serversTransport {name!r} has tls, but no server has tls: true: nothing is encrypted",
            critical=False,
        )


def _check_tcp_middleware(info: ServiceInfo[TCPMiddleware]) -> None:
    config = info.config
    if config.ip_allow_list is not None:
        ranges = config.ip_allow_list.source_range
        if not ranges:
            info.add_error("ipAllowList: sourceRange is empty")
        for entry in ranges:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                info.add_error(f"ipAllowList: sourceRange {entry!r} is not an IP address or CIDR")
    elif config.in_flight_conn is not None and config.in_flight_conn.amount < 1:
        info.add_error(f"inFlightConn: amount {config.in_flight_conn.amount} admits no connection")
