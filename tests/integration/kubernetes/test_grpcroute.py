"""GRPCRoute end to end: emulator -> Gateway provider -> edge -> grpcio servers.

The real ``grpcio`` package on both sides: :class:`tests.integration.http.grpcpeers.Echo`
servers (h2c on 127.0.0.1) are the Services' endpoints, and a grpcio client calls
through edge's HTTP entry point (h2c with prior knowledge), its ``:authority`` set per
call. Which backend answered is read from what each server recorded (the call's own
``x-call`` metadata); a call no route matches gets edge's 404, which the client reads as
UNIMPLEMENTED, as the conformance suite expects. The statuses edge writes back are read
with the official ``kubernetes`` client. Scenarios follow the upstream conformance
suite's GRPCRoute tests (written anew here, on this service's methods):
GRPCExactMethodMatching (with GRPCRouteNamedRule), GRPCRouteHeaderMatching, GRPCRouteListenerHostnameMatching,
GRPCRouteWeight, GRPCRouteRequestHeaderModifier; a RequestMirror; then gRPC over TLS on an HTTPS
listener (h2 by ALPN), a GRPCRoute and an HTTPRoute
meeting on one hostname, and a backend that cannot be served (UNAVAILABLE). Every wait
is bounded.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import grpc
import pytest

from tests.fixtures.tls.pki import PKI
from tests.harness import Whoami
from tests.integration.http.grpcpeers import SERVICE, Echo
from tests.integration.kubernetes import test_gateway_provider as TG
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_gateway_provider import (
    GW,
    Ports,
    backends,
    gateway,
    gateway_class,
    gateway_status,
    http_route,
    l4_service,
    listener,
    route_conditions,
    who,
)

# The Gateway provider tests' fixtures: the emulator, an edge on given ports, the client.
emu, start_edge, api = TG.emu, TG.start_edge, TG.api

ACCEPTED = {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
_calls = itertools.count()


@pytest.fixture(scope="module")
def echoes() -> Iterator[dict[str, Echo]]:
    """Three grpcio servers, the backends v1, v2 and v3."""
    found = {name: Echo() for name in ("v1", "v2", "v3")}
    yield found
    for echo in found.values():
        echo.stop()


def grpc_services(emu, echoes: dict[str, Echo]) -> None:
    """A Service (port 8080) and its EndpointSlice per backend."""
    for name, echo in echoes.items():
        l4_service(emu, name, 8080, echo.port)


def grpc_route(name: str, rules: list[dict], hostnames: list[str] | None = None, **spec) -> dict:
    spec.setdefault("parentRefs", [{"name": "gw"}])
    spec = {**spec, "rules": rules, **({"hostnames": hostnames} if hostnames else {})}
    return {"apiVersion": GW, "kind": "GRPCRoute",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}  # fmt: skip


def to(name: str, weight: int = 1) -> dict:
    return {"name": name, "port": 8080, "weight": weight}


def method(name: str | None = None, service: str | None = SERVICE) -> dict:
    found = {k: v for k, v in (("service", service), ("method", name)) if v is not None}
    return {"method": found}


def headers(**values: str) -> dict:
    return {"headers": [{"name": k, "value": v} for k, v in values.items()]}


def call(
    port: int,
    echoes: dict[str, Echo],
    name: str = "Unary",
    authority: str = "grpc.test",
    metadata: dict[str, str] | None = None,
    ca: bytes | None = None,
) -> str:
    """One call through edge (h2c; h2 over TLS verified against ``ca`` when given): the
    name of the backend that served it, or the status code's name (UNIMPLEMENTED...)
    with the reason edge gave (``:404``) when it failed."""
    tag = f"c{next(_calls)}"
    sent = (("x-call", tag), *(metadata or {}).items())
    options = [("grpc.default_authority", authority)]
    target = f"127.0.0.1:{port}"
    if ca is None:
        channel = grpc.insecure_channel(target, options=options)
    else:
        options.append(("grpc.ssl_target_name_override", authority))
        creds = grpc.ssl_channel_credentials(root_certificates=ca)
        channel = grpc.secure_channel(target, creds, options=options)
    with channel:
        try:
            if name == "ServerStream":
                stream = channel.unary_stream(f"/{SERVICE}/{name}")(b"1", metadata=sent, timeout=5)
                list(stream)
            else:
                channel.unary_unary(f"/{SERVICE}/{name}")(b"hi", metadata=sent, timeout=5)
        except grpc.RpcError as exc:
            details = exc.details() or ""  # type: ignore[attr-defined]
            status = next((s for s in ("404", "503") if f"status: {s}" in details), "")
            return f"{exc.code().name}:{status}"  # type: ignore[attr-defined]
    served = [n for n, e in echoes.items() if any(m.get("x-call") == tag for m in e.metadata)]
    return served[0] if len(served) == 1 else f"served by {served}"


def seen(echo: Echo) -> dict[str, str]:
    """The metadata of the last call ``echo`` recorded."""
    return echo.metadata[-1] if echo.metadata else {}


def grpc_conditions(api, name: str) -> dict[str, tuple[str, str]]:
    return route_conditions(api, name, plural="grpcroutes")


def test_grpc_exact_method_matching(emu, start_edge, api, echoes) -> None:
    """GRPCExactMethodMatching: each method to its backend, another method of the same
    service (no rule matches it) UNIMPLEMENTED, and the route's status read back; one
    rule named, as GRPCRouteNamedRule names it (a name changes nothing served)."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    grpc_services(emu, echoes)
    emu.create(grpc_route("exact-matching", [
        {"name": "named-rule", "matches": [method("Unary")], "backendRefs": [to("v1")]},
        {"matches": [method("ServerStream")], "backendRefs": [to("v2")]},
    ]))  # fmt: skip
    start_edge(ports)
    assert KP.until(lambda: call(ports.web, echoes) == "v1", 15.0)
    assert call(ports.web, echoes, "ServerStream") == "v2"
    assert call(ports.web, echoes, "Bidi") == "UNIMPLEMENTED:404"  # edge's: no route
    assert KP.until(lambda: grpc_conditions(api, "exact-matching") == ACCEPTED)

    def http_listener() -> tuple[list, int]:
        found = listener(gateway_status(api), "http")
        return found.get("supportedKinds", []), found.get("attachedRoutes", -1)

    kinds = [{"group": TG.GROUP, "kind": k} for k in ("HTTPRoute", "GRPCRoute")]
    assert KP.until(lambda: http_listener() == (kinds, 1)), http_listener()


