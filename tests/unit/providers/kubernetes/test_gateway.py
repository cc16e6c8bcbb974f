"""The Gateway API conversion (:mod:`edge.providers.kubernetes.gateway`) on fixtures:
objects decoded from JSON as the reflector decodes them, converted, and the result
validated by edge's own merge and ``build_runtime``; each rule of the spec edge
implements, and each refusal with the reason the spec names."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest

from edge.config.merge import merge
from edge.config.runtime import RuntimeConfig, build_runtime
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.gateway import (
    CONTROLLER_NAME,
    GROUP,
    PROVIDER,
    Conversion,
    CustomResourceDefinition,
    EntryPointPort,
    GatewayOptions,
    GatewayState,
    GRPCRoute,
    GRPCRouteMatch,
    convert,
    grpc_match_rule,
    intersect_hostnames,
    match_rule,
    update_endpoints,
)
from edge.rules.request import RequestView
from edge.rules.rule import compile_rule
from tests.fixtures.tls.pki import PKI

GW = f"{GROUP}/v1"
ENTRY_POINTS = (
    EntryPointPort("web", 80),
    EntryPointPort("websecure", 443),
    EntryPointPort("dns", 53, True),
)
OPTIONS = GatewayOptions(entry_points=ENTRY_POINTS)
MODELS = {
    **objects.GATEWAY_KINDS,
    "Service": objects.Service,
    "EndpointSlice": objects.EndpointSlice,
    "Secret": objects.Secret,
    "CustomResourceDefinition": CustomResourceDefinition,
    "GRPCRoute": GRPCRoute,
}


# --- fixtures ------------------------------------------------------------------------------


def gateway_class(name: str = "edge", controller: str = CONTROLLER_NAME) -> dict:
    return {"kind": "GatewayClass", "metadata": {"name": name, "generation": 1},
            "spec": {"controllerName": controller}}  # fmt: skip


def gateway(
    listeners: list[dict], name: str = "gw", namespace: str = "default", cls: str = "edge"
) -> dict:
    return {"kind": "Gateway", "metadata": {"name": name, "namespace": namespace, "generation": 4},
            "spec": {"gatewayClassName": cls, "listeners": listeners}}  # fmt: skip


def listener(name: str = "http", port: int = 80, protocol: str = "HTTP", **more: Any) -> dict:
    return {"name": name, "port": port, "protocol": protocol, **more}


def route(rules: list[dict], name: str = "r", namespace: str = "default", **spec: Any) -> dict:
    spec.setdefault("parentRefs", [{"name": "gw", "namespace": "default"}])
    return {"kind": "HTTPRoute", "metadata": {"name": name, "namespace": namespace, "generation": 7},
            "spec": {**spec, "rules": rules}}  # fmt: skip


def backend(name: str = "web", port: int = 80, **more: Any) -> dict:
    return {"name": name, "port": port, **more}


def service(name: str = "web", namespace: str = "default", port: int = 80) -> list[dict]:
    return [
        {"kind": "Service", "metadata": {"name": name, "namespace": namespace},
         "spec": {"ports": [{"name": "http", "port": port}]}},
        {"kind": "EndpointSlice", "metadata": {"name": f"{name}-1", "namespace": namespace,
                                               "labels": {"kubernetes.io/service-name": name}},
         "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
         "endpoints": [{"addresses": ["10.0.0.1"]}]},
    ]  # fmt: skip


def state(*docs: dict | list[dict]) -> GatewayState:
    tables: dict[str, dict] = {}
    flat: list[dict] = []
    for d in docs:
        flat.extend(d if isinstance(d, list) else [d])
    for doc in flat:
        obj = msgspec.json.decode(msgspec.json.encode(doc), type=MODELS[doc["kind"]])
        tables.setdefault(doc["kind"], {})[obj.metadata.key] = obj
    return GatewayState.from_snapshot(tables)


def run(*docs: dict | list[dict], options: GatewayOptions = OPTIONS) -> Conversion:
    return convert(state(*docs), options)


def validate(c: Conversion) -> RuntimeConfig:
    return build_runtime(
        merge({PROVIDER: c.configuration}), {"web": "tcp", "websecure": "tcp", "dns": "udp"}
    )


def status(c: Conversion, kind: str, key: tuple[str, str]) -> dict:
    found = [s for s in c.statuses if s.kind == kind and s.key == key]
    assert len(found) == 1, c.statuses
    return found[0].status


def conditions(conds: list[dict]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in conds}


def parent(c: Conversion, key: tuple[str, str] = ("default", "r")) -> dict[str, tuple[str, str]]:
    (found,) = [s for s in c.statuses if s.kind.endswith("Route") and s.key == key]
    (entry,) = found.status["parents"]
    assert entry["controllerName"] == CONTROLLER_NAME
    return conditions(entry["conditions"])


def listener_status(c: Conversion, name: str, key: tuple[str, str] = ("default", "gw")) -> dict:
    (found,) = [li for li in status(c, "Gateway", key)["listeners"] if li["name"] == name]
    return found


BASE = (gateway_class(), gateway([listener()]), service())


# --- classes, gateways, listeners ------------------------------------------------------------


def test_a_class_of_another_controller_and_its_gateways_are_left_alone() -> None:
    c = run(
        gateway_class(controller="example.com/other"),
        gateway([listener()]),
        route([{"backendRefs": [backend()]}]),
        service(),
    )
    assert c.statuses == []
    assert c.configuration.http is not None and c.configuration.http.routers == {}


def test_the_class_is_accepted_with_its_generation() -> None:
    c = run(*BASE)
    (cond,) = status(c, "GatewayClass", ("", "edge"))["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
        "Accepted",
        "True",
        "Accepted",
        1,
    )


def crd(plural: str, version: str | None, group: str = GROUP) -> dict:
    annotations = {"gateway.networking.k8s.io/bundle-version": version} if version else {}
    return {"kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}", "annotations": annotations},
            "spec": {"group": group}}  # fmt: skip


@pytest.mark.parametrize(
    ("crds", "supported", "named"),
    [
        ([crd("gateways", "v1.1.0"), crd("httproutes", "v1.6.1")], True, []),
        ([crd("gateways", "v1.0.0")], False, ["gateways.gateway.networking.k8s.io (v1.0.0)"]),
        ([crd("gateways", "v1.6.0-rc.1"), crd("widgets", None, "example.com")], True, []),
        ([crd("gateways", "v1.6.1"), crd("httproutes", "v1.7.0")], False,
         ["httproutes.gateway.networking.k8s.io (v1.7.0)"]),
        ([crd("gateways", None)], False, ["gateways.gateway.networking.k8s.io (no bundle-version)"]),
        ([crd("xlistenersets", "v2.0.0", "gateway.networking.x-k8s.io")], False,
         ["xlistenersets.gateway.networking.x-k8s.io (v2.0.0)"]),
        ([], True, []),
    ],
    ids=["known", "before-grpcroute", "rc-and-others-crd", "newer", "no-annotation",
         "experimental-group", "none"],
)  # fmt: skip
def test_the_class_says_whether_edge_knows_the_crds_release(
    crds: list[dict], supported: bool, named: list[str]
) -> None:
    c = run(*BASE, *crds, crd("x", None, "unused.example.com"))
    conds = {x["type"]: x for x in status(c, "GatewayClass", ("", "edge"))["conditions"]}
    assert conds["Accepted"]["status"] == "True"  # best effort either way
    found = conds["SupportedVersion"]
    assert found["status"] == ("True" if supported else "False")
    assert found["reason"] == ("SupportedVersion" if supported else "UnsupportedVersion")
    assert all(n in found["message"] for n in named)
    assert run(*BASE) == run(*BASE) and "SupportedVersion" not in str(
        status(run(*BASE), "GatewayClass", ("", "edge"))
    )  # CRDs not known (not listed): no SupportedVersion


def test_listeners_bind_to_entry_points_by_port_and_one_without_is_port_unavailable() -> None:
    c = run(
        gateway_class(),
        gateway([listener(), listener("other", 8081)]),
        route([{"backendRefs": [backend()]}]),
        service(),
    )
    ok = listener_status(c, "http")
    assert conditions(ok["conditions"]) == {
        "Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs"),
        "Programmed": ("True", "Programmed"), "Conflicted": ("False", "NoConflicts"),
    }  # fmt: skip
    assert ok["attachedRoutes"] == 1 and ok["supportedKinds"] == [
        {"group": GROUP, "kind": "HTTPRoute"},
        {"group": GROUP, "kind": "GRPCRoute"},
    ]
    bad = listener_status(c, "other")
    assert conditions(bad["conditions"])["Accepted"] == ("False", "PortUnavailable")
    assert conditions(bad["conditions"])["Programmed"] == ("False", "Invalid")
    assert "port 8081" in next(x["message"] for x in bad["conditions"] if x["type"] == "Accepted")
    gw = conditions(status(c, "Gateway", ("default", "gw"))["conditions"])
    assert gw == {"Accepted": ("True", "ListenersNotValid"), "Programmed": ("True", "Programmed")}
    (router,) = c.configuration.http.routers.values()
    assert router.entry_points == ["web"]
    assert any("8081" in str(p) for p in c.problems)


def test_a_gateway_with_no_valid_listener_is_not_accepted_nor_programmed() -> None:
    c = run(gateway_class(), gateway([listener(port=9)]))
    gw = conditions(status(c, "Gateway", ("default", "gw"))["conditions"])
    assert gw == {"Accepted": ("False", "ListenersNotValid"), "Programmed": ("False", "Invalid")}


@pytest.mark.parametrize("protocol", ["TLS", "TCP", "UDP", "SCTP"])
def test_l4_protocols_need_the_experimental_channel(protocol: str) -> None:
    c = run(gateway_class(), gateway([listener(protocol=protocol)]))
    assert conditions(listener_status(c, "http")["conditions"])["Accepted"] == (
        "False",
        "UnsupportedProtocol",
    )


def test_listeners_sharing_port_protocol_and_hostname_conflict() -> None:
    c = run(
        gateway_class(),
        gateway(
            [
                listener("a", hostname="a.test"),
                listener("b", hostname="a.test"),
                listener("c", hostname="c.test"),
            ]
        ),
    )
    assert conditions(listener_status(c, "a")["conditions"])["Conflicted"] == (
        "True",
        "HostnameConflict",
    )
    assert conditions(listener_status(c, "b")["conditions"])["Conflicted"] == (
        "True",
        "HostnameConflict",
    )
    assert conditions(listener_status(c, "c")["conditions"])["Conflicted"] == (
        "False",
        "NoConflicts",
    )


def test_allowed_route_kinds_not_carried_are_invalid_route_kinds() -> None:
    li = listener(allowedRoutes={"kinds": [{"kind": "HTTPRoute"}, {"kind": "TCPRoute"}]})
    c = run(gateway_class(), gateway([li]))
    found = listener_status(c, "http")
    assert conditions(found["conditions"])["ResolvedRefs"] == ("False", "InvalidRouteKinds")
    assert found["supportedKinds"] == [{"group": GROUP, "kind": "HTTPRoute"}]


def test_allowed_route_kinds_all_invalid_leave_no_supported_kinds() -> None:
    """GatewayInvalidRouteKind: a listener allowing only kinds it cannot carry has no
    supportedKinds, ResolvedRefs InvalidRouteKinds, and no route attaches to it."""
    li = listener(
        allowedRoutes={"kinds": [{"kind": "InvalidRoute"}], "namespaces": {"from": "All"}}
    )
    c = run(gateway_class(), gateway([li]), service(), route([{"backendRefs": [backend()]}]))
    found = listener_status(c, "http")
    assert found["supportedKinds"] == [] and found["attachedRoutes"] == 0
    assert conditions(found["conditions"])["ResolvedRefs"] == ("False", "InvalidRouteKinds")
    assert parent(c)["Accepted"] == ("False", "NotAllowedByListeners")
    assert c.configuration.http.routers == {}


# --- HTTPS listeners ---------------------------------------------------------------------------

PKI_ = PKI()


def secret(name: str = "cert", namespace: str = "default") -> dict:
    pair = PKI_.issue("s.test")
    return {"kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "type": "kubernetes.io/tls",
            "data": {"tls.crt": base64.b64encode(pair.cert_pem.encode()).decode(),
                     "tls.key": base64.b64encode(pair.key_pem.encode()).decode()}}  # fmt: skip


def https(ref: dict) -> dict:
    return listener("https", 443, "HTTPS", tls={"mode": "Terminate", "certificateRefs": [ref]})


def test_an_https_listener_terminates_with_its_secret() -> None:
    c = run(
        gateway_class(),
        gateway([https({"name": "cert"})]),
        secret(),
        service(),
        route([{"backendRefs": [backend()]}]),
    )
    assert conditions(listener_status(c, "https")["conditions"])["Programmed"] == (
        "True",
        "Programmed",
    )
    assert c.configuration.tls is not None and len(c.configuration.tls.certificates) == 1
    (router,) = c.configuration.http.routers.values()
    assert router.tls is not None and router.entry_points == ["websecure"]
    assert (
        validate(c).http_routers[f"{next(iter(c.configuration.http.routers))}@{PROVIDER}"].status
        == "enabled"
    )


@pytest.mark.parametrize(
    ("ref", "extra", "reason"),
    [
        ({"name": "missing"}, [], "InvalidCertificateRef"),
        ({"name": "cert", "kind": "ConfigMap", "group": ""}, [], "InvalidCertificateRef"),
        ({"name": "cert", "namespace": "certs"}, [], "RefNotPermitted"),
    ],
    ids=["missing", "not-a-secret", "other-namespace"],
)
def test_certificate_refs_refused(ref: dict, extra: list, reason: str) -> None:
    c = run(gateway_class(), gateway([https(ref)]), secret(), secret(namespace="certs"), *extra)
    conds = conditions(listener_status(c, "https")["conditions"])
    assert conds["ResolvedRefs"] == ("False", reason)
    assert conds["Programmed"] == ("False", "Invalid")
    assert c.configuration.tls is None


def test_a_listener_with_unresolved_certificates_counts_routes_but_serves_none() -> None:
    """GatewayWithAttachedRoutes: routes attach to a listener whose certificateRefs do
    not resolve (counted in attachedRoutes, their own refs judged), but it is not
    programmed: no router, no certificate."""
    c = run(
        gateway_class(),
        gateway([https({"name": "does-not-exist"})]),
        route([{"backendRefs": [backend("does-not-exist")]}], parentRefs=[
            {"name": "gw", "namespace": "default", "sectionName": "https"}]),
    )  # fmt: skip
    found = listener_status(c, "https")
    conds = conditions(found["conditions"])
    assert found["attachedRoutes"] == 1
    assert conds["Accepted"] == ("True", "Accepted")
    assert conds["ResolvedRefs"] == ("False", "InvalidCertificateRef")
    assert conds["Programmed"] == ("False", "Invalid")
    assert parent(c) == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("False", "BackendNotFound"),
    }
    assert c.configuration.http.routers == {} and c.configuration.tls is None
    gw = conditions(status(c, "Gateway", ("default", "gw"))["conditions"])
    assert gw == {"Accepted": ("True", "Accepted"), "Programmed": ("False", "Invalid")}


def test_a_reference_grant_lets_a_gateway_use_another_namespaces_secret() -> None:
    grant = {"kind": "ReferenceGrant", "metadata": {"name": "g", "namespace": "certs"},
             "spec": {"from": [{"group": GROUP, "kind": "Gateway", "namespace": "default"}],
                      "to": [{"group": "", "kind": "Secret"}]}}  # fmt: skip
    c = run(
        gateway_class(),
        gateway([https({"name": "cert", "namespace": "certs"})]),
        secret(namespace="certs"),
        grant,
    )
    assert conditions(listener_status(c, "https")["conditions"])["ResolvedRefs"] == (
        "True",
        "ResolvedRefs",
    )
    assert c.configuration.tls is not None


# --- HTTPRoute: rules and priorities ---------------------------------------------------------------


def m(path: str | None = None, kind: str = "PathPrefix", **more: Any) -> objects.HTTPRouteMatch:
    doc = dict(more)
    if path is not None:
        doc["path"] = {"type": kind, "value": path}
    return msgspec.convert(doc, objects.HTTPRouteMatch)


def test_match_rules_in_edges_rule_language() -> None:
    assert match_rule([], m())[0] == 'PathPrefix("/")'
    assert match_rule([], m("/foo"))[0] == '(Path("/foo") || PathPrefix("/foo/"))'
    assert match_rule([], m("/foo/"))[0] == '(Path("/foo") || PathPrefix("/foo/"))'
    assert match_rule([], m("/foo", "Exact"))[0] == 'Path("/foo")'
    assert match_rule([], m("/f.*", "RegularExpression"))[0] == 'PathRegexp("/f.*")'
    rule, _ = match_rule(
        ["a.test", "*.b.test"],
        m("/", method="GET", headers=[{"name": "X", "value": 'v"1'}],
          queryParams=[{"name": "q", "value": "^a", "type": "RegularExpression"}]),
    )  # fmt: skip
    assert rule == (
        '(Host("a.test") || HostRegexp("^[a-z0-9-\\\\.]+\\\\.b\\\\.test$")) && PathPrefix("/") '
        '&& Method("GET") && Header("X","v\\"1") && QueryRegexp("q","^a")'
    )


def test_precedence_follows_the_spec() -> None:
    """Each criterion outranks all those after it: hostname length, Exact path, path
    characters, method, header count, query parameter count."""
    order = [
        (["long.a.test"], m("/")),
        (["a.test"], m("/a", "Exact")),
        (["a.test"], m("/abc")),
        (["a.test"], m("/ab", method="GET")),
        (["a.test"], m("/ab", headers=[{"name": "h", "value": "v"}] * 3)),
        (
            ["a.test"],
            m(
                "/ab",
                headers=[{"name": "h", "value": "v"}],
                queryParams=[{"name": "q", "value": "v"}] * 16,
            ),
        ),
        (["a.test"], m("/ab", queryParams=[{"name": "q", "value": "v"}])),
        (["a.test"], m("/ab")),
        ([], m("/a/very/long/path/indeed", method="GET")),
    ]
    priorities = [match_rule(h, x)[1] for h, x in order]
    assert priorities == sorted(priorities, reverse=True)
    assert len(set(priorities)) == len(priorities)


def test_rules_become_routers_on_the_listener_entry_point_and_validate() -> None:
    rules = [
        {
            "matches": [{"path": {"type": "Exact", "value": "/x"}}, {"path": {"value": "/y"}}],
            "backendRefs": [backend()],
        },
        {"backendRefs": [backend()]},
    ]
    c = run(*BASE, route(rules, hostnames=["a.test"]))
    routers = c.configuration.http.routers
    assert len(routers) == 3
    assert all(n.startswith("httproute-default-r-gw-default-gw-ep-web-") for n in routers)
    by_rule = {r.rule: r for r in routers.values()}
    assert (
        by_rule['Host("a.test") && Path("/x")'].priority
        > by_rule['Host("a.test") && (Path("/y") || PathPrefix("/y/"))'].priority
        > by_rule['Host("a.test") && PathPrefix("/")'].priority
    )
    rt = validate(c)
    assert all(i.status == "enabled" for i in rt.http_routers.values()), {
        n: i.errors for n, i in rt.http_routers.items()
    }
    lb = c.configuration.http.services[
        next(n for n in c.configuration.http.services if n.endswith("-svc-default-web-0"))
    ]
    assert [s.url for s in lb.load_balancer.servers] == ["http://10.0.0.1:8080"]
    assert parent(c) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}


@pytest.mark.parametrize(
    ("listener_host", "route_hosts", "expected"),
    [
        (None, [], []),
        (None, ["a.test"], ["a.test"]),
        ("a.test", [], ["a.test"]),
        ("a.test", ["a.test", "b.test"], ["a.test"]),
        ("*.test", ["a.test", "x.y.test", "test"], ["a.test", "x.y.test"]),
        ("a.test", ["*.test"], ["a.test"]),
        ("*.test", ["*.a.test"], ["*.a.test"]),
        ("*.a.test", ["*.test"], ["*.a.test"]),
        ("a.test", ["b.test"], None),
    ],
)
def test_hostnames_intersect_with_the_listener(listener_host, route_hosts, expected) -> None:
    assert intersect_hostnames(listener_host, route_hosts) == expected


def test_no_matching_listener_hostname() -> None:
    c = run(
        gateway_class(),
        gateway([listener(hostname="a.test")]),
        service(),
        route([{"backendRefs": [backend()]}], hostnames=["b.test"]),
    )
    assert parent(c)["Accepted"] == ("False", "NoMatchingListenerHostname")
    assert c.configuration.http.routers == {}
    assert listener_status(c, "http")["attachedRoutes"] == 0


# --- parentRefs and allowedRoutes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "attached"),
    [
        ({"name": "gw", "sectionName": "http"}, True),
        ({"name": "gw", "sectionName": "nope"}, False),
        ({"name": "gw", "port": 80}, True),
        ({"name": "gw", "port": 81}, False),
    ],
)
def test_parent_refs_by_section_name_and_port(ref: dict, attached: bool) -> None:
    c = run(*BASE, route([{"backendRefs": [backend()]}], parentRefs=[ref]))
    assert parent(c)["Accepted"] == (
        ("True", "Accepted") if attached else ("False", "NoMatchingParent")
    )
    assert bool(c.configuration.http.routers) == attached


def test_a_parent_ref_to_a_gateway_not_edges_gets_no_status() -> None:
    c = run(*BASE, route([{"backendRefs": [backend()]}], parentRefs=[{"name": "elsewhere"}]))
    assert [s for s in c.statuses if s.kind == "HTTPRoute"] == []


NS = [{"kind": "Namespace", "metadata": {"name": "apps", "labels": {"team": "a"}}},
      {"kind": "Namespace", "metadata": {"name": "other", "labels": {"team": "b"}}}]  # fmt: skip


@pytest.mark.parametrize(
    ("namespaces", "route_ns", "accepted"),
    [
        (None, "default", True),
        (None, "apps", False),
        ({"from": "Same"}, "apps", False),
        ({"from": "All"}, "apps", True),
        ({"from": "Selector", "selector": {"matchLabels": {"team": "a"}}}, "apps", True),
        ({"from": "Selector", "selector": {"matchLabels": {"team": "a"}}}, "other", False),
        (
            {
                "from": "Selector",
                "selector": {
                    "matchExpressions": [{"key": "team", "operator": "In", "values": ["b"]}]
                },
            },
            "other",
            True,
        ),
    ],
)
def test_allowed_routes_namespaces(namespaces: dict | None, route_ns: str, accepted: bool) -> None:
    li = listener(allowedRoutes={"namespaces": namespaces}) if namespaces else listener()
    c = run(
        gateway_class(),
        gateway([li]),
        service(namespace=route_ns),
        route([{"backendRefs": [backend()]}], namespace=route_ns),
        NS,
    )
    expected = ("True", "Accepted") if accepted else ("False", "NotAllowedByListeners")
    assert parent(c, (route_ns, "r"))["Accepted"] == expected


def test_allowed_route_kinds_without_httproute_refuse_it() -> None:
    li = listener(allowedRoutes={"kinds": [{"kind": "GRPCRoute"}]})
    c = run(gateway_class(), gateway([li]), service(), route([{"backendRefs": [backend()]}]))
    assert parent(c)["Accepted"] == ("False", "NotAllowedByListeners")


# --- backends ----------------------------------------------------------------------------------------


def _services(c: Conversion) -> dict:
    return c.configuration.http.services


def test_weighted_backends_and_a_missing_one_gets_500_for_its_share() -> None:
    c = run(
        *BASE,
        service("two"),
        route(
            [
                {
                    "backendRefs": [
                        backend(weight=3),
                        backend("two", weight=0),
                        backend("gone", weight=1),
                    ]
                }
            ]
        ),
    )
    (wrr,) = [s for n, s in _services(c).items() if n.endswith("-wrr")]
    assert [(x.name.rsplit("-svc-", 1)[1], x.weight, x.status) for x in wrr.weighted.services] == [
        ("default-web-0", 3, None), ("default-two-1", 0, None), ("default-gone-2", 1, 500)]  # fmt: skip
    assert not any(n.endswith("-svc-default-gone-2") for n in _services(c))  # an answer, no service
    assert parent(c) == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("False", "BackendNotFound"),
    }
    rt = validate(c)
    assert all(i.status == "enabled" for i in rt.http_routers.values())


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        (backend(kind="Pod"), "InvalidKind"),
        (backend(group="example.com", kind="Thing"), "InvalidKind"),
        (backend(namespace="apps"), "RefNotPermitted"),
        (backend(port=0), "BackendNotFound"),
        (backend(port=81), "BackendNotFound"),
    ],
)
def test_backend_refs_refused(ref: dict, reason: str) -> None:
    c = run(*BASE, service(namespace="apps"), route([{"backendRefs": [ref]}]))
    assert parent(c)["ResolvedRefs"] == ("False", reason)
    (wrr,) = _services(c).values()  # nothing but the rule's weighted service
    assert [m.status for m in wrr.weighted.services] == [500]


def test_a_rule_without_backend_refs_answers_500() -> None:
    c = run(*BASE, route([{"matches": [{"path": {"type": "PathPrefix", "value": "/x"}}]}]))
    (wrr,) = _services(c).values()
    assert [(m.weight, m.status) for m in wrr.weighted.services] == [(1, 500)]
    assert parent(c) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    assert all(i.status == "enabled" for i in validate(c).http_routers.values())


def test_a_reference_grant_allows_a_cross_namespace_backend() -> None:
    grant = {"kind": "ReferenceGrant", "metadata": {"name": "g", "namespace": "apps"},
             "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "default"}],
                      "to": [{"group": "", "kind": "Service", "name": "web"}]}}  # fmt: skip
    c = run(
        *BASE,
        service(namespace="apps"),
        grant,
        route([{"backendRefs": [backend(namespace="apps")]}]),
    )
    assert parent(c)["ResolvedRefs"] == ("True", "ResolvedRefs")
    assert any(
        n.endswith("-svc-apps-web-0") and s.load_balancer.servers for n, s in _services(c).items()
    )


# --- filters ------------------------------------------------------------------------------------------


def _middlewares(c: Conversion) -> dict:
    (router,) = c.configuration.http.routers.values()
    return {
        name.rsplit("-", 2)[-2] + "-" + name.rsplit("-", 1)[-1]: c.configuration.http.middlewares[
            name
        ]
        for name in router.middlewares
    }


def test_header_modifiers_become_headers_middlewares() -> None:
    f = [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "X-S", "value": "s"}], "add": [{"name": "X-A", "value": "a"}], "remove": ["X-R"]}},
         {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"set": [{"name": "X-T", "value": "t"}]}}]  # fmt: skip
    c = run(*BASE, route([{"filters": f, "backendRefs": [backend()]}]))
    mws = list(c.configuration.http.middlewares.values())
    assert mws[0].headers.custom_request_headers == {"X-S": "s", "X-R": ""}
    assert mws[0].headers.append_request_headers == {"X-A": "a"}
    assert mws[1].headers.custom_response_headers == {"X-T": "t"}
    assert all(i.status == "enabled" for i in validate(c).http_middlewares.values())


@pytest.mark.parametrize(
    ("redirect", "regex_tail", "replacement", "permanent"),
    [
        ({"scheme": "https"}, "(.*)$", "https://${2}${4}", False),
        ({"hostname": "b.test", "statusCode": 301}, "(.*)$", "${1}://b.test${3}${4}", True),
        ({"port": 8443}, "(.*)$", "${1}://${2}:8443${4}", False),
        ({"scheme": "https", "port": 443}, "(.*)$", "https://${2}${4}", False),
        (
            {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/new"}},
            "[^?]*(\\?.*)?$",
            "${1}://${2}${3}/new${4}",
            False,
        ),
        (
            {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}},
            "/old(/[^?]*)?(\\?.*)?$",
            "${1}://${2}${3}/new${4}${5}",
            False,
        ),
    ],
)
def test_request_redirect_becomes_a_redirect_regex(
    redirect: dict, regex_tail: str, replacement: str, permanent: bool
) -> None:
    f = [{"type": "RequestRedirect", "requestRedirect": redirect}]
    c = run(*BASE, route([{"matches": [{"path": {"value": "/old"}}], "filters": f}]))
    (mw,) = c.configuration.http.middlewares.values()
    assert mw.redirect_regex.regex.endswith(regex_tail)
    assert (mw.redirect_regex.replacement, mw.redirect_regex.permanent) == (replacement, permanent)
    assert all(i.status == "enabled" for i in validate(c).http_middlewares.values())


def test_url_rewrite_becomes_host_and_path_middlewares() -> None:
    f = [
        {
            "type": "URLRewrite",
            "urlRewrite": {
                "hostname": "h.test",
                "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"},
            },
        }
    ]
    c = run(
        *BASE,
        route(
            [{"matches": [{"path": {"value": "/p/"}}], "filters": f, "backendRefs": [backend()]}]
        ),
    )
    host, path = c.configuration.http.middlewares.values()
    assert host.headers.custom_request_headers == {"Host": "h.test"}
    assert (path.replace_path_regex.regex, path.replace_path_regex.replacement) == (
        "^/p/?(.*)$",
        "/${1}",
    )
    f[0]["urlRewrite"] = {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/full"}}
    c = run(*BASE, route([{"filters": f, "backendRefs": [backend()]}]))
    (path,) = c.configuration.http.middlewares.values()
    assert path.replace_path.path == "/full"
    assert all(i.status == "enabled" for i in validate(c).http_middlewares.values())


@pytest.mark.parametrize(
    "rule",
    [
        {"filters": [{"type": "RequestMirror", "requestMirror": {}}]},
        {"filters": [{"type": "ExtensionRef", "extensionRef": {"name": "x"}}]},
        {"timeouts": {"request": "soon"}},
        {"filters": [{"type": "RequestRedirect", "requestRedirect": {"path": {"type": "X"}}}]},
    ],
    ids=["mirror-without-backend", "extension", "timeouts-not-durations", "redirect-path-type"],
)
def test_what_edge_does_not_implement_is_unsupported_value_and_answers_503(rule: dict) -> None:
    c = run(*BASE, route([{**rule, "backendRefs": [backend()]}]))
    assert parent(c)["Accepted"] == ("False", "UnsupportedValue")
    (router,) = c.configuration.http.routers.values()
    assert (
        router.middlewares == []
        and c.configuration.http.services[router.service].load_balancer.servers == []
    )
    assert c.problems


@pytest.mark.parametrize(
    ("timeouts", "whole", "each_try"),
    [
        ({"request": "10s", "backendRequest": "500ms"}, 10.0, 0.5),
        ({"request": "1h30m"}, 5400.0, 0.0),
        ({"backendRequest": "2s"}, 0.0, 2.0),
        ({"request": "0s"}, 0.0, 0.0),  # the spec's "no bound"
    ],
)
def test_rule_timeouts_are_its_routers(timeouts: dict, whole: float, each_try: float) -> None:
    c = run(*BASE, route([{"timeouts": timeouts, "backendRefs": [backend()]}]))
    assert parent(c) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    (router,) = c.configuration.http.routers.values()
    assert router.timeouts is not None
    assert (router.timeouts.request, router.timeouts.backend_request) == (whole, each_try)
    assert all(i.status == "enabled" for i in validate(c).http_routers.values())


def test_namespaces_option_hides_other_namespaces() -> None:
    c = run(
        *BASE,
        route([{"backendRefs": [backend()]}]),
        options=GatewayOptions(namespaces=("apps",), entry_points=ENTRY_POINTS),
    )
    assert [s.kind for s in c.statuses] == ["GatewayClass"]


def test_the_same_state_converts_equal() -> None:
    docs = (*BASE, route([{"backendRefs": [backend()]}]))
    assert run(*docs) == run(*docs)


# --- TLSRoute, TCPRoute, UDPRoute ------------------------------------------------------------------

L4 = GatewayOptions(
    entry_points=(*ENTRY_POINTS, EntryPointPort("tcp", 9000)), experimental_channel=True
)


def l4_route(kind: str, refs: list[dict], name: str = "r", **spec: Any) -> dict:
    doc = route([{"backendRefs": refs}], name=name, **spec)
    doc["kind"] = kind
    return doc


def udp_service(name: str = "dns") -> list[dict]:
    svc, eps = service(name, port=53)
    svc["spec"]["ports"][0]["protocol"] = "UDP"
    eps["ports"][0]["protocol"] = "UDP"
    return [svc, eps]


def test_tls_passthrough_routes_by_sni_without_reading_a_secret() -> None:
    li = listener("tls", 443, "TLS", hostname="*.pt.test", tls={"mode": "Passthrough"})
    c = run(gateway_class(), gateway([li]), service("pt", port=443),
            l4_route("TLSRoute", [backend("pt", 443)], hostnames=["a.pt.test", "b.other.test"]), options=L4)  # fmt: skip
    assert listener_status(c, "tls")["supportedKinds"] == [{"group": GROUP, "kind": "TLSRoute"}]
    (router,) = c.configuration.tcp.routers.values()
    assert (
        router.rule == 'HostSNI("a.pt.test")' and router.tls is not None and router.tls.passthrough
    )
    assert router.entry_points == ["websecure"] and router.priority == len("a.pt.test")
    assert c.configuration.tls is None
    assert parent(c) == ACCEPTED_
    rt = validate(c)
    assert all(i.status == "enabled" for i in rt.tcp_routers.values()), {
        n: i.errors for n, i in rt.tcp_routers.items()
    }


def test_tls_terminate_carries_tls_and_tcp_routes() -> None:
    li = listener("tls", 443, "TLS", tls={"certificateRefs": [{"name": "cert"}]})
    c = run(gateway_class(), gateway([li]), secret(), service("pt", port=443),
            l4_route("TCPRoute", [backend("pt", 443)]), options=L4)  # fmt: skip
    assert [k["kind"] for k in listener_status(c, "tls")["supportedKinds"]] == [
        "TLSRoute",
        "TCPRoute",
    ]
    (router,) = c.configuration.tcp.routers.values()
    assert router.rule == 'HostSNI("*")' and router.tls is not None and not router.tls.passthrough
    assert c.configuration.tls is not None


def test_a_tcp_route_on_a_tcp_listener_and_a_udp_route_on_a_udp_listener() -> None:
    c = run(gateway_class(), gateway([listener("tcp", 9000, "TCP"), listener("dns", 53, "UDP")]),
            service("echo", port=9000), udp_service(),
            l4_route("TCPRoute", [backend("echo", 9000)], name="t", parentRefs=[{"name": "gw", "sectionName": "tcp"}]),
            l4_route("UDPRoute", [backend("dns", 53, weight=2), backend("gone", 53)], name="u",
                     parentRefs=[{"name": "gw", "sectionName": "dns"}]),
            options=L4)  # fmt: skip
    (tcp,) = c.configuration.tcp.routers.values()
    assert tcp.rule == 'HostSNI("*")' and tcp.tls is None and tcp.entry_points == ["tcp"]
    (udp,) = c.configuration.udp.routers.values()
    assert udp.entry_points == ["dns"]
    wrr = c.configuration.udp.services[udp.service].weighted
    assert [x.weight for x in wrr.services] == [2, 1]
    first = c.configuration.udp.services[wrr.services[0].name].load_balancer
    assert [s.address for s in first.servers] == ["10.0.0.1:8080"]
    assert parent(c, ("default", "t")) == ACCEPTED_
    assert parent(c, ("default", "u")) == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("False", "BackendNotFound"),
    }
    rt = build_runtime(
        merge({PROVIDER: c.configuration}),
        {"web": "tcp", "websecure": "tcp", "tcp": "tcp", "dns": "udp"},
    )
    assert all(i.status == "enabled" for i in rt.tcp_routers.values())
    assert all(i.status == "enabled" for i in rt.udp_routers.values())


def test_a_udp_route_refuses_a_tcp_port_and_is_not_allowed_on_tcp() -> None:
    c = run(gateway_class(), gateway([listener("dns", 53, "UDP"), listener("tcp", 9000, "TCP")]),
            service("dns", port=53),
            l4_route("UDPRoute", [backend("dns", 53)], name="u", parentRefs=[{"name": "gw", "sectionName": "dns"}]),
            l4_route("UDPRoute", [backend("dns", 53)], name="v", parentRefs=[{"name": "gw", "sectionName": "tcp"}]),
            options=L4)  # fmt: skip
    assert parent(c, ("default", "u"))["ResolvedRefs"] == ("False", "BackendNotFound")
    assert parent(c, ("default", "v"))["Accepted"] == ("False", "NotAllowedByListeners")


ACCEPTED_ = {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}


def test_edges_old_route_status_entries_go_when_no_parent_is_edges_any_more() -> None:
    held = {"parents": [{"parentRef": {"name": "gw"}, "controllerName": CONTROLLER_NAME, "conditions": []},
                        {"parentRef": {"name": "x"}, "controllerName": "example.com/other", "conditions": []}]}  # fmt: skip
    doc = route([{"backendRefs": [backend()]}], parentRefs=[{"name": "elsewhere"}])
    c = run(*BASE, {**doc, "status": held})
    assert status(c, "HTTPRoute", ("default", "r")) == {"parents": []}
    del held["parents"][0]
    c = run(*BASE, {**doc, "status": held})
    assert [s for s in c.statuses if s.kind == "HTTPRoute"] == []


def test_update_endpoints_equals_a_whole_conversion() -> None:
    """Slices added, changed and removed under HTTP, TCP and UDP backends: the
    endpoints-only update gives what a whole conversion of the new state gives."""
    gw = gateway([listener(), listener("tcp", 9000, "TCP"), listener("dns", 53, "UDP")])
    routes = [
        route([{"backendRefs": [backend(), backend("two")]}], hostnames=["a.test"]),
        l4_route("TCPRoute", [backend("echo", 9000)], name="t", parentRefs=[{"name": "gw", "sectionName": "tcp"}]),
        l4_route("UDPRoute", [backend("dns", 53)], name="u", parentRefs=[{"name": "gw", "sectionName": "dns"}]),
    ]  # fmt: skip
    base = [gateway_class(), gw, *routes]
    old_docs = [*service(), *service("two"), *service("echo", port=9000), *udp_service()]
    new_docs = [
        json_copy(d) for d in old_docs if d["metadata"]["name"] != "two-1"
    ]  # two: slice gone
    for d in new_docs:
        if d["kind"] == "EndpointSlice":
            d["endpoints"] = [
                {"addresses": ["10.0.0.9"]},
                {"addresses": ["10.0.0.8"], "conditions": {"ready": False}},
            ]
    old, new = state(*base, old_docs), state(*base, new_docs)
    previous = convert(old, L4)
    patched = update_endpoints(previous, old.endpoint_slices, new.endpoint_slices, new.services)
    assert patched is not None
    assert patched == convert(new, L4)
    assert patched.configuration != previous.configuration
    assert (
        update_endpoints(previous, old.endpoint_slices, old.endpoint_slices, old.services)
        == previous
    )


def json_copy(doc: dict) -> dict:
    return msgspec.json.decode(msgspec.json.encode(doc))


@pytest.mark.parametrize(
    ("mirror", "percent"),
    [({}, 100), ({"percent": 25}, 25), ({"fraction": {"numerator": 1, "denominator": 3}}, 33)],
)
def test_request_mirror_makes_the_rule_a_mirroring_service(mirror: dict, percent: int) -> None:
    f = [{"type": "RequestMirror", "requestMirror": {"backendRef": backend("shadow"), **mirror}}]
    c = run(*BASE, service("shadow"), route([{"filters": f, "backendRefs": [backend()]}]))
    (router,) = c.configuration.http.routers.values()
    assert router.middlewares == [] and router.service.endswith("-mirroring")
    m = c.configuration.http.services[router.service].mirroring
    assert m.service.endswith("-wrr")
    (copy,) = m.mirrors
    assert copy.percent == percent and copy.name.endswith("-requestmirror-0")
    assert [s.url for s in c.configuration.http.services[copy.name].load_balancer.servers] == [
        "http://10.0.0.1:8080"
    ]
    assert parent(c) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    assert all(i.status == "enabled" for i in validate(c).http_services.values())


def app_service(name: str, app_protocol: str) -> list[dict]:
    """``service(name)`` whose port says its ``appProtocol``."""
    svc, slices = service(name)
    svc["spec"]["ports"][0]["appProtocol"] = app_protocol
    return [svc, slices]


@pytest.mark.parametrize(
    ("app_protocol", "scheme"),
    [("kubernetes.io/h2c", "h2c"), ("kubernetes.io/ws", "http"), ("kubernetes.io/wss", "https"),
     ("http", "http"), ("https", "https")],
)  # fmt: skip
def test_a_service_ports_app_protocol_picks_the_backends_scheme(
    app_protocol: str, scheme: str
) -> None:
    """GEP-1911: the HTTPRoute's backends and mirrors, and what an endpoint change rebuilds."""
    f = [{"type": "RequestMirror", "requestMirror": {"backendRef": backend("shadow")}}]
    docs = [*BASE, app_service("web", app_protocol), app_service("shadow", app_protocol),
            route([{"filters": f, "backendRefs": [backend()]}])]  # fmt: skip
    c = run(*docs)
    assert parent(c) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    services = c.configuration.http.services
    balancers = {n.rsplit("-", 2)[-2]: s for n, s in services.items() if s.load_balancer}
    assert {k: [s.url for s in lb.load_balancer.servers] for k, lb in balancers.items()} == {
        "web": [f"{scheme}://10.0.0.1:8080"],
        "requestmirror": [f"{scheme}://10.0.0.1:8080"],
    }
    moved = app_service("web", app_protocol)
    moved[1]["endpoints"] = [{"addresses": ["10.0.0.2"]}]
    old, new = state(*docs), state(*docs[:3], moved, *docs[4:])
    patched = update_endpoints(c, old.endpoint_slices, new.endpoint_slices, new.services)
    assert patched is not None
    assert {
        s.url for lb in patched.configuration.http.services.values() if lb.load_balancer
        for s in lb.load_balancer.servers
    } == {f"{scheme}://10.0.0.2:8080", f"{scheme}://10.0.0.1:8080"}  # fmt: skip


