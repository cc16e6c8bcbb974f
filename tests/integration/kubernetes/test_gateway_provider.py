"""The kubernetesGateway provider end to end: emulator -> provider -> edge -> real backends.

A real :class:`~tests.kube.emulator.Emulator` serves ``gateway.networking.k8s.io``
objects over a socket to the official client in edge's reflector threads; one edge
process built by ``build_providers`` from ``providers.kubernetesGateway`` serves them
to ``edge whoami`` backends, reached with real clients (``http.client``, ``curl`` for
HTTPS); the statuses edge writes back are read with the official ``kubernetes``
client. Scenarios follow the upstream conformance suite's core HTTPRoute profile
(written anew here): HTTPRouteSimpleSameNamespace, HTTPRouteExactPathMatching,
HTTPRouteMatchingAcrossRoutes, HTTPRouteHeaderMatching, HTTPRouteMethodMatching,
HTTPRouteQueryParamMatching, HTTPRouteRequestHeaderModifier,
HTTPRouteResponseHeaderModifier, HTTPRouteRedirectScheme/HostAndStatus/Port/Path,
HTTPRouteRewriteHost/Path, HTTPRouteInvalidNonExistentBackendRef,
HTTPRouteInvalidCrossNamespaceBackendRef, HTTPRouteReferenceGrant, HTTPRoutePathMatchOrder,
HTTPRouteListenerHostnameMatching, HTTPRouteWeight, HTTPRouteRequestMirror,
HTTPRouteHTTPSListener, HTTPRouteHostnameIntersection, GatewayObservedGenerationBump,
GatewayClassObservedGenerationBump. Listeners bind to edge's entry points by port, so
each edge here listens on ports chosen free beforehand. Every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client as kc
import pytest

from edge.providers.kubernetes.gateway import CONTROLLER_NAME
from edge.providers.kubernetes.gateway_provider import KubernetesGatewayProvider
from tests.fixtures.tls.pki import PKI
from tests.harness import WHOAMI_RE, Proc, Whoami, need
from tests.integration.kubernetes import test_provider as KP
from tests.integration.peers import fingerprint_of, free_port, s_client_until
from tests.kube import objects as o
from tests.kube.emulator import Emulator

GROUP = "gateway.networking.k8s.io"
GW = f"{GROUP}/v1"


# --- objects ------------------------------------------------------------------------------


def gateway_class(name: str = "edge") -> dict:
    return {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": name},
            "spec": {"controllerName": CONTROLLER_NAME}}  # fmt: skip


def gateway(listeners: list[dict], name: str = "gw") -> dict:
    return {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": name, "namespace": "default"},
            "spec": {"gatewayClassName": "edge", "listeners": listeners}}  # fmt: skip


def http_route(
    name: str, rules: list[dict], hostnames: list[str], namespace: str = "default", **spec: Any
) -> dict:
    spec.setdefault("parentRefs", [{"name": "gw", "namespace": "default"}])
    return {"apiVersion": GW, "kind": "HTTPRoute", "metadata": {"name": name, "namespace": namespace},
            "spec": {**spec, "hostnames": hostnames, "rules": rules}}  # fmt: skip


def to(service: str, weight: int = 1, **more: Any) -> dict:
    return {"name": service, "port": 80, "weight": weight, **more}


def path(value: str, kind: str = "PathPrefix") -> dict:
    return {"path": {"type": kind, "value": value}}


def backends(emu: Emulator, namespace: str = "default", **named: Whoami) -> None:
    for name, w in named.items():
        emu.create(o.service(name, namespace))
        emu.create(
            o.endpoint_slice(
                f"{name}-1", namespace, service_name=name, addresses=["127.0.0.1"], port=w.port
            )
        )


# --- edge ---------------------------------------------------------------------------------


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Ports:
    def __init__(self) -> None:
        self.web = free_port()
        self.websecure = free_port()
        self.tcp = free_port()
        self.dns = free_udp_port()


def static_config(emu: Emulator, ports: Ports) -> dict:
    throttle = f"{int(KP.THROTTLE * 1000)}ms"
    return {
        "entryPoints": {
            "web": {"address": f"127.0.0.1:{ports.web}"},
            "websecure": {"address": f"127.0.0.1:{ports.websecure}"},
            "tcp": {"address": f"127.0.0.1:{ports.tcp}"},
            "dns": {"address": f"127.0.0.1:{ports.dns}/udp"},
            "traefik": {"address": "127.0.0.1:0"},
        },
        "providers": {
            "kubernetesGateway": {
                "endpoint": emu.url,
                "token": KP.TOKEN,
                "throttleDuration": throttle,
                "experimentalChannel": True,
            }
        },
        "providersThrottleDuration": throttle,
        "ping": {"entryPoint": "traefik"},
        "log": {"level": "INFO"},
    }


def _fast(app: Any) -> None:
    for p in app.providers:
        if isinstance(p, KubernetesGatewayProvider):
            p.timing = KP.FAST
            p.wait_log_interval = 0.5
            p.environ = {}


def crd(plural: str, version: str | None, group: str = GROUP) -> dict:
    """A Gateway API CRD as the release manifests carry it (the schema left out)."""
    annotations = {"gateway.networking.k8s.io/bundle-version": version} if version else {}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}", "annotations": annotations},
            "spec": {"group": group, "names": {"plural": plural}, "scope": "Namespaced"}}  # fmt: skip


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(token=KP.TOKEN, bookmark_interval=1.0) as e:
        yield e


@pytest.fixture
def start_edge(emu: Emulator) -> Iterator[Callable[[Ports], KP.InProcessEdge]]:
    started: list[KP.InProcessEdge] = []

    def start(ports: Ports) -> KP.InProcessEdge:
        e = KP.InProcessEdge(static_config(emu, ports), tweak=_fast)
        e.start()
        started.append(e)
        assert KP.until(lambda: e.ready() == 200, 10.0), "edge never became ready"
        return e

    yield start
    KP.stop_all(started)


@pytest.fixture
def api(emu: Emulator) -> Iterator[kc.CustomObjectsApi]:
    cfg = kc.Configuration(host=emu.url)
    cfg.api_key = {"authorization": KP.TOKEN}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    with kc.ApiClient(cfg) as client:
        yield kc.CustomObjectsApi(client)


# --- reading back -------------------------------------------------------------------------


def get(
    port: int, target: str, host: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict, dict]:
    """(status, response headers, whoami's JSON or {})."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, target, headers={"Host": host, **(headers or {})})
        resp = conn.getresponse()
        body = resp.read()
        try:
            data = json.loads(body) if resp.status == 200 else {}
        except ValueError:
            data = {}
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    except OSError:
        return 0, {}, {}
    finally:
        conn.close()


def who(port: int, target: str, host: str, **kw: Any) -> str:
    status, _, data = get(port, target, host, **kw)
    return data.get("name", "") if status == 200 else str(status)


def route_conditions(
    api: kc.CustomObjectsApi, name: str, namespace: str = "default", plural: str = "httproutes"
) -> dict[str, tuple[str, str]]:
    obj = api.get_namespaced_custom_object(GROUP, "v1", namespace, plural, name)
    parents = [
        p
        for p in obj.get("status", {}).get("parents", [])
        if p["controllerName"] == CONTROLLER_NAME
    ]
    if len(parents) != 1:
        return {}
    return {c["type"]: (c["status"], c["reason"]) for c in parents[0]["conditions"]}


def gateway_status(api: kc.CustomObjectsApi, name: str = "gw") -> dict:
    return api.get_namespaced_custom_object(GROUP, "v1", "default", "gateways", name).get(
        "status", {}
    )


def listener(status: dict, name: str) -> dict:
    found = [li for li in status.get("listeners", []) if li["name"] == name]
    return found[0] if found else {}


def conds(items: list[dict]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in items}


ACCEPTED = {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}


# --- tests --------------------------------------------------------------------------------


def test_http_routes_route_by_the_specs_matches_and_report_status(
    emu, start_edge, api, whoami: Whoami, whoami2: Whoami
) -> None:
    """Core HTTPRoute matching through edge, and the statuses written back: the class
    accepted, the Gateway accepted and programmed, the listener with no entry point on
    its port PortUnavailable, routes Accepted/ResolvedRefs, attachedRoutes counted."""
    ports = Ports()
    unbound = free_port()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"},
                        {"name": "nowhere", "port": unbound, "protocol": "HTTP"}]))  # fmt: skip
    backends(emu, v1=whoami, v2=whoami2)
    emu.create(http_route("simple", [{"backendRefs": [to("v1")]}], ["simple.test"]))
    emu.create(http_route("exact", [{"matches": [path("/one", "Exact")], "backendRefs": [to("v1")]},
                                    {"matches": [path("/two", "Exact")], "backendRefs": [to("v2")]}], ["exact.test"]))  # fmt: skip
    # HTTPRouteMatchingAcrossRoutes
    emu.create(http_route("part1", [{"matches": [path("/"), {"headers": [{"name": "version", "value": "one"}]}],
                                     "backendRefs": [to("v1")]}], ["across.test", "across.net"]))  # fmt: skip
    emu.create(http_route("part2", [{"matches": [path("/v2"), {"headers": [{"name": "version", "value": "two"}]}],
                                     "backendRefs": [to("v2")]}], ["across.test"]))  # fmt: skip
    # headers, method and query parameters; a longer prefix outranks a method
    emu.create(http_route("matching", [
        {"matches": [{"headers": [{"name": "x-env", "value": "two"}]}], "backendRefs": [to("v2")]},
        {"matches": [{"method": "POST"}], "backendRefs": [to("v2")]},
        {"matches": [{"queryParams": [{"name": "q", "value": "two"}]}], "backendRefs": [to("v2")]},
        {"matches": [path("/long/prefix")], "backendRefs": [to("v1")]},
        {"matches": [{"path": {"value": "/long"}, "method": "PUT"}], "backendRefs": [to("v2")]},
        {"backendRefs": [to("v1")]},
    ], ["match.test"]))  # fmt: skip
    emu.create(
        http_route("weighted", [{"backendRefs": [to("v1", 1), to("v2", 0)]}], ["weight.test"])
    )
    emu.create(http_route("missing", [{"backendRefs": [to("gone")]}], ["missing.test"]))
    emu.create(
        http_route(
            "segments", [{"matches": [path("/foo")], "backendRefs": [to("v2")]}], ["seg.test"]
        )
    )
    edge = start_edge(ports)
    port = ports.web

    assert KP.until(lambda: who(port, "/", "simple.test") == "w1")
    assert who(port, "/one", "exact.test") == "w1" and who(port, "/two", "exact.test") == "w2"
    assert who(port, "/", "exact.test") == "404" and who(port, "/one/x", "exact.test") == "404"
    assert who(port, "/", "across.test") == "w1"
    assert who(port, "/v2/x", "across.test") == "w2"
    assert who(port, "/", "across.test", headers={"version": "two"}) == "w2"
    assert (
        who(port, "/", "across.net", headers={"version": "two"}) == "w1"
    )  # part2 is not on across.net
    assert who(port, "/", "match.test") == "w1"
    assert who(port, "/", "match.test", headers={"x-env": "two"}) == "w2"
    assert who(port, "/", "match.test", method="POST") == "w2"
    assert who(port, "/?q=two", "match.test") == "w2" and who(port, "/?q=one", "match.test") == "w1"
    assert (
        who(port, "/long/prefix", "match.test", method="PUT") == "w1"
    )  # 12 characters beat a method
    assert who(port, "/long", "match.test", method="PUT") == "w2"
    assert {who(port, "/", "weight.test") for _ in range(20)} == {"w1"}  # weight 0: never
    assert who(port, "/", "missing.test") == "500"  # a backendRef not found: the spec's 500
    assert who(port, "/foo/bar", "seg.test") == "w2" and who(port, "/foobar", "seg.test") == "404"

    assert KP.until(lambda: route_conditions(api, "simple") == ACCEPTED)
    assert KP.until(lambda: route_conditions(api, "weighted") == ACCEPTED)
    assert KP.until(
        lambda: (
            route_conditions(api, "missing")
            == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "BackendNotFound")}
        )
    )
    klass = api.get_cluster_custom_object(GROUP, "v1", "gatewayclasses", "edge")
    assert conds(klass["status"]["conditions"]) == {
        "Accepted": ("True", "Accepted"),
        "SupportedVersion": ("True", "SupportedVersion"),  # no Gateway API CRD to doubt
    }
    assert KP.until(lambda: listener(gateway_status(api), "http").get("attachedRoutes") == 8)
    st = gateway_status(api)
    assert conds(st["conditions"]) == {
        "Accepted": ("True", "ListenersNotValid"),
        "Programmed": ("True", "Programmed"),
    }
    http = listener(st, "http")
    assert http["attachedRoutes"] == 8 and http["supportedKinds"] == [
        {"group": GROUP, "kind": "HTTPRoute"},
        {"group": GROUP, "kind": "GRPCRoute"},
    ]
    assert conds(http["conditions"])["Programmed"] == ("True", "Programmed")
    assert conds(listener(st, "nowhere")["conditions"])["Accepted"] == ("False", "PortUnavailable")
    assert all(c["observedGeneration"] == 1 for c in st["conditions"])
    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesGatewayProvider))
    assert provider.name == "kubernetesgateway"
    assert all(
        name.startswith("httproute-") for name in provider.conversion.configuration.http.routers
    )


