"""One TCP entrypoint for TLS passthrough, TLS termination, raw TCP and plain HTTP (issue 8).

edge runs as a real process (``tests.harness.Edge``) on 127.0.0.1 port 0; its
peers are real: ``openssl s_server`` behind passthrough, ``edge whoami`` (HTTP and
TCP echo) behind termination and raw TCP, and small socket servers in threads
where a test must see the exact bytes a backend receives or must have the
server speak first. Clients are ``openssl s_client``, curl and Python's ssl.
Certificates are made when the tests run (``tests/fixtures/tls/pki.py``); the
passthrough backend's come from another CA, so a client can tell whose
certificate arrived. A few pure checks of the precedence on
:class:`edge.router.tcp.TCPRouter` come first (no sockets).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from edge.router.tcp import HTTPS, PASSTHROUGH, PLAIN, TERMINATE
from edge.tcp.peek import Peek, PeekContext
from edge.tls.clienthello import ClientHello
from edge.tls.terminate import TLSAccept
from tests.fixtures.tls.pki import PKI
from tests.harness import Edge, get, lb, raw
from tests.integration.peers import (
    Backend,
    certificates,
    fingerprint_of,
    https_get,
    peer_fingerprint,
    s_client_refused,
    s_client_until,
    tcp_routers,
    tls_connect,
)

# -- the precedence, pure ----------------------------------------------------------------


def hello(sni: str | None, alpn: tuple[str, ...] = ()) -> ClientHello:
    return ClientHello(server_name=sni, alpn=alpn, versions=(0x0304,), length=0)


TCP_SVC = {"loadBalancer": {"servers": [{"address": "127.0.0.1:9"}]}}
HTTP_SVC = lb("http://127.0.0.1:9")


def test_precedence_https_name_beats_tcp_catch_all_and_tcp_name_beats_https_catch_all():
    _, routers = tcp_routers(
        {
            "http": {
                "routers": {
                    "site": {"rule": "Host(`site.test`)", "service": "h", "tls": {}},
                    "paths": {"rule": "PathPrefix(`/p`)", "service": "h", "tls": {}},
                },
                "services": {"h": HTTP_SVC},
            },
            "tcp": {
                "routers": {
                    "all": {"rule": "HostSNI(`*`)", "service": "t", "tls": {"passthrough": True}},
                    "db": {
                        "rule": "HostSNI(`db.test`)",
                        "service": "t",
                        "tls": {"passthrough": True},
                    },
                    "alpn": {"rule": "ALPN(`x-proto`)", "service": "t", "tls": {}},
                },
                "services": {"t": TCP_SVC},
            },
        }
    )
    r = routers["web"]
    assert r is not None and not r.immediate
    assert r.tls(hello("site.test"), "1.2.3.4").mode == HTTPS  # an HTTPS name beats HostSNI(`*`)
    assert r.tls(hello("db.test"), "1.2.3.4").name == "db@file"  # a TCP name beats HTTPS catch-all
    assert r.tls(hello("x.test", ("x-proto",)), "1.2.3.4").name == "alpn@file"  # ALPN is specific
    assert (
        r.tls(hello("other.test"), "1.2.3.4").mode == HTTPS
    )  # HTTPS catch-all before TCP catch-all
    assert r.tls(hello(None), "1.2.3.4").mode == HTTPS
    assert r.plain("1.2.3.4") is None  # no TCP router without TLS: cleartext goes to HTTP


def test_precedence_without_https_routers():
    _, routers = tcp_routers(
        {
            "tcp": {
                "routers": {
                    "all": {"rule": "HostSNI(`*`)", "service": "t", "tls": {"passthrough": True}},
                    "term": {
                        "rule": "HostSNI(`t.test`)",
                        "service": "t",
                        "tls": {"options": "modern"},
                    },
                    "raw": {"rule": "HostSNI(`*`) && ClientIP(`10.0.0.0/8`)", "service": "t"},
                },
                "services": {"t": TCP_SVC},
            },
            "tls": {"options": {"modern": {"minVersion": "VersionTLS13"}}},
        }
    )
    r = routers["web"]
    assert r.tls(hello("t.test"), "1.2.3.4").mode == TERMINATE
    assert r.tls(hello("t.test"), "1.2.3.4").options == "modern@file"
    assert r.tls(hello("z.test"), "1.2.3.4").mode == PASSTHROUGH  # the TCP catch-all
    assert r.plain("10.1.2.3").mode == PLAIN and r.plain("1.2.3.4") is None
    assert r.at_once("10.1.2.3") is None  # TLS routers exist: the connection must be peeked


def test_immediate_only_with_tcp_routers_without_tls_and_nothing_else():
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "t"}},
            "services": {"t": TCP_SVC},
        },
        "http": {
            "routers": {"web": {"rule": "Host(`w.test`)", "service": "h"}},
            "services": {"h": HTTP_SVC},
        },
    }
    _, routers = tcp_routers(dynamic)
    assert routers["web"].immediate and routers["web"].at_once("1.2.3.4").name == "raw@file"
    dynamic["http"]["routers"]["web"]["tls"] = {}
    _, routers = tcp_routers(dynamic)
    assert not routers["web"].immediate and routers["web"].at_once("1.2.3.4") is None


def test_no_tcp_router_and_no_https_router_means_no_connection_router():
    _, routers = tcp_routers(
        {
            "http": {
                "routers": {"web": {"rule": "Host(`w.test`)", "service": "h"}},
                "services": {"h": HTTP_SVC},
            }
        }
    )
    assert routers == {"web": None}


def test_only_an_entrypoint_that_terminates_every_tls_connection_into_https_under_one_options_skips_the_peek():
    def first_protocol(dynamic: dict) -> type:
        _, routers = tcp_routers(dynamic)
        ctx = PeekContext(name="web", loop=None, connections=set(), http=None, https=None)  # type: ignore[arg-type]
        protocol = ctx.protocol(routers["web"])
        assert type(ctx.protocol(routers["web"])) is type(protocol)  # one decision per router
        return type(protocol)

    https = {
        "routers": {
            "a": {"rule": "Host(`a.test`)", "service": "h", "tls": {}},
            "paths": {"rule": "PathPrefix(`/p`)", "service": "h", "tls": {}},
            "plain": {"rule": "Host(`plain.test`)", "service": "h"},
        },
        "services": {"h": HTTP_SVC},
    }
    assert first_protocol({"http": https}) is TLSAccept
    # Any TCP router: the peek decides (a name, ALPN, cleartext may be a TCP router's).
    for tcp in (
        {"rule": "HostSNI(`*`)", "service": "t"},
        {"rule": "HostSNI(`db.test`)", "service": "t", "tls": {"passthrough": True}},
        {"rule": "ALPN(`x`)", "service": "t", "tls": {}},
    ):
        dynamic = {"http": https, "tcp": {"routers": {"t": tcp}, "services": {"t": TCP_SVC}}}
        assert first_protocol(dynamic) is Peek, tcp
    # A name with TLS options of its own: the SSL object's settings depend on the name.
    mtls = dict(
        https,
        routers={
            **https["routers"],
            "b": {"rule": "Host(`b.test`)", "service": "h", "tls": {"options": "v13"}},
        },
    )
    dynamic = {"http": mtls, "tls": {"options": {"v13": {"minVersion": "VersionTLS13"}}}}
    assert first_protocol(dynamic) is Peek


def test_hostsni_name_without_tls_is_disabled_with_its_reason():
    runtime, routers = tcp_routers(
        {
            "tcp": {
                "routers": {"named": {"rule": "HostSNI(`db.test`)", "service": "t"}},
                "services": {"t": TCP_SVC},
            }
        }
    )
    info = runtime.tcp_routers["named@file"]
    assert info.status == "disabled"
    assert "without TLS has no server name" in info.errors[0]
    assert routers == {"web": None}


def test_weighted_tcp_services_round_robin_smoothly():
    _, routers = tcp_routers(
        {
            "tcp": {
                "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "w"}},
                "services": {
                    "w": {
                        "weighted": {
                            "services": [{"name": "a", "weight": 3}, {"name": "b", "weight": 1}]
                        }
                    },
                    "a": {
                        "loadBalancer": {
                            "servers": [{"address": "10.0.0.1:1"}, {"address": "10.0.0.2:1"}],
                            "serversTransport": "slow",
                        }
                    },
                    "b": {"loadBalancer": {"servers": [{"address": "10.0.0.3:1"}]}},
                },
                "serversTransports": {"slow": {"dialTimeout": "2s", "terminationDelay": "250ms"}},
            }
        }
    )
    service = routers["web"].at_once("1.2.3.4").service
    picks = [service.pick().address for _ in range(8)]
    assert picks.count("10.0.0.3:1") == 2
    assert picks.count("10.0.0.1:1") == 3 and picks.count("10.0.0.2:1") == 3
    assert picks[:4].count("10.0.0.3:1") == 1  # spread out, not in a burst
    first = service.pick()
    assert (first.dial_timeout, first.termination_delay) == (
        2.0,
        0.25,
    )  # serversTransport slow@file


def test_check_tls_disables_routers_whose_key_or_options_cannot_serve(tmp_path):
    pki = PKI()
    good, other = pki.issue("good.test"), pki.issue("other.test")
    good_files = good.write(tmp_path, "good")
    mismatched = {"certFile": other.write(tmp_path, "other")[0], "keyFile": good_files[1]}
    runtime, routers = tcp_routers(
        {
            "http": {
                "routers": {
                    "good": {"rule": "Host(`good.test`)", "service": "h", "tls": {}},
                    "other": {"rule": "Host(`other.test`)", "service": "h", "tls": {}},
                    "weak": {
                        "rule": "Host(`good.test`) && Path(`/w`)",
                        "service": "h",
                        "tls": {"options": "weak"},
                    },
                    "plain": {"rule": "Host(`other.test`)", "service": "h"},
                },
                "services": {"h": HTTP_SVC},
            },
            "tcp": {
                "routers": {
                    "db": {"rule": "HostSNI(`other.test`)", "service": "t", "tls": {}},
                    "pt": {
                        "rule": "HostSNI(`other.test`)",
                        "service": "t",
                        "tls": {"passthrough": True},
                    },
                },
                "services": {"t": TCP_SVC},
            },
            "tls": {
                "certificates": [{"certFile": good_files[0], "keyFile": good_files[1]}, mismatched],
                "options": {"weak": {"cipherSuites": ["TLS_NOT_A_SUITE"]}},
            },
        }
    )
    status = {name: info.status for name, info in runtime.http_routers.items()}
    status.update({name: info.status for name, info in runtime.tcp_routers.items()})
    assert status == {
        "good@file": "enabled",
        "other@file": "disabled",  # its certificate's key is another's
        "weak@file": "disabled",  # its options cannot be applied
        "plain@file": "enabled",  # no TLS: no certificate needed
        "db@file": "disabled",  # a terminating TCP router needs the certificate too
        "pt@file": "enabled",  # passthrough terminates nothing
    }
    reason = runtime.http_routers["other@file"].errors[0]
    assert "does not match certFile" in reason and str(tmp_path / "other.crt") in reason
    assert "TLS_NOT_A_SUITE" in runtime.http_routers["weak@file"].errors[0]
    assert routers["web"].tls(hello("other.test"), "1.2.3.4").mode == PASSTHROUGH


# -- peers -------------------------------------------------------------------------------


@pytest.fixture
def backend():
    b = Backend()
    yield b
    b.close()


# -- one entrypoint, every kind -------------------------------------------------------------


def shared_config(certs: dict, whoami, echo, s_server, capture_port: int) -> dict:
    return {
        "http": {
            "routers": {
                "secure": {"rule": "Host(`a.test`)", "service": "who", "tls": {}},
                "plain": {"rule": "Host(`plain.test`)", "service": "who"},
            },
            "services": {"who": lb(whoami.url)},
        },
        "tcp": {
            "routers": {
                "pt": {
                    "rule": "HostSNI(`pt.test`)",
                    "service": "sserver",
                    "tls": {"passthrough": True},
                },
                "big": {
                    "rule": "HostSNI(`big.test`)",
                    "service": "capture",
                    "tls": {"passthrough": True},
                },
                "term": {"rule": "HostSNI(`echo.test`)", "service": "echo", "tls": {}},
            },
            "services": {
                "sserver": {
                    "loadBalancer": {"servers": [{"address": f"127.0.0.1:{s_server.port}"}]}
                },
                "capture": {
                    "loadBalancer": {"servers": [{"address": f"127.0.0.1:{capture_port}"}]}
                },
                "echo": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo.port}"}]}},
            },
        },
        "tls": {"certificates": certificates(certs, "a.test", "echo.test")},
    }


@pytest.fixture(scope="module")
def capture():
    b = Backend()
    yield b
    b.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory, certs, whoami, echo, s_server, capture):
    e = Edge(
        tmp_path_factory.mktemp("shared"),
        shared_config(certs, whoami, echo, s_server, capture.port),
    )
    yield e
    e.stop()


def test_passthrough_delivers_the_backends_certificate_untouched(shared, certs):
    out = s_client_until(shared.port, "pt.test", b"hello edge\n", b"egde olleh")
    assert fingerprint_of(out) == certs["backend"].fingerprint, out
    assert b"egde olleh" in out  # s_server -rev answered through the splice


def test_https_router_terminates_with_the_certificate_for_its_name(shared, certs):
    assert (
        peer_fingerprint(shared.port, "a.test", certs["ca"]) == certs["pairs"]["a.test"].fingerprint
    )
    status, info = https_get(shared.port, "a.test", "/x", certs["ca"])
    assert status == 200
    assert info["headers"]["X-Forwarded-Proto"] == ["https"]
    assert info["headers"]["X-Forwarded-Port"] == ["443"]
    assert info["host"] == "a.test" and info["path"] == "/x"


def test_plain_http_is_served_on_the_same_port(shared):
    status, _, data = get(shared.port, "/", host="plain.test")
    assert status == 200
    assert json.loads(data)["headers"]["X-Forwarded-Proto"] == ["http"]
    assert get(shared.port, "/", host="unknown.test")[0] == 404


def test_a_router_with_tls_never_answers_over_plain_http(shared, certs):
    assert get(shared.port, "/", host="a.test")[0] == 404
    assert https_get(shared.port, "a.test", "/", certs["ca"])[0] == 200
    # and the plain router is not reachable over TLS (Traefik serves it only without TLS)
    assert https_get(shared.port, "plain.test")[0] == 404


def test_terminating_tcp_router_relays_plaintext(shared, certs):
    with tls_connect(shared.port, "echo.test", certs["ca"]) as s:
        assert (
            hashlib.sha256(s.getpeercert(True)).hexdigest()
            == certs["pairs"]["echo.test"].fingerprint
        )
        s.sendall(b"ping over tls\n")
        got = b""
        deadline = time.monotonic() + 10
        while len(got) < 14 and time.monotonic() < deadline:
            got += s.recv(100)
        assert got == b"ping over tls\n"


def test_unknown_name_with_https_routers_is_terminated_and_gets_404(shared):
    # Traefik: with HTTPS routers on the entrypoint, every TLS name without a TCP
    # router is terminated (default certificate) and the HTTP routers answer.
    assert https_get(shared.port, "nobody.test")[0] == 404


def test_a_server_name_with_a_trailing_dot_is_refused_for_passthrough_and_termination(
    shared, capture
):
    """RFC 6066 section 3: a host_name has no trailing dot, and Go's crypto/tls (hence
    Traefik) refuses such a ClientHello. The peek dropped the dot: 'big.test.' was
    passed through to big.test's server, 'a.test.' and 'echo.test.' terminated with
    their certificates. Now each is refused with unrecognized_name (112), the alert the
    parser's error carries, and nothing reaches a server."""
    relayed = len(capture.received)
    for name in ("big.test.", "pt.test.", "a.test.", "echo.test.", "A.TEST."):
        out = s_client_refused(shared.port, name)
        assert re.search(r"SSL alert number 112", out), (name, out)
        assert "BEGIN CERTIFICATE" not in out and "Server certificate" not in out, (name, out)
    time.sleep(0.3)  # a relayed connection would have reached the backend by now
    assert len(capture.received) == relayed
    assert (
        fingerprint_of(s_client_until(shared.port, "pt.test", b"x\n", b"x")) is not None
    )  # the names serve


