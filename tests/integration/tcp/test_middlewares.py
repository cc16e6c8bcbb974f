"""TCP middlewares (issue 8, item 8): ``ipAllowList`` and ``inFlightConn``.

Pure first: validation (what disables a middleware and the routers naming it) and
the chain's bookkeeping. Then a real edge in front of ``edge whoami --tcp`` (an
echo): clients connect from 127.0.0.1 and 127.0.0.2 (both loopback), and through
an entry point with ``proxyProtocol`` the address a header names is the one
checked; a terminating TCP router checks after the TLS handshake, as Traefik's
middlewares sit behind its TLS handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import time

import pytest

from edge.app import Dataplane
from edge.config.loader import decode_dynamic, decode_static
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.rules import RequestView
from edge.tcp.middlewares import InFlightConn, IPAllowList, TCPChain
from tests.fixtures.tls.pki import PKI
from tests.harness import Edge
from tests.integration.peers import (
    run,
)

# -- validation and the chain, pure --------------------------------------------------------------


def runtime_of(middlewares: dict, router_middlewares: list[str]):
    conf = decode_dynamic(
        {
            "tcp": {
                "routers": {
                    "r": {"rule": "HostSNI(`*`)", "service": "s", "middlewares": router_middlewares}
                },
                "services": {"s": {"loadBalancer": {"servers": [{"address": "127.0.0.1:1"}]}}},
                "middlewares": middlewares,
            }
        }
    )
    return build_runtime(merge({"file": conf}), {"web": "tcp"})


@pytest.mark.parametrize(
    "config, error",
    [
        ({"ipAllowList": {"sourceRange": []}}, "ipAllowList: sourceRange is empty"),
        (
            {"ipAllowList": {"sourceRange": ["10.0.0.0/8", "nope"]}},
            "ipAllowList: sourceRange 'nope' is not an IP address or CIDR",
        ),
        ({"inFlightConn": {"amount": 0}}, "inFlightConn: amount 0 admits no connection"),
    ],
)
def test_a_middleware_that_cannot_be_built_disables_the_routers_naming_it(config, error):
    rt = runtime_of({"m": config}, ["m"])
    m = rt.tcp_middlewares["m@file"]
    assert m.status == "disabled" and m.errors == [error] and m.used_by == ["r@file"]
    r = rt.tcp_routers["r@file"]
    assert r.status == "disabled" and r.errors == [f"middleware 'm@file' is disabled: {error}"]


def test_a_router_naming_a_missing_middleware_is_disabled():
    rt = runtime_of({"m": {"inFlightConn": {"amount": 1}}}, ["m", "other"])
    assert rt.tcp_routers["r@file"].errors == ["middleware 'other@file' does not exist"]
    assert rt.tcp_middlewares["m@file"].status == "enabled"


def test_chain_counts_per_ip_and_gives_counts_back_on_refusal():
    limit = InFlightConn("limit", 1)
    allow = IPAllowList("allow", ["10.0.0.0/8", "::1"])
    chain = TCPChain([limit, allow])
    assert chain.enter("10.1.2.3") is None
    assert chain.enter("10.1.2.3") is limit  # a second one from the same IP
    assert chain.enter("10.9.9.9") is None  # another IP has its own count
    assert chain.enter("192.0.2.1") is allow and limit.connections == {"10.1.2.3": 1, "10.9.9.9": 1}
    chain.leave("10.1.2.3")
    assert chain.enter("10.1.2.3") is None
    assert allow.enter("::ffff:10.0.0.1") and allow.enter("::1") and not allow.enter("not an ip")


# -- through edge ------------------------------------------------------------------------------------


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def echoes(sock: socket.socket, data: bytes = b"ping\n") -> bool:
    """True when ``data`` comes back; False when the connection is closed without it."""
    try:
        sock.sendall(data)
        got = b""
        while len(got) < len(data):
            chunk = sock.recv(100)
            if not chunk:
                return False
            got += chunk
        return got == data
    except (ConnectionResetError, BrokenPipeError, TimeoutError):
        return False


@pytest.fixture(scope="module")
def edge(tmp_path_factory, echo):
    folder = tmp_path_factory.mktemp("tcp-mw")
    pki = PKI()
    crt, key = pki.issue("t.test").write(folder, "t")
    service = {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo.port}"}]}}
    routers = {
        "allow": {"rule": "HostSNI(`*`)", "middlewares": ["only2"]},
        "limit": {"rule": "HostSNI(`*`)", "middlewares": ["two"]},
        "pp": {"rule": "HostSNI(`*`)", "middlewares": ["doc"]},
        "tls": {"rule": "HostSNI(`t.test`)", "middlewares": ["only2"], "tls": {}},
    }
    dynamic = {
        "tcp": {
            "routers": {
                name: {**r, "service": "echo", "entryPoints": [name]} for name, r in routers.items()
            },
            "services": {"echo": service},
            "middlewares": {
                "only2": {"ipAllowList": {"sourceRange": ["127.0.0.2/32"]}},
                "two": {"inFlightConn": {"amount": 2}},
                "doc": {"ipAllowList": {"sourceRange": ["192.0.2.0/24"]}},
            },
        },
        "tls": {"certificates": [{"certFile": crt, "keyFile": key}]},
    }
    eps = {name: {"address": "127.0.0.1:0"} for name in routers}
    eps["pp"]["proxyProtocol"] = {"insecure": True}
    e = Edge(folder, dynamic, entrypoints=eps)
    e.ca = pki.write_ca(folder)
    yield e
    e.stop()


def test_ip_allow_list_admits_its_range_and_closes_the_rest(edge):
    with connect(edge.ports["allow"], "127.0.0.2") as s:
        assert echoes(s)
    with connect(edge.ports["allow"], "127.0.0.1") as s:
        assert not echoes(s)  # closed, nothing relayed
    edge.wait_for(
        r"tcp router allow@file: middleware only2@file refuses 127\.0\.0\.1; connection closed"
    )


def test_ip_allow_list_checks_the_address_a_proxy_protocol_header_names(edge):
    with connect(edge.ports["pp"]) as s:
        s.sendall(b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 443\r\n")
        assert echoes(s)
    with connect(edge.ports["pp"]) as s:
        s.sendall(b"PROXY TCP4 198.51.100.1 127.0.0.1 5555 443\r\n")
        assert not echoes(s)


def test_terminating_router_checks_after_the_handshake(edge):
    ctx = ssl.create_default_context(cafile=edge.ca)
    with ctx.wrap_socket(connect(edge.ports["tls"], "127.0.0.2"), server_hostname="t.test") as s:
        assert echoes(s)
    # the handshake completes (Traefik's order: TLS, then the middlewares), then edge closes
    with ctx.wrap_socket(connect(edge.ports["tls"], "127.0.0.1"), server_hostname="t.test") as s:
        assert not echoes(s)


def test_in_flight_conn_limits_simultaneous_connections_per_ip(edge):
    port = edge.ports["limit"]
    first, second = connect(port), connect(port)
    try:
        assert echoes(first) and echoes(second)
        with connect(port) as third:
            assert not echoes(third)  # a third from the same IP is closed
        with connect(port, "127.0.0.2") as other:
            assert echoes(other)  # another IP has its own count
        first.close()  # its relay ends: the count goes down
        deadline = time.monotonic() + 5
        while True:
            with connect(port) as again:
                if echoes(again):
                    break
            assert time.monotonic() < deadline, "the closed connection was never given back"
            time.sleep(0.1)
    finally:
        first.close()
        second.close()


def test_in_flight_counts_come_back_on_every_way_a_connection_ends(tmp_path):
    """``inFlightConn`` (amount 1) on a plain and a terminating TCP router, in process so
    the counts are read: a refused dial, a client reset mid-relay, a peek that times out,
    a failed handshake and a reload with a connection in flight each leave the counts
    as they should be, and the next connection from the same address is admitted."""
    pki = PKI()
    crt, key = pki.issue("t.test").write(tmp_path, "t")
    ca = pki.write_ca(tmp_path)
    static = decode_static(
        {
            "entryPoints": {
                "plain": {"address": "127.0.0.1:0"},
                "tls": {
                    "address": "127.0.0.1:0",
                    "transport": {"respondingTimeouts": {"readTimeout": "1s"}},
                },
            }
        }
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def echo(reader, writer) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(65536):
                    writer.write(data)
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        live = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
        closed.close()  # nothing listens there: a dial is refused
        dp = Dataplane(static, loop)
        await dp.start()

        def apply(extra_router: bool = False) -> None:
            routers = {
                "p": {
                    "rule": "HostSNI(`*`)",
                    "service": "both",
                    "entryPoints": ["plain"],
                    "middlewares": ["one"],
                },
                "t": {
                    "rule": "HostSNI(`t.test`)",
                    "service": "live",
                    "entryPoints": ["tls"],
                    "middlewares": ["one"],
                    "tls": {},
                },
            }
            if extra_router:
                routers["x"] = {
                    "rule": "HostSNI(`x.test`)",
                    "service": "live",
                    "entryPoints": ["tls"],
                    "tls": {},
                }
            dynamic = {
                "tcp": {
                    "routers": routers,
                    "services": {  # equal weights, dead first: connections alternate dead, live
                        "both": {
                            "loadBalancer": {"servers": [{"address": dead}, {"address": live}]}
                        },
                        "live": {"loadBalancer": {"servers": [{"address": live}]}},
                    },
                    "middlewares": {"one": {"inFlightConn": {"amount": 1}}},
                },
                "tls": {"certificates": [{"certFile": crt, "keyFile": key}]},
            }
            runtime = build_runtime(
                merge({"file": decode_dynamic(dynamic)}), static.entry_point_protocols()
            )
            assert not [e for e in runtime.errors() if "warning" not in e], runtime.errors()
            dp.apply(runtime)

        def counts(ep: str, name: str) -> dict:
            routers = dp.entrypoints.all[ep].routers.tcp
            route = (
                routers.at_once("127.0.0.1")
                if ep == "plain"
                else routers._tls.match(RequestView(sni="t.test", client_ip="127.0.0.1")).value
            )
            return route.middlewares.steps[0].connections

        async def settled(ep: str, want: dict) -> None:
            for _ in range(250):
                if counts(ep, "one") == want:
                    return
                await asyncio.sleep(0.02)
            raise AssertionError(f"{ep}: counts {counts(ep, 'one')}, expected {want}")

        async def echoes(port: int, tls: ssl.SSLContext | None = None) -> tuple:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=tls, server_hostname="t.test" if tls else None
            )
            writer.write(b"ping")
            got = await asyncio.wait_for(reader.read(4), 5)
            return got == b"ping", reader, writer

        try:
            apply()
            plain, secure = dp.entrypoints.all["plain"].port, dp.entrypoints.all["tls"].port
            # a refused dial (the dead server) gives the count back
            reader, writer = await asyncio.open_connection("127.0.0.1", plain)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            await settled("plain", {})
            # a client reset mid-relay (the live server) gives it back
            ok, reader, writer = await echoes(plain)
            assert ok and counts("plain", "one") == {"127.0.0.1": 1}
            writer.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            writer.transport.abort()  # RST
            await settled("plain", {})
            # a peek that times out (part of a ClientHello, readTimeout 1 s) never counted
            reader, writer = await asyncio.open_connection("127.0.0.1", secure)
            writer.write(b"\x16\x03\x01\x02\x00")  # a record header, then silence
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            # a failed handshake (the client refuses edge's certificate) never counted
            with pytest.raises(ssl.SSLError):
                await echoes(secure, ssl.create_default_context())  # no test CA: verification fails
            assert counts("tls", "one") == {}
            # then one connection is admitted, and counted while it lasts
            trusting = ssl.create_default_context(cafile=ca)
            ok, reader, writer = await echoes(secure, trusting)
            assert ok and counts("tls", "one") == {"127.0.0.1": 1}
            old = (
                dp.entrypoints.all["tls"]
                .routers.tcp._tls.match(RequestView(sni="t.test", client_ip="127.0.0.1"))
                .value
            )
            # a reload with it in flight: new counts for the new routers; it leaves the old ones
            apply(extra_router=True)
            assert counts("tls", "one") == {}
            ok2, _, writer2 = await echoes(secure, trusting)
            assert ok2 and counts("tls", "one") == {"127.0.0.1": 1}
            writer.close()
            writer2.close()
            await settled("tls", {})
            for _ in range(250):
                if old.middlewares.steps[0].connections == {}:
                    break
                await asyncio.sleep(0.02)
            assert old.middlewares.steps[0].connections == {}
        finally:
            await dp.stop()
            server.close()

    run(main)
