"""The Python cost of one proxied datagram: edge's UDP data plane on real sockets, one process.

A :class:`~edge.udp.server.DatagramProxy` (the entry point's data plane, as
``edge run`` makes it) on a uvloop, with its clients and its backend as plain
sockets on the same loop, so every datagram's path is deterministic: loopback
delivers a datagram into the receiving socket within the ``send`` call, and one
thread runs everything. ``--direct`` runs the same clients and backend with no proxy
between them: what the proxy costs is the difference. ``--ceiling``: bench.py's
udp-ceiling instead of edge (the least a uvloop proxy does per datagram: add_reader,
one read per wakeup, a dict of connected upstream sockets, nothing else).
``--ctypes``: that ceiling with all four calls made on libc through ctypes (raw
sockaddr keys, one buffer, no exceptions); ``--mmsg``: the ceiling with its listener
read by recvmmsg (edge.udp.mmsg), the rest on the socket module.
``--socket-module``: edge with its listener read by the socket module, as before
recvmmsg (the baseline of that change, in the same checkout).

    python loadtest/bench_udp.py [--mode echo|oneway] [--clients 1] [--wildcard]
                                 [--datagrams 100000]
                                 [--direct | --ceiling | --ctypes | --mmsg | --socket-module]
                                 [--profile | --instructions]

``echo``: each client keeps one datagram in flight through an echo backend (bench.py's
udp-echo-1 and udp-echo-100); the unit is a round trip (two datagrams through the
proxy). ``oneway``: the clients send bursts (one datagram each, round robin) to a
sink that counts them (bench.py's udp-oneway); the unit is a datagram.
``--wildcard``: the proxy listens on every address (IP_PKTINFO), as ``":port/udp"``.

``--instructions``: instructions per unit, counted by callgrind (valgrind, through
``loadtest/callgrind.py``), proxied and direct, each made at two counts and
differenced (start-up cancels out); the proxy's own figure is proxied minus direct.
Repeatable to a few dozen instructions where timings on a shared machine are not,
with one exception seen once at load 5: a run counted 4 % more (likely the kernel
deferring loopback delivery to ksoftirqd, so a datagram is not there yet when the
loop looks); repeat a figure that moved.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import ctypes
import pstats
import socket
import time

import callgrind  # a module beside this script
import uvloop

from edge.entrypoints.udp import enable_pktinfo
from edge.router.udp import UDPLoadBalancer, UDPRouter, UDPServer
from edge.udp.mmsg import BatchReader, address_of, recvmmsg
from edge.udp.server import DatagramProxy

HOST = "127.0.0.1"
PAYLOAD = b"x" * 64  # bench.py's udp_size
BURST = 100  # oneway: datagrams sent per burst (one per client at 100 clients)


def bound(host: str = HOST, family: int = socket.AF_INET) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind((host, 0))
    sock.setblocking(False)
    return sock


class Ceiling:
    """bench.py's UDP_CEILING_PY as an object: the least a uvloop UDP proxy does."""

    def __init__(self, loop: asyncio.AbstractEventLoop, backend: tuple) -> None:
        self.loop = loop
        self.listener = bound()
        self.sessions: dict[tuple, socket.socket] = {}
        listener = self.listener

        def reply(up: socket.socket, client: tuple) -> None:
            try:  # noqa: SIM105 (as bench.py's: suppress() would cost more than the rest)
                listener.sendto(up.recv(65535), client)
            except BlockingIOError:
                pass

        def request() -> None:
            try:
                data, client = listener.recvfrom(65535)
            except BlockingIOError:
                return
            up = self.sessions.get(client)
            if up is None:
                up = self.sessions[client] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                up.setblocking(False)
                up.connect(backend)
                loop.add_reader(up.fileno(), reply, up, client)
            up.send(data)

        loop.add_reader(listener.fileno(), request)

    def close(self) -> None:
        for up in self.sessions.values():
            self.loop.remove_reader(up.fileno())
            up.close()
        self.loop.remove_reader(self.listener.fileno())
        self.listener.close()


class CtypesCeiling:
    """The ceiling below the socket module: libc's recvfrom / send / recv / sendto through
    ctypes (PyDLL: the GIL is kept, every socket is non-blocking). A datagram lands in
    one preallocated buffer and leaves from it (no bytes object), the client's raw
    sockaddr bytes are the session key and the reply's destination (no inet_ntop, no
    tuple, no address parse), and an empty socket is a -1 return, not an exception."""

    def __init__(self, loop: asyncio.AbstractEventLoop, backend: tuple) -> None:
        self.loop = loop
        self.listener = bound()
        self.sessions: dict[bytes, socket.socket] = {}
        libc = ctypes.PyDLL(None, use_errno=True)
        recvfrom, send, recv, sendto = libc.recvfrom, libc.send, libc.recv, libc.sendto
        buf = ctypes.create_string_buffer(65536)
        name = ctypes.create_string_buffer(16)  # sockaddr_in
        namelen = ctypes.byref(ctypes.c_uint32(16))  # the kernel writes 16 back, always
        lfd = self.listener.fileno()
        listener = self.listener
        sessions = self.sessions

        def reply(ufd: int, client: bytes) -> None:
            n = recv(ufd, buf, 65535, 0)
            if n >= 0:
                sendto(lfd, buf, n, 0, client, 16)

        def request() -> None:
            n = recvfrom(lfd, buf, 65535, 0, name, namelen)
            if n < 0:
                return
            client = name.raw
            ufd = sessions.get(client)
            if ufd is None:
                up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                up.setblocking(False)
                up.connect(backend)
                self.socks.append(up)
                ufd = sessions[client] = up.fileno()
                loop.add_reader(ufd, reply, ufd, client)
            send(ufd, buf, n, 0)

        self.socks: list[socket.socket] = []
        self.listener = listener
        loop.add_reader(lfd, request)

    def close(self) -> None:
        for up in self.socks:
            self.loop.remove_reader(up.fileno())
            up.close()
        self.loop.remove_reader(self.listener.fileno())
        self.listener.close()


