"""Validation of a merged configuration into a runtime snapshot (Traefik's pkg/config/runtime).

Owns the cross-reference checks no single file can make: rules parse, routers point at
existing, working services, middlewares and entry points of the right protocol,
weighted services have no missing members and no cycles, serversTransports exist
and their TLS files can be used (:func:`client_tls_context`), TCP middlewares can
be built. Entry point models are applied first: an HTTP router on an entry point
with ``http.tls`` gets that ``tls`` when it has none (Traefik's ``applyModel``: a
router on several entry points becomes one router per model entry point, named
``<entrypoint>-<router>``).

Invariants of :func:`build_runtime`'s :class:`RuntimeConfig`:

* every element of the configuration appears exactly once, with a status:
  ``"enabled"``; ``"warning"`` (works, but something deserves a look, e.g. no servers:
  requests get 503); or ``"disabled"`` (must not be served), and ``errors`` saying why;
* an enabled or warning router has a compiled ``rule``, a resolved ``priority`` and a
  non-empty list of existing ``entry_points``, its service and middlewares exist and its
  service is not disabled; one broken element never disables an unrelated one;
* ``servers_transports`` always holds ``default@internal``; the snapshot is never
  mutated after it is built, except by :func:`check_tls` (certificates and TLS
  options, checked against a snapshot this layer cannot build), which runs once,
  before any router is built from it.

Messages in ``errors`` are bare (``service 'x@file' does not exist``);
:meth:`RuntimeConfig.errors` prefixes each with the element
(``router whoami@file: service 'x@file' does not exist``).
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar

import msgspec

from edge.config.diff import changed_servers
from edge.config.durations import enc_hook
from edge.config.dynamic import (
    UNSUPPORTED,
    ClientCertificate,
    Configuration,
    Middleware,
    Router,
    RouterTLS,
    ServersTransport,
    Service,
    TCPMiddleware,
    TCPRouter,
    TCPServersTransport,
    TCPService,
    TLSConfiguration,
    TLSOptions,
    UDPRouter,
    UDPService,
    Weighted,
)
from edge.config.merge import DEFAULT_TLS, qualify, split_name
from edge.config.pem import PEM_MARK, describe, pem_file, read_pem
from edge.config.static import INTERNAL_ENTRY_POINT
from edge.errors import ConfigError, RuleError
from edge.rules import SYNTAXES, Rule, RuleCompiler, default_priority

__all__ = [
    "DEFAULT_TRANSPORT",
    "DISABLED",
    "ENABLED",
    "WARNING",
    "ElementInfo",
    "RouterInfo",
    "RuntimeConfig",
    "ServiceInfo",
    "build_runtime",
    "check_tls",
    "client_tls_context",
]

ENABLED: Literal["enabled"] = "enabled"
WARNING: Literal["warning"] = "warning"
DISABLED: Literal["disabled"] = "disabled"
Status = Literal["enabled", "warning", "disabled"]

DEFAULT_TRANSPORT = "default@internal"
"""The serversTransport used when a load balancer names none; always exists."""

C = TypeVar("C")


class ElementInfo(Generic[C]):
    """One element of the configuration with its validation outcome."""

    __slots__ = ("config", "errors", "name", "status", "used_by")

    def __init__(self, name: str, config: C) -> None:
        self.name = name
        self.config = config
        self.status: Status = ENABLED
        self.errors: list[str] = []
        self.used_by: list[str] = []  # routers (or weighted services) referring to it
        for path in getattr(config, "unsupported", ()):  # Traefik options edge lacks
            self.add_error(f"{path}: {UNSUPPORTED}")
        for problem in getattr(config, "problems", ()):  # a provider left it out
            self.add_error(problem)

    @property
    def provider(self) -> str:
        return split_name(self.name)[1]

    def add_error(self, message: str, *, critical: bool = True) -> None:
        """Record ``message``; a critical error disables, any other makes a warning."""
        self.errors.append(message)
        if critical:
            self.status = DISABLED
        elif self.status == ENABLED:
            self.status = WARNING

    def copy(self) -> ElementInfo[C]:
        """The same element and outcome in a new object (its lists copied, its config shared)."""
        new = object.__new__(type(self))
        for cls in type(self).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                value = getattr(self, slot)
                setattr(new, slot, list(value) if isinstance(value, list) else value)
        return new

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, status={self.status!r}, errors={self.errors!r})"
        )


class ServiceInfo(ElementInfo[C]):
    """A service (HTTP, TCP or UDP) or an HTTP middleware."""

    __slots__ = ()


class RouterInfo(ElementInfo[C]):
    """A router with what validation resolved: compiled rule, its syntax, priority, entry points."""

    __slots__ = ("entry_points", "priority", "rule", "rule_syntax")

    def __init__(self, name: str, config: C) -> None:
        super().__init__(name, config)
        self.rule: Rule | None = None
        self.rule_syntax = ""  # "v3" or "v2" once resolved (UDP routers have no rule)
        self.priority: int = 0
        self.entry_points: list[str] = []


class RuntimeConfig:
    """The validated snapshot every listener receives. Treat as read-only."""

    def __init__(
        self,
        configuration: Configuration,
        entry_points: Mapping[str, str],
    ) -> None:
        self.configuration = configuration
        self.entry_points: dict[str, str] = {name: str(kind) for name, kind in entry_points.items()}
        self.http_routers: dict[str, RouterInfo[Router]] = {}
        self.http_services: dict[str, ServiceInfo[Service]] = {}
        self.http_middlewares: dict[str, ServiceInfo[Middleware]] = {}
        self.tcp_routers: dict[str, RouterInfo[TCPRouter]] = {}
        self.tcp_services: dict[str, ServiceInfo[TCPService]] = {}
        self.tcp_middlewares: dict[str, ServiceInfo[TCPMiddleware]] = {}
        self.udp_routers: dict[str, RouterInfo[UDPRouter]] = {}
        self.udp_services: dict[str, ServiceInfo[UDPService]] = {}
        self.servers_transports: dict[str, ServersTransport] = {}
        self.tcp_servers_transports: dict[str, TCPServersTransport] = {}
        self.tls: TLSConfiguration = configuration.tls or TLSConfiguration()
        self._basis: _Basis | None = None  # what the next endpoints-only round reuses

    def _tables(self) -> Iterator[tuple[str, str, str, Mapping[str, ElementInfo[Any]]]]:
        """(label for messages, section, kind) and the table, in a stable order."""
        yield "router", "http", "routers", self.http_routers
        yield "service", "http", "services", self.http_services
        yield "middleware", "http", "middlewares", self.http_middlewares
        yield "tcp router", "tcp", "routers", self.tcp_routers
        yield "tcp service", "tcp", "services", self.tcp_services
        yield "tcp middleware", "tcp", "middlewares", self.tcp_middlewares
        yield "udp router", "udp", "routers", self.udp_routers
        yield "udp service", "udp", "services", self.udp_services

    def elements(self) -> Iterator[tuple[str, ElementInfo[Any]]]:
        """Every element as ``(label, info)``; label is ``"router"``, ``"tcp service"``, ..."""
        for label, _, _, table in self._tables():
            for info in table.values():
                yield label, info

    def errors(self) -> list[str]:
        """Every error and warning, each prefixed with the element it is about."""
        return [
            f"{label} {info.name}: {message}"
            for label, info in self.elements()
            for message in info.errors
        ]

    def changed_servers(self, previous: RuntimeConfig) -> list[str] | None:
        """:func:`edge.config.diff.changed_servers` from ``previous``'s configuration to
        this one's, without comparing them again when this snapshot was validated from
        ``previous`` (an endpoints-only round: :func:`build_runtime` compared them)."""
        since = self._basis.since if self._basis is not None else None
        if since is not None and since[0] is previous.configuration:
            return list(since[1])
        return changed_servers(previous.configuration, self.configuration)

    def to_builtins(self) -> dict[str, Any]:
        """A JSON-able dump (camelCase keys) with status and errors per element."""
        out: dict[str, Any] = {"http": {}, "tcp": {}, "udp": {}}
        for _, section, kind, table in self._tables():
            out[section][kind] = {name: _dump(info) for name, info in table.items()}
        out["http"]["serversTransports"] = _builtins(self.servers_transports)
        out["tcp"]["serversTransports"] = _builtins(self.tcp_servers_transports)
        out["tls"] = _builtins(self.tls)
        out["entryPoints"] = dict(self.entry_points)
        return out


def _builtins(value: object) -> Any:
    return msgspec.to_builtins(value, enc_hook=enc_hook)


def _dump(info: ElementInfo[Any]) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": info.name,
        "provider": info.provider,
        "status": info.status,
        "errors": list(info.errors),
    }
    if isinstance(info, RouterInfo):
        d["priority"] = info.priority
        if info.rule_syntax:
            d["ruleSyntax"] = info.rule_syntax
        d["entryPoints"] = list(info.entry_points)
    else:
        d["usedBy"] = list(info.used_by)
    d["config"] = _builtins(info.config)
    return d


# --- building -------------------------------------------------------------------------


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
    udp_defaults = sorted(n for n, p in entry_points.items() if p == "udp")

    http = conf.http
    rt.servers_transports[DEFAULT_TRANSPORT] = ServersTransport()
    rt.tcp_servers_transports[DEFAULT_TRANSPORT] = TCPServersTransport()
    if http is not None:
        rt.servers_transports.update(http.servers_transports)
        rt.http_services = {n: ServiceInfo(n, s) for n, s in http.services.items()}
        rt.http_middlewares = {n: ServiceInfo(n, m) for n, m in http.middlewares.items()}
        for info in rt.http_services.values():
            _check_http_service(info, rt.servers_transports, http_tls)
        _check_weighted(rt.http_services)
        tls_options = rt.tls.options
        for name, router in _apply_models(http.routers, entry_points, tcp_defaults).items():
            r = RouterInfo(name, router)
            rt.http_routers[name] = r
            if router.problems:  # a stand-in for what a provider could not make: disabled
                _check_entry_points(r, router.entry_points, "tcp", tcp_defaults, entry_points)
                continue
            _check_rule(r, router.rule, "http", rules)
            _check_entry_points(r, router.entry_points, "tcp", tcp_defaults, entry_points)
            _check_service(r, router.service, rt.http_services)
            for mw in router.middlewares:
                m = rt.http_middlewares.get(mw)
                if m is None:
                    r.add_error(f"middleware {mw!r} does not exist")
                    continue
                if name not in m.used_by:
                    m.used_by.append(name)
                if m.status == DISABLED:
                    r.add_error(f"middleware {mw!r} is disabled: {'; '.join(m.errors)}")
            if router.tls is not None:
                options = router.tls.options or DEFAULT_TLS
                if options not in tls_options:
                    r.add_error(f"TLS options {options!r} do not exist")
                else:
                    _check_options(r, options, tls_options[options])

    if conf.tcp is not None:
        tcp = conf.tcp
        rt.tcp_servers_transports.update(tcp.servers_transports)
        rt.tcp_services = {n: ServiceInfo(n, s) for n, s in tcp.services.items()}
        for info in rt.tcp_services.values():
            lb = info.config.load_balancer
            if lb is not None:
                _check_transport(info, lb.servers_transport, rt.tcp_servers_transports)
                if not lb.servers:
                    info.add_error("no servers: connections are closed", critical=False)
                transport = rt.tcp_servers_transports.get(lb.servers_transport or DEFAULT_TRANSPORT)
                if transport is not None:
                    _check_tcp_transport(info, lb.servers_transport, transport, tcp_tls)
        _check_weighted(rt.tcp_services)
        rt.tcp_middlewares = {n: ServiceInfo(n, m) for n, m in tcp.middlewares.items()}
        for info in rt.tcp_middlewares.values():
            _check_tcp_middleware(info)
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
            _check_entry_points(r, router.entry_points, "tcp", tcp_defaults, entry_points)
            _check_service(r, router.service, rt.tcp_services)
            for mw in router.middlewares:
                m = rt.tcp_middlewares.get(mw)
                if m is None:
                    r.add_error(f"middleware {mw!r} does not exist")
                    continue
                if name not in m.used_by:
                    m.used_by.append(name)
                if m.status == DISABLED:
                    r.add_error(f"middleware {mw!r} is disabled: {'; '.join(m.errors)}")
            if router.tls is not None and not router.tls.passthrough:
                options = router.tls.options or DEFAULT_TLS
                if options not in rt.tls.options:
                    r.add_error(f"TLS options {options!r} do not exist")
                else:
                    _check_options(r, options, rt.tls.options[options])

    if conf.udp is not None:
        udp = conf.udp
        rt.udp_services = {n: ServiceInfo(n, s) for n, s in udp.services.items()}
        udp_transports = {DEFAULT_TRANSPORT: None, **udp.servers_transports}
        for info in rt.udp_services.values():
            lb = info.config.load_balancer
            if lb is not None:
                _check_transport(info, lb.servers_transport, udp_transports)
                if not lb.servers:
                    info.add_error("no servers: datagrams are dropped", critical=False)
        _check_weighted(rt.udp_services)
        for name, router in udp.routers.items():
            r = RouterInfo(name, router)
            rt.udp_routers[name] = r
            _check_entry_points(r, router.entry_points, "udp", udp_defaults, entry_points)
            _check_service(r, router.service, rt.udp_services)
        # A UDP router has no rule: one serves an entry point, the first by name.
        serving: dict[str, str] = {}
        for name in sorted(rt.udp_routers):
            r = rt.udp_routers[name]
            if r.status == DISABLED:
                continue
            for ep in r.entry_points:
                first = serving.setdefault(ep, name)
                if first != name:
                    r.add_error(
                        f"entryPoint {ep!r} is served by udp router {first!r} "
                        "(one UDP router per entry point: the first by name)",
                        critical=False,
                    )

    return rt


# --- endpoints-only rounds -------------------------------------------------------------


class _Basis:
    """What a snapshot lends the next round's :func:`_endpoints_only`: the inputs its
    verdicts rest on besides the configuration (entry points with their models, the
    default rule syntax, each serversTransport's TLS files' verdict) and what
    :func:`check_tls` made of it (``tls``); ``inherited``, in a snapshot made from the
    previous one, is what check_tls made of that one."""

    __slots__ = (
        "checks",
        "entry_points",
        "http_tls",
        "inherited",
        "rule_syntax",
        "since",
        "tcp_tls",
        "tls",
    )

    def __init__(
        self,
        entry_points: Mapping[str, str],
        rule_syntax: str,
        http_tls: _TransportTLS,
        tcp_tls: _TransportTLS,
    ) -> None:
        self.entry_points = _kinds(entry_points)
        self.rule_syntax = rule_syntax
        self.http_tls = http_tls
        self.tcp_tls = tcp_tls
        self.checks = 0  # check_tls calls
        self.tls = _Checked()
        self.inherited: _Checked | None = None
        # An endpoints-only round's: the previous configuration and the services changed
        # since (it holds that configuration, not the snapshot: no chain of snapshots).
        self.since: tuple[Configuration, list[str]] | None = None


class _Checked:
    """What :func:`check_tls` made of a snapshot: for each router it gave errors, the info
    as validation left it and the one with the errors; the messages; the certificate
    snapshot it was given (None unless the snapshot was checked exactly once)."""

    __slots__ = ("certs", "infos", "messages")

    def __init__(self) -> None:
        self.certs: object | None = None
        self.infos: dict[tuple[str, str], tuple[RouterInfo[Any], RouterInfo[Any]]] = {}
        self.messages: list[str] = []  # (label, name) above: "router", "tcp router"


def _kinds(entry_points: Mapping[str, str]) -> dict[str, tuple[str, object]]:
    """Entry points as validation reads them: protocol and HTTP model (EntryPointKind
    compares as its protocol only)."""
    return {n: (str(k), getattr(k, "http_tls", None)) for n, k in entry_points.items()}


def _endpoints_only(
    conf: Configuration,
    entry_points: Mapping[str, str],
    previous: RuntimeConfig,
    default_rule_syntax: str,
) -> RuntimeConfig | None:
    """``conf`` validated from ``previous`` when only HTTP load balancers' servers changed;
    None when a full validation must run.

    A service's servers decide its own verdict only (no servers: a warning; an
    ``https`` server: its serversTransport's TLS files are checked), so the changed
    services are validated again; when each gets the status and errors it had, no
    router, weighted service or middleware can judge otherwise and their infos are
    ``previous``'s (shared: nothing changes an info once built, :func:`check_tls`
    replaces the ones it gives errors, and those are taken as validation left them).
    The TLS files of every serversTransport ``previous`` checked are checked again (a
    file may have changed): any other verdict, a new entry point, default rule syntax or
    an element in another order, and the answer is None.
    """
    basis = previous._basis
    if basis is None or basis.rule_syntax != default_rule_syntax:
        return None
    changed = changed_servers(previous.configuration, conf)
    if changed is None or basis.entry_points != _kinds(entry_points):
        return None
    if not _same_order(previous.configuration, conf):
        return None  # the tables would list elements in another order
    rt = RuntimeConfig(conf, entry_points)
    http_tls = _TransportTLS()
    tcp_tls = _TransportTLS()
    rt.servers_transports[DEFAULT_TRANSPORT] = ServersTransport()
    rt.tcp_servers_transports[DEFAULT_TRANSPORT] = TCPServersTransport()
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
    services = dict(previous.http_services)
    if changed:
        assert conf.http is not None  # changed_servers names HTTP services only
        for name in changed:
            before = services[name]
            info = ServiceInfo(name, conf.http.services[name])
            _check_http_service(info, rt.servers_transports, http_tls)
            if info.status != before.status or info.errors != before.errors:
                return None
            info.used_by = list(before.used_by)
            services[name] = info
    rt.http_services = services
    rt.http_middlewares = dict(previous.http_middlewares)
    rt.tcp_services = dict(previous.tcp_services)
    rt.tcp_middlewares = dict(previous.tcp_middlewares)
    rt.udp_routers = dict(previous.udp_routers)
    rt.udp_services = dict(previous.udp_services)
    rt.http_routers = dict(previous.http_routers)
    rt.tcp_routers = dict(previous.tcp_routers)
    tables = {"router": rt.http_routers, "tcp router": rt.tcp_routers}
    for (label, name), (info, _) in basis.tls.infos.items():
        tables[label][name] = info
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


class CertificateCheck(Protocol):
    """What :func:`check_tls` asks of a configuration's certificate snapshot
    (:class:`edge.tls.certs.TLSCertificates`, which sits above this layer)."""

    def options_error(self, name: str) -> Exception | None: ...

    def errors_for(self, domain: str) -> tuple[Exception, ...]: ...


def check_tls(rt: RuntimeConfig, certs: CertificateCheck) -> list[str]:
    """Disable the routers that would terminate TLS with broken options or certificates.

    The one check made after :func:`build_runtime`, by whoever builds the
    certificate snapshot (the data plane, ``edge check``), before any router is
    built from ``rt``. A router is disabled when its ``tls.options`` cannot be
    applied, or when a name it serves (its Host/HostSNI names, ``tls.domains``)
    has no certificate because the certificate meant for it is broken; the reason
    names the file. TLS passthrough terminates nothing and is not concerned.
    Returns the messages added, prefixed as :meth:`RuntimeConfig.errors` does.

    A router given errors gets a new info in ``rt`` (:meth:`ElementInfo.copy`): the one
    validation made stays as it was, for the next round to reuse (:func:`_endpoints_only`).
    When that round's snapshot is checked with the very ``certs`` its previous one was,
    the routers and their tls section being the same, so are the verdicts: the previous
    round's infos and messages are taken as they are, without walking the routers.
    """
    basis = rt._basis
    if basis is not None:
        basis.checks += 1
        basis.tls.certs = certs if basis.checks == 1 else None  # checked twice: not reused
        inherited, basis.inherited = basis.inherited, None
        if inherited is not None and basis.checks == 1 and inherited.certs is certs:
            tables = {"router": rt.http_routers, "tcp router": rt.tcp_routers}
            for (label, key), (_, checked) in inherited.infos.items():
                tables[label][key] = checked
            basis.tls = _Checked()
            basis.tls.certs, basis.tls.messages = certs, inherited.messages
            basis.tls.infos = dict(inherited.infos)
            return list(inherited.messages)
    added: list[str] = []
    tables: list[tuple[str, dict[str, RouterInfo[Any]]]] = [
        ("router", rt.http_routers),
        ("tcp router", rt.tcp_routers),
    ]
    for label, table in tables:
        for key, info in list(table.items()):
            tls = info.config.tls
            if tls is None or info.status == DISABLED or getattr(tls, "passthrough", False):
                continue
            reasons: list[str] = []
            options = tls.options or DEFAULT_TLS
            if options in rt.tls.options:  # a missing one was reported by build_runtime
                error = certs.options_error(options)
                if error is not None:
                    reasons.append(str(error))
            names = list(info.rule.hosts or ()) if info.rule is not None else []
            for domain in tls.domains:
                names += [n for n in (domain.main, *domain.sans) if n]
            for name in dict.fromkeys(n.lower() for n in names):
                reasons += [
                    f"no certificate for {name}: {error}" for error in certs.errors_for(name)
                ]
            if not reasons:
                continue
            checked = info.copy()
            if basis is not None and (label, key) not in basis.tls.infos:
                basis.tls.infos[(label, key)] = (info, checked)
            info = table[key] = checked
            for reason in reasons:
                info.add_error(reason)
                added.append(f"{label} {info.name}: {reason}")
    if basis is not None and basis.checks == 1:
        basis.tls.messages = added
    return list(added)


# --- entry point models ------------------------------------------------------------


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


# --- TLS to upstream servers ----------------------------------------------------------


def client_tls_context(
    *,
    insecure_skip_verify: bool = False,
    root_cas: Sequence[str] = (),
    certificates: Sequence[ClientCertificate] = (),
    system_roots: bool = True,
) -> ssl.SSLContext:
    """The client side of TLS to upstream servers, as a serversTransport describes it.

    As Go's crypto/tls does for Traefik: the server's certificate is verified
    against ``rootCAs`` (paths or inline PEM) when given, else the system's CAs
    (``system_roots``; validation passes False: loading them costs tens of ms and
    cannot fail), and its name checked (the caller passes serverName or the host
    as ``server_hostname``); ``insecureSkipVerify`` verifies nothing.
    ``certificates`` are offered to a server that asks for a client certificate;
    OpenSSL keeps one per key type, so the first of each type listed is the one
    offered (Go picks the first that suits the server). Raises ConfigError
    naming the file (or "inline PEM") that cannot be used; a key is never read
    with a password (an encrypted one is an error, not a prompt).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    for i, value in enumerate(root_cas):
        what = f"rootCAs[{i}] {describe(value)}"
        try:
            if PEM_MARK in value:
                ctx.load_verify_locations(cadata=value)
            else:
                ctx.load_verify_locations(cafile=value)
        except FileNotFoundError:
            raise ConfigError(f"{what}: no such file") from None
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise ConfigError(f"{what}: no CA certificate could be read ({_reason(exc)})") from None
    if not root_cas and system_roots and not insecure_skip_verify:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    for i, cert in reversed(list(enumerate(certificates))):  # the first of each key type wins
        what = f"certificates[{i}]"
        chain_pem = read_pem(f"{what}: certFile", cert.cert_file)
        key_pem = read_pem(f"{what}: keyFile", cert.key_file)
        try:
            with pem_file(chain_pem) as chain, pem_file(key_pem) as key:
                ctx.load_cert_chain(chain, key, password=_no_password)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{what}: certFile {describe(cert.cert_file)} / keyFile {describe(cert.key_file)}: "
                f"cannot be used ({_reason(exc)})"
            ) from None
    if insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _no_password() -> bytes:
    return b""  # an encrypted key fails to load instead of prompting on the terminal


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)