def test_an_app_protocol_edge_does_not_speak_is_unsupported_protocol() -> None:
    """GEP-1911: the backend is invalid (its share answers 500), ``ResolvedRefs`` says why."""
    c = run(*BASE, app_service("web", "example.com/quic"), route([{"backendRefs": [backend()]}]))
    assert parent(c) == {"Accepted": ("True", "Accepted"),
                         "ResolvedRefs": ("False", "UnsupportedProtocol")}  # fmt: skip
    (router,) = c.configuration.http.routers.values()
    (share,) = c.configuration.http.services[router.service].weighted.services
    assert share.status == 500
    assert "'example.com/quic'" in str(c.statuses) and "kubernetes.io/h2c" in str(c.statuses)


def test_a_request_mirror_to_a_missing_service_is_left_out_and_reported() -> None:
    f = [{"type": "RequestMirror", "requestMirror": {"backendRef": backend("gone")}}]
    c = run(*BASE, route([{"filters": f, "backendRefs": [backend()]}]))
    (router,) = c.configuration.http.routers.values()
    assert router.service.endswith("-wrr")
    assert parent(c)["ResolvedRefs"] == ("False", "BackendNotFound")


def test_a_tcp_listener_sharing_its_port_is_a_protocol_conflict() -> None:
    lis = [listener("web", 9000, "HTTP"), listener("raw", 9000, "TCP"), listener("dns", 9000, "UDP"),
           listener("a", 443, "HTTPS", tls={"certificateRefs": [{"name": "cert"}]}),
           listener("b", 443, "TLS", hostname="pt.test", tls={"mode": "Passthrough"})]  # fmt: skip
    c = run(gateway_class(), gateway(lis), secret(), options=GatewayOptions(
        entry_points=(EntryPointPort("tcp", 9000), EntryPointPort("udp", 9000, True), EntryPointPort("websecure", 443)),
        experimental_channel=True))  # fmt: skip
    for name in ("web", "raw"):
        assert conditions(listener_status(c, name)["conditions"])["Conflicted"] == (
            "True",
            "ProtocolConflict",
        )
        assert conditions(listener_status(c, name)["conditions"])["Programmed"] == (
            "False",
            "Invalid",
        )
    for name in ("dns", "a", "b"):
        assert conditions(listener_status(c, name)["conditions"])["Conflicted"] == (
            "False",
            "NoConflicts",
        ), name


