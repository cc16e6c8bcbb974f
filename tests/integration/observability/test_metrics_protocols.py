"""The ``protocol`` label of the request families as Traefik sets it, through a real
edge and real clients, read back from ``/metrics``: curl's plain requests and event
streams (``http``, ``sse``), a WebSocket upgrade edge refuses (``websocket``), grpcio's
calls (``grpc``, counted by their gRPC status), and a chunked upload's bytes."""

from __future__ import annotations

import socket

import grpc
import pytest

from tests.harness import Edge, lb
from tests.integration.http.grpcpeers import Echo, stub
from tests.integration.observability.metrics_text import curl, scrape, value
from tests.integration.peers import ThreadedServer, read_request

TOTAL = "traefik_entrypoint_requests_total"
METRICS = {"metrics": {"prometheus": {"addRoutersLabels": True}}}


def a_router(whoami) -> dict:
    """Router ``a`` (Host a.test) to ``whoami``."""
    return {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {"s": lb(whoami.url)},
        }
    }


class EventStream(ThreadedServer):
    """Answers each request with an event stream of three events (chunked), ended."""

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(5.0)
        try:
            while read_request(c) is not None:
                c.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                for i in range(3):
                    event = b"data: tick %d\n\n" % i
                    c.sendall(b"%x\r\n%s\r\n" % (len(event), event))
                c.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        finally:
            c.close()


def test_event_streams_count_as_sse_and_plain_requests_as_http(tmp_path, whoami):
    events = EventStream()
    dynamic = {
        "http": {
            "routers": {
                "events": {"rule": "Host(`events.test`)", "service": "events"},
                "plain": {"rule": "Host(`plain.test`)", "service": "plain"},
            },
            "services": {"events": lb(events.url), "plain": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra=METRICS)
    try:
        for _ in range(2):
            out = curl(
                "-N", "-H", "Host: events.test", "-H", "Accept: text/event-stream", e.url + "/"
            )
            assert out.stdout.count(b"data: tick") == 3
        # The same route without asking for a stream, and another route: http.
        out = curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: events.test", e.url + "/")
        assert out.stdout == b"200"
        out = curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: plain.test", e.url + "/")
        assert out.stdout == b"200"
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
        events.stop()
    ok = {"code": "200", "method": "GET", "entrypoint": "web"}
    assert value(samples, TOTAL, protocol="sse", **ok) == 2
    assert value(samples, TOTAL, protocol="http", **ok) == 2
    router = {"code": "200", "method": "GET", "router": "events@file", "service": "events@file"}
    assert value(samples, "traefik_router_requests_total", protocol="sse", **router) == 2
    assert value(samples, "traefik_router_requests_total", protocol="http", **router) == 1


def test_a_websocket_upgrade_edge_refuses_is_websocket_s(tmp_path, whoami):
    """Traefik reads the protocol from the request: an upgrade no router takes is
    ``websocket``'s 404, not ``http``'s."""
    e = Edge(tmp_path, a_router(whoami), static_extra=METRICS)
    try:
        upgrade = ["-H", "Connection: Upgrade", "-H", "Upgrade: websocket"]
        upgrade += ["-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "-H", "Sec-WebSocket-Version: 13"]  # fmt: skip
        out = curl("-o", "/dev/null", "-w", "%{http_code}", *upgrade, "-H", "Host: nobody.test", e.url + "/")  # fmt: skip
        assert out.stdout == b"404"
        out = curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: nobody.test", e.url + "/")
        assert out.stdout == b"404"
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    missing = {"code": "404", "method": "GET", "entrypoint": "web"}
    assert value(samples, TOTAL, protocol="websocket", **missing) == 1
    assert value(samples, TOTAL, protocol="http", **missing) == 1


@pytest.fixture(scope="module")
def echo():
    e = Echo()
    yield e
    e.stop()


def test_grpc_calls_count_as_grpc_by_their_grpc_status(tmp_path, echo):
    dynamic = {
        "http": {
            "routers": {"grpc": {"rule": "PathPrefix(`/edge.test.Echo/`)", "service": "grpc"}},
            "services": {"grpc": lb(echo.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra=METRICS)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{e.port}") as channel:
            call = stub(channel, "Unary")
            for _ in range(2):
                assert call(b"hello", timeout=10.0) == b"echo:hello"
            with pytest.raises(grpc.RpcError) as refused:
                call(b"fail:no", timeout=10.0)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    calls = {"method": "POST", "protocol": "grpc", "entrypoint": "web"}
    assert value(samples, TOTAL, code="0", **calls) == 2
    assert value(samples, TOTAL, code="3", **calls) == 1  # INVALID_ARGUMENT
    router = {"method": "POST", "protocol": "grpc", "router": "grpc@file", "service": "grpc@file"}
    assert value(samples, "traefik_router_requests_total", code="0", **router) == 2
    assert not [k for k in samples if k[0] == TOTAL and ("code", "200") in k[1]]


def test_a_chunked_upload_counts_the_bytes_sent(tmp_path, whoami):
    body = tmp_path / "upload.bin"
    body.write_bytes(bytes(range(256)) * 40)  # 10,240 bytes
    e = Edge(tmp_path, a_router(whoami), static_extra=METRICS)
    try:
        chunked = ["-H", "Transfer-Encoding: chunked", "--data-binary", f"@{body}"]
        out = curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: a.test", *chunked, e.url + "/up")  # fmt: skip
        assert out.stdout == b"200"
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    post = {"code": "200", "method": "POST", "protocol": "http", "entrypoint": "web"}
    assert value(samples, "traefik_entrypoint_requests_bytes_total", **post) == 10_240
