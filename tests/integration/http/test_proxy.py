"""HTTP proxying end to end: real edge process, real whoami backends, real clients.

Every test here runs under both codecs (the ``parser`` fixture, or ``edge``: one
edge per codec that the tests which only send requests share).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading

import pytest

from tests.harness import Edge, get, lb, need, raw, read_response


def routes(whoami, whoami2) -> dict:
    return {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "svc-a"},
                "b": {"rule": "Host(`b.test`) && PathPrefix(`/b`)", "service": "svc-b"},
                "api": {"rule": "PathPrefix(`/api`)", "service": "svc-b", "middlewares": ["strip"]},
                "nohost": {"rule": "Host(`nohost.test`)", "service": "svc-nohost"},
                "empty": {"rule": "Host(`empty.test`)", "service": "svc-empty"},
                "dead": {"rule": "Host(`dead.test`)", "service": "svc-dead"},
                "weighted": {"rule": "Host(`w.test`)", "service": "svc-w"},
            },
            "middlewares": {"strip": {"stripPrefix": {"prefixes": ["/api"]}}},
            "services": {
                "svc-a": lb(whoami.url),
                "svc-b": lb(whoami2.url),
                "svc-nohost": lb(whoami.url, passHostHeader=False),
                "svc-empty": {"loadBalancer": {"servers": []}},
                "svc-dead": lb("http://127.0.0.1:9"),
                "svc-w": {
                    "loadBalancer": {
                        "servers": [
                            {"url": whoami.url, "weight": 3},
                            {"url": whoami2.url, "weight": 1},
                        ]
                    }
                },
            },
        }
    }


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, whoami, whoami2):
    """One edge per codec for the tests that only send it requests: the routes never
    change, and no test's answers depend on another's."""
    tmp = tmp_path_factory.mktemp(f"proxy-{request.param}")
    e = Edge(tmp, routes(whoami, whoami2), parser=request.param)
    yield e
    e.stop()


@pytest.fixture
def fresh_edge(tmp_path, parser, whoami, whoami2):
    """An edge of the test's own: its upstream pool starts empty."""
    e = Edge(tmp_path, routes(whoami, whoami2), parser=parser)
    yield e
    e.stop()


def body(resp) -> dict:
    return json.loads(resp[2])


def test_routes_by_host_and_path(edge):
    status, _, data = get(edge.port, "/x?q=1", host="a.test")
    assert status == 200
    info = json.loads(data)
    assert info["name"] == "w1"
    assert info["path"] == "/x" and info["query"] == "q=1"
    assert info["host"] == "a.test"
    assert body(get(edge.port, "/b/1", host="b.test"))["name"] == "w2"
    assert get(edge.port, "/other", host="b.test")[0] == 404
    assert get(edge.port, "/", host="A.TEST:8080")[0] == 200  # case-insensitive, port ignored


def test_not_found_body_names_nothing_internal(edge):
    status, _, data = get(edge.port, "/", host="unknown.test")
    assert status == 404
    assert data == b"404 page not found\n"


def test_strip_prefix(edge):
    info = body(get(edge.port, "/api/users?x=1", host="any.test"))
    assert info["path"] == "/users" and info["query"] == "x=1"
    assert info["headers"]["X-Forwarded-Prefix"] == ["/api"]


def test_forwarded_headers_from_untrusted_client(edge):
    info = body(
        get(
            edge.port,
            "/",
            host="a.test",
            headers={
                "X-Forwarded-For": "6.6.6.6",
                "X-Real-Ip": "6.6.6.6",
                "X-Forwarded-Proto": "https",
            },
        )
    )
    h = info["headers"]
    assert h["X-Forwarded-For"] == ["127.0.0.1"]
    assert h["X-Real-Ip"] == ["127.0.0.1"]
    assert h["X-Forwarded-Proto"] == ["http"]
    assert h["X-Forwarded-Host"] == ["a.test"]
    assert h["X-Forwarded-Port"] == ["80"]


