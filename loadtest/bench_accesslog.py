"""What the access log costs a proxied request: off, ``common`` and ``json``.

The same keep-alive GET as ``bench_hotpath.py`` (its ``setup``: the real protocol
objects on fake transports, no sockets, the express path), with the entry point's
exchange hook an :class:`~edge.entrypoints.accesslog.AccessLogger` writing to
``/dev/null`` (its writer's thread included), or none:

    python loadtest/bench_accesslog.py [--parser h11] [--rounds 5] [--requests 50000]
    python loadtest/bench_accesslog.py --instructions [--parser h11]

The default prints CPU microseconds per request (``time.process_time``, the writer's
thread included), the least of ``--rounds`` runs each way; ``--instructions`` counts
instructions per request with callgrind (``callgrind.py``), which does not move with
the machine's load. ``bufferingSize`` is 100 (lines go to the writer every 100
requests; with 0 the timer hands them over every 100 ms, which a bench without a
running loop never fires).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).parent))
import bench_hotpath  # beside this script

from edge.config.loader import decode_static
from edge.entrypoints.accesslog import AccessLogger

WAYS = ("off", "common", "json")


def run(parser: str, n: int, way: str) -> float:
    """CPU microseconds per keep-alive request with the access log ``way``."""
    loop = uvloop.new_event_loop()
    log = None
    try:
        if way != "off":
            config = {"filePath": "/dev/null", "format": way, "bufferingSize": 100}
            static = decode_static({"accessLog": config})
            assert static.access_log is not None
            log = AccessLogger(static.access_log, loop)
        client, upstream = bench_hotpath.setup(loop, parser, access_log=log)
        request, response = bench_hotpath.REQUEST, bench_hotpath.RESPONSE
        for _ in range(1000):
            client.data_received(request)
            upstream.data_received(response)
        start = time.process_time()
        for _ in range(n):
            client.data_received(request)
            upstream.data_received(response)
        if log is not None:
            log.flush()
            assert log.writer.wait_idle(30)
        elapsed = time.process_time() - start
        if log is not None:
            assert log.writer.written == n + 1000, log.writer.written
        return elapsed / n * 1e6
    finally:
        if log is not None:
            log.close()
        loop.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parser", default="httptools", choices=["httptools", "h11"])
    p.add_argument("--requests", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--log", choices=WAYS, help="one run one way (callgrind's)")
    p.add_argument("--instructions", action="store_true")
    args = p.parse_args()
    if args.log:
        run(args.parser, args.requests, args.log)
        return
    if args.instructions:
        import callgrind  # beside this script

        per = {
            way: callgrind.per_unit(
                __file__, "--requests", ["--parser", args.parser, "--log", way], 2_000, 12_000
            )
            for way in WAYS
        }
        print(
            f"{args.parser}: {per['off']:,.0f} instructions per proxied GET with the access"
            f" log off, {per['common']:,.0f} common (+{per['common'] - per['off']:,.0f}),"
            f" {per['json']:,.0f} json (+{per['json'] - per['off']:,.0f}) (callgrind)"
        )
        return
    best = dict.fromkeys(WAYS, float("inf"))
    for _ in range(args.rounds):
        for way in WAYS:
            best[way] = min(best[way], run(args.parser, args.requests, way))
    print(
        f"{args.parser}: {best['off']:.2f} us CPU per proxied GET with the access log off,"
        f" {best['common']:.2f} common, {best['json']:.2f} json,"
        f" least of {args.rounds} rounds of {args.requests:,}"
    )


if __name__ == "__main__":
    main()
