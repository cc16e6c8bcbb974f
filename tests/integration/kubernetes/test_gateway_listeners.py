"""Gateway listener status through edge, read back with the kubernetes client.

What each listener says of its route kinds, its certificate references and the routes
attached to it, and how the status follows listeners added and removed. The scenarios
follow the upstream conformance suite (written anew here): GatewayInvalidRouteKind,
GatewaySecretMissingReferenceGrant, GatewaySecretInvalidReferenceGrant,
GatewaySecretReferenceGrantAllInNamespace, GatewaySecretReferenceGrantSpecific,
GatewayInvalidTLSConfiguration, GatewayWithAttachedRoutes and GatewayModifyListeners.
Every wait is bounded.
"""

from __future__ import annotations

import base64
from typing import Any

from tests.fixtures.tls.pki import PKI
from tests.harness import Whoami
from tests.integration.kubernetes import test_gateway_provider as TG
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_gateway_provider import (
    GROUP,
    GW,
    Ports,
    _tls_secret,
    backends,
    conds,
    gateway_class,
    gateway_status,
    http_route,
    listener,
    route_conditions,
    to,
    who,
)

# The Gateway provider tests' fixtures: the emulator, an edge on given ports, the client.
emu, start_edge, api = TG.emu, TG.start_edge, TG.api

HTTP_ROUTE = [{"group": GROUP, "kind": "HTTPRoute"}]
HTTP_KINDS = [*HTTP_ROUTE, {"group": GROUP, "kind": "GRPCRoute"}]  # an HTTP(S) listener's


def gateway(name: str, listeners: list[dict]) -> dict:
    return {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": name, "namespace": "default"},
            "spec": {"gatewayClassName": "edge", "listeners": listeners}}  # fmt: skip


def https(port: int, *refs: dict, name: str = "https", **more: Any) -> dict:
    return {"name": name, "port": port, "protocol": "HTTPS", **more,
            "tls": {"certificateRefs": list(refs)}}  # fmt: skip


def grant(name: str, namespace: str, from_: dict, to_: dict) -> dict:
    return {"apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"from": [from_], "to": [to_]}}  # fmt: skip


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}  # fmt: skip


def said(api, gw: str, name: str) -> tuple[list, int, dict[str, tuple[str, str]]]:
    """A listener's supportedKinds, attachedRoutes and conditions, as written."""
    found = listener(gateway_status(api, gw), name)
    return (
        found.get("supportedKinds"),
        found.get("attachedRoutes"),
        conds(found.get("conditions", [])),
    )


GATEWAY_FROM = {"group": GROUP, "kind": "Gateway", "namespace": "default"}


