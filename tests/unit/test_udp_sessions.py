"""UDP without sockets: the session table, UDP routers and services, the PROXY v2 header,
pktinfo parsing, and the udp configuration keys."""

from __future__ import annotations

import socket
import struct

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.config.dynamic import UDPLoadBalancer
from edge.config.loader import decode_dynamic, decode_static
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.router.udp import UDPServer, build_udp_routers
from edge.udp.mmsg import address_of
from edge.udp.server import IP_PKTINFO, local_from_pktinfo, proxy_v2_header
from edge.udp.sessions import Counters, Session, SessionTable


def session(client, timeout: float = 3.0) -> Session:
    return Session(client, Counters("r", "s"), timeout=timeout)


# --- the session table ------------------------------------------------------------


def test_sessions_are_filed_under_their_key():
    """A session read by recvmmsg is filed under its raw sockaddr, not its address tuple:
    lookup, the duplicate check, eviction, removal and expiry all go by the key."""
    table = SessionTable(max_sessions=2)
    a = Session(("10.0.0.1", 1), Counters("r", "s"), timeout=1.0, key=b"raw-a")
    b = Session(("10.0.0.1", 2), Counters("r", "s"), timeout=1.0, key=b"raw-b")
    assert table.add(a, now=0.0) is None and table.add(b, now=1.0) is None
    assert table.get(b"raw-a") is a and table.get(("10.0.0.1", 1)) is None
    with pytest.raises(KeyError):
        table.add(Session(("10.9.9.9", 9), Counters("r", "s"), timeout=1.0, key=b"raw-a"), 2.0)
    c = Session(("10.0.0.1", 3), Counters("r", "s"), timeout=1.0, key=b"raw-c")
    assert table.add(c, now=2.0) is a and table.get(b"raw-a") is None
    assert table.remove(b) is True and table.get(b"raw-b") is None
    assert table.expire(now=10.0, shortest=1.0) == [c] and len(table) == 0
    assert session(("10.0.0.1", 4)).key == ("10.0.0.1", 4)  # no key: the address itself


def test_address_of_raw_sockaddrs():
    """sockaddr_in / sockaddr_in6 as the kernel writes them (port and flowinfo in network
    order, scope id in host order) read as the socket module's recvfrom gives them."""
    v4 = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 5353)
    v4 += socket.inet_pton(socket.AF_INET, "192.0.2.7") + bytes(8)
    assert address_of(v4) == ("192.0.2.7", 5353)
    v6 = struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", 53, 0x12345)
    v6 += socket.inet_pton(socket.AF_INET6, "fe80::1") + struct.pack("=I", 3)
    assert address_of(v6) == ("fe80::1", 53, 0x12345, 3)
    mapped = v6[:8] + socket.inet_pton(socket.AF_INET6, "::ffff:192.0.2.7") + bytes(4)
    assert address_of(mapped) == ("::ffff:192.0.2.7", 53, 0x12345, 0)


def test_add_get_and_len():
    table = SessionTable(10)
    a = session(("1.1.1.1", 1))
    assert table.add(a, now=1.0) is None
    assert table.get(("1.1.1.1", 1)) is a and a.last == 1.0
    assert len(table) == 1
    assert table.get(("1.1.1.1", 2)) is None
    with pytest.raises(KeyError):
        table.add(session(("1.1.1.1", 1)), now=2.0)


def test_full_table_evicts_the_least_recently_active():
    table = SessionTable(3)
    a, b, c, d = (session(("10.0.0.1", p)) for p in (1, 2, 3, 4))
    for i, s in enumerate((a, b, c)):
        table.add(s, now=float(i))
    table.touch(a, now=5.0)  # a is now the most recent: b is the oldest idle
    assert table.add(d, now=6.0) is b
    assert len(table) == 3
    assert table.get(b.client) is None
    assert {s.client[1] for s in table} == {1, 3, 4}
    # stamps within one tick: the one stamped first goes first
    e = session(("10.0.0.1", 5))
    table.touch(c, now=6.0)
    assert table.add(e, now=6.0) is a  # a (5.0) is older than c and d (6.0)
    assert table.add(session(("10.0.0.1", 6)), now=6.0) is d  # stamped 6.0 before c was


