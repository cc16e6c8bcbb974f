"""Validation of a merged configuration into a :class:`RuntimeConfig`: one walk per
protocol (HTTP, TCP, UDP), after a shortcut for rounds where only servers changed.
See :mod:`edge.config.runtime` for the invariants of the result.

The static configuration's part (:class:`edge.config.static.RuntimeDefaults`, carried by
the entry point kinds) is applied here, as Traefik's internal provider applies it:
``default@internal`` is the static ``serversTransport`` / ``tcpServersTransport``, and
with ``api`` the configuration holds the service ``api@internal`` (no servers: the
entry point answers its routes with the API, :mod:`edge.entrypoints.internal`), with
``metrics.prometheus.manualRouting`` the service ``prometheus@internal`` (its routes
answer with ``/metrics``' text).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from edge.config.dynamic import Configuration, HTTPConfiguration, LoadBalancer, Service
from edge.config.runtime.checks import _RuleCache
from edge.config.runtime.endpoints import _endpoints_only
from edge.config.runtime.http import _build_http
from edge.config.runtime.model import DEFAULT_TRANSPORT, RuntimeConfig, ServiceInfo, _Basis
from edge.config.runtime.tcp import _build_tcp
from edge.config.runtime.tls import _TransportTLS
from edge.config.runtime.udp import _build_udp
from edge.config.static import (
    API_SERVICE,
    INTERNAL_ENTRY_POINT,
    PROMETHEUS_SERVICE,
    EntryPointKind,
    RuntimeDefaults,
    runtime_port,
)

API_CONFIG = Service(load_balancer=LoadBalancer())
"""``api@internal`` (and ``prometheus@internal``) in the configuration: a service the
entry point answers itself."""


def build_runtime(
    conf: Configuration,
    entry_points: Mapping[str, str],
    *,
    previous: RuntimeConfig | None = None,
    default_rule_syntax: str = "v3",
) -> RuntimeConfig:
    """Validate the merged ``conf`` against the entry points (name -> ``"tcp"``/``"udp"``).

    ``previous``, when given, lends its compiled rules: a rule whose text and syntax did
    not change is not compiled again. When ``conf`` differs from ``previous``'s only in
    HTTP load balancers' servers (:func:`edge.config.diff.changed_servers`: Kubernetes
    endpoint churn), it lends its verdicts too: only those services are validated again
    (see :func:`_endpoints_only`), with the same outcome as a full validation.
    ``default_rule_syntax`` (``core.defaultRuleSyntax``) is the syntax of routers whose
    ``ruleSyntax`` is empty. The static configuration's defaults come with the entry
    point kinds (see the module doc). With ``runtimeEntryPoints`` the entry points the
    routers open are validated as the others (:func:`_with_opened`).
    """
    defaults = _defaults(entry_points)
    conf = _with_api(conf, defaults)
    # Routers naming none attach to the static entry points only, never to one opened;
    # when any is marked asDefault, to those marked only (Traefik's default entry points).
    marked = any(getattr(kind, "as_default", False) for kind in entry_points.values())
    tcp_defaults = sorted(
        n
        for n, p in entry_points.items()
        if p == "tcp"
        and n != INTERNAL_ENTRY_POINT
        and (not marked or getattr(p, "as_default", False))
    )
    udp_defaults = sorted(n for n, p in entry_points.items() if p == "udp")
    if defaults.opens:
        entry_points = _with_opened(conf, entry_points, defaults)
    if previous is not None:
        shortcut = _endpoints_only(conf, entry_points, previous, default_rule_syntax)
        if shortcut is not None:
            return shortcut
    rt = RuntimeConfig(conf, entry_points)
    http_tls = _TransportTLS()
    tcp_tls = _TransportTLS()
    rt._basis = _Basis(entry_points, default_rule_syntax, http_tls, tcp_tls)
    rules = _RuleCache(previous, default_rule_syntax)
    _default_transports(rt, defaults)
    if conf.http is not None:
        _build_http(
            rt, conf.http, entry_points, defaults=tcp_defaults, rules=rules, tls_errors=http_tls
        )
        for name in (API_SERVICE, PROMETHEUS_SERVICE):
            internal = rt.http_services.get(name)
            if internal is not None and internal.config is API_CONFIG:  # no servers by design
                used_by = internal.used_by
                internal = rt.http_services[name] = ServiceInfo(name, API_CONFIG)
                internal.used_by = used_by
    if conf.tcp is not None:
        _build_tcp(
            rt, conf.tcp, entry_points, defaults=tcp_defaults, rules=rules, tls_errors=tcp_tls
        )
    if conf.udp is not None:
        _build_udp(rt, conf.udp, entry_points, udp_defaults)
    return rt


def _with_opened(
    conf: Configuration, entry_points: Mapping[str, str], defaults: RuntimeDefaults
) -> Mapping[str, str]:
    """``entry_points`` and those opened at run time (``runtimeEntryPoints``): each name
    of the form ``":<port>"`` an HTTP or TCP router names, ``":<port>/udp"`` a UDP
    router names (:func:`edge.config.static.runtime_port`), that no static entry point
    has, in name order. The data plane opens what is here and closes what is gone."""
    found: dict[str, str] = {}
    for section, udp in ((conf.http, False), (conf.tcp, False), (conf.udp, True)):
        if section is None:
            continue
        for router in section.routers.values():
            for name in router.entry_points:
                if name in entry_points or name in found:
                    continue
                parsed = runtime_port(name)
                if parsed is not None and (parsed[1] == "udp") == udp:
                    found[name] = EntryPointKind(parsed[1], None, defaults)
    if not found:
        return entry_points
    return {**entry_points, **dict(sorted(found.items()))}


def _defaults(entry_points: Mapping[str, str]) -> RuntimeDefaults:
    for kind in entry_points.values():
        defaults = getattr(kind, "defaults", None)
        if defaults is not None:
            return defaults
    return RuntimeDefaults()


def _default_transports(rt: RuntimeConfig, defaults: RuntimeDefaults) -> None:
    """``default@internal``: the static transports (Traefik's defaults when none is given)."""
    rt.servers_transports[DEFAULT_TRANSPORT] = defaults.servers_transport
    rt.tcp_servers_transports[DEFAULT_TRANSPORT] = defaults.tcp_servers_transport


def _with_api(conf: Configuration, defaults: RuntimeDefaults) -> Configuration:
    """``conf`` holding the service ``api@internal`` when the static ``api`` is set, and
    ``prometheus@internal`` with ``metrics.prometheus.manualRouting``."""
    have = conf.http.services if conf.http is not None else {}
    added = {
        name: API_CONFIG
        for name, wanted in ((API_SERVICE, defaults.api), (PROMETHEUS_SERVICE, defaults.prometheus))
        if wanted and name not in have
    }
    if not added:
        return conf
    http = conf.http or HTTPConfiguration()
    services = {**http.services, **added}
    return msgspec.structs.replace(conf, http=msgspec.structs.replace(http, services=services))
