"""UDP routers: immutable snapshots, one per UDP entry point, built once per configuration.

A UDP router has no rule: every new session on its entry point goes to its service
(when several routers name one entry point, the first by name serves it; the runtime
validation warns about the others). Services become balancers (smooth weighted round
robin, shared with HTTP) over :class:`UDPServer` objects that carry what opening a
session needs: the socket address, the session timeout and whether the first datagram
gets a PROXY protocol v2 header. So the data plane only reads.

Mutable state: the balancers' round-robin scores, and a server's socket address,
filled in once when its host name resolves (numeric addresses are set when built,
names by the entry point, off the hot path; until then the server is not picked); on
an endpoints-only change, a load balancer's servers and its routers' address table
(:func:`udp_servers_for`, :meth:`UDPLoadBalancer.update`, :meth:`UDPRouter.refresh`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Container, Iterable, Iterator, Mapping

from edge.balancer import SmoothWeightedRoundRobin
from edge.config.dynamic import UDPLoadBalancer as UDPLoadBalancerConfig
from edge.config.dynamic import split_host_port
from edge.config.runtime import DISABLED, RuntimeConfig
from edge.router.services import build_service

log = logging.getLogger("edge.router")

__all__ = [
    "UDPLoadBalancer",
    "UDPRouter",
    "UDPServer",
    "UDPWeighted",
    "build_udp_routers",
    "udp_servers_for",
]


class UDPServer:
    """One server of a UDP load balancer, with its load balancer's settings."""

    __slots__ = (
        "address",
        "family",
        "host",
        "port",
        "proxy_protocol",
        "service",
        "sockaddr",
        "timeout",
    )

    def __init__(
        self,
        service: str,
        address: str,
        *,
        timeout: float | None = None,
        proxy_protocol: bool = False,
    ) -> None:
        self.service = service
        self.address = address  # as configured: what a session compares across reloads
        self.host, self.port = split_host_port(address)
        self.timeout = timeout  # None: the entry point's udp.timeout
        self.proxy_protocol = proxy_protocol
        self.family = 0
        self.sockaddr: tuple | None = None
        try:
            infos = socket.getaddrinfo(
                self.host, self.port, type=socket.SOCK_DGRAM, flags=socket.AI_NUMERICHOST
            )
        except socket.gaierror:
            return  # a host name: resolved by the entry point
        self.resolved(infos[0][0], infos[0][4])

    def resolved(self, family: int, sockaddr: tuple) -> None:
        self.family = family
        self.sockaddr = sockaddr

    def __repr__(self) -> str:
        return f"UDPServer({self.service!r}, {self.address!r})"


class UDPLoadBalancer:
    """A loadBalancer service: smooth weighted round robin over its servers."""

    __slots__ = ("_wrr", "name", "servers")

    def __init__(self, name: str, servers: Iterable[tuple[UDPServer, int]]) -> None:
        self.name = name
        members = list(servers)
        self.servers = [server for server, _ in members]
        self._wrr = SmoothWeightedRoundRobin(members)

    def update(self, servers: Iterable[tuple[UDPServer, int]]) -> None:
        """New servers, in place (endpoints only); the rotation goes on for the servers
        that stay. The routers holding this service are then refreshed."""
        members = list(servers)
        wrr = SmoothWeightedRoundRobin(members)
        wrr.inherit(self._wrr, lambda s: s.address)
        self.servers = [server for server, _ in members]
        self._wrr = wrr

    def pick(self, down: Container[str]) -> UDPServer | None:
        """The next resolved server whose address is not in ``down``; None if there is none."""
        for _ in range(len(self._wrr)):
            server = self._wrr.pick()
            if server is None:
                return None
            if server.sockaddr is not None and server.address not in down:
                return server
        return None

    def leaves(self) -> Iterator[UDPServer]:
        yield from self.servers


class UDPWeighted:
    """A weighted service: smooth weighted round robin over child services."""

    __slots__ = ("_wrr", "children", "name")

    def __init__(
        self, name: str, children: Iterable[tuple[UDPLoadBalancer | UDPWeighted, int]]
    ) -> None:
        self.name = name
        members = list(children)
        self.children = [child for child, _ in members]
        self._wrr = SmoothWeightedRoundRobin(members)

    def pick(self, down: Container[str]) -> UDPServer | None:
        # A child with nothing to offer does not starve the others: try each once.
        for _ in range(len(self._wrr)):
            child = self._wrr.pick()
            if child is None:
                return None
            server = child.pick(down)
            if server is not None:
                return server
        return None

    def leaves(self) -> Iterator[UDPServer]:
        for child in self.children:
            yield from child.leaves()


