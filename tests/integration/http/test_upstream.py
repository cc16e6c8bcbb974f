"""A server URL whose host cannot even be encoded for a DNS lookup (an empty label,
a label over 63 bytes) is a failed dial like any other: the request is answered 502
at once and the log names the server, under both codecs. Found by the TCP review,
which fixed the same hang for TCP servers (d452c4b)."""

from __future__ import annotations

import contextlib
import re
import socket
import time

import pytest

from tests.harness import Edge, get, lb, read_response, read_until_closed
from tests.integration.http.servers import (
    TIMEOUT,
    ClosingBackend,
    EarlyAnswerBackend,
    edge_with,
    exchange,
    one_by_one,
    settle,
)


@pytest.mark.parametrize("parser", ["httptools", "h11"])
@pytest.mark.parametrize("host", ["a..b.test", "x" * 64 + ".test"])
def test_unencodable_server_host_is_a_prompt_502(tmp_path, parser, host):
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(f"http://{host}:8080")},
        }
    }
    edge = Edge(tmp_path, dyn, parser=parser)
    try:
        started = time.monotonic()
        status, _, _ = get(edge.port, "/", host="app.example", timeout=5.0)
        took = time.monotonic() - started
        assert status == 502, edge.log
        assert took < 2.0, f"answered after {took:.1f}s"
        # The next request on the route is answered too: nothing was left stuck.
        assert get(edge.port, "/", host="app.example", timeout=5.0)[0] == 502
        edge.wait_for(re.escape(host))  # logged after the answer went: waited for
    finally:
        edge.stop()


@pytest.mark.parametrize(
    ("second", "resent"),
    [
        (b"GET /read HTTP/1.1\r\nHost: app.example\r\n\r\n", True),
        (b"HEAD /read HTTP/1.1\r\nHost: app.example\r\n\r\n", True),
        (b"DELETE /item HTTP/1.1\r\nHost: app.example\r\n\r\n", False),
        (b"POST /charge HTTP/1.1\r\nHost: app.example\r\n\r\n", False),
        (b"POST /charge HTTP/1.1\r\nHost: app.example\r\nIdempotency-Key: k1\r\n\r\n", True),
    ],
    ids=["GET", "HEAD", "DELETE", "POST", "POST-idempotency-key"],
)
def test_lost_reused_connection_resends_only_idempotent_requests(tmp_path, parser, second, resent):
    """A pooled connection closed by the server after it read a request, before any
    byte of an answer: edge sent any request without a body again on a new
    connection, so a DELETE or a bodiless POST reached the backend twice.
    Traefik's transport (Go's) sends it again only when it is replayable: GET, HEAD,
    OPTIONS, TRACE, or one with an Idempotency-Key; else 502."""
    backend = ClosingBackend(drop={2})
    e = edge_with(tmp_path, parser, lb(backend.url))
    try:
        first = b"GET /warm HTTP/1.1\r\nHost: app.example\r\n\r\n"
        answers = one_by_one(e.port, [first, second])
        time.sleep(0.2)
        line = second.split(b"\r\n", 1)[0]
        assert answers[0].startswith(b"HTTP/1.1 200 "), answers
        with backend.lock:
            seen = list(backend.seen)
        assert seen[0] == (1, b"GET /warm HTTP/1.1")
        if resent:
            assert seen[1:] == [(1, line), (2, line)], seen
            assert answers[1].startswith(b"HTTP/1.1 200 "), answers
        else:
            assert seen[1:] == [(1, line)], seen
            assert answers[1].startswith(b"HTTP/1.1 502 "), answers
    finally:
        e.stop()
        backend.stop()


def test_response_header_timeout_counts_from_the_end_of_the_request_body(tmp_path, parser, backend):
    """responseHeaderTimeout ran from the moment the request head went upstream, so an
    upload taking longer than it got 504 while the client was still sending (and
    the backend had answered nothing because the body was not all there). Traefik's
    (Go's ResponseHeaderTimeout) runs from the end of the request, body included:
    a slow upload is served, and a backend slow to answer once it has it is not."""
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url, serversTransport="rht")},
            "serversTransports": {
                "rht": {"forwardingTimeouts": {"responseHeaderTimeout": "300ms"}}
            },
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(b"POST /upload HTTP/1.1\r\nHost: app.example\r\nContent-Length: 6\r\n\r\nabc")
            time.sleep(0.8)  # the upload goes on past the timeout
            s.sendall(b"def")
            out = read_until_closed(s, TIMEOUT, quiet=1.0)[0]
        assert out.startswith(b"HTTP/1.1 200 "), out
        assert out.endswith(b"POST /upload 6"), out
    finally:
        e.stop()