class MMsgCeiling(Ceiling):
    """The ceiling with the listener read by recvmmsg (edge.udp.mmsg's BatchReader): one
    ctypes call per wakeup whatever the datagrams waiting (up to 64), the sender's raw
    sockaddr the session key; upstream sockets and replies stay on the socket module
    (send a memoryview of the slot; recv, sendto the session's address tuple)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, backend: tuple) -> None:
        # Ceiling's close, not its __init__: the listener path is this one's own.
        self.loop = loop
        self.listener = bound()
        self.sessions: dict[bytes, socket.socket] = {}
        self.reader = reader = BatchReader(self.listener, recvmmsg())
        listener = self.listener
        sessions = self.sessions
        receive, names, views, lengths = reader.receive, reader.names, reader.views, reader.lengths
        stride, at = reader.stride, reader.at

        def reply(up: socket.socket, client: tuple) -> None:
            try:  # noqa: SIM105
                listener.sendto(up.recv(65535), client)
            except BlockingIOError:
                pass

        def request() -> None:
            for i in range(max(receive(), 0)):
                key = names[i].raw
                up = sessions.get(key)
                if up is None:
                    up = sessions[key] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    up.setblocking(False)
                    up.connect(backend)
                    loop.add_reader(up.fileno(), reply, up, address_of(key))
                up.send(views[i][: lengths[stride * i + at]])

        loop.add_reader(listener.fileno(), request)

    def close(self) -> None:
        super().close()
        self.reader.close()


def proxy_for(
    loop: asyncio.AbstractEventLoop, backend: tuple, subject: str, wildcard: bool
) -> tuple[DatagramProxy | Ceiling, int]:
    """A DatagramProxy to ``backend`` on a fresh listener (dual-stack wildcard or
    127.0.0.1; ``socket_module``: its listener read by the socket module, not recvmmsg),
    or a ceiling's."""
    if subject in ("ceiling", "ctypes", "mmsg"):
        kind = {"ceiling": Ceiling, "ctypes": CtypesCeiling, "mmsg": MMsgCeiling}[subject]
        ceiling = kind(loop, backend)
        return ceiling, ceiling.listener.getsockname()[1]
    server = UDPServer("backend", f"{backend[0]}:{backend[1]}")
    router = UDPRouter("bench", UDPLoadBalancer("backend", [(server, 1)]))
    batch = subject != "socket_module"
    proxy = DatagramProxy("udp", loop, timeout=3.0, max_sessions=10_000, batch=batch)
    proxy.switch(router)
    if wildcard:
        listener = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind(("::", 0))
        listener.setblocking(False)
        wildcard = enable_pktinfo("udp", listener)
    else:
        listener = bound()
    proxy.attach(listener, wildcard=wildcard)
    return proxy, listener.getsockname()[1]


async def echo(n: int, clients: int, subject: str, wildcard: bool) -> None:
    """``n`` round trips, ``clients`` sockets each with one datagram in flight."""
    loop = asyncio.get_running_loop()
    backend = bound()

    def echoed() -> None:  # the echo server: one datagram per wakeup (epoll reports the rest)
        try:
            data, peer = backend.recvfrom(65535)
        except BlockingIOError:
            return
        backend.sendto(data, peer)

    loop.add_reader(backend.fileno(), echoed)
    proxy = None
    if subject == "direct":
        target = backend.getsockname()
    else:
        proxy, port = proxy_for(loop, backend.getsockname(), subject, wildcard)
        target = (HOST, port)
    done = loop.create_future()
    left = [n]
    socks = []

    def replied(sock: socket.socket) -> None:
        try:
            data = sock.recv(65535)
        except BlockingIOError:
            return
        left[0] -= 1
        if left[0] > 0:
            sock.send(data)
        elif not done.done():
            done.set_result(None)

    for _ in range(clients):
        sock = bound()
        sock.connect(target)
        loop.add_reader(sock.fileno(), replied, sock)
        socks.append(sock)
    for sock in socks:
        sock.send(PAYLOAD)
    await asyncio.wait_for(done, 600)
    for sock in socks:
        loop.remove_reader(sock.fileno())
        sock.close()
    loop.remove_reader(backend.fileno())
    backend.close()
    if proxy is not None:
        proxy.close()


