"""``loadBalancer.strategy: p2c`` through a real edge, under both HTTP/1.1 codecs: with
concurrent clients, a backend 100 ms slower than its peer holds its requests in flight
longer and is left with a small share of them, where ``wrr`` gives it half; a server a
health check takes out gets none."""

from __future__ import annotations

import socket
import threading
import time

import h11
import pytest

from tests.harness import Edge, get, lb
from tests.integration.http.servers import H11Backend

PARSERS = ["httptools", "h11"]
CLIENTS = 8
EACH = 25


class Slow(H11Backend):
    """H11Backend answering each request ``delay`` seconds late."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        super().__init__()

    def _answer(self, c: socket.socket, conn: h11.Connection, body: bytes) -> None:  # type: ignore[override]
        time.sleep(self.delay)
        H11Backend._answer(c, conn, body)


def load(port: int, host: str) -> None:
    """CLIENTS threads, EACH requests each, every one answered 200."""
    failures: list[object] = []

    def client() -> None:
        for _ in range(EACH):
            status = get(port, "/", host=host, timeout=10)[0]
            if status != 200:
                failures.append(status)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


@pytest.mark.parametrize("parser", PARSERS)
def test_p2c_leaves_a_slow_server_a_small_share_where_wrr_gives_it_half(tmp_path, parser):
    slow, fast = Slow(0.1), Slow(0.0)
    p2c = lb(slow.url, fast.url, strategy="p2c")
    wrr = lb(slow.url, fast.url)
    dyn = {
        "http": {
            "routers": {
                "p2c": {"rule": "Host(`p2c.example`)", "service": "p2c"},
                "wrr": {"rule": "Host(`wrr.example`)", "service": "wrr"},
            },
            "services": {"p2c": p2c, "wrr": wrr},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        total = CLIENTS * EACH
        load(e.port, "wrr.example")
        assert len(slow.requests) == total // 2  # smooth round robin: exactly half
        slow.requests.clear()
        fast.requests.clear()
        t = time.perf_counter()
        load(e.port, "p2c.example")
        elapsed = time.perf_counter() - t
        share = len(slow.requests) / total
        print(
            f"{parser}: p2c sent {len(slow.requests)} of {total} to the slow server in {elapsed:.2f} s"
        )
        assert len(slow.requests) + len(fast.requests) == total
        # With 8 clients the slow server holds a request 100 ms while the fast one
        # answers in about 1 ms: it is picked only when level with its peer.
        assert share < 0.2, share
    finally:
        e.stop()
        slow.stop()
        fast.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_p2c_skips_a_server_its_health_check_took_out(tmp_path, parser):
    up = Slow(0.0)
    dead = socket.create_server(("127.0.0.1", 0))
    gone = f"http://127.0.0.1:{dead.getsockname()[1]}"
    dead.close()  # refuses from now on
    service = lb(gone, up.url, strategy="p2c", passiveHealthCheck={"maxFailedAttempts": 1})
    dyn = {
        "http": {
            "routers": {"p2c": {"rule": "Host(`p2c.example`)", "service": "p2c"}},
            "services": {"p2c": service},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        statuses = [get(e.port, "/", host="p2c.example")[0] for _ in range(30)]
        # At most one request meets the refusing server before it is out.
        assert statuses.count(502) <= 1, statuses
        assert statuses[-20:] == [200] * 20
        # Its passive check is the health registry's to stop: edge stops at once.
        assert e.stop() == 0, e.log[-2000:]
    finally:
        e.stop()
        up.stop()
