"""The validated snapshot: :class:`RuntimeConfig`, one info per element with its status
and errors, and what a snapshot lends the next round (:class:`_Basis`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar

import msgspec

from edge.config.diff import Backends, changed_backends, changed_servers
from edge.config.durations import enc_hook
from edge.config.dynamic import (
    UNSUPPORTED,
    Configuration,
    Middleware,
    Router,
    ServersTransport,
    Service,
    TCPMiddleware,
    TCPRouter,
    TCPServersTransport,
    TCPService,
    TLSConfiguration,
    UDPRouter,
    UDPService,
)
from edge.config.merge import split_name
from edge.rules import Rule

if TYPE_CHECKING:
    from edge.config.runtime.tls import _TransportTLS

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

    def copy(self) -> Self:
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

    def validated_from(self, previous: RuntimeConfig) -> bool:
        """Whether this snapshot was validated from ``previous`` by an endpoints-only
        round: then every element kept its status and errors, and
        :meth:`changed_backends` is what that round found."""
        since = self._basis.since if self._basis is not None else None
        return since is not None and since[0] is previous.configuration

    def changed_backends(self, previous: RuntimeConfig) -> Backends | None:
        """:func:`edge.config.diff.changed_backends` from ``previous``'s configuration to
        this one's, without comparing them again when this snapshot was validated from
        ``previous`` (an endpoints-only round: :func:`build_runtime` compared them)."""
        if self.validated_from(previous):
            assert self._basis is not None and self._basis.since is not None
            return Backends(*(list(names) for names in self._basis.since[1]))
        return changed_backends(previous.configuration, self.configuration)

    def changed_servers(self, previous: RuntimeConfig) -> list[str] | None:
        """:func:`edge.config.diff.changed_servers` (HTTP servers alone changed) from
        ``previous``'s configuration to this one's, as :meth:`changed_backends`."""
        if self.validated_from(previous):
            found = self.changed_backends(previous)
            return None if found is None or found.tcp or found.udp else found.http
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
        self.since: tuple[Configuration, Backends] | None = None


class _Checked:
    """What :func:`check_tls` made of a snapshot: for each router it gave errors, the info
    as validation left it and the one with the errors; the messages; the certificate
    snapshot it was given (None unless the snapshot was checked exactly once)."""

    __slots__ = ("certs", "infos", "messages")

    def __init__(self) -> None:
        self.certs: object | None = None
        self.infos: dict[tuple[str, str], tuple[RouterInfo[Any], RouterInfo[Any]]] = {}
        self.messages: list[str] = []  # (label, name) above: "router", "tcp router"


def _kinds(entry_points: Mapping[str, str]) -> dict[str, tuple[object, ...]]:
    """Entry points as validation reads them: protocol, HTTP model, the static
    defaults and asDefault (EntryPointKind compares as its protocol only)."""
    return {
        n: (
            str(k),
            getattr(k, "http_tls", None),
            getattr(k, "defaults", None),
            getattr(k, "http_middlewares", ()),
            getattr(k, "as_default", False),
        )
        for n, k in entry_points.items()
    }