def test_filters_edit_headers_redirect_and_rewrite(emu, start_edge, whoami: Whoami) -> None:
    """RequestHeaderModifier, ResponseHeaderModifier, RequestRedirect (scheme, host and
    status, port, path) and URLRewrite (host, prefix and full path) through edge."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    backends(emu, v1=whoami)
    req = {"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "set": [{"name": "X-Header-Set", "value": "set-overwrites-values"}],
        "add": [{"name": "X-Header-Add", "value": "add-appends-values"}],
        "remove": ["X-Header-Remove"]}}  # fmt: skip
    resp = {
        "type": "ResponseHeaderModifier",
        "responseHeaderModifier": {"set": [{"name": "X-Resp", "value": "yes"}]},
    }
    emu.create(
        http_route(
            "headers", [{"filters": [req, resp], "backendRefs": [to("v1")]}], ["headers.test"]
        )
    )

    def redirect(r: dict, match: dict | None = None) -> dict:
        return {
            "matches": [match or path("/")],
            "filters": [{"type": "RequestRedirect", "requestRedirect": r}],
        }

    emu.create(http_route("redirects", [
        redirect({"scheme": "https"}, path("/scheme")),
        redirect({"hostname": "example.org", "statusCode": 301}, path("/host")),
        redirect({"port": 8083}, path("/port")),
        redirect({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}}, path("/prefix")),
        redirect({"path": {"type": "ReplaceFullPath", "replaceFullPath": "/full"}}, path("/whole")),
    ], ["redirect.test"]))  # fmt: skip

    def rewrite(r: dict, match: dict) -> dict:
        return {
            "matches": [match],
            "filters": [{"type": "URLRewrite", "urlRewrite": r}],
            "backendRefs": [to("v1")],
        }

    emu.create(http_route("rewrites", [
        rewrite({"hostname": "backend.test", "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/one"}}, path("/prefix/one")),
        rewrite({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}, path("/strip")),
        rewrite({"path": {"type": "ReplaceFullPath", "replaceFullPath": "/full"}}, path("/any")),
    ], ["rewrite.test"]))  # fmt: skip
    start_edge(ports)
    port = ports.web

    assert KP.until(lambda: who(port, "/", "headers.test") == "w1")
    status, headers, data = get(
        port,
        "/",
        "headers.test",
        headers={"X-Header-Set": "old", "X-Header-Remove": "x", "X-Header-Add": "some-value"},
    )
    sent = {k.lower(): v for k, v in data["headers"].items()}
    assert sent["x-header-set"] == ["set-overwrites-values"]
    assert sent["x-header-add"] == ["some-value,add-appends-values"]  # add appends
    assert "x-header-remove" not in sent
    assert headers["x-resp"] == "yes"
    _, _, data = get(port, "/", "headers.test")
    sent = {k.lower(): v for k, v in data["headers"].items()}
    assert sent["x-header-add"] == ["add-appends-values"]

    assert KP.until(lambda: get(port, "/scheme", "redirect.test")[0] == 302)
    cases = {
        "/scheme/a?x=1": (302, "https://redirect.test/scheme/a?x=1"),
        "/host": (301, "http://example.org/host"),
        "/port/p": (302, "http://redirect.test:8083/port/p"),
        "/prefix/rest?q=1": (302, "http://redirect.test/new/rest?q=1"),
        "/prefix": (302, "http://redirect.test/new"),
        "/whole/x?y=2": (302, "http://redirect.test/full?y=2"),
    }
    for target, (code, location) in cases.items():
        status, headers, _ = get(port, target, "redirect.test")
        assert (status, headers.get("location")) == (code, location), target

    _, _, data = get(port, "/prefix/one/two", "rewrite.test")
    assert (data["path"], data["host"]) == ("/one/two", "backend.test")
    assert get(port, "/prefix/one", "rewrite.test")[2]["path"] == "/one"
    assert get(port, "/strip/x", "rewrite.test")[2]["path"] == "/x"
    assert get(port, "/strip", "rewrite.test")[2]["path"] == "/"
    assert get(port, "/any/thing", "rewrite.test")[2]["path"] == "/full"


def https_conditions(api: kc.CustomObjectsApi) -> dict[str, tuple[str, str]]:
    return conds(listener(gateway_status(api), "https").get("conditions", []))


def _tls_secret(name: str, namespace: str, pki: PKI, host: str) -> dict:
    pair = pki.issue(host)
    b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/tls", "data": {"tls.crt": b64(pair.cert_pem), "tls.key": b64(pair.key_pem)}}  # fmt: skip


def test_https_listener_and_reference_grants(
    emu, start_edge, api, whoami: Whoami, tmp_path
) -> None:
    """An HTTPS listener terminates with a Secret of another namespace once a
    ReferenceGrant allows it (curl verifies the certificate); a backend in another
    namespace is RefNotPermitted until its ReferenceGrant appears, then served."""
    need("curl")
    pki = PKI()
    ca = pki.write_ca(tmp_path)
    ports = Ports()
    emu.create(gateway_class())
    emu.create(_tls_secret("site", "certs", pki, "secure.test"))
    emu.create(gateway([
        {"name": "http", "port": ports.web, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "https", "port": ports.websecure, "protocol": "HTTPS", "hostname": "secure.test",
         "tls": {"certificateRefs": [{"name": "site", "namespace": "certs"}]}},
    ]))  # fmt: skip
    backends(emu, "apps", web=whoami)
    emu.create(
        http_route(
            "cross", [{"backendRefs": [to("web", namespace="apps")]}], ["cross.test", "secure.test"]
        )
    )
    start_edge(ports)

    assert KP.until(
        lambda: (
            route_conditions(api, "cross")
            == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "RefNotPermitted")}
        )
    )
    assert who(ports.web, "/", "cross.test") == "500"
    assert KP.until(
        lambda: https_conditions(api).get("ResolvedRefs") == ("False", "RefNotPermitted")
    )

    emu.create({"apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant", "metadata": {"name": "backends", "namespace": "apps"},
                "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "default"}],
                         "to": [{"group": "", "kind": "Service", "name": "web"}]}})  # fmt: skip
    emu.create({"apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant", "metadata": {"name": "certs", "namespace": "certs"},
                "spec": {"from": [{"group": GROUP, "kind": "Gateway", "namespace": "default"}],
                         "to": [{"group": "", "kind": "Secret"}]}})  # fmt: skip
    assert KP.until(lambda: who(ports.web, "/", "cross.test") == "w1")
    assert KP.until(lambda: route_conditions(api, "cross") == ACCEPTED)

    def over_tls() -> subprocess.CompletedProcess:
        return subprocess.run(
            [need("curl"), "-sS", "--cacert", str(ca), "--resolve", f"secure.test:{ports.websecure}:127.0.0.1",
             f"https://secure.test:{ports.websecure}/"],
            capture_output=True, timeout=30,
        )  # fmt: skip

    assert KP.until(lambda: over_tls().returncode == 0, 10.0), over_tls().stderr
    assert json.loads(over_tls().stdout)["name"] == "w1"
    assert KP.until(lambda: listener(gateway_status(api), "https").get("attachedRoutes") == 1)
    assert https_conditions(api)["Programmed"] == ("True", "Programmed")


def test_status_is_written_only_when_it_changes_and_follows_the_generation(
    emu, start_edge, api, whoami: Whoami
) -> None:
    """After the first writes, a round that changes nothing in status (a new Service)
    writes nothing; a route's new spec bumps its generation and its conditions'
    observedGeneration follows, keeping lastTransitionTime (its status held)."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    backends(emu, v1=whoami)
    emu.create(http_route("r", [{"backendRefs": [to("v1")]}], ["gen.test"]))
    edge = start_edge(ports)
    assert KP.until(lambda: route_conditions(api, "r") == ACCEPTED)
    assert KP.until(
        lambda: (
            conds(gateway_status(api).get("conditions", [])).get("Programmed")
            == ("True", "Programmed")
        )
    )
    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesGatewayProvider))
    assert KP.until(lambda: provider.status_writes == 3)  # class, gateway, route

    def patches() -> int:
        return emu.count(method="PATCH")

    before, rounds = patches(), provider.rounds
    emu.create(o.service("unrelated"))
    assert KP.until(lambda: provider.rounds > rounds)
    time.sleep(0.5)
    assert patches() == before and provider.status_writes == 3

    first = api.get_namespaced_custom_object(GROUP, "v1", "default", "httproutes", "r")["status"][
        "parents"
    ][0]["conditions"]
    route = emu.get("HTTPRoute", "default", "r")
    route["spec"]["rules"][0]["matches"] = [path("/x")]
    emu.update(route)

    def generations() -> set[int]:
        obj = api.get_namespaced_custom_object(GROUP, "v1", "default", "httproutes", "r")
        return {c["observedGeneration"] for c in obj["status"]["parents"][0]["conditions"]}

    assert KP.until(lambda: generations() == {2})
    now = api.get_namespaced_custom_object(GROUP, "v1", "default", "httproutes", "r")["status"][
        "parents"
    ][0]["conditions"]
    assert [c["lastTransitionTime"] for c in now] == [c["lastTransitionTime"] for c in first]
    assert (
        KP.until(lambda: who(ports.web, "/x", "gen.test") == "w1")
        and who(ports.web, "/", "gen.test") == "404"
    )