def test_equal_matches_rank_by_route_then_rule_then_match_index() -> None:
    """Matches of equal precedence: the route first by namespace/name, then its first
    rule, then the rule's first match; rule 10 ranks below rule 2 (no text order)."""
    same = {"matches": [{"path": {"value": "/same"}}], "backendRefs": [backend()]}
    twice = {"matches": [{"path": {"value": "/same"}}] * 2, "backendRefs": [backend()]}
    c = run(
        *BASE,
        route([same] * 11 + [twice], name="r", hostnames=["a.test"]),
        route([same], name="q", hostnames=["a.test"]),
    )
    routers = c.configuration.http.routers
    assert len(routers) == 13

    def place(name: str) -> tuple[str, int]:
        route_name = name.removeprefix("httproute-default-").split("-", 1)[0]
        return route_name, int(name.rsplit("-", 2)[1])

    ranked = sorted(routers, key=lambda n: -routers[n].priority)
    assert [place(n) for n in ranked] == [("q", 0), *(("r", i) for i in range(12))]
    assert len({r.priority for r in routers.values()}) == 13


def test_equal_matches_rank_the_oldest_route_first() -> None:
    """Routes of equal precedence: the oldest by creationTimestamp first, whatever
    their names; routes created in the same second fall back to namespace/name."""
    same = [{"matches": [{"path": {"value": "/same"}}], "backendRefs": [backend()]}]
    made = {"a": "2026-11-28T10:00:02Z", "b": "2026-11-28T10:00:01Z", "c": "2026-11-28T10:00:01Z"}
    routes = []
    for name, stamp in made.items():
        r = route(same, name=name, hostnames=["a.test"])
        r["metadata"]["creationTimestamp"] = stamp
        routes.append(r)
    routers = run(*BASE, *routes).configuration.http.routers
    ranked = sorted(routers, key=lambda n: -routers[n].priority)
    assert [n.removeprefix("httproute-default-")[0] for n in ranked] == ["b", "c", "a"]


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_request_redirect_answers_its_status_code(code: int) -> None:
    """Every statusCode the spec allows (303, 307 and 308 are extended) is the
    redirectRegex's status for every method."""
    f = [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": code}}]
    c = run(*BASE, route([{"filters": f}]))
    assert parent(c)["Accepted"] == ("True", "Accepted")
    (mw,) = c.configuration.http.middlewares.values()
    assert mw.redirect_regex.status_code == code
    assert all(i.status == "enabled" for i in validate(c).http_middlewares.values())


def test_open_listeners_name_the_entry_point_opened_for_their_port() -> None:
    """openListeners: a listener on a port no entry point has binds to ":<port>" (its
    UDP twin ":<port>/udp"); one whose port could not be opened says PortUnavailable
    with the error, and keeps its routers (edge keeps asking for the port)."""
    options = GatewayOptions(entry_points=ENTRY_POINTS, open_listeners=True)
    docs = (
        gateway_class(),
        gateway([listener("web", 80), listener("extra", 8080)]),
        service(),
        route([{"backendRefs": [backend()]}]),
    )
    c = run(*docs, options=options)
    assert sorted(r.entry_points[0] for r in c.configuration.http.routers.values()) == [
        ":8080",
        "web",
    ]
    assert c.opened == {":8080": ("Gateway default/gw listener extra",)}  # for the API
    assert conditions(listener_status(c, "extra")["conditions"])["Programmed"] == (
        "True",
        "Programmed",
    )
    assert all(
        i.status == "disabled"
        for n, i in validate(c).http_routers.items()
        if ":8080" in i.config.entry_points
    )  # static validation: no such entry point

    unopened = state(*docs)
    unopened = msgspec.structs.replace(unopened, unopened={":8080": "address already in use"})
    c = convert(unopened, options)
    conds = conditions(listener_status(c, "extra")["conditions"])
    assert conds["Accepted"] == ("False", "PortUnavailable")
    assert conds["Programmed"] == ("False", "Invalid")
    assert listener_status(c, "extra")["attachedRoutes"] == 1
    found = [x for x in listener_status(c, "extra")["conditions"] if x["type"] == "Accepted"]
    assert "port 8080 (TCP) cannot be opened: address already in use" in found[0]["message"]
    assert len(c.configuration.http.routers) == 2  # kept: the port is tried again
    assert (
        conditions(status(c, "Gateway", ("default", "gw"))["conditions"])["Accepted"][1]
        == "ListenersNotValid"
    )

    closed = run(*docs)  # without openListeners: PortUnavailable, no router
    assert conditions(listener_status(closed, "extra")["conditions"])["Accepted"] == (
        "False",
        "PortUnavailable",
    )
    assert [r.entry_points for r in closed.configuration.http.routers.values()] == [["web"]]


# --- GRPCRoute ---------------------------------------------------------------------------------

SVC = "pkg.Echo"


def grpc_route(rules: list[dict], name: str = "r", namespace: str = "default", **spec: Any) -> dict:
    doc = route(rules, name, namespace, **spec)
    return {**doc, "kind": "GRPCRoute"}


def gm(service: str | None = None, method: str | None = None, kind: str = "Exact", **more: Any):
    found = {"type": kind, "service": service, "method": method}
    return msgspec.convert({"method": found, **more}, GRPCRouteMatch)


def calls(rule: str, *paths: str, **headers: str) -> list[bool]:
    compiled = compile_rule(rule)
    fields = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return [compiled.match(RequestView(host="a.test", path=p, headers=fields)) for p in paths]


@pytest.mark.parametrize(
    ("match", "rule", "served", "refused"),
    [
        (gm(SVC, "Echo"), 'Path("/pkg.Echo/Echo")', ["/pkg.Echo/Echo"], ["/pkg.Echo/EchoTwo", "/pkgxEcho/Echo"]),
        (gm(SVC), 'PathRegexp("^/pkg\\\\.Echo/[^/]+$")', ["/pkg.Echo/Echo", "/pkg.Echo/X"], ["/pkgxEcho/Echo", "/pkg.Echo2/Echo", "/x/pkg.Echo/Echo"]),
        (gm(method="Echo"), 'PathRegexp("^/[^/]+/Echo$")', ["/a.B/Echo", "/pkg.Echo/Echo"], ["/a.B/EchoTwo", "/a/b/Echo"]),
        (gm("pkg\\.E.*", "Echo(Two)?", "RegularExpression"), 'PathRegexp("^/(?:pkg\\\\.E.*)/(?:Echo(Two)?)$")', ["/pkg.Echo/Echo", "/pkg.Ex/EchoTwo"], ["/pkg.Echo/EchoThree", "/other.Echo/Echo"]),
        (GRPCRouteMatch(), 'PathPrefix("/")', ["/pkg.Echo/Echo", "/"], []),
        (gm(None, None), 'PathPrefix("/")', ["/a/b"], []),
    ],
)  # fmt: skip
def test_grpc_method_matches_in_edges_rule_language(
    match: GRPCRouteMatch, rule: str, served: list[str], refused: list[str]
) -> None:
    """A call's path is /<service>/<method>; an omitted service or method matches any;
    Exact is literal, RegularExpression must match the whole part."""
    text, _ = grpc_match_rule([], match)
    assert text == rule
    assert calls(text, *served) == [True] * len(served)
    assert calls(text, *refused) == [False] * len(refused)


def test_grpc_header_matches_and_a_header_named_twice_counts_once() -> None:
    match = gm(SVC, "Echo", headers=[
        {"name": "version", "value": "two"}, {"name": "Version", "value": "one"},
        {"name": "color", "value": "^(red|blue)$", "type": "RegularExpression"}])  # fmt: skip
    text, priority = grpc_match_rule(["a.test"], match)
    assert text == (
        'Host("a.test") && Path("/pkg.Echo/Echo") && Header("version","two")'
        ' && HeaderRegexp("color","^(red|blue)$")'
    )
    assert calls(text, "/pkg.Echo/Echo", version="two", color="blue") == [True]
    assert calls(text, "/pkg.Echo/Echo", version="one", color="blue") == [False]
    assert calls(text, "/pkg.Echo/Echo", version="two", color="green") == [False]
    one = grpc_match_rule(["a.test"], gm(SVC, "Echo", headers=[{"name": "v", "value": "1"}] * 2))
    assert priority - one[1] == 1  # two distinct names against one


@pytest.mark.parametrize(
    "match",
    [gm(SVC, "Echo", "Prefix"), gm(SVC, headers=[{"name": "h", "value": "v", "type": "Glob"}])],
)
def test_grpc_match_types_edge_does_not_know_raise(match: GRPCRouteMatch) -> None:
    with pytest.raises(ValueError, match="is not supported"):
        grpc_match_rule([], match)


def test_grpc_precedence_follows_the_spec() -> None:
    """Each criterion outranks all those after it: the hostnames (of those one request
    can match, the longer first, a name before a wildcard of its length: the spec's
    non-wildcard then any hostname characters), then characters of the service, of
    the method, then header matches."""
    h = [{"name": f"h{i}", "value": "v"} for i in range(16)]
    big = gm("s" * 1024, "m" * 1024, headers=h)
    order = [
        (["x.long.a.test"], GRPCRouteMatch()),
        (["*.long.a.test"], big),  # as long, but a wildcard
        (["x.a.test"], GRPCRouteMatch()),
        (["*.a.test", "b.test"], big),
        (["a.test"], gm("pkg.Echo2", headers=h)),
        (["a.test"], gm("pkg.Echo", "E", headers=h)),
        (["a.test"], gm("pkg.Echo", headers=h)),
        (["a.test"], gm("pkg.Echo", headers=h[:1])),
        (["a.test"], gm("pkg.Echo")),
        (["a.test"], gm(method="EchoTwo")),
        (["a.test"], gm(method="Echo")),
        (["a.test"], GRPCRouteMatch(headers=gm(headers=h[:1]).headers)),
        (["a.test"], GRPCRouteMatch()),
        ([], big),
    ]
    priorities = [grpc_match_rule(hosts, match)[1] for hosts, match in order]
    assert priorities == sorted(priorities, reverse=True)
    assert len(set(priorities)) == len(priorities)


def test_grpc_and_http_routes_rank_hosts_alike() -> None:
    """On one port (listeners of one entry point), a GRPCRoute's name beats an
    HTTPRoute's wildcard of its length, and the other way round, whatever else."""
    h = [{"name": f"h{i}", "value": "v"} for i in range(16)]
    http_big = m("/" + "p" * 1000, "Exact", method="GET", headers=h[:1] * 16)
    grpc_big = gm("s" * 1024, "m" * 1024, headers=h)
    assert (
        grpc_match_rule(["x.a.test"], GRPCRouteMatch())[1] > match_rule(["*.a.test"], http_big)[1]
    )
    assert match_rule(["x.a.test"], m("/"))[1] > grpc_match_rule(["*.a.test"], grpc_big)[1]
    assert grpc_match_rule([], grpc_big)[1] < match_rule(["*.a.test"], m("/"))[1]


def test_a_grpc_route_becomes_routers_on_http_listeners_with_h2c_servers() -> None:
    c = run(
        gateway_class(),
        gateway([listener(), https(secret_ref())]),
        secret(),
        service(),
        service("two"),
        grpc_route(
            [
                {"matches": [{"method": {"service": SVC, "method": "Echo"}}],
                 "backendRefs": [backend(weight=7), backend("two", weight=3)]},
                {"backendRefs": [backend("two")]},
            ],
            hostnames=["grpc.test"],
        ),
    )  # fmt: skip
    assert parent(c) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    for name in ("http", "https"):
        found = listener_status(c, name)
        assert found["attachedRoutes"] == 1
        assert {"group": GROUP, "kind": "GRPCRoute"} in found["supportedKinds"]
    routers = c.configuration.http.routers
    assert sorted((r.rule, r.entry_points[0], r.tls is not None) for r in routers.values()) == [
        ('Host("grpc.test") && Path("/pkg.Echo/Echo")', "web", False),
        ('Host("grpc.test") && Path("/pkg.Echo/Echo")', "websecure", True),
        ('Host("grpc.test") && PathPrefix("/")', "web", False),
        ('Host("grpc.test") && PathPrefix("/")', "websecure", True),
    ]
    assert all(n.startswith("grpcroute-default-r-gw-default-gw-ep-") for n in routers)
    exact = max(routers.values(), key=lambda r: r.priority)
    assert "Path(" in exact.rule
    wrr = _services(c)[exact.service].weighted
    assert [(s.name.rsplit("-svc-", 1)[1], s.weight) for s in wrr.services] == [
        ("default-web-0", 7), ("default-two-1", 3)]  # fmt: skip
    lb = _services(c)[wrr.services[0].name].load_balancer
    assert [s.url for s in lb.servers] == ["h2c://10.0.0.1:8080"]


def secret_ref() -> dict:
    return {"name": "cert"}


def test_grpc_backends_that_cannot_be_served_get_503_for_their_share() -> None:
    """503 is what a gRPC client reads as UNAVAILABLE, the code the spec asks for."""
    c = run(*BASE, service(namespace="apps"), grpc_route([
        {"backendRefs": [backend(), backend("gone"), backend(namespace="apps")]},
        {"matches": [{"method": {"service": "none"}}]}]))  # fmt: skip
    assert parent(c) == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("False", "BackendNotFound"),
    }
    statuses = sorted(
        (s.name.rsplit("-svc-", 1)[-1] if "-svc-" in s.name else "none", s.status)
        for svc in _services(c).values()
        if svc.weighted is not None
        for s in svc.weighted.services
    )
    assert statuses == [
        ("apps-web-2", 503), ("default-gone-1", 503), ("default-web-0", None), ("none", 503)]  # fmt: skip