@pytest.mark.parametrize(
    ("transport", "reused"),
    [
        ({"maxIdleConnsPerHost": -1}, False),  # Traefik: negative disables reuse
        ({"maxIdleConnsPerHost": 0}, True),  # Traefik: zero is Go's default (2)
        ({"forwardingTimeouts": {"idleConnTimeout": "0s"}}, True),  # Go: zero is no limit
    ],
    ids=["maxIdle-negative", "maxIdle-zero", "idleConnTimeout-zero"],
)
def test_servers_transport_pool_settings_mean_what_traefik_documents(
    tmp_path, parser, backend, transport, reused
):
    """maxIdleConnsPerHost -1, which Traefik documents as disabling connection reuse,
    was refused when the file was read, so every route of the file went down; 0
    (Go's default of 2) and idleConnTimeout 0 (Go: no limit) disabled pooling
    instead, so every request dialed its server."""
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url, serversTransport="t")},
            "serversTransports": {"t": transport},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        answers = one_by_one(e.port, [b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n"] * 3)
        assert all(a.startswith(b"HTTP/1.1 200 ") for a in answers), answers
        settle(backend, 3)
        conns = [r.conn for r in backend.requests]
        assert conns == ([1, 1, 1] if reused else [1, 2, 3]), conns
    finally:
        e.stop()


def test_response_before_a_large_request_body_ends_says_the_connection_closes(tmp_path, parser):
    """An upstream that answers before the request body is all sent (413, 401) had
    its answer forwarded as if the client connection stayed open, then edge closed
    it: the client, still sending, learnt it only by the close (or a reset). Traefik's
    server (Go) says ``Connection: close`` when more than it will drain remains."""
    backend = EarlyAnswerBackend()
    e = edge_with(tmp_path, parser, lb(backend.url))
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 1000000\r\n\r\n"
                + b"x" * 1000
            )
            out = read_response(s)
            assert out.startswith(b"HTTP/1.1 413 "), out
            assert b"\r\nConnection: close\r\n" in out, out
            rest, closed = read_until_closed(s, TIMEOUT)
            assert closed and rest == b"", rest
    finally:
        e.stop()
        backend.stop()


def test_response_before_a_small_request_body_ends_keeps_the_connection(tmp_path, parser):
    """...and when what remains is small, edge reads and drops it and the connection
    serves the next request, as Go's server drains a small body (and as edge does for
    its own early answers) instead of closing a client mid-upload."""
    backend = EarlyAnswerBackend()
    e = edge_with(tmp_path, parser, lb(backend.url))
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=TIMEOUT) as s:
            s.sendall(
                b"POST /up HTTP/1.1\r\nHost: app.example\r\nContent-Length: 1000\r\n\r\n"
                + b"x" * 10
            )
            first = read_response(s)
            assert first.startswith(b"HTTP/1.1 413 ") and b"Connection: close" not in first, first
            s.sendall(
                b"x" * 990
                + b"POST /again HTTP/1.1\r\nHost: app.example\r\nContent-Length: 2\r\n\r\nhi"
            )
            second = read_response(s)
            assert second.startswith(b"HTTP/1.1 413 "), second
    finally:
        e.stop()
        backend.stop()


def test_dial_timeout_answers_504(tmp_path, parser):
    """A server that did not accept within dialTimeout was answered 502, like one
    that refused. Traefik answers a timeout 504 (its proxy's error handler maps
    every net.Error with Timeout() to Gateway Timeout), which is what alerts and
    retry policies downstream tell apart from a refusal."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)  # a backlog that a few unaccepted connections fill: the next SYNs go unanswered
    port = full.getsockname()[1]
    held = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            c.connect(("127.0.0.1", port))
        held.append(c)
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(f"http://127.0.0.1:{port}", serversTransport="t")},
            "serversTransports": {"t": {"forwardingTimeouts": {"dialTimeout": "300ms"}}},
        }
    }
    e = Edge(tmp_path, dyn, parser=parser)
    try:
        out = exchange(e.port, b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 504 "), out
    finally:
        e.stop()
        for c in held:
            c.close()
        full.close()
