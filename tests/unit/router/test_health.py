"""Server health (edge.router.health): the check's response head parser, the passive
check's counting and window, the active check's verdicts against a real server on
127.0.0.1, and the registry that keeps verdicts across configuration swaps and stops
the checks of services that went away."""

from __future__ import annotations

import asyncio

import pytest

from edge.config.dynamic import ServerHealthCheck
from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.router.factory import build_router_sets
from edge.router.health import (
    ActiveChecker,
    HealthCheckError,
    HealthRegistry,
    PassiveHealth,
    parse_response_head,
)
from edge.router.http import Backend, LoadBalancer
from edge.transports import ServerURL, TransportRegistry
from tests.unit.config.documents import EPS

# --- the response head ------------------------------------------------------------------

HEAD = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 302 Found\r\nLocation: /ok \r\nX: y\r\n\r\nbody"


def test_the_head_is_read_at_every_split():
    for cut in range(len(HEAD)):
        first = parse_response_head(HEAD[:cut])
        if first is not None:
            assert first == (302, "/ok")
            assert cut >= HEAD.index(b"\r\n\r\nbody") + 4
    assert parse_response_head(HEAD) == (302, "/ok")
    assert parse_response_head(b"HTTP/1.0 204\r\n\r\n") == (204, None)


@pytest.mark.parametrize(
    "data", [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 2000 OK\r\n\r\n", b"x" * 70000]
)
def test_what_is_no_response_head_fails_the_check(data):
    with pytest.raises(HealthCheckError):
        parse_response_head(data)


# --- passive ------------------------------------------------------------------------------


def test_passive_takes_a_server_out_after_max_failures_for_the_window():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        down: set[str] = set()
        passive = PassiveHealth("app", down, 0.3, 3, loop, active=False)
        passive.failed("a")
        passive.failed("a")
        passive.answered("a", 200)  # a success starts the count again
        passive.failed("a")
        passive.answered("a", 502)  # a 5xx is a failure
        assert down == set()
        passive.failed("a")
        assert down == {"a"}
        began = loop.time()
        while down and loop.time() - began < 3.0:
            await asyncio.sleep(0.02)
        assert down == set()
        assert 0.25 <= loop.time() - began < 3.0

    asyncio.run(main())


def test_passive_failures_older_than_the_window_do_not_count():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        down: set[str] = set()
        passive = PassiveHealth("app", down, 0.2, 2, loop, active=True)
        passive.failed("a")
        await asyncio.sleep(0.3)
        passive.failed("a")
        assert down == set()
        passive.failed("a")
        assert down == {"a"}
        await asyncio.sleep(0.3)
        assert down == {"a"}  # with an active check, only a passed check brings it back
        passive.stop()

    asyncio.run(main())


# --- active, against a real server --------------------------------------------------------


async def serve(answers: dict[bytes, bytes]) -> tuple[asyncio.Server, int, list[bytes]]:
    """A server answering each request target from ``answers``; the heads it read."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        writer.write(answers[head.split(b" ")[1]])
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], heads


def lb_of(loop, url: str, down: set[str]) -> LoadBalancer:
    transport = TransportRegistry(loop).get("default@internal")
    backend = Backend("s", ServerURL(url), transport, True)
    return LoadBalancer("s", [(backend, 1)], True, True, down=down)


@pytest.mark.parametrize(
    ("follow", "status", "down"),
    [(True, 0, False), (False, 0, False), (False, 302, False), (True, 302, True)],
)
def test_active_check_follows_redirects_as_configured(follow, status, down):
    """A 302 to a 200: healthy when followed (the 200) and when not (a 3xx); with
    ``status: 302`` only the unfollowed answer passes."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        answers = {
            b"/health": b"HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n",
            b"/ok": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        }
        server, port, heads = await serve(answers)
        url = f"http://127.0.0.1:{port}"
        verdicts: set[str] = {url} if not down else set()  # the opposite of what is expected
        config = ServerHealthCheck(
            path="/health",
            interval=0.05,
            timeout=1.0,
            follow_redirects=follow,
            status=status,
            hostname="h.example",
            headers={"X-Probe": "1"},
        )
        checker = ActiveChecker("s", lb_of(loop, url, verdicts), config, verdicts, loop)
        began = loop.time()
        while len(heads) < 3 and loop.time() - began < 5.0:
            await asyncio.sleep(0.02)
        checker.stop()
        server.close()
        assert (url in verdicts) is down
        assert heads[0].startswith(b"GET /health HTTP/1.1\r\nHost: h.example\r\n")
        assert b"\r\nX-Probe: 1\r\n" in heads[0]

    asyncio.run(main())