def test_listeners_say_what_their_route_kinds_and_certificates_resolve_to(
    emu, start_edge, api, tmp_path
) -> None:
    ports = Ports()
    pki = PKI()
    emu.create(gateway_class())
    # GatewayInvalidRouteKind
    emu.create(gateway("only-invalid", [{"name": "http", "port": ports.web, "protocol": "HTTP",
        "allowedRoutes": {"namespaces": {"from": "All"}, "kinds": [{"kind": "InvalidRoute"}]}}]))  # fmt: skip
    emu.create(gateway("some-invalid", [{"name": "http", "port": ports.web, "protocol": "HTTP",
        "allowedRoutes": {"namespaces": {"from": "All"},
                          "kinds": [{"kind": "InvalidRoute"}, {"kind": "HTTPRoute"}]}}]))  # fmt: skip
    # GatewaySecret*ReferenceGrant*: a Secret in another namespace, granted or not
    for ns in ("certs-none", "certs-wrong", "certs-all", "certs-one"):
        emu.create(_tls_secret("certificate", ns, pki, "secure.test"))
    wrong = [
        ("wrong-from-group", {**GATEWAY_FROM, "group": "example.com"}, {"group": "", "kind": "Secret"}),
        ("wrong-from-kind", {**GATEWAY_FROM, "kind": "HTTPRoute"}, {"group": "", "kind": "Secret"}),
        ("wrong-from-ns", {**GATEWAY_FROM, "namespace": "elsewhere"}, {"group": "", "kind": "Secret"}),
        ("wrong-to-kind", GATEWAY_FROM, {"group": "", "kind": "Service", "name": "certificate"}),
        ("wrong-to-name", GATEWAY_FROM, {"group": "", "kind": "Secret", "name": "other"}),
    ]  # fmt: skip
    for name, from_, to_ in wrong:
        emu.create(grant(name, "certs-wrong", from_, to_))
    emu.create(grant("all", "certs-all", GATEWAY_FROM, {"group": "", "kind": "Secret"}))
    emu.create(
        grant(
            "one", "certs-one", GATEWAY_FROM, {"group": "", "kind": "Secret", "name": "certificate"}
        )
    )
    for ns in ("certs-none", "certs-wrong", "certs-all", "certs-one"):
        emu.create(gateway(ns, [https(ports.websecure, {"name": "certificate", "namespace": ns})]))
    # GatewayInvalidTLSConfiguration
    emu.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "malformed", "namespace": "default"},
                "type": "kubernetes.io/tls", "data": {"tls.crt": base64.b64encode(b"not a certificate").decode(),
                                                      "tls.key": base64.b64encode(b"nor a key").decode()}})  # fmt: skip
    bad_refs = {
        "nonexistent": {"name": "nonexistent"},
        "malformed": {"name": "malformed"},
        "bad-group": {"group": "wrong.example.com", "kind": "Secret", "name": "malformed"},
        "bad-kind": {"group": "", "kind": "WrongKind", "name": "malformed"},
    }
    for name, ref in bad_refs.items():
        emu.create(gateway(f"tls-{name}", [https(ports.websecure, ref)]))
    start_edge(ports)

    def listeners() -> dict[str, tuple]:
        return {
            "only-invalid": said(api, "only-invalid", "http"),
            "some-invalid": said(api, "some-invalid", "http"),
            **{ns: said(api, ns, "https") for ns in ("certs-none", "certs-wrong", "certs-all", "certs-one")},
            **{f"tls-{n}": said(api, f"tls-{n}", "https") for n in bad_refs},
        }  # fmt: skip

    def refused(reason: str) -> tuple:
        return (HTTP_KINDS, 0, {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", reason),
                                "Conflicted": ("False", "NoConflicts"), "Programmed": ("False", "Invalid")})  # fmt: skip

    served = {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs"),
              "Conflicted": ("False", "NoConflicts"), "Programmed": ("True", "Programmed")}  # fmt: skip
    invalid_kinds = {**served, "ResolvedRefs": ("False", "InvalidRouteKinds")}
    expected = {
        "only-invalid": ([], 0, invalid_kinds),
        "some-invalid": (HTTP_ROUTE, 0, invalid_kinds),
        "certs-none": refused("RefNotPermitted"),
        "certs-wrong": refused("RefNotPermitted"),
        "certs-all": (HTTP_KINDS, 0, served),
        "certs-one": (HTTP_KINDS, 0, served),
        **{f"tls-{n}": refused("InvalidCertificateRef") for n in bad_refs},
    }
    assert KP.until(lambda: listeners() == expected, 15.0), listeners()


