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
import re
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.config.diff import changed_servers
from edge.config.dynamic import Configuration, Server
from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import RuntimeConfig, build_runtime
from edge.config.static import KubernetesIngressConfig
from edge.errors import ConfigError
from edge.providers.kubernetes import ingress as conversion
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.endpoints import HOST_RE
from edge.providers.kubernetes.ingress import (
    IngressOptions,
    convert,
    endpoints_only,
    update_endpoints,
)
from edge.providers.kubernetes.objects import ClusterState
from edge.rules import RequestView, RouteTable, canonical_host
from edge.tls.certs import TLSCertificates
from loadtest.kube_scale import decode_state, list_bodies
from tests import fuzz
from tests.fixtures.tls.pki import PKI

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "kubernetes" / "ingress"
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


def validate(
    conf: Configuration, file: dict[str, Any] | None = None, default_syntax: str = "v3"
) -> RuntimeConfig:
    configs = {PROVIDER: conf}
    if file is not None:
        configs["file"] = decode_dynamic(file)
    return build_runtime(merge(configs), ENTRY_POINTS, default_rule_syntax=default_syntax)


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
    # Each problem but a Secret's has a stand-in: a disabled router whose error it is
    # (the API shows it where the route would be); the fixtures hold what is served.
    http = result.configuration.http
    stand_ins = {n: r for n, r in (http.routers if http else {}).items() if r.problems}
    assert sorted(p for r in stand_ins.values() for p in r.problems) == sorted(
        str(p) for p in result.problems if not p.kind.startswith("secret-")
    )
    assert all(n.endswith("-left-out") or "-left-out-" in n for n in stand_ins)
    if case.expected is not None:
        served = msgspec.to_builtins(result.configuration)
        for name in stand_ins:
            del served["http"]["routers"][name]
        if (
            "http" in served
            and not served["http"].get("routers")
            and "routers" not in case.expected.get("http", {})
        ):
            served["http"].pop("routers", None)
        assert served == case.expected
    if case.selected is not None:
        assert sorted(f"{ns}/{name}" for ns, name in result.selected) == sorted(case.selected)

    # The routers say ruleSyntax v3: core.defaultRuleSyntax v2 changes nothing.
    for default_syntax in ("v3", "v2"):
        rt = validate(result.configuration, case.file, default_syntax)
        disabled = sorted(
            n
            for n, info in rt.http_routers.items()
            if info.status == "disabled" and n.split("@")[0] not in stand_ins
        )
        assert disabled == sorted(f"{n}@{PROVIDER}" for n in case.disabled), rt.errors()
        for name in stand_ins:
            info = rt.http_routers[f"{name}@{PROVIDER}"]
            assert info.status == "disabled" and info.errors == list(stand_ins[name].problems)
        assert all(s.status != "disabled" for s in rt.http_services.values()), rt.errors()
        assert all(
            info.rule_syntax == (info.config.rule_syntax or "missing")
            for info in rt.http_routers.values()
            if info.rule
        )

        for req in case.requests:
            expected = None if req.router is None else f"{req.router}@{PROVIDER}"
            assert route(rt, req) == expected, (default_syntax, req)


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


def test_update_endpoints_rebuilds_only_what_changed() -> None:
    docs = _basic(["10.0.0.1"])
    docs.append(ingress("other", rules=[rule("b.example.com", path("/", "Prefix", "web2"))]))
    docs.append(service("web2", ports=[{"port": 80}]))
    docs.append(endpoints("web2", ["10.0.1.1"], ports=[{"port": 8080, "name": ""}]))
    old = decode_objects(docs)
    previous = convert(old)
    slices = dict(old.endpoint_slices)
    changed = endpoints("web", ["10.0.0.1", "10.0.0.9"], ports=[{"port": 8080, "name": ""}])
    slices[("default", "web-abc")] = docs_objects([changed])[0]
    new = msgspec.structs.replace(old, endpoint_slices=slices)

    updated = update_endpoints(previous, old, new)
    assert updated == convert(new)
    assert updated is not None and previous.configuration.http is not None
    http = updated.configuration.http
    assert http is not None
    assert http.routers is previous.configuration.http.routers  # nothing else rebuilt
    assert (
        http.services["default-web2-80"] is previous.configuration.http.services["default-web2-80"]
    )

    # More than endpoints changed, or a route must appear or go: a full conversion.
    assert update_endpoints(previous, old, decode_objects(docs[:-1])) is None  # web2's last
    other = msgspec.structs.replace(new, services={})
    assert update_endpoints(previous, old, other) is None
    slices[("default", "web-abc")] = docs_objects([endpoints("web", [], ports=[])])[0]
    gone = msgspec.structs.replace(old, endpoint_slices=slices)
    assert update_endpoints(previous, old, gone) is None
    allowed = IngressOptions(allow_empty_services=True)
    assert update_endpoints(convert(old, allowed), old, gone, allowed) == convert(gone, allowed)


