"""``providers.kubernetesGateway.openListeners``: entry points opened at run time.

A Gateway listener whose port no static entry point has gets an entry point opened for
it while edge runs (HTTP and UDP here, on ports chosen free beforehand), served and
``Programmed``; removed from the Gateway, its port closes. A port another socket holds
cannot be opened: the listener says ``PortUnavailable`` naming the error, and once the
port is free a round edge runs again (after 1 s, doubling) opens it. The API's
``/api/entrypoints`` lists the opened entry points with the static ones, saying what
opened them and whether their port could be bound. Real emulator, real backends, real
clients; every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import STARTUP, Proc, Whoami
from tests.integration.kubernetes import test_gateway_provider as TG
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_gateway_provider import (
    Ports,
    backends,
    conds,
    free_udp_port,
    gateway,
    gateway_class,
    gateway_status,
    http_route,
    l4_route,
    l4_service,
    listener,
    static_config,
    to,
    who,
)
from tests.integration.peers import free_port

# The Gateway provider tests' fixtures: the emulator, the client, a UDP echo server.
emu, api, udp_echo = TG.emu, TG.api, TG.udp_echo


@pytest.fixture
def start_open(emu):
    """An edge whose Gateway source opens listeners' ports (on 127.0.0.1)."""
    started: list[KP.InProcessEdge] = []

    def start(ports: Ports) -> KP.InProcessEdge:
        static = static_config(emu, ports)
        static["providers"]["kubernetesGateway"]["openListeners"] = True
        static["runtimeEntryPoints"] = {"host": "127.0.0.1"}
        static["api"] = {"insecure": True}  # on the traefik entry point
        e = KP.InProcessEdge(static, tweak=TG._fast)
        e.start()
        started.append(e)
        assert KP.until(lambda: e.ready() == 200, 10.0), "edge never became ready"
        return e

    yield start
    KP.stop_all(started)


def entry_points(edge: KP.InProcessEdge) -> dict[str, dict]:
    """``/api/entrypoints``, by name, read from the API on the traefik entry point."""
    return entry_points_at(edge.port("traefik"))


