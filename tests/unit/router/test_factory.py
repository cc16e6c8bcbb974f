"""The router factory (edge.router.factory): what each router's pipeline is built from.

Traefik builds a router's middlewares for that router, so a rateLimit's buckets and an
inFlightReq's counts belong to each router naming it; edge shares the stateless kinds
(one instance per name) and builds those two per router.
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
    "tag": {"headers": {"customRequestHeaders": {"X-Tag": "t"}}},
}


def test_rate_limit_and_in_flight_req_are_built_per_router():
    built = routes(MIDDLEWARES, {"a": ["tag", "limit", "one"], "b": ["tag", "limit", "one"]})
    a, b = built["a"].pipeline.steps, built["b"].pipeline.steps
    assert built["a"].pipeline is not built["b"].pipeline
    kinds = [type(step).__name__ for step in a]
    limit, one = kinds.index("RateLimit"), kinds.index("InFlightReq")
    assert a[limit] is not b[limit]
    assert a[one] is not b[one]


def test_stateless_middlewares_and_their_pipelines_are_shared():
    built = routes(MIDDLEWARES, {"a": ["tag"], "b": ["tag"]})
    assert built["a"].pipeline is built["b"].pipeline
