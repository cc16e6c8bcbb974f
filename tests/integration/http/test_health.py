"""Server health through a real edge: loadBalancer.healthCheck takes a failing server
out of the rotation and brings it back, passiveHealthCheck does from the requests'
outcomes, a failover service switches to its fallback
and back, a reload keeps the verdicts, the API shows serverStatus.

The backends are purpose-built (:class:`Scripted`): each answers its health path with
the status the test sets and every other request 200 with its name, and counts the
requests it served. Times are measured from the moment the test flips a backend's
health to the moment edge's answers show it, and asserted with generous bounds (two
cores shared by many); the figures are printed for the report (``pytest -s``).
One edge per codec serves the module; each test swaps in its own services.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.harness import Edge, get, lb
from tests.integration.peers import Scripted

INTERVAL = "200ms"
BOUND = 5.0  # seconds to leave or rejoin the rotation, at an interval of 0.2 s


@pytest.fixture
def servers():
    made = [Scripted("a"), Scripted("b")]
    yield made
    for s in made:
        s.stop()


def checked(*urls: str, **check) -> dict:
    return lb(
        *urls, healthCheck={"path": "/health", "interval": INTERVAL, "timeout": "1s", **check}
    )


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory):
    """One edge per codec for the module: each test swaps in its own services, whose
    servers (:func:`servers`) are new ones on new ports, so no verdict of an earlier
    test's servers can reach it."""
    tmp = tmp_path_factory.mktemp(f"health-{request.param}")
    e = Edge(tmp, {}, parser=request.param, static_extra={"api": {"insecure": True}})
    yield e
    e.stop()


def swap(e: Edge, dyn: dict) -> Edge:
    """``dyn`` applied in place of the earlier test's configuration."""
    applied = e.applied()
    e.write_dynamic(dyn)
    e.wait_applied(applied + 1, timeout=BOUND)
    return e


def start(e: Edge, services: dict, service: str = "app") -> Edge:
    return swap(
        e,
        {
            "http": {
                "routers": {"app": {"rule": "Host(`app.example`)", "service": service}},
                "services": services,
            }
        },
    )


def who(e: Edge) -> tuple[int, bytes]:
    status, _, body = get(e.port, "/", host="app.example")
    return status, body


def until(predicate, timeout: float = BOUND) -> float:
    """Seconds until ``predicate()`` holds (polled every 20 ms); fails after ``timeout``."""
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"not within {timeout}s")
        time.sleep(0.02)
    return time.monotonic() - began


def only(e: Edge, name: bytes, count: int = 6) -> bool:
    """Whether ``count`` requests in a row are all answered 200 by ``name``."""
    return all(who(e) == (200, name) for _ in range(count))


def server_status(e: Edge, service: str) -> dict:
    status, _, body = get(e.ports["traefik"], f"/api/http/services/{service}")
    assert status == 200, body
    return json.loads(body)["serverStatus"]


def test_a_failing_server_leaves_the_rotation_and_rejoins(edge, servers):
    a, b = servers
    e = start(edge, {"app": checked(a.url, b.url)})
    mark = len(e.lines)  # the log before: this test's lines only
    assert {who(e)[1] for _ in range(4)} == {b"a", b"b"}
    a.health = 500
    flipped = time.monotonic()
    e.wait_for(rf"server http://127\.0\.0\.1:{a.port} is down", timeout=BOUND, start=mark)
    marked = time.monotonic() - flipped
    assert server_status(e, "app@file") == {a.url: "DOWN", b.url: "UP"}
    # Not one request reaches a server once it is marked down.
    before = a.served
    answers = [who(e) for _ in range(20)]
    assert answers == [(200, b"b")] * 20
    assert a.served == before
    a.health = 200
    rejoined = until(lambda: who(e) == (200, b"a"))
    assert server_status(e, "app@file") == {a.url: "UP", b.url: "UP"}
    print(f"\nhealthCheck interval 0.2s: down after {marked:.3f}s, back after {rejoined:.3f}s")
    assert marked < BOUND and rejoined < BOUND


def test_a_service_with_no_server_up_answers_503(edge, servers):
    a, _ = servers
    e = start(edge, {"app": checked(a.url)})
    assert who(e) == (200, b"a")
    a.health = 503
    until(lambda: who(e)[0] == 503)
    before = a.served
    assert [who(e)[0] for _ in range(5)] == [503] * 5
    assert a.served == before
    a.health = 200
    until(lambda: who(e) == (200, b"a"))