def test_rbac_grants_what_the_gateway_provider_uses_and_nothing_more(emu, whoami: Whoami) -> None:
    """edge with providers.kubernetesGateway as the DaemonSet's ServiceAccount, against
    the emulator enforcing k8s/rbac.yaml and k8s/gateway/rbac.yaml: nothing it asks is
    refused, it serves and writes the statuses of every kind, and every permission
    k8s/gateway/rbac.yaml grants is used ("get" beside list aside)."""
    from tests.harness import ROOT
    from tests.kube.emulator import Access
    from tests.kube.rbac import Policy

    k8s = ROOT / "k8s"
    # Both files as the cluster holds them: two ClusterRoles, each with its binding.
    policy = Policy.from_files(
        [k8s / "rbac.yaml", k8s / "gateway" / "rbac.yaml"], "edge-system", "edge"
    )
    mine = Policy.from_files([k8s / "gateway" / "rbac.yaml"], "edge-system", "edge")
    seen: list[Access] = []
    refused: list[Access] = []

    def authorize(access: Access) -> bool:
        seen.append(access)
        if not policy.allows(access):
            refused.append(access)
            return False
        return True

    emu.authorizer = authorize
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([
        {"name": "http", "port": ports.web, "protocol": "HTTP"},
        {"name": "tls", "port": ports.websecure, "protocol": "TLS", "tls": {"mode": "Passthrough"}},
        {"name": "tcp", "port": ports.tcp, "protocol": "TCP"},
        {"name": "dns", "port": ports.dns, "protocol": "UDP"},
    ]))  # fmt: skip
    for kind, section in (("TLSRoute", "tls"), ("TCPRoute", "tcp"), ("UDPRoute", "dns")):
        emu.create(l4_route(kind, "r", section, [{"name": "v1", "port": 80}]))
    backends(emu, v1=whoami)
    emu.create(http_route("r", [{"backendRefs": [to("v1")]}], ["rbac.test"]))
    emu.create(
        {**http_route("g", [{"backendRefs": [to("v1")]}], ["grpc.test"]), "kind": "GRPCRoute"}
    )
    edge = KP.InProcessEdge(static_config(emu, ports), tweak=_fast).start()
    try:
        assert KP.until(lambda: edge.ready() == 200, 10.0), refused
        assert KP.until(lambda: who(ports.web, "/", "rbac.test") == "w1")
        provider = next(p for p in edge.app.providers if isinstance(p, KubernetesGatewayProvider))
        assert KP.until(lambda: provider.status_writes == 7), refused  # class, gateway, 5 routes
    finally:
        KP.stop_all([edge])
    assert refused == []
    unused = {
        g for g in mine.grants
        if not any(Policy.covers(g, a) for a in seen)
        and not (g.verb == "get" and any(Policy.covers(g._replace(verb="list"), a) for a in seen))
    }  # fmt: skip
    assert unused == set()


