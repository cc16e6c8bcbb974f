"""Ingress -> dynamic configuration: table tests over fixture files, one case per file.

Each ``tests/fixtures/kubernetes/ingress/*.yaml`` holds:

* ``objects``: Kubernetes objects as ``kubectl get -o yaml`` shows them; each is turned
  into JSON bytes and decoded by :mod:`edge.providers.kubernetes.objects`, as the API
  server's answers are;
* ``options`` (optional): the provider options (``ingressClass``, ``allowEmptyServices``,
  ``allowExternalNameServices``);
* ``file`` (optional): a dynamic configuration merged in as provider ``file`` before
  validation, for what Ingresses refer to across providers (middlewares, transports);
* ``expected`` (optional): the whole configuration, as msgspec dumps it (defaults left
  out); ``problems``: every problem, in order (default: none); ``selected``
  (optional): the Ingresses edge serves, as ``namespace/name``;
* ``disabled`` (optional): routers the runtime disables after the merge (default: none);
  every other router must validate;
* ``requests`` (optional): ``{host, path, tls, entryPoint}`` and the router that must
  answer (``null``: none), found with edge's rule engine from the validated routers, so
  a wrong priority fails here.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edge.config.diff import changed_servers
from edge.config.dynamic import Configuration, Server
from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import RuntimeConfig, build_runtime
from edge.errors import ConfigError
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.ingress import (
    IngressOptions,
    convert,
    endpoints_only,
)
from edge.providers.kubernetes.objects import ClusterState
from edge.rules import RequestView, RouteTable, canonical_host
from edge.tls.certs import TLSCertificates
from tests.fixtures.tls.pki import PKI

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kubernetes" / "ingress"
CASES = sorted(FIXTURES.glob("*.yaml"))
PROVIDER = "kubernetes"
ENTRY_POINTS = {"web": "tcp", "websecure": "tcp", "traefik": "tcp"}


class Request(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    path: str
    router: str | None
    host: str = ""
    tls: bool = False
    entry_point: str = "web"


class Case(msgspec.Struct, forbid_unknown_fields=True):
    objects: list[dict[str, Any]] = []
    options: IngressOptions = IngressOptions()
    file: dict[str, Any] | None = None
    expected: dict[str, Any] | None = None
    problems: list[dict[str, str]] = []
    selected: list[str] | None = None
    disabled: list[str] = []
    requests: list[Request] = []


def decode_objects(docs: list[dict[str, Any]]) -> ClusterState:
    """Each object through JSON bytes and the objects module's decoders."""
    return ClusterState.from_objects(docs_objects(docs))


def load(path: Path) -> Case:
    return msgspec.convert(msgspec.yaml.decode(path.read_bytes()), Case)


def validate(conf: Configuration, file: dict[str, Any] | None = None) -> RuntimeConfig:
    configs = {PROVIDER: conf}
    if file is not None:
        configs["file"] = decode_dynamic(file)
    return build_runtime(merge(configs), ENTRY_POINTS)


def route(rt: RuntimeConfig, req: Request) -> str | None:
    """The router that answers ``req``, from the enabled routers of ``rt``."""
    entries = [
        (name, info.rule, info.priority, name)
        for name, info in rt.http_routers.items()
        if info.status != "disabled"
        and req.entry_point in info.entry_points
        and (info.config.tls is not None) == req.tls
    ]
    assert all(rule is not None for _, rule, _, _ in entries)
    table: RouteTable[str] = RouteTable(entries)  # type: ignore[arg-type]
    view = RequestView(host=canonical_host(req.host), path=req.path, method="GET")
    return table.match(view)


def test_there_are_cases() -> None:
    assert len(CASES) >= 25


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path) -> None:
    case = load(path)
    result = convert(decode_objects(case.objects), case.options)

    problems = [msgspec.to_builtins(p) for p in result.problems]
    assert problems == case.problems
    if case.expected is not None:
        assert msgspec.to_builtins(result.configuration) == case.expected
    if case.selected is not None:
        assert sorted(f"{ns}/{name}" for ns, name in result.selected) == sorted(case.selected)

    rt = validate(result.configuration, case.file)
    disabled = sorted(n for n, info in rt.http_routers.items() if info.status == "disabled")
    assert disabled == sorted(f"{n}@{PROVIDER}" for n in case.disabled), rt.errors()
    assert all(s.status != "disabled" for s in rt.http_services.values()), rt.errors()

    for req in case.requests:
        expected = None if req.router is None else f"{req.router}@{PROVIDER}"
        assert route(rt, req) == expected, req


def test_conversion_is_deterministic() -> None:
    for path in CASES:
        case = load(path)
        first = convert(decode_objects(case.objects), case.options)
        again = convert(decode_objects(list(reversed(case.objects))), case.options)
        assert first == again, path.stem


