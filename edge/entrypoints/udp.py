"""The UDP entrypoint: one bound address, its sessions, its router, its counters.

A :class:`UDPEntryPoint` binds one UDP socket and hands it to a
:class:`~edge.udp.server.DatagramProxy`, which does the forwarding. It holds the
current :class:`~edge.router.set.RouterSet` (one reference) and passes its ``udp``
router on with one assignment; sessions keep their server across the swap while that
server stays in the router's service.

Binding: ``":5353/udp"`` (every address) is one dual-stack IPv6 socket (IPv4 clients
appear as ``::ffff:a.b.c.d``; IPv4 only where IPv6 is off), ``"0.0.0.0"`` IPv4 only,
``"[::]"`` IPv6 only, as for TCP. A wildcard listener reads each datagram's
destination (IP_PKTINFO / IPV6_RECVPKTINFO) so replies leave from the address the
client wrote to; where the platform lacks it, the log says so and replies leave from
whatever address the kernel picks.

With ``reuse_port`` (``workers: N``) each worker binds the same port with
SO_REUSEPORT; the kernel spreads datagrams by a hash of the 4-tuple, so one client's
session stays on one worker. The entry point's ``reusePort`` sets SO_REUSEPORT alone,
for other processes to share the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket

from edge.config.static import EntryPoint
from edge.descriptors import RESERVE, soft_limit
from edge.entrypoints.base import SWEEP_MAX, SWEEP_MIN, format_address
from edge.router.set import EMPTY_SET, RouterSet
from edge.router.udp import UDPServer
from edge.udp.server import DRAIN_QUIET, IP_PKTINFO, IPV6_RECVPKTINFO, DatagramProxy
from edge.udp.sessions import Counters

log = logging.getLogger("edge.entrypoints")

SOCKET_BUFFER = 4 * 1024 * 1024  # asked for the listener; the kernel caps it (net.core.rmem_max)
UDP_SHARE = 0.5  # of the descriptors above the reserve, what all UDP sessions together may hold


class UDPEntryPoint:
    def __init__(
        self,
        name: str,
        config: EntryPoint,
        loop: asyncio.AbstractEventLoop,
        *,
        reuse_port: bool = False,
        share: float = UDP_SHARE,
    ) -> None:
        """``share``: the part of the descriptors above the reserve this entry point's
        sessions may hold (:func:`fit_sessions`; the Dataplane splits :data:`UDP_SHARE`
        among its UDP entry points)."""
        self.name = name
        self.config = config
        self.loop = loop
        self.reuse_port = reuse_port
        self.share = share
        self.routers = EMPTY_SET
        self.proxy = DatagramProxy(
            name, loop, timeout=config.udp.timeout, max_sessions=config.udp.max_sessions
        )
        self._tasks: set[asyncio.Task] = set()
        self._swept = loop.time()  # the last sweep (or the start)
        if config.proxy_protocol is not None:
            # Traefik ignores it too, silently; a user who set it expects client addresses.
            log.warning(
                "entrypoint %s: proxyProtocol has no effect on a UDP entry point (headers are read"
                " on TCP connections only); to give UDP servers the client's address, set"
                " proxyProtocol on the service's udp.serversTransports",
                name,
            )

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one the OS chose for port 0)."""
        return self.proxy.port or self.config.port

    def bound(self, ports: dict[str, int]) -> None:
        """Nothing of a UDP entry point names another one's port."""

    def switch(self, routers: RouterSet) -> None:
        """Serve ``routers.udp`` from now on (one assignment, then the sessions are re-checked)."""
        self.routers = routers
        router = routers.udp
        self.proxy.switch(router)
        pending = router.unresolved() if router is not None else []
        if pending:
            task = self.loop.create_task(self._resolve(pending))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _resolve(self, servers: list[UDPServer]) -> None:
        """Resolve server host names off the hot path; a server is picked once resolved."""

        async def one(server: UDPServer) -> None:
            try:
                infos = await self.loop.getaddrinfo(
                    server.host, server.port, type=socket.SOCK_DGRAM
                )
            except OSError as exc:
                log.error(
                    "entrypoint %s: udp service %s: server %s cannot be resolved: %s",
                    self.name,
                    server.service,
                    server.address,
                    exc,
                )
                return
            server.resolved(infos[0][0], infos[0][4])

        await asyncio.gather(*(one(server) for server in servers))
        self.proxy.servers_changed()

    async def start(self) -> None:
        max_sessions = fit_sessions(self.name, self.config.udp.max_sessions, self.share)
        self.proxy.table.max_sessions = max_sessions
        sock, wildcard = await self._bind()
        self.proxy.attach(sock, wildcard=wildcard)
        where = format_address(sock.getsockname())
        mode = "udp, replies from the address written to" if wildcard else "udp"
        if self.reuse_port:
            log.info("entrypoint %s: sharing %s (SO_REUSEPORT, %s)", self.name, where, mode)
        else:
            log.info("entrypoint %s: listening on %s (%s)", self.name, where, mode)

    async def _bind(self) -> tuple[socket.socket, bool]:
        host, port = self.config.host, self.config.port
        if host:
            infos = await self.loop.getaddrinfo(
                host, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE
            )
            family, address = infos[0][0], infos[0][4]
            # (str(): a host, never the (int, bytes) of a Python built without IPv6)
            wildcard = ipaddress.ip_address(str(address[0]).split("%", 1)[0]).is_unspecified
            dual_stack = False
        else:  # every address: one dual-stack socket where IPv6 exists
            family, address, wildcard, dual_stack = socket.AF_INET6, ("::", port), True, True
            if not socket.has_ipv6:
                family, address, dual_stack = socket.AF_INET, ("0.0.0.0", port), False
        try:
            sock = socket.socket(family, socket.SOCK_DGRAM)
        except OSError:
            if not dual_stack:
                raise
            family, address = socket.AF_INET, ("0.0.0.0", port)  # IPv6 is off on this host
            sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual_stack else 1)
            if self.reuse_port or self.config.reuse_port:  # workers, or reusePort
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"error while attempting to bind on address {format_address(address)} (udp): "
                    f"{exc.strerror}",
                ) from None
            if wildcard:
                wildcard = enable_pktinfo(self.name, sock)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock, wildcard

    def stop_accepting(self) -> None:
        self.proxy.stop_reading()

    def sweep(self, now: float) -> None:
        # The tick lags the clock by at most the time since the last sweep (the interval,
        # or more when this sweep is late): a session's stamp by no more than that.
        last, self._swept = self._swept, now
        self.proxy.sweep(now, slack=max(self.sweep_interval(), now - last))

    def sweep_interval(self) -> float:
        return max(SWEEP_MIN, min(SWEEP_MAX, self.proxy.shortest / 4))

    async def drain(self, grace: float) -> None:
        """Let replies still coming back reach their clients (until quiet, within ``grace``)."""
        deadline = self.loop.time() + grace
        poll = 0.02
        while self.loop.time() < deadline and self.proxy.table:
            now = self.proxy.refresh()  # stamps to within a poll
            if now - self.proxy.last_activity() >= DRAIN_QUIET + poll:
                break
            await asyncio.sleep(poll)
        for task in list(self._tasks):
            task.cancel()
        self.proxy.close()

    # -- counters ------------------------------------------------------------------------

    def router_counters(self) -> dict[str, Counters]:
        """Counters summed per router (all services it has had)."""
        return self._totals(0)

    def service_counters(self) -> dict[str, Counters]:
        """Counters summed per service (all routers that named it)."""
        return self._totals(1)

    def _totals(self, index: int) -> dict[str, Counters]:
        out: dict[str, Counters] = {}
        for key, counters in self.proxy.counters.items():
            name = key[index]
            total = out.get(name)
            if total is None:
                total = out[name] = Counters(*((name, "*") if index == 0 else ("*", name)))
            total.add(counters)
        return out


