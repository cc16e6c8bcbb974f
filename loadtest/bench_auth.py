"""What basicAuth costs per proxied request, without sockets: its route against the
same route without it.

``bench_hotpath.py``'s client and upstream connections on fake transports (its
``setup``), the entrypoint's router replaced by one whose route has the
middleware under test; every request carries the same ``Authorization: Basic``
header, for a bcrypt user (cost 10), so the figure is the cached verification
(a keyed BLAKE2b of the header and an LRU lookup) and what a middleware with
per-request work costs the exchange (the general path: the head rebuilt with
the headers the middleware sets), against the route without middlewares (the
express path: the head forwarded as it came).

    python loadtest/bench_auth.py [--middleware none|basic|basic-header|headers]
                                  [--parser h11] [--requests 100000] [--instructions]

``--middleware``: ``none`` (the route alone), ``basic`` (basicAuth), ``basic-header``
(basicAuth with ``headerField`` and ``removeHeader``: two header edits per
request), ``headers`` (a headers middleware setting one request header: the
general path's cost without auth, for reference). Without ``--middleware`` every
one is run in turn. ``--instructions`` counts with callgrind (``callgrind.py``:
two request counts, differenced); otherwise the figure is CPU time per request
(``time.process_time``), best of ``--runs`` (3).

Measured on the 2-core development machine (httptools; instructions by callgrind,
CPU by the best of 3 x 50,000 requests, load average 1.5-2.5):

    route             instructions/GET   CPU us/GET
    none (express)            24,186        3.2
    headers (1 edit)          58,584       10.5
    basic (cached)            59,386        8.9
    basic-header              92,128       19.5

basicAuth's own work (header scan, BLAKE2b, LRU) is about 1,000 instructions; the
rest is the general path any middleware with per-request work takes. Setting
headers per request (headerField, removeHeader) costs the exchange another ~33,000:
it merges them into a new HeaderEdits and rebuilds the head for every request.
"""

from __future__ import annotations

import argparse
import base64
import time

import bcrypt
import bench_hotpath  # a script beside this one: its setup, request and response
import msgspec
import uvloop

from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.router.factory import build_http_routers
from edge.transports import TransportRegistry

PASSWORD = b"bench-password"
HASH = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(10)).decode()
AUTHORIZATION = b"Authorization: Basic %s\r\n" % base64.b64encode(b"bench:" + PASSWORD)
REQUEST = bench_hotpath.REQUEST[:-2] + AUTHORIZATION + b"\r\n"
MIDDLEWARES = {
    "none": None,
    "basic": {"basicAuth": {"users": [f"bench:{HASH}"]}},
    "basic-header": {
        "basicAuth": {
            "users": [f"bench:{HASH}"],
            "headerField": "X-Auth-User",
            "removeHeader": True,
        }
    },
    "headers": {"headers": {"customRequestHeaders": {"X-Auth-User": "bench"}}},
}


def run(parser: str, middleware: str, n: int) -> float:
    """CPU seconds per request over ``n`` keep-alive GETs through the route."""
    loop = uvloop.new_event_loop()
    try:
        client, upstream = bench_hotpath.setup(loop, parser)
        mw = MIDDLEWARES[middleware]
        router_conf: dict = {"rule": "Host(`bench.local`)", "service": "backend"}
        http: dict = {
            "routers": {"bench": router_conf},
            "services": {"backend": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}]}}},
        }
        if mw is not None:
            router_conf["middlewares"] = ["mw"]
            http["middlewares"] = {"mw": mw}
        runtime = build_runtime(
            merge({"file": msgspec.convert({"http": http}, Configuration)}), {"web": "tcp"}
        )
        assert runtime.http_routers["bench@file"].status == "enabled", runtime.errors()
        transports = TransportRegistry(loop)
        transports.update(runtime.servers_transports)
        router = build_http_routers(runtime, transports, ["web"])["web"]
        client.ctx.router = router  # the upstream connection goes to this route's pool
        backend = router.by_host["bench.local"].service.pick()
        backend.transport.put_idle(backend.server, upstream)
        response = bench_hotpath.RESPONSE

        def one() -> None:
            client.data_received(REQUEST)
            upstream.data_received(response)

        for _ in range(1000):  # warm-up (the one bcrypt check), and a check that it proxies
            one()
        written = client.transport.written
        assert written >= 1000 * (len(response) - 40), "responses not written"
        assert not upstream.transport.closing, "the upstream connection serves every request"
        start = time.process_time()
        for _ in range(n):
            one()
        elapsed = time.process_time() - start
        per = (client.transport.written - written) / n
        assert per >= len(response) - 40, "not every request was answered by the upstream"
        return elapsed / n
    finally:
        loop.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parser", default="httptools", choices=["httptools", "h11"])
    p.add_argument("--middleware", choices=list(MIDDLEWARES))
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3, help="timed runs; the best is shown")
    p.add_argument("--instructions", action="store_true")
    args = p.parse_args()
    kinds = [args.middleware] if args.middleware else list(MIDDLEWARES)
    for kind in kinds:
        if args.instructions:
            import callgrind  # beside this script

            flags = ["--parser", args.parser, "--middleware", kind, "--runs", "1"]
            per = callgrind.per_unit(__file__, "--requests", flags, 2_000, 12_000)
            print(f"{kind:13} {args.parser}: {per:,.0f} instructions per proxied GET (callgrind)")
        else:
            best = min(run(args.parser, kind, args.requests) for _ in range(args.runs))
            print(f"{kind:13} {args.parser}: {best * 1e6:.2f} us CPU per proxied GET")


if __name__ == "__main__":
    main()
