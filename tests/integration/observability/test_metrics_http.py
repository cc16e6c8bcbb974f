"""``metrics.prometheus`` through a real edge, beyond the plain counts: ``headerLabels``,
retries, a websocket upgrade and HTTP/2 requests, each read back from ``/metrics``."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from tests.harness import Edge, lb
from tests.integration.observability.metrics_text import curl, scrape, value
from tests.integration.peers import ThreadedServer, free_port, read_request

TOTAL = "traefik_entrypoint_requests_total"
EP = {"protocol": "http", "entrypoint": "web"}


class Upgrading(ThreadedServer):
    """Answers a request with 101, then echoes what comes until the client closes."""

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(5.0)
        try:
            if read_request(c) is None:
                return
            c.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\n\r\n"
            )
            while chunk := c.recv(4096):
                c.sendall(chunk)
        except OSError:
            pass
        finally:
            c.close()


def test_header_labels_add_request_headers_to_requests_total(tmp_path, whoami):
    static = {
        "metrics": {
            "prometheus": {
                "addRoutersLabels": True,
                "headerLabels": {"useragent": "User-Agent", "tenant": "X-Tenant"},
            }
        }
    }
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {"s": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra=static)
    try:
        for agent, tenant, count in (("probe/1", "blue", 2), ("probe/2", "", 1)):
            for _ in range(count):
                extra = ["-H", f"X-Tenant: {tenant}"] if tenant else []
                out = curl(
                    "-o", "/dev/null", "-w", "%{http_code}", "-A", agent, "-H", "Host: a.test",
                    *extra, e.url + "/",
                )  # fmt: skip
                assert out.stdout == b"200"
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    get = {"code": "200", "method": "GET"}
    assert value(samples, TOTAL, useragent="probe/1", tenant="blue", **get, **EP) == 2
    assert value(samples, TOTAL, useragent="probe/2", tenant="", **get, **EP) == 1
    router = {"protocol": "http", "router": "a@file", "service": "s@file"}
    assert (
        value(samples, "traefik_router_requests_total", useragent="probe/1", tenant="blue", **get, **router)
        == 2
    )  # fmt: skip
    # The other families keep their own labels: the three requests in one series.
    assert value(samples, "traefik_entrypoint_request_duration_seconds_count", **get, **EP) == 3
    assert len([k for k in samples if k[0] == TOTAL and ("entrypoint", "web") in k[1]]) == 2


def test_retries_are_counted_per_service(tmp_path):
    dead = free_port()  # nothing listens: every try fails to connect
    dynamic = {
        "http": {
            "routers": {
                "r": {"rule": "Host(`r.test`)", "service": "dead", "middlewares": ["retry"]}
            },
            "middlewares": {"retry": {"retry": {"attempts": 3, "initialInterval": "10ms"}}},
            "services": {"dead": lb(f"http://127.0.0.1:{dead}")},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra={"metrics": {"prometheus": {}}})
    try:
        for _ in range(2):
            out = curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: r.test", e.url + "/")
            assert out.stdout == b"502"
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    # Three tries each: two retries per request, on the router's service.
    assert value(samples, "traefik_service_retries_total", service="dead@file") == 4
    assert value(samples, TOTAL, code="502", method="GET", **EP) == 2


def test_a_websocket_upgrade_counts_as_the_websocket_protocol(tmp_path):
    backend = Upgrading()
    dynamic = {
        "http": {
            "routers": {"ws": {"rule": "Host(`ws.test`)", "service": "ws"}},
            "services": {"ws": lb(backend.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra={"metrics": {"prometheus": {}}})
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            s.sendall(
                b"GET /chat HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"Sec-WebSocket-Version: 13\r\n\r\n"
            )
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = s.recv(4096)
                assert chunk, "edge closed before the 101"
                got += chunk
            assert got.startswith(b"HTTP/1.1 101 ")
            s.sendall(b"ping")
            echoed = b""
            while len(echoed) < 4:
                chunk = s.recv(4096)
                assert chunk, "the tunnel closed"
                echoed += chunk
            assert echoed == b"ping"
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
        backend.stop()
    ws = {"code": "101", "method": "GET", "protocol": "websocket", "entrypoint": "web"}
    assert value(samples, TOTAL, **ws) == 1


def test_http2_requests_are_counted_as_http1_ones_are(tmp_path, whoami):
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {"s": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra={"metrics": {"prometheus": {}}})
    try:
        for path in ("/1", "/2", "/3"):
            done = subprocess.run(
                [
                    "curl", "-sS", "--max-time", "10", "--http2-prior-knowledge",
                    "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                    "-H", "Host: a.test", e.url + path,
                ],
                capture_output=True,
                timeout=30,
                check=True,
            )  # fmt: skip
            assert done.stdout == b"2 200"
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    assert value(samples, TOTAL, code="200", method="GET", **EP) == 3
    assert value(samples, "traefik_service_requests_total", code="200", method="GET", protocol="http", service="s@file") == 3  # fmt: skip


def test_a_server_a_health_check_took_out_is_down(tmp_path, whoami):
    dead = free_port()
    check = {"path": "/health", "interval": "100ms", "timeout": "500ms"}
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {
                "s": lb(whoami.url, f"http://127.0.0.1:{dead}", healthCheck=check),
            },
        }
    }
    e = Edge(tmp_path, dynamic, static_extra={"metrics": {"prometheus": {}}})
    try:
        deadline = time.monotonic() + 10
        while True:
            samples, _ = scrape(e.ports["traefik"])
            down = value(
                samples,
                "traefik_service_server_up",
                service="s@file",
                url=f"http://127.0.0.1:{dead}",
            )
            if down == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        e.stop()
    assert down == 0
    assert value(samples, "traefik_service_server_up", service="s@file", url=whoami.url) == 1


@pytest.mark.parametrize("internals", [False, True])
def test_edge_s_own_answers_count_only_with_add_internals(tmp_path, whoami, internals):
    """``metrics.addInternals``: /ping and /metrics are counted only with it, as
    Traefik meters its internal routers; a router's requests always are."""
    static = {"metrics": {"prometheus": {}, "addInternals": internals}, "ping": {}}
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {"s": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra=static)
    try:
        before, _ = scrape(e.ports["traefik"])
        ping = f"http://127.0.0.1:{e.ports['traefik']}/ping"
        for url in (e.url + "/", ping):
            out = curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: a.test", url)
            assert out.stdout == b"200", url
        after, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    ok = {"code": "200", "method": "GET", "protocol": "http"}
    web = value(after, TOTAL, entrypoint="web", **ok)
    traefik = [value(s, TOTAL, entrypoint="traefik", **ok) for s in (before, after)]
    assert web == 1
    if internals:  # /ping and the scrape before it
        assert traefik[0] is not None and traefik[1] == traefik[0] + 2
    else:
        assert traefik == [None, None]
