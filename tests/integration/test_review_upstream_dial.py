"""A server URL whose host cannot even be encoded for a DNS lookup (an empty label,
a label over 63 bytes) is a failed dial like any other: the request is answered 502
at once and the log names the server, under both codecs. Found by the TCP review,
which fixed the same hang for TCP servers (d452c4b)."""

from __future__ import annotations

import time

import pytest

from tests.harness import Edge, get, lb


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
        assert host in edge.log
    finally:
        edge.stop()