def test_forwarded_headers_from_trusted_client(tmp_path, parser, whoami, whoami2):
    eps = {"web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.0/8"]}}}
    e = Edge(tmp_path, routes(whoami, whoami2), parser=parser, entrypoints=eps)
    try:
        h = body(
            get(
                e.port,
                "/",
                host="a.test",
                headers={"X-Forwarded-For": "1.2.3.4", "X-Forwarded-Proto": "https"},
            )
        )["headers"]
        assert h["X-Forwarded-For"] == ["1.2.3.4, 127.0.0.1"]
        assert h["X-Forwarded-Proto"] == ["https"]
    finally:
        e.stop()


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
def test_forwarded_header_from_untrusted_client_is_dropped(
    tmp_path, parser, whoami, whoami2, trusted
):
    """RFC 7239's Forwarded reached the backend as an untrusted client wrote it while
    every X-Forwarded-* was replaced. It is dropped now, on every path a keep-alive
    request takes (plain heads, heads varied from them, a head repeated); a trusted
    client's goes on as it came. Raw requests on one connection, whoami's view."""
    eps = {"web": {"address": "127.0.0.1:0"}}
    if trusted:
        eps["web"]["forwardedHeaders"] = {"trustedIPs": ["127.0.0.1"]}
    e = Edge(tmp_path, routes(whoami, whoami2), parser=parser, entrypoints=eps)
    spoofed = b"Forwarded: for=1.2.3.4;host=evil\r\n"
    requests = [(1, b""), (2, b""), (3, spoofed), (3, spoofed), (4, b""), (5, spoofed)]
    try:
        seen = []
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            for n, line in requests:
                s.sendall(
                    b"GET /f HTTP/1.1\r\nHost: a.test\r\nX-Id: %d\r\n%sAccept: */*\r\n\r\n"
                    % (n, line)
                )
                answer = read_response(s)
                assert answer.startswith(b"HTTP/1.1 200 OK"), answer
                seen.append(json.loads(answer.partition(b"\r\n\r\n")[2])["headers"])
        kept = ["for=1.2.3.4;host=evil"] if trusted else None
        assert [h.get("Forwarded") for h in seen] == [
            kept if line else None for _, line in requests
        ]
        assert all(
            h["X-Forwarded-For"] == ["127.0.0.1"] and h["X-Forwarded-Host"] == ["a.test"]
            for h in seen
        )
    finally:
        e.stop()


def test_forwarded_headers_trusted_by_an_ipv4_mapped_entry(tmp_path, whoami, whoami2):
    # ::ffff:127.0.0.1 names the IPv4 client 127.0.0.1, as in Traefik (both sides
    # unmapped); it matched no IPv4 client before, so the client's X-Forwarded-For was cut.
    eps = {
        "web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["::ffff:127.0.0.1"]}}
    }
    e = Edge(tmp_path, routes(whoami, whoami2), entrypoints=eps)
    try:
        h = body(get(e.port, "/", host="a.test", headers={"X-Forwarded-For": "1.2.3.4"}))["headers"]
        assert h["X-Forwarded-For"] == ["1.2.3.4, 127.0.0.1"]
    finally:
        e.stop()


def test_hop_by_hop_headers_removed(edge):
    h = body(
        get(
            edge.port,
            "/",
            host="a.test",
            headers={
                "Connection": "keep-alive, X-Secret",
                "X-Secret": "1",
                "Keep-Alive": "timeout=5",
                "TE": "trailers",
            },
        )
    )["headers"]
    for name in ("X-Secret", "Keep-Alive", "Te", "TE", "Connection"):
        assert name not in h


def test_plain_connection_header_is_cut_from_forwarded_bytes(edge):
    # A head with only a plain Connection header is forwarded as its own bytes
    # (the passthrough path); the Connection line must still not go upstream.
    resp = raw(
        edge.port, b"GET /pt HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\nX-Custom: 1\r\n\r\n"
    )
    info = json.loads(resp.partition(b"\r\n\r\n")[2])
    assert "Connection" not in info["headers"]
    assert info["headers"]["X-Custom"] == ["1"]
    assert info["headers"]["X-Forwarded-For"] == ["127.0.0.1"]
    assert list(info["headers"])[:2] == ["Host", "X-Custom"]  # the client's order, untouched


