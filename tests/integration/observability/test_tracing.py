"""Tracing through a real edge: curl as the client, whoami as the backend (it echoes the
``traceparent`` it received), a small OTLP/HTTP collector (``otlp.Collector``) recording
what edge exports. The span tree (ids, parents, names, kinds, attributes, status) is
checked against the requests sent; then sampling, edge's own answers, HTTP/2, a
collector that is down or slow, and workers.
"""

from __future__ import annotations

import json
import socket
import ssl
import time

import pytest

from tests.harness import Edge, get, lb
from tests.integration.observability.otlp import Collector
from tests.integration.peers import ThreadedServer, curl, free_port, read_request

TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{CALLER}-01"
OTHER = "00-11111111111111111111111111111111-2222222222222222-01"
SERVER, CLIENT = 2, 3  # OTLP's span kinds


pytestmark = pytest.mark.usefixtures("quick_batches")  # conftest.py


def routes(whoami, **extra) -> dict:
    return {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "s"},
                "down": {"rule": "Host(`down.test`)", "service": "gone"},
            },
            "services": {"s": lb(whoami.url), "gone": lb(f"http://127.0.0.1:{free_port()}")},
            **extra,
        }
    }


def tracing(endpoint: str, **extra) -> dict:
    return {"tracing": {"otlp": {"http": {"endpoint": endpoint}}, **extra}}


