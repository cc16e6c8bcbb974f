"""The Python cost of one proxied request, without sockets.

Drives the real protocol objects (HTTPConnection, UpstreamConnection, codecs,
router, pools) through a keep-alive GET with fake transports that only record
what is written, so the figure is edge's own per-request work, free of kernel
and load-generator noise. ``--profile`` prints where it goes.

    python loadtest/bench_hotpath.py [--parser h11] [--varied] [--requests 200000] [--profile]

``--varied`` makes every request and response head differ from the one before
(a counter header each way), as ``bench.py``'s keepalive-varied scenario does:
the quick paths then parse each head rather than recognize it.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time

import msgspec
import uvloop

from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.http.connection import HTTPConnection, HTTPContext
from edge.http.parsers import parser_classes
from edge.http.upstream import UpstreamConnection
from edge.router.factory import build_http_routers
from edge.transports import TransportRegistry

REQUEST = b"GET / HTTP/1.1\r\nHost: bench.local\r\n\r\n"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 21 Nov 2026 07:05:32 GMT\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\nhello world\n"
)


class FakeTransport:
    """Records writes; the minimum of asyncio.Transport a connection uses."""

    def __init__(self, peer: tuple[str, int]) -> None:
        self.peer = peer
        self.written = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, parts) -> None:
        for p in parts:
            self.written += len(p)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def get_extra_info(self, name: str, default=None):
        return self.peer if name == "peername" else default

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


def setup(
    loop: asyncio.AbstractEventLoop,
    parser: str,
    *,
    host: str = "bench.local",
    client_ip: str = "127.0.0.1",
    transport: type = FakeTransport,
) -> tuple[HTTPConnection, UpstreamConnection]:
    """A client connection on an entrypoint with one ``Host(host)`` router, and the
    upstream connection to its only server waiting in the pool, as after a first
    request; both on ``transport`` objects (``transport(peer)``). The unit tests of
    the express path use it too."""
    conf = msgspec.convert(
        {
            "http": {
                "routers": {"bench": {"rule": f"Host(`{host}`)", "service": "backend"}},
                "services": {"backend": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}]}}},
            }
        },
        Configuration,
    )
    runtime = build_runtime(merge({"file": conf}), {"web": "tcp"})
    transports = TransportRegistry(loop)
    transports.update(runtime.servers_transports)
    router = build_http_routers(runtime, transports, ["web"])["web"]
    request_parser, response_parser = parser_classes(parser)
    ctx = HTTPContext(
        name="web", port=80, loop=loop, request_parser=request_parser, response_parser=response_parser
    )
    ctx.router = router
    client = HTTPConnection(ctx)
    client.connection_made(transport((client_ip, 40000)))
    upstream = UpstreamConnection(response_parser)
    upstream.connection_made(transport(("127.0.0.1", 9)))
    backend = router.by_host[host].service.pick()
    backend.transport.put_idle(backend.server, upstream)
    return client, upstream


def variants(varied: bool) -> tuple[list[bytes], list[bytes]]:
    if not varied:
        return [REQUEST], [RESPONSE]
    requests = [REQUEST[:-2] + b"X-Seq: %d\r\n\r\n" % i for i in range(1024)]
    responses = [RESPONSE.replace(b"Connection:", b"X-Request-Id: %08d\r\nConnection:" % i) for i in range(1024)]
    return requests, responses


def run(parser: str, n: int, profile: bool, varied: bool = False) -> float:
    loop = uvloop.new_event_loop()
    try:
        client, upstream = setup(loop, parser)
        requests, responses = variants(varied)
        count = len(requests)
        turn = iter(range(1 << 62))

        def one() -> None:
            i = next(turn) % count
            client.data_received(requests[i])
            upstream.data_received(responses[i])

        for _ in range(1000):  # warm-up, and a check that the loop really proxies
            one()
        assert client.transport.written >= 1000 * len(RESPONSE) - 1000 * 40, "responses not written"
        prof = cProfile.Profile() if profile else None
        if prof:
            prof.enable()
        start = time.perf_counter()
        for _ in range(n):
            one()
        elapsed = time.perf_counter() - start
        if prof:
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return elapsed / n * 1e6
    finally:
        loop.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parser", default="httptools", choices=["httptools", "h11"])
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--varied", action="store_true", help="every head differs from the one before")
    args = p.parse_args()
    us = run(args.parser, args.requests, args.profile, args.varied)
    kind = "varied heads" if args.varied else "repeated heads"
    print(f"{args.parser}: {us:.2f} us of Python per proxied keep-alive GET, {kind} ({args.requests} requests)")


if __name__ == "__main__":
    main()