def test_expire_uses_each_session_timeout():
    table = SessionTable(10)
    short = session(("a", 1), timeout=1.0)
    long = session(("a", 2), timeout=10.0)
    table.add(short, now=0.0)
    table.add(long, now=0.0)
    assert table.expire(now=0.5, shortest=1.0) == []
    assert table.expire(now=1.0, shortest=1.0) == [short]
    assert table.expire(now=9.9, shortest=1.0) == []
    assert table.expire(now=10.0, shortest=1.0) == [long]
    assert len(table) == 0


def test_expire_waits_out_the_slack():
    """A stamp may lag its datagram by ``slack``: no session ends before its timeout."""
    table = SessionTable(10)
    s = session(("a", 1), timeout=1.0)
    table.add(s, now=0.0)
    assert table.expire(now=1.4, shortest=1.0, slack=0.5) == []
    assert table.expire(now=1.5, shortest=1.0, slack=0.5) == [s]


def test_expire_pops_only_what_is_old_enough():
    """Entries younger than the shortest timeout are not visited; a longer timeout is
    kept for a later sweep; a stamp refreshed since its entry goes back in."""
    table = SessionTable(10)
    long = session(("a", 1), timeout=10.0)
    busy = session(("a", 2), timeout=1.0)
    young = session(("a", 3), timeout=1.0)
    table.add(long, now=0.0)
    table.add(busy, now=0.0)
    table.add(young, now=4.5)
    table.touch(busy, now=4.2)
    young.last = -100.0  # not a stamp the data plane writes: shows the entry is not reached
    assert table.expire(now=5.0, shortest=1.0) == []
    assert len(table) == 3
    young.last = 4.5
    assert table.expire(now=5.5, shortest=1.0) == [busy, young]
    assert table.expire(now=9.9, shortest=1.0) == []
    assert table.expire(now=10.0, shortest=1.0) == [long]


def test_touch_keeps_a_session_alive():
    table = SessionTable(10)
    s = session(("a", 1), timeout=1.0)
    table.add(s, now=0.0)
    for t in (0.9, 1.8, 2.7):
        assert table.expire(now=t, shortest=1.0) == []
        table.touch(s, now=t)
    assert table.expire(now=3.7, shortest=1.0) == [s]


def test_remove_is_once():
    table = SessionTable(2)
    s = session(("a", 1))
    table.add(s, now=0.0)
    assert table.remove(s) is True
    assert table.remove(s) is False
    # a newer session for the same client is not removed through the old one
    t = session(("a", 1))
    table.add(t, now=1.0)
    assert table.remove(s) is False and table.get(("a", 1)) is t


def test_clear_returns_everything():
    table = SessionTable(5)
    for p in range(4):
        table.add(session(("a", p)), now=0.0)
    assert len(table.clear()) == 4 and len(table) == 0


def test_max_sessions_must_be_positive():
    with pytest.raises(ValueError):
        SessionTable(0)


ops = st.lists(
    st.tuples(st.sampled_from(["add", "touch", "expire"]), st.integers(0, 7), st.integers(1, 3)),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(1, 5))
def test_table_matches_a_model(operations, bound):
    """Against a dict of last-activity times: same members, same expiries, and each
    eviction takes a least recently active session (the first touched among equals)."""
    table = SessionTable(bound)
    model: dict[int, tuple[float, float, int]] = {}  # client -> (last, timeout, touch number)
    now = 0.0
    for number, (op, client, step) in enumerate(operations):
        now += step if op != "touch" or step > 1 else 0  # equal stamps happen: one tick
        if op == "add" and client not in model:
            evicted = table.add(session(client, timeout=float(step + 1)), now)
            if len(model) >= bound:
                oldest = min(model, key=lambda c: (model[c][0], model[c][2]))
                assert evicted is not None and evicted.client == oldest
                del model[oldest]
            else:
                assert evicted is None
            model[client] = (now, float(step + 1), number)
        elif op == "touch" and client in model:
            if table.get(client).last != now:  # a second datagram in one tick changes nothing
                table.touch(table.get(client), now)
                model[client] = (now, model[client][1], number)
        elif op == "expire":
            gone = {s.client for s in table.expire(now, shortest=1.0)}
            want = {c for c, (last, timeout, _) in model.items() if now - last >= timeout}
            assert gone == want
            for c in want:
                del model[c]
        assert len(table) == len(model) <= bound
        assert {s.client for s in table} == set(model)


