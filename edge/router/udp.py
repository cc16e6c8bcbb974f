"""UDP routers: immutable snapshots, one per UDP entry point, built once per configuration.

A UDP router has no rule: every new session on its entry point goes to its service
(when several routers name one entry point, the first by name serves it; the runtime
validation warns about the others). Services become balancers (smooth weighted round
robin, shared with HTTP) over :class:`UDPServer` objects that carry what opening a
session needs: the socket address, the session timeout and whether the first datagram
gets a PROXY protocol v2 header. So the data plane only reads.

Mutable state: the balancers' round-robin scores, and a server's socket address,
filled in once when its host name resolves (numeric addresses are set when built,
names by the entry point, off the hot path; until then the server is not picked).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Container, Iterable, Iterator

from edge.balancer import SmoothWeightedRoundRobin
from edge.config.dynamic import UDPLoadBalancer as UDPLoadBalancerConfig
from edge.config.dynamic import split_host_port
from edge.config.runtime import DISABLED, RuntimeConfig
from edge.router.services import build_service

log = logging.getLogger("edge.router")

__all__ = ["UDPLoadBalancer", "UDPRouter", "UDPServer", "UDPWeighted", "build_udp_routers"]


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
        for server in service.leaves():
            self.servers.setdefault(server.address, server)

    def pick(self, down: Container[str]) -> UDPServer | None:
        """A server for a new session: one not marked down if any, else any resolved one."""
        return self.service.pick(down) or self.service.pick(())

    def unresolved(self) -> list[UDPServer]:
        return [s for s in self.service.leaves() if s.sockaddr is None]

    def __len__(self) -> int:
        return 1


def build_udp_routers(
    runtime: RuntimeConfig, transports: object | None, entry_points: Iterable[str]
) -> dict[str, UDPRouter]:
    """The UDP router of each named entry point that has one.

    ``transports`` (the HTTP ServersTransports) is not used: a UDP serversTransport is
    plain configuration (its PROXY protocol choice), read from ``runtime``.
    """
    wanted = set(entry_points)
    udp = runtime.configuration.udp
    udp_transports = udp.servers_transports if udp is not None else {}
    built: dict[str, UDPService | None] = {}

    def load_balancer(name: str, lb: UDPLoadBalancerConfig) -> UDPLoadBalancer:
        transport = udp_transports.get(lb.servers_transport)
        proxy = transport is not None and transport.proxy_protocol is not None
        return UDPLoadBalancer(
            name,
            (
                (
                    UDPServer(name, s.address, timeout=lb.session_timeout, proxy_protocol=proxy),
                    s.weight,
                )
                for s in lb.servers
            ),
        )

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
