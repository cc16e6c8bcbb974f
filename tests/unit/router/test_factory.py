"""The router factory (edge.router.factory): what each router's pipeline is built from.

Traefik builds a router's middlewares for that router, so a rateLimit's buckets, an
inFlightReq's counts and a circuitBreaker's state belong to each router naming it; edge
shares the stateless kinds (one instance per name) and builds those per router.
"""

from __future__ import annotations

import asyncio

from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.router.factory import build_http_routers
from edge.transports import TransportRegistry
from tests.unit.config.documents import EPS, conf, lb


def routes(middlewares: dict, routers: dict[str, list[str]]) -> dict:
    """Each router's Route, built by the factory for the ``web`` entrypoint."""
    http = {
        "routers": {
            name: {"rule": f"Host(`{name}`)", "service": "app", "middlewares": mws}
            for name, mws in routers.items()
        },
        "services": {"app": lb("http://127.0.0.1:9001")},
        "middlewares": middlewares,
    }
    runtime = build_runtime(merge({"file": conf({"http": http})}), EPS)
    loop = asyncio.new_event_loop()
    try:
        router = build_http_routers(runtime, TransportRegistry(loop), ["web"])["web"]
    finally:
        loop.close()
    return {route.name.removesuffix("@file"): route for route in router.by_host.values()}


MIDDLEWARES = {
    "limit": {"rateLimit": {"average": 1, "period": "1m", "burst": 1}},
    "one": {"inFlightReq": {"amount": 1}},
    "breaker": {"circuitBreaker": {"expression": "NetworkErrorRatio() > 0.5"}},
    "tag": {"headers": {"customRequestHeaders": {"X-Tag": "t"}}},
}


def test_rate_limit_in_flight_req_and_circuit_breaker_are_built_per_router():
    names = ["tag", "limit", "one", "breaker"]
    built = routes(MIDDLEWARES, {"a": names, "b": names})
    a, b = built["a"].pipeline.steps, built["b"].pipeline.steps
    assert built["a"].pipeline is not built["b"].pipeline
    assert len(a) == len(b) == 3  # headers has no per-request step
    for mine, theirs in zip(a, b, strict=True):
        assert type(mine) is type(theirs) and mine is not theirs, type(mine).__name__


def test_stateless_middlewares_and_their_pipelines_are_shared():
    built = routes(MIDDLEWARES, {"a": ["tag"], "b": ["tag"]})
    assert built["a"].pipeline is built["b"].pipeline


def test_a_routers_timeouts_are_its_routes_and_keep_it_off_the_express_path():
    http = {
        "routers": {
            "bounded": {"rule": "Host(`bounded`)", "service": "app",
                        "timeouts": {"request": "10s", "backendRequest": "500ms"}},
            "plain": {"rule": "Host(`plain`)", "service": "app"},
        },
        "services": {"app": lb("http://127.0.0.1:9001")},
    }  # fmt: skip
    runtime = build_runtime(merge({"file": conf({"http": http})}), EPS)
    loop = asyncio.new_event_loop()
    try:
        router = build_http_routers(runtime, TransportRegistry(loop), ["web"])["web"]
    finally:
        loop.close()
    bounded, plain = router.by_host["bounded"], router.by_host["plain"]
    assert (bounded.deadline, bounded.try_timeout) == (10.0, 0.5) and not bounded.express
    assert (plain.deadline, plain.try_timeout) == (0.0, 0.0) and plain.express
