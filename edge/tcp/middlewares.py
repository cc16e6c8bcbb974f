"""TCP middlewares: what a TCP router checks before a connection reaches its service.

Owns :class:`IPAllowList` (``ipAllowList``: connections from ``sourceRange`` only),
:class:`InFlightConn` (``inFlightConn``: at most ``amount`` simultaneous
connections per client IP) and :class:`TCPChain`, a router's middlewares in the
order it lists them. Traefik's semantics: a connection a middleware refuses is
closed, nothing is sent; the client IP is the connection's (or the one a trusted
PROXY protocol header named); for a router that terminates TLS the checks run
after the handshake, as Traefik's middlewares wrap the service behind the TLS
handler.

Invariants:
- Built once per configuration, router and entrypoint (Traefik builds a chain
  per router on each entrypoint too): an ``inFlightConn`` counts the connections
  of each router using it on each of its entrypoints apart, and a new
  configuration starts new counts. With ``workers: N`` each worker process
  counts its own connections (the kernel spreads them), so up to N times
  ``amount`` may be admitted from one address. A connection
  admitted under the old configuration leaves the old chain's count.
- Every admitted connection is left exactly once (:meth:`TCPChain.leave`), by
  whoever tracks it to its end (the relay); a refusal leaves the counts as they
  were (a step that counted before a later step refused gives its count back).
- Configuration values were checked by the runtime validation (a middleware
  with an empty or invalid ``sourceRange`` never gets here).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from edge.config.dynamic import TCPMiddleware
from edge.rules import unmapped_network

__all__ = ["IPAllowList", "InFlightConn", "TCPChain", "build_chain", "client_address", "networks"]

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def client_address(ip: str) -> _Address | None:
    """``ip`` (text, perhaps with a ``%zone``) as an address; IPv4-mapped IPv6 as IPv4."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return None
    if addr.version == 6 and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def networks(entries: Iterable[str]) -> tuple[_Network, ...]:
    """IPs or CIDRs (as validated) as networks to hold a :func:`client_address` against.

    Clients are compared unmapped, so an IPv4-mapped entry (``::ffff:10.0.0.0/104``,
    ``::ffff:127.0.0.1``) is the IPv4 network it maps (Traefik's checker unmaps both
    sides); otherwise it would match no client at all.
    """
    return tuple(unmapped_network(ipaddress.ip_network(entry, strict=False)) for entry in entries)


class IPAllowList:
    """Admits connections whose client IP is in one of ``source_range`` (IPs or CIDRs)."""

    __slots__ = ("name", "networks")

    def __init__(self, name: str, source_range: Iterable[str]) -> None:
        self.name = name
        self.networks = networks(source_range)

    def enter(self, ip: str) -> bool:
        addr = client_address(ip)
        return addr is not None and any(addr in net for net in self.networks)

    def leave(self, ip: str) -> None: ...


class InFlightConn:
    """Admits at most ``amount`` simultaneous connections per client IP."""

    __slots__ = ("amount", "connections", "name")

    def __init__(self, name: str, amount: int) -> None:
        self.name = name
        self.amount = amount
        self.connections: dict[str, int] = {}  # client IP -> connections admitted and not yet left

    def enter(self, ip: str) -> bool:
        n = self.connections.get(ip, 0)
        if n >= self.amount:
            return False
        self.connections[ip] = n + 1
        return True

    def leave(self, ip: str) -> None:
        n = self.connections.get(ip, 0) - 1
        if n > 0:
            self.connections[ip] = n
        else:
            self.connections.pop(ip, None)


Step = IPAllowList | InFlightConn


class TCPChain:
    """A TCP router's middlewares, applied in order."""

    __slots__ = ("steps",)

    def __init__(self, steps: Iterable[Step]) -> None:
        self.steps = tuple(steps)

    def enter(self, ip: str) -> Step | None:
        """Admit a connection from ``ip``: None, or the middleware that refuses it."""
        for i, step in enumerate(self.steps):
            if not step.enter(ip):
                for earlier in self.steps[:i]:
                    earlier.leave(ip)
                return step
        return None

    def leave(self, ip: str) -> None:
        """An admitted connection from ``ip`` has ended."""
        for step in self.steps:
            step.leave(ip)


def build_chain(names: Iterable[str], configs: Mapping[str, TCPMiddleware]) -> TCPChain | None:
    """The chain of ``names`` (qualified middleware names, as validated); None when empty."""
    steps: list[Step] = []
    for name in names:
        config = configs[name]
        if config.ip_allow_list is not None:
            steps.append(IPAllowList(name, config.ip_allow_list.source_range))
        elif config.in_flight_conn is not None:
            steps.append(InFlightConn(name, config.in_flight_conn.amount))
    return TCPChain(steps) if steps else None
