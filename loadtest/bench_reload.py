"""What applying a configuration costs the event loop, phase by phase.

Builds a file-provider configuration with N routers (each its own host and
service), then times what the watcher and the listeners run on the loop for
one new configuration: merge, validation (rules compiled), ServersTransports
update, router build. Then an endpoints-only change (one service's servers),
which takes the in-place path: no validation of routers, no router build.

    python loadtest/bench_reload.py [--routers 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import msgspec
import uvloop

from edge.config.diff import changed_servers
from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.router.factory import build_router_sets, update_servers
from edge.transports import TransportRegistry


def configuration(n: int, port: int = 9000) -> Configuration:
    routers = {f"r{i}": {"rule": f"Host(`h{i}.test`) && PathPrefix(`/p{i % 7}`)", "service": f"s{i}"} for i in range(n)}
    services = {
        f"s{i}": {"loadBalancer": {"servers": [{"url": f"http://10.0.{i // 250}.{i % 250}:{port}"}]}} for i in range(n)
    }
    return msgspec.convert({"http": {"routers": routers, "services": services}}, Configuration)


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - start) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--routers", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    entry_points = {"web": "tcp"}
    first = configuration(args.routers)
    changed = configuration(args.routers, port=9001)
    for _ in range(args.repeat):
        transports = TransportRegistry(loop)
        merged, t_merge = timed(merge, {"file": first})
        runtime, t_validate = timed(build_runtime, merged, entry_points)
        _, t_transports = timed(transports.update, runtime.servers_transports)
        services: dict = {}
        _, t_build = timed(build_router_sets, runtime, transports, ["web"], services)
        merged2, t_merge2 = timed(merge, {"file": changed})
        runtime2, t_validate2 = timed(build_runtime, merged2, entry_points, previous=runtime)
        names, t_diff = timed(changed_servers, runtime.configuration, runtime2.configuration)
        assert names is not None and len(names) == args.routers, "an endpoints-only change"
        _, t_inplace = timed(update_servers, services, runtime2, names, transports)
        print(
            f"{args.routers} routers: merge {t_merge:.0f} ms, validate {t_validate:.0f} ms, "
            f"transports {t_transports:.1f} ms, build {t_build:.0f} ms; endpoints-only change of every "
            f"service: merge {t_merge2:.0f} ms, validate {t_validate2:.0f} ms (rules cached), "
            f"diff {t_diff:.0f} ms, in place {t_inplace:.0f} ms"
        )
    loop.close()


if __name__ == "__main__":
    main()
