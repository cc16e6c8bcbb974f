"""The UDP data plane of one entry point: datagrams in, sessions, upstream sockets, replies.

:class:`DatagramProxy` owns the entry point's listening socket once bound, its
:class:`~edge.udp.sessions.SessionTable`, one connected upstream socket per session,
the marks of servers that refused, and the counters. Everything runs in reader
callbacks that never await: the listener and every upstream socket are plain
non-blocking sockets watched with ``loop.add_reader``; each callback reads until the
socket holds no more or its budget is spent, and forwards each datagram whole, as
received. The budget adapts (per socket): a callback that read all it was allowed
doubles it, up to :data:`BATCH` (at a budget of 1, only every :data:`PROBE_EVERY`
times); one that found the socket empty sets it to what it read. So a quiet socket
(one datagram per wakeup, the ping-pong of DNS) is read once per wakeup and seldom
pays for a read that finds nothing (a raised BlockingIOError costs more than
forwarding a datagram), and a busy one is drained in batches. The loop's epoll is
level-triggered: whatever a callback leaves is reported again at once. A reply at a
budget of 1 takes a short path of its own (``_upstream_readable``): it is most of
the work of a DNS-like load.

The listener is read by ``recvmmsg`` where libc has it (:mod:`edge.udp.mmsg`,
``_read_many``): one ctypes call per wakeup takes every datagram waiting (up to 64),
so it needs no budget, and its sessions are filed under the sender's raw sockaddr
bytes (``session.key``) with the address tuple, made once per session, in
``session.client`` for replies and headers; a wildcard listener's pktinfo is read
only for a new session. Upstream sockets and replies stay on the socket module: a
ctypes call costs more than its ``recv``, ``send`` or ``sendto`` (see that module).
Without recvmmsg, ``_readable`` / ``_read_batch`` read with the socket module.

Why sockets and ``add_reader`` rather than asyncio datagram transports: a reply must
leave from the address the client wrote to when the entry point listens on a wildcard
address (from the local address it reached, for a broadcast), which takes ``recvmsg`` / ``sendmsg`` with IP_PKTINFO / IPV6_PKTINFO, and
transports offer neither; a new session must open its upstream at once, inside the
callback, and ``create_datagram_endpoint`` is a coroutine. One code path serves both
kinds of listener; only the read and reply calls differ.

Invariants:

* a datagram is never split, merged or queued: it is sent on at once or dropped and
  counted (UDP is lossy; a full socket buffer drops, as the kernel would);
* a session's upstream socket is registered with the loop exactly while the session
  has a server, and a session with an upstream socket is in the table (every way out
  of the table goes through ``_detach``); closing removes the reader, then the socket;
* the router is read once per new session (or re-pick after a refusal); a swap is one
  assignment plus a pass that keeps each session on its server while that server
  stays in the router's service, and ends it otherwise.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from edge.router.udp import UDPRouter, UDPServer
from edge.tcp.proxyproto import encode_v2
from edge.udp.mmsg import NAME_SIZE, BatchReader, address_of, recvmmsg
from edge.udp.sessions import Counters, Session, SessionTable, Tally

log = logging.getLogger("edge.udp")

__all__ = [
    "BATCH",
    "MAX_DATAGRAM",
    "REFUSED_DOWN",
    "DatagramProxy",
    "default_source",
    "local_from_pktinfo",
    "proxy_v2_header",
]

MAX_DATAGRAM = 65535  # read size: a UDP payload is at most 65,507 bytes over IPv4
BATCH = 64  # datagrams read per readiness callback before the loop serves others
PROBE_EVERY = 64  # at a budget of 1, every 64th full callback tries a budget of 2
REFUSED_DOWN = 10.0  # seconds a server that refused (ICMP port unreachable) is not picked
DRAIN_QUIET = 0.2  # drain ends once no session has seen a datagram for this long

# Linux's value; Python's socket module does not export IP_PKTINFO before 3.13.
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8 if sys.platform.startswith("linux") else None)
IPV6_RECVPKTINFO = getattr(socket, "IPV6_RECVPKTINFO", None)
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", None)
# Room for an in6_pktinfo and an in_pktinfo: a dual-stack listener gets both for an IPv4
# datagram (enable_pktinfo asks for both), an IPv4 one the second, an IPv6 one the first.
CMSG_SIZE = socket.CMSG_SPACE(20) + socket.CMSG_SPACE(12)
_MAPPED = bytes(10) + b"\xff\xff"  # the first 12 bytes of an IPv4-mapped IPv6 address

# Errors on a connected upstream socket that mean "this server cannot be reached":
# ICMP port unreachable (ECONNREFUSED), host or network unreachable.
UNREACHABLE = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN)


def proxy_v2_header(client: tuple[Any, ...], local: tuple[Any, ...]) -> bytes:
    """The PROXY protocol v2 header (PROXY, UDP) for ``client`` -> ``local``; socket
    addresses of either family (IPv4-mapped ones, from a dual-stack listener, as IPv4)."""
    return encode_v2(client[:2], local[:2], transport="udp")


def local_from_pktinfo(
    ancillary: list[tuple[int, int, bytes]], port: int
) -> tuple[tuple[Any, ...] | None, list[tuple[int, int, bytes]] | None]:
    """From a datagram's IP_PKTINFO / IPV6_PKTINFO: the address the client wrote to,
    and the ancillary data that makes a reply leave from the local address it reached
    (None, None if absent; a reply of None: the kernel picks its source).

    IPv4 (IP_PKTINFO, preferred where a dual-stack listener has both): replies leave from
    ``ipi_spec_dst``, the local address the kernel gives the datagram: its destination
    when that is one of this host's addresses, the receiving interface's address when it
    was sent to a broadcast (or multicast) address, which no datagram may leave from
    (sendmsg refuses it: EINVAL, ENETUNREACH). IPv6: the destination, unless multicast
    (then the kernel picks); an IPv4-mapped one is a broadcast or multicast IPv4 address
    only where IP_PKTINFO was not there to say more (the kernel picks then too).
    """
    v6 = None
    for level, kind, data in ancillary:
        if level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(data) >= 12:
            # in_pktinfo: ipi_ifindex, ipi_spec_dst (the local address), ipi_addr (the destination)
            local = (socket.inet_ntop(socket.AF_INET, data[8:12]), port)
            # to send: no interface, ipi_spec_dst = the source
            return local, [
                (socket.IPPROTO_IP, IP_PKTINFO, b"\x00\x00\x00\x00" + data[4:8] + bytes(4))
            ]
        if level == socket.IPPROTO_IPV6 and kind == IPV6_PKTINFO and len(data) >= 20:
            v6 = data
    if v6 is None or IPV6_PKTINFO is None:  # (v6 is set only where IPV6_PKTINFO exists)
        return None, None
    address = v6[:16]
    local = (socket.inet_ntop(socket.AF_INET6, address), port)
    if address[0] == 0xFF or (address[:12] == _MAPPED and address[12] >= 224):
        return local, None  # multicast, or a mapped IPv4 multicast or 255.255.255.255: not a source
    # The interface matters for a link-local address only; elsewhere routing picks it.
    ifindex = v6[16:20] if address[:2] == b"\xfe\x80" else b"\x00\x00\x00\x00"
    return local, [(socket.IPPROTO_IPV6, IPV6_PKTINFO, address + ifindex)]


def reply_source(reply: list[tuple[int, int, bytes]]) -> str:
    """The source address ``reply`` (from :func:`local_from_pktinfo`) sets, as text
    (an IPv4-mapped one as IPv4)."""
    level, _, data = reply[0]
    if level == socket.IPPROTO_IP:
        return socket.inet_ntop(socket.AF_INET, data[4:8])
    return _unmapped(socket.inet_ntop(socket.AF_INET6, data[:16]))


def _unmapped(ip: str) -> str:
    return ip[7:] if ip.startswith("::ffff:") and "." in ip else ip


def default_source(family: int, client: tuple[Any, ...]) -> str | None:
    """The source address the kernel picks to reach ``client`` (None if it cannot).

    A reply from a wildcard listener needs IP_PKTINFO only when the address the client
    wrote to is not this one (a VIP, a second address): sendmsg with ancillary data
    costs more than sendto on every datagram, this costs four system calls per session.
    """
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(client)
            return _unmapped(probe.getsockname()[0])
    except OSError:
        return None


class DatagramProxy:
    """Sessions and forwarding for one UDP entry point (see the module docstring)."""

    # The listening socket, set by attach (``attached``); every reader callback, the
    # hot path that reads and replies through it, is registered after that.
    sock: socket.socket

    def __init__(
        self,
        name: str,
        loop: asyncio.AbstractEventLoop,
        *,
        timeout: float,
        max_sessions: int,
        batch: bool = True,
    ) -> None:
        """``batch``: read a listener on one address with recvmmsg where libc has it
        (:mod:`edge.udp.mmsg`); False keeps every read on the socket module."""
        self.name = name
        self.loop = loop
        self.timeout = timeout  # the entry point's udp.timeout
        self.shortest = timeout  # the shortest timeout any live session can have
        self.table = SessionTable(max_sessions)
        self.sessions = self.table.sessions  # the hot path's way in (same object, never replaced)
        # The coarse clock a datagram stamps on its session: the time of the last sweep,
        # new session or drain poll (see edge.udp.sessions). time.monotonic, not the
        # loop's clock: that one steps by a millisecond, and sessions opened within one
        # would share a stamp, so a datagram between them would not tell them apart.
        self.tick = time.monotonic()
        self.router: UDPRouter | None = None
        self.attached = False  # sock is set
        self.wildcard = False
        # the bound address (for a wildcard: when pktinfo lacks)
        self.local: tuple[Any, ...] | None = None
        self.port = 0
        self.reading = False
        self._recvmmsg = recvmmsg() if batch else None
        self._reader: BatchReader | None = None  # the listener's, when it is read by recvmmsg
        self._budget = 1  # datagrams the listener's next callback reads (see the module doc)
        self._fills = 0  # callbacks in a row that read their budget of 1
        self.down: dict[str, float] = {}  # server address -> loop time it may be picked again
        # (router, service) -> counters; kept across reloads, so totals only grow
        self.counters: dict[tuple[str, str], Counters] = {}
        self.no_route = 0  # datagrams that arrived while no router served the entry point
        self._evicted = 0  # evictions since the last sweep logged them
        self._open_failed = 0
        self._open_error: OSError | None = None
        # The router's servers' (ip, port): a datagram from one opens no session (see _open).
        self.servers_at: frozenset[tuple[str, int]] = frozenset()
        self._loops = 0  # such datagrams since the last sweep logged them
        # What each session calls when it ends (the access log's), set by the entry point;
        # with it, sessions count in a Tally of their own.
        self.log_session: Callable[[Session], None] | None = None

    # -- life cycle ------------------------------------------------------------------

    def attach(self, sock: socket.socket, *, wildcard: bool) -> None:
        """Serve datagrams arriving on ``sock`` (bound, non-blocking)."""
        self.sock = sock
        self.attached = True
        self.wildcard = wildcard
        self.local = sock.getsockname()
        self.port = self.local[1]
        if self._recvmmsg is not None and sock.family in NAME_SIZE:
            control = CMSG_SIZE if wildcard else 0  # room for each datagram's pktinfo
            try:
                self._reader = BatchReader(sock, self._recvmmsg, control=control)
            except OSError as exc:  # no memory for the slots: the socket module's reads serve
                log.warning("entrypoint %s: reading datagrams one by one: %s", self.name, exc)
        self.refresh()
        self.start_reading()

    def start_reading(self) -> None:
        if self.attached and not self.reading:
            fd = self.sock.fileno()
            reader = self._reader
            if reader is None:
                self.loop.add_reader(fd, self._readable)
            elif self.wildcard:
                self.loop.add_reader(fd, self._read_many_pktinfo, reader)
            else:
                self.loop.add_reader(fd, self._read_many, reader)
            self.reading = True

    def stop_reading(self) -> None:
        if self.attached and self.reading:
            self.loop.remove_reader(self.sock.fileno())
            self.reading = False

    def refresh(self) -> float:
        """Set the tick to now (time.monotonic) and return it."""
        self.tick = now = time.monotonic()
        return now

    def last_activity(self) -> float:
        """Tick (time.monotonic) of the most recent datagram of any session (0.0: none)."""
        return max((s.last for s in self.sessions.values()), default=0.0)

    def close(self) -> None:
        """End every session and close the listening socket."""
        self.stop_reading()
        for session in self.table.clear():
            self._end(session)
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.attached:
            self.sock.close()

    # -- configuration -------------------------------------------------------------------

    def switch(self, router: UDPRouter | None) -> None:
        """Serve ``router`` from now on (None: no router; datagrams are dropped)."""
        self.router = router
        self.servers_changed()
        timeouts = [self.timeout]
        if router is not None:
            timeouts += [s.timeout for s in router.servers.values() if s.timeout]
        self.shortest = min(timeouts)
        ended = 0
        for session in self.table:
            if router is not None and self._stays(session, router):
                shared = self._counters(router.name, router.service.name)
                if isinstance(session.counters, Tally):
                    session.counters.shared = shared
                else:
                    session.counters = shared
            else:
                self.table.remove(session)
                self._end(session)
                ended += 1
        if ended:
            log.info(
                "entrypoint %s: %d UDP sessions ended: their router or server is gone",
                self.name,
                ended,
            )

    def _stays(self, session: Session, router: UDPRouter) -> bool:
        """Whether ``session`` stays on across a switch to ``router`` (then on the new
        router's copy of its server)."""
        if router.name != session.counters.router or self._from_server(session.client):
            return False
        old = session.server
        if old is None:
            return True  # waiting to re-pick after a refusal: it will pick from this router
        new = router.servers.get(old.address)
        if new is None:
            return False
        session.server = new
        session.timeout = new.timeout or self.timeout
        return True

    def servers_changed(self) -> None:
        """The router's servers, or their addresses (a host name resolved), changed."""
        router = self.router
        self.servers_at = frozenset(
            (_unmapped(s.sockaddr[0]), s.sockaddr[1])
            for s in (router.servers.values() if router is not None else ())
            if s.sockaddr is not None
        )

    def _from_server(self, client: tuple[Any, ...]) -> bool:
        return (_unmapped(client[0]), client[1]) in self.servers_at

    def _counters(self, router: str, service: str) -> Counters:
        counters = self.counters.get((router, service))
        if counters is None:
            counters = self.counters[(router, service)] = Counters(router, service)
        return counters

    # -- periodic ----------------------------------------------------------------------

    def sweep(self, now: float, slack: float = 0.0) -> None:
        """End idle sessions, forget refusals that aged, log evictions and failures.

        ``now`` is loop time (refusals are marked in it); ``slack``: the longest the
        tick may have gone without a refresh (the sweep interval): a session's stamp is
        at most that much older than its datagram.
        """
        for session in self.table.expire(self.refresh(), self.shortest, slack):
            session.counters.sessions_expired += 1
            self._end(session)
        if self.down:
            for address in [a for a, until in self.down.items() if until <= now]:
                del self.down[address]
        if self._evicted:
            log.warning(
                "entrypoint %s: %d UDP sessions evicted, oldest idle first (maxSessions %d)",
                self.name,
                self._evicted,
                self.table.max_sessions,
            )
            self._evicted = 0
        if self._open_failed:
            log.error(
                "entrypoint %s: %d UDP sessions could not open an upstream socket: %s",
                self.name,
                self._open_failed,
                self._open_error,
            )
            self._open_failed = 0
        if self._loops:
            log.warning(
                "entrypoint %s: %d datagrams dropped: they came from a server of the service,"
                " whose answers would come back as requests (a loop)",
                self.name,
                self._loops,
            )
            self._loops = 0

    # -- datagrams from clients ----------------------------------------------------------

    def _readable(self) -> None:
        """The listener has datagrams (where each was sent to, on a wildcard listener)."""
        if self._budget > 1:
            self._read_batch()
            return
        # One datagram per wakeup (the common case) takes the shortest path: one read,
        # one lookup, one send, a stamp and two counts. Its forwarding is _read_batch's,
        # written out again: the batch loop taking budgets of 1 too costs 570 more
        # instructions a datagram (callgrind, loadtest/bench_udp.py).
        try:
            if self.wildcard:
                data, ancillary, _flags, client = self.sock.recvmsg(MAX_DATAGRAM, CMSG_SIZE)
            else:
                data, client = self.sock.recvfrom(MAX_DATAGRAM)
                ancillary = None
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.debug("entrypoint %s: receive failed: %s", self.name, exc)
            return
        self._fills += 1
        if self._fills >= PROBE_EVERY:
            self._budget = 2
            self._fills = 0
        session = self.sessions.get(client)
        if session is None or session.ready is None:
            self._from_client(session, data, client, ancillary)
            return
        session.last = self.tick
        try:
            session.ready.send(data)
        except (BlockingIOError, InterruptedError):
            session.counters.dropped += 1
            return
        except OSError as exc:
            self._send_failed(session, data, exc)
            return
        counters = session.counters
        counters.datagrams_to_server += 1
        counters.bytes_to_server += len(data)

    def _read_many(self, reader: BatchReader) -> int:
        """The listener has datagrams: all of them, up to VLEN, in one recvmmsg by
        ``reader`` (the listener's); each sender's raw sockaddr is its session key
        (edge.udp.mmsg). Returns how many."""
        count = reader.receive()
        if count == 1:
            # One datagram per wakeup (the ping-pong of DNS) takes the shortest path.
            key = reader.names[0].raw
            session = self.sessions.get(key)
            if session is None or session.ready is None:
                ancillary = reader.ancillary(0) if reader.control else None
                self._from_client(session, reader.datagram(0), key, ancillary)
                return 1
            size = reader.lengths[reader.at]
            session.last = self.tick
            try:
                session.ready.send(reader.views[0][:size])
            except (BlockingIOError, InterruptedError):
                session.counters.dropped += 1
                return 1
            except OSError as exc:
                self._send_failed(session, reader.datagram(0), exc)
                return 1
            counters = session.counters
            counters.datagrams_to_server += 1
            counters.bytes_to_server += size
            return 1
        if count < 1:
            error = reader.failed(count)
            if error:
                log.debug("entrypoint %s: receive failed: %s", self.name, os.strerror(error))
            return 0
        sessions = self.sessions
        names = reader.names
        views = reader.views
        lengths = reader.lengths
        stride = reader.stride
        at = reader.at
        tick = self.tick
        for i in range(count):
            key = names[i].raw
            session = sessions.get(key)
            if session is None or session.ready is None:
                ancillary = reader.ancillary(i) if reader.control else None
                self._from_client(session, reader.datagram(i), key, ancillary)
                tick = self.tick  # a new session refreshes it
                continue
            size = lengths[stride * i + at]
            session.last = tick
            try:
                session.ready.send(views[i][:size])
            except (BlockingIOError, InterruptedError):
                session.counters.dropped += 1
                continue
            except OSError as exc:
                self._send_failed(session, reader.datagram(i), exc)
                continue
            counters = session.counters
            counters.datagrams_to_server += 1
            counters.bytes_to_server += size
        return count

    def _read_many_pktinfo(self, reader: BatchReader) -> None:
        """A wildcard listener read by recvmmsg: as ``_read_many`` (a new session takes its
        first datagram's pktinfo), then the ancillary room of the slots read is made
        whole again."""
        count = self._read_many(reader)
        if count:
            reader.rearm(count)

    def _read_batch(self) -> None:
        """Up to the listener's budget of datagrams, each forwarded."""
        sock = self.sock
        wildcard = self.wildcard
        sessions = self.sessions
        tick = self.tick
        budget = self._budget
        read = 0
        while read < budget:
            try:
                if wildcard:
                    data, ancillary, _flags, client = sock.recvmsg(MAX_DATAGRAM, CMSG_SIZE)
                else:
                    data, client = sock.recvfrom(MAX_DATAGRAM)
                    ancillary = None
            except (BlockingIOError, InterruptedError):
                self._budget = read or 1
                self._fills = 0
                return
            except OSError as exc:
                log.debug("entrypoint %s: receive failed: %s", self.name, exc)
                return
            read += 1
            session = sessions.get(client)
            if session is None or session.ready is None:
                self._from_client(session, data, client, ancillary)
                tick = self.tick  # a new session refreshes it
                continue
            session.last = tick
            try:
                session.ready.send(data)
            except (BlockingIOError, InterruptedError):
                session.counters.dropped += 1
                continue
            except OSError as exc:
                self._send_failed(session, data, exc)
                continue
            counters = session.counters
            counters.datagrams_to_server += 1
            counters.bytes_to_server += len(data)
        self._budget = min(budget * 2, BATCH)

    def _from_client(
        self,
        session: Session | None,
        data: bytes,
        key: tuple[Any, ...] | bytes,
        ancillary: list[tuple[int, int, bytes]] | None,
    ) -> None:
        """A datagram the short path does not take: a new client, or a session that must
        pick a server again or send a PROXY header first. ``key``: the session key, the
        client's address as the socket module gives it, or its raw sockaddr bytes where
        the listener is read by recvmmsg."""
        if session is None:
            session = self._open(key, ancillary)
            if session is None:
                return
        else:
            session.last = self.tick
        self._forward_slow(session, data)

    def _open(
        self, key: tuple[Any, ...] | bytes, ancillary: list[tuple[int, int, bytes]] | None
    ) -> Session | None:
        """A session for a new client, its server picked and its upstream open; None: dropped."""
        router = self.router
        if router is None:
            self.no_route += 1
            return None
        counters = self._counters(router.name, router.service.name)
        # the socket module's address, or (read by recvmmsg) the raw sockaddr's
        client = key if isinstance(key, tuple) else address_of(key)
        if self._from_server(client):
            # A server's own address (spoofed, or the server itself): the session would send
            # its server's answers back to it from the listener, and an answer to those
            # would come back here as a request, for ever (a packet loop, "Loop DoS").
            counters.dropped += 1
            self._loops += 1
            return None
        server = router.pick(self.down)
        if server is None:
            counters.dropped += 1
            return None
        now = self.refresh()
        local, reply = None, None
        if ancillary is not None:
            local, reply = local_from_pktinfo(ancillary, self.port)
            if reply is not None and reply_source(reply) == default_source(
                self.sock.family, client
            ):
                reply = None  # the kernel's own choice: a plain sendto says the same, for less
        session = Session(
            client,
            counters if self.log_session is None else Tally(counters),
            timeout=self.timeout,
            local=local or self.local,
            reply=reply,
            key=key,
        )
        session.opened = now
        evicted = self.table.add(session, now)
        if evicted is not None:
            evicted.counters.sessions_evicted += 1
            self._evicted += 1
            self._end(evicted)
        if not self._connect(session, server):
            self.table.remove(session)
            counters.dropped += 1
            return None
        counters.sessions_opened += 1
        return session

    def _connect(self, session: Session, server: UDPServer) -> socket.socket | None:
        """Open ``session``'s upstream socket to ``server`` (a resolved one: routers pick
        no other) and watch it; the socket, or None on failure."""
        assert server.sockaddr is not None, "an unresolved server was picked"
        try:
            sock = socket.socket(server.family, socket.SOCK_DGRAM)
        except OSError as exc:  # EMFILE / ENFILE: out of file descriptors
            self._open_failed += 1
            self._open_error = exc
            return None
        try:
            sock.setblocking(False)
            sock.connect(server.sockaddr)
        except OSError as exc:
            sock.close()
            self._open_failed += 1
            self._open_error = exc
            self._mark_down(server, exc)
            return None
        session.sock = sock
        session.server = server
        session.timeout = server.timeout or self.timeout
        if server.proxy_protocol and session.local is not None:
            session.header = proxy_v2_header(session.client, session.local)
        else:
            session.ready = sock
        self.loop.add_reader(sock.fileno(), self._upstream_readable, session)
        return sock

    def _end(self, session: Session) -> None:
        """``session`` left the table: logged (where the access log is on), then detached."""
        if self.log_session is not None:
            self.log_session(session)
        self._detach(session)

    def _detach(self, session: Session) -> None:
        """Close ``session``'s upstream socket (it may pick a server again later)."""
        sock = session.sock
        if sock is not None:
            self.loop.remove_reader(sock.fileno())
            sock.close()
            session.sock = None
        session.ready = None
        session.server = None
        session.header = None

    def _forward_slow(self, session: Session, data: bytes) -> None:
        """Forward the first datagram after a refusal (pick again) or one that carries a header."""
        sock = session.sock
        if sock is None:
            router = self.router
            server = router.pick(self.down) if router is not None else None
            sock = self._connect(session, server) if server is not None else None
            if sock is None:
                session.counters.dropped += 1
                return
        header = session.header
        payload = data if header is None else header + data
        try:
            sock.send(payload)
        except (BlockingIOError, InterruptedError):
            session.counters.dropped += 1  # the header goes with the next datagram
            return
        except OSError as exc:
            self._send_failed(session, data, exc)
            return
        session.header = None
        session.ready = sock
        session.counters.datagrams_to_server += 1
        session.counters.bytes_to_server += len(data)

    def _send_failed(self, session: Session, data: bytes, exc: OSError) -> None:
        """A send to the upstream failed: a refusal moves the session (this datagram too)."""
        if exc.errno in UNREACHABLE and session.server is not None:
            self._mark_down(session.server, exc)
            self._detach(session)
            router = self.router
            server = router.pick(self.down) if router is not None else None
            if (
                server is not None
                and server.address not in self.down
                and self._connect(session, server)
            ):
                self._forward_slow(session, data)
                return
        session.counters.dropped += 1

    def _mark_down(self, server: UDPServer, exc: OSError) -> None:
        if exc.errno not in UNREACHABLE:
            return
        if server.address not in self.down:
            log.warning(
                "entrypoint %s: udp service %s: server %s unreachable (%s); not picked for %gs",
                self.name,
                server.service,
                server.address,
                exc.strerror or exc,
                REFUSED_DOWN,
            )
        self.down[server.address] = self.loop.time() + REFUSED_DOWN

    # -- datagrams from servers ------------------------------------------------------------

    def _upstream_readable(self, session: Session) -> None:
        """``session``'s server sent datagrams: each goes back to the client, whole."""
        sock = session.sock
        if sock is None:
            return
        if session.budget == 1:
            # One datagram per wakeup (the common case) takes the shortest path.
            try:
                data = sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._upstream_failed(session, exc)
                return
            try:
                if session.reply is None:
                    self.sock.sendto(data, session.client)
                else:
                    self.sock.sendmsg((data,), session.reply, 0, session.client)
            except OSError:
                session.counters.dropped += 1
                return
            counters = session.counters
            counters.datagrams_to_client += 1
            counters.bytes_to_client += len(data)
            session.last = self.tick
            session.fills += 1
            if session.fills >= PROBE_EVERY:
                session.budget = 2
                session.fills = 0
            return
        self._upstream_batch(session, sock)

    def _upstream_batch(self, session: Session, sock: socket.socket) -> None:
        """Up to the session's budget of datagrams from its server, back to the client."""
        recv = sock.recv
        client = session.client
        reply = session.reply
        listener = self.sock
        count = 0
        size = 0
        dropped = 0
        error: OSError | None = None
        budget = session.budget
        read = 0
        while read < budget:
            try:
                data = recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                session.budget = read or 1
                session.fills = 0
                break
            except OSError as exc:
                error = exc
                break
            read += 1
            try:
                if reply is None:
                    listener.sendto(data, client)
                else:
                    listener.sendmsg((data,), reply, 0, client)
            except OSError:
                dropped += 1
                continue
            count += 1
            size += len(data)
        else:
            session.budget = min(budget * 2, BATCH)
        counters = session.counters
        if count:
            counters.datagrams_to_client += count
            counters.bytes_to_client += size
            session.last = self.tick
        if dropped:
            counters.dropped += dropped
        if error is not None:
            self._upstream_failed(session, error)

    def _upstream_failed(self, session: Session, error: OSError) -> None:
        """The upstream socket reported an error: a refusal marks the server down; either
        way the next datagram from the client picks a server again."""
        if session.server is not None:
            self._mark_down(session.server, error)
        self._detach(session)