def test_a_reference_grant_from_grpc_routes_allows_a_cross_namespace_backend() -> None:
    def grant(kind: str) -> dict:
        return {"kind": "ReferenceGrant", "metadata": {"name": "g", "namespace": "apps"},
                "spec": {"from": [{"group": GROUP, "kind": kind, "namespace": "default"}],
                         "to": [{"group": "", "kind": "Service"}]}}  # fmt: skip

    docs = (
        *BASE,
        service(namespace="apps"),
        grpc_route([{"backendRefs": [backend(namespace="apps")]}]),
    )
    assert parent(run(*docs, grant("HTTPRoute")))["ResolvedRefs"] == ("False", "RefNotPermitted")
    assert parent(run(*docs, grant("GRPCRoute")))["ResolvedRefs"] == ("True", "ResolvedRefs")


def test_grpc_filters_become_middlewares_and_others_are_unsupported() -> None:
    mods = {"set": [{"name": "X-Set", "value": "s"}], "add": [{"name": "X-Add", "value": "a"}],
            "remove": ["X-Remove"]}  # fmt: skip
    c = run(*BASE, grpc_route([{"filters": [
        {"type": "RequestHeaderModifier", "requestHeaderModifier": mods},
        {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"set": [{"name": "X-R", "value": "r"}]}},
    ], "backendRefs": [backend()]}]))  # fmt: skip
    assert parent(c)["Accepted"] == ("True", "Accepted")
    request, response = _middlewares(c).values()
    assert request.headers.custom_request_headers == {"X-Set": "s", "X-Remove": ""}
    assert request.headers.append_request_headers == {"X-Add": "a"}
    assert response.headers.custom_response_headers == {"X-R": "r"}

    c = run(*BASE, grpc_route([{"filters": [{"type": "ExtensionRef", "extensionRef": {
        "group": "x", "kind": "Y", "name": "z"}}], "backendRefs": [backend()]}]))  # fmt: skip
    assert parent(c)["Accepted"] == ("False", "UnsupportedValue")
    (router,) = c.configuration.http.routers.values()
    assert _services(c)[router.service].load_balancer.servers == []  # 503: UNAVAILABLE