def test_grpc_over_tls_on_an_https_listener(emu, start_edge, api, echoes) -> None:
    """An HTTPS listener carries GRPCRoutes: the client speaks h2 by ALPN, verifies the
    listener's certificate, and its calls reach the h2c backend by method."""
    pki = PKI()
    ports = Ports()
    emu.create(gateway_class())
    tls = {"mode": "Terminate", "certificateRefs": [{"name": "grpc-tls"}]}
    emu.create(gateway([
        {"name": "https", "port": ports.websecure, "protocol": "HTTPS", "hostname": "grpc.test",
         "tls": tls}]))  # fmt: skip
    emu.create(TG._tls_secret("grpc-tls", "default", pki, "grpc.test"))
    grpc_services(emu, echoes)
    emu.create(grpc_route("secure", [
        {"matches": [method("Unary")], "backendRefs": [to("v2")]},
        {"matches": [method(service="edge.test.Other")], "backendRefs": [to("v1")]}]))  # fmt: skip
    start_edge(ports)
    ca = pki.cert_pem.encode()
    assert KP.until(lambda: call(ports.websecure, echoes, ca=ca) == "v2", 15.0)
    assert call(ports.websecure, echoes, "ServerStream", ca=ca) == "UNIMPLEMENTED:404"
    assert KP.until(lambda: grpc_conditions(api, "secure") == ACCEPTED)
    assert KP.until(lambda: listener(gateway_status(api), "https").get("attachedRoutes") == 1)