@pytest.fixture(scope="module")
def udp_echo() -> Iterator[Proc]:
    """``edge whoami --udp``: a UDP echo server."""
    p = Proc(["whoami", "--name", "echo", "--udp", "127.0.0.1:0"])
    p.port = int(p.wait_for(WHOAMI_RE).group(4))  # type: ignore[attr-defined]
    yield p
    p.stop()


def l4_route(
    kind: str, name: str, section: str, refs: list[dict], hostnames: list[str] | None = None
) -> dict:
    spec: dict[str, Any] = {
        "parentRefs": [{"name": "gw", "sectionName": section}],
        "rules": [{"backendRefs": refs}],
    }
    if hostnames:
        spec["hostnames"] = hostnames
    return {
        "apiVersion": GW,
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def l4_service(
    emu: Emulator, name: str, port: int, backend_port: int, protocol: str = "TCP"
) -> None:
    svc = o.service(name, port=port)
    svc["spec"]["ports"] = [
        {"name": "p", "port": port, "targetPort": backend_port, "protocol": protocol}
    ]
    emu.create(svc)
    eps = o.endpoint_slice(
        f"{name}-1", service_name=name, addresses=["127.0.0.1"], port=backend_port
    )
    eps["ports"] = [{"name": "p", "port": backend_port, "protocol": protocol}]
    emu.create(eps)


def test_one_edge_serves_http_tls_passthrough_tcp_and_udp_routes(
    emu, start_edge, api, whoami: Whoami, s_server, certs, echo, udp_echo
) -> None:
    """One edge with providers.kubernetesGateway (experimentalChannel): an HTTPRoute
    on HTTP, a TLSRoute on a Passthrough TLS listener (the backend's own certificate
    reaches the client, its fingerprint unchanged), a TCPRoute on a TCP listener and a
    UDPRoute on a UDP listener, each Accepted with its refs resolved."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([
        {"name": "http", "port": ports.web, "protocol": "HTTP"},
        {"name": "tls", "port": ports.websecure, "protocol": "TLS", "hostname": "*.test", "tls": {"mode": "Passthrough"}},
        {"name": "tcp", "port": ports.tcp, "protocol": "TCP"},
        {"name": "dns", "port": ports.dns, "protocol": "UDP"},
    ]))  # fmt: skip
    backends(emu, v1=whoami)
    emu.create(http_route("web", [{"backendRefs": [to("v1")]}], ["web.test"]))
    l4_service(emu, "pt", 443, s_server.port)
    emu.create(l4_route("TLSRoute", "pt", "tls", [{"name": "pt", "port": 443}], ["pt.test"]))
    l4_service(emu, "echo", 9000, echo.port)
    emu.create(l4_route("TCPRoute", "echo", "tcp", [{"name": "echo", "port": 9000}]))
    l4_service(emu, "dns", 53, udp_echo.port, "UDP")
    emu.create(l4_route("UDPRoute", "dns", "dns", [{"name": "dns", "port": 53}]))
    start_edge(ports)

    assert KP.until(lambda: who(ports.web, "/", "web.test") == "w1")
    out = s_client_until(ports.websecure, "pt.test", b"hello\n", b"olleh")
    assert b"olleh" in out
    assert fingerprint_of(out) == certs["backend"].fingerprint

    def tcp_echo() -> bytes:
        try:
            with socket.create_connection(("127.0.0.1", ports.tcp), timeout=2) as sock:
                sock.sendall(b"ping\n")
                return sock.recv(64)
        except OSError:
            return b""

    assert KP.until(lambda: tcp_echo() == b"ping\n")

    def udp_echo_once() -> bytes:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(0.5)
            sock.sendto(b"ping", ("127.0.0.1", ports.dns))
            try:
                return sock.recv(64)
            except OSError:
                return b""

    assert KP.until(lambda: udp_echo_once() == b"ping")

    for plural, name in (("tlsroutes", "pt"), ("tcproutes", "echo"), ("udproutes", "dns")):
        assert KP.until(lambda n=name, p=plural: route_conditions(api, n, plural=p) == ACCEPTED), (
            plural
        )

    def attached() -> list:
        st = gateway_status(api)
        return [listener(st, n).get("attachedRoutes") for n in ("http", "tls", "tcp", "dns")]

    assert KP.until(lambda: attached() == [1, 1, 1, 1])
    st = gateway_status(api)
    assert [k["kind"] for k in listener(st, "tls")["supportedKinds"]] == ["TLSRoute"]


def test_a_route_leaving_edges_gateway_loses_edges_status_entry(
    emu, start_edge, api, whoami: Whoami
) -> None:
    """A route whose parentRef moves to a Gateway edge does not own: edge's entry in
    its status.parents goes, another controller's stays, and its routes are gone."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    backends(emu, v1=whoami)
    emu.create(http_route("r", [{"backendRefs": [to("v1")]}], ["move.test"]))
    start_edge(ports)
    assert KP.until(lambda: route_conditions(api, "r") == ACCEPTED)
    other = {
        "parentRef": {"name": "theirs"},
        "controllerName": "example.com/other",
        "conditions": [],
    }
    obj = emu.get("HTTPRoute", "default", "r")
    obj["status"]["parents"].append(other)
    obj["spec"]["parentRefs"] = [{"name": "theirs"}]
    emu.update(obj)

    def parents() -> list:
        got = api.get_namespaced_custom_object(GROUP, "v1", "default", "httproutes", "r")
        return got.get("status", {}).get("parents", [])

    assert KP.until(lambda: parents() == [other])
    assert KP.until(lambda: who(ports.web, "/", "move.test") == "404")


@pytest.fixture
def whoami3() -> Iterator[Whoami]:
    w = Whoami("w3")
    yield w
    w.stop()


def test_path_match_order_and_listener_hostnames(
    emu, start_edge, whoami: Whoami, whoami2: Whoami, whoami3: Whoami
) -> None:
    """HTTPRoutePathMatchOrder (Exact over every prefix, the longest prefix first) and
    HTTPRouteListenerHostnameMatching (four listeners on one port told apart by
    hostname: an exact host beats a wildcard, a wildcard spans several labels, a
    host no listener names is 404)."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([
        {"name": "listener-1", "port": ports.web, "protocol": "HTTP", "hostname": "bar.com"},
        {"name": "listener-2", "port": ports.web, "protocol": "HTTP", "hostname": "foo.bar.com"},
        {"name": "listener-3", "port": ports.web, "protocol": "HTTP", "hostname": "*.bar.com"},
        {"name": "listener-4", "port": ports.web, "protocol": "HTTP", "hostname": "*.foo.com"},
        {"name": "order", "port": ports.web, "protocol": "HTTP", "hostname": "order.test"},
    ]))  # fmt: skip
    backends(emu, v1=whoami, v2=whoami2, v3=whoami3)

    def on(*sections: str) -> list[dict]:
        return [{"name": "gw", "sectionName": s} for s in sections]

    emu.create(
        http_route("backend-v1", [{"backendRefs": [to("v1")]}], [], parentRefs=on("listener-1"))
    )
    emu.create(
        http_route("backend-v2", [{"backendRefs": [to("v2")]}], [], parentRefs=on("listener-2"))
    )
    emu.create(
        http_route(
            "backend-v3",
            [{"backendRefs": [to("v3")]}],
            [],
            parentRefs=on("listener-3", "listener-4"),
        )
    )
    emu.create(http_route("order", [
        {"matches": [path("/match", "Exact")], "backendRefs": [to("v1")]},
        {"matches": [path("/match/exact", "Exact")], "backendRefs": [to("v2")]},
        {"matches": [path("/match/exact/one", "Exact")], "backendRefs": [to("v3")]},
        {"matches": [path("/match/")], "backendRefs": [to("v3")]},
        {"matches": [path("/match/prefix/")], "backendRefs": [to("v1")]},
        {"matches": [path("/match/prefix/one")], "backendRefs": [to("v2")]},
    ], [], parentRefs=on("order")))  # fmt: skip
    start_edge(ports)
    port = ports.web

    assert KP.until(lambda: who(port, "/", "bar.com") == "w1")
    hosts = {"bar.com": "w1", "foo.bar.com": "w2", "baz.bar.com": "w3", "boo.bar.com": "w3",
             "multiple.prefixes.bar.com": "w3", "multiple.prefixes.foo.com": "w3",
             "foo.com": "404", "no.matching.host": "404"}  # fmt: skip
    assert {h: who(port, "/", h) for h in hosts} == hosts
    paths = {"/match/exact/one": "w3", "/match/exact": "w2", "/match": "w1",
             "/match/prefix/one/any": "w2", "/match/prefix/any": "w1", "/match/any": "w3"}  # fmt: skip
    assert {p: who(port, p, "order.test") for p in paths} == paths


def test_weights_split_requests(
    emu, start_edge, whoami: Whoami, whoami2: Whoami, whoami3: Whoami
) -> None:
    """HTTPRouteWeight: backendRefs weighted 70, 30 and 0 share 100 requests 70/30
    (edge's weighted round robin is smooth, so within a few) and the third gets none."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    backends(emu, v1=whoami, v2=whoami2, v3=whoami3)
    emu.create(
        http_route(
            "weights", [{"backendRefs": [to("v1", 70), to("v2", 30), to("v3", 0)]}], ["w.test"]
        )
    )
    start_edge(ports)
    assert KP.until(lambda: who(ports.web, "/", "w.test") in ("w1", "w2"))
    seen = [who(ports.web, "/", "w.test") for _ in range(100)]
    assert abs(seen.count("w1") - 70) <= 3 and abs(seen.count("w2") - 30) <= 3, seen
    assert seen.count("w3") == 0 and seen.count("w1") + seen.count("w2") == 100


def test_an_endpoint_change_updates_servers_without_a_conversion(
    emu, start_edge, whoami: Whoami, whoami2: Whoami
) -> None:
    """A backend's EndpointSlice moved to another pod: routing follows, by the
    endpoints-only path (no whole conversion)."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    backends(emu, v1=whoami)
    emu.create(http_route("r", [{"backendRefs": [to("v1")]}], ["eps.test"]))
    edge = start_edge(ports)
    assert KP.until(lambda: who(ports.web, "/", "eps.test") == "w1")
    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesGatewayProvider))
    assert KP.until(lambda: provider.status_writes == 3)
    time.sleep(0.3)  # the status writes' own events come back and convert nothing
    conversions, patches = provider.conversions, provider.patches
    moved = o.endpoint_slice("v1-1", service_name="v1", addresses=["127.0.0.1"], port=whoami2.port)
    emu.update(moved)
    assert KP.until(lambda: who(ports.web, "/", "eps.test") == "w2")
    assert provider.patches > patches and provider.conversions == conversions


def test_request_mirror_copies_requests_to_its_backend(emu, start_edge) -> None:
    """HTTPRouteRequestMirror: the client gets the main backend's answer; the mirror's
    backend receives a copy of each request (its answer dropped)."""
    from tests.integration.http.servers import H11Backend

    main, shadow = H11Backend(after_body=True), H11Backend(after_body=True)
    try:
        ports = Ports()
        emu.create(gateway_class())
        emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
        for name, b in (("main", main), ("shadow", shadow)):
            emu.create(o.service(name))
            emu.create(
                o.endpoint_slice(
                    f"{name}-1", service_name=name, addresses=["127.0.0.1"], port=b.port
                )
            )
        f = [
            {
                "type": "RequestMirror",
                "requestMirror": {"backendRef": {"name": "shadow", "port": 80}},
            }
        ]
        emu.create(http_route("m", [{"filters": f, "backendRefs": [to("main")]}], ["mirror.test"]))
        start_edge(ports)
        assert KP.until(lambda: get(ports.web, "/x", "mirror.test")[0] == 200)
        before = len(main.requests)
        for i in range(5):
            assert get(ports.web, f"/copy/{i}", "mirror.test")[0] == 200
        assert len(main.requests) - before == 5
        assert KP.until(lambda: sum(r.target.startswith(b"/copy/") for r in shadow.requests) == 5)
    finally:
        main.stop()
        shadow.stop()


def test_hostname_intersection(
    emu, start_edge, api, whoami: Whoami, whoami2: Whoami, whoami3: Whoami
) -> None:
    """HTTPRouteHostnameIntersection: a route serves the hostnames both it and a
    listener match (a specific host in a listener's wildcard, a wildcard over a
    listener's specific host), nothing else; a route with none is
    NoMatchingListenerHostname."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([
        {"name": "listener-1", "port": ports.web, "protocol": "HTTP", "hostname": "very.specific.com"},
        {"name": "listener-2", "port": ports.web, "protocol": "HTTP", "hostname": "*.wildcard.io"},
        {"name": "listener-3", "port": ports.web, "protocol": "HTTP", "hostname": "*.anotherwildcard.io"},
    ]))  # fmt: skip
    backends(emu, v1=whoami, v2=whoami2, v3=whoami3)

    def r(name: str, hosts: list[str], prefix: str, svc: str) -> dict:
        return http_route(name, [{"matches": [path(prefix)], "backendRefs": [to(svc)]}], hosts)

    emu.create(
        r("s1", ["non.matching.com", "*.nonmatchingwildcard.io", "very.specific.com"], "/s1", "v1")
    )
    emu.create(
        r(
            "s2",
            [
                "non.matching.com",
                "wildcard.io",
                "foo.wildcard.io",
                "bar.wildcard.io",
                "foo.bar.wildcard.io",
            ],
            "/s2",
            "v2",
        )
    )
    emu.create(r("s3", ["non.matching.com", "*.specific.com"], "/s3", "v3"))
    emu.create(r("s4", ["*.anotherwildcard.io"], "/s4", "v1"))
    emu.create(r("none", ["specific.but.wrong.com", "wildcard.io"], "/", "v1"))
    start_edge(ports)
    port = ports.web
    assert KP.until(lambda: who(port, "/s1", "very.specific.com") == "w1")
    expected = {
        ("very.specific.com", "/s1"): "w1", ("very.specific.com:1234", "/s1"): "w1",
        ("non.matching.com", "/s1"): "404", ("foo.nonmatchingwildcard.io", "/s1"): "404",
        ("foo.wildcard.io", "/s1"): "404", ("very.specific.com", "/non-matching-prefix"): "404",
        ("foo.wildcard.io", "/s2"): "w2", ("bar.wildcard.io", "/s2"): "w2",
        ("foo.bar.wildcard.io", "/s2"): "w2", ("non.matching.com", "/s2"): "404",
        ("wildcard.io", "/s2"): "404", ("very.specific.com", "/s2"): "404",
        ("very.specific.com", "/s3"): "w3", ("foo.specific.com", "/s3"): "404",
        ("foo.wildcard.io", "/s3"): "404",
        ("foo.anotherwildcard.io", "/s4"): "w1", ("bar.anotherwildcard.io", "/s4"): "w1",
        ("foo.bar.anotherwildcard.io", "/s4"): "w1", ("anotherwildcard.io", "/s4"): "404",
        ("foo.wildcard.io", "/s4"): "404", ("very.specific.com", "/s4"): "404",
    }  # fmt: skip
    assert {k: who(port, k[1], k[0]) for k in expected} == expected
    assert KP.until(
        lambda: (
            route_conditions(api, "none").get("Accepted") == ("False", "NoMatchingListenerHostname")
        )
    )
    assert KP.until(lambda: route_conditions(api, "s2") == ACCEPTED)


