"""``entryPoints.<n>.reusePort`` (Traefik's): the entry point's socket binds with
SO_REUSEPORT, so another process binding the same port with it does not stop edge.

- a plain socket holding the port with SO_REUSEPORT: edge with ``reusePort`` starts and
  serves there (TCP: curl through it; UDP: a datagram echoed); without it edge's start
  fails naming the port in use;
- two edge processes, both with ``reusePort``, on one TCP and one UDP port: both start,
  and requests and datagrams are answered while either runs.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
import yaml

from tests.harness import STARTUP, WHOAMI_RE, Edge, Proc, lb, need
from tests.integration.peers import free_port


@pytest.fixture(scope="module")
def udp_echo():
    """``edge whoami --udp``: a UDP echo server."""
    p = Proc(["whoami", "--name", "udp-echo", "--udp", "127.0.0.1:0"])
    p.port = int(p.wait_for(WHOAMI_RE).group(4))
    yield p
    p.stop()


def holder(kind: int) -> socket.socket:
    """A socket bound to a free 127.0.0.1 port with SO_REUSEPORT, not listening (the
    kernel gives connections only to listening members of the port's group)."""
    s = socket.socket(socket.AF_INET, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", 0))
    return s


def dynamic(whoami_url: str, echo_port: int) -> dict:
    return {
        "http": {
            "routers": {"who": {"rule": "PathPrefix(`/`)", "service": "who"}},
            "services": {"who": lb(whoami_url)},
        },
        "udp": {
            "routers": {"echo": {"service": "echo", "entryPoints": ["dns"]}},
            "services": {
                "echo": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo_port}"}]}}
            },
        },
    }


def curl_status(port: int) -> str:
    out = subprocess.run(
        [need("curl"), "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}",
         f"http://127.0.0.1:{port}/shared"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def udp_round_trip(port: int, payload: bytes, timeout: float = 10) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as c:
        c.settimeout(timeout)
        c.sendto(payload, ("127.0.0.1", port))
        return c.recvfrom(65536)[0]


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM], ids=["tcp", "udp"])
def test_with_reuse_port_edge_binds_a_port_another_socket_shares(tmp_path, kind, whoami, udp_echo):
    with holder(kind) as taken:
        port = taken.getsockname()[1]
        udp = kind == socket.SOCK_DGRAM
        name = "dns" if udp else "web"
        address = f"127.0.0.1:{port}" + ("/udp" if udp else "")
        eps = {name: {"address": address, "reusePort": True}}
        if udp:
            eps["web"] = {"address": "127.0.0.1:0"}
        e = Edge(tmp_path, dynamic(whoami.url, udp_echo.port), entrypoints=eps)
        try:
            assert e.ports[name] == port
            if udp:
                # the unconnected holder is in the group too: it may draw some
                # datagrams, so each try is a new source (a new hash)
                for i in range(20):
                    try:
                        assert udp_round_trip(port, b"ping %d" % i, 2) == b"ping %d" % i
                        break
                    except TimeoutError:
                        continue
                else:
                    raise AssertionError("no datagram came back through edge:\n" + e.log)
            else:
                assert curl_status(port) == "200"
        finally:
            e.stop()

        # Without reusePort the same start fails: the port is in use.
        del eps[name]["reusePort"]
        static = {"entryPoints": eps, "log": {"level": "INFO"}}
        (tmp_path / "plain.yaml").write_text(yaml.safe_dump(static))
        out = subprocess.run(
            [sys.executable, "-m", "edge", "run", "--config", str(tmp_path / "plain.yaml")],
            capture_output=True,
            text=True,
            timeout=STARTUP + 30,
        )
    assert out.returncode == 1, out.stderr
    assert f"entrypoint {name}:" in out.stderr and "in use" in out.stderr, out.stderr


def test_two_edge_processes_share_tcp_and_udp_ports_with_reuse_port(tmp_path, whoami, udp_echo):
    web, dns = free_port(), free_port()
    eps = {
        "web": {"address": f"127.0.0.1:{web}", "reusePort": True},
        "dns": {"address": f"127.0.0.1:{dns}/udp", "reusePort": True},
    }
    conf = dynamic(whoami.url, udp_echo.port)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = Edge(tmp_path / "one", conf, entrypoints={k: dict(v) for k, v in eps.items()})
    try:
        two = Edge(tmp_path / "two", conf, entrypoints={k: dict(v) for k, v in eps.items()})
        try:
            assert one.ports["web"] == two.ports["web"] == web
            assert one.ports["dns"] == two.ports["dns"] == dns
            for i in range(10):
                assert curl_status(web) == "200"
                assert udp_round_trip(dns, b"both %d" % i) == b"both %d" % i
        finally:
            two.stop()
        # the other keeps the ports
        for i in range(5):
            assert curl_status(web) == "200"
            assert udp_round_trip(dns, b"one %d" % i) == b"one %d" % i
    finally:
        one.stop()