def test_grpc_header_matching(emu, start_edge, api, echoes) -> None:
    """GRPCRouteHeaderMatching: headers ANDed in a match, matches ORed in a rule, the
    most header matches first, then the first rule."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    grpc_services(emu, echoes)
    emu.create(grpc_route("grpc-header-matching", [
        {"matches": [headers(version="one")], "backendRefs": [to("v1")]},
        {"matches": [headers(version="two")], "backendRefs": [to("v2")]},
        {"matches": [headers(version="two", color="orange")], "backendRefs": [to("v1")]},
        {"matches": [headers(color="blue"), headers(color="green")], "backendRefs": [to("v1")]},
        {"matches": [headers(color="red"), headers(color="yellow")], "backendRefs": [to("v2")]},
    ]))  # fmt: skip
    start_edge(ports)
    cases = [
        ({"version": "one"}, "v1"),
        ({"version": "two"}, "v2"),
        ({"version": "two", "color": "orange"}, "v1"),
        ({"version": "two", "color": "blue"}, "v2"),  # equal precedence: the first rule
        ({"color": "orange"}, "UNIMPLEMENTED:404"),
        ({"some-other-header": "one"}, "UNIMPLEMENTED:404"),
        ({"color": "blue"}, "v1"),
        ({"color": "green"}, "v1"),
        ({"color": "red"}, "v2"),
        ({"color": "yellow"}, "v2"),
        ({"color": "purple"}, "UNIMPLEMENTED:404"),
    ]
    assert KP.until(lambda: call(ports.web, echoes, metadata={"version": "one"}) == "v1", 15.0)
    got = [(md, call(ports.web, echoes, metadata=md)) for md, _ in cases]
    assert got == cases
    assert KP.until(lambda: grpc_conditions(api, "grpc-header-matching") == ACCEPTED)


def test_grpc_listener_hostname_matching(emu, start_edge, api, echoes) -> None:
    """GRPCRouteListenerHostnameMatching: four listeners on one port, each route on its
    listeners; the authority picks, the most specific hostname first."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([
        {"name": f"listener-{i}", "port": ports.web, "protocol": "HTTP", "hostname": host}
        for i, host in enumerate(("bar.com", "foo.bar.com", "*.bar.com", "*.foo.com"), 1)
    ]))  # fmt: skip
    grpc_services(emu, echoes)

    def on(*sections: str) -> list[dict]:
        return [{"name": "gw", "sectionName": s} for s in sections]

    emu.create(grpc_route("backend-v1", [{"backendRefs": [to("v1")]}], parentRefs=on("listener-1")))
    emu.create(grpc_route("backend-v2", [{"backendRefs": [to("v2")]}], parentRefs=on("listener-2")))
    emu.create(grpc_route("backend-v3", [{"backendRefs": [to("v3")]}],
                          parentRefs=on("listener-3", "listener-4")))  # fmt: skip
    start_edge(ports)
    cases = [
        ("bar.com", "v1"),
        ("foo.bar.com", "v2"),
        ("baz.bar.com", "v3"),
        ("boo.bar.com", "v3"),
        ("multiple.prefixes.bar.com", "v3"),
        ("multiple.prefixes.foo.com", "v3"),
        ("foo.com", "UNIMPLEMENTED:404"),
        ("no.matching.host", "UNIMPLEMENTED:404"),
    ]
    assert KP.until(lambda: call(ports.web, echoes, authority="bar.com") == "v1", 15.0)
    assert [(h, call(ports.web, echoes, authority=h)) for h, _ in cases] == cases
    for name in ("backend-v1", "backend-v2"):
        assert KP.until(lambda n=name: grpc_conditions(api, n) == ACCEPTED)

    def attached() -> list[int]:
        status = gateway_status(api)
        return [listener(status, f"listener-{i}").get("attachedRoutes", -1) for i in range(1, 5)]

    assert KP.until(lambda: attached() == [1, 1, 1, 1]), attached()