def test_a_check_expecting_a_status_and_a_hostname(edge, servers):
    """``status`` replaces 2xx/3xx as the healthy answer: a 200 is down where 204 is wanted."""
    a, b = servers
    e = start(edge, {"app": checked(a.url, b.url, status=200, hostname="h.example")})
    mark = len(e.lines)  # the log before: this test's lines only
    a.health = 204
    e.wait_for(rf"server http://127\.0\.0\.1:{a.port} is down", timeout=BOUND, start=mark)
    assert only(e, b"b")


def test_failover_switches_to_the_fallback_and_back(edge, servers):
    a, b = servers
    services = {
        "app": {"failover": {"service": "main", "fallback": "spare"}},
        "main": checked(a.url),
        "spare": lb(b.url),
    }
    e = start(edge, services)
    assert only(e, b"a")
    a.health = 500
    switched = until(lambda: who(e) == (200, b"b"))
    before = a.served
    assert only(e, b"b", 10)
    assert a.served == before
    a.health = 200
    back = until(lambda: who(e) == (200, b"a"))
    assert only(e, b"a")
    print(f"\nfailover: to the fallback after {switched:.3f}s, back after {back:.3f}s")


def test_a_weighted_child_with_no_server_up_is_skipped(edge, servers):
    a, b = servers
    services = {
        "app": {
            "weighted": {
                "services": [{"name": "one", "weight": 1}, {"name": "two", "weight": 1}],
                "healthCheck": {},
            }
        },
        "one": checked(a.url),
        "two": checked(b.url),
    }
    e = start(edge, services)
    assert {who(e)[1] for _ in range(4)} == {b"a", b"b"}
    a.health = 500
    until(lambda: only(e, b"b"))


def test_a_heavy_weighted_child_with_no_server_up_leaves_every_request_to_the_other(edge, servers):
    """At 3:1 the rotation lands on the heavy child twice running: with its only server
    down, the light child still serves every request (none answered 503)."""
    a, b = servers
    services = {
        "app": {
            "weighted": {
                "services": [{"name": "one", "weight": 3}, {"name": "two", "weight": 1}],
                "healthCheck": {},
            }
        },
        "one": checked(a.url),
        "two": checked(b.url),
    }
    e = start(edge, services)
    mark = len(e.lines)  # the log before: this test's lines only
    a.health = 500
    e.wait_for(rf"server http://127\.0\.0\.1:{a.port} is down", timeout=BOUND, start=mark)
    assert [who(e) for _ in range(12)] == [(200, b"b")] * 12


def test_a_reload_keeps_the_servers_down_down(edge, servers):
    """A configuration swap builds new load balancers; the verdicts of servers that
    stay are kept, so a server found down is not sent requests again until a check
    passes (with a 30 s unhealthyInterval, a fresh start would send it requests)."""
    a, b = servers
    services = {"app": checked(a.url, b.url, unhealthyInterval="30s")}
    e = start(edge, services)
    mark = len(e.lines)  # the log before: this test's lines only
    a.health = 500
    e.wait_for(rf"server http://127\.0\.0\.1:{a.port} is down", timeout=BOUND, start=mark)
    applied = e.applied()
    e.write_dynamic(
        {
            "http": {
                "routers": {
                    "app": {"rule": "Host(`app.example`)", "service": "app"},
                    "other": {"rule": "Host(`other.example`)", "service": "app"},
                },
                "services": services,
            }
        }
    )
    e.wait_applied(applied + 1, timeout=BOUND)
    before = a.served
    assert [who(e) for _ in range(10)] == [(200, b"b")] * 10
    assert a.served == before
    assert server_status(e, "app@file")[a.url] == "DOWN"


def test_a_removed_service_stops_being_checked(edge, servers):
    a, b = servers
    e = start(edge, {"app": checked(a.url)})
    until(lambda: a.checks >= 2)
    applied = e.applied()
    e.write_dynamic(
        {
            "http": {
                "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
                "services": {"app": lb(b.url)},
            }
        }
    )
    e.wait_applied(applied + 1, timeout=BOUND)
    time.sleep(0.3)
    checks = a.checks
    time.sleep(1.0)  # five intervals
    assert a.checks == checks