def request(edge: Edge, *headers: str, path: str = "/p", host: str = "a.test") -> dict:
    """curl's request through edge; whoami's echo of what it received (its JSON)."""
    args = [arg for h in (f"Host: {host}", *headers) for arg in ("-H", h)]
    done = curl("--max-time", "10", *args, f"{edge.url}{path}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def received_parent(echo: dict) -> list[str]:
    return [
        p
        for name, values in echo["headers"].items()
        if name.lower() == "traceparent"
        for p in values
    ]


def by_kind(spans: list[dict]) -> dict[int, dict]:
    kinds = {span["kind"]: span for span in spans}
    assert len(kinds) == len(spans), spans
    return kinds


def test_an_incoming_trace_is_continued_to_the_upstream(tmp_path, parser, whoami, collector):
    """A sampled traceparent: edge's server span is its child, the ReverseProxy span the
    server span's, and the backend is told the ReverseProxy span as its parent, with the
    caller's tracestate; every attribute as Traefik writes it."""
    config = tracing(
        collector.endpoint,
        serviceName="edge-test",
        resourceAttributes={"deployment.environment": "test"},
        capturedRequestHeaders=["X-Request-Id"],
        capturedResponseHeaders=["Content-Type"],
        safeQueryParams=["page"],
    )
    config["tracing"]["otlp"]["http"]["headers"] = {"Authorization": "Bearer t0ken"}
    e = Edge(tmp_path, routes(whoami), parser=parser, static_extra=config)
    try:
        echo = request(
            e,
            f"traceparent: {TRACEPARENT}",
            "tracestate: vendor=abc",
            "X-Request-Id: r-1",
            "User-Agent: probe/1",
            path="/p/q?token=s3cret&page=2",
        )
        spans = collector.wait_spans(2)
    finally:
        e.stop()
    assert len(spans) == 2
    server, client = by_kind(spans)[SERVER], by_kind(spans)[CLIENT]
    # The tree: caller -> server span -> ReverseProxy -> the backend.
    assert server["traceId"] == client["traceId"] == TRACE
    assert server["parentSpanId"] == CALLER
    assert client["parentSpanId"] == server["spanId"] != CALLER
    assert received_parent(echo) == [f"00-{TRACE}-{client['spanId']}-01"]
    assert echo["headers"]["tracestate"] == ["vendor=abc"]
    assert server["traceState"] == client["traceState"] == "vendor=abc"
    assert (server["name"], client["name"]) == ("GET", "ReverseProxy")
    assert server["status"] == client["status"] == {"code": 0}
    start, end = int(server["startTimeUnixNano"]), int(server["endTimeUnixNano"])
    assert start <= int(client["startTimeUnixNano"]) <= int(client["endTimeUnixNano"]) <= end
    assert abs(end / 1e9 - time.time()) < 60
    assert server["attrs"] | {"client.port": 0, "network.peer.port": 0} == {
        "entry_point": "web",
        "http.request.method": "GET",
        "network.protocol.version": "1.1",
        "http.request.body.size": 0,
        "url.path": "/p/q",
        "url.query": "page=2&token=REDACTED",
        "url.scheme": "http",
        "user_agent.original": "probe/1",
        "server.address": "a.test",
        "network.peer.address": "127.0.0.1",
        "client.address": "127.0.0.1",
        "client.port": 0,
        "network.peer.port": 0,
        "http.request.header.x-request-id": ["r-1"],
        "http.response.status_code": 200,
        "http.response.header.content-type": ["application/json"],
    }
    assert server["attrs"]["client.port"] == server["attrs"]["network.peer.port"] > 0
    assert client["attrs"] == {
        "http.request.method": "GET",
        "network.protocol.version": "1.1",
        "url.full": f"{whoami.url}/p/q?page=2&token=REDACTED",
        "url.scheme": "http",
        "user_agent.original": "probe/1",
        "network.peer.address": "127.0.0.1",
        "network.peer.port": whoami.port,
        "server.address": "127.0.0.1",
        "server.port": whoami.port,
        "http.request.header.x-request-id": ["r-1"],
        "http.response.status_code": 200,
        "http.response.header.content-type": ["application/json"],
    }
    resource = server["resource"]
    assert resource["service.name"] == "edge-test"
    assert resource["deployment.environment"] == "test"
    assert {"service.version", "host.name", "process.pid"} <= set(resource)
    (post,) = collector.posts
    assert post["path"] == "/v1/traces" and post["Authorization"] == "Bearer t0ken"
    assert (post["Content-Type"], post["Content-Encoding"]) == ("application/json", "gzip")


def test_sampling_zero_and_one_and_the_parent_decides(tmp_path, whoami, collector):
    """sampleRate 0: no span of a trace edge starts, yet the backend gets a traceparent
    (a new trace each time, not sampled); a caller's sampled trace is still traced (its
    decision is the parent's), and so is an unsampled one not. With sampleRate 1 every
    request makes its spans."""
    e = Edge(tmp_path, routes(whoami), static_extra=tracing(collector.endpoint, sampleRate=0))
    try:
        parents = [received_parent(request(e))[0] for _ in range(5)]
        unsampled = received_parent(request(e, f"traceparent: {TRACEPARENT[:-2]}00"))[0]
        sampled = received_parent(request(e, f"traceparent: {TRACEPARENT}"))[0]
        # The one sampled request's spans arrive after the others would have: none did.
        spans = collector.wait_spans(2)
        time.sleep(0.5)
    finally:
        e.stop()
    assert len({p.split("-")[1] for p in parents}) == 5, "a new trace per request"
    assert all(p.startswith("00-") and p.endswith("-00") and TRACE not in p for p in parents)
    assert unsampled.startswith(f"00-{TRACE}-") and unsampled.endswith("-00")
    assert sampled.startswith(f"00-{TRACE}-") and sampled.endswith("-01")
    assert len(collector.spans) == 2 and {s["traceId"] for s in spans} == {TRACE}

    collector.spans.clear()
    e = Edge(tmp_path, routes(whoami), static_extra=tracing(collector.endpoint, sampleRate=1))
    try:
        parents = [received_parent(request(e))[0] for _ in range(5)]
        spans = collector.wait_spans(10)
    finally:
        e.stop()
    assert all(p.endswith("-01") for p in parents)
    client_ids = {s["spanId"] for s in spans if s["kind"] == CLIENT}
    assert client_ids == {p.split("-")[2] for p in parents}
    roots = [s for s in spans if s["kind"] == SERVER]
    assert len(roots) == 5 and not any("parentSpanId" in s for s in roots)


def test_edge_own_answers_and_a_server_down(tmp_path, whoami, collector):
    """A 404 (no router) is a server span alone, not an error; a server that refuses is
    a 502, an error on both spans; /ping (edge's own service) is traced only with
    addInternals."""
    e = Edge(tmp_path, routes(whoami), static_extra=tracing(collector.endpoint))
    try:
        assert get(e.port, "/", host="nowhere.test")[0] == 404
        spans = collector.wait_spans(1)
        assert get(e.port, "/", host="down.test")[0] == 502
        spans = collector.wait_spans(3)
        assert get(e.ports["traefik"], "/ping")[0] == 200
        time.sleep(0.5)
    finally:
        e.stop()
    assert len(collector.spans) == 3, "no span for /ping"
    (not_found,) = spans[:1]
    assert (not_found["kind"], not_found["status"]) == (SERVER, {"code": 0})
    assert not_found["attrs"]["http.response.status_code"] == 404
    failed = by_kind(spans[1:])
    assert failed[CLIENT]["parentSpanId"] == failed[SERVER]["spanId"]
    for span in failed.values():
        assert span["status"] == {"code": 2}
        assert span["attrs"]["http.response.status_code"] == 502

    collector.spans.clear()
    e = Edge(tmp_path, routes(whoami), static_extra=tracing(collector.endpoint, addInternals=True))
    try:
        assert get(e.ports["traefik"], "/ping")[0] == 200
        ping = collector.wait_for(lambda span: span["attrs"]["url.path"] == "/ping")
    finally:
        e.stop()
    assert (ping["kind"], ping["attrs"]["entry_point"]) == (SERVER, "traefik")


def test_http2_requests_are_traced(tmp_path, whoami, collector):
    e = Edge(tmp_path, routes(whoami), static_extra=tracing(collector.endpoint))
    try:
        done = curl(
            "--max-time", "10", "--http2-prior-knowledge", "-H", f"traceparent: {TRACEPARENT}",
            "-H", "Host: a.test", f"{e.url}/h2",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        spans = collector.wait_spans(2)
    finally:
        e.stop()
    server, client = by_kind(spans)[SERVER], by_kind(spans)[CLIENT]
    assert server["attrs"]["network.protocol.version"] == "2"
    assert received_parent(json.loads(done.stdout)) == [f"00-{TRACE}-{client['spanId']}-01"]


def timed_requests(edge: Edge, count: int) -> list[float]:
    """Each request's seconds, ``count`` of them on one curl keep-alive connection."""
    urls = [arg for i in range(count) for arg in ("-o", "/dev/null", f"{edge.url}/p{i}")]
    done = curl("--max-time", "60", "-H", "Host: a.test", "-w", "%{time_total}\\n", *urls)
    assert done.returncode == 0, done.stderr
    times = [float(t) for t in done.stdout.split()]
    assert len(times) == count
    return times


@pytest.mark.parametrize("collector_state", ["down", "slow"])
def test_a_collector_down_or_slow_never_slows_requests(
    tmp_path, whoami, collector_state, monkeypatch
):
    """Down: every post is refused, the spans counted as not exported. Slow (each answer
    after 6 s, past the 3 s export timeout): the exporter's thread waits, the queue (8
    spans) fills and drops the rest, counted; either way every request is answered at
    once (a loop that waited on a post would take the export timeout)."""
    slow = Collector(delay=6.0) if collector_state == "slow" else None
    endpoint = slow.endpoint if slow else f"http://127.0.0.1:{free_port()}/v1/traces"
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "3000")
    try:
        e = Edge(tmp_path, routes(whoami), static_extra=tracing(endpoint))
        try:
            times = timed_requests(e, 40)
            e.wait_for(r"tracing: \d+ spans not exported", timeout=20)
            if slow:
                e.wait_for(r"tracing: \d+ spans dropped: more than 8 waited", timeout=20)
        finally:
            e.stop()
    finally:
        if slow:
            slow.stop()
    assert max(times) < 2.0, times  # a loop waiting on a post would take 3 s


def test_workers_each_export_their_spans(tmp_path, whoami, collector):
    e = Edge(tmp_path, routes(whoami), static_extra={**tracing(collector.endpoint), "workers": 2})
    try:
        parents = [received_parent(request(e))[0] for _ in range(6)]
        spans = collector.wait_spans(12)
    finally:
        e.stop()
    servers = {s["spanId"]: s for s in spans if s["kind"] == SERVER}
    for parent in parents:
        trace_id, client_id = parent.split("-")[1:3]
        (client,) = [s for s in spans if s["spanId"] == client_id]
        assert client["traceId"] == trace_id
        assert servers[client["parentSpanId"]]["traceId"] == trace_id


def test_entry_points_choose_detailed_spans_or_none(tmp_path, whoami, collector):
    """``traceVerbosity: detailed`` puts Router and Service between the entry point's span
    and ReverseProxy, as Traefik does; ``tracing: false`` makes no span on that entry
    point, nor a traceparent of edge's (the caller's goes on as it came)."""
    entrypoints = {
        "web": {"address": "127.0.0.1:0", "observability": {"traceVerbosity": "detailed"}},
        "quiet": {"address": "127.0.0.1:0", "observability": {"tracing": False}},
    }
    dynamic = routes(whoami)
    dynamic["http"]["routers"]["a"]["entryPoints"] = ["web", "quiet"]
    e = Edge(tmp_path, dynamic, entrypoints=entrypoints, static_extra=tracing(collector.endpoint))
    try:
        echo = request(e, f"traceparent: {TRACEPARENT}")
        spans = collector.wait_spans(4)
        quiet_url = f"http://127.0.0.1:{e.ports['quiet']}/"
        done = curl(
            "--max-time", "10", "-H", "Host: a.test", "-H", f"traceparent: {OTHER}", quiet_url
        )
        assert done.returncode == 0, done.stderr
        quiet = received_parent(json.loads(done.stdout))
        time.sleep(0.5)
    finally:
        e.stop()
    assert len(collector.spans) == 4, "no span from the quiet entry point"
    assert quiet == [OTHER], "passed on as it came, as Traefik does with tracing off"
    named = {span["name"]: span for span in spans}
    assert set(named) == {"GET", "Router", "Service", "ReverseProxy"}
    server, router, service, proxy = (
        named[n] for n in ("GET", "Router", "Service", "ReverseProxy")
    )
    assert router["parentSpanId"] == server["spanId"]
    assert service["parentSpanId"] == router["spanId"]
    assert proxy["parentSpanId"] == service["spanId"]
    assert received_parent(echo) == [f"00-{TRACE}-{proxy['spanId']}-01"]
    assert router["kind"] == service["kind"] == 1  # INTERNAL
    assert router["attrs"] == {
        "traefik.service.name": "s@file",
        "traefik.router.name": "a@file",
        "http.route": "Host(`a.test`)",
    }
    assert service["attrs"] == {"traefik.service.name": "s@file"}


def test_spans_go_to_a_collector_over_tls_with_a_client_certificate(tmp_path, whoami, pki, certs):
    """``otlp.http.tls``: the collector's certificate checked against ``ca``, edge's
    own (``cert``, ``key``) shown to a collector that asks for one."""
    server = pki.issue("localhost")
    server_files = server.write(certs["folder"], "collector")
    client_files = pki.issue("edge", client=True).write(certs["folder"], "edge-client")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=certs["ca"])
    context.load_cert_chain(*server_files)
    context.verify_mode = ssl.CERT_REQUIRED
    collector = Collector(tls=context)
    config = tracing(collector.endpoint)
    config["tracing"]["otlp"]["http"]["tls"] = {
        "ca": certs["ca"],
        "cert": client_files[0],
        "key": client_files[1],
    }
    e = Edge(tmp_path, routes(whoami), static_extra=config)
    try:
        request(e, f"traceparent: {TRACEPARENT}")
        spans = collector.wait_spans(2)
    finally:
        e.stop()
        collector.stop()
    assert {span["traceId"] for span in spans} == {TRACE}