def test_grpc_weight(emu, start_edge, api, echoes) -> None:
    """GRPCRouteWeight: 70/30/0; smooth weighted round robin gives the exact shares
    over whole cycles, and weight 0 none."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    grpc_services(emu, echoes)
    emu.create(grpc_route("weighted-backends", [
        {"backendRefs": [to("v1", 70), to("v2", 30), to("v3", 0)]}]))  # fmt: skip
    start_edge(ports)
    assert KP.until(lambda: call(ports.web, echoes) in ("v1", "v2"), 15.0)
    got = Counter(call(ports.web, echoes) for _ in range(100))
    assert got == {"v1": 70, "v2": 30}
    assert KP.until(lambda: grpc_conditions(api, "weighted-backends") == ACCEPTED)


def test_grpc_request_header_modifier(emu, start_edge, api, echoes) -> None:
    """GRPCRouteRequestHeaderModifier: set overwrites, add appends, remove removes, as
    the backend sees the call's metadata."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    grpc_services(emu, echoes)
    mods = {"set": [{"name": "X-Header-Set", "value": "set-overwrites-values"}],
            "add": [{"name": "X-Header-Add", "value": "add-appends-values"}],
            "remove": ["X-Header-Remove"]}  # fmt: skip
    emu.create(grpc_route("grpc-request-header-modifier", [
        {"matches": [method("Unary")], "backendRefs": [to("v1")],
         "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": mods}]}]))  # fmt: skip
    start_edge(ports)
    v1 = echoes["v1"]
    assert KP.until(lambda: call(ports.web, echoes) == "v1", 15.0)
    assert seen(v1)["x-header-set"] == "set-overwrites-values"
    assert seen(v1)["x-header-add"] == "add-appends-values"
    sent = {"x-header-set": "old", "x-header-add": "first", "x-header-remove": "gone",
            "some-other-header": "kept"}  # fmt: skip
    assert call(ports.web, echoes, metadata=sent) == "v1"
    last = seen(v1)
    assert last["x-header-set"] == "set-overwrites-values"
    assert "first" in last["x-header-add"] and "add-appends-values" in last["x-header-add"]
    assert "x-header-remove" not in last and last["some-other-header"] == "kept"


