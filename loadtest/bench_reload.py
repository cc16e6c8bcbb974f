"""What applying a configuration costs, phase by phase, and what it costs the event loop.

Builds a file-provider configuration with N routers (each its own host and
service), then times one new configuration: merge, validation (rules
compiled), ServersTransports plan, router build; then an endpoints-only change
of every service (the in-place path: no router build). Last, the longest stall
of the event loop (a 1 ms ticker's largest gap) while a real Watcher applies
such a configuration to a real Dataplane, inline and offloaded to its thread.

    python loadtest/bench_reload.py [--routers 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import msgspec
import uvloop

from edge.app import Dataplane
from edge.config.diff import changed_servers
from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.config.static import StaticConfig
from edge.providers.base import Message
from edge.router.factory import build_router_sets, servers_for
from edge.transports import TransportRegistry
from edge.watcher import Watcher


def configuration(n: int, port: int = 9000) -> Configuration:
    routers = {
        f"r{i}": {"rule": f"Host(`h{i}.test`) && PathPrefix(`/p{i % 7}`)", "service": f"s{i}"}
        for i in range(n)
    }
    services = {
        f"s{i}": {
            "loadBalancer": {"servers": [{"url": f"http://10.0.{i // 250}.{i % 250}:{port}"}]}
        }
        for i in range(n)
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
        plan, t_transports = timed(transports.plan, runtime.servers_transports)
        transports.commit(plan)
        services: dict = {}
        _, t_build = timed(build_router_sets, runtime, transports, ["web"], services)
        merged2, t_merge2 = timed(merge, {"file": changed})
        runtime2, t_validate2 = timed(build_runtime, merged2, entry_points, previous=runtime)
        names, t_diff = timed(changed_servers, runtime.configuration, runtime2.configuration)
        assert names is not None and len(names) == args.routers, "an endpoints-only change"
        _, t_inplace = timed(servers_for, services, runtime2, names, transports)
        print(
            f"{args.routers} routers: merge {t_merge:.0f} ms, validate {t_validate:.0f} ms, "
            f"transports {t_transports:.1f} ms, build {t_build:.0f} ms; endpoints-only change of every "
            f"service: merge {t_merge2:.0f} ms, validate {t_validate2:.0f} ms (rules cached), "
            f"diff {t_diff:.0f} ms, in place {t_inplace:.0f} ms"
        )
    for offload in (False, True):
        stall = loop.run_until_complete(watcher_stall(first, offload))
        print(
            f"{args.routers} routers through Watcher + Dataplane, offload={offload}: longest loop stall {stall:.0f} ms"
        )
    loop.close()


async def watcher_stall(conf: Configuration, offload: bool) -> float:
    """The largest gap of a 1 ms ticker while a Watcher applies ``conf`` to a Dataplane."""
    loop = asyncio.get_running_loop()
    static = msgspec.convert({"entryPoints": {"web": {"address": "127.0.0.1:0"}}}, StaticConfig)
    plane = Dataplane(static, loop)
    watcher = Watcher(
        entry_points={"web": "tcp"},
        throttle=0.0,
        listeners=plane.listeners,
        loop=loop,
        offload=offload,
    )
    gaps = [0.0]
    running = True

    def tick(last: float) -> None:
        now = time.perf_counter()  # not loop.time(): uvloop caches it per iteration
        gaps.append(now - last)
        if running:
            loop.call_later(0.001, tick, now)

    loop.call_soon(tick, time.perf_counter())
    await asyncio.sleep(0.05)
    watcher.publish(Message("file", conf))
    for _ in range(6000):
        if watcher.applied:
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.02)  # the tick after an inline round records its stall
    running = False
    assert watcher.applied == 1
    await watcher.close()
    plane.transports.close()
    return max(gaps) * 1000


if __name__ == "__main__":
    main()
