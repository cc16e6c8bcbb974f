"""What ``metrics.prometheus`` costs a proxied request: metrics on against off.

The same keep-alive GET as ``bench_hotpath.py`` (its ``setup``: the real protocol
objects on fake transports, no sockets), once with the entry point's exchange hook
a metrics :class:`~edge.entrypoints.metrics.Recorder` and once without, in turn:

    python loadtest/bench_metrics.py [--parser h11] [--rounds 7] [--requests 50000]
    python loadtest/bench_metrics.py --instructions [--parser h11]

The default prints CPU microseconds per request (``time.process_time``), the least
of ``--rounds`` alternating runs each way, and the difference in percent;
``--instructions`` counts instructions per request with callgrind
(``callgrind.py``: two request counts, the difference), which does not move with
the machine's load. ``--scrape``: also the time one ``/metrics`` text takes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).parent))
import bench_hotpath  # beside this script

from edge.config.static import Prometheus
from edge.entrypoints.metrics import Registry, render

WAYS = ("off", "on", "hook")


def _noop(ex: object, duration: float) -> None:
    pass


def run(parser: str, n: int, way: str) -> tuple[float, Registry | None]:
    """CPU microseconds per keep-alive request: ``way`` off, on, or ``hook`` (the
    exchange's hook set to a function doing nothing: what the hook costs the exchange
    before the recorder counts anything)."""
    loop = uvloop.new_event_loop()
    try:
        registry = Registry(Prometheus(add_routers_labels=True)) if way == "on" else None
        hook = registry.recorder("web", None) if registry is not None else None
        if way == "hook":
            hook = _noop
        client, upstream = bench_hotpath.setup(loop, parser, access_log=hook)
        request, response = bench_hotpath.REQUEST, bench_hotpath.RESPONSE
        for _ in range(1000):
            client.data_received(request)
            upstream.data_received(response)
        start = time.process_time()
        for _ in range(n):
            client.data_received(request)
            upstream.data_received(response)
        elapsed = time.process_time() - start
        if registry is not None:
            total = registry.collect().get(
                "traefik_entrypoint_requests_total",
                code="200",
                method="GET",
                protocol="http",
                entrypoint="web",
            )
            assert total == n + 1000, f"counted {total} of {n + 1000}"
        return elapsed / n * 1e6, registry
    finally:
        loop.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parser", default="httptools", choices=["httptools", "h11"])
    p.add_argument("--requests", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--metrics", choices=WAYS, help="one run one way (callgrind's)")
    p.add_argument("--instructions", action="store_true")
    p.add_argument("--scrape", action="store_true", help="time one /metrics text too")
    args = p.parse_args()
    if args.metrics:
        run(args.parser, args.requests, args.metrics)
        return
    if args.instructions:
        import callgrind  # beside this script

        per = {
            way: callgrind.per_unit(
                __file__, "--requests", ["--parser", args.parser, "--metrics", way], 2_000, 12_000
            )
            for way in WAYS
        }
        print(
            f"{args.parser}: {per['off']:,.0f} instructions per proxied GET with metrics off,"
            f" {per['on']:,.0f} on ({(per['on'] / per['off'] - 1) * 100:+.1f} %), of which"
            f" {per['hook'] - per['off']:,.0f} the exchange's hook itself (callgrind)"
        )
        return
    best = dict.fromkeys(WAYS, float("inf"))
    registry = None
    for _ in range(args.rounds):
        for way in WAYS:
            us, reg = run(args.parser, args.requests, way)
            best[way] = min(best[way], us)
            registry = reg or registry
    print(
        f"{args.parser}: {best['off']:.2f} us CPU per proxied GET with metrics off,"
        f" {best['on']:.2f} on ({(best['on'] / best['off'] - 1) * 100:+.1f} %),"
        f" {best['hook']:.2f} with a hook doing nothing,"
        f" least of {args.rounds} rounds of {args.requests:,}"
    )
    if args.scrape and registry is not None:
        start = time.perf_counter()
        text = render(registry.collect())
        print(f"one /metrics text: {(time.perf_counter() - start) * 1e3:.2f} ms, {len(text)} bytes")


if __name__ == "__main__":
    main()
