"""Upstream keep-alive pools: reuse, idleConnTimeout, maxIdleConnsPerHost, and survival across reloads.

whoami reports the address the request came from, which for a proxied request
is edge's side of the upstream connection: the same address means the same
pooled connection.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from tests.harness import Edge, get


def dyn(whoami, transport: dict | None = None, extra_router: bool = False) -> dict:
    lb = {"servers": [{"url": whoami.url}]}
    conf = {"http": {"routers": {"a": {"rule": "Host(`a.test`)", "service": "a"}}, "services": {"a": {"loadBalancer": lb}}}}
    if transport is not None:
        lb["serversTransport"] = "t"
        conf["http"]["serversTransports"] = {"t": transport}
    if extra_router:
        conf["http"]["routers"]["extra"] = {"rule": "Host(`extra.test`)", "service": "a"}
    return conf


def upstream_addr(edge, path="/") -> str:
    status, _, body = get(edge.port, path, host="a.test")
    assert status == 200
    return json.loads(body)["remoteAddr"]


def concurrent_addrs(edge, n: int) -> set[str]:
    with ThreadPoolExecutor(n) as pool:
        return set(pool.map(lambda _: upstream_addr(edge, "/?delay=0.3"), range(n)))


def test_connections_are_reused_across_clients_and_reloads(tmp_path, parser, whoami):
    e = Edge(tmp_path, dyn(whoami), parser=parser)
    try:
        first = upstream_addr(e)
        assert upstream_addr(e) == first  # a new client connection, the same upstream one
        n = e.applied()
        e.write_dynamic(dyn(whoami, extra_router=True))  # routers change, the transport does not
        e.wait_applied(n + 1)
        assert get(e.port, "/", host="extra.test")[0] == 200
        assert upstream_addr(e) == first
    finally:
        e.stop()


def test_changed_transport_gets_new_connections(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami, {"maxIdleConnsPerHost": 10}))
    try:
        first = upstream_addr(e)
        n = e.applied()
        e.write_dynamic(dyn(whoami, {"maxIdleConnsPerHost": 20}))
        e.wait_applied(n + 1)
        assert upstream_addr(e) != first
    finally:
        e.stop()


def test_idle_conn_timeout_closes_pooled_connections(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami, {"forwardingTimeouts": {"idleConnTimeout": "300ms"}}))
    try:
        first = upstream_addr(e)
        assert upstream_addr(e) == first
        time.sleep(1.5)
        assert upstream_addr(e) != first
    finally:
        e.stop()


def test_max_idle_conns_per_host(tmp_path, whoami):
    # Four requests at once need four upstream connections; with a cap of
    # one, only one of them stays pooled for the next round.
    for cap, kept in ((1, 1), (4, 4)):
        d = tmp_path / f"cap{cap}"
        d.mkdir()
        e = Edge(d, dyn(whoami, {"maxIdleConnsPerHost": cap}))
        try:
            round1 = concurrent_addrs(e, 4)
            assert len(round1) == 4
            round2 = concurrent_addrs(e, 4)
            assert len(round1 & round2) == kept, (cap, round1, round2)
        finally:
            e.stop()


def test_weighted_services(tmp_path, whoami, whoami2):
    conf = {
        "http": {
            "routers": {"w": {"rule": "Host(`w.test`)", "service": "canary"}},
            "services": {
                "canary": {"weighted": {"services": [{"name": "stable", "weight": 4}, {"name": "next", "weight": 1}]}},
                "stable": {"loadBalancer": {"servers": [{"url": whoami.url}]}},
                "next": {"loadBalancer": {"servers": [{"url": whoami2.url}]}},
            },
        }
    }
    e = Edge(tmp_path, conf)
    try:
        names = [json.loads(get(e.port, "/", host="w.test")[2])["name"] for _ in range(10)]
        assert names.count("w1") == 8 and names.count("w2") == 2
    finally:
        e.stop()


def test_a_lone_keep_alive_goes_upstream_only_when_the_connection_is_pooled(tmp_path, parser, whoami):
    """A client's ``Connection: keep-alive`` says what edge means for a pooled upstream
    connection too, so it stays; without pooling it would be untrue, so it is cut."""
    for transport, expected in ((None, ["keep-alive"]), ({"maxIdleConnsPerHost": 0}, None)):
        d = tmp_path / ("pooled" if transport is None else "unpooled")
        d.mkdir()
        e = Edge(d, dyn(whoami, transport), parser=parser)
        try:
            status, _, body = get(e.port, "/", host="a.test", headers={"Connection": "keep-alive"})
            assert status == 200
            assert json.loads(body)["headers"].get("Connection") == expected, transport
        finally:
            e.stop()