WINDOW = 1.5  # passiveHealthCheck.failureWindow in the tests below, seconds


def passive(*urls: str, attempts: int = 2) -> dict:
    check = {"maxFailedAttempts": attempts, "failureWindow": f"{WINDOW}s"}
    return lb(*urls, passiveHealthCheck=check)


def start_both(e: Edge, services: dict) -> Edge:
    """``app.example`` routed bare (the express path) and ``general.example`` through a
    headers middleware (the general path), both to the service ``app``."""
    dyn = {
        "http": {
            "routers": {
                "app": {"rule": "Host(`app.example`)", "service": "app"},
                "general": {
                    "rule": "Host(`general.example`)",
                    "service": "app",
                    "middlewares": ["tag"],
                },
            },
            "middlewares": {"tag": {"headers": {"customResponseHeaders": {"X-Tag": "t"}}}},
            "services": services,
        }
    }
    return swap(e, dyn)


def test_passive_check_takes_a_server_answering_5xx_out_for_the_window(edge, servers):
    """Traefik's passive check: a 5xx answer is a failed attempt; ``maxFailedAttempts``
    of them within ``failureWindow`` take the server out for ``failureWindow``, after
    which it is sent requests again (and, failing still, taken out again). Asked on
    the express path (app.example), then on the general one (general.example)."""
    a, b = servers
    e = start_both(edge, {"app": passive(a.url, b.url)})
    for host in ("app.example", "general.example"):
        a.status = 502
        mark = len(e.lines)
        answers = [get(e.port, "/", host=host)[0] for _ in range(4)]  # a, b, a, b
        assert sorted(answers) == [200, 200, 502, 502], (host, answers)
        down = rf"server http://127\.0\.0\.1:{a.port} is down for 1\.5s"
        e.wait_for(down, timeout=BOUND, start=mark)
        out = time.monotonic()
        assert server_status(e, "app@file") == {a.url: "DOWN", b.url: "UP"}
        before = a.served
        assert [get(e.port, "/", host=host)[0] for _ in range(10)] == [200] * 10
        assert a.served == before
        a.status = 200
        until(lambda h=host: get(e.port, "/", host=h)[2] == b"a", timeout=WINDOW + BOUND)
        waited = time.monotonic() - out
        assert server_status(e, "app@file") == {a.url: "UP", b.url: "UP"}
        print(f"\npassiveHealthCheck window {WINDOW}s ({host}): back after {waited:.3f}s")
        assert waited >= WINDOW - 0.3, (host, waited)  # not before the window


def test_passive_check_counts_failures_within_the_window_only(edge, servers):
    """One failure, then a good answer from the same server: the count starts again
    (Traefik resets it on an answer under 500), so the server stays in."""
    a, b = servers
    e = start(edge, {"app": passive(a.url, b.url)})
    a.status = 500
    assert sorted(who(e)[0] for _ in range(2)) == [200, 500]  # a fails once
    a.status = 200
    assert sorted(who(e)[1] for _ in range(2)) == [b"a", b"b"]  # a answers: reset
    a.status = 500
    assert sorted(who(e)[0] for _ in range(2)) == [200, 500]  # a fails once more
    a.status = 200
    assert sorted(who(e)[1] for _ in range(4)) == [b"a", b"a", b"b", b"b"]
    assert server_status(e, "app@file") == {a.url: "UP", b.url: "UP"}


def test_passive_check_takes_a_refusing_server_out(edge, servers):
    """A server refusing connections: each request to it is a 502 and a failed attempt."""
    _, b = servers
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    e = start(edge, {"app": passive(closed, b.url, attempts=3)})
    mark = len(e.lines)  # the log before: this test's lines only
    statuses = [who(e)[0] for _ in range(6)]
    assert sorted(statuses) == [200, 200, 200, 502, 502, 502], statuses
    e.wait_for(r"is down for 1\.5s \(3 failed requests", timeout=BOUND, start=mark)
    assert server_status(e, "app@file") == {closed: "DOWN", b.url: "UP"}
    assert [who(e) for _ in range(10)] == [(200, b"b")] * 10
    # After the window it is tried again: refused still, it fails again.
    until(lambda: who(e)[0] == 502, timeout=WINDOW + BOUND)
