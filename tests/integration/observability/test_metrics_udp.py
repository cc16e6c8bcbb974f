"""UDP sessions on ``/metrics``: the session table's size, and the sessions edge ended,
evicted past ``udp.maxSessions`` or expired past ``udp.timeout``, through a real edge
and a real UDP echo server."""

from __future__ import annotations

import socket
import time

from tests.harness import WHOAMI_RE, Edge, Proc
from tests.integration.observability.metrics_text import scrape, value

ENDED = "edge_udp_sessions_ended_total"


def test_sessions_evicted_past_max_sessions_and_expired_past_the_timeout(tmp_path):
    who = Proc(["whoami", "--name", "echo", "--udp", "127.0.0.1:0"])
    try:
        backend = f"127.0.0.1:{who.wait_for(WHOAMI_RE).group(4)}"
        udp = {
            "routers": {"r": {"service": "echo", "entryPoints": ["dns"]}},
            "services": {"echo": {"loadBalancer": {"servers": [{"address": backend}]}}},
        }
        entrypoints = {
            "web": {"address": "127.0.0.1:0"},
            "dns": {"address": "127.0.0.1:0/udp", "udp": {"maxSessions": 2, "timeout": "1s"}},
            "idle": {"address": "127.0.0.1:0/udp"},  # no router: datagrams are dropped
        }
        e = Edge(tmp_path, {"udp": udp}, entrypoints=entrypoints, static_extra={"metrics": {"prometheus": {}}})  # fmt: skip
        try:
            clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
            for i, s in enumerate(clients):
                s.settimeout(5)
                s.connect(("127.0.0.1", e.ports["dns"]))
                s.send(b"hello %d" % i)
                assert s.recv(100) == b"hello %d" % i  # the echo
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for _ in range(2):
                    s.sendto(b"nobody", ("127.0.0.1", e.ports["idle"]))
            # Three clients, two sessions at most: the first one's was evicted.
            deadline = time.monotonic() + 5
            while True:  # the two datagrams to "idle" are read
                samples, _ = scrape(e.ports["traefik"])
                if value(samples, "edge_udp_no_route_total", entrypoint="idle") == 2:
                    break
                assert time.monotonic() < deadline, "the datagrams were not counted"
                time.sleep(0.05)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # idle past 1 s: the other two expire
                later, _ = scrape(e.ports["traefik"])
                if value(later, "edge_udp_sessions", entrypoint="dns") == 0:
                    break
                time.sleep(0.2)
            for s in clients:
                s.close()
        finally:
            e.stop()
    finally:
        who.stop()
    where = {"entrypoint": "dns", "router": "r@file", "service": "echo@file"}
    assert value(samples, "edge_udp_sessions", entrypoint="dns") == 2
    assert value(samples, ENDED, reason="evicted", **where) == 1
    assert value(samples, ENDED, reason="expired", **where) == 0
    assert value(samples, "edge_udp_sessions_total", **where) == 3
    assert value(samples, "edge_udp_no_route_total", entrypoint="dns") == 0
    assert value(samples, "edge_udp_sessions", entrypoint="idle") == 0
    assert value(later, "edge_udp_sessions", entrypoint="dns") == 0
    assert value(later, ENDED, reason="expired", **where) == 2
    assert value(later, ENDED, reason="evicted", **where) == 1
