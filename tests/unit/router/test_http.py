"""HTTP services as the routers hold them (edge.router.http): a load balancer skips the
servers its health set holds, a failover picks its main service while that has a
server up, a weighted service skips a child with none."""

from __future__ import annotations

import asyncio
from collections import Counter

from edge.router.http import Backend, Failover, LoadBalancer, Weighted
from edge.transports import ServerURL, TransportRegistry

URLS = [f"http://10.0.0.{i}:80" for i in range(1, 4)]


def balancer(
    name: str, urls: list[str], down: set[str] | None, weights: list[int] | None = None
) -> LoadBalancer:
    loop = asyncio.new_event_loop()
    try:
        transport = TransportRegistry(loop).get("default@internal")
    finally:
        loop.close()
    backends = [
        (Backend(name, ServerURL(u), transport, True), w)
        for u, w in zip(urls, weights or [1] * len(urls), strict=True)
    ]
    return LoadBalancer(name, backends, True, True, down=down)


def urls(service, n: int) -> Counter[str | None]:
    return Counter(b.server.url if b else None for b in (service.pick() for _ in range(n)))


def test_a_load_balancer_skips_the_servers_down():
    down: set[str] = set()
    lb = balancer("app", URLS, down, [3, 2, 1])
    assert urls(lb, 60) == {URLS[0]: 30, URLS[1]: 20, URLS[2]: 10}
    down.add(URLS[0])  # as a check does: in place, read at the next pick
    assert urls(lb, 60) == {URLS[1]: 40, URLS[2]: 20}
    down.update(URLS)
    assert urls(lb, 5) == {None: 5}  # no server up: the service answers 503
    down.clear()
    assert set(urls(lb, 6)) == set(URLS)


def test_one_server_with_health_is_never_picked_without_looking():
    """``single`` lets the exchange skip ``pick()``: never with a health set to read."""
    down: set[str] = set()
    lb = balancer("app", URLS[:1], down)
    assert lb.single is None
    down.add(URLS[0])
    assert lb.pick() is None
    assert balancer("app", URLS[:1], None).single is not None


def test_an_update_in_place_keeps_reading_the_same_health():
    down = {URLS[1]}
    lb = balancer("app", URLS[:2], down)
    fresh = balancer("app", URLS, None)
    lb.update([(b, 1) for b in fresh.backends])
    assert [b.server.url for b in lb.backends] == URLS
    assert urls(lb, 10) == {URLS[0]: 5, URLS[2]: 5}


def test_failover_takes_the_fallback_while_the_main_service_has_no_server_up():
    main_down: set[str] = set()
    main = balancer("main", URLS[:2], main_down)
    spare = balancer("spare", URLS[2:], set())
    failover = Failover("fo", main, spare)
    assert set(urls(failover, 4)) == set(URLS[:2])
    main_down.add(URLS[0])
    assert urls(failover, 4) == {URLS[1]: 4}  # one main server up: still the main
    main_down.add(URLS[1])
    assert urls(failover, 4) == {URLS[2]: 4}
    main_down.clear()
    assert set(urls(failover, 4)) == set(URLS[:2])


def test_a_failover_with_nothing_up_is_skipped_by_its_parent():
    main = balancer("main", URLS[:1], {URLS[0]})
    spare = balancer("spare", URLS[1:2], {URLS[1]})
    other = balancer("other", URLS[2:], None)
    weighted = Weighted("w", [(Failover("fo", main, spare), 1), (other, 1)])
    assert urls(weighted, 6) == {URLS[2]: 6}


def test_a_failover_missing_a_child_serves_with_the_other():
    spare = balancer("spare", URLS[2:], None)
    assert urls(Failover("fo", None, spare), 2) == {URLS[2]: 2}
    assert urls(Failover("fo", None, None), 2) == {None: 2}


def test_a_weighted_child_with_no_server_up_is_skipped():
    down: set[str] = set()
    one = balancer("one", URLS[:1], down)
    two = balancer("two", URLS[1:2], None)
    weighted = Weighted("w", [(one, 1), (two, 1)])
    assert urls(weighted, 4) == {URLS[0]: 2, URLS[1]: 2}
    down.add(URLS[0])
    assert urls(weighted, 4) == {URLS[1]: 4}