def test_attached_routes_count_what_each_listener_accepts(
    emu, start_edge, api, whoami: Whoami
) -> None:
    """GatewayWithAttachedRoutes: a route counts on the listeners it attaches to (by
    namespace selector, hostname and sectionName), also on one whose certificate does
    not resolve, where it is not served."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(namespace("infra"))
    backends(emu, "infra", v1=whoami)
    selector = {"kinds": [{"kind": "HTTPRoute"}], "namespaces": {"from": "Selector",
                "selector": {"matchLabels": {"kubernetes.io/metadata.name": "infra"}}}}  # fmt: skip
    emu.create(gateway("one", [{"name": "http", "port": ports.web, "protocol": "HTTP",
                                "allowedRoutes": selector}]))  # fmt: skip
    emu.create(gateway("two", [{"name": "http", "port": ports.web, "protocol": "HTTP",
                                "hostname": "foo.example.com", "allowedRoutes": selector}]))  # fmt: skip
    emu.create(gateway("unresolved", [https(ports.websecure, {"name": "does-not-exist"},
                                            name="tls", allowedRoutes=selector)]))  # fmt: skip
    emu.create(gateway("by-section", [
        {"name": "http-unattached", "port": ports.tcp, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "http", "port": ports.web, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
    ]))  # fmt: skip

    def attach(name: str, gw: str, hostnames: list[str], service: str = "v1", **ref: Any) -> None:
        emu.create(http_route(name, [{"backendRefs": [to(service)]}], hostnames, "infra",
                              parentRefs=[{"name": gw, "namespace": "default", **ref}]))  # fmt: skip

    attach("route-1", "one", ["one.test"])
    attach("route-2", "two", [])
    attach("route-3", "two", [])
    attach("route-mismatch", "two", ["not-accepted.test.com"])
    attach("route-4", "unresolved", [], "does-not-exist", sectionName="tls")
    attach("route-section", "by-section", ["section.test"], sectionName="http")
    start_edge(ports)

    def counts() -> dict[str, int]:
        return {
            "one": said(api, "one", "http")[1],
            "two": said(api, "two", "http")[1],
            "unresolved": said(api, "unresolved", "tls")[1],
            "by-section/http": said(api, "by-section", "http")[1],
            "by-section/http-unattached": said(api, "by-section", "http-unattached")[1],
        }

    expected = {
        "one": 1,
        "two": 2,
        "unresolved": 1,
        "by-section/http": 1,
        "by-section/http-unattached": 0,
    }
    assert KP.until(lambda: counts() == expected, 15.0), counts()
    assert said(api, "unresolved", "tls")[2]["Programmed"] == ("False", "Invalid")
    assert KP.until(
        lambda: (
            route_conditions(api, "route-4", "infra")
            == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "BackendNotFound")}
        )
    )
    assert KP.until(
        lambda: (
            route_conditions(api, "route-mismatch", "infra").get("Accepted")
            == ("False", "NoMatchingListenerHostname")
        )
    )
    assert KP.until(lambda: who(ports.web, "/", "section.test") == "w1")
    assert who(ports.tcp, "/", "section.test") == "404"  # not attached to http-unattached


def test_listeners_added_and_removed_are_followed(emu, start_edge, api, whoami: Whoami) -> None:
    """GatewayModifyListeners: a listener added to a Gateway gets its status, and the
    routes attached to the Gateway count on it and are served there; one removed
    leaves the status and stops serving."""
    ports = Ports()
    pki = PKI()
    emu.create(gateway_class())
    emu.create(_tls_secret("certificate", "default", pki, "secure.test"))
    backends(emu, v1=whoami)
    secure = https(ports.websecure, {"name": "certificate"}, hostname="secure.test",
                   allowedRoutes={"namespaces": {"from": "All"}})  # fmt: skip
    emu.create(gateway("gw", [secure]))
    emu.create(http_route("route", [{"backendRefs": [to("v1")]}], []))
    start_edge(ports)

    def names() -> list[str]:
        return [li["name"] for li in gateway_status(api, "gw").get("listeners", [])]

    assert KP.until(lambda: names() == ["https"] and said(api, "gw", "https")[1] == 1)
    gw = emu.get("Gateway", "default", "gw")
    plain = {"name": "http", "port": ports.web, "protocol": "HTTP",
             "allowedRoutes": {"namespaces": {"from": "All"}}}  # fmt: skip
    gw["spec"]["listeners"].append(plain)
    emu.update(gw)
    assert KP.until(lambda: names() == ["https", "http"], 15.0), names()
    assert KP.until(lambda: said(api, "gw", "http")[1] == 1)
    assert said(api, "gw", "http")[2]["Programmed"] == ("True", "Programmed")
    assert KP.until(lambda: who(ports.web, "/", "any.test") == "w1")
    status = gateway_status(api, "gw")
    assert all(c["observedGeneration"] == 2 for c in status["conditions"])

    gw = emu.get("Gateway", "default", "gw")
    gw["spec"]["listeners"] = [plain]
    emu.update(gw)
    assert KP.until(lambda: names() == ["http"], 15.0), names()
    assert said(api, "gw", "http")[1] == 1