# --- TLS with a real certificate -------------------------------------------------------------


def test_secret_becomes_a_certificate_served_by_sni() -> None:
    pki = PKI()
    pair = pki.issue("secure.example.com")
    b64 = base64.b64encode
    docs = [
        ingress("app", rules=[rule("secure.example.com", path("/", "Prefix", "web"))],
                tls=[{"hosts": ["secure.example.com"], "secretName": "tls-a"}]),
        service("web", ports=[{"port": 80}]),
        endpoints("web", ["10.0.0.1"], ports=[{"port": 8080, "name": ""}]),
        {"kind": "Secret", "metadata": {"name": "tls-a", "namespace": "default"},
         "type": "kubernetes.io/tls",
         "data": {"tls.crt": b64(pair.cert_pem.encode()).decode(),
                  "tls.key": b64(pair.key_pem.encode()).decode()}},
    ]  # fmt: skip
    result = convert(decode_objects(docs))
    assert result.problems == []
    certs = TLSCertificates(merge({PROVIDER: result.configuration}).tls)
    assert certs.errors == ()
    served = certs.certificate_for("secure.example.com")
    assert served is not None and served.fingerprint == pair.fingerprint
    assert certs.certificate_for("other.example.com") is None


# --- object decoding ---------------------------------------------------------------------------


def test_decoding_ignores_unknown_fields_and_keeps_only_tls_data() -> None:
    raw = (
        b'{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"n",'
        b'"uid":"x","managedFields":[{"manager":"kubectl"}]},"type":"kubernetes.io/tls",'
        b'"data":{"tls.crt":"Y3J0","tls.key":"a2V5","password":"c2VjcmV0"}}'
    )
    secret = objects.decode("Secret", raw)
    assert secret.metadata.key == ("n", "s")
    assert (secret.data.tls_crt, secret.data.tls_key) == (b"crt", b"key")
    assert b"secret" not in msgspec.json.encode(secret)


def test_decoding_errors_name_the_kind_and_the_key() -> None:
    with pytest.raises(ConfigError, match=r"Service.*\$\.spec\.ports\[0\]\.port"):
        objects.decode("Service", b'{"spec":{"ports":[{"port":"http"}]}}')
    with pytest.raises(ValueError, match="unknown kind 'Pod'"):
        objects.decode("Pod", b"{}")


def test_list_and_watch_events() -> None:
    listing = objects.decode_list(
        "EndpointSlice",
        b'{"kind":"EndpointSliceList","metadata":{"resourceVersion":"42","continue":"c1"},'
        b'"items":[{"metadata":{"name":"a-1","namespace":"d",'
        b'"labels":{"kubernetes.io/service-name":"a"}},"addressType":"IPv4",'
        b'"endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true}}],'
        b'"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}]}',
    )
    assert listing.metadata.resource_version == "42"
    assert listing.metadata.continue_ == "c1"
    assert listing.items[0].service_name == "a"
    assert listing.items[0].endpoints[0].conditions.ready is True
    assert listing.items[0].endpoints[0].conditions.terminating is None

    kind, obj = objects.decode_event(
        "Ingress",
        b'{"type":"BOOKMARK","object":{"kind":"Ingress","metadata":{"resourceVersion":"7"}}}',
    )
    assert (kind, obj.metadata.resource_version) == ("BOOKMARK", "7")
    kind, status = objects.decode_event(
        "Ingress",
        b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}',
    )
    assert kind == "ERROR" and isinstance(status, objects.Status) and status.code == 410


# --- endpoint churn ---------------------------------------------------------------------------


def _basic(ready: list[str]) -> list[dict[str, Any]]:
    return [
        ingress("app", rules=[rule("a.example.com", path("/", "Prefix", "web"))]),
        service("web", ports=[{"port": 80}]),
        endpoints("web", ready, ports=[{"port": 8080, "name": ""}]),
    ]