def test_active_check_of_a_refused_dial_or_a_silent_server_is_down():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = silent.sockets[0].getsockname()[1]
        config = ServerHealthCheck(path="/h", interval=0.05, timeout=0.2)
        down: set[str] = set()
        url = f"http://127.0.0.1:{port}"
        checker = ActiveChecker("s", lb_of(loop, url, down), config, down, loop)
        began = loop.time()
        while not down and loop.time() - began < 5.0:
            await asyncio.sleep(0.02)
        assert down == {url}
        assert loop.time() - began >= 0.2  # the timeout, after the first interval
        checker.stop()
        silent.close()

    asyncio.run(main())


# --- the registry: verdicts across swaps ---------------------------------------------------


def services_doc(urls: list[str], check: bool = True) -> dict:
    lb: dict = {"servers": [{"url": u} for u in urls]}
    if check:
        lb["healthCheck"] = {"path": "/h", "interval": "1h"}
    return {
        "http": {
            "routers": {"r": {"rule": "Host(`a`)", "service": "app", "entryPoints": ["web"]}},
            "services": {"app": {"loadBalancer": lb}},
        }
    }


def test_a_swap_keeps_the_verdicts_of_the_servers_that_stay_and_stops_checks_gone():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        health = HealthRegistry(loop)
        transports = TransportRegistry(loop)

        def swap(doc: dict) -> dict:
            runtime = build_runtime(merge({"file": decode_dynamic(doc)}), EPS)
            services: dict = {}
            build_router_sets(runtime, transports, ["web"], services, health=health)
            health.reconcile(services)
            return services

        first = swap(services_doc(["http://10.0.0.1:80", "http://10.0.0.2:80"]))
        checker = health.checkers["app@file"]
        health.down_for("app@file").update({"http://10.0.0.1:80", "http://10.0.0.2:80"})
        second = swap(services_doc(["http://10.0.0.1:80", "http://10.0.0.3:80"]))
        assert second["app@file"] is not first["app@file"]
        assert health.checkers["app@file"] is checker  # the same settings: the same task
        assert checker.lb is second["app@file"]
        assert health.status("app@file") == {"http://10.0.0.1:80"}  # .2 went away
        assert second["app@file"].pick().server.url == "http://10.0.0.3:80"
        swap(services_doc(["http://10.0.0.1:80"], check=False))
        await asyncio.sleep(0)
        assert checker.task.cancelled() or checker.task.done()
        assert health.checkers == {} and health.status("app@file") == set()
        health.stop()

    asyncio.run(main())


def test_a_backend_tells_its_passive_check_what_its_requests_met():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        down: set[str] = set()
        passive = PassiveHealth("s", down, 10.0, 2, loop, active=False)
        transport = TransportRegistry(loop).get("default@internal")
        backend = Backend("s", ServerURL("http://10.0.0.1:80"), transport, True, passive)
        backend.failed()
        backend.answered(200)
        backend.failed()
        assert down == set()
        backend.answered(503)
        assert down == {"http://10.0.0.1:80"}
        passive.stop()
        Backend("s", ServerURL("http://10.0.0.2:80"), transport, True).failed()  # no check

    asyncio.run(main())


def test_servers_given_in_place_are_checked_and_those_gone_forgotten():
    """An endpoints-only change hands a live load balancer new servers (update): its
    checker checks them from then on, and reconcile forgets the verdicts of those gone."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ok = {b"/h": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"}
        server, port, _ = await serve(ok)
        silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        good = f"http://127.0.0.1:{port}"
        bad = f"http://127.0.0.1:{silent.sockets[0].getsockname()[1]}"
        health = HealthRegistry(loop)
        down = health.down_for("s")
        lb = lb_of(loop, good, down)
        lb.health_check = ServerHealthCheck(path="/h", interval=0.05, timeout=0.2)
        health.reconcile({"s": lb})
        lb.update([(lb.backends[0], 1), (lb_of(loop, bad, down).backends[0], 1)])
        began = loop.time()
        while not down and loop.time() - began < 5.0:
            await asyncio.sleep(0.02)
        assert down == {bad}
        assert {lb.pick().server.url for _ in range(4)} == {good}
        lb.update([(lb.backends[0], 1)])
        health.reconcile({"s": lb})
        assert health.status("s") == set()
        health.stop()
        server.close()
        silent.close()

    asyncio.run(main())
