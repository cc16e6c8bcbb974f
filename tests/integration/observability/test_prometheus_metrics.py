"""``metrics.prometheus`` through a real edge: curl's requests counted exactly on
/metrics, per entry point, router and service, under both HTTP/1.1 codecs."""

from __future__ import annotations

import socket
import time

import pytest

from tests.harness import WHOAMI_RE, Edge, Proc, lb
from tests.integration.observability.metrics_text import curl, scrape, value
from tests.integration.peers import free_port

PROMETHEUS = {
    "metrics": {"prometheus": {"addRoutersLabels": True, "buckets": [0.05, 0.5, 5]}},
}


def dynamic(whoami) -> dict:
    return {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {"s": lb(whoami.url)},
        }
    }


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_requests_counted_per_entrypoint_router_and_service(tmp_path, whoami, parser):
    e = Edge(tmp_path, dynamic(whoami), parser=parser, static_extra=PROMETHEUS)
    try:
        web = e.url
        sizes = []
        for _ in range(3):
            out = curl(
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{size_download}",
                "-H",
                "Host: a.test",
                web + "/x",
            )
            code, size = out.stdout.decode().split()
            assert code == "200"
            sizes.append(int(size))
        for _ in range(2):
            out = curl(
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-H",
                "Host: a.test",
                "-d",
                "hello",
                web + "/p",
            )
            assert out.stdout == b"200"
        out = curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: nobody.test", web + "/")
        assert out.stdout == b"404"
        out = curl(
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "PROPFIND",
            "-H",
            "Host: a.test",
            web + "/",
        )
        samples, content_type = scrape(e.ports["traefik"])
    finally:
        e.stop()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    propfind = out.stdout.decode()
    ep = {"protocol": "http", "entrypoint": "web"}
    assert value(samples, "traefik_entrypoint_requests_total", code="200", method="GET", **ep) == 3
    assert value(samples, "traefik_entrypoint_requests_total", code="200", method="POST", **ep) == 2
    assert value(samples, "traefik_entrypoint_requests_total", code="404", method="GET", **ep) == 1
    # Methods outside the standard set share one label value.
    assert (
        value(
            samples,
            "traefik_entrypoint_requests_total",
            code=propfind,
            method="EXTENSION_METHOD",
            **ep,
        )
        == 1
    )
    router = {"protocol": "http", "router": "a@file", "service": "s@file"}
    assert value(samples, "traefik_router_requests_total", code="200", method="GET", **router) == 3
    service = {"protocol": "http", "service": "s@file"}
    assert (
        value(samples, "traefik_service_requests_total", code="200", method="POST", **service) == 2
    )
    # The 404 matched no router: it is the entry point's alone.
    assert not [
        k for k in samples if k[0] == "traefik_router_requests_total" and ("code", "404") in k[1]
    ]
    get200 = {"code": "200", "method": "GET", **ep}
    assert value(samples, "traefik_entrypoint_responses_bytes_total", **get200) == sum(sizes)
    assert (
        value(samples, "traefik_entrypoint_requests_bytes_total", code="200", method="POST", **ep)
        == 10
    )
    # The histogram: cumulative buckets ending with +Inf, which equals the count.
    name = "traefik_entrypoint_request_duration_seconds"
    buckets = [
        value(samples, name + "_bucket", le=le, **get200) for le in ("0.05", "0.5", "5", "+Inf")
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 3, buckets
    assert value(samples, name + "_count", **get200) == 3
    assert 0 < value(samples, name + "_sum", **get200) < 3 * 5
    assert value(samples, "traefik_service_server_up", service="s@file", url=whoami.url) == 1
    assert value(samples, "traefik_config_reloads_total") >= 1
    assert value(samples, "traefik_config_last_reload_success") > 1.7e9
    assert value(samples, "traefik_open_connections", entrypoint="web", protocol="TCP") == 0
    # curl's scrape is open on the traefik entry point as it is answered.
    assert value(samples, "traefik_open_connections", entrypoint="traefik", protocol="TCP") >= 1
    assert value(samples, "process_resident_memory_bytes") > 1e6
    assert value(samples, "process_open_fds") > 3


def test_tcp_routers_count_connections_bytes_and_failed_dials(tmp_path, echo):
    closed = free_port()
    entrypoints = {
        "web": {"address": "127.0.0.1:0"},
        "tcp": {"address": "127.0.0.1:0"},
        "down": {"address": "127.0.0.1:0"},
    }
    tcp = {
        "routers": {
            "t": {"rule": "HostSNI(`*`)", "service": "echo", "entryPoints": ["tcp"]},
            "d": {"rule": "HostSNI(`*`)", "service": "gone", "entryPoints": ["down"]},
        },
        "services": {
            "echo": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{echo.port}"}]}},
            "gone": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{closed}"}]}},
        },
    }
    e = Edge(tmp_path, {"tcp": tcp}, entrypoints=entrypoints, static_extra=PROMETHEUS)
    try:
        for payload in (b"hello\n", b"a longer line\n"):
            with socket.create_connection(("127.0.0.1", e.ports["tcp"]), timeout=5) as s:
                s.sendall(payload)
                got = b""
                while len(got) < len(payload):
                    chunk = s.recv(100)
                    assert chunk, "the echo closed early"
                    got += chunk
                assert got == payload
        with socket.create_connection(("127.0.0.1", e.ports["down"]), timeout=5) as s:
            s.settimeout(5)
            assert s.recv(10) == b""  # closed: the server is not there
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the relays end after the client's close
            samples, _ = scrape(e.ports["traefik"])
            if value(samples, "traefik_open_connections", entrypoint="tcp", protocol="TCP") == 0:
                break
            time.sleep(0.05)
    finally:
        e.stop()
    where = {"entrypoint": "tcp", "router": "t@file", "service": "echo@file"}
    assert value(samples, "edge_tcp_connections_total", **where) == 2
    assert value(samples, "edge_tcp_bytes_total", direction="to_server", **where) == 20
    assert value(samples, "edge_tcp_bytes_total", direction="to_client", **where) == 20
    down = {"entrypoint": "down", "router": "d@file", "service": "gone@file"}
    assert value(samples, "edge_tcp_dial_errors_total", **down) == 1
    assert value(samples, "edge_tcp_connections_total", **down) == 0


def test_udp_datagrams_bytes_and_sessions(tmp_path):
    who = Proc(["whoami", "--name", "echo", "--udp", "127.0.0.1:0"])
    try:
        backend = f"127.0.0.1:{who.wait_for(WHOAMI_RE).group(4)}"
        udp = {
            "routers": {"r": {"service": "echo", "entryPoints": ["dns"]}},
            "services": {"echo": {"loadBalancer": {"servers": [{"address": backend}]}}},
        }
        entrypoints = {"web": {"address": "127.0.0.1:0"}, "dns": {"address": "127.0.0.1:0/udp"}}
        e = Edge(tmp_path, {"udp": udp}, entrypoints=entrypoints, static_extra=PROMETHEUS)
        try:
            sizes = (5, 17, 40)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(5)
                s.connect(("127.0.0.1", e.ports["dns"]))
                for size in sizes:
                    s.send(b"x" * size)
                    assert len(s.recv(100)) == size  # the echo
                samples, _ = scrape(e.ports["traefik"])
        finally:
            e.stop()
    finally:
        who.stop()
    where = {"entrypoint": "dns", "router": "r@file", "service": "echo@file"}
    for direction in ("to_server", "to_client"):
        assert value(samples, "edge_udp_datagrams_total", direction=direction, **where) == 3
        assert value(samples, "edge_udp_bytes_total", direction=direction, **where) == sum(sizes)
    assert value(samples, "edge_udp_sessions_total", **where) == 1
    assert value(samples, "edge_udp_sessions", entrypoint="dns") == 1
    assert value(samples, "traefik_open_connections", entrypoint="dns", protocol="UDP") == 1
    assert value(samples, "edge_udp_dropped_total", **where) == 0
