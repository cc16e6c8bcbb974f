"""What one middleware costs per request: issue 24's table, from ``bench_hotpath.py``.

For each middleware of the table, the same keep-alive load (``bench_hotpath.LOADS``:
what that middleware reads) through a route with it and through the route without
it (the express path), counted two ways: instructions per request by callgrind
(``bench_hotpath.py --instructions``: deterministic) and CPU microseconds per
request (``time.process_time`` at two request counts, the difference over the
difference, the best of ``--repeat``: the figure moves with the machine's load,
the instructions do not).

    python loadtest/bench_middlewares.py [--requests 20000] [--repeat 3] [--no-instructions]
                                         [--only compress ...]

Rows: basicAuth (a bcrypt hash at cost 10, verified once and then found in the
cache: a verification per request would cost tens of milliseconds), rateLimit (a
bucket that never runs dry), headers with CORS and the security headers (an
allowed Origin), compress (a 4 KiB text body, gzip), ipAllowList.

The headers row, where its cost went (callgrind of its parts, on the 2-core
development machine): the response head rebuilt field by field with its eleven
fixed edits written one by one took 32,600 instructions of the 57,000 it added
over a general-path route; reading the request's headers into a dict and walking
the origin list, 8,000; finding Vary, 5,900. With the edits' lines joined once and
set after a head's own bytes they do not touch (``forward.client_response``), and
CORS finding only the names it reads: 120,500 -> 94,000 instructions per request
(25,100 without it), CPU 29.3-30.2 -> 20.9-21.5 us (3.4-5.1 without). What is left
is the general path itself: a Forward per request, the response's head parsed into
fields and sent apart from its body rather than in one write.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_hotpath  # beside this script
import callgrind

ROWS = ("basicAuth", "rateLimit", "cors", "compress", "ipAllowList")


def cpu_us(middleware: str | None, load: str | None, n: int, repeat: int) -> float:
    """CPU microseconds per request: the process's CPU time for ``n`` requests less
    that for ``n // 5`` (set-up and warm-up cancel out), over the difference; the
    best of ``repeat``."""
    small = n // 5

    def cpu(count: int) -> float:
        start = time.process_time()
        bench_hotpath.run("httptools", count, False, middleware=middleware, load=load)
        return time.process_time() - start

    return min((cpu(n) - cpu(small)) / (n - small) * 1e6 for _ in range(repeat))


def instructions(middleware: str | None, load: str | None) -> float:
    flags = ["--parser", "httptools"]
    if middleware:
        flags += ["--middleware", middleware]
    if load:
        flags += ["--load", load]
    return callgrind.per_unit(bench_hotpath.__file__, "--requests", flags, 2_000, 12_000)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-instructions", action="store_true", help="CPU time only")
    p.add_argument("--only", nargs="+", choices=ROWS, help="these rows only")
    args = p.parse_args()
    print(
        "| middleware | load | instructions/req (without -> with) | CPU us/req (without -> with) |"
    )
    print("|---|---|---|---|")
    for row in args.only or ROWS:
        load = row if row in bench_hotpath.LOADS else None
        base = cpu_us(None, load, args.requests, args.repeat)
        with_mw = cpu_us(row, None, args.requests, args.repeat)
        if args.no_instructions:
            counts = "-"
        else:
            counts = f"{instructions(None, load):,.0f} -> {instructions(row, None):,.0f}"
        print(
            f"| {row} | {load or 'plain GET'} | {counts} | {base:.1f} -> {with_mw:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
