"""gRPC through edge: the real ``grpcio`` client and server on either side.

The service (``grpcpeers.Echo``) is served by grpcio on 127.0.0.1, without TLS
(an ``h2c://`` server URL) and with TLS (an ``https://`` one, h2 by ALPN); the
client is grpcio's channel to edge's plain entrypoint (h2c with prior
knowledge). Every call carries a timeout; every wait is bounded.
"""

from __future__ import annotations

import time

import grpc
import pytest

from tests.harness import Edge, Whoami, lb
from tests.integration.http.grpcpeers import Echo, stub
from tests.integration.http.h2peers import RawH2, rss

TIMEOUT = 10.0
BACKENDS = ["h2c", "tls"]


def grpc_route(url: str, **transport) -> dict:
    service: dict = lb(url)
    dynamic: dict = {
        "http": {
            "routers": {"grpc": {"rule": "PathPrefix(`/edge.test.Echo/`)", "service": "grpc"}},
            "services": {"grpc": service},
        }
    }
    if transport:
        dynamic["http"]["serversTransports"] = {"t": transport}
        service["loadBalancer"]["serversTransport"] = "t"
    return dynamic


@pytest.fixture(scope="module")
def edge_h2c(tmp_path_factory, echo):
    e = Edge(tmp_path_factory.mktemp("grpc"), grpc_route(echo.url))
    yield e
    e.stop()


@pytest.fixture(scope="module")
def edge_tls(tmp_path_factory, echo_tls, certs):
    transport = {"serverName": "good.test", "rootCAs": [certs["ca"]]}
    e = Edge(tmp_path_factory.mktemp("grpcs"), grpc_route(echo_tls.url, **transport))
    yield e
    e.stop()


@pytest.fixture(params=BACKENDS)
def through(request, edge_h2c, edge_tls, echo, echo_tls):
    """(edge, the service behind it) for each kind of backend."""
    return (edge_h2c, echo) if request.param == "h2c" else (edge_tls, echo_tls)


def wait_until(predicate, timeout: float) -> bool:
    """``predicate`` true within ``timeout`` seconds (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def channel(e: Edge) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{e.port}")


def test_unary_calls_multiplexed(through):
    e, echo = through
    with channel(e) as ch:
        call = stub(ch, "Unary")
        reply, info = call.with_call(b"hello", timeout=TIMEOUT, metadata=(("x-token", "abc"),))
        assert reply == b"echo:hello"
        assert info.code() == grpc.StatusCode.OK
        assert ("x-trailer", "t1") in info.trailing_metadata()
        seen = echo.metadata[-1]
        assert seen["x-token"] == "abc"
        assert seen["x-forwarded-proto"] == "http"  # edge's forwarding headers reach the server
        # Calls at once on one channel, each its own stream both sides.
        futures = [call.future(b"m%d" % i, timeout=TIMEOUT) for i in range(30)]
        assert [f.result() for f in futures] == [b"echo:m%d" % i for i in range(30)]
    assert "ALPN chose HTTP/1.1" not in e.log


def test_server_streaming(through):
    e, _ = through
    with channel(e) as ch:
        replies = list(stub(ch, "ServerStream", "unary_stream")(b"50", timeout=TIMEOUT))
    assert replies == [b"%d" % i for i in range(50)]


def test_client_streaming(through):
    e, _ = through
    with channel(e) as ch:
        reply = stub(ch, "ClientStream", "stream_unary")(
            iter([b"a", b"bb", b"ccc" * 30000]), timeout=TIMEOUT
        )
    assert reply == b"a|bb|" + b"ccc" * 30000  # the last one past a 64 KiB window


def test_bidirectional_streaming(through):
    e, _ = through
    with channel(e) as ch:
        call = stub(ch, "Bidi", "stream_stream")
        replies = call(iter([b"one", b"two", b"three"]), timeout=TIMEOUT)
        assert list(replies) == [b"ONE", b"TWO", b"THREE"]


def test_grpc_status_and_message_are_forwarded(through):
    e, _ = through
    with channel(e) as ch, pytest.raises(grpc.RpcError) as caught:
        stub(ch, "Unary")(b"fail:no such thing", timeout=TIMEOUT)
    err = caught.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == "no such thing"
    assert ("x-why", "asked") in err.trailing_metadata()


def test_deadline_expires_and_the_server_sees_the_cancel(through):
    e, echo = through
    echo.cancelled.clear()
    with channel(e) as ch, pytest.raises(grpc.RpcError) as caught:
        stub(ch, "Slow")(b"x", timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert echo.cancelled.wait(5.0), "the server never saw the call end"


def test_client_cancellation_reaches_the_server(through):
    e, echo = through
    echo.cancelled.clear()
    with channel(e) as ch:
        future = stub(ch, "Slow").future(b"x", timeout=TIMEOUT)
        deadline = time.monotonic() + 5
        while len(echo.metadata) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # the call reached the server
        assert future.cancel()
        assert echo.cancelled.wait(5.0), "the server never saw the cancel"


def test_grpc_timeout_bounds_the_exchange_at_edge(tmp_path):
    """A server that never answers (an HTTP/1.1 one, which knows nothing of
    grpc-timeout): edge answers DEADLINE_EXCEEDED itself, trailers-only, in time."""
    w = Whoami("slow")
    dynamic = {
        "http": {
            "routers": {"g": {"rule": "PathPrefix(`/`)", "service": "g"}},
            "services": {"g": lb(w.url)},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with RawH2(e.port) as c:
            started = time.monotonic()
            sid = c.request(
                b"/svc/Method?delay=8",
                method=b"POST",
                headers=[(b"content-type", b"application/grpc"), (b"grpc-timeout", b"300m")],
                body=b"\x00\x00\x00\x00\x00",
            )
            response = c.response(sid)
            took = time.monotonic() - started
        assert response.ended and response.status == 200
        assert response.headers[b"grpc-status"] == b"4"
        assert response.body == b""
        assert 0.25 < took < 5.0, took
    finally:
        e.stop()
        w.stop()


def test_slow_reader_pauses_the_server_and_bounds_edge_memory(edge_h2c, echo):
    """A gRPC client that stops reading: the server stops being able to send (its
    stream window is not given back), and edge's memory stays bounded."""
    e = edge_h2c
    before = rss(e.proc.pid)
    sent_before = echo.sent
    with RawH2(e.port, auto_ack=False) as c:
        sid = c.request(
            b"/edge.test.Echo/Firehose",
            authority=b"g.example",
            method=b"POST",
            headers=[(b"content-type", b"application/grpc"), (b"te", b"trailers")],
            body=b"\x00\x00\x00\x00\x04" + b"4000",  # 4000 messages of 64 KiB: 250 MiB
        )
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            c.read(0.2)
        stalled = echo.sent - sent_before
        time.sleep(1.0)
        assert echo.sent - sent_before - stalled < 20, "the server kept sending"
        assert stalled < 400, stalled  # 25 MiB at most: windows and buffers, not the stream
        grown = rss(e.proc.pid) - before
        assert grown < 64 << 20, grown
        assert c.responses[sid].reset is None


