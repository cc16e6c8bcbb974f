"""The service kinds edge.router.services adds to the walk: ``p2c`` load balancers
(in flight per server, counted from the pick to the answer) and mirroring services
(Traefik's deterministic shares, copies sent whole from their own tasks to a real
server on 127.0.0.1, bounded in size, memory and concurrency)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.http.codec import RequestHead
from edge.http.server import upstream_h2
from edge.router import services
from edge.router.factory import build_http_routers
from edge.router.health import HealthRegistry
from edge.router.services import (
    InFlight,
    Mirror,
    Mirroring,
    P2CLoadBalancer,
    mirror_head,
)
from edge.transports import TransportRegistry
from tests.integration.http.grpcpeers import Echo
from tests.unit.config.documents import EPS, conf, lb


def head(method: bytes = b"POST", length: int | None = None, host: bytes = b"app.test"):
    return RequestHead(
        method, b"/p?q=1", b"1.1", [], True, length is None, length, False, False, host=host
    )


UP_HEAD = (
    b"POST /p?q=1 HTTP/1.1\r\nHost: app.test\r\nX-Tag: t\r\nTransfer-Encoding: chunked\r\n"
    b"X-Forwarded-For: 127.0.0.1\r\n\r\n"
)


# --- Traefik's shares ----------------------------------------------------------------


def test_mirror_shares_are_exact_and_evenly_spread_as_traefiks_counter():
    ten, half, none, all_ = (Mirror(None, p, object) for p in (10, 50, 0, 100))  # type: ignore[arg-type]
    m = Mirroring("m", None, [ten, half, none, all_])
    chosen = [m.choose() for _ in range(100)]
    got = Counter(mirror for c in chosen for mirror in c)
    assert (got[ten], got[half], got[none], got[all_]) == (10, 50, 0, 100)
    # 10 %: the 1st, 11th, 21st... request; 50 %: every other one, from the first.
    assert [i for i, c in enumerate(chosen) if ten in c] == list(range(0, 100, 10))
    assert [i for i, c in enumerate(chosen) if half in c] == list(range(0, 100, 2))


def test_the_mirror_head_takes_the_host_and_a_length_and_drops_other_framing():
    out = mirror_head(UP_HEAD, b"mirror.test:81", 5)
    assert out == (
        b"POST /p?q=1 HTTP/1.1\r\nHost: mirror.test:81\r\nX-Tag: t\r\n"
        b"X-Forwarded-For: 127.0.0.1\r\nContent-Length: 5\r\n\r\n"
    )
    assert b"Content-Length" not in mirror_head(UP_HEAD, b"a", 0)


# --- against a real mirror server ------------------------------------------------------


class Recorder:
    """A mirror server on 127.0.0.1: records each request (head and body, as received)
    and answers 200, after ``delay`` seconds (or never, when ``silent``)."""

    def __init__(self, delay: float = 0.0, silent: bool = False) -> None:
        self.delay = delay
        self.silent = silent
        self.requests: list[bytes] = []
        self.connections = 0
        self.closed = 0
        self.got = asyncio.Event()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                raw = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in raw.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append(raw + body)
                self.got.set()
                if self.silent:
                    await asyncio.sleep(3600)
                await asyncio.sleep(self.delay)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()

    async def wait(self, n: int, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.requests) < n:
                self.got.clear()
                await self.got.wait()

    def close(self) -> None:
        self.server.close()


def build(loop, services_doc: dict):
    http = {
        "routers": {"r": {"rule": "Host(`app.test`)", "service": "app"}},
        "services": services_doc,
    }
    runtime = build_runtime(merge({"file": conf({"http": http})}), EPS)
    built: dict = {}
    health = HealthRegistry(loop)
    router = build_http_routers(runtime, TransportRegistry(loop), ["web"], built, health=health)[
        "web"
    ]
    return router.by_host["app.test"].service, built, runtime


def mirroring_doc(main_port: int, mirror_port: int, **mirroring) -> dict:
    return {
        "main": lb(f"http://127.0.0.1:{main_port}"),
        "shadow": lb(f"http://127.0.0.1:{mirror_port}"),
        "app": {
            "mirroring": {
                "service": "main",
                "mirrors": [{"name": "shadow", "percent": 100}],
                **mirroring,
            }
        },
    }


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_copy_reaches_the_mirror_byte_identical_and_whole():
    async def main() -> None:
        mirror = Recorder()
        port = await mirror.start()
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, port))
        assert isinstance(service, Mirroring) and service.pick().server.port == 1
        body = bytes(range(256)) * 300  # 76,800 bytes, in uneven chunks
        copy = service.tee(head(), UP_HEAD)
        for i in range(0, len(body), 7001):
            copy.body(body[i : i + 7001])
        copy.end()
        await mirror.wait(1)
        raw = mirror.requests[0]
        assert raw.startswith(b"POST /p?q=1 HTTP/1.1\r\nHost: app.test\r\nX-Tag: t\r\n")
        assert raw.endswith(b"Content-Length: 76800\r\n\r\n" + body)
        shadow = service.mirrors[0]
        async with asyncio.timeout(5):
            while shadow.sent < 1:
                await asyncio.sleep(0.01)
        assert service.held == 0
        # A second copy goes on the kept-alive connection.
        copy = service.tee(head(length=3), UP_HEAD)
        copy.body(b"abc")
        copy.end()
        await mirror.wait(2)
        assert mirror.requests[1].endswith(b"\r\n\r\nabc")
        assert mirror.connections == 1
        service.close()
        mirror.close()

    run(main())


def test_mirror_body_false_sends_the_head_alone():
    async def main() -> None:
        mirror = Recorder()
        port = await mirror.start()
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, port, mirrorBody=False))
        copy = service.tee(head(length=4), UP_HEAD)
        copy.body(b"data")
        copy.end()
        await mirror.wait(1)
        assert mirror.requests[0].endswith(b"X-Forwarded-For: 127.0.0.1\r\n\r\n")
        service.close()
        mirror.close()

    run(main())


def test_a_body_over_max_body_size_is_not_mirrored():
    async def main() -> None:
        mirror = Recorder()
        port = await mirror.start()
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, port, maxBodySize=10))
        assert service.tee(head(length=11), UP_HEAD) is None  # known up front
        copy = service.tee(head(), UP_HEAD)  # chunked: known when it goes past
        copy.body(b"0123456789")
        copy.body(b"!")
        copy.end()
        assert service.not_mirrored == 2 and service.held == 0
        copy = service.tee(head(length=10), UP_HEAD)  # exactly the limit is mirrored
        copy.body(b"0123456789")
        copy.end()
        await mirror.wait(1)
        await asyncio.sleep(0.2)
        assert len(mirror.requests) == 1 and mirror.requests[0].endswith(b"0123456789")
        service.close()
        mirror.close()

    run(main())


def test_an_aborted_exchange_sends_no_copy():
    async def main() -> None:
        mirror = Recorder()
        port = await mirror.start()
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, port))
        copy = service.tee(head(length=4), UP_HEAD)
        copy.body(b"da")
        copy.abort()
        copy.end()
        await asyncio.sleep(0.3)
        assert mirror.requests == [] and service.held == 0
        service.close()
        mirror.close()

    run(main())


def test_a_silent_mirror_holds_at_most_its_concurrency_and_the_rest_is_dropped(monkeypatch):
    monkeypatch.setattr(services, "MIRROR_CONCURRENCY", 3)
    monkeypatch.setattr(services, "MIRROR_TIMEOUT", 0.5)

    async def main() -> None:
        mirror = Recorder(silent=True)
        port = await mirror.start()
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, port))
        shadow = service.mirrors[0]
        for _ in range(10):
            copy = service.tee(head(b"GET", 0), UP_HEAD)
            copy.end()  # never blocks, whatever the mirror does
        assert shadow.inflight == 3 and shadow.dropped == 7
        await mirror.wait(3)
        # The timeout frees the slots: the next copies go again.
        async with asyncio.timeout(5):
            while shadow.inflight:
                await asyncio.sleep(0.05)
        assert shadow.dropped == 10 and service.held == 0
        copy = service.tee(head(b"GET", 0), UP_HEAD)
        copy.end()
        assert shadow.inflight == 1
        service.close()
        mirror.close()

    run(main())


def test_a_dead_mirror_drops_its_copies():
    async def main() -> None:
        mirror = Recorder()
        port = await mirror.start()
        mirror.close()
        await mirror.server.wait_closed()
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, port))
        service.tee(head(b"GET", 0), UP_HEAD).end()
        shadow = service.mirrors[0]
        async with asyncio.timeout(5):
            while shadow.inflight:
                await asyncio.sleep(0.01)
        assert shadow.dropped == 1 and shadow.sent == 0

    run(main())


def test_the_memory_bound_drops_a_copy_past_it(monkeypatch):
    monkeypatch.setattr(services, "MIRROR_MEMORY", 1000)

    async def main() -> None:
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, 2))
        first = service.tee(head(), UP_HEAD)
        first.body(b"x" * 500)
        second = service.tee(head(), UP_HEAD)
        second.body(b"y" * 500)  # both together past 1,000 bytes: this one goes
        assert second.chunks is None and first.chunks is not None
        first.abort()
        assert service.held == 0

    run(main())


def test_an_upgrade_is_not_mirrored_and_a_missing_mirror_is_left_out():
    async def main() -> None:
        doc = mirroring_doc(1, 2)
        service, _, _ = build(asyncio.get_running_loop(), doc)
        upgrade = RequestHead(b"GET", b"/", b"1.1", [], True, False, None, True, False)
        assert service.tee(upgrade, UP_HEAD) is None
        assert service.pooled is False  # never the express path, which has no tee

    run(main())


# --- p2c -------------------------------------------------------------------------------


def p2c_doc(*ports: int, passive: bool = False) -> dict:
    app = lb(*(f"http://127.0.0.1:{p}" for p in ports))
    app["loadBalancer"]["strategy"] = "p2c"
    if passive:
        app["loadBalancer"]["passiveHealthCheck"] = {"maxFailedAttempts": 1}
    return {"app": app}


def test_p2c_counts_each_request_in_flight_until_its_answer():
    async def main() -> None:
        service, _, _ = build(asyncio.get_running_loop(), p2c_doc(1, 2))
        assert isinstance(service, P2CLoadBalancer) and service.single is None
        service.rng.seed(11)
        a = service.pick()
        b = service.pick()
        assert a is not b  # the first is busy: the second pick takes the other
        assert service.inflight.counts == {a.server.url: 1, b.server.url: 1}
        a.health.answered(a.server.url, 200)
        b.health.failed(b.server.url)
        assert service.inflight.counts == {}

    run(main())


def test_a_p2c_pick_ends_once_and_when_dropped_without_an_outcome():
    """A client gone before the answer reports nothing: the count ends when the
    exchange lets its backend go; a second outcome ends nothing more."""

    async def main() -> None:
        service, _, _ = build(asyncio.get_running_loop(), p2c_doc(1, 2, passive=True))
        a = service.pick()
        b = service.pick()
        assert sum(service.inflight.counts.values()) == 2
        del a  # the client left before any answer
        assert sum(service.inflight.counts.values()) == 1
        b.health.answered(b.server.url, 200)
        b.health.failed(b.server.url)  # told to the passive check, not counted again
        assert service.inflight.counts == {}
        assert b.server.url in service.down  # the failure reached the passive check

    run(main())


def test_p2c_sends_a_slow_servers_share_elsewhere():
    """Requests are picked while each server's earlier ones are in flight: a server
    answering 10 times slower is left with far fewer of them."""

    async def main() -> None:
        service, _, _ = build(asyncio.get_running_loop(), p2c_doc(1, 2, 3))
        service.rng.seed(2)
        slow = "http://127.0.0.1:1"
        pending: list[tuple[int, object]] = []
        got = Counter()
        for tick in range(2000):
            for item in [p for p in pending if p[0] <= tick]:
                pending.remove(item)
                backend = item[1]
                backend.health.answered(backend.server.url, 200)
            backend = service.pick()
            got[backend.server.url] += 1
            pending.append((tick + (10 if backend.server.url == slow else 1), backend))
        assert got[slow] < min(v for k, v in got.items() if k != slow) / 3, got

    run(main())


def test_p2c_skips_servers_down_and_passes_outcomes_to_passive_health():
    async def main() -> None:
        service, _, _ = build(asyncio.get_running_loop(), p2c_doc(1, 2, passive=True))
        assert isinstance(service.inflight, InFlight) and service.inflight.passive is not None
        service.down.add("http://127.0.0.1:1")
        assert {service.pick().server.port for _ in range(20)} == {2}
        backend = service.pick()
        backend.health.failed(backend.server.url)  # passive: one failure takes it out
        assert "http://127.0.0.1:2" in service.down
        assert service.pick() is None

    run(main())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_p2c_in_flight_counts_survive_an_endpoints_update(seed):
    from edge.router.factory import servers_for

    async def main() -> None:
        service, built, _ = build(asyncio.get_running_loop(), p2c_doc(1, 2))
        service.rng.seed(seed)
        picked = service.pick()
        new_doc = p2c_doc(1, 2, 3)
        http = {
            "routers": {"r": {"rule": "Host(`app.test`)", "service": "app"}},
            "services": new_doc,
        }
        runtime2 = build_runtime(merge({"file": conf({"http": http})}), EPS)
        [(lb_, backends)] = servers_for(
            built, runtime2, ["app@file"], TransportRegistry(asyncio.get_running_loop())
        )
        lb_.update(backends)
        assert service.inflight.counts == {picked.server.url: 1}
        ports = {service.pick().server.port for _ in range(60)}
        # Each of those picks ended as it was dropped; the first is still in flight,
        # so the new server is drawn, and the busy one loses every draw.
        assert ports == {1, 2, 3} - {picked.server.port}
        assert service.inflight.counts == {picked.server.url: 1}

    run(main())


def test_rng_is_the_balancers_own():
    a = P2CLoadBalancer("a", [], True, True)
    b = P2CLoadBalancer("b", [], True, True)
    assert a.rng is not b.rng and isinstance(a.rng, random.Random)
    assert a.pick() is None


def test_a_copy_missing_body_bytes_is_not_sent_and_a_dropped_one_frees_its_bytes():
    async def main() -> None:
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, 2))
        copy = service.tee(head(length=10), UP_HEAD)
        copy.body(b"01234")  # the exchange asked for the copy after 5 bytes went
        copy.end()
        assert service.not_mirrored == 1 and service.mirrors[0].inflight == 0
        copy = service.tee(head(length=10), UP_HEAD)
        copy.body(b"01234")
        assert service.held > 0
        del copy  # neither ended nor aborted
        assert service.held == 0

    run(main())


def test_p2c_leaves_the_health_registry_its_passive_check():
    """The registry finds a load balancer's passive check on its backends, and keeps
    and stops it across swaps: a p2c balancer's in-flight counting must not stand in
    its place (it did, and edge's stop failed on it)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        registry = HealthRegistry(loop)
        built: dict = {}
        http = {"routers": {"r": {"rule": "Host(`app.test`)", "service": "app"}}}
        http["services"] = p2c_doc(1, 2, passive=True)
        runtime = build_runtime(merge({"file": conf({"http": http})}), EPS)
        build_http_routers(runtime, TransportRegistry(loop), ["web"], built, health=registry)
        registry.reconcile(built)
        passive = registry.passive["app@file"]
        service = built["app@file"]
        assert service.inflight.passive is passive
        assert all(b.health is passive for b in service.backends)
        again: dict = {}
        build_http_routers(runtime, TransportRegistry(loop), ["web"], again, health=registry)
        registry.reconcile(again)
        assert registry.passive["app@file"] is passive  # kept across the swap
        registry.stop()

    run(main())


def test_an_idle_mirror_connection_is_closed_after_the_idle_timeout(monkeypatch):
    monkeypatch.setattr(services, "MIRROR_IDLE", 0.2)

    async def main() -> None:
        mirror = Recorder()
        port = await mirror.start()
        service, _, _ = build(asyncio.get_running_loop(), mirroring_doc(1, port))
        service.tee(head(b"GET", 0), UP_HEAD).end()
        await mirror.wait(1)
        shadow = service.mirrors[0]
        async with asyncio.timeout(5):
            while shadow.sent < 1:
                await asyncio.sleep(0.01)
        assert mirror.closed == 0 and sum(map(len, shadow.idle.values())) == 1
        async with asyncio.timeout(5):
            while mirror.closed < 1:
                await asyncio.sleep(0.02)
        assert sum(map(len, shadow.idle.values())) == 0
        mirror.close()

    run(main())


GRPC_UP_HEAD = (
    b"POST /edge.test.Echo/Unary HTTP/1.1\r\nHost: app.test\r\n"
    b"Content-Type: application/grpc\r\nTE: trailers\r\nX-Call: mirrored\r\n"
    b"Content-Length: 7\r\n\r\n"
)
GRPC_HI = b"\x00\x00\x00\x00\x02hi"  # one uncompressed message, "hi"


def test_given_a_connector_a_copy_to_an_h2c_server_goes_over_http2():
    """A copy to an ``h2c://`` server (grpcio's, which resets HTTP/1.1) goes on an
    HTTP/2 stream when the mirror is given upstream_h2's connect, and the server sees
    the call; without a connector it gets HTTP/1.1 and the copy is dropped."""
    echo = Echo()

    async def main() -> None:
        doc = {
            "main": lb("http://127.0.0.1:1"),
            "shadow": lb(echo.url),
            "app": {
                "mirroring": {"service": "main", "mirrors": [{"name": "shadow", "percent": 100}]}
            },
        }
        service, _, _ = build(asyncio.get_running_loop(), doc)
        assert isinstance(service, Mirroring)
        plain = service.mirrors[0]
        given = Mirror(plain.service, 100, plain.parser, upstream_h2.connect)
        h2 = Mirroring("app", service.main, [given], mirror_body=True, max_body_size=-1)
        for mirror, mirroring in ((given, h2), (plain, service)):
            copy = mirroring.tee(head(length=len(GRPC_HI)), GRPC_UP_HEAD)
            assert copy is not None
            copy.body(GRPC_HI)
            copy.end()
            async with asyncio.timeout(10):
                while not (mirror.sent or mirror.dropped):
                    await asyncio.sleep(0.01)
        assert (given.sent, given.dropped) == (1, 0)
        assert (plain.sent, plain.dropped) == (0, 1)
        assert [m.get("x-call") for m in echo.metadata] == ["mirrored"]
        service.close()
        h2.close()

    try:
        run(main())
    finally:
        echo.stop()