async def oneway(n: int, clients: int, subject: str, wildcard: bool) -> None:
    """``n`` datagrams to a sink, sent in bursts of BURST round robin over ``clients``."""
    loop = asyncio.get_running_loop()
    sink = bound()
    proxy = None
    if subject == "direct":
        target = sink.getsockname()
    else:
        proxy, port = proxy_for(loop, sink.getsockname(), subject, wildcard)
        target = (HOST, port)
    socks = []
    for _ in range(clients):
        sock = bound()
        sock.connect(target)
        socks.append(sock)
    done = loop.create_future()
    state = {"arrived": 0, "sent": 0, "burst_end": 0}

    def burst() -> None:
        count = min(BURST, n - state["sent"])
        start = state["sent"]
        for i in range(start, start + count):
            socks[i % clients].send(PAYLOAD)
        state["sent"] += count
        state["burst_end"] = state["sent"]

    def arrived() -> None:  # the sink: one datagram per wakeup
        try:
            sink.recv(65535)
        except BlockingIOError:
            return
        state["arrived"] += 1
        if state["arrived"] >= n:
            if not done.done():
                done.set_result(None)
        elif state["arrived"] == state["burst_end"]:
            burst()

    loop.add_reader(sink.fileno(), arrived)
    burst()
    await asyncio.wait_for(done, 600)
    loop.remove_reader(sink.fileno())
    sink.close()
    for sock in socks:
        sock.close()
    if proxy is not None:
        proxy.close()


def run(mode: str, n: int, clients: int, subject: str, wildcard: bool, profile: bool) -> float:
    """Seconds per unit (a round trip or a datagram) over ``n`` units after a warm-up."""
    main = echo if mode == "echo" else oneway

    async def measured() -> float:
        await main(min(n, 2_000), clients, subject, wildcard)  # warm-up: caches, specialization
        prof = cProfile.Profile() if profile else None
        if prof:
            prof.enable()
        start = time.perf_counter()
        await main(n, clients, subject, wildcard)
        elapsed = time.perf_counter() - start
        if prof:
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)
        return elapsed / n

    return uvloop.run(measured())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="echo", choices=["echo", "oneway"])
    p.add_argument("--clients", type=int, default=1)
    p.add_argument(
        "--datagrams", type=int, default=100_000, help="round trips (echo) or datagrams (oneway)"
    )
    p.add_argument("--wildcard", action="store_true", help="the proxy listens on every address")
    p.add_argument(
        "--direct", action="store_true", help="no proxy: the clients' and backend's own cost"
    )
    p.add_argument("--ceiling", action="store_true", help="the least uvloop proxy, not edge")
    p.add_argument("--ctypes", action="store_true", help="the least proxy on libc through ctypes")
    p.add_argument(
        "--mmsg", action="store_true", help="the least proxy, its listener read by recvmmsg"
    )
    p.add_argument(
        "--socket-module",
        action="store_true",
        help="edge with its listener read by the socket module (no recvmmsg)",
    )
    p.add_argument("--profile", action="store_true")
    p.add_argument(
        "--instructions", action="store_true", help="count instructions per unit with callgrind"
    )
    args = p.parse_args()
    kinds = ("direct", "ceiling", "ctypes", "mmsg", "socket_module")
    chosen = [k for k in kinds if getattr(args, k)]
    if len(chosen) > 1:
        p.error(f"{', '.join(chosen)}: one subject at a time")
    subject = chosen[0] if chosen else "edge"
    unit = "round trip" if args.mode == "echo" else "datagram"
    what = (
        f"{args.mode}, {args.clients} client{'s' if args.clients > 1 else ''}"
        + (", wildcard" if args.wildcard else "")
        + (", ceiling" if args.ceiling else "")
        + (", ctypes" if args.ctypes else "")
        + (", recvmmsg" if args.mmsg else "")
        + (", socket module" if args.socket_module else "")
    )
    flags = [
        "--mode",
        args.mode,
        "--clients",
        str(args.clients),
        *(["--wildcard"] if args.wildcard else []),
    ]
    if args.instructions:
        small, large = 2_000, 12_000
        subject = [*flags, *(["--" + subject.replace("_", "-")] if subject != "edge" else [])]
        proxied = callgrind.per_unit(__file__, "--datagrams", subject, small, large)
        direct = callgrind.per_unit(__file__, "--datagrams", [*flags, "--direct"], small, large)
        print(
            f"{what}: {proxied - direct:,.0f} instructions per {unit} in the proxy "
            f"({proxied:,.0f} proxied - {direct:,.0f} direct; callgrind)"
        )
        return
    per = run(args.mode, args.datagrams, args.clients, subject, args.wildcard, args.profile)
    print(
        f"{what}{', direct' if args.direct else ''}: {per * 1e6:.2f} us per {unit} "
        f"({args.datagrams} {unit}s)"
    )


if __name__ == "__main__":
    main()