class Failing(ThreadedServer):
    """A server answering every request 500, recording the ``traceparent`` each had."""

    def __init__(self) -> None:
        self.parents: list[str] = []
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(5.0)
        try:
            got = read_request(c)
            if got is not None:
                lines = got[0].decode("latin-1").split("\r\n")[1:]
                self.parents += [v.strip() for k, _, v in (line.partition(":") for line in lines)
                                 if k.lower() == "traceparent"]  # fmt: skip
                c.sendall(b"HTTP/1.1 500 X\r\nContent-Length: 4\r\nConnection: close\r\n\r\nfail")
        except OSError:
            pass
        finally:
            c.close()


def test_a_request_sent_again_to_an_error_page_stays_in_its_trace(tmp_path, whoami, collector):
    """The errors middleware sends the request to its page's service after the first
    server's 500: both upstream requests name the same trace (edge's own here), and
    the ReverseProxy span kept is the page's."""
    failing = Failing()
    dynamic = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "f", "middlewares": ["e"]}},
            "middlewares": {"e": {"errors": {"status": ["500"], "service": "s", "query": "/e"}}},
            "services": {"f": lb(failing.url), "s": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra=tracing(collector.endpoint))
    try:
        page = request(e)  # whoami's echo of the page's request
        spans = collector.wait_spans(2)
    finally:
        e.stop()
        failing.stop()
    (first,) = failing.parents
    (second,) = received_parent(page)
    server, client = by_kind(spans)[SERVER], by_kind(spans)[CLIENT]
    assert first.split("-")[1] == second.split("-")[1] == server["traceId"]
    assert second == f"00-{server['traceId']}-{client['spanId']}-01"