def test_the_class_says_whether_edge_knows_the_gateway_api_crds_release(emu, start_edge, api):
    """SupportedVersion follows the bundle-version of the Gateway API CRDs in the
    cluster (others' CRDs aside): True for the releases edge knows, False naming a
    CRD of another; the class stays Accepted (best effort, as the spec allows)."""
    ports = Ports()
    emu.create(gateway_class())
    for plural in ("gatewayclasses", "gateways", "httproutes"):
        emu.create(crd(plural, "v1.6.1"))
    emu.create(crd("widgets", None, group="example.com"))  # not the Gateway API's
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    start_edge(ports)

    def class_conditions() -> dict:
        klass = api.get_cluster_custom_object(GROUP, "v1", "gatewayclasses", "edge")
        return {c["type"]: c for c in klass.get("status", {}).get("conditions", [])}

    assert KP.until(lambda: "SupportedVersion" in class_conditions())
    assert conds(list(class_conditions().values())) == {
        "Accepted": ("True", "Accepted"),
        "SupportedVersion": ("True", "SupportedVersion"),
    }
    newer = emu.get("CustomResourceDefinition", "", "httproutes.gateway.networking.k8s.io")
    newer["metadata"]["annotations"]["gateway.networking.k8s.io/bundle-version"] = "v1.9.0"
    emu.update(newer)
    assert KP.until(lambda: class_conditions().get("SupportedVersion", {}).get("status") == "False")
    said = class_conditions()
    assert said["SupportedVersion"]["reason"] == "UnsupportedVersion"
    assert "httproutes.gateway.networking.k8s.io (v1.9.0)" in said["SupportedVersion"]["message"]
    assert said["Accepted"]["status"] == "True"