def test_pass_host_header_false(edge, whoami):
    info = body(get(edge.port, "/", host="nohost.test"))
    assert info["host"] == f"127.0.0.1:{whoami.port}"
    assert info["headers"]["X-Forwarded-Host"] == ["nohost.test"]


def test_weighted_round_robin_is_smooth(edge):
    names = [body(get(edge.port, "/", host="w.test"))["name"] for _ in range(8)]
    assert names.count("w1") == 6 and names.count("w2") == 2
    assert names[:4].count("w1") == 3  # spread, not bursts


def test_error_statuses(edge):
    assert get(edge.port, "/", host="empty.test")[0] == 503
    status, _, data = get(edge.port, "/", host="dead.test")
    assert status == 502
    assert b"127.0.0.1" not in data and b"refused" not in data.lower()


def test_curl_keep_alive_reuses_the_connection(edge):
    curl = need("curl")
    out = subprocess.run(
        [curl, "-sv", "-H", "Host: a.test", f"{edge.url}/1", "-H", "Host: a.test", f"{edge.url}/2"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.returncode == 0
    assert out.stdout.count('"name":"w1"') == 2
    assert (
        "Re-using existing connection" in out.stderr or "Reusing existing connection" in out.stderr
    )


def test_curl_chunked_upload_and_chunked_download(edge, tmp_path):
    curl = need("curl")
    payload = tmp_path / "payload"
    payload.write_bytes(b"z" * 300_000)
    out = subprocess.run(
        [
            curl,
            "-s",
            "-H",
            "Host: a.test",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            f"@{payload}",
            f"{edge.url}/up",
        ],
        capture_output=True,
        timeout=10,
    )
    assert json.loads(out.stdout)["bodyBytes"] == 300_000
    out = subprocess.run(
        [
            curl,
            "-s",
            "-D",
            "-",
            "-o",
            str(tmp_path / "down"),
            "-H",
            "Host: a.test",
            f"{edge.url}/data?size=500000&chunked=1",
        ],
        capture_output=True,
        timeout=10,
        text=True,
    )
    assert "transfer-encoding: chunked" in out.stdout.lower()
    assert (tmp_path / "down").stat().st_size == 500_000


def test_expect_100_continue(edge, tmp_path):
    curl = need("curl")
    payload = tmp_path / "payload"
    payload.write_bytes(b"e" * 2_000_000)
    out = subprocess.run(
        [
            curl,
            "-sv",
            "-H",
            "Host: a.test",
            "-H",
            "Expect: 100-continue",
            "--data-binary",
            f"@{payload}",
            f"{edge.url}/e",
        ],
        capture_output=True,
        timeout=10,
        text=True,
    )
    assert "HTTP/1.1 100 Continue" in out.stderr
    info = json.loads(out.stdout)
    assert info["bodyBytes"] == 2_000_000
    assert "Expect" not in info["headers"]


def test_http10_client_gets_close_delimited_body(edge):
    resp = raw(edge.port, b"GET /data?size=1000&chunked=1 HTTP/1.0\r\nHost: a.test\r\n\r\n")
    head, _, payload = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"chunked" not in head.lower()
    assert payload == b"x" * 1000


def test_pipelined_requests_answered_in_order(edge):
    reqs = b"".join(b"GET /p%d HTTP/1.1\r\nHost: a.test\r\n\r\n" % i for i in range(5))
    reqs += b"GET /last HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    resp = raw(edge.port, reqs)
    paths = [
        json.loads(line)["path"]
        for line in resp.split(b"\r\n\r\n")[1:]
        if line.startswith(b"{")
        for line in [line.split(b"\n")[0]]
    ]
    assert paths == ["/p0", "/p1", "/p2", "/p3", "/p4", "/last"]


def test_head_request(edge):
    resp = raw(edge.port, b"HEAD / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
    head, _, rest = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"Content-Length:" in head
    assert rest == b""


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        (
            b"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
            400,
        ),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nX-Folded: a\r\n b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\nHost: a.test\n\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a.test\nX: y\r\n\r\n", 400),
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a.test\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    ],
    ids=[
        "cl+te",
        "two-cl",
        "te-not-chunked",
        "bad-chunk",
        "obs-fold",
        "bare-lf",
        "bare-lf-header",
        "garbage",
        "no-host",
        "too-large",
    ],
)
def test_malformed_requests_refused_and_closed(
    tmp_path, parser, whoami, whoami2, request_bytes, status
):
    eps = {"web": {"address": "127.0.0.1:0", "http": {"maxHeaderBytes": 65536}}}
    e = Edge(tmp_path, routes(whoami, whoami2), parser=parser, entrypoints=eps)
    try:
        resp = raw(e.port, request_bytes)
        assert resp.startswith(b"HTTP/1.1 %d " % status), resp[:200]
        assert resp.count(b"HTTP/1.1") == 1  # nothing forwarded, nothing after: closed
        assert b"Connection: close" in resp
    finally:
        e.stop()


def test_absolute_form_is_routed_by_authority_not_forwarded_anywhere(edge):
    # edge is not an open proxy: the authority picks a router like a Host header.
    resp = raw(
        edge.port, b"GET http://example.com/ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    )
    assert resp.startswith(b"HTTP/1.1 404")
    resp = raw(
        edge.port,
        b"GET http://a.test/abs?x=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
    )
    assert resp.startswith(b"HTTP/1.1 200")
    info = json.loads(resp.partition(b"\r\n\r\n")[2])
    assert info["path"] == "/abs" and info["query"] == "x=1" and info["host"] == "a.test"


def test_curl_through_edge_as_proxy_cannot_reach_unrouted_host(edge):
    curl = need("curl")
    out = subprocess.run(
        [
            curl,
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--proxy",
            edge.url,
            "http://127.0.0.1:1/",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.stdout == "404"


def test_read_timeout_answers_408(tmp_path, parser, whoami, whoami2):
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "transport": {"respondingTimeouts": {"readTimeout": "300ms"}},
        }
    }
    e = Edge(tmp_path, routes(whoami, whoami2), parser=parser, entrypoints=eps)
    try:
        resp = raw(e.port, b"GET / HTTP/1.1\r\nHost: a.te", timeout=5)
        assert resp.startswith(b"HTTP/1.1 408 ")
    finally:
        e.stop()


def test_response_header_timeout_answers_504(tmp_path, parser, whoami, whoami2):
    dyn = routes(whoami, whoami2)
    dyn["http"]["services"]["svc-a"]["loadBalancer"]["serversTransport"] = "slow"
    dyn["http"]["serversTransports"] = {
        "slow": {"forwardingTimeouts": {"responseHeaderTimeout": "200ms"}}
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        assert get(e.port, "/?delay=2", host="a.test")[0] == 504
        assert get(e.port, "/?delay=0.01", host="a.test")[0] == 200
    finally:
        e.stop()


def test_middlewares_headers_add_prefix_and_redirect(tmp_path, parser, whoami):
    dyn = {
        "http": {
            "routers": {
                "h": {"rule": "Host(`h.test`)", "service": "s", "middlewares": ["hdr", "add"]},
                "r": {"rule": "Host(`r.test`)", "service": "s", "middlewares": ["to-https"]},
            },
            "middlewares": {
                "hdr": {
                    "headers": {
                        "customRequestHeaders": {"X-Env": "edge", "User-Agent": ""},
                        "customResponseHeaders": {"X-Served-By": "edge"},
                    }
                },
                "add": {"addPrefix": {"prefix": "/v2"}},
                "to-https": {"redirectScheme": {"scheme": "https", "permanent": True}},
            },
            "services": {"s": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        status, headers, data = get(
            e.port, "/items?x=1", host="h.test", headers={"X-Env": "client", "User-Agent": "ua"}
        )
        info = json.loads(data)
        assert status == 200 and headers["X-Served-By"] == "edge"
        assert info["path"] == "/v2/items" and info["query"] == "x=1"
        assert info["headers"]["X-Env"] == ["edge"]
        assert "User-Agent" not in info["headers"]
        status, headers, _ = get(e.port, "/a?b=c", host="r.test:8000")
        assert status == 301
        assert headers["Location"] == "https://r.test/a?b=c"
    finally:
        e.stop()


# -- hardening: a broken request after valid ones, header counts, responses to nothing


@pytest.mark.parametrize(
    "broken, status",
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /2 HTTP/1.1\r\nHost: a.test\nX: y\r\n\r\n", 400),
        (b"GET /2 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"GET /2 HTTP/1.1\r\nHost: a.test\r\n" + b"X: 1\r\n" * 200 + b"\r\n", 431),
    ],
    ids=["garbage", "bare-lf", "two-cl", "too-many-fields"],
)
def test_a_valid_request_then_a_broken_one_in_the_same_read(fresh_edge, broken, status):
    # Twice: the first time on a new upstream connection, the second from the pool.
    for _ in range(2):
        resp = raw(fresh_edge.port, b"GET /first HTTP/1.1\r\nHost: a.test\r\n\r\n" + broken)
        head, _, rest = resp.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), resp[:200]
        assert b"Connection: close" not in head  # the refusal still has to follow
        info, _, refusal = rest.partition(b"\n")
        assert json.loads(info)["path"] == "/first"
        assert refusal.startswith(b"HTTP/1.1 %d " % status), resp[-200:]
        assert b"Connection: close" in refusal and refusal.count(b"HTTP/1.1") == 1


def test_max_header_count(tmp_path, parser, whoami, whoami2):
    eps = {"web": {"address": "127.0.0.1:0", "http": {"maxHeaderCount": 5}}}
    e = Edge(tmp_path, routes(whoami, whoami2), parser=parser, entrypoints=eps)
    try:
        head = (
            b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n" + b"X: 1\r\n" * 3
        )  # 5 fields
        assert raw(e.port, head + b"\r\n").startswith(b"HTTP/1.1 200 ")
        assert raw(e.port, head + b"X: 1\r\n\r\n").startswith(b"HTTP/1.1 431 ")
    finally:
        e.stop()


def test_ten_thousand_header_fields_are_refused_by_default(edge):
    resp = raw(edge.port, b"GET / HTTP/1.1\r\nHost: a.test\r\n" + b"X: 1\r\n" * 10_000 + b"\r\n")
    assert resp.startswith(b"HTTP/1.1 431 ") and resp.count(b"HTTP/1.1") == 1


def test_a_head_begun_during_a_request_is_bounded_by_read_timeout(
    tmp_path, parser, whoami, whoami2
):
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "transport": {"respondingTimeouts": {"readTimeout": "300ms"}},
        }
    }
    e = Edge(tmp_path, routes(whoami, whoami2), parser=parser, entrypoints=eps)
    try:
        resp = raw(e.port, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHo", timeout=5)
        assert resp.startswith(b"HTTP/1.1 200 ")
        assert resp.partition(b"\r\n\r\n")[2].partition(b"\n")[2].startswith(b"HTTP/1.1 408 ")
    finally:
        e.stop()


class TwoAnswers:
    """A broken server: every request gets its response and a second one in the same write."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                buf += data
                while b"\r\n\r\n" in buf:
                    _, _, buf = buf.partition(b"\r\n\r\n")
                    self.requests += 1
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood"
                        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil"
                    )

    def close(self) -> None:
        self.sock.close()


def test_a_response_to_nothing_never_reaches_a_client(tmp_path, parser):
    """An upstream that answers twice: the second answer must not become the answer
    to the next request on that pooled connection (response queue poisoning)."""
    server = TwoAnswers()
    e = Edge(
        tmp_path,
        {
            "http": {
                "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
                "services": {"s": lb(server.url)},
            }
        },
        parser=parser,
    )
    try:
        assert [get(e.port, "/", host="a.test")[2] for _ in range(4)] == [b"good"] * 4
        pipelined = b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n" * 3
        resp = raw(
            e.port, pipelined + b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        )
        assert resp.count(b"good") == 4 and b"evil" not in resp
    finally:
        e.stop()
        server.close()
