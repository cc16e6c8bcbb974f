"""HTTPRoute backendRefs that cannot be served, through edge: their share gets 500.

The spec: a backendRef naming a Service that does not exist, a kind edge cannot
serve, or another namespace's Service with no ReferenceGrant allowing it is invalid;
requests that would have gone to it get 500, the other backendRefs keep their
shares, and the route says why in ``ResolvedRefs`` while staying ``Accepted``. The
scenarios follow the upstream conformance suite (written anew here):
HTTPRouteInvalidNonExistentBackendRef, HTTPRouteInvalidBackendRefUnknownKind,
HTTPRouteInvalidCrossNamespaceBackendRef, HTTPRouteInvalidReferenceGrant and
HTTPRoutePartiallyInvalidViaInvalidReferenceGrant; then a weighted split where one
member is invalid. Real backends, a real client, statuses read with the kubernetes
client; every wait is bounded.
"""

from __future__ import annotations

from collections import Counter

from tests.harness import Whoami
from tests.integration.http.grpcpeers import Echo
from tests.integration.kubernetes import test_gateway_provider as TG
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_gateway_provider import (
    GROUP,
    Ports,
    backends,
    gateway,
    gateway_class,
    http_route,
    l4_service,
    path,
    route_conditions,
    to,
    who,
)
from tests.integration.kubernetes.test_grpcroute import call

# The Gateway provider tests' fixtures: the emulator, an edge on given ports, the client.
emu, start_edge, api = TG.emu, TG.start_edge, TG.api


def grant(name: str, namespace: str, from_: dict, to_: dict) -> dict:
    return {"apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"from": [from_], "to": [to_]}}  # fmt: skip


ROUTE_FROM = {"group": GROUP, "kind": "HTTPRoute", "namespace": "default"}
TO_WEB = {"group": "", "kind": "Service", "name": "web"}

WRONG_GRANTS = [
    # Each misses by one field (HTTPRouteInvalidReferenceGrant): none allows the ref.
    ("wrong-namespace", "default", ROUTE_FROM, TO_WEB),
    ("wrong-from-group", "apps", {**ROUTE_FROM, "group": "example.com"}, TO_WEB),
    ("wrong-from-kind", "apps", {**ROUTE_FROM, "kind": "Gateway"}, TO_WEB),
    ("wrong-from-namespace", "apps", {**ROUTE_FROM, "namespace": "elsewhere"}, TO_WEB),
    ("wrong-to-group", "apps", ROUTE_FROM, {**TO_WEB, "group": "example.com"}),
    ("wrong-to-kind", "apps", ROUTE_FROM, {**TO_WEB, "kind": "Secret"}),
    ("wrong-to-name", "apps", ROUTE_FROM, {**TO_WEB, "name": "other"}),
]


def refused(reason: str) -> dict[str, tuple[str, str]]:
    return {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", reason)}


def test_invalid_backend_refs_get_500_for_their_share(
    emu, start_edge, api, whoami: Whoami, whoami2: Whoami
) -> None:
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    backends(emu, v1=whoami)
    backends(emu, "apps", web=whoami2)
    for name, namespace, from_, to_ in WRONG_GRANTS:
        emu.create(grant(name, namespace, from_, to_))
    emu.create(http_route("nonexistent", [{"backendRefs": [to("nonexistent")]}], ["none.test"]))
    emu.create(http_route("unknown-kind", [{"matches": [path("/v2")], "backendRefs": [
        to("v1", group="unknownkind.example.com", kind="NonExistent")]}], ["kind.test"]))  # fmt: skip
    emu.create(
        http_route("cross", [{"backendRefs": [to("web", namespace="apps")]}], ["cross.test"])
    )
    emu.create(http_route("partial", [
        {"matches": [path("/")], "backendRefs": [to("v1")]},
        {"matches": [path("/invalid")], "backendRefs": [to("web", namespace="apps")]},
    ], ["partial.test"]))  # fmt: skip
    emu.create(http_route("split", [{"backendRefs": [to("v1", 1), to("gone", 1)]}], ["split.test"]))
    start_edge(ports)
    port = ports.web

    assert KP.until(lambda: who(port, "/", "partial.test") == "w1")
    assert who(port, "/", "none.test") == "500"
    assert who(port, "/v2", "kind.test") == "500"
    assert who(port, "/", "cross.test") == "500"  # every ReferenceGrant misses
    assert who(port, "/invalid", "partial.test") == "500"
    assert who(port, "/invalid/x", "partial.test") == "500"
    assert who(port, "/other", "partial.test") == "w1"
    # Smooth weighted round robin alternates equal weights: exactly half each.
    assert Counter(who(port, "/", "split.test") for _ in range(10)) == {"w1": 5, "500": 5}

    expected = {
        "nonexistent": refused("BackendNotFound"),
        "unknown-kind": refused("InvalidKind"),
        "cross": refused("RefNotPermitted"),
        "partial": refused("RefNotPermitted"),
        "split": refused("BackendNotFound"),
    }
    assert KP.until(lambda: {n: route_conditions(api, n) for n in expected} == expected), {
        n: route_conditions(api, n) for n in expected
    }

    # The grant that fits: the cross-namespace share is served, the status follows.
    emu.create(grant("fits", "apps", ROUTE_FROM, TO_WEB))
    assert KP.until(lambda: who(port, "/invalid", "partial.test") == "w2")
    assert who(port, "/", "cross.test") == "w2"
    assert KP.until(
        lambda: (
            route_conditions(api, "partial")
            == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
        )
    )


def test_a_service_ports_app_protocol_h2c_makes_the_backend_h2c(emu, start_edge, api) -> None:
    """HTTPRouteBackendProtocolH2C (GEP-1911): a Service port whose ``appProtocol`` is
    ``kubernetes.io/h2c`` is spoken to over HTTP/2 with prior knowledge; a grpcio server
    (h2c only) answers the calls an HTTPRoute sends it. The same server behind a port
    without appProtocol gets HTTP/1.1, which it cannot read; a port whose appProtocol
    edge does not speak is an invalid backend (500, ``UnsupportedProtocol``)."""
    echo = Echo()
    try:
        ports = Ports()
        emu.create(gateway_class())
        emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
        for name, app_protocol in (("h2", "kubernetes.io/h2c"), ("plain", None),
                                   ("odd", "example.com/quic")):  # fmt: skip
            l4_service(emu, name, 8080, echo.port)
            if app_protocol is not None:
                svc = emu.get("Service", "default", name)
                svc["spec"]["ports"][0]["appProtocol"] = app_protocol
                emu.update(svc)
            refs = [{"backendRefs": [{"name": name, "port": 8080}]}]
            emu.create(http_route(name, refs, [f"{name}.test"]))
        start_edge(ports)
        echoes = {"echo": echo}
        assert KP.until(lambda: call(ports.web, echoes, authority="h2.test") == "echo", 15.0)
        assert call(ports.web, echoes, "ServerStream", authority="h2.test") == "echo"
        assert KP.until(lambda: route_conditions(api, "h2") == TG.ACCEPTED)
        assert call(ports.web, echoes, authority="plain.test") != "echo"
        assert KP.until(lambda: route_conditions(api, "plain") == TG.ACCEPTED)
        assert KP.until(lambda: who(ports.web, "/", "odd.test") == "500")
        assert KP.until(
            lambda: (
                route_conditions(api, "odd").get("ResolvedRefs") == ("False", "UnsupportedProtocol")
            )
        )
    finally:
        echo.stop()