def test_gateway_and_class_observed_generation_bump(emu, start_edge, api, whoami: Whoami) -> None:
    """GatewayObservedGenerationBump and GatewayClassObservedGenerationBump: a new
    spec (a listener added; a class description) is reflected in observedGeneration."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    start_edge(ports)

    def gateway_generations() -> set[int]:
        st = gateway_status(api)
        return {c["observedGeneration"] for c in st.get("conditions", [])} | {
            c["observedGeneration"] for li in st.get("listeners", []) for c in li["conditions"]
        }

    def class_generations() -> set[int]:
        got = api.get_cluster_custom_object(GROUP, "v1", "gatewayclasses", "edge")
        return {c["observedGeneration"] for c in got.get("status", {}).get("conditions", [])}

    assert KP.until(lambda: gateway_generations() == {1} and class_generations() == {1})
    gw = emu.get("Gateway", "default", "gw")
    gw["spec"]["listeners"].append({"name": "other", "port": ports.websecure, "protocol": "HTTP"})
    emu.update(gw)
    klass = emu.get("GatewayClass", "", "edge")
    klass["spec"]["description"] = "edge, bumped"
    emu.update(klass)
    assert KP.until(lambda: gateway_generations() == {2} and class_generations() == {2})
    assert [li["name"] for li in gateway_status(api)["listeners"]] == ["http", "other"]


def test_gateway_addresses_are_the_nodes_of_edges_daemonset(emu, api) -> None:
    """In a hostNetwork DaemonSet pod, each Gateway's status.addresses lists the nodes
    running edge's pods (ExternalIP, else InternalIP), as the Ingress status does; a
    second pod's node joins them."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    emu.create(KP._node("n1", "10.1.0.1"))
    emu.create(KP._node("n2", "10.1.0.2", external="203.0.113.2"))
    emu.create(KP._pod("edge-a", "n1"))
    environ = {"POD_NAME": "edge-a", "POD_NAMESPACE": "edge-system"}

    def tweak(app: Any) -> None:
        _fast(app)
        for p in app.providers:
            if isinstance(p, KubernetesGatewayProvider):
                p.environ = environ

    edge = KP.InProcessEdge(static_config(emu, ports), tweak=tweak).start()
    try:
        assert KP.until(lambda: edge.ready() == 200, 10.0)

        def addresses() -> list:
            return gateway_status(api).get("addresses", [])

        assert KP.until(lambda: addresses() == [{"type": "IPAddress", "value": "10.1.0.1"}])
        emu.create(KP._pod("edge-b", "n2"))
        assert KP.until(
            lambda: (
                addresses()
                == [
                    {"type": "IPAddress", "value": "10.1.0.1"},
                    {"type": "IPAddress", "value": "203.0.113.2"},
                ]
            )
        )
    finally:
        KP.stop_all([edge])


