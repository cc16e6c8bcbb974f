"""The access log's TCP and UDP lines (edge's own: Traefik logs neither), through a real
edge: one per relayed TCP connection and per UDP session, when it ends, with router,
service, server, the bytes each way and the duration, in json and common format.
"""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from tests.harness import WHOAMI_RE, Edge, Proc
from tests.integration.config.test_logs import wait_lines
from tests.integration.peers import free_port


def servers(*addresses: str) -> dict:
    return {"loadBalancer": {"servers": [{"address": a} for a in addresses]}}


def tcp_routes(address: str) -> dict:
    return {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "echo"}},
            "services": {"echo": servers(address)},
        }
    }


def echo_once(port: int, payload: bytes) -> int:
    """Send ``payload``, read it back, half-close, read to the end; the client's port."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        assert got == payload
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b""
        return s.getsockname()[1]


@pytest.mark.parametrize("fmt", ["json", "common"])
def test_a_line_per_tcp_connection(tmp_path, echo, fmt):
    log = tmp_path / "access.log"
    static = {"accessLog": {"filePath": str(log), "format": fmt}}
    e = Edge(tmp_path, tcp_routes(f"127.0.0.1:{echo.port}"), static_extra=static)
    try:
        started = time.monotonic()
        first = echo_once(e.port, b"hello edge\n")
        second = echo_once(e.port, b"x" * 100_000)
        took = time.monotonic() - started
        one, two = wait_lines(log, 2)
    finally:
        e.stop()
    if fmt == "common":
        pattern = (
            r'127\.0\.0\.1 - - \[[^\]]+ \+0000\] "TCP raw@file echo@file 127\.0\.0\.1:'
            + str(echo.port)
            + r'" (\d+) (\d+) (\d+)ms'
        )
        first_fields, second_fields = (re.fullmatch(pattern, x) for x in (one, two))
        assert first_fields is not None and second_fields is not None, (one, two)
        assert first_fields.groups()[:2] == ("11", "11")
        assert second_fields.groups()[:2] == ("100000", "100000")
        assert int(second_fields[3]) <= took * 1000
        return
    a, b = (json.loads(x) for x in (one, two))
    assert list(a) == sorted(a)
    assert a["RequestProtocol"] == "TCP"
    assert (a["ClientHost"], a["ClientPort"]) == ("127.0.0.1", str(first))
    assert a["ClientAddr"] == f"127.0.0.1:{first}"
    assert (a["RouterName"], a["ServiceName"]) == ("raw@file", "echo@file")
    assert a["ServiceAddr"] == f"127.0.0.1:{echo.port}"
    assert (a["RequestContentSize"], a["DownstreamContentSize"]) == (11, 11)
    assert (b["RequestContentSize"], b["DownstreamContentSize"]) == (100_000, 100_000)
    assert b["ClientPort"] == str(second)
    assert a["entryPointName"] == "web" and (a["level"], a["msg"]) == ("info", "")
    assert 0 < a["Duration"] <= took * 1e9
    assert a["StartUTC"].endswith("Z") and "time" in a
    assert not {"DownstreamStatus", "RequestDatagrams"} & set(a)


def test_a_tcp_connection_whose_dial_failed(tmp_path):
    """The server refused: the client's connection is closed, and its line says so with
    no byte relayed."""
    log = tmp_path / "access.log"
    static = {"accessLog": {"filePath": str(log), "format": "json"}}
    dead = f"127.0.0.1:{free_port()}"
    e = Edge(tmp_path, tcp_routes(dead), static_extra=static)
    try:
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            s.sendall(b"anyone?")
            try:
                closed = s.recv(1)
            except ConnectionResetError:  # closed while "anyone?" was still unread
                closed = b""
            assert closed == b""
        (line,) = wait_lines(log, 1)
    finally:
        e.stop()
    r = json.loads(line)
    assert (r["RequestProtocol"], r["ServiceAddr"]) == ("TCP", dead)
    assert (r["RequestContentSize"], r["DownstreamContentSize"]) == (0, 0)


@pytest.fixture
def udp_echo():
    who = Proc(["whoami", "--name", "echo", "--udp", "127.0.0.1:0"])
    who.port = int(who.wait_for(WHOAMI_RE).group(4))
    yield who
    who.stop()


@pytest.mark.parametrize("fmt", ["json", "common"])
def test_a_line_per_udp_session(tmp_path, udp_echo, fmt):
    """Two clients, two sessions: three datagrams each way for one, one for the other.
    Each line comes when its session expires (the entry point's udp.timeout) and counts
    the datagrams and bytes of its own session only."""
    log = tmp_path / "access.log"
    dynamic = {
        "udp": {
            "routers": {"r": {"service": "echo"}},
            "services": {"echo": servers(f"127.0.0.1:{udp_echo.port}")},
        }
    }
    entry = {"address": "127.0.0.1:0/udp", "udp": {"timeout": "500ms"}}
    e = Edge(
        tmp_path,
        dynamic,
        entrypoints={"dns": entry},
        static_extra={"accessLog": {"filePath": str(log), "format": fmt}},
    )
    sent = {}
    try:
        for payloads in ((b"one", b"two two", b"three three three"), (b"four",)):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(5)
                s.connect(("127.0.0.1", e.ports["dns"]))
                for payload in payloads:
                    s.send(payload)
                    assert s.recv(65536) == payload
                sent[s.getsockname()[1]] = (len(payloads), sum(map(len, payloads)))
        lines = wait_lines(log, 2, timeout=10)
    finally:
        e.stop()
    if fmt == "common":
        server = re.escape(f"127.0.0.1:{udp_echo.port}")
        pattern = (
            r'127\.0\.0\.1 - - \[[^\]]+\] "UDP r@file echo@file '
            + server
            + r'" (\d+) (\d+) (\d+)ms'
        )
        matches = [re.fullmatch(pattern, line) for line in lines]
        assert all(matches), lines
        sizes = sorted((int(m[1]), int(m[2])) for m in matches if m)
        assert sizes == sorted((size, size) for _, size in sent.values())
        assert all(int(m[3]) >= 500 for m in matches if m)  # the idle timeout is in its life
        return
    records = {r["ClientPort"]: r for r in map(json.loads, lines)}
    assert set(records) == {str(port) for port in sent}
    for port, (datagrams, size) in sent.items():
        r = records[str(port)]
        assert (r["RequestProtocol"], r["ClientHost"]) == ("UDP", "127.0.0.1")
        assert (r["RouterName"], r["ServiceName"]) == ("r@file", "echo@file")
        assert r["ServiceAddr"] == f"127.0.0.1:{udp_echo.port}"
        assert (r["RequestDatagrams"], r["DownstreamDatagrams"]) == (datagrams, datagrams)
        assert (r["RequestContentSize"], r["DownstreamContentSize"]) == (size, size)
        assert r["entryPointName"] == "dns" and r["Duration"] >= 500_000_000


def test_connection_lines_and_min_duration(tmp_path, echo):
    """filters.minDuration keeps a TCP connection that lasted longer; statusCodes keeps
    none (it has no status)."""
    log = tmp_path / "access.log"
    filters = {"statusCodes": ["200-599"], "minDuration": "300ms"}
    static = {"accessLog": {"filePath": str(log), "format": "json", "filters": filters}}
    e = Edge(tmp_path, tcp_routes(f"127.0.0.1:{echo.port}"), static_extra=static)
    try:
        echo_once(e.port, b"quick")
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            s.sendall(b"slow")
            assert s.recv(4) == b"slow"
            time.sleep(0.4)
        (line,) = wait_lines(log, 1)
        time.sleep(0.3)
        assert len(wait_lines(log, 1)) == 1
    finally:
        e.stop()
    r = json.loads(line)
    assert r["RequestContentSize"] == 4 and r["Duration"] > 300_000_000