class _TransportTLS:
    """Each transport's TLS files checked once per validation: name -> error or None."""

    def __init__(self) -> None:
        self.verdicts: dict[str, str | None] = {}

    def check(self, name: str, config: ServersTransport | TCPServersTransport) -> str | None:
        if name not in self.verdicts:
            tls = config.tls if isinstance(config, TCPServersTransport) else config
            error = None
            if tls is not None and (tls.root_cas or tls.certificates):
                try:
                    client_tls_context(
                        root_cas=tls.root_cas, certificates=tls.certificates, system_roots=False
                    )
                except ConfigError as exc:
                    error = str(exc)
            self.verdicts[name] = error
        return self.verdicts[name]


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


class _RuleCache:
    """Compiled rules of the previous snapshot, by (kind, syntax, text), and the default syntax."""

    def __init__(self, previous: RuntimeConfig | None, default_syntax: str) -> None:
        if default_syntax not in SYNTAXES:
            raise ValueError(f"unknown default rule syntax {default_syntax!r}")
        self.default_syntax = default_syntax
        self._rules: dict[tuple[str, str, str], Rule] = {}
        self._compiler = RuleCompiler()
        if previous is not None:
            for table in (previous.http_routers, previous.tcp_routers):
                for info in table.values():
                    rule = info.rule
                    if rule is not None:
                        self._rules[(rule.kind, rule.syntax, rule.text)] = rule

    def compile(self, text: str, kind: str, syntax: str) -> Rule:
        rule = self._rules.get((kind, syntax, text))
        if rule is None:
            # Rules written alike (a provider's thousands) share one parse.
            rule = self._rules[(kind, syntax, text)] = self._compiler.compile(
                text, kind=kind, syntax=syntax
            )
        return rule


