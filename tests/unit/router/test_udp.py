"""edge.router.udp without sockets: one router per UDP entry point, weighted services,
servers down and names unresolved, the PROXY protocol transport."""

from __future__ import annotations

import socket

from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.router.udp import UDPLoadBalancer, UDPServer, build_udp_routers, udp_servers_for


def runtime_of(dynamic: dict, entry_points: dict | None = None, *, qualify: bool = False):
    conf = decode_dynamic(dynamic)
    if qualify:
        conf = merge({"file": conf})
    return build_runtime(conf, entry_points or {"dns": "udp", "web": "tcp"})


def udp(routers: dict, services: dict, transports: dict | None = None) -> dict:
    section = {"routers": routers, "services": services}
    if transports is not None:
        section["serversTransports"] = transports
    return {"udp": section}


def lb(*addresses: str, **extra) -> dict:
    return {"loadBalancer": {"servers": [{"address": a} for a in addresses], **extra}}


def test_router_per_udp_entry_point_and_weights():
    rt = runtime_of(
        udp(
            {"r": {"service": "s"}},
            {
                "s": {
                    "loadBalancer": {
                        "servers": [
                            {"address": "127.0.0.1:1001", "weight": 3},
                            {"address": "127.0.0.1:1002", "weight": 1},
                            {"address": "127.0.0.1:1003", "weight": 0},
                        ]
                    }
                }
            },
        ),
        qualify=True,
    )
    routers = build_udp_routers(rt, None, ["dns", "web"])
    assert set(routers) == {"dns"}  # a UDP router attaches to UDP entry points only
    router = routers["dns"]
    assert router.name == "r@file"
    picks = [router.pick(()).port for _ in range(8)]
    assert picks.count(1001) == 6 and picks.count(1002) == 2 and 1003 not in picks
    assert set(router.servers) == {"127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"}


def test_pick_skips_down_servers_until_all_are_down():
    rt = runtime_of(udp({"r": {"service": "s"}}, {"s": lb("127.0.0.1:1", "127.0.0.1:2")}))
    router = build_udp_routers(rt, None, ["dns"])["dns"]
    assert {router.pick({"127.0.0.1:1"}).port for _ in range(4)} == {2}
    # every server down: a pick still happens (the mark is a hint, not a verdict)
    assert router.pick({"127.0.0.1:1", "127.0.0.1:2"}) is not None


def test_weighted_service_and_its_leaves():
    rt = runtime_of(
        udp(
            {"r": {"service": "w"}},
            {
                "w": {
                    "weighted": {
                        "services": [{"name": "a", "weight": 1}, {"name": "b", "weight": 1}]
                    }
                },
                "a": lb("127.0.0.1:1"),
                "b": lb("127.0.0.1:2", sessionTimeout="30s"),
            },
        )
    )
    router = build_udp_routers(rt, None, ["dns"])["dns"]
    assert sorted(s.port for s in (router.pick(()) for _ in range(4))) == [1, 1, 2, 2]
    assert router.servers["127.0.0.1:2"].timeout == 30.0
    assert router.servers["127.0.0.1:1"].timeout is None
    # a child whose servers are all down does not starve the other
    assert {router.pick({"127.0.0.1:1"}).port for _ in range(4)} == {2}


def test_first_router_by_name_serves_and_the_others_are_warned():
    rt = runtime_of(
        udp(
            {"b": {"service": "s2"}, "a": {"service": "s1"}},
            {"s1": lb("127.0.0.1:1"), "s2": lb("127.0.0.1:2")},
        )
    )
    assert build_udp_routers(rt, None, ["dns"])["dns"].name == "a"
    assert rt.udp_routers["a"].status == "enabled"
    b = rt.udp_routers["b"]
    assert b.status == "warning"
    assert any("served by udp router 'a'" in e for e in b.errors)


def test_disabled_router_does_not_serve():
    rt = runtime_of(
        udp({"a": {"service": "missing"}, "b": {"service": "s"}}, {"s": lb("127.0.0.1:2")})
    )
    assert rt.udp_routers["a"].status == "disabled"
    assert build_udp_routers(rt, None, ["dns"])["dns"].name == "b"
    assert rt.udp_routers["b"].status == "enabled"


def test_proxy_protocol_transport():
    rt = runtime_of(
        udp(
            {"r": {"service": "s"}},
            {
                "s": lb("127.0.0.1:1", serversTransport="pp"),
                "t": lb("127.0.0.1:2", serversTransport="nope"),
            },
            {"pp": {"proxyProtocol": {"version": 2}}},
        )
    )
    assert build_udp_routers(rt, None, ["dns"])["dns"].servers["127.0.0.1:1"].proxy_protocol
    assert rt.udp_services["t"].status == "disabled"
    assert "serversTransport 'nope' does not exist" in rt.udp_services["t"].errors[0]


def test_server_addresses_numeric_and_names():
    assert UDPServer("s", "127.0.0.1:53").sockaddr == ("127.0.0.1", 53)
    v6 = UDPServer("s", "[::1]:53")
    assert v6.family == socket.AF_INET6 and v6.sockaddr[:2] == ("::1", 53)
    named = UDPServer("s", "dns.example:53")
    assert named.sockaddr is None and (named.host, named.port) == ("dns.example", 53)
    rt = runtime_of(udp({"r": {"service": "s"}}, {"s": lb("dns.example:53")}))
    router = build_udp_routers(rt, None, ["dns"])["dns"]
    assert router.unresolved() == [router.servers["dns.example:53"]]
    assert router.pick(()) is None  # not picked before it resolves


def test_udp_servers_for_updates_the_live_load_balancer_and_its_router():
    """The endpoints-only path: the live load balancer takes the new runtime's servers,
    and its router's address table follows once refreshed."""
    built: dict = {}
    routers = build_udp_routers(
        runtime_of(udp({"r": {"service": "s"}}, {"s": lb("127.0.0.1:1001")})), None, ["dns"], built
    )
    router = routers["dns"]
    live = built["s"]
    assert isinstance(live, UDPLoadBalancer) and router.service is live
    new = runtime_of(udp({"r": {"service": "s"}}, {"s": lb("127.0.0.1:1002", "127.0.0.1:1003")}))
    ((found, members),) = udp_servers_for(built, new, ["s"])
    assert found is live
    live.update(members)
    assert {live.pick(()).address for _ in range(2)} == {"127.0.0.1:1002", "127.0.0.1:1003"}
    assert set(router.servers) == {"127.0.0.1:1001"}
    router.refresh()
    assert set(router.servers) == {"127.0.0.1:1002", "127.0.0.1:1003"}