def test_counters_add_and_dict():
    a, b = Counters("r", "s"), Counters("r", "s")
    a.datagrams_to_server, b.datagrams_to_server, b.sessions_evicted = 2, 3, 1
    a.add(b)
    d = a.as_dict()
    assert d["datagrams_to_server"] == 5 and d["sessions_evicted"] == 1
    assert "router" not in d


# --- routers and services -----------------------------------------------------------


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


def test_proxy_protocol_version_1_is_refused_for_udp():
    with pytest.raises(Exception, match="version 2"):
        decode_dynamic(udp({}, {}, {"pp": {"proxyProtocol": {"version": 1}}}))


def test_session_timeout_must_be_positive():
    with pytest.raises(msgspec.ValidationError, match="sessionTimeout"):
        msgspec.convert({"sessionTimeout": 0}, UDPLoadBalancer, dec_hook=_dec)


def _dec(type_, obj):
    from edge.config.durations import dec_hook

    return dec_hook(type_, obj)


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


def test_static_max_sessions():
    static = decode_static({"entryPoints": {"dns": {"address": ":53/udp"}}})
    assert static.entry_points["dns"].udp.max_sessions == 10_000
    static = decode_static(
        {"entryPoints": {"dns": {"address": ":53/udp", "udp": {"maxSessions": 5}}}}
    )
    assert static.entry_points["dns"].udp.max_sessions == 5
    with pytest.raises(Exception, match="maxSessions"):
        decode_static({"entryPoints": {"dns": {"address": ":53/udp", "udp": {"maxSessions": 0}}}})


# --- PROXY protocol v2 and pktinfo ---------------------------------------------------


def test_proxy_v2_header_ipv4():
    header = proxy_v2_header(("192.0.2.1", 5000), ("198.51.100.7", 53))
    assert header[:12] == b"\r\n\r\n\x00\r\nQUIT\n"
    assert header[12:16] == b"\x21\x12\x00\x0c"  # v2 PROXY, UDP over IPv4, 12 bytes
    assert header[16:] == socket.inet_aton("192.0.2.1") + socket.inet_aton(
        "198.51.100.7"
    ) + struct.pack("!HH", 5000, 53)


def test_proxy_v2_header_unmaps_dual_stack_addresses():
    assert proxy_v2_header(("::ffff:192.0.2.1", 5000, 0, 0), ("::ffff:127.0.0.2", 53, 0, 0)) == (
        proxy_v2_header(("192.0.2.1", 5000), ("127.0.0.2", 53))
    )


def test_proxy_v2_header_ipv6():
    header = proxy_v2_header(("2001:db8::1", 5000, 0, 0), ("2001:db8::2", 53, 0, 0))
    assert header[12:16] == b"\x21\x22\x00\x24"  # UDP over IPv6, 36 bytes
    assert header[16:32] == socket.inet_pton(socket.AF_INET6, "2001:db8::1")
    assert header[48:] == struct.pack("!HH", 5000, 53)
    assert len(header) == 16 + 36


def test_pktinfo_ipv6_and_mapped():
    data = socket.inet_pton(socket.AF_INET6, "::ffff:127.0.0.2") + struct.pack("=I", 1)
    local, reply = local_from_pktinfo([(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, data)], 53)
    assert local == ("::ffff:127.0.0.2", 53)
    assert reply == [
        (socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, data[:16] + bytes(4))
    ]  # no interface
    link = socket.inet_pton(socket.AF_INET6, "fe80::1") + struct.pack("=I", 7)
    _, reply = local_from_pktinfo([(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, link)], 53)
    assert reply[0][2] == link  # a link-local source keeps its interface


@pytest.mark.skipif(IP_PKTINFO is None, reason="IP_PKTINFO is not available on this platform")
def test_pktinfo_ipv4():
    data = struct.pack("=I", 2) + socket.inet_aton("10.0.0.1") + socket.inet_aton("10.0.0.9")
    local, reply = local_from_pktinfo([(socket.IPPROTO_IP, IP_PKTINFO, data)], 53)
    assert local == ("10.0.0.9", 53)  # ipi_addr: where the client wrote
    assert reply == [  # from ipi_spec_dst: the local address (differs for a broadcast)
        (socket.IPPROTO_IP, IP_PKTINFO, bytes(4) + socket.inet_aton("10.0.0.1") + bytes(4))
    ]
    assert local_from_pktinfo([], 53) == (None, None)