def test_grpc_response_header_modifier_and_a_request_mirror(emu, start_edge, api, echoes) -> None:
    """ResponseHeaderModifier edits the reply's initial metadata the client reads.
    GRPCRouteRequestMirror: each call is answered by the backend and copied, over
    HTTP/2, to the mirror's h2c server, which sees the call with its metadata (before,
    edge's mirror spoke HTTP/1.1, which a gRPC server resets: the filter was refused)."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    grpc_services(emu, echoes)
    edits = {"set": [{"name": "x-reply", "value": "edited"}]}
    emu.create(grpc_route("edits", [{"backendRefs": [to("v1")], "filters": [
        {"type": "ResponseHeaderModifier", "responseHeaderModifier": edits}]}]))  # fmt: skip
    emu.create(grpc_route("mirrored", [{"backendRefs": [to("v1")], "filters": [
        {"type": "RequestMirror", "requestMirror": {"backendRef": to("v3")}}]}],
        ["mirror.test"]))  # fmt: skip
    start_edge(ports)
    assert KP.until(lambda: call(ports.web, echoes) == "v1", 15.0)
    with grpc.insecure_channel(
        f"127.0.0.1:{ports.web}", options=[("grpc.default_authority", "grpc.test")]
    ) as channel:
        unary = channel.unary_unary(f"/{SERVICE}/Unary")
        reply, done = unary.with_call(b"hi", timeout=5)
    assert reply == b"echo:hi"
    assert ("x-reply", "edited") in tuple(done.initial_metadata())
    assert KP.until(lambda: grpc_conditions(api, "edits") == ACCEPTED)
    assert KP.until(lambda: grpc_conditions(api, "mirrored") == ACCEPTED)
    v1, v3 = echoes["v1"], echoes["v3"]
    for n in range(3):  # each call answered by v1, its copy seen by v3
        tag = f"mirrored-{n}-{next(_calls)}"
        with grpc.insecure_channel(
            f"127.0.0.1:{ports.web}", options=[("grpc.default_authority", "mirror.test")]
        ) as channel:
            unary = channel.unary_unary(f"/{SERVICE}/Unary")
            reply = unary(b"copy", metadata=(("x-call", tag),), timeout=5)
        assert reply == b"echo:copy"
        assert any(m.get("x-call") == tag for m in v1.metadata)
        assert KP.until(lambda: any(m.get("x-call") == tag for m in v3.metadata), 10.0), n  # noqa: B023


def test_grpc_and_http_listeners_of_one_port_split_by_hostname(
    emu, start_edge, api, echoes, whoami: Whoami
) -> None:
    """A wildcard listener with an HTTPRoute and a named one with a GRPCRoute on one
    port: the named host's calls reach the gRPC backend (the more specific listener),
    the others the HTTP one; both routes are accepted."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([
        {"name": "web", "port": ports.web, "protocol": "HTTP", "hostname": "*.a.test"},
        {"name": "grpc", "port": ports.web, "protocol": "HTTP", "hostname": "g.a.test"},
    ]))  # fmt: skip
    grpc_services(emu, echoes)
    backends(emu, web=whoami)
    web = [{"backendRefs": [{"name": "web", "port": 80}]}]
    emu.create(http_route("web", web, [], parentRefs=[{"name": "gw", "sectionName": "web"}]))
    emu.create(grpc_route("grpc", [{"backendRefs": [to("v1")]}],
                          parentRefs=[{"name": "gw", "sectionName": "grpc"}]))  # fmt: skip
    start_edge(ports)
    assert KP.until(lambda: call(ports.web, echoes, authority="g.a.test") == "v1", 15.0)
    assert who(ports.web, "/", "w.a.test") == "w1"
    assert call(ports.web, echoes, authority="w.a.test") == "UNKNOWN:"  # whoami's JSON
    assert KP.until(lambda: grpc_conditions(api, "grpc") == ACCEPTED)
    assert KP.until(lambda: route_conditions(api, "web") == ACCEPTED)


def test_a_grpc_and_an_http_route_on_one_hostname_and_an_unavailable_backend(
    emu, start_edge, api, echoes, whoami: Whoami
) -> None:
    """On one listener, the older of an HTTPRoute and a GRPCRoute sharing a hostname (or,
    created in the same second, the first by name) is accepted and served, the other
    refused; a backend that cannot be served answers
    UNAVAILABLE (edge's 503) while the route stays Accepted with BackendNotFound."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    grpc_services(emu, echoes)
    backends(emu, web=whoami)
    emu.create(http_route("a-older", [{"backendRefs": [{"name": "web", "port": 80}]}],
                          ["shared.test"]))  # fmt: skip
    newer = grpc_route("b-newer", [{"backendRefs": [to("v1")]}], ["shared.test"])
    emu.create(newer)
    emu.create(grpc_route("missing", [{"backendRefs": [to("gone")]}], ["missing.test"]))
    start_edge(ports)
    assert KP.until(lambda: who(ports.web, "/", "shared.test") == "w1", 15.0)
    assert call(ports.web, echoes, authority="shared.test") == "UNKNOWN:"  # HTTP/1.1 answer
    assert KP.until(lambda: grpc_conditions(api, "b-newer").get("Accepted") == (
        "False", "NotAllowedByListeners"))  # fmt: skip
    assert KP.until(lambda: route_conditions(api, "a-older") == ACCEPTED)
    assert call(ports.web, echoes, authority="missing.test") == "UNAVAILABLE:503"
    assert KP.until(lambda: grpc_conditions(api, "missing") == {
        "Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "BackendNotFound")})  # fmt: skip
    # The older route gone, the GRPCRoute takes the hostname.
    emu.delete("HTTPRoute", "default", "a-older")
    assert KP.until(lambda: call(ports.web, echoes, authority="shared.test") == "v1", 15.0)
    assert KP.until(lambda: grpc_conditions(api, "b-newer") == ACCEPTED)