def test_calls_share_one_connection_within_max_concurrent_streams(tmp_path):
    """Concurrent calls are multiplexed on one connection to the server; a server that
    allows 2 streams a connection gets more connections, each within its limit."""
    roomy = Echo()
    narrow = Echo(options=(("grpc.max_concurrent_streams", 2),))
    dynamic = grpc_route(roomy.url)
    dynamic["http"]["routers"]["narrow"] = {
        "rule": "PathPrefix(`/edge.test.Echo/`) && Header(`x-narrow`, `1`)",
        "service": "narrow",
    }
    dynamic["http"]["services"]["narrow"] = lb(narrow.url)
    e = Edge(tmp_path, dynamic)
    try:
        with channel(e) as ch:
            nap = stub(ch, "Nap")
            calls = [nap.future(b"0.5", timeout=TIMEOUT) for _ in range(10)]
            assert [c.result() for c in calls] == [b"rested"] * 10
            assert len(roomy.peers) == 1  # ten at once, one connection
            narrow_calls = [
                nap.future(b"0.5", timeout=TIMEOUT, metadata=(("x-narrow", "1"),))
                for _ in range(10)
            ]
            assert [c.result() for c in narrow_calls] == [b"rested"] * 10
        assert len(narrow.metadata) == 10
        assert len(narrow.peers) >= 5, narrow.peers  # two streams a connection at most
    finally:
        e.stop()
        roomy.stop()
        narrow.stop()


def test_a_grpc_health_check_takes_a_not_serving_server_out(tmp_path):
    """healthCheck mode grpc (Traefik's): grpc.health.v1's Check over HTTP/2; a server
    that answers NOT_SERVING gets no call until it says SERVING again."""
    a, b = Echo(), Echo()
    dynamic = grpc_route(a.url)
    dynamic["http"]["services"]["grpc"]["loadBalancer"]["servers"].append({"url": b.url})
    dynamic["http"]["services"]["grpc"]["loadBalancer"]["healthCheck"] = {
        "mode": "grpc",
        "interval": "200ms",
        "timeout": "2s",
    }
    e = Edge(tmp_path, dynamic)
    try:
        assert wait_until(lambda: a.checks and b.checks, TIMEOUT)
        b.serving = False
        assert wait_until(lambda: "is down (health check failed: not SERVING" in e.log, TIMEOUT)
        before = len(b.metadata)
        with channel(e) as ch:
            unary = stub(ch, "Unary")
            assert [unary(b"x", timeout=TIMEOUT) for _ in range(6)] == [b"echo:x"] * 6
        assert len(b.metadata) == before  # all six went to a
        b.serving = True
        assert wait_until(lambda: "is up again" in e.log, TIMEOUT)
        with channel(e) as ch:
            unary = stub(ch, "Unary")
            for _ in range(6):
                unary(b"y", timeout=TIMEOUT)
        assert len(b.metadata) > before  # b serves again
    finally:
        e.stop()
        a.stop()
        b.stop()
