"""The Events edge posts on the Gateway API objects it refuses carry the reason of
the condition that says why (``BackendNotFound``, ``NotAllowedByListeners``,
``PortUnavailable``), not one reason for all. Edge in this process reads the API
server emulator over a socket; the Events are listed with the official ``kubernetes``
client as ``kubectl describe`` lists them. Every wait is bounded.
"""

from __future__ import annotations

from tests.harness import Whoami
from tests.integration.kubernetes import test_gateway_provider as GP
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_events import warnings
from tests.integration.peers import free_port

emu, start_edge = GP.emu, GP.start_edge


def test_gateway_events_carry_the_conditions_reason(emu, start_edge, whoami: Whoami) -> None:
    ports = GP.Ports()
    emu.create(GP.gateway_class())
    unbound = free_port()  # no entry point of edge listens there
    emu.create(GP.gateway([
        {"name": "http", "port": ports.web, "protocol": "HTTP"},
        {"name": "nowhere", "port": unbound, "protocol": "HTTP"},
        {"name": "grpc-only", "port": ports.web, "protocol": "HTTP", "hostname": "g.test",
         "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}]}},
    ]))  # fmt: skip
    GP.backends(emu, v1=whoami)
    emu.create(GP.http_route("good", [{"backendRefs": [GP.to("v1")]}], ["a.test"]))
    emu.create(GP.http_route("gone", [{"backendRefs": [GP.to("nowhere")]}], ["b.test"]))
    kept_out = {"parentRefs": [{"name": "gw", "sectionName": "grpc-only"}]}
    emu.create(GP.http_route("kept-out", [{"backendRefs": [GP.to("v1")]}], [], **kept_out))
    grpc = GP.http_route("grpc-gone", [{"backendRefs": [GP.to("nowhere")]}], ["g.test"])
    emu.create({**grpc, "kind": "GRPCRoute"})
    start_edge(ports)
    assert KP.until(lambda: GP.who(ports.web, "/", "a.test") == "w1")

    def reasons(kind: str, name: str) -> list[str]:
        return [e.reason for e in warnings(emu, kind, name)]

    assert KP.until(lambda: reasons("HTTPRoute", "gone") == ["BackendNotFound"])
    assert KP.until(lambda: reasons("HTTPRoute", "kept-out") == ["NotAllowedByListeners"])
    assert KP.until(lambda: reasons("Gateway", "gw") == ["PortUnavailable"])
    assert KP.until(lambda: reasons("GRPCRoute", "grpc-gone") == ["BackendNotFound"])
    (event,) = warnings(emu, "Gateway", "gw")
    assert f"port {unbound}" in event.message and "nowhere" in event.message
    assert reasons("HTTPRoute", "good") == []
