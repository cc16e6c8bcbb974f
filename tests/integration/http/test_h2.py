"""HTTP/2 through edge to HTTP/1.1 backends, on real sockets.

curl with prior knowledge (h2c) and over TLS (ALPN h2), nghttp and h2load where
installed (Debian's nghttp2-client), and a raw h2 client (``h2peers.RawH2``) for
what curl cannot script: routing and middlewares over HTTP/2, large bodies both
ways under flow control, a reader that stops reading while the backend has more,
and the access log's protocol. Both codecs read the upstream side.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import ssl
import subprocess
import time

import pytest
from h2.errors import ErrorCodes

from edge.http.codec.h2 import PREFACE
from tests.harness import Edge, Whoami, lb, need
from tests.integration.http.h2peers import Firehose, RawH2, rss
from tests.integration.observability.metrics_text import scrape, value
from tests.integration.peers import certificates, curl

PARSERS = ["httptools", "h11"]
APR1 = "$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"  # "test", as test_auth.py has it
MIB = 1 << 20


@pytest.fixture(scope="module")
def whoami():
    w = Whoami("w1")
    yield w
    w.stop()


def single(whoami: Whoami, **router) -> dict:
    return {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app", **router}},
            "services": {"app": lb(whoami.url)},
        }
    }


def h2c(port: int, path: str, *args: str) -> subprocess.CompletedProcess:
    """curl with prior knowledge to ``path`` of app.example; stdout ends with the status
    and the HTTP version curl spoke."""
    return curl(
        "--http2-prior-knowledge",
        "-H",
        "Host: app.example",
        *args,
        "-w",
        "\n%{http_code} %{http_version}",
        f"http://127.0.0.1:{port}{path}",
    )


def answered(result: subprocess.CompletedProcess) -> tuple[dict, str]:
    assert result.returncode == 0, result.stderr
    body, _, tail = result.stdout.rpartition(b"\n")
    return (json.loads(body) if body.startswith(b"{") else {"raw": body}), tail.decode()


@pytest.mark.parametrize("parser", PARSERS)
def test_curl_with_prior_knowledge_is_served_http2(tmp_path, parser, whoami):
    e = Edge(tmp_path, single(whoami), parser=parser)
    try:
        seen, tail = answered(h2c(e.port, "/hello?x=1"))
        assert tail == "200 2"
        assert (seen["host"], seen["path"], seen["query"]) == ("app.example", "/hello", "x=1")
        assert seen["version"] == "1.1"  # the backend is spoken to in HTTP/1.1
        assert seen["headers"]["X-Forwarded-Proto"] == ["http"]
        assert seen["headers"]["X-Forwarded-Host"] == ["app.example"]
        # Several requests on one connection, as streams of it (curl 7.88 cannot reuse
        # a prior-knowledge connection for a second URL, whatever the server: nginx too).
        with RawH2(e.port) as c:
            sids = [c.request(b"/s%d" % i, authority=b"app.example", flush=False) for i in range(8)]
            c.flush()
            paths = [json.loads(c.response(sid).body)["path"] for sid in sids]
            assert paths == [f"/s{i}" for i in range(8)]
        # HTTP/1.1 on the same entrypoint is as it was.
        seen, tail = answered(
            curl("-H", "Host: app.example", "-w", "\n%{http_code} %{http_version}", e.url + "/h1")
        )
        assert tail == "200 1.1" and seen["path"] == "/h1"
    finally:
        e.stop()


def test_curl_http2_over_tls_by_alpn(tmp_path, certs, whoami):
    dynamic = {
        "http": {
            "routers": {"secure": {"rule": "Host(`a.test`)", "service": "who", "tls": {}}},
            "services": {"who": lb(whoami.url)},
        },
        "tls": {"certificates": certificates(certs, "a.test")},
    }
    e = Edge(tmp_path, dynamic)
    try:
        result = curl(
            "-v",
            "--http2",
            "--resolve",
            f"a.test:{e.port}:127.0.0.1",
            "--cacert",
            certs["ca"],
            "-w",
            "\n%{http_code} %{http_version}",
            f"https://a.test:{e.port}/tls?y=2",
        )
        seen, tail = answered(result)
        assert tail == "200 2"
        assert re.search(rb"ALPN: server accepted h2", result.stderr), result.stderr
        assert seen["headers"]["X-Forwarded-Proto"] == ["https"] and seen["query"] == "y=2"
        # A raw client over TLS: the same connection serves several streams.
        with RawH2(e.port, ca=certs["ca"]) as c:
            sids = [c.request(b"/s%d" % i, flush=False) for i in range(5)]
            c.flush()
            for i, sid in enumerate(sids):
                r = c.response(sid)
                assert r.status == 200 and json.loads(r.body)["path"] == f"/s{i}"
    finally:
        e.stop()


def test_routers_read_authority_path_method_and_headers_over_http2(tmp_path):
    backends = {name: Whoami(name) for name in ("api", "beta", "post", "default")}
    dynamic = {
        "http": {
            "routers": {
                "api": {"rule": "Host(`app.example`) && PathPrefix(`/api`)", "service": "api"},
                "beta": {
                    "rule": "Host(`app.example`) && Header(`X-Env`, `beta`)",
                    "service": "beta",
                    "priority": 1000,
                },
                "post": {"rule": "Host(`app.example`) && Method(`POST`)", "service": "post"},
                "default": {"rule": "Host(`app.example`)", "service": "default", "priority": 1},
            },
            "services": {name: lb(w.url) for name, w in backends.items()},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with RawH2(e.port) as c:

            def name(path: bytes, **kw) -> str:
                r = c.get(path, authority=b"app.example", **kw)
                assert r.status == 200, (path, r.status, bytes(r.body))
                return json.loads(r.body)["name"]

            assert name(b"/api/users") == "api"
            assert name(b"/api/users", headers=[(b"x-env", b"beta")]) == "beta"
            assert name(b"/other", method=b"POST", body=b"x") == "post"
            assert name(b"/other") == "default"
            assert c.get(b"/", authority=b"other.example").status == 404
            assert (
                c.get(b"/", authority=b"app.example:8080").status == 200
            )  # a port: the host routes
    finally:
        e.stop()
        for w in backends.values():
            w.stop()


def test_a_middleware_route_over_http2(tmp_path, whoami):
    dynamic = single(whoami, middlewares=["auth", "edit"])
    dynamic["http"]["middlewares"] = {
        "auth": {"basicAuth": {"users": [f"test:{APR1}"], "realm": "h2"}},
        "edit": {
            "headers": {
                "customRequestHeaders": {"X-Added": "yes"},
                "customResponseHeaders": {"X-Resp": "edited"},
            }
        },
    }
    e = Edge(tmp_path, dynamic)
    try:
        with RawH2(e.port) as c:
            denied = c.get(b"/private", authority=b"app.example")
            assert denied.status == 401
            assert denied.headers[b"www-authenticate"] == b'Basic realm="h2"'
            allowed = c.get(
                b"/private",
                authority=b"app.example",
                headers=[(b"authorization", b"Basic dGVzdDp0ZXN0")],
            )
            assert allowed.status == 200 and allowed.headers[b"x-resp"] == b"edited"
            seen = json.loads(allowed.body)
            assert seen["headers"]["X-Added"] == ["yes"]
    finally:
        e.stop()


@pytest.mark.parametrize("parser", PARSERS)
def test_large_bodies_both_ways_with_memory_bounded(tmp_path, parser, whoami):
    e = Edge(tmp_path, single(whoami), parser=parser)
    upload = tmp_path / "upload.bin"
    upload.write_bytes(b"u" * (32 * MIB))
    try:
        h2c(e.port, "/warm")
        before = rss(e.proc.pid)
        seen, tail = answered(h2c(e.port, "/up", "--data-binary", f"@{upload}"))
        assert tail == "200 2" and seen["bodyBytes"] == 32 * MIB
        result = h2c(e.port, f"/data?size={64 * MIB}", "-o", "/dev/null")
        assert result.returncode == 0 and result.stdout.split() == [b"200", b"2"], result.stderr
        result = curl(
            "--http2-prior-knowledge",
            "-H",
            "Host: app.example",
            "-o",
            "/dev/null",
            "-w",
            "%{size_download}",
            f"http://127.0.0.1:{e.port}/data?size={64 * MIB}&chunked=1",
        )
        assert result.stdout == b"%d" % (64 * MIB), result.stderr
        assert rss(e.proc.pid) - before < 24 * MIB  # the bodies streamed through
    finally:
        e.stop()


def test_a_reader_that_stops_pauses_the_backend(tmp_path, whoami):
    size = 64 * MIB  # four times what may sit between them while paused (16 MiB)
    hose = Firehose(size)
    dynamic = single(whoami)
    dynamic["http"]["routers"]["hose"] = {"rule": "Host(`hose.example`)", "service": "hose"}
    dynamic["http"]["services"]["hose"] = lb(hose.url)
    e = Edge(tmp_path, dynamic)
    try:
        before = rss(e.proc.pid)
        with RawH2(e.port, auto_ack=False) as slow:
            sid = slow.request(b"/big", authority=b"hose.example")
            deadline = time.monotonic() + 10
            while len(slow.responses[sid].body) < 65535 and time.monotonic() < deadline:
                slow.read(0.5)
            assert len(slow.responses[sid].body) == 65535  # the window, and no more
            # The client reads nothing more; the backend has 64 MiB to give. Paused:
            # edge reads no more of it once socket buffers and one HIGH_WATER are full.
            stalled = hose.settled()
            assert stalled < 16 * MIB  # socket buffers and one HIGH_WATER, not the body
            assert rss(e.proc.pid) - before < 16 * MIB
            # Another client is served meanwhile.
            seen, tail = answered(h2c(e.port, "/meanwhile"))
            assert tail == "200 2" and seen["path"] == "/meanwhile"
            # The reader resumes: all of it comes.
            slow.auto_ack = True
            got = len(slow.responses[sid].body)
            slow.h2.acknowledge_received_data(got, sid)
            slow.h2.increment_flow_control_window(8 * MIB, sid)
            slow.h2.increment_flow_control_window(8 * MIB)
            slow.flush()
            r = slow.response(sid, timeout=120)
            assert r.ended and len(r.body) == size
    finally:
        e.stop()
        hose.stop()


def test_the_access_log_says_http_2_0(tmp_path, whoami):
    log_path = tmp_path / "access.log"
    e = Edge(tmp_path, single(whoami), static_extra={"accessLog": {"filePath": str(log_path)}})
    try:
        assert answered(h2c(e.port, "/logged"))[1] == "200 2"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "/logged" not in log_path.read_text(errors="replace"):
            time.sleep(0.05)
        (line,) = [x for x in log_path.read_text().splitlines() if "/logged" in x]
        assert '"GET /logged HTTP/2.0" 200' in line, line
    finally:
        e.stop()


def test_nghttp_and_h2load(tmp_path, whoami):
    nghttp = need("nghttp")
    h2load = need("h2load")
    e = Edge(tmp_path, single(whoami))
    try:
        url = f"http://127.0.0.1:{e.port}/n"
        out = subprocess.run(
            [nghttp, "-v", "-H", ":authority: app.example", url],
            capture_output=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert b":status: 200" in out.stdout and b'"path":"/n"' in out.stdout, out.stdout[-2000:]
        out = subprocess.run(
            [h2load, "-n", "400", "-c", "4", "-m", "10", "-H", ":authority: app.example", url],
            capture_output=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert b"400 succeeded, 0 failed, 0 errored" in out.stdout, out.stdout
        assert b"status codes: 400 2xx" in out.stdout, out.stdout
    finally:
        e.stop()


def test_streams_are_counted_in_the_metrics(tmp_path, whoami):
    e = Edge(
        tmp_path,
        single(whoami),
        static_extra={"metrics": {"prometheus": {"addRoutersLabels": True}}},
    )
    try:
        with RawH2(e.port) as c:
            sids = [c.request(b"/m%d" % i, authority=b"app.example", flush=False) for i in range(3)]
            sids.append(c.request(b"/", authority=b"nobody.example", flush=False))
            c.flush()
            assert [c.response(sid).status for sid in sids] == [200, 200, 200, 404]
        samples, _ = scrape(e.ports["traefik"])
    finally:
        e.stop()
    ep = {"entrypoint": "web", "protocol": "http"}
    assert value(samples, "traefik_entrypoint_requests_total", code="200", method="GET", **ep) == 3
    assert value(samples, "traefik_entrypoint_requests_total", code="404", method="GET", **ep) == 1


def test_tls_options_without_h2_keep_clients_on_http_1_1(tmp_path, certs, whoami):
    dynamic = {
        "http": {
            "routers": {"secure": {"rule": "Host(`a.test`)", "service": "who", "tls": {}}},
            "services": {"who": lb(whoami.url)},
        },
        "tls": {
            "certificates": certificates(certs, "a.test"),
            "options": {"default": {"alpnProtocols": ["http/1.1"]}},
        },
    }
    e = Edge(tmp_path, dynamic)
    try:
        result = curl(
            "--http2",
            "--resolve",
            f"a.test:{e.port}:127.0.0.1",
            "--cacert",
            certs["ca"],
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
            f"https://a.test:{e.port}/",
        )
        assert result.stdout == b"200 1.1", result.stderr
        # HTTP/2 without ALPN's h2 (prior knowledge over TLS) is not taken: HTTP/1.1's 400.
        ctx = ssl.create_default_context(cafile=certs["ca"])
        with (
            socket.create_connection(("127.0.0.1", e.port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="a.test") as tls,
        ):
            assert tls.selected_alpn_protocol() is None
            tls.sendall(PREFACE)
            assert tls.recv(65536).startswith(b"HTTP/1.1 400 ")
    finally:
        e.stop()


def test_a_draining_edge_finishes_its_streams_and_refuses_new_ones(tmp_path, whoami):
    e = Edge(tmp_path, single(whoami))
    stopped = False
    try:
        with RawH2(e.port) as c:
            assert c.get(b"/first", authority=b"app.example").status == 200
            slow = c.request(b"/slow?delay=1.5", authority=b"app.example")
            time.sleep(0.3)  # on its way upstream
            e.signal(signal.SIGTERM)
            time.sleep(0.3)  # the drain began
            late = c.request(b"/late", authority=b"app.example")
            assert c.response(late).reset == ErrorCodes.REFUSED_STREAM
            r = c.response(slow)
            assert r.status == 200 and r.ended  # answered in full
            end = c.goaway()
            assert end is not None and end.error_code == ErrorCodes.NO_ERROR
        assert e.proc.wait(15) == 0
        stopped = True
    finally:
        if not stopped:
            e.stop()
