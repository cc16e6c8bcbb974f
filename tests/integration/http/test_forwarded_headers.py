"""Forwarded headers from trusted clients (entryPoints.forwardedHeaders.trustedIPs):
what a trusted proxy set reaches the backend as Traefik passes it. Each test failed
on the commit before its fix (the review of HTTP middlewares and transports).
"""

from __future__ import annotations

from tests.harness import Edge, lb
from tests.integration.http.servers import exchange, one_by_one, settle


def test_trusted_clients_x_real_ip_is_kept(tmp_path, parser, backend):
    """Behind a trusted proxy that names the client in X-Real-Ip, edge replaced it with
    that proxy's address, so the backend logged and rate-limited the proxy. Traefik
    sets X-Real-Ip only when a trusted request has none (an untrusted one's is
    removed first, as edge does)."""
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    eps = {"web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.1"]}}}
    e = Edge(tmp_path, dyn, parser=parser, entrypoints=eps)
    try:
        answers = one_by_one(
            e.port,
            [
                b"GET /a HTTP/1.1\r\nHost: app.example\r\nX-Real-Ip: 203.0.113.7\r\n\r\n",
                b"GET /b HTTP/1.1\r\nHost: app.example\r\n\r\n",
            ],
        )
        assert all(a.startswith(b"HTTP/1.1 200 ") for a in answers), answers
        settle(backend, 2)
        assert [r.header(b"x-real-ip") for r in backend.requests] == [
            [b"203.0.113.7"],
            [b"127.0.0.1"],
        ]
    finally:
        e.stop()


def test_trusted_clients_x_forwarded_prefix_is_kept(tmp_path, parser, backend):
    """Behind a trusted proxy that stripped a prefix of its own and says so in
    X-Forwarded-Prefix, edge dropped it, so the backend built its links without
    the outer prefix. Traefik keeps it from a trusted client, and its stripPrefix
    adds its own value after it (two lines)."""
    dyn = {
        "http": {
            "routers": {
                "app": {"rule": "PathPrefix(`/api`)", "service": "app", "middlewares": ["strip"]}
            },
            "services": {"app": lb(backend.url)},
            "middlewares": {"strip": {"stripPrefix": {"prefixes": ["/api"]}}},
        }
    }
    eps = {"web": {"address": "127.0.0.1:0", "forwardedHeaders": {"trustedIPs": ["127.0.0.1"]}}}
    e = Edge(tmp_path, dyn, parser=parser, entrypoints=eps)
    try:
        out = exchange(
            e.port,
            b"GET /api/x HTTP/1.1\r\nHost: app.example\r\nX-Forwarded-Prefix: /outer\r\n\r\n",
        )
        assert out.startswith(b"HTTP/1.1 200 "), out
        settle(backend, 1)
        [r] = backend.requests
        assert r.target == b"/x"
        assert r.header(b"x-forwarded-prefix") == [b"/outer", b"/api"]
    finally:
        e.stop()
