"""Review of the PROXY protocol entry points, TCP middlewares and UDP (the defects it found).

Each test here failed on the commit before its fix:

- a peer that sends no PROXY protocol header and nothing else (a client waiting for a
  server that speaks first, SMTP or SSH) was closed at the header's deadline, or at
  once on its EOF, so a ``HostSNI(`*`)`` TCP router never relayed it on an entry
  point with ``proxyProtocol``; go-proxyproto (Traefik) reads a timeout or an EOF
  before the first byte as "no header" and goes on;
- IPv4-mapped entries in ``proxyProtocol.trustedIPs`` and in a TCP ``ipAllowList``'s
  ``sourceRange`` matched no client: clients are compared unmapped, the entries were
  not (Traefik's checker unmaps both).

Real edge processes, real sockets on 127.0.0.0/8, ephemeral ports; every wait bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
from edge.tcp.middlewares import IPAllowList, networks
from edge.tcp.proxied import trust
from edge.tcp.proxyproto import Verdict, encode_v1, encode_v2, parse
from tests.fixtures.tls.pki import PKI
from tests.harness import Edge
from tests.integration.test_tls_tcp import Backend
from tests.integration.test_udp import InProcess, client, lb, named, one_service, run

BANNER = b"220 edge-review ready\r\n"


def recv_exactly(sock: socket.socket, n: int, timeout: float = 5.0) -> bytes:
    """Up to ``n`` bytes, stopping early at EOF or after ``timeout`` seconds."""
    sock.settimeout(timeout)
    got = b""
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        try:
            chunk = sock.recv(n - len(got))
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        got += chunk
    return got


# -- a peer that sends nothing: no header ------------------------------------------------------------


@pytest.fixture(scope="module")
def speaks_first(tmp_path_factory):
    """edge with ``proxyProtocol`` (127.0.0.1 trusted, readTimeout 1 s: the header's deadline)
    and a ``HostSNI(`*`)`` TCP router to a server that speaks first, then echoes."""
    backend = Backend(banner=BANNER)
    folder = tmp_path_factory.mktemp("speaks-first")
    eps = {
        "pp": {
            "address": "127.0.0.1:0",
            "proxyProtocol": {"trustedIPs": ["127.0.0.1/32"]},
            "transport": {"respondingTimeouts": {"readTimeout": "1s"}},
        }
    }
    dynamic = {
        "tcp": {
            "routers": {"smtp": {"rule": "HostSNI(`*`)", "service": "smtp"}},
            "services": {
                "smtp": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{backend.port}"}]}}
            },
        }
    }
    e = Edge(folder, dynamic, entrypoints=eps)
    yield e, backend
    e.stop()
    backend.close()


def test_a_silent_peer_hears_a_server_that_speaks_first(speaks_first):
    e, _ = speaks_first
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        start = time.monotonic()
        assert (
            recv_exactly(s, len(BANNER)) == BANNER
        )  # before: b"" (closed at the header's deadline)
        assert 0.9 <= time.monotonic() - start < 4.5  # no header within readTimeout: none
        s.sendall(b"QUIT\r\n")
        assert recv_exactly(s, 6) == b"QUIT\r\n"  # the relay carries on both ways


def test_a_peer_that_ends_its_side_first_is_relayed_with_its_eof(speaks_first):
    e, backend = speaks_first
    seen = len(backend.received)
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        s.shutdown(socket.SHUT_WR)  # nothing to say, and says so: no header
        assert recv_exactly(s, len(BANNER)) == BANNER  # before: b"" at once
    # The server heard the EOF and nothing else (earlier tests' connections sent bytes).
    deadline = time.monotonic() + 5
    while b"" not in backend.received[seen:] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert b"" in backend.received[seen:], backend.received[seen:]


def test_a_header_still_comes_first_and_part_of_one_still_closes(speaks_first):
    e, _ = speaks_first
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        start = time.monotonic()
        s.sendall(encode_v1(("192.0.2.1", 2525), ("127.0.0.1", 25)))
        assert recv_exactly(s, len(BANNER)) == BANNER
        assert time.monotonic() - start < 0.9  # a whole header: relayed at once
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        s.sendall(b"PROXY TCP4 192.0.2.1")  # part of a header, then silence
        assert recv_exactly(s, 1) == b""
    with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
        s.sendall(b"PROXY TCP4 192.0.2.1")
        s.shutdown(socket.SHUT_WR)  # part of a header, then EOF
        assert recv_exactly(s, 1) == b""


# -- IPv4-mapped entries -------------------------------------------------------------------------------


def test_mapped_entries_are_the_ipv4_networks_they_map():
    assert [
        str(n) for n in networks(["::ffff:10.0.0.0/104", "::ffff:127.0.0.1", "::/0", "10.0.0.0/8"])
    ] == [
        "10.0.0.0/8",
        "127.0.0.1/32",
        "::/0",
        "10.0.0.0/8",
    ]
    allow = IPAllowList("allow", ["::ffff:10.0.0.0/104"])
    assert allow.enter("10.1.2.3") and allow.enter("::ffff:10.1.2.3")
    assert not allow.enter("11.0.0.1") and not allow.enter("::1")
    trusted = trust(["::ffff:127.0.0.1"], insecure=False)
    assert trusted("127.0.0.1") and trusted("::ffff:127.0.0.1") and not trusted("127.0.0.2")
    assert not IPAllowList("v6", ["::/0"]).enter("10.0.0.1")  # as Traefik: all of IPv6 is not IPv4


def test_mapped_trusted_ips_and_source_range_match_ipv4_clients(tmp_path, speaks_first):
    _, backend = speaks_first
    eps = {
        "pp": {"address": "127.0.0.1:0", "proxyProtocol": {"trustedIPs": ["::ffff:127.0.0.1"]}},
        "allow": {"address": "127.0.0.1:0"},
    }
    server = {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{backend.port}"}]}}
    dynamic = {
        "tcp": {
            "routers": {
                "pp": {"rule": "HostSNI(`*`)", "service": "s", "entryPoints": ["pp"]},
                "allow": {
                    "rule": "HostSNI(`*`)",
                    "service": "s",
                    "entryPoints": ["allow"],
                    "middlewares": ["two"],
                },
            },
            "services": {"s": server},
            "middlewares": {"two": {"ipAllowList": {"sourceRange": ["::ffff:127.0.0.2/128"]}}},
        }
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    try:
        with socket.create_connection(("127.0.0.1", e.ports["pp"]), timeout=10) as s:
            s.sendall(encode_v1(("192.0.2.1", 2525), ("127.0.0.1", 25)))
            assert recv_exactly(s, len(BANNER)) == BANNER  # before: closed (127.0.0.1 untrusted)
        for source, admitted in (("127.0.0.2", True), ("127.0.0.1", False)):
            with socket.create_connection(
                ("127.0.0.1", e.ports["allow"]), timeout=10, source_address=(source, 0)
            ) as s:
                assert (recv_exactly(s, len(BANNER)) == BANNER) is admitted, (
                    source
                )  # before: both refused
    finally:
        e.stop()


# -- the header and a ClientHello in one stream, on every TLS path ---------------------------------------


def tls_request(sock: socket.socket, prefix: bytes, cut: int, host: str, ca: str) -> bytes:
    """``prefix`` (a PROXY header) and a TLS client's first flight, written in two parts
    split at ``cut``; then the handshake and one request; the plaintext response."""
    ctx = ssl.create_default_context(cafile=ca)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=host)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    first = prefix + outgoing.read()
    sock.sendall(first[:cut])
    time.sleep(0.005)  # two reads on edge's side
    sock.sendall(first[cut:])
    sock.settimeout(5)

    def pump() -> bool:
        if outgoing.pending:
            sock.sendall(outgoing.read())
        data = sock.recv(65536)
        if not data:
            return False
        incoming.write(data)
        return True

    for _ in range(20):  # a handshake takes a few round trips
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            assert pump(), "closed during the handshake"
    tls.write(f"GET /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    response = b""
    for _ in range(200):
        try:
            chunk = tls.read(65536)
            if not chunk:
                break
            response += chunk
        except ssl.SSLWantReadError:
            if not pump():
                break
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            break
    return response


@pytest.fixture(scope="module")
def tls_paths(tmp_path_factory, whoami):
    """Two proxyProtocol entry points serving HTTPS for a.test: ``nopeek`` (no TCP router:
    the first bytes go into the handshake) and ``peek`` (a TCP router for another name:
    the ClientHello is parsed first), and on ``peek`` a passthrough router for p.test to a
    server that records what it gets, PROXY v1 header first."""
    folder = tmp_path_factory.mktemp("tls-paths")
    pki = PKI()
    crt, key = pki.issue("a.test").write(folder, "a")
    ca = pki.write_ca(folder)
    backend = Backend()
    eps = {
        name: {"address": "127.0.0.1:0", "proxyProtocol": {"insecure": True}}
        for name in ("nopeek", "peek")
    }
    dynamic = {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a.test`)", "service": "who", "tls": {}},
                "h": {"rule": "Host(`h.test`) && ClientIP(`192.0.2.0/24`)", "service": "who"},
            },
            "services": {"who": {"loadBalancer": {"servers": [{"url": whoami.url}]}}},
        },
        "tcp": {
            "routers": {
                "p": {
                    "rule": "HostSNI(`p.test`)",
                    "service": "rec",
                    "entryPoints": ["peek"],
                    "tls": {"passthrough": True},
                }
            },
            "services": {
                "rec": {
                    "loadBalancer": {
                        "servers": [{"address": f"127.0.0.1:{backend.port}"}],
                        "proxyProtocol": {"version": 1},
                    }
                }
            },
        },
        "tls": {"certificates": [{"certFile": crt, "keyFile": key}]},
    }
    e = Edge(folder, dynamic, entrypoints=eps)
    yield e, ca, backend
    e.stop()
    backend.close()


@pytest.mark.parametrize("path", ["nopeek", "peek"])
def test_header_then_client_hello_split_anywhere_names_the_client(tls_paths, path):
    e, ca, _ = tls_paths
    header = encode_v2(("192.0.2.77", 4242), ("127.0.0.1", 443))
    # every offset inside the header, and around the record header and handshake header after it
    cuts = [*range(1, len(header) + 1), *(len(header) + k for k in (1, 4, 5, 6, 9, 10, 40))]
    for cut in cuts:
        with socket.create_connection(("127.0.0.1", e.ports[path]), timeout=10) as s:
            response = tls_request(s, header, cut, "a.test", ca)
        assert response.startswith(b"HTTP/1.1 200"), (cut, response[:80])
        info = json.loads(response.partition(b"\r\n\r\n")[2])
        assert info["headers"]["X-Forwarded-For"] == ["192.0.2.77"], cut
        assert info["headers"]["X-Forwarded-Proto"] == ["https"], cut


@pytest.mark.parametrize("path", ["nopeek", "peek"])
def test_header_then_http_request_split_anywhere_names_the_client(tls_paths, path):
    """Plain HTTP on the same entry points (not TLS from the first byte): the header's
    client reaches the ClientIP rule and X-Forwarded-For, wherever the bytes are split."""
    e, _, _ = tls_paths
    request = b"GET /who HTTP/1.1\r\nHost: h.test\r\nConnection: close\r\n\r\n"
    for header in (
        encode_v1(("192.0.2.79", 4444), ("127.0.0.1", 80)),
        encode_v2(("192.0.2.79", 4444), ("127.0.0.1", 80)),
    ):
        data = header + request
        for cut in [*range(1, len(header) + 1), len(header) + 1, len(header) + 4]:
            with socket.create_connection(("127.0.0.1", e.ports[path]), timeout=10) as s:
                s.sendall(data[:cut])
                time.sleep(0.005)
                s.sendall(data[cut:])
                response = b""
                while len(response) < 1 << 20 and (chunk := recv_exactly(s, 65536, timeout=5)):
                    response += chunk
            assert response.startswith(b"HTTP/1.1 200"), (cut, response[:80])  # ClientIP matched
            info = json.loads(response.partition(b"\r\n\r\n")[2])
            assert info["headers"]["X-Forwarded-For"] == ["192.0.2.79"], cut
    with socket.create_connection(("127.0.0.1", e.ports[path]), timeout=10) as s:
        s.sendall(request)  # without a header the peer (127.0.0.1) is the client: no route
        assert recv_exactly(s, 12) == b"HTTP/1.1 404"


def test_passthrough_passes_the_header_client_on_and_the_hello_whole(tls_paths):
    e, ca, backend = tls_paths
    ctx = ssl.create_default_context(cafile=ca)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="p.test")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    seen = len(backend.received)
    for cut in (1, 10, 41, 42, 43, 47, 48):
        with socket.create_connection(("127.0.0.1", e.ports["peek"]), timeout=10) as s:
            data = (
                encode_v1(("192.0.2.78", 4343), ("127.0.0.1", 443)) + hello
            )  # the v1 line is 42 bytes
            s.sendall(data[:cut])
            time.sleep(0.005)
            s.sendall(data[cut:])
            s.shutdown(socket.SHUT_WR)
            assert recv_exactly(s, 1) == b""  # the recorder says nothing and closes at EOF
    deadline = time.monotonic() + 5
    while len(backend.received) < seen + 7 and time.monotonic() < deadline:
        time.sleep(0.02)
    got = backend.received[seen:]
    assert len(got) == 7
    for data in got:
        line, _, rest = data.partition(b"\r\n")
        assert line.startswith(b"PROXY TCP4 192.0.2.78 127.0.0.1 4343 "), (
            line
        )  # edge's own header, the client's address
        assert rest == hello  # the ClientHello once, whole, nothing of the incoming header


# -- UDP: the PROXY v2 header once per upstream flow, after a re-pick and an eviction too -----------------


@pytest.mark.parametrize("batch", [True, False], ids=["recvmmsg", "socket-module"])
def test_udp_header_once_per_flow_across_a_refusal_and_an_eviction(monkeypatch, batch):
    """A session's first datagram to a server carries one header naming its client; a
    refusal (ICMP port unreachable) moves the session and the new server gets its own
    header first; a session evicted (maxSessions 1) and opened again starts over."""
    if not batch:
        monkeypatch.setattr("edge.udp.server.recvmmsg", lambda: None)

    async def main() -> None:
        good = await named("good")
        closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
        closed.close()  # the kernel answers ICMP port unreachable there
        async with InProcess(udp={"maxSessions": 1}) as edge:
            edge.apply(
                {
                    "udp": {
                        "routers": {"r": {"service": "svc"}},
                        "services": {"svc": lb(dead, good.address, serversTransport="pp")},
                        "serversTransports": {"pp": {"proxyProtocol": {"version": 2}}},
                    }
                }
            )
            first = await client(edge.port)
            reply = None
            for i in range(
                5
            ):  # the first datagram goes to the dead server (dead first, equal weights)
                try:
                    reply = await first.ask(b"try%d" % i, timeout=0.5)
                    break
                except TimeoutError:
                    continue
            assert reply is not None and dead in edge.entrypoint.proxy.down
            assert await first.ask(b"after") == b"good|after"
            second = await client(edge.port)  # evicts the first client's session
            assert (await second.ask(b"other")).endswith(
                b"other"
            )  # the backend echoes the header too
            assert (await first.ask(b"back")).endswith(
                b"back"
            )  # a new session for the first client

            def header_of(c) -> tuple:
                return (c.transport.get_extra_info("sockname")[:2], ("127.0.0.1", edge.port))

            got = []
            for _, data in good.seen:
                header = parse(data)
                if isinstance(header, Verdict):
                    got.append((None, data))
                else:
                    got.append(
                        ((header.family, header.source, header.destination), data[header.length :])
                    )
            f, s = header_of(first), header_of(second)
            assert [(h[1:] if h else None, d) for h, d in got] == [
                (f, reply[-4:]),  # the first datagram the good server hears: a header, then tryN
                (None, b"after"),
                (s, b"other"),
                (f, b"back"),
            ]
            assert {h[0] for h, _ in got if h} == {"UDP4"}
            first.close()
            second.close()

    run(main)


# -- TCP middlewares: an admitted connection is left once, however it ends ---------------------------------


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


# -- UDP: a broadcast to a wildcard listener is answered ------------------------------------------------


class Inbox(asyncio.DatagramProtocol):
    """A client socket (unconnected): what comes back, with the address it came from."""

    def __init__(self) -> None:
        self.got: asyncio.Queue[tuple[bytes, tuple]] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr) -> None:
        self.got.put_nowait((data, addr[:2]))


def loopback_broadcast_arrives() -> bool:
    """Whether this host delivers a datagram sent to 127.255.255.255 to a wildcard socket
    (Linux's local table has that broadcast route on lo)."""
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender,
    ):
        listener.bind(("0.0.0.0", 0))
        listener.settimeout(1)
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        try:
            sender.sendto(b"?", ("127.255.255.255", listener.getsockname()[1]))
            return listener.recv(10) == b"?"
        except OSError:
            return False


@pytest.mark.parametrize("address", [":0/udp", "0.0.0.0:0/udp"], ids=["dual-stack", "ipv4"])
@pytest.mark.parametrize("batch", [True, False], ids=["recvmmsg", "socket-module"])
def test_udp_broadcast_to_a_wildcard_listener_is_answered(monkeypatch, address, batch):
    """A client broadcasting (a LAN discovery, a DHCP-like service) writes to
    127.255.255.255: the reply leaves from the listener's address on the interface it
    came in on (127.0.0.1). Before, edge made every reply leave from the broadcast
    address, which the kernel refuses (ENETUNREACH, EINVAL): all were dropped. The
    PROXY header still names the address written to."""
    if not loopback_broadcast_arrives():
        pytest.skip("no broadcast route on lo (127.255.255.255) on this host")
    if not batch:
        monkeypatch.setattr("edge.udp.server.recvmmsg", lambda: None)

    async def main() -> None:
        a = await named("a")
        async with InProcess(address=address) as edge:
            edge.apply(
                {
                    "udp": {
                        "routers": {"r": {"service": "svc"}},
                        "services": {"svc": lb(a.address, serversTransport="pp")},
                        "serversTransports": {"pp": {"proxyProtocol": {"version": 2}}},
                    }
                }
            )
            transport, inbox = await asyncio.get_running_loop().create_datagram_endpoint(
                Inbox, local_addr=("127.0.0.1", 0), allow_broadcast=True
            )
            try:
                transport.sendto(b"who is there", ("127.255.255.255", edge.port))
                data, source = await asyncio.wait_for(inbox.got.get(), 3)  # before: never
                assert source == ("127.0.0.1", edge.port)
                header = parse(a.seen[0][1])
                assert not isinstance(header, Verdict)
                assert header.destination == (
                    "127.255.255.255",
                    edge.port,
                )  # where the client wrote
                assert data == b"a|" + a.seen[0][1]
                assert edge.counters().dropped == 0
            finally:
                transport.close()

    run(main)


# -- UDP: a datagram from a server's own address opens no session (a loop) --------------------------------


@pytest.mark.parametrize("batch", [True, False], ids=["recvmmsg", "socket-module"])
def test_udp_datagram_from_a_server_address_is_dropped_not_looped(monkeypatch, caplog, batch):
    """A datagram whose source is a server of the service (spoofed, or the server itself
    writing to edge) would open a session whose replies go to that server, from the
    listener; a server that answers what it gets answers them, back to the listener, as
    requests of the same session: a loop that runs for ever on one datagram. Before, the
    backend below (which answers everything) saw some ten thousand datagrams a second."""
    if not batch:
        monkeypatch.setattr("edge.udp.server.recvmmsg", lambda: None)

    async def main() -> None:
        a = await named("a")
        async with InProcess() as edge:
            edge.apply(one_service(a))
            a.transport.sendto(b"x", ("127.0.0.1", edge.port))  # from the server's own address
            await asyncio.sleep(0.5)
            assert len(a.seen) == 0, f"{len(a.seen)} datagrams looped"
            assert edge.counters().dropped == 1 and edge.counters().sessions_opened == 0
            c = await client(edge.port)  # anyone else is served
            assert await c.ask(b"hello") == b"a|hello"
            # a reload that makes a live session's client a server ends that session
            b = await named("b")
            assert len(edge.entrypoint.proxy.table) == 1
            edge.apply(one_service(a, b))
            assert len(edge.entrypoint.proxy.table) == 1  # servers that stay keep their sessions
            host, port = c.transport.get_extra_info("sockname")[:2]
            edge.apply(
                {
                    "udp": {
                        "routers": {"r": {"service": "svc"}},
                        "services": {"svc": lb(a.address, f"{host}:{port}")},
                    }
                }
            )
            assert len(edge.entrypoint.proxy.table) == 0
            edge.entrypoint.sweep(asyncio.get_running_loop().time())
            c.close()

    with caplog.at_level("WARNING", logger="edge.udp"):
        run(main)
    assert any("came from a server of the service" in r.getMessage() for r in caplog.records)


def test_udp_server_named_by_host_is_guarded_once_resolved():
    async def main() -> None:
        a = await named("a")
        port = a.address.rsplit(":", 1)[1]
        async with InProcess() as edge:
            edge.apply(
                {
                    "udp": {
                        "routers": {"r": {"service": "svc"}},
                        "services": {"svc": lb(f"localhost:{port}")},
                    }
                }
            )
            proxy = edge.entrypoint.proxy
            for _ in range(100):
                if proxy.servers_at:
                    break
                await asyncio.sleep(0.02)
            if ("127.0.0.1", int(port)) not in proxy.servers_at:
                pytest.skip(f"localhost does not resolve to 127.0.0.1 here: {proxy.servers_at}")
            a.transport.sendto(b"x", ("127.0.0.1", edge.port))
            await asyncio.sleep(0.3)
            assert len(a.seen) == 0 and edge.counters().dropped == 1

    run(main)
