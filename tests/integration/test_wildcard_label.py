"""A wildcard's label is never empty, end to end: ``Host(`*.example.com`)`` does not
take ``Host: .example.com`` (both codecs), and a terminating ``HostSNI(`*.db.test`)``
router does not take a handshake for ``.db.test`` (issue 12 item 4)."""

from __future__ import annotations

from tests.harness import Edge, lb, raw
from tests.integration.test_tls_tcp import echo, s_client_until

__all__ = ["echo"]  # the TCP echo backend fixture, shared


def test_host_wildcard_does_not_take_an_empty_label(tmp_path, parser, whoami):
    dynamic = {
        "http": {
            "routers": {"wild": {"rule": "Host(`*.example.com`)", "service": "who"}},
            "services": {"who": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, parser=parser)
    try:
        for host, status in (
            (b"a.example.com", 200),
            (b".example.com", 404),
            (b"A.Example.COM.", 200),
        ):
            for _ in range(2):  # the second from the entrypoint's remembered Host
                resp = raw(
                    e.port, b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"
                )
                assert resp.startswith(b"HTTP/1.1 %d " % status), (host, resp[:200])
    finally:
        e.stop()


def test_hostsni_wildcard_does_not_take_an_empty_label(tmp_path, echo):
    dynamic = {
        "tcp": {
            "routers": {"db": {"rule": "HostSNI(`*.db.test`)", "service": "echo", "tls": {}}},
            "services": {
                "echo": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo.port}"}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        assert b"ping-wild" in s_client_until(
            e.port, "x.db.test", b"ping-wild\n", b"ping-wild", timeout=10
        )
        assert b"ping-wild" not in s_client_until(
            e.port, ".db.test", b"ping-wild\n", b"ping-wild", timeout=10
        )
    finally:
        e.stop()