UDPService = UDPLoadBalancer | UDPWeighted


class UDPRouter:
    """The router serving one UDP entry point: its name, its service and its servers."""

    __slots__ = ("name", "servers", "service")

    def __init__(self, name: str, service: UDPService) -> None:
        self.name = name
        self.service = service
        # address -> server, for sessions that keep their server across a reload
        self.servers: dict[str, UDPServer] = {}
        self.refresh()

    def refresh(self) -> None:
        """Read the service's servers again (after :meth:`UDPLoadBalancer.update`)."""
        servers: dict[str, UDPServer] = {}
        for server in self.service.leaves():
            servers.setdefault(server.address, server)
        self.servers = servers

    def pick(self, down: Container[str]) -> UDPServer | None:
        """A server for a new session: one not marked down if any, else any resolved one."""
        return self.service.pick(down) or self.service.pick(())

    def unresolved(self) -> list[UDPServer]:
        return [s for s in self.service.leaves() if s.sockaddr is None]

    def __len__(self) -> int:
        return 1


def _servers(
    runtime: RuntimeConfig, name: str, lb: UDPLoadBalancerConfig
) -> list[tuple[UDPServer, int]]:
    """The servers of load balancer ``name``, with their weights."""
    udp = runtime.configuration.udp
    transport = udp.servers_transports.get(lb.servers_transport) if udp is not None else None
    proxy = transport is not None and transport.proxy_protocol is not None
    return [
        (UDPServer(name, s.address, timeout=lb.session_timeout, proxy_protocol=proxy), s.weight)
        for s in lb.servers
    ]


def udp_servers_for(
    services: Mapping[str, UDPService | None], runtime: RuntimeConfig, names: Iterable[str]
) -> list[tuple[UDPLoadBalancer, list[tuple[UDPServer, int]]]]:
    """The live UDP load balancers ``names`` (of ``services``, what
    :func:`build_udp_routers` built) and the servers ``runtime`` gives them: the
    endpoints-only path. Builds only (any thread)."""
    out = []
    for name in names:
        live = services.get(name)
        config = runtime.udp_services[name].config.load_balancer
        if isinstance(live, UDPLoadBalancer) and config is not None:
            out.append((live, _servers(runtime, name, config)))
    return out


def build_udp_routers(
    runtime: RuntimeConfig,
    transports: object | None,
    entry_points: Iterable[str],
    services: dict[str, UDPService | None] | None = None,
) -> dict[str, UDPRouter]:
    """The UDP router of each named entry point that has one.

    ``transports`` (the HTTP ServersTransports) is not used: a UDP serversTransport is
    plain configuration (its PROXY protocol choice), read from ``runtime``.
    ``services``, when given, receives the UDP services built, by name
    (:func:`udp_servers_for` updates them).
    """
    wanted = set(entry_points)
    built: dict[str, UDPService | None] = {} if services is None else services

    def load_balancer(name: str, lb: UDPLoadBalancerConfig) -> UDPLoadBalancer:
        return UDPLoadBalancer(name, _servers(runtime, name, lb))

    # Typed as making any service: mypy cannot infer build_service's S from the class.
    weighted: Callable[[str, list[tuple[UDPService, int]]], UDPService] = UDPWeighted

    def service(name: str) -> UDPService | None:
        return build_service(name, built, runtime.udp_services, load_balancer, weighted)

    routers: dict[str, UDPRouter] = {}
    for name in sorted(runtime.udp_routers):  # the first by name serves an entry point
        info = runtime.udp_routers[name]
        if info.status == DISABLED:
            continue
        svc = service(info.config.service)
        if svc is None:
            log.error(
                "udp router %s: service %s could not be built; router skipped",
                name,
                info.config.service,
            )
            continue
        for ep in info.entry_points:
            if ep in wanted and ep not in routers:
                routers[ep] = UDPRouter(name, svc)
    return routers
