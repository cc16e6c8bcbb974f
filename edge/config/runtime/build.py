"""Validation of a merged configuration into a :class:`RuntimeConfig`: one walk per
protocol (HTTP, TCP, UDP), after a shortcut for rounds where only servers changed.
See :mod:`edge.config.runtime` for the invariants of the result."""

from __future__ import annotations

from collections.abc import Mapping

from edge.config.dynamic import Configuration, ServersTransport, TCPServersTransport
from edge.config.runtime.checks import _RuleCache
from edge.config.runtime.endpoints import _endpoints_only
from edge.config.runtime.http import _build_http
from edge.config.runtime.model import DEFAULT_TRANSPORT, RuntimeConfig, _Basis
from edge.config.runtime.tcp import _build_tcp
from edge.config.runtime.tls import _TransportTLS
from edge.config.runtime.udp import _build_udp
from edge.config.static import INTERNAL_ENTRY_POINT


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
    ``ruleSyntax`` is empty.
    """
    if previous is not None:
        shortcut = _endpoints_only(conf, entry_points, previous, default_rule_syntax)
        if shortcut is not None:
            return shortcut
    rt = RuntimeConfig(conf, entry_points)
    http_tls = _TransportTLS()
    tcp_tls = _TransportTLS()
    rt._basis = _Basis(entry_points, default_rule_syntax, http_tls, tcp_tls)
    rules = _RuleCache(previous, default_rule_syntax)
    tcp_defaults = sorted(
        n for n, p in entry_points.items() if p == "tcp" and n != INTERNAL_ENTRY_POINT
    )
    rt.servers_transports[DEFAULT_TRANSPORT] = ServersTransport()
    rt.tcp_servers_transports[DEFAULT_TRANSPORT] = TCPServersTransport()
    if conf.http is not None:
        _build_http(
            rt, conf.http, entry_points, defaults=tcp_defaults, rules=rules, tls_errors=http_tls
        )
    if conf.tcp is not None:
        _build_tcp(
            rt, conf.tcp, entry_points, defaults=tcp_defaults, rules=rules, tls_errors=tcp_tls
        )
    if conf.udp is not None:
        _build_udp(rt, conf.udp, entry_points)
    return rt