def _check_rule(r: RouterInfo[Any], text: str, kind: str, rules: _RuleCache) -> None:
    r.priority = r.config.priority or default_priority(text)
    syntax = r.config.rule_syntax or rules.default_syntax
    if syntax not in SYNTAXES:
        r.add_error(f"ruleSyntax {syntax!r}: expected one of {', '.join(SYNTAXES)}")
        return
    r.rule_syntax = syntax
    try:
        r.rule = rules.compile(text, kind, syntax)
    except RuleError as exc:
        r.add_error(f"{exc} (rule syntax {syntax})" if syntax != "v3" else str(exc))
        return
    if kind == "tcp" and not r.config.priority and r.rule.catch_all:
        # Traefik's GetRulePriority: a HostSNI(`*`) router comes after every router
        # whose priority is its rule's length (ALPN(`h2`) is 10 long, HostSNI(`*`) 12).
        r.priority = -1


def _check_entry_points(
    r: RouterInfo[Any],
    configured: list[str],
    protocol: str,
    defaults: list[str],
    entry_points: Mapping[str, str],
) -> None:
    if not configured:
        r.entry_points = list(defaults)
        if not defaults:
            r.add_error(f"no {protocol.upper()} entry point to attach to")
        return
    for ep in configured:
        actual = entry_points.get(ep)
        if actual is None:
            r.add_error(f"entryPoint {ep!r} does not exist")
        elif actual != protocol:
            r.add_error(
                f"entryPoint {ep!r} is a {actual.upper()} entry point, not {protocol.upper()}"
            )
        elif ep not in r.entry_points:
            r.entry_points.append(ep)


