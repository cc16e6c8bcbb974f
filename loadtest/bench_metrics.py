"""What ``metrics.prometheus`` costs a proxied request: metrics on against off.

The same keep-alive GET as ``bench_hotpath.py`` (its ``setup``: the real protocol
objects on fake transports, no sockets), once with the entry point's HTTP context
counting into a metrics :class:`~edge.entrypoints.metrics.Meter` and once without, in
turn:

    python loadtest/bench_metrics.py [--parser h11] [--varied] [--rounds 7] [--requests 50000]
    python loadtest/bench_metrics.py --instructions [--parser h11] [--varied] [--ways off,on]

The default prints CPU microseconds per request (``time.process_time``), the least
of ``--rounds`` alternating runs each way, and the difference in percent;
``--instructions`` counts instructions per request with callgrind
(``callgrind.py``: two request counts, the difference), which does not move with
the machine's load; ``--ways`` picks which of off, on and hook it counts.
``--varied``: every request and response head differs from the one before
(``bench_hotpath.variants``), so the quick paths parse each head.
``--scrape``: also the time one ``/metrics`` text takes.

    python loadtest/bench_metrics.py --live [--rounds 3] [--seconds 5]

``--live``: a whole ``edge run`` (a Host router to a backend nginx, as
``bench_hotpath.py --live`` sets it up) under ``wrk -t1 -c50``, keep-alive, with
``metrics.prometheus`` on and off in turn: the edge process's CPU time
(``/proc/PID/stat``) per request wrk counted, the least of ``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
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


def run(parser: str, n: int, way: str, varied: bool = False) -> tuple[float, Registry | None]:
    """CPU microseconds per keep-alive request: ``way`` off, on, or ``hook`` (an access
    log hook doing nothing: what timing the exchange and calling a hook cost, which
    the metrics do without)."""
    loop = uvloop.new_event_loop()
    try:
        registry = Registry(Prometheus(add_routers_labels=True)) if way == "on" else None
        meter = registry.meter("web") if registry is not None else None
        hook = _noop if way == "hook" else None
        client, upstream = bench_hotpath.setup(loop, parser, access_log=hook, metrics=meter)
        requests, responses = bench_hotpath.variants(varied)
        count = len(requests)
        for i in range(1000):
            client.data_received(requests[i % count])
            upstream.data_received(responses[i % count])
        start = time.process_time()
        for i in range(n):
            client.data_received(requests[i % count])
            upstream.data_received(responses[i % count])
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


def _cpu(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def live(rounds: int, seconds: float) -> None:
    """``--live`` (see the module doc)."""
    import bench_tls  # beside this script: its nginx template and free_port

    for tool in ("nginx", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"--live needs {tool}")
    seen: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        backend = bench_tls.free_port()
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
        (tmp / "dynamic.yaml").write_text(bench_hotpath.LIVE_EDGE_DYNAMIC.format(backend=backend))
        nginx = subprocess.Popen(["nginx", "-c", str(tmp / "backend.conf"), "-p", str(tmp)])
        try:
            for _ in range(rounds):
                for way in ("off", "on"):
                    seen[way].append(_live_once(tmp, way == "on", seconds))
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)
    best = {way: min(values) for way, values in seen.items()}
    print(
        f"edge under wrk -c50, keep-alive: {best['off']:.1f} us CPU per request with metrics"
        f" off, {best['on']:.1f} on ({(best['on'] / best['off'] - 1) * 100:+.1f} %),"
        f" least of {rounds} rounds of {seconds:g} s"
    )
    for way, values in seen.items():  # the spread: the machine may be shared
        print(f"  {way}: " + ", ".join(f"{v:.1f}" for v in values))


def _live_once(tmp: Path, metrics: bool, seconds: float) -> float:
    import bench_tls

    port = bench_tls.free_port()
    static = bench_hotpath.LIVE_EDGE_STATIC.format(port=port, d=tmp)
    if metrics:
        # /metrics on an entry point of its own: one that answers anything itself
        # (/ping, /metrics) has no express path, which is not the metrics' cost.
        static = static.replace(
            "entryPoints: {",
            f'entryPoints: {{traefik: {{address: "127.0.0.1:{bench_tls.free_port()}"}}, ',
            1,
        )
        static += "metrics: {prometheus: {}}\n"
    (tmp / "static.yaml").write_text(static)
    edge = subprocess.Popen(
        [sys.executable, "-m", "edge", "run", "--config", str(tmp / "static.yaml")]
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 20
        while True:
            done = subprocess.run(
                [
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "-H",
                    "Host: bench.local",
                    url,
                ],
                capture_output=True,
                timeout=10,
            )
            if done.stdout == b"200":
                break
            if time.monotonic() > deadline:
                raise SystemExit("edge did not answer the bench route")
            time.sleep(0.1)
        wrk = ["wrk", "-t1", "-c50", "-H", "Host: bench.local", url]
        subprocess.run([*wrk, "-d2s"], capture_output=True, timeout=60, check=True)  # warm-up
        before = _cpu(edge.pid)
        out = subprocess.run(
            [*wrk, f"-d{seconds:g}s"],
            capture_output=True,
            text=True,
            timeout=60 + seconds,
            check=True,
        ).stdout
        used = _cpu(edge.pid) - before
        m = re.search(r"(\d+) requests in", out)
        assert m, out
        return used / int(m.group(1)) * 1e6
    finally:
        edge.terminate()
        edge.wait(timeout=20)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parser", default="httptools", choices=["httptools", "h11"])
    p.add_argument("--requests", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--metrics", choices=WAYS, help="one run one way (callgrind's)")
    p.add_argument("--varied", action="store_true", help="every head differs from the one before")
    p.add_argument("--ways", default=",".join(WAYS), help="--instructions: the ways counted")
    p.add_argument("--instructions", action="store_true")
    p.add_argument("--scrape", action="store_true", help="time one /metrics text too")
    p.add_argument("--live", action="store_true", help="a whole edge under wrk")
    p.add_argument("--seconds", type=float, default=5.0, help="--live: seconds of wrk counted")
    args = p.parse_args()
    if args.live:
        live(args.rounds, args.seconds)
        return
    if args.metrics:
        run(args.parser, args.requests, args.metrics, args.varied)
        return
    if args.instructions:
        import callgrind  # beside this script

        varied = ["--varied"] if args.varied else []
        per = {
            way: callgrind.per_unit(
                __file__,
                "--requests",
                ["--parser", args.parser, "--metrics", way, *varied],
                2_000,
                12_000,
            )
            for way in args.ways.split(",")
        }
        kind = "varied heads" if args.varied else "repeated heads"
        line = f"{args.parser}, {kind}: " + ", ".join(f"{w} {n:,.0f}" for w, n in per.items())
        line += " instructions per proxied GET"
        if "off" in per and "on" in per:
            line += f"; metrics on: {(per['on'] / per['off'] - 1) * 100:+.1f} %"
        if "off" in per and "hook" in per:
            line += f"; an access log hook doing nothing: {per['hook'] - per['off']:+,.0f}"
        print(line + " (callgrind)")
        return
    best = dict.fromkeys(WAYS, float("inf"))
    registry = None
    for _ in range(args.rounds):
        for way in WAYS:
            us, reg = run(args.parser, args.requests, way, args.varied)
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
