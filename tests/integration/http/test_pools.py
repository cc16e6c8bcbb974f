"""Upstream keep-alive pools: reuse, idleConnTimeout, maxIdleConnsPerHost, and survival across reloads.

whoami reports the address the request came from, which for a proxied request
is edge's side of the upstream connection: the same address means the same
pooled connection.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

from edge.config.dynamic import ServersTransport
from edge.http.codec.parsers import parser_classes
from edge.http.server.upstream import UpstreamConnection
from edge.transports import DEFAULT_TRANSPORT, ServerURL, TransportRegistry
from tests.harness import Edge, get


def dyn(whoami, transport: dict | None = None, extra_router: bool = False) -> dict:
    lb = {"servers": [{"url": whoami.url}]}
    conf = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "a"}},
            "services": {"a": {"loadBalancer": lb}},
        }
    }
    if transport is not None:
        lb["serversTransport"] = "t"
        conf["http"]["serversTransports"] = {"t": transport}
    if extra_router:
        conf["http"]["routers"]["extra"] = {"rule": "Host(`extra.test`)", "service": "a"}
    return conf


def upstream_addr(edge, path="/", host="a.test") -> str:
    status, _, body = get(edge.port, path, host=host)
    assert status == 200
    return json.loads(body)["remoteAddr"]


def concurrent_addrs(edge, n: int, host: str = "a.test") -> set[str]:
    with ThreadPoolExecutor(n) as pool:
        return set(pool.map(lambda _: upstream_addr(edge, "/?delay=0.3", host), range(n)))


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


def capped(whoami, caps: tuple[int, ...]) -> dict:
    """Per cap a router (Host ``cap<N>.test``) to a service of its own whose transport
    keeps at most N idle connections (-1: none, no pooling), all on one whoami."""
    return {
        "http": {
            "routers": {
                f"cap{cap}": {"rule": f"Host(`cap{cap}.test`)", "service": f"cap{cap}"}
                for cap in caps
            },
            "services": {
                f"cap{cap}": {
                    "loadBalancer": {
                        "servers": [{"url": whoami.url}],
                        "serversTransport": f"cap{cap}",
                    }
                }
                for cap in caps
            },
            "serversTransports": {f"cap{cap}": {"maxIdleConnsPerHost": cap} for cap in caps},
        }
    }


def test_max_idle_conns_per_host(tmp_path, whoami):
    # Four requests at once need four upstream connections; with a cap of
    # one, only one of them stays pooled for the next round.
    e = Edge(tmp_path, capped(whoami, (1, 4)))
    try:
        for cap, kept in ((1, 1), (4, 4)):
            round1 = concurrent_addrs(e, 4, f"cap{cap}.test")
            assert len(round1) == 4
            round2 = concurrent_addrs(e, 4, f"cap{cap}.test")
            assert len(round1 & round2) == kept, (cap, round1, round2)
    finally:
        e.stop()


def test_weighted_services(tmp_path, whoami, whoami2):
    conf = {
        "http": {
            "routers": {"w": {"rule": "Host(`w.test`)", "service": "canary"}},
            "services": {
                "canary": {
                    "weighted": {
                        "services": [{"name": "stable", "weight": 4}, {"name": "next", "weight": 1}]
                    }
                },
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


def test_a_lone_keep_alive_goes_upstream_only_when_the_connection_is_pooled(
    tmp_path, parser, whoami
):
    """A client's ``Connection: keep-alive`` says what edge means for a pooled upstream
    connection too, so it stays; without pooling it would be untrue, so it is cut."""
    e = Edge(tmp_path, capped(whoami, (100, -1)), parser=parser)
    try:
        for cap, expected in ((100, ["keep-alive"]), (-1, None)):
            headers = {"Connection": "keep-alive"}
            status, _, body = get(e.port, "/", host=f"cap{cap}.test", headers=headers)
            assert status == 200
            assert json.loads(body)["headers"].get("Connection") == expected, cap
    finally:
        e.stop()


# -- the pool itself, over real sockets (a listener in the test's own loop) ---------------


async def _pool_case(body) -> None:
    """Run ``body(registry, server, dial, peers)``: ``dial(transport)`` makes an upstream
    connection to a local listener, whose accepted sockets are ``peers`` (writers)."""
    loop = asyncio.get_running_loop()
    peers: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer)

    listener = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    response_parser = parser_classes("httptools")[1]
    registry = TransportRegistry(loop)
    server = ServerURL(f"http://127.0.0.1:{port}")

    async def dial(transport) -> UpstreamConnection:
        conn = await transport.dial(server, lambda: UpstreamConnection(response_parser))
        for _ in range(200):  # the listener's accept callback has run
            if len(peers) == conn_count[0] + 1:
                break
            await asyncio.sleep(0.005)
        conn_count[0] += 1
        return conn

    conn_count = [0]
    try:
        async with asyncio.timeout(10):
            await body(registry, server, dial, peers)
    finally:
        registry.close()
        for w in peers:
            w.close()
        listener.close()
        await listener.wait_closed()


async def _until(check, what: str) -> None:
    for _ in range(400):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(what)


def test_a_connection_the_server_closed_while_idle_is_never_handed_out():
    async def body(registry, server, dial, peers):
        t = registry.get(DEFAULT_TRANSPORT)
        kept, dropped = await dial(t), await dial(t)
        t.put_idle(server, kept)
        t.put_idle(server, dropped)  # the most recent: taken first, unless it closed
        peers[1].close()  # the server closes the second connection while it is idle
        await _until(lambda: dropped.transport is None, "the connection saw its close")
        assert t.take_idle(server) is kept
        assert t.take_idle(server) is None

    asyncio.run(_pool_case(body))


def test_a_connection_given_back_after_its_transport_changed_is_closed():
    """A request in flight across a reload that changed its ServersTransport gives its
    connection back to the old transport: closed there, not kept where nobody sweeps."""

    async def body(registry, server, dial, peers):
        registry.update({"t": ServersTransport(max_idle_conns_per_host=10)})
        old = registry.get("t")
        in_flight, pooled = await dial(old), await dial(old)
        old.put_idle(server, pooled)
        registry.update({"t": ServersTransport(max_idle_conns_per_host=20)})
        new = registry.get("t")
        assert new is not old
        await _until(
            lambda: pooled.transport is None, "the old transport closed its idle connection"
        )
        old.put_idle(server, in_flight)  # the request in flight ends
        await _until(lambda: in_flight.transport is None, "the connection given back was closed")
        assert old.take_idle(server) is None
        assert new.take_idle(server) is None
        # The same server through the new transport: a pool of its own.
        fresh = await dial(new)
        new.put_idle(server, fresh)
        assert new.take_idle(server) is fresh

    asyncio.run(_pool_case(body))


def test_one_server_through_two_transports_has_a_pool_in_each():
    async def body(registry, server, dial, peers):
        registry.update({"t": ServersTransport(max_idle_conns_per_host=1)})
        a, b = registry.get(DEFAULT_TRANSPORT), registry.get("t")
        ca, cb, extra = await dial(a), await dial(b), await dial(b)
        a.put_idle(server, ca)
        b.put_idle(server, cb)
        b.put_idle(server, extra)  # over t's maxIdleConnsPerHost of 1: closed
        await _until(lambda: extra.transport is None, "the connection over the cap was closed")
        assert a.take_idle(server) is ca and a.take_idle(server) is None
        assert b.take_idle(server) is cb and b.take_idle(server) is None

    asyncio.run(_pool_case(body))