def big_client_hello(
    server_name: str, ca: str
) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO, bytes]:
    """A real client's first flight, about 12 KB (a long ALPN list), and the client to finish with."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols([f"x-{i:03d}-" + "p" * 240 for i in range(48)] + ["http/1.1"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return client, incoming, outgoing, outgoing.read()


def fragment(first_flight: bytes, size: int) -> bytes:
    """The ClientHello of one TLS record re-recorded as several records of ``size`` bytes."""
    assert first_flight[0] == 22
    length = int.from_bytes(first_flight[3:5], "big")
    assert len(first_flight) == 5 + length  # one record: the ClientHello alone
    message = first_flight[5:]
    version = first_flight[1:3]
    out = b""
    for i in range(0, len(message), size):
        piece = message[i : i + size]
        out += b"\x16" + version + len(piece).to_bytes(2, "big") + piece
    return out


def send_slowly(sock: socket.socket, data: bytes, piece: int = 1500) -> None:
    for i in range(0, len(data), piece):
        sock.sendall(data[i : i + piece])
        time.sleep(0.005)


def test_fragmented_12k_client_hello_routes_to_passthrough_untouched(shared, certs, capture):
    _, _, _, flight = big_client_hello("big.test", certs["ca"])
    records = fragment(flight, 4000)
    assert len(records) > 12_000
    with socket.create_connection(("127.0.0.1", shared.port), timeout=10) as s:
        send_slowly(s, records)
        s.shutdown(socket.SHUT_WR)
        assert capture.done.wait(10)
    assert capture.received[-1] == records  # every byte, in order, as sent


def test_fragmented_12k_client_hello_terminates_and_serves_https(shared, certs):
    client, incoming, outgoing, flight = big_client_hello("a.test", certs["ca"])
    with socket.create_connection(("127.0.0.1", shared.port), timeout=10) as s:
        send_slowly(s, fragment(flight, 3000))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    s.sendall(outgoing.read())
                data = s.recv(65536)
                assert data, "edge closed during the handshake"
                incoming.write(data)
        assert client.selected_alpn_protocol() == "http/1.1"
        assert (
            hashlib.sha256(client.getpeercert(True)).hexdigest()
            == certs["pairs"]["a.test"].fingerprint
        )
        if outgoing.pending:
            s.sendall(outgoing.read())
        client.write(b"GET /big HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        s.sendall(outgoing.read())
        response = b""
        while time.monotonic() < deadline and b"}" not in response:
            data = s.recv(65536)
            if not data:
                break
            incoming.write(data)
            with contextlib.suppress(ssl.SSLWantReadError):
                response += client.read(65536)
    assert response.startswith(b"HTTP/1.1 200")
    assert json.loads(response.partition(b"\r\n\r\n")[2])["path"] == "/big"


# -- raw TCP ----------------------------------------------------------------------------------


def test_raw_tcp_echo_through_hostsni_star(tmp_path, echo):
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "echo"}},
            "services": {
                "echo": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo.port}"}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        payload = bytes(range(256)) * 64
        assert raw(e.port, payload, half_close=True) == payload
        # A TLS ClientHello is bytes like any other here: relayed, not parsed.
        assert (
            raw(e.port, b"\x16\x03\x01\x00\x05hello", half_close=True)
            == b"\x16\x03\x01\x00\x05hello"
        )
    finally:
        e.stop()


def test_raw_tcp_server_speaks_first_without_waiting_for_the_peek(tmp_path):
    server = Backend(banner=b"220 ready\r\n")
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "smtp"}},
            "services": {
                "smtp": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{server.port}"}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            start = time.monotonic()
            assert s.recv(100) == b"220 ready\r\n"  # the client has sent nothing
            assert time.monotonic() - start < 2
            s.sendall(b"HELO x\r\n")
            assert s.recv(100) == b"HELO x\r\n"
    finally:
        e.stop()
        server.close()


def test_a_server_that_refuses_the_dial_closes_the_client(tmp_path):
    dead = socket.create_server(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    dynamic = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "dead"}},
            "services": {"dead": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{port}"}]}}},
        }
    }
    e = Edge(tmp_path, dynamic)
    try:
        start = time.monotonic()
        assert raw(e.port, b"hello", timeout=5) == b""
        assert time.monotonic() - start < 3
        e.wait_for(
            rf"tcp router raw@file: service dead@file: dial 127.0.0.1:{port}: .*connection closed"
        )
    finally:
        e.stop()


# -- refusals and timeouts ---------------------------------------------------------------------


@pytest.fixture
def passthrough_only(tmp_path, backend):
    dynamic = {
        "tcp": {
            "routers": {
                "pt": {"rule": "HostSNI(`pt.test`)", "service": "b", "tls": {"passthrough": True}}
            },
            "services": {
                "b": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{backend.port}"}]}}
            },
        }
    }
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "transport": {"respondingTimeouts": {"readTimeout": "1s"}},
        }
    }
    e = Edge(tmp_path, dynamic, entrypoints=eps)
    yield e
    e.stop()


def test_tls_name_without_router_gets_an_alert_and_http_gets_404(passthrough_only):
    with pytest.raises(ssl.SSLError, match="UNRECOGNIZED_NAME"):
        tls_connect(passthrough_only.port, "nobody.test", None)
    assert get(passthrough_only.port, "/", host="x.test")[0] == 404


def test_three_bytes_then_silence_is_closed_after_the_peek_timeout(passthrough_only):
    with socket.create_connection(("127.0.0.1", passthrough_only.port), timeout=10) as s:
        start = time.monotonic()
        s.sendall(b"\x16\x03\x01")
        try:
            data = s.recv(100)
        except ConnectionResetError:
            data = b""
        elapsed = time.monotonic() - start
    assert data == b""  # closed, nothing sent
    assert 0.9 <= elapsed < 3.5, (
        elapsed
    )  # readTimeout 1s bounds the peek; the sweep runs every 0.25s


def test_silent_client_is_closed_after_the_peek_timeout(passthrough_only):
    with socket.create_connection(("127.0.0.1", passthrough_only.port), timeout=10) as s:
        start = time.monotonic()
        assert s.recv(100) == b""
        assert 0.9 <= time.monotonic() - start < 3.5


# -- memory under a slow reader ---------------------------------------------------------------

MIB = 1 << 20


def socket_buffers() -> int:
    """The most the kernel may hold between the backend and the reader: two TCP
    connections (backend to edge, edge to reader), each with a send buffer and a
    receive buffer that autotuning grows up to ``tcp_wmem`` and ``tcp_rmem``'s maxima
    (4 and 6 MiB by default; a machine may allow 32 MiB of receive buffer)."""
    most = [
        int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2])
        for name in ("tcp_wmem", "tcp_rmem")
    ]
    return 2 * sum(most)


def vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class TLSSource:
    """A TLS server in a thread (the backend CA's pt.test): sends ``total`` bytes as fast
    as the connection takes them, a 32-byte trailer last, then closes; notes when it
    finished writing."""

    def __init__(self, certs: dict, total: int) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*certs["backend_files"])
        self.total = total
        self.trailer = hashlib.sha256(str(total).encode()).digest()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(30)
        self.port = self.sock.getsockname()[1]
        self.finished = 0.0  # monotonic time the last byte was handed to the kernel
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self.sock.accept()
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                tls.settimeout(60)
                block = os.urandom(MIB)
                left = self.total - len(self.trailer)
                while left > 0:
                    n = min(left, len(block))
                    tls.sendall(block[:n])
                    left -= n
                tls.sendall(self.trailer)
                self.finished = time.monotonic()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def close(self) -> None:
        self.thread.join(5)
        self.sock.close()


@pytest.mark.slow
def test_1_gib_through_passthrough_to_a_slow_reader_keeps_edge_memory_bounded(tmp_path, certs):
    """The issue's check: 1 GiB through a passthrough router to a client that reads at a
    paced 48 MiB/s (the backend could send many times faster). Edge's flow control must
    hold the backend back rather than buffer: its RSS, sampled every 20 ms, stays within
    32 MiB of what it was before the transfer, and the backend finishes writing only
    when the reader is within a few MiB of the end (the kernel's socket buffers, as
    large as this machine lets them grow, and 4 MiB of edge's high-water marks are all
    that may sit between them: 24 MiB with the kernel's default buffers)."""
    total, rate = 1 << 30, 48 * MIB
    source = TLSSource(certs, total)
    dynamic = {
        "tcp": {
            "routers": {
                "pt": {"rule": "HostSNI(`pt.test`)", "service": "b", "tls": {"passthrough": True}}
            },
            "services": {
                "b": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{source.port}"}]}}
            },
        }
    }
    e = Edge(tmp_path, dynamic, static_extra={"log": {"level": "INFO"}})
    peak = {"rss": 0}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.02):
            peak["rss"] = max(peak["rss"], vm_rss(e.proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        base = vm_rss(e.proc.pid)
        sampler.start()
        got, tail, behind = 0, b"", None
        ctx = ssl._create_unverified_context()  # the backend's own certificate, checked below
        with (
            socket.create_connection(("127.0.0.1", e.port), timeout=30) as raw_sock,
            ctx.wrap_socket(raw_sock, server_hostname="pt.test") as s,
        ):
            assert hashlib.sha256(s.getpeercert(True)).hexdigest() == certs["backend"].fingerprint
            start = time.monotonic()
            while True:
                chunk = s.recv(256 * 1024)
                if not chunk:
                    break
                got += len(chunk)
                tail = (tail + chunk)[-32:]
                if behind is None and source.finished:
                    behind = total - got  # what was in flight when the backend was done
                ahead = got / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
            elapsed = time.monotonic() - start
        sampling.set()
        sampler.join(5)
        assert source.error is None, source.error
        assert got == total and tail == source.trailer
        assert elapsed >= total / rate * 0.95  # the reader set the pace
        assert behind is not None and behind < socket_buffers() + 4 * MIB, behind
        assert peak["rss"] - base < 32 * MIB, (peak["rss"], base)
    finally:
        sampling.set()
        source.close()
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