def entry_points_at(port: int) -> dict[str, dict]:
    """``/api/entrypoints``, by name, from the API on ``port``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/api/entrypoints")
        resp = conn.getresponse()
        assert resp.status == 200
        return {ep["name"]: ep for ep in json.loads(resp.read())}
    finally:
        conn.close()


def said(api, name: str) -> dict[str, tuple[str, str]]:
    return conds(listener(gateway_status(api), name).get("conditions", []))


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def udp_echo_once(port: int) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.5)
        sock.sendto(b"ping", ("127.0.0.1", port))
        try:
            return sock.recv(64)
        except OSError:
            return b""


def test_listeners_on_ports_edge_lacks_are_opened_then_closed(
    emu, start_open, api, whoami: Whoami, udp_echo
) -> None:
    ports = Ports()
    extra, extra_udp = free_port(), free_udp_port()
    emu.create(gateway_class())
    listeners: list[dict[str, Any]] = [
        {"name": "static", "port": ports.web, "protocol": "HTTP"},
        {"name": "opened", "port": extra, "protocol": "HTTP"},
        {"name": "dns", "port": extra_udp, "protocol": "UDP"},
    ]
    emu.create(gateway(listeners))
    backends(emu, v1=whoami)
    emu.create(http_route("web", [{"backendRefs": [to("v1")]}], ["web.test"]))
    l4_service(emu, "dns", 53, udp_echo.port, "UDP")
    emu.create(l4_route("UDPRoute", "dns", "dns", [{"name": "dns", "port": 53}]))
    edge = start_open(ports)

    assert KP.until(lambda: who(extra, "/", "web.test") == "w1", 10.0)
    assert who(ports.web, "/", "web.test") == "w1"  # the static entry point, as before
    assert KP.until(lambda: udp_echo_once(extra_udp) == b"ping", 10.0)
    assert KP.until(lambda: said(api, "opened").get("Programmed") == ("True", "Programmed"))
    assert said(api, "opened")["Accepted"] == ("True", "Accepted")
    assert said(api, "dns")["Programmed"] == ("True", "Programmed")
    assert {":" + str(extra), f":{extra_udp}/udp"} <= set(edge.app.entrypoints.all)
    listed = entry_points(edge)
    assert {"web", "traefik", f":{extra}", f":{extra_udp}/udp"} <= set(listed)
    opened = listed[f":{extra}"]
    assert opened["address"] == f"127.0.0.1:{extra}"
    assert opened["runtime"]["state"] == "open" and "error" not in opened["runtime"]
    assert opened["runtime"]["origin"] == "opened for Gateway default/gw listener opened"
    (router,) = opened["runtime"]["routers"]
    assert router.startswith("httproute-default-web-gw-default-gw-ep-")
    assert listed[f":{extra_udp}/udp"]["runtime"]["routers"][0].startswith("udproute-")
    assert listed[f":{extra_udp}/udp"]["runtime"]["origin"].endswith("listener dns")
    assert "runtime" not in listed["web"]

    gw = emu.get("Gateway", "default", "gw")
    gw["spec"]["listeners"] = [listeners[0]]
    emu.update(gw)
    assert KP.until(lambda: refused(extra), 15.0)
    assert KP.until(lambda: f":{extra}" not in edge.app.entrypoints.all, 15.0)
    assert who(ports.web, "/", "web.test") == "w1"
    assert KP.until(lambda: f":{extra}" not in entry_points(edge))


def test_a_port_held_elsewhere_is_port_unavailable_until_it_is_free(
    emu, start_open, api, whoami: Whoami
) -> None:
    ports = Ports()
    holder = socket.create_server(("127.0.0.1", 0))
    held = holder.getsockname()[1]
    emu.create(gateway_class())
    emu.create(gateway([{"name": "held", "port": held, "protocol": "HTTP"}]))
    backends(emu, v1=whoami)
    emu.create(http_route("web", [{"backendRefs": [to("v1")]}], ["web.test"]))
    try:
        edge = start_open(ports)

        def accepted() -> tuple[str, str]:
            return said(api, "held").get("Accepted", ("", ""))

        assert KP.until(lambda: accepted() == ("False", "PortUnavailable"), 15.0), accepted()
        found = listener(gateway_status(api), "held")["conditions"]
        message = next(c["message"] for c in found if c["type"] == "Accepted")
        assert f"port {held}" in message and "in use" in message, message
        assert said(api, "held")["Programmed"] == ("False", "Invalid")
        shown = entry_points(edge)[f":{held}"]["runtime"]
        assert shown["state"] == "failed" and "in use" in shown["error"], shown
    finally:
        holder.close()
    # A round edge runs again after a while tries the port again: it is edge's now.
    assert KP.until(lambda: who(held, "/", "web.test") == "w1", 20.0)
    assert KP.until(lambda: said(api, "held").get("Programmed") == ("True", "Programmed"), 15.0)


def test_under_workers_a_port_held_elsewhere_is_port_unavailable_until_it_is_free(
    emu, api, whoami: Whoami, tmp_path: Path
) -> None:
    """``workers: 2``: the workers bind run-time entry points, the supervisor runs the
    Gateway source. A port a worker cannot bind reaches the listener's condition over the
    supervisor's channel (before, only that worker's log and API knew), and clears there
    once the workers' next round opens it."""
    ports = Ports()
    traefik = free_port()
    holder = socket.create_server(("127.0.0.1", 0))
    held = holder.getsockname()[1]
    emu.create(gateway_class())
    emu.create(gateway([{"name": "held", "port": held, "protocol": "HTTP"}]))
    backends(emu, v1=whoami)
    emu.create(http_route("web", [{"backendRefs": [to("v1")]}], ["web.test"]))
    static = static_config(emu, ports)
    static["entryPoints"]["traefik"]["address"] = f"127.0.0.1:{traefik}"
    static["providers"]["kubernetesGateway"]["openListeners"] = True
    static["runtimeEntryPoints"] = {"host": "127.0.0.1"}
    static["api"] = {"insecure": True}
    static["workers"] = 2
    path = tmp_path / "edge.yaml"
    path.write_text(yaml.safe_dump(static))
    edge = Proc(["run", "--config", str(path)])
    try:
        try:

            def accepted() -> tuple[str, str]:
                return said(api, "held").get("Accepted", ("", ""))

            assert KP.until(lambda: accepted() == ("False", "PortUnavailable"), STARTUP), (
                accepted(),
                edge.log[-3000:],
            )
            found = listener(gateway_status(api), "held")["conditions"]
            message = next(c["message"] for c in found if c["type"] == "Accepted")
            assert f"port {held}" in message and "in use" in message, message
            assert said(api, "held")["Programmed"] == ("False", "Invalid")
        finally:
            holder.close()
        # The workers' next round (after 1 s, doubling) binds the port: edge's now.
        assert KP.until(lambda: who(held, "/", "web.test") == "w1", 30.0), edge.log[-3000:]
        assert KP.until(
            lambda: said(api, "held").get("Programmed") == ("True", "Programmed"), 30.0
        ), edge.log[-3000:]
        assert said(api, "held")["Accepted"] == ("True", "Accepted")
        # Each worker's API says what the entry point is opened for (the supervisor's word).
        assert KP.until(
            lambda: (
                entry_points_at(traefik)[f":{held}"]["runtime"].get("origin")
                == "opened for Gateway default/gw listener held"
            ),
            10.0,
        )
    finally:
        assert edge.stop() == 0, edge.log[-3000:]