def test_three_kubernetes_sources_share_one_core(emu, whoami: Whoami) -> None:
    """kubernetesIngress, kubernetesCRD and kubernetesGateway on one API server: one
    core, each shared kind (Services, EndpointSlices, Secrets, Nodes) listed once,
    and each source serves its own routes (``…@kubernetes``, ``…@kubernetescrd``,
    ``…@kubernetesgateway``)."""
    from tests.integration.kubernetes import test_crd_provider as CP

    ports = Ports()
    emu.create(o.ingress_class("edge"))
    backends(emu, v1=whoami)
    emu.create(KP.ingress("ing", [("ing.test", "/", "Prefix", "v1")], ingressClassName="edge"))
    emu.create(CP.ingress_route("crd", "crd.test", "v1"))
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    emu.create(http_route("gw", [{"backendRefs": [to("v1")]}], ["gw.test"]))
    static = static_config(emu, ports)
    kube = {
        "endpoint": emu.url,
        "token": KP.TOKEN,
        "throttleDuration": f"{int(KP.THROTTLE * 1000)}ms",
    }
    static["providers"]["kubernetesIngress"] = dict(kube, ingressClass="edge")
    static["providers"]["kubernetesCRD"] = dict(kube)

    def tweak(app: Any) -> None:
        _fast(app)
        CP._fast(app)

    edge = KP.InProcessEdge(static, tweak=tweak).start()
    try:
        assert KP.until(lambda: edge.ready() == 200, 10.0)
        for host in ("ing.test", "crd.test", "gw.test"):
            assert KP.until(lambda h=host: who(ports.web, "/", h) == "w1"), host
        assert len(edge.app.control.cores()) == 1
        assert len({p.core for p in edge.app.providers if hasattr(p, "core")}) == 1
        for path in (
            "/api/v1/services",
            "/apis/discovery.k8s.io/v1/endpointslices",
            "/api/v1/secrets",
            "/api/v1/nodes",
        ):
            assert emu.count(path, watch=False) == 1, path
    finally:
        KP.stop_all([edge])


