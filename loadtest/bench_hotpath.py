"""The Python cost of one proxied request, without sockets.

Drives the real protocol objects (HTTPConnection, UpstreamConnection, codecs,
router, pools) through a keep-alive GET with fake transports that only record
what is written, so the figure is edge's own per-request work, free of kernel
and load-generator noise. ``--profile`` prints where it goes.

    python loadtest/bench_hotpath.py [--parser h11] [--varied | --new-connection]
                                     [--requests 200000] [--profile | --instructions]

``--varied`` makes every request and response head differ from the one before
(a counter header each way), as ``bench.py``'s keepalive-varied scenario does:
the quick paths then parse each head rather than recognize it.

``--new-connection``: each request on a connection of its own, as ``bench.py``'s
new-connection scenario sends it (``Connection: close``): the connection is
made (what the entrypoint's ``arrive()`` makes for plain HTTP), takes one
request, is closed after its response and lost; the upstream connection stays
pooled from client to client. What uvloop and the kernel do per connection is
not in the figure.

``--ceiling``: the same load through ``loadtest/ceiling.py``'s protocols (the
least a uvloop + httptools proxy can do per request) instead of edge's, so the
gap is counted the same way. With ``--new-connection`` each client makes its
ceiling objects and parsers; its upstream connection is attached, not dialed
(edge's stays pooled; the ceiling dials one per client, which is not counted).

``--middleware KIND``: the route has one middleware (:data:`MIDDLEWARES`: one
that lets every request through), so it takes the general path: its cost beside
the express route's, the same load otherwise. The load is what that middleware
reads (:data:`LOADS`: credentials, an Origin, an Accept-Encoding and a 4 KiB text
body to compress); ``--load KIND`` alone sends that load to the route without the
middleware, the figure to compare with.

``--instructions``: instructions per request, counted by callgrind (valgrind),
which is deterministic where timings on a shared machine are not: the run is
made twice under callgrind, at two request counts, and the difference divided
by the difference in requests (start-up and warm-up cancel out).

    python loadtest/bench_hotpath.py --live edge|nginx|ceiling [--new-connection] [--seconds 8]

``--live``: the whole server over real sockets, as ``bench.py`` loads it: edge
(``python -m edge run``, a Host router to a backend nginx), nginx (proxying to
it, upstream keep-alive, as bench.py's) or ``loadtest/ceiling.py`` under
callgrind, wrk -t1 -c50 for 3 s, then the counters zeroed (``callgrind_control``),
wrk again for ``--seconds``, the counters dumped: user-space instructions of the
server's process per request wrk counted (uvloop and libuv included; the
kernel's share is not). With ``--new-connection`` wrk sends ``Connection: close``
(ceiling.py then dials its backend per connection: not comparable). Repeat runs
agree within about 1 %; a lone request in flight (one connection) counts other
figures (fewer events per loop iteration).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httptools
import msgspec
import uvloop

from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.http.codec.parsers import parser_classes
from edge.http.server.connection import HTTPConnection, HTTPContext
from edge.http.server.upstream import UpstreamConnection
from edge.router.factory import build_http_routers
from edge.router.http import Observers
from edge.transports import TransportRegistry

REQUEST = b"GET / HTTP/1.1\r\nHost: bench.local\r\n\r\n"
REQUEST_CLOSE = b"GET / HTTP/1.1\r\nHost: bench.local\r\nConnection: close\r\n\r\n"  # wrk -H 'Connection: close'
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 21 Nov 2026 07:05:32 GMT\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\nhello world\n"
)


TEXT_4K = b"".join(
    b"line %04d of a 4 KiB text body, as a page or an API answer\n" % i for i in range(70)
)[:4096]
RESPONSE_4K = (
    b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 21 Nov 2026 07:05:32 GMT\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 4096\r\nConnection: keep-alive\r\n\r\n"
) + TEXT_4K

MIDDLEWARES: dict[str, dict] = {
    "ipAllowList": {"ipAllowList": {"sourceRange": ["10.0.0.0/8", "127.0.0.0/8"]}},
    "rateLimit": {"rateLimit": {"average": 1_000_000_000, "burst": 1_000_000_000}},
    "inFlightReq": {"inFlightReq": {"amount": 1000}},
    "headers": {"headers": {"customRequestHeaders": {"X-Bench": "1"}}},
    # bcrypt at cost 10 takes tens of ms: a per-request verification would show
    "basicAuth": {
        "basicAuth": {
            "users": ["bench:$2b$10$WKR2NCA.TWdZ/0vGNJfbu.RsanjnthDSV2JHXfHJZkJsyiw3565GK"]
        }
    },
    "cors": {
        "headers": {
            "accessControlAllowOriginList": ["https://app.example"],
            "accessControlAllowMethods": ["GET", "POST"],
            "accessControlAllowHeaders": ["Content-Type"],
            "accessControlMaxAge": 600,
            "addVaryHeader": True,
            "stsSeconds": 31536000,
            "stsIncludeSubdomains": True,
            "forceSTSHeader": True,
            "frameDeny": True,
            "contentTypeNosniff": True,
            "browserXssFilter": True,
            "referrerPolicy": "same-origin",
            "contentSecurityPolicy": "default-src 'self'",
        }
    },
    "compress": {"compress": {}},
}
"""``--middleware``: the middlewares a bench route may have, each passing every request
(``cors``: the headers middleware with CORS and the security headers)."""

LOADS: dict[str, tuple[bytes, bytes]] = {
    "basicAuth": (b"Authorization: Basic YmVuY2g6YmVuY2g=\r\n", RESPONSE),
    "cors": (b"Origin: https://app.example\r\n", RESPONSE),
    "compress": (b"Accept-Encoding: gzip, deflate, br\r\n", RESPONSE_4K),
}
"""``--load``: what a middleware reads, as (request header lines, response): the
load its route is measured with, and the same route without it (``--load`` alone).
A middleware not named here gets the plain ``REQUEST`` and ``RESPONSE``."""


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
    middleware: dict | None = None,
    **context: object,
) -> tuple[HTTPConnection, UpstreamConnection]:
    """A client connection on an entrypoint with one ``Host(host)`` router, and the
    upstream connection to its only server waiting in the pool, as after a first
    request; both on ``transport`` objects (``transport(peer)``). ``context``: more
    HTTPContext settings; ``middleware``: the route's one middleware (its
    configuration). The unit tests of the express path use it too."""
    router: dict = {"rule": f"Host(`{host}`)", "service": "backend"}
    http: dict = {
        "routers": {"bench": router},
        "services": {"backend": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}]}}},
    }
    if middleware is not None:
        router["middlewares"] = ["m"]
        http["middlewares"] = {"m": middleware}
    conf = msgspec.convert({"http": http}, Configuration)
    runtime = build_runtime(merge({"file": conf}), {"web": "tcp"})
    transports = TransportRegistry(loop)
    transports.update(runtime.servers_transports)
    # The route reports where the context's own exchanges do (the Dataplane decides it
    # per router: edge.entrypoints.observability).
    observers = Observers(context.get("metrics"), context.get("access_log"))  # type: ignore[arg-type]
    router = build_http_routers(runtime, transports, ["web"], observe=lambda *_: observers)["web"]
    request_parser, response_parser = parser_classes(parser)
    ctx = HTTPContext(
        name="web",
        port=80,
        loop=loop,
        request_parser=request_parser,
        response_parser=response_parser,
        **context,
    )
    ctx.router = router
    client = HTTPConnection(ctx)
    client.connection_made(transport((client_ip, 40000)))
    upstream = UpstreamConnection(response_parser)
    upstream.connection_made(transport(("127.0.0.1", 9)))
    backend = router.by_host[host].service.pick()
    backend.transport.put_idle(backend.server, upstream)
    return client, upstream


def variants(varied: bool, load: str | None = None) -> tuple[list[bytes], list[bytes]]:
    """The requests and responses sent in turn (``load``: a :data:`LOADS` entry's)."""
    lines, response = LOADS.get(load or "", (b"", RESPONSE))
    request = REQUEST[:-2] + lines + b"\r\n"
    if not varied:
        return [request], [response]
    requests = [request[:-2] + b"X-Seq: %d\r\n\r\n" % i for i in range(1024)]
    responses = [
        response.replace(b"Connection:", b"X-Request-Id: %08d\r\nConnection:" % i)
        for i in range(1024)
    ]
    return requests, responses


def ceiling_load(varied: bool, new_connection: bool) -> tuple[object, Callable[[], int]]:
    """``loadtest/ceiling.py``'s client and upstream protocols on fake transports, and
    one request through them (what it wrote to clients so far)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import ceiling  # a script beside this one, not a package

    def connect() -> tuple[ceiling.Client, ceiling.Upstream]:
        client = ceiling.Client()  # connection_made without its dial:
        client.transport = FakeTransport(("127.0.0.1", 40001))
        client.waiting, client.chunks = [], []
        client.parser = httptools.HttpRequestParser(client)
        upstream = client.upstream = ceiling.Upstream(client)
        upstream.connection_made(FakeTransport(("127.0.0.1", 9)))
        return client, upstream

    client, upstream = connect()
    requests, responses = variants(varied)
    count = len(requests)
    turn = iter(range(1 << 62))
    written = [0]
    if new_connection:

        def one() -> int:
            c, u = connect()
            c.data_received(REQUEST_CLOSE)
            u.data_received(RESPONSE)
            c.connection_lost(None)
            written[0] += c.transport.written
            return written[0]

    else:

        def one() -> int:
            i = next(turn) % count
            client.data_received(requests[i])
            upstream.data_received(responses[i])
            return client.transport.written

    return upstream, one


def run(
    parser: str,
    n: int,
    profile: bool,
    varied: bool = False,
    new_connection: bool = False,
    ceiling: bool = False,
    middleware: str | None = None,
    load: str | None = None,
) -> float:
    loop = uvloop.new_event_loop()
    try:
        client, upstream = setup(
            loop, parser, middleware=MIDDLEWARES[middleware] if middleware else None
        )
        route = client.ctx.router.by_host["bench.local"]
        assert route.express == (middleware is None), "the route's path is not the one asked"
        requests, responses = variants(varied, load or middleware)
        count = len(requests)
        turn = iter(range(1 << 62))
        written = [0]

        if ceiling:
            upstream, step = ceiling_load(varied, new_connection)

            def one() -> None:
                written[0] = step()

        elif new_connection:
            ctx = client.ctx
            peer = ("127.0.0.1", 40001)

            def one() -> None:
                conn = HTTPConnection(ctx)  # what TCPEntryPoint.arrive() makes for plain HTTP
                transport = FakeTransport(peer)
                conn.connection_made(transport)
                conn.data_received(REQUEST_CLOSE)
                upstream.data_received(RESPONSE)
                assert transport.closing
                conn.connection_lost(None)
                written[0] += transport.written

        else:

            def one() -> None:
                i = next(turn) % count
                client.data_received(requests[i])
                upstream.data_received(responses[i])
                written[0] = client.transport.written

        for _ in range(1000):  # warm-up, and a check that the loop really proxies
            one()
        assert written[0] >= 1000 * len(RESPONSE) - 1000 * 40, "responses not written"
        if middleware == "compress":
            assert written[0] < 1000 * len(TEXT_4K) // 2, "responses not compressed"
        assert not upstream.transport.closing, "the upstream connection serves every request"
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


LIVE_EDGE_STATIC = """entryPoints: {{web: {{address: "127.0.0.1:{port}"}}}}
providers: {{file: {{filename: {d}/dynamic.yaml}}}}
log: {{level: ERROR}}
"""
LIVE_EDGE_DYNAMIC = """http:
  routers: {{bench: {{rule: "Host(`bench.local`)", service: backend}}}}
  services: {{backend: {{loadBalancer: {{servers: [{{url: "http://127.0.0.1:{backend}"}}]}}}}}}
"""


def live(who: str, new_connection: bool, seconds: float) -> None:
    """``--live``: instructions per request of a whole server under wrk (see the module)."""
    import bench_tls  # beside this script: its nginx template and free_port

    for tool in ("valgrind", "callgrind_control", "nginx", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"--live needs {tool}")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        backend, port = bench_tls.free_port(), bench_tls.free_port()
        nginx = {"d": tmp, "ssl": "", "tls": "", "backend": backend}
        (tmp / "backend.conf").write_text(
            bench_tls.NGINX.format(
                name="backend", port=backend, answer='return 200 "hello world\\n";', **nginx
            )
        )
        if who == "nginx":
            (tmp / "nginx.conf").write_text(
                bench_tls.NGINX.format(
                    name="subject", port=port, answer=bench_tls.NGINX_PROXY, **nginx
                )
            )
            argv = ["nginx", "-c", str(tmp / "nginx.conf"), "-p", str(tmp)]
        elif who == "edge":
            (tmp / "static.yaml").write_text(LIVE_EDGE_STATIC.format(port=port, d=tmp))
            (tmp / "dynamic.yaml").write_text(LIVE_EDGE_DYNAMIC.format(backend=backend))
            argv = [sys.executable, "-m", "edge", "run", "--config", str(tmp / "static.yaml")]
        else:
            ceiling = Path(__file__).parent / "ceiling.py"
            argv = [
                sys.executable,
                str(ceiling),
                "--listen",
                f"127.0.0.1:{port}",
                "--backend",
                f"127.0.0.1:{backend}",
            ]
        out = tmp / "callgrind.out"
        server = subprocess.Popen(
            ["nginx", "-c", str(tmp / "backend.conf"), "-p", str(tmp)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
            cwd=Path(__file__).parent.parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONHASHSEED="0"),
        )
        try:
            live_ready(port, proc)
            wrk = ["wrk", "-t1", "-c50", "-H", "Host: bench.local", f"http://127.0.0.1:{port}/"]
            if new_connection:
                wrk[3:3] = ["-H", "Connection: close"]
            live_wrk([*wrk, "-d3"])  # warm-up: pools, caches, the interpreter's specialisations
            subprocess.run(
                ["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True
            )
            requests = live_wrk([*wrk, f"-d{seconds:g}"])
            subprocess.run(
                ["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True
            )
        finally:
            proc.send_signal(signal.SIGQUIT if who == "nginx" else signal.SIGINT)
            proc.wait(60)
            server.send_signal(signal.SIGQUIT)
            server.wait(30)
        dump = Path(f"{out}.1")
        total = int(re.search(r"^(?:totals|summary): (\d+)", dump.read_text(), re.M).group(1))  # type: ignore[union-attr]
    kind = "new connection per request" if new_connection else "keep-alive"
    print(
        f"{who}: {total / requests:,.0f} instructions per proxied GET, {kind}, live (callgrind, {requests:,} requests)"
    )


def live_ready(port: int, proc: subprocess.Popen) -> None:
    """Wait until the server under callgrind answers the bench route (seconds, for edge)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(REQUEST_CLOSE)
                if sock.recv(4096).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the server under callgrind did not answer")
        time.sleep(0.5)


def live_wrk(argv: list[str]) -> int:
    """Run wrk; the requests it counted (every answer a 2xx)."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"wrk saw errors:\n{out}")
    return int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parser", default="httptools", choices=["httptools", "h11"])
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--varied", action="store_true", help="every head differs from the one before")
    p.add_argument(
        "--new-connection", action="store_true", help="a connection per request (Connection: close)"
    )
    p.add_argument(
        "--ceiling", action="store_true", help="loadtest/ceiling.py's protocols instead of edge's"
    )
    p.add_argument(
        "--instructions", action="store_true", help="count instructions per request with callgrind"
    )
    p.add_argument(
        "--live",
        choices=("edge", "nginx", "ceiling"),
        help="a whole server under wrk, with callgrind",
    )
    p.add_argument("--seconds", type=float, default=8.0, help="--live: seconds of wrk counted")
    p.add_argument(
        "--middleware", choices=sorted(MIDDLEWARES), help="the route has this middleware"
    )
    p.add_argument(
        "--load",
        choices=sorted(LOADS),
        help="the requests and responses that middleware reads (default: --middleware's)",
    )
    args = p.parse_args()
    if (args.middleware or args.load) and (args.new_connection or args.ceiling):
        p.error("--middleware and --load are keep-alive scenarios of edge")
    if args.live:
        live(args.live, args.new_connection, args.seconds)
        return
    if args.varied and args.new_connection:
        p.error("--varied and --new-connection are separate scenarios")
    kind = (
        "new connection per request"
        if args.new_connection
        else "varied heads"
        if args.varied
        else "repeated heads"
    )
    who = "ceiling" if args.ceiling else args.parser
    if args.middleware:
        who += f" + {args.middleware}"
    if args.load and args.load != args.middleware:
        who += f" ({args.load}'s load)"
    if args.instructions:
        flags = [
            "--parser",
            args.parser,
            *(["--varied"] if args.varied else []),
            *(["--new-connection"] if args.new_connection else []),
            *(["--ceiling"] if args.ceiling else []),
            *(["--middleware", args.middleware] if args.middleware else []),
            *(["--load", args.load] if args.load else []),
        ]
        import callgrind  # a module beside this script (the tests import this one as loadtest.bench_hotpath)

        per = callgrind.per_unit(__file__, "--requests", flags, 2_000, 12_000)
        print(f"{who}: {per:,.0f} instructions per proxied GET, {kind} (callgrind)")
        return
    us = run(
        args.parser,
        args.requests,
        args.profile,
        args.varied,
        args.new_connection,
        args.ceiling,
        args.middleware,
        args.load,
    )
    print(f"{who}: {us:.2f} us of Python per proxied GET, {kind} ({args.requests} requests)")


if __name__ == "__main__":
    main()