def test_a_grpc_request_mirror_copies_calls_to_h2c_servers() -> None:
    """A GRPCRoute's RequestMirror makes the rule's service a mirroring one whose
    mirror, as its backends, is spoken to as h2c (whatever its port's appProtocol)."""
    c = run(*BASE, service("copy"), grpc_route([{"filters": [
        {"type": "RequestMirror", "requestMirror": {"backendRef": backend("copy"), "percent": 25}}],
        "backendRefs": [backend()]}]))  # fmt: skip
    assert parent(c) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    (router,) = c.configuration.http.routers.values()
    m = _services(c)[router.service].mirroring
    (copy,) = m.mirrors
    assert copy.percent == 25
    assert [s.url for s in _services(c)[copy.name].load_balancer.servers] == ["h2c://10.0.0.1:8080"]
    main = _services(c)[_services(c)[m.service].weighted.services[0].name].load_balancer
    assert [s.url for s in main.servers] == ["h2c://10.0.0.1:8080"]


def test_a_grpc_match_of_an_unknown_type_is_unsupported_and_makes_no_router() -> None:
    c = run(*BASE, grpc_route([{"matches": [{"method": {"type": "Prefix", "service": "a"}},
                                            {"method": {"service": "b"}}], "backendRefs": [backend()]}]))  # fmt: skip
    assert parent(c)["Accepted"] == ("False", "UnsupportedValue")
    (router,) = c.configuration.http.routers.values()
    assert "/b/" in router.rule