def enable_pktinfo(name: str, sock: socket.socket) -> bool:
    """Ask for each datagram's destination address; False (and a log line) where unsupported."""
    try:
        if sock.family == socket.AF_INET6:
            if IPV6_RECVPKTINFO is None:
                raise OSError("IPV6_RECVPKTINFO is not available")
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
            # A dual-stack socket reports IPv4 destinations as IPv4-mapped IPV6_PKTINFO;
            # IP_PKTINFO adds the local address a broadcast reached (replies leave from it).
            if IP_PKTINFO is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        else:
            if IP_PKTINFO is None:
                raise OSError("IP_PKTINFO is not available")
            sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    except OSError as exc:
        log.warning(
            "entrypoint %s: cannot learn the address each datagram was sent to (%s): replies "
            "leave from the address the kernel picks, which may not be the one clients wrote to",
            name,
            exc,
        )
        return False
    return True


def fit_sessions(name: str, wanted: int, share: float = UDP_SHARE) -> int:
    """``wanted`` sessions, or fewer (with a log line) where they would hold more than
    ``share`` of the descriptors above the reserve (:mod:`edge.descriptors`).

    Each session holds a connected socket, and a new source address opens one: a
    spoofed flood fills the table to its cap. With the cap at a share of the open file
    limit (raised to the hard limit at start), such a flood leaves the rest to TCP
    connections, /ping and the providers; past the cap, each new source evicts the
    least recently active session instead of taking a descriptor.
    """
    soft = soft_limit()
    if soft == 0:  # unlimited
        return wanted
    fitted = max(1, int((soft - RESERVE) * share))
    if wanted <= fitted:
        return wanted
    log.warning(
        "entrypoint %s: maxSessions %d lowered to %d: UDP sessions may hold %d%% of the %d"
        " descriptors the open file limit allows (each holds a socket)",
        name,
        wanted,
        fitted,
        round(share * 100),
        soft,
    )
    return fitted