def test_edge_check_lists_what_the_gateway_provider_refuses(emu, tmp_path, whoami: Whoami) -> None:
    """``edge check`` with providers.kubernetesGateway lists the cluster once and prints
    each refusal with its object and reason (a listener on a port no entry point has),
    exits 1, and lists the routers of what it serves."""
    import sys

    import yaml

    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([
        {"name": "http", "port": ports.web, "protocol": "HTTP"},
        {"name": "nowhere", "port": 1, "protocol": "HTTP"},
    ]))  # fmt: skip
    backends(emu, v1=whoami)
    emu.create(http_route("web", [{"backendRefs": [to("v1")]}], ["web.test"]))
    path = tmp_path / "edge.yaml"
    path.write_text(yaml.safe_dump(static_config(emu, ports)))
    out = subprocess.run(
        [sys.executable, "-m", "edge", "check", "-c", str(path)],
        cwd=KP.ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "kubernetesgateway: Gateway default/gw: spec.listeners[nowhere]" in out.stdout, (
        out.stdout
    )
    assert "left out" in out.stdout
    assert re.search(
        r"^router httproute-default-web-.*@kubernetesgateway: enabled", out.stdout, re.M
    ), out.stdout


def test_status_address_sets_the_gateway_addresses(emu, api) -> None:
    """``statusAddress.service``: each Gateway's status.addresses are that Service's
    (a LoadBalancer's ingress addresses), following it as it changes; ``ip`` and
    ``hostname`` are written as given."""
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    lb = o.service("lb")
    lb["spec"]["type"] = "LoadBalancer"
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}
    emu.create(lb)
    static = static_config(emu, ports)
    static["providers"]["kubernetesGateway"]["statusAddress"] = {
        "service": {"name": "lb", "namespace": "default"}
    }
    edge = KP.InProcessEdge(static, tweak=_fast).start()
    try:
        assert KP.until(lambda: edge.ready() == 200, 10.0)

        def addresses() -> list:
            return gateway_status(api).get("addresses", [])

        assert KP.until(lambda: addresses() == [{"type": "IPAddress", "value": "198.51.100.7"}])
        lb["status"] = {"loadBalancer": {"ingress": [{"hostname": "lb.example.test"}]}}
        emu.update(lb)
        assert KP.until(lambda: addresses() == [{"type": "Hostname", "value": "lb.example.test"}])
    finally:
        KP.stop_all([edge])

    static["providers"]["kubernetesGateway"]["statusAddress"] = {"ip": "192.0.2.9"}
    edge = KP.InProcessEdge(static, tweak=_fast).start()
    try:
        assert KP.until(lambda: addresses() == [{"type": "IPAddress", "value": "192.0.2.9"}])
    finally:
        KP.stop_all([edge])