def _created(doc: dict, at: str) -> dict:
    return {**doc, "metadata": {**doc["metadata"], "creationTimestamp": at}}


@pytest.mark.parametrize(
    ("http_at", "grpc_at", "winner"),
    [
        ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "HTTPRoute"),
        ("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z", "GRPCRoute"),
        ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "GRPCRoute"),  # default/a before default/b
    ],
)
def test_an_http_and_a_grpc_route_sharing_a_hostname_on_a_listener_accept_one(
    http_at: str, grpc_at: str, winner: str
) -> None:
    """The older is accepted, then the first by namespace/name; the other is refused
    there with Accepted False. Routes of one kind, or with disjoint hostnames, share."""
    web = [{"backendRefs": [backend()]}]
    c = run(
        *BASE,
        _created(route(web, "b", hostnames=["*.a.test"]), http_at),
        _created(grpc_route(web, "a", hostnames=["x.a.test"]), grpc_at),
        _created(grpc_route(web, "c", hostnames=["other.test"]), grpc_at),
        _created(route(web, "d", hostnames=["x.a.test"]), http_at),
    )
    loser, kept = ("a", "b") if winner == "HTTPRoute" else ("b", "a")
    assert parent(c, ("default", kept))["Accepted"] == ("True", "Accepted")
    (lost,) = [s for s in c.statuses if s.key == ("default", loser)]
    refused = conditions(lost.status["parents"][0]["conditions"])["Accepted"]
    assert refused == ("False", "NotAllowedByListeners")
    assert parent(c, ("default", "c"))["Accepted"] == ("True", "Accepted")
    d = parent(c, ("default", "d"))["Accepted"]
    assert d == (
        ("False", "NotAllowedByListeners") if winner == "GRPCRoute" else ("True", "Accepted")
    )
    attached = 2 + (winner == "HTTPRoute")
    assert listener_status(c, "http")["attachedRoutes"] == attached
    # A route refused on the listener makes no router there.
    assert len(c.configuration.http.routers) == attached