@settings(max_examples=fuzz.examples(full=100, quick=30), deadline=None)
@given(
    steps=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", "c"]),
                st.lists(st.sampled_from(["10.0.0.1", "10.0.0.2", "fd00::1"]), unique=True),
                st.booleans(),
            ),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=4,
    ),
    allow_empty=st.booleans(),
)
def test_update_endpoints_equals_a_full_conversion(
    steps: list[list[tuple[str, list[str], bool]]], allow_empty: bool
) -> None:
    """Random EndpointSlice churn (slices replaced, emptied, removed) on three Services:
    after every step, update_endpoints gives what convert gives, or None."""
    options = IngressOptions(allow_empty_services=allow_empty)
    docs = []
    for svc in ("a", "b", "c"):
        docs.append(ingress(svc, rules=[rule(f"{svc}.example.com", path("/", "Prefix", svc))]))
        docs.append(service(svc, ports=[{"port": 80}]))
        docs.append(endpoints(svc, ["10.0.0.1"], ports=[{"port": 8080, "name": ""}]))
    state = decode_objects(docs)
    previous = convert(state, options)
    for step in steps:
        slices = dict(state.endpoint_slices)
        for svc, addresses, keep in step:
            key = ("default", f"{svc}-abc")
            if keep:
                doc = endpoints(svc, addresses, ports=[{"port": 8080, "name": ""}])
                doc["addressType"] = ""  # any family
                slices[key] = docs_objects([doc])[0]
            else:
                slices.pop(key, None)
        new = msgspec.structs.replace(state, endpoint_slices=slices)
        full = convert(new, options)
        updated = update_endpoints(previous, state, new, options)
        if updated is not None:
            assert updated == full
            assert changed_servers(previous.configuration, updated.configuration) is not None
        elif allow_empty and endpoints_only(state, new):
            raise AssertionError("with allowEmptyServices an endpoints-only change is in place")
        state, previous = new, full


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


def test_conversion_at_scale() -> None:
    """1,000 Ingresses (two paths each, one in ten with TLS), 1,000 Services, 4,000
    endpoints, from LIST bodies as loadtest/kube_scale.py makes them: all served. The
    time bound only catches a quadratic slip on this shared machine; the script measures
    the 5,000-Ingress case."""
    state = decode_state(list_bodies(1000, 4))
    start = time.perf_counter()
    result = convert(state)
    elapsed = time.perf_counter() - start
    assert result.problems == []
    assert len(result.selected) == 1000
    http, tls = result.configuration.http, result.configuration.tls
    assert http is not None and tls is not None
    assert len(http.routers) == 2200 and len(http.services) == 1000
    assert len(tls.certificates) == 100
    servers = [
        s for svc in http.services.values() if svc.load_balancer for s in svc.load_balancer.servers
    ]
    assert len(servers) == 4000
    assert elapsed < 5.0, elapsed


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


# --- properties -------------------------------------------------------------------------------

SEGMENTS = st.sampled_from(["a", "ab", "b", "ü"])
PATHS = st.builds(
    lambda segs, slash: "/" + "/".join(segs) + ("/" if slash and segs else ""),
    st.lists(SEGMENTS, max_size=2),
    st.booleans(),
)
HOST = "h.example.com"


def spec_winner(entries: list[tuple[str, str, str]], host: str, req: str) -> int | None:
    """The Ingress spec's answer, written plainly: among the request host's paths (or, if
    none matches, the host-less ones) the longest match wins, Exact before Prefix."""
    for wanted in (host, ""):
        best: tuple[int, int, int] | None = None
        for i, (h, path_type, p) in enumerate(entries):
            if h != wanted:
                continue
            if path_type == "Exact":
                hit, size = req == p, len(p)
            else:
                base = p.rstrip("/")
                hit, size = (not base or req == base or req.startswith(base + "/")), len(base)
            key = (size, path_type == "Exact", i)
            if hit and (best is None or key[:2] > best[:2]):
                best = key
        if best is not None:
            return best[2]
    return None