def _check_service(
    r: RouterInfo[Any], service: str, services: Mapping[str, ServiceInfo[Any]]
) -> None:
    info = services.get(service)
    if info is None:
        r.add_error(f"service {service!r} does not exist")
        return
    if r.name not in info.used_by:
        info.used_by.append(r.name)
    if info.status == DISABLED:
        r.add_error(f"service {service!r} is disabled: {'; '.join(info.errors)}")


def _check_transport(info: ServiceInfo[Any], name: str, transports: Mapping[str, object]) -> None:
    transport = name or DEFAULT_TRANSPORT
    if transport not in transports:
        info.add_error(f"serversTransport {transport!r} does not exist")
        return
    unsupported = getattr(transports[transport], "unsupported", ())
    if unsupported:
        info.add_error(f"serversTransport {transport!r}: {', '.join(unsupported)}: {UNSUPPORTED}")


def _check_options(r: RouterInfo[Any], name: str, options: TLSOptions) -> None:
    if options.unsupported:
        r.add_error(f"TLS options {name!r}: {', '.join(options.unsupported)}: {UNSUPPORTED}")


def _check_weighted(services: Mapping[str, ServiceInfo[Any]]) -> None:
    """Disable weighted services with a missing, disabled or cyclic member.

    Depth-first over the weighted graph, so a member's status is final before the
    services referring to it are judged. Every service on a cycle gets the cycle's message.
    """
    visiting: list[str] = []
    done: set[str] = set()
    cycle_peers: dict[str, set[str]] = {}

    def visit(name: str) -> None:
        info = services[name]
        weighted: Weighted | None = info.config.weighted
        visiting.append(name)
        for member in [] if weighted is None else [m.name for m in weighted.services]:
            child = services.get(member)
            if child is None:
                info.add_error(f"service {member!r} does not exist")
                continue
            if name not in child.used_by:
                child.used_by.append(name)
            if member in visiting:
                cycle = [*visiting[visiting.index(member) :], member]
                message = "weighted services form a cycle: " + " -> ".join(cycle)
                for peer in cycle[:-1]:
                    cycle_peers.setdefault(peer, set()).update(cycle)
                    if message not in services[peer].errors:
                        services[peer].add_error(message)
                continue
            if member not in done:
                visit(member)
            if child.status == DISABLED and member not in cycle_peers.get(name, ()):
                info.add_error(f"service {member!r} is disabled")
        visiting.pop()
        done.add(name)
        if weighted is not None and not weighted.services:
            info.add_error("no services: requests get 503", critical=False)

    for name in services:
        if name not in done:
            visit(name)
    visit = None  # type: ignore[assignment]  # it referred to itself: a cycle holding the snapshot