def test_allowed_kinds_grpc_route_only_refuses_http_routes() -> None:
    kinds = {"kinds": [{"kind": "GRPCRoute"}]}
    c = run(
        gateway_class(),
        gateway([listener(allowedRoutes=kinds)]),
        service(),
        route([{"backendRefs": [backend()]}], "h"),
        grpc_route([{"backendRefs": [backend()]}], "g"),
    )
    assert listener_status(c, "http")["supportedKinds"] == [{"group": GROUP, "kind": "GRPCRoute"}]
    assert parent(c, ("default", "h"))["Accepted"] == ("False", "NotAllowedByListeners")
    assert parent(c, ("default", "g"))["Accepted"] == ("True", "Accepted")


def test_update_endpoints_keeps_grpc_servers_h2c() -> None:
    base = [*BASE[:2], grpc_route([{"backendRefs": [backend()]}])]
    old_docs = service()
    new_docs = [json_copy(d) for d in old_docs]
    new_docs[1]["endpoints"] = [{"addresses": ["10.0.0.9"]}]
    old, new = state(*base, old_docs), state(*base, new_docs)
    patched = update_endpoints(
        convert(old, OPTIONS), old.endpoint_slices, new.endpoint_slices, new.services
    )
    assert patched == convert(new, OPTIONS)
    urls = [
        s.url
        for svc in _services(patched).values()
        if svc.load_balancer
        for s in svc.load_balancer.servers
    ]
    assert urls == ["h2c://10.0.0.9:8080"]


def test_a_grpc_route_whose_hostnames_miss_the_listeners_is_not_accepted() -> None:
    c = run(
        gateway_class(),
        gateway([listener(hostname="*.a.test")]),
        service(),
        grpc_route([{"backendRefs": [backend()]}], hostnames=["b.test", "x.c.test"]),
    )
    assert parent(c)["Accepted"] == ("False", "NoMatchingListenerHostname")
    assert c.configuration.http.routers == {}
    c = run(
        gateway_class(),
        gateway([listener(hostname="*.a.test")]),
        service(),
        grpc_route([{"backendRefs": [backend()]}], hostnames=["b.test", "x.a.test"]),
    )
    (router,) = c.configuration.http.routers.values()
    assert router.rule == 'Host("x.a.test") && PathPrefix("/")'  # b.test ignored
