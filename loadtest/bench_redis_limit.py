"""What a rateLimit with its buckets in Redis costs per proxied request, beside the
same limit in memory and the route without it.

``bench_hotpath.py``'s client and upstream connections on recording transports
(its ``setup``), keep-alive GETs one at a time, a real ``redis-server`` started on a
free loopback port (nothing saved): each request of the Redis route waits for its
EVALSHA's answer on the running loop, so the figure holds edge's whole share of it
(the task, the command written, the reply read and parsed) and none of Redis's
(another process). Every limit lets every request through (a rate and burst of
10^9), so each request does the same work.

    python loadtest/bench_redis_limit.py [--route none|local|redis] [--parser h11]
                                         [--requests 20000] [--instructions]

    python loadtest/bench_redis_limit.py --live [--seconds 5] [--connections 50]

``--live``: a whole edge process (``edge run``, the three routes, an nginx backend)
under ``wrk -t1`` for ``--seconds`` per route: requests a second, and the CPU
edge's process took per request (``/proc/<pid>/stat``: user and system), where
concurrent requests share the Redis connection and its writes.

Without ``--route`` every one is run in turn.

Measured on the 2-core development machine (httptools, Redis 7.0 on loopback, load
average 5-6 from other work; instructions by callgrind, the rest best of 3):

    route     instructions/GET   CPU us/GET (user + system)   live: req/s   CPU us/req
    none               31,203      6.7 (6.7 + 0)                 8,202        50.3
    local              66,404     20.0 (20.0 + 0)                7,040        68.5
    redis             175,400    130.0 (106.7 + 23.3)            3,148       102.4

One request at a time, the Redis route pays a round trip's loop turns (the
exchange's task, the write, the reply's read and parse, the task woken) and the
kernel's loopback work; under wrk's 50 connections the commands of a loop turn
share one write, and edge's process spends 34 us more per request than with the
limit in memory. (The in-process figures include this bench's own coroutine per
request; the live ones, the whole server's.) ``--instructions`` counts with
callgrind (``callgrind.py``: two request counts, differenced; redis-server runs
outside valgrind); otherwise CPU time per request, user and system (``os.times``:
the kernel's loopback work for the Redis round trip is charged to the sender),
best of ``--runs``, and the wall time (the round trip included).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_hotpath  # a script beside this one: its setup, request and response
import uvloop

LIMIT = {"average": 1_000_000_000, "burst": 1_000_000_000}


def routes(port: int) -> dict[str, dict | None]:
    redis = {"endpoints": [f"127.0.0.1:{port}"]}
    return {
        "none": None,
        "local": {"rateLimit": dict(LIMIT)},
        "redis": {"rateLimit": dict(LIMIT, redis=redis)},
    }


class Recording(bench_hotpath.FakeTransport):
    """A FakeTransport whose writes wake the bench (the upstream's: a request went)."""

    waiter: asyncio.Future | None = None

    def write(self, data: bytes) -> None:
        super().write(data)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def start_redis() -> tuple[subprocess.Popen, int]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("needs redis-server (apt-get install redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="bench-redis-")
    args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([exe, *args, "--dir", tmp], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16):
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def run(parser: str, route: str, n: int, port: int) -> tuple[float, float, float]:
    """(user CPU, system CPU, wall) seconds per request over ``n`` keep-alive GETs."""
    loop = uvloop.new_event_loop()
    try:
        client, upstream = bench_hotpath.setup(
            loop, parser, transport=Recording, middleware=routes(port)[route]
        )
        assert client.ctx.router.by_host["bench.local"].express == (route == "none")
        up = upstream.transport
        request, response = bench_hotpath.REQUEST, bench_hotpath.RESPONSE

        async def one() -> None:
            before = up.written
            up.waiter = loop.create_future()
            client.data_received(request)
            if up.written == before:  # a waiting step: the request goes when it is done
                await up.waiter
            upstream.data_received(response)

        async def requests(count: int) -> None:
            for _ in range(count):
                await one()

        async def load(count: int) -> None:
            await asyncio.wait_for(requests(count), 60 + count / 100)  # bounded, once

        loop.run_until_complete(load(500))  # warm-up; connections made
        written = client.transport.written
        loop.run_until_complete(load(10))
        assert client.transport.written - written >= 10 * (len(response) - 40), "not proxied"
        before, wall = os.times(), time.perf_counter()
        loop.run_until_complete(load(n))
        after, wall = os.times(), time.perf_counter() - wall
        return (after.user - before.user) / n, (after.system - before.system) / n, wall / n
    finally:
        loop.close()


EDGE_STATIC = """entryPoints: {{web: {{address: "127.0.0.1:{port}"}}}}
providers: {{file: {{filename: {d}/dynamic.yaml}}}}
log: {{level: ERROR}}
"""


def live(seconds: float, connections: int) -> None:
    """``--live``: requests a second and edge's CPU per request, per route, under wrk."""
    import bench_tls  # beside this script: its nginx template and free_port
    import yaml

    for tool in ("nginx", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"--live needs {tool}")
    redis, redis_port = start_redis()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        backend, port = bench_tls.free_port(), bench_tls.free_port()
        (tmp / "backend.conf").write_text(
            bench_tls.NGINX.format(
                name="backend",
                port=backend,
                answer='return 200 "hello world\\n";',
                d=tmp,
                ssl="",
                tls="",
                backend=backend,
            )
        )
        mws = {k: v for k, v in routes(redis_port).items() if v is not None}
        dynamic = {
            "http": {
                "routers": {
                    name: {"rule": f"Host(`{name}.local`)", "service": "backend"}
                    | ({"middlewares": [name]} if name in mws else {})
                    for name in routes(redis_port)
                },
                "services": {
                    "backend": {
                        "loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{backend}"}]}
                    }
                },
                "middlewares": mws,
            }
        }
        (tmp / "dynamic.yaml").write_text(yaml.safe_dump(dynamic))
        (tmp / "static.yaml").write_text(EDGE_STATIC.format(port=port, d=tmp))
        nginx = subprocess.Popen(
            ["nginx", "-c", str(tmp / "backend.conf"), "-p", str(tmp)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        edge = subprocess.Popen(
            [sys.executable, "-m", "edge", "run", "--config", str(tmp / "static.yaml")],
            cwd=Path(__file__).parent.parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _ready(port, edge)
            for name in routes(redis_port):
                wrk = ["wrk", "-t1", f"-c{connections}", "-H", f"Host: {name}.local"]
                url = f"http://127.0.0.1:{port}/"
                subprocess.run([*wrk, "-d1s", url], capture_output=True, timeout=60)  # warm
                cpu = _cpu(edge.pid)
                out = subprocess.run(
                    [*wrk, f"-d{seconds:g}s", url], capture_output=True, text=True, timeout=600
                ).stdout
                cpu = _cpu(edge.pid) - cpu
                count = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
                bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
                print(
                    f"{name:6} {count / seconds:9,.0f} requests/s  {cpu / count * 1e6:6.1f} CPU us"
                    f" per request (edge's process, user + system; {connections} connections)"
                    + (f"  NON-2xx: {bad.group(1)}" if bad else "")
                )
        finally:
            for proc in (edge, nginx, redis):
                proc.kill()
                proc.wait()


def _ready(port: int, proc: subprocess.Popen) -> None:
    """Wait until edge answers the route without middlewares."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: none.local\r\nConnection: close\r\n\r\n")
                if sock.recv(4096).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("edge did not answer")
        time.sleep(0.2)


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--route", choices=["none", "local", "redis"])
    ap.add_argument("--parser", default="httptools", choices=["httptools", "h11"])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--live", action="store_true")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=50)
    args = ap.parse_args()
    if args.live:
        live(args.seconds, args.connections)
        return
    names = [args.route] if args.route else ["none", "local", "redis"]
    if args.instructions:
        import callgrind  # beside this script

        for name in names:
            per = callgrind.per_unit(
                __file__,
                "--requests",
                ["--route", name, "--parser", args.parser, "--runs", "1"],
                500,
                2500,
            )
            print(f"{name:6} {per:10,.0f} instructions per proxied GET ({args.parser})")
        return
    proc, port = start_redis()
    try:
        for name in names:
            runs = [run(args.parser, name, args.requests, port) for _ in range(args.runs)]
            user, system, wall = min(runs, key=lambda r: r[0] + r[1])
            print(
                f"{name:6} {(user + system) * 1e6:7.1f} CPU us/GET (user {user * 1e6:.1f},"
                f" system {system * 1e6:.1f})  {wall * 1e6:7.1f} wall us/GET"
                f"  ({args.parser}, best of {args.runs} x {args.requests:,})"
            )
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