def test_endpoints_only_and_in_place_updates() -> None:
    before = decode_objects(_basic(["10.0.0.1"]))
    after = decode_objects(_basic(["10.0.0.2", "10.0.0.1"]))
    assert endpoints_only(before, after)
    assert not endpoints_only(before, before)
    other_service = decode_objects(
        [*_basic(["10.0.0.1"])[:2], service("web2", ports=[{"port": 80}])]
    )
    assert not endpoints_only(before, other_service)
    other_ingress = decode_objects(
        [ingress("app", rules=[rule("b.example.com", path("/", "Prefix", "web"))]),
         *_basic(["10.0.0.1"])[1:]]
    )  # fmt: skip
    assert not endpoints_only(before, other_ingress)

    # What endpoints_only promises the provider: the new configuration differs in server
    # lists only, so the data plane can update them in place.
    old, new = convert(before).configuration, convert(after).configuration
    assert changed_servers(old, new) == ["default-web-80"]
    assert new.http is not None
    assert new.http.services["default-web-80"].load_balancer.servers == [  # type: ignore[union-attr]
        Server(url="http://10.0.0.1:8080"),
        Server(url="http://10.0.0.2:8080"),
    ]
    # Without allowEmptyServices, the last endpoint gone removes the route: a full change.
    assert changed_servers(old, convert(decode_objects(_basic([]))).configuration) is None
    allowed = IngressOptions(allow_empty_services=True)
    empty = convert(decode_objects(_basic([])), allowed).configuration
    assert changed_servers(convert(before, allowed).configuration, empty) == ["default-web-80"]


def test_snapshot_keys_cluster_scoped_classes_by_empty_namespace() -> None:
    ic = objects.decode(
        "IngressClass",
        b'{"metadata":{"name":"edge"},"spec":{"controller":"edge.dev/ingress-controller"}}',
    )
    docs = _basic(["10.0.0.1"])
    docs[0]["spec"]["ingressClassName"] = "edge"
    without = decode_objects(docs)
    assert convert(without).selected == frozenset()
    # As KubeClient.snapshot() hands the cache over: kind -> {(namespace, name): object}.
    tables = {
        "Ingress": dict(without.ingresses),
        "Service": dict(without.services),
        "EndpointSlice": dict(without.endpoint_slices),
        "IngressClass": {("", "edge"): ic},
    }
    state = ClusterState.from_snapshot(tables)
    assert state == ClusterState.from_objects([*docs_objects(docs), ic])
    assert convert(state).selected == {("default", "app")}


def docs_objects(docs: list[dict[str, Any]]) -> list[Any]:
    return [objects.decode(doc["kind"], msgspec.json.encode(doc)) for doc in docs]


# --- scale ----------------------------------------------------------------------------------------


def scale_objects(ingresses: int, endpoints_per_service: int) -> list[dict[str, Any]]:
    """``ingresses`` Ingresses, each with its own host, two paths and one Service,
    ``endpoints_per_service`` ready endpoints each, in one EndpointSlice per Service."""
    docs: list[dict[str, Any]] = []
    for i in range(ingresses):
        ns = f"ns{i % 50}"
        docs.append(
            ingress(f"app{i}", ns=ns, rules=[rule(f"app{i}.example.com",
                    path("/", "Prefix", f"svc{i}"), path("/api", "Exact", f"svc{i}", port="http"))])
        )  # fmt: skip
        docs.append(service(f"svc{i}", ns=ns, ports=[{"port": 80, "name": "http"}]))
        addresses = [f"10.{i // 250}.{i % 250}.{k}" for k in range(endpoints_per_service)]
        docs.append(endpoints(f"svc{i}", addresses, ns=ns, ports=[{"port": 8080, "name": "http"}]))
    return docs


def test_conversion_at_scale() -> None:
    """5,000 Ingresses, 5,000 Services, 20,000 endpoints: converted well under a second here
    (the budget from LIST to the first router swap is 2 s; see loadtest/kube_scale.py)."""
    state = decode_objects(scale_objects(5000, 4))
    start = time.perf_counter()
    result = convert(state)
    elapsed = time.perf_counter() - start
    assert result.problems == []
    http = result.configuration.http
    assert http is not None and len(http.routers) == 10_000 and len(http.services) == 5000
    assert (
        sum(len(s.load_balancer.servers) for s in http.services.values() if s.load_balancer)
        == 20_000
    )
    assert elapsed < 3.0, elapsed


# --- object builders for the tests above (fixtures write the same objects in YAML) ------------


def ingress(
    name: str,
    *,
    ns: str = "default",
    rules: list[dict[str, Any]] | None = None,
    tls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"rules": rules or []}
    if tls:
        spec["tls"] = tls
    return {"kind": "Ingress", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def rule(host: str, *paths: dict[str, Any]) -> dict[str, Any]:
    return {"host": host, "http": {"paths": list(paths)}}


def path(p: str, path_type: str, svc: str, port: int | str = 80) -> dict[str, Any]:
    backend_port = {"name": port} if isinstance(port, str) else {"number": port}
    return {"path": p, "pathType": path_type,
            "backend": {"service": {"name": svc, "port": backend_port}}}  # fmt: skip


def service(name: str, *, ns: str = "default", ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": ports}}  # fmt: skip


def endpoints(
    svc: str, ready: list[str], *, ns: str = "default", ports: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "metadata": {"name": f"{svc}-abc", "namespace": ns,
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in ready],
        "ports": ports,
    }  # fmt: skip
