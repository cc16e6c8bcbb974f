"""Endpoints-only rounds: a configuration that differs from the previous snapshot's only
in load balancers' servers (HTTP, TCP or UDP: :func:`edge.config.diff.changed_backends`)
is validated from that snapshot, with the same outcome as a full validation
(:func:`_endpoints_only`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from edge.config.diff import changed_backends
from edge.config.dynamic import Configuration
from edge.config.runtime.http import _check_http_service
from edge.config.runtime.model import (
    DEFAULT_TRANSPORT,
    RouterInfo,
    RuntimeConfig,
    ServiceInfo,
    _Basis,
    _kinds,
)
from edge.config.runtime.tcp import _check_tcp_service
from edge.config.runtime.tls import _TransportTLS
from edge.config.runtime.udp import _check_udp_service


def _endpoints_only(
    conf: Configuration,
    entry_points: Mapping[str, str],
    previous: RuntimeConfig,
    default_rule_syntax: str,
) -> RuntimeConfig | None:
    """``conf`` validated from ``previous`` when only load balancers' servers changed
    (HTTP, TCP or UDP); None when a full validation must run.

    A service's servers decide its own verdict only (no servers: a warning; an
    ``https`` server, or a TCP server with ``tls``: its serversTransport's TLS files are
    checked), so the changed services are validated again, each by its protocol's own
    check; when each gets the status and errors it had, no router, weighted service or
    middleware can judge otherwise and their infos are ``previous``'s (shared: nothing changes an info once built, :func:`check_tls`
    replaces the ones it gives errors, and those are taken as validation left them).
    The TLS files of every serversTransport ``previous`` checked are checked again (a
    file may have changed): any other verdict, a new entry point, default rule syntax or
    an element in another order, and the answer is None.
    """
    basis = previous._basis
    if basis is None or basis.rule_syntax != default_rule_syntax:
        return None
    changed = changed_backends(previous.configuration, conf)
    if changed is None or basis.entry_points != _kinds(entry_points):
        return None
    if not _same_order(previous.configuration, conf):
        return None  # the tables would list elements in another order
    rt = RuntimeConfig(conf, entry_points)
    http_tls = _TransportTLS()
    tcp_tls = _TransportTLS()
    # default@internal is the static one, the same as previous's (the static defaults
    # come with the entry point kinds, compared above).
    rt.servers_transports[DEFAULT_TRANSPORT] = previous.servers_transports[DEFAULT_TRANSPORT]
    rt.tcp_servers_transports[DEFAULT_TRANSPORT] = previous.tcp_servers_transports[
        DEFAULT_TRANSPORT
    ]
    if conf.http is not None:
        rt.servers_transports.update(conf.http.servers_transports)
    if conf.tcp is not None:
        rt.tcp_servers_transports.update(conf.tcp.servers_transports)
    for seen, now, transports in (
        (basis.http_tls, http_tls, rt.servers_transports),
        (basis.tcp_tls, tcp_tls, rt.tcp_servers_transports),
    ):
        for name, error in seen.verdicts.items():
            if now.check(name, transports[name]) != error:
                return None
    udp_transports: dict[str, object] = {DEFAULT_TRANSPORT: None}
    if conf.udp is not None:
        udp_transports.update(conf.udp.servers_transports)
    Check = tuple[list[str], Any, dict[str, ServiceInfo[Any]], Callable[[Any], None]]
    checks: tuple[Check, ...] = (
        (
            changed.http,
            conf.http,
            previous.http_services,
            lambda info: _check_http_service(info, rt.servers_transports, http_tls),
        ),
        (
            changed.tcp,
            conf.tcp,
            previous.tcp_services,
            lambda info: _check_tcp_service(info, rt.tcp_servers_transports, tcp_tls),
        ),
        (
            changed.udp,
            conf.udp,
            previous.udp_services,
            lambda info: _check_udp_service(info, udp_transports),
        ),
    )
    tables = []
    for names, section, before_table, check in checks:
        services = dict(before_table)
        for name in names:
            before = services[name]
            info = ServiceInfo(name, section.services[name])
            check(info)
            if info.status != before.status or info.errors != before.errors:
                return None
            info.used_by = list(before.used_by)
            services[name] = info
        tables.append(services)
    rt.http_services, rt.tcp_services, rt.udp_services = tables
    rt.http_middlewares = dict(previous.http_middlewares)
    rt.tcp_middlewares = dict(previous.tcp_middlewares)
    rt.udp_routers = dict(previous.udp_routers)
    rt.http_routers = dict(previous.http_routers)
    rt.tcp_routers = dict(previous.tcp_routers)
    routers: dict[str, dict[str, RouterInfo[Any]]] = {
        "router": rt.http_routers,
        "tcp router": rt.tcp_routers,
    }
    for (label, name), (router, _) in basis.tls.infos.items():
        routers[label][name] = router
    rt._basis = _Basis(entry_points, default_rule_syntax, http_tls, tcp_tls)
    rt._basis.since = (previous.configuration, changed)
    if basis.tls.certs is not None:
        # The same routers and tls section: check_tls with the same certificates will
        # find what it found last round (only that is kept: no chain of snapshots).
        rt._basis.inherited = basis.tls
    return rt


def _same_order(old: Configuration, new: Configuration) -> bool:
    """Whether every table of ``old`` lists its names in ``new``'s order (their contents
    were compared already)."""
    for a, b in ((old.http, new.http), (old.tcp, new.tcp), (old.udp, new.udp)):
        if a is None or b is None or a is b:
            continue
        for field in a.__struct_fields__:
            x, y = getattr(a, field), getattr(b, field)
            if isinstance(x, dict) and x is not y and list(x) != list(y):
                return False
    return True