@settings(max_examples=fuzz.examples(full=200, quick=50), deadline=None)
@given(
    entries=st.lists(
        st.tuples(st.sampled_from([HOST, ""]), st.sampled_from(["Exact", "Prefix"]), PATHS),
        min_size=1,
        max_size=8,
        unique_by=lambda e: (e[0], e[1], e[2] if e[1] == "Exact" else e[2].rstrip("/")),
    ),
    requests=st.lists(st.tuples(st.sampled_from([HOST, "other.example.com"]), PATHS), max_size=8),
)
def test_routing_follows_the_ingress_spec(
    entries: list[tuple[str, str, str]], requests: list[tuple[str, str]]
) -> None:
    """Random paths on one host and on no host, each in its own Ingress: the router edge's
    rule engine picks is the one the spec's precedence names, for every request."""
    docs: list[dict[str, Any]] = [
        service("web", ports=[{"port": 80}]),
        endpoints("web", ["10.0.0.1"], ports=[{"port": 8080, "name": ""}]),
    ]
    for i, (host, path_type, p) in enumerate(entries):
        doc = ingress(f"i{i}", rules=[rule(host, path(p, path_type, "web"))])
        docs.append(doc)
    result = convert(decode_objects(docs))
    assert result.problems == []
    rt = validate(result.configuration)
    assert [i.errors for i in rt.http_routers.values() if i.status == "disabled"] == []
    owner = {
        f"{name}@{PROVIDER}": int(name.split("-")[1][1:])
        for name in result.configuration.http.routers  # type: ignore[union-attr]
    }
    # Each rule's own path, and just past it, besides the random requests.
    near = []
    for h, _, p in entries:
        base = p.rstrip("/")
        near += [
            (h or HOST, q) for q in (base or "/", base + "/", base + "/z", (base or "/") + "z")
        ]
    for host, req_path in [*requests, *near]:
        got = route(rt, Request(host=host, path=req_path, router=None))
        assert (None if got is None else owner[got]) == spec_winner(entries, host, req_path)


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    host=st.one_of(TEXT, st.sampled_from(["*.a.example", "a.example", "", "*.", "A.Example"])),
    paths=st.lists(
        st.tuples(st.sampled_from(["Exact", "Prefix", "ImplementationSpecific", "", "x"]), TEXT),
        max_size=4,
    ),
    annotations=st.dictionaries(
        st.sampled_from(
            [
                f"edge.ingress.kubernetes.io/router.{k}"
                for k in ("priority", "tls", "entrypoints", "middlewares", "x")
            ]
        ),
        TEXT,
        max_size=2,
    ),
)
def test_nothing_written_into_an_ingress_breaks_the_conversion(
    host: str, paths: list[tuple[str, str]], annotations: dict[str, str]
) -> None:
    """Whatever the host, paths and annotations: no exception, every path is a router or
    a problem, and every router the conversion emits compiles and validates."""
    doc = ingress("fuzz", rules=[rule(host, *(path(p, t, "web") for t, p in paths))])
    doc["metadata"]["annotations"] = annotations
    docs = [doc, service("web", ports=[{"port": 80}]),
            endpoints("web", ["10.0.0.1"], ports=[{"port": 8080, "name": ""}])]  # fmt: skip
    result = convert(decode_objects(docs))
    http = result.configuration.http
    assert http is not None
    if not result.problems:  # then every path is a route
        assert len({r.rule for r in http.routers.values()}) == len(paths)
    rt = build_runtime(merge({PROVIDER: result.configuration}), ENTRY_POINTS)
    for info in rt.http_routers.values():
        if info.config.problems:  # a stand-in for what was left out: disabled with it
            assert info.status == "disabled" and info.errors[:1] == info.config.problems
            assert all("does not exist" in e for e in info.errors[1:]), info.errors  # entryPoints
            continue
        assert info.rule is not None, info.errors
        assert all("does not exist" in e for e in info.errors), info.errors


def test_options_from_the_static_configuration_and_problem_text() -> None:
    static = msgspec.convert(
        {"ingressClass": "public", "allowEmptyServices": True, "kubeconfig": "/k"},
        KubernetesIngressConfig,
    )
    assert IngressOptions.from_config(static) == IngressOptions(
        ingress_class="public", allow_empty_services=True
    )
    docs = [ingress("app", rules=[rule("a.example.com", path("/", "Prefix", "gone"))])]
    (problem,) = convert(decode_objects(docs)).problems
    assert str(problem) == (
        "ingress default/app: spec.rules[0].http.paths[0] (host a.example.com, path /): "
        "service default/gone not found"
    )


@settings(max_examples=fuzz.examples(full=500, quick=100), deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("aZ09-./_*~ \u00e9:"), max_size=16),
    host=st.text(alphabet=st.sampled_from("ab09-.*"), max_size=12),
)
def test_names_and_hosts_read_as_their_regexps_say(text: str, host: str) -> None:
    """Names: every run of characters other than ASCII letters and digits is one '-',
    none at either end; hosts: DNS labels (alphanumerics, inner hyphens), '*.' first."""
    assert conversion._normalize(text) == re.sub(r"[^0-9A-Za-z]+", "-", text).strip("-")
    label = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
    dns = re.fullmatch(rf"(?:\*\.)?{label}(?:\.{label})*", host) is not None
    assert (HOST_RE.fullmatch(host) is not None) == dns
