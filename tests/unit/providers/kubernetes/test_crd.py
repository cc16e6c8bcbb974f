"""Traefik's CRDs -> dynamic configuration: table tests over fixture files, one case per file.

Each ``tests/fixtures/kubernetes/crd/*.yaml`` holds:

* ``objects``: Kubernetes objects as ``kubectl get -o yaml`` shows them; each is turned
  into JSON bytes and decoded by :mod:`edge.providers.kubernetes.objects`, as the API
  server's answers are;
* ``options`` (optional): the provider options (:class:`CRDOptions`);
* ``file`` (optional): a dynamic configuration merged in as provider ``file`` before
  validation, for what routes refer to across providers;
* ``expected``: the whole configuration as msgspec dumps it (defaults left out), less
  the refused routes' stand-in routers; ``problems``: every problem, in order (default:
  none), each published on its route's stand-in (a router named as the route's would
  be, holding the problem, which validation disables with it as its error);
* ``disabled`` (optional): routers the runtime disables besides the stand-ins.

Every case then goes through edge's own validation (merge and ``build_runtime``):
every other router, service and middleware comes out enabled.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.config.diff import changed_servers
from edge.config.durations import enc_hook
from edge.config.dynamic import Configuration
from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import RuntimeConfig, build_runtime
from edge.errors import ConfigError
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.crd import (
    PROVIDER,
    CRDOptions,
    _normalize,
    convert,
    update_endpoints,
)
from edge.providers.kubernetes.objects import ClusterState
from tests import fuzz
from tests.fixtures.tls.pki import PKI

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "kubernetes" / "crd"
CASES = sorted(FIXTURES.glob("*.yaml"))
ENTRY_POINTS = {"web": "tcp", "websecure": "tcp", "dns": "udp"}
SECTIONS = ("http", "tcp", "udp")


class Case(msgspec.Struct, forbid_unknown_fields=True):
    objects: list[dict[str, Any]] = []
    options: CRDOptions = CRDOptions()
    file: dict[str, Any] | None = None
    expected: dict[str, Any] = {}
    problems: list[dict[str, str]] = []
    disabled: list[str] = []


def load(path: Path) -> Case:
    return msgspec.convert(msgspec.yaml.decode(path.read_bytes()), Case)


def decode_objects(docs: list[dict[str, Any]]) -> ClusterState:
    """Each object through JSON bytes and the objects module's decoders."""
    return ClusterState.from_objects(
        [objects.decode(doc["kind"], msgspec.json.encode(doc)) for doc in docs]
    )


def validate(conf: Configuration, file: dict[str, Any] | None = None) -> RuntimeConfig:
    configs = {PROVIDER: conf}
    if file is not None:
        configs["file"] = decode_dynamic(file)
    return build_runtime(merge(configs), ENTRY_POINTS)


def stand_ins(conf: Configuration) -> dict[str, list[str]]:
    """(section, router name) of every router holding a problem -> its problems."""
    found = {}
    for section in SECTIONS:
        part = getattr(conf, section)
        for name, router in (part.routers if part else {}).items():
            if router.problems:
                found[f"{section}/{name}"] = list(router.problems)
    return found


def test_there_are_cases() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path) -> None:
    case = load(path)
    result = convert(decode_objects(case.objects), case.options)

    assert [msgspec.to_builtins(p) for p in result.problems] == case.problems
    refused = stand_ins(result.configuration)
    route_problems = [str(p) for p in result.problems if p.kind.startswith("IngressRoute")]
    assert sorted(p for ps in refused.values() for p in ps) == sorted(route_problems)

    served = msgspec.to_builtins(result.configuration, enc_hook=enc_hook)
    for key in refused:
        section, name = key.split("/", 1)
        del served[section]["routers"][name]
        if not served[section]["routers"]:
            del served[section]["routers"]
        if not served[section]:
            del served[section]
    assert served == case.expected

    rt = validate(result.configuration, case.file)
    tables = {"http": rt.http_routers, "tcp": rt.tcp_routers, "udp": rt.udp_routers}
    disabled = sorted(
        f"{section}/{name.split('@')[0]}"
        for section, routers in tables.items()
        for name, info in routers.items()
        if info.status == "disabled"
    )
    assert disabled == sorted([*refused, *case.disabled]), rt.errors()
    for key, problems in refused.items():
        section, name = key.split("/", 1)
        info = tables[section][f"{name}@{PROVIDER}"]
        assert info.errors[: len(problems)] == problems
    for services in (rt.http_services, rt.tcp_services, rt.udp_services):
        assert all(s.status != "disabled" for s in services.values()), rt.errors()
    assert all(m.status != "disabled" for m in rt.http_middlewares.values()), rt.errors()
    assert all(m.status != "disabled" for m in rt.tcp_middlewares.values()), rt.errors()


def test_conversion_is_deterministic() -> None:
    for path in CASES:
        case = load(path)
        first = convert(decode_objects(case.objects), case.options)
        again = convert(decode_objects(list(reversed(case.objects))), case.options)
        assert first == again, path.stem


def test_routers_come_out_enabled_from_edges_validation() -> None:
    """HTTP, TLS passthrough and UDP from one snapshot, through merge and build_runtime:
    each router enabled, its service's servers as the EndpointSlices say."""
    case = load(FIXTURES / "http-tcp-udp-together.yaml")
    result = convert(decode_objects(case.objects), case.options)
    assert result.problems == []
    rt = validate(result.configuration)
    routers = [*rt.http_routers.values(), *rt.tcp_routers.values(), *rt.udp_routers.values()]
    assert len(routers) == 3
    assert all(info.status == "enabled" for info in routers), rt.errors()
    tcp = next(iter(rt.tcp_routers.values()))
    assert tcp.config.tls is not None and tcp.config.tls.passthrough
    udp = next(iter(rt.udp_services.values()))
    assert udp.config.load_balancer is not None
    assert [s.address for s in udp.config.load_balancer.servers] == ["10.244.2.4:5353"]


def test_a_secret_becomes_the_routes_certificate() -> None:
    pki = PKI()
    pair = pki.issue("secure.example.com")
    b64 = base64.b64encode
    docs = [
        *load(FIXTURES / "http-basic.yaml").objects,
        {"kind": "Secret", "metadata": {"name": "tls-a", "namespace": "default"},
         "type": "kubernetes.io/tls",
         "data": {"tls.crt": b64(pair.cert_pem.encode()).decode(),
                  "tls.key": b64(pair.key_pem.encode()).decode()}},
    ]  # fmt: skip
    route = docs[0]
    route["spec"]["tls"] = {"secretName": "tls-a"}
    result = convert(decode_objects(docs))
    assert result.problems == []
    tls = result.configuration.tls
    assert tls is not None and [c.cert_file for c in tls.certificates] == [pair.cert_pem]
    http = result.configuration.http
    assert http is not None
    assert all(r.tls is not None for r in http.routers.values())
    rt = validate(result.configuration)
    assert all(info.status == "enabled" for info in rt.http_routers.values()), rt.errors()


# --- decoding ---------------------------------------------------------------------------------


def test_a_malformed_object_is_skipped_and_named() -> None:
    body = msgspec.json.encode(
        {
            "metadata": {"resourceVersion": "7"},
            "items": [
                {"metadata": {"name": "good", "namespace": "default"},
                 "spec": {"routes": [{"match": "Host(`a`)"}]}, "unknownField": {"x": 1}},
                {"metadata": {"name": "bad", "namespace": "default"},
                 "spec": {"routes": "not a list"}},
                {"metadata": {"name": "good2", "namespace": "default"}},
            ],
        }
    )  # fmt: skip
    listed, problems = objects.decode_items("IngressRoute", body)
    assert [ir.metadata.name for ir in listed.items] == ["good", "good2"]
    assert listed.metadata.resource_version == "7"
    assert len(problems) == 1
    assert problems[0].startswith("IngressRoute default/bad: cannot decode, skipped:")
    assert "$.spec.routes" in problems[0]


def test_a_list_that_is_not_a_list_is_an_error() -> None:
    with pytest.raises(ConfigError, match="IngressRouteList"):
        objects.decode_items("IngressRoute", b'{"items": 3}')


@pytest.mark.parametrize("kind", sorted(objects.CRD_KINDS))
def test_every_crd_kind_decodes_its_metadata_alone(kind: str) -> None:
    obj = objects.decode(kind, b'{"metadata": {"name": "x", "namespace": "ns"}}')
    assert obj.metadata.key == ("ns", "x")


# --- endpoints-only updates -------------------------------------------------------------------

SHARED = FIXTURES / "endpoints-shared-by-every-kind.yaml"
WEB_ALONE = "default-app-629990b524bf9a1a8d27"  # Host(`a.example.com`): web alone
TCP_WEB = "default-db-673acf455cb2dab0b43a"


def with_slices(state: ClusterState, *docs: dict[str, Any]) -> ClusterState:
    """``state`` with these EndpointSlices replacing (or adding to) its own; every other
    slice object and table passed on as it is, as a snapshot does."""
    slices = dict(state.endpoint_slices)
    for doc in docs:
        eps = objects.decode("EndpointSlice", msgspec.json.encode(doc))
        slices[eps.metadata.key] = eps
    return msgspec.structs.replace(state, endpoint_slices=slices)


def slice_doc(svc: str, addresses: list[str], *, udp: bool = False, name: str = "") -> dict:
    """The slice ``<svc>-1`` (or ``name``) of the shared fixture's Service ``svc``."""
    port = (
        {"name": "dns", "port": 5353, "protocol": "UDP"}
        if udp
        else {"name": "http", "port": 8080, "protocol": "TCP"}
    )
    return {"kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": name or f"{svc}-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": svc}},
            "endpoints": [{"addresses": [a]} for a in addresses], "ports": [port]}  # fmt: skip


def shared() -> ClusterState:
    return decode_objects(load(SHARED).objects)


def test_update_endpoints_rebuilds_only_the_changed_services_load_balancers() -> None:
    """web's slice changes: update_endpoints equals a whole conversion, and only web's
    load balancers (alone, as the weighted child shared with the TraefikService, behind
    the IngressRouteTCP) are new objects; routers, weighted services, api's and dns's
    load balancers are the previous conversion's own."""
    old = shared()
    previous = convert(old)
    assert previous.problems == []
    new = with_slices(old, slice_doc("web", ["10.244.0.6", "10.244.0.9"]))

    updated = update_endpoints(previous, old, new)
    assert updated == convert(new)
    assert updated is not None
    before, after = previous.configuration, updated.configuration
    assert before.http and after.http and before.tcp and after.tcp
    assert after.http.routers is before.http.routers
    assert after.tcp.routers is before.tcp.routers
    assert after.udp is before.udp
    rebuilt = sorted(n for n, svc in after.http.services.items()
                     if svc is not before.http.services[n])  # fmt: skip
    assert rebuilt == [WEB_ALONE, "default-web-80"]
    lb = after.http.services[WEB_ALONE].load_balancer
    assert lb is not None
    assert [s.url for s in lb.servers] == ["http://10.244.0.6:8080", "http://10.244.0.9:8080"]
    tcp = after.tcp.services[TCP_WEB].load_balancer
    assert tcp is not None
    assert [s.address for s in tcp.servers] == ["10.244.0.6:8080", "10.244.0.9:8080"]
    # The HTTP part differs in server lists alone, which the data plane updates in place.
    in_place = changed_servers(before, msgspec.structs.replace(after, tcp=before.tcp))
    assert in_place is not None and sorted(in_place) == rebuilt


def test_update_endpoints_rebuilds_udp_load_balancers() -> None:
    old = shared()
    new = with_slices(old, slice_doc("dns", ["10.244.2.6"], udp=True))
    updated = update_endpoints(convert(old), old, new)
    assert updated == convert(new)
    assert updated is not None and updated.configuration.udp is not None
    lb = updated.configuration.udp.services["default-dns-0"].load_balancer
    assert lb is not None and [s.address for s in lb.servers] == ["10.244.2.6:5353"]


def test_update_endpoints_of_a_slice_no_route_reads_changes_nothing() -> None:
    old = shared()
    previous = convert(old)
    new = with_slices(old, slice_doc("unused", ["10.244.9.9"]))
    assert update_endpoints(previous, old, new) == previous == convert(new)


def test_update_endpoints_says_when_a_whole_conversion_is_needed() -> None:
    old = shared()
    previous = convert(old)
    # Nothing changed, or more than EndpointSlices: another table differs.
    assert update_endpoints(previous, old, old) is None
    moved = with_slices(old, slice_doc("web", ["10.244.0.9"]))
    assert update_endpoints(previous, old, msgspec.structs.replace(moved, services={})) is None
    routes = dict(old.ingress_routes)
    routes.pop(("default", "app"))
    assert (
        update_endpoints(previous, old, msgspec.structs.replace(moved, ingress_routes=routes))
        is None
    )
    # web's last ready endpoint gone: its routes go (without allowEmptyServices).
    gone = with_slices(old, slice_doc("web", []))
    assert update_endpoints(previous, old, gone) is None
    assert convert(gone).problems  # as the whole conversion says
    # ...and a ready endpoint back brings them back: a refused Service is not patched.
    refused = convert(gone)
    assert update_endpoints(refused, gone, old) is None
    # With allowEmptyServices, both are endpoint changes like any other.
    allow = CRDOptions(allow_empty_services=True)
    empty = update_endpoints(convert(old, allow), old, gone, allow)
    assert empty == convert(gone, allow)
    assert update_endpoints(convert(gone, allow), gone, old, allow) == convert(old, allow)


def test_update_endpoints_keeps_native_lb_and_external_name_servers() -> None:
    """nativeLB load balancers hold the cluster IP, whatever the endpoints say."""
    old = shared()
    options = CRDOptions(native_lb_by_default=True)
    previous = convert(old, options)
    new = with_slices(old, slice_doc("web", ["10.244.0.9"]))
    updated = update_endpoints(previous, old, new, options)
    assert updated == convert(new, options) == previous


def test_update_endpoints_rebuilds_a_failovers_load_balancers_with_their_checks() -> None:
    """The fallback's slice changes under a failover TraefikService: update_endpoints
    equals a whole conversion; the failover and the main Service's load balancer (with
    its healthCheck) are the previous objects, the fallback's is rebuilt."""
    case = load(FIXTURES / "http-traefikservice-failover.yaml")
    old = decode_objects(case.objects)
    previous = convert(old, case.options)
    new = with_slices(old, slice_doc("spare", ["10.244.0.8"], name="spare-abc12"))
    updated = update_endpoints(previous, old, new, case.options)
    assert updated is not None and updated == convert(new, case.options)
    before = previous.configuration.http
    after = updated.configuration.http
    assert before is not None and after is not None
    assert after.services["default-ha"] is before.services["default-ha"]
    assert after.services["default-primary-80"] is before.services["default-primary-80"]
    spare = after.services["default-spare-80"].load_balancer
    assert spare is not None and [s.url for s in spare.servers] == ["http://10.244.0.8:8080"]


def test_update_endpoints_rebuilds_an_error_pages_load_balancer() -> None:
    """The slice of an errors Middleware's page Service changes: update_endpoints equals
    a whole conversion and rebuilds ``<middleware>-errorpage-service`` alone; the
    Middleware and the routers are the previous objects."""
    case = load(FIXTURES / "http-errors-service.yaml")
    old = decode_objects(case.objects)
    previous = convert(old, case.options)
    doc = slice_doc("pages", ["10.244.2.9"], name="pages-x1")
    doc["metadata"]["namespace"] = "errors"
    doc["ports"] = [{"name": "http", "port": 8000, "protocol": "TCP"}]
    new = with_slices(old, doc)
    updated = update_endpoints(previous, old, new, case.options)
    assert updated is not None and updated == convert(new, case.options)
    before = previous.configuration.http
    after = updated.configuration.http
    assert before is not None and after is not None
    assert after.middlewares is before.middlewares
    assert after.routers is before.routers
    rebuilt = sorted(n for n, svc in after.services.items() if svc is not before.services[n])
    assert rebuilt == ["default-oops-errorpage-service"]
    pages = after.services["default-oops-errorpage-service"].load_balancer
    assert pages is not None and [s.url for s in pages.servers] == ["http://10.244.2.9:8000"]


@pytest.fixture(scope="module")
def shared_state() -> ClusterState:
    """:func:`shared`, read once for the property test below, which only replaces
    its slices in copies (reading the YAML was 40% of each example's time)."""
    return shared()


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["web", "api", "dns"]),
                st.lists(st.sampled_from(["10.244.0.5", "10.244.0.6", "10.244.7.1"]), unique=True),
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
def test_update_endpoints_equals_a_whole_conversion(
    shared_state: ClusterState, steps: list[list[tuple[str, list[str], bool]]], allow_empty: bool
) -> None:
    """Random slice churn (replaced, emptied, removed) under routes of every kind: after
    every step update_endpoints gives what convert gives, or None; with
    allowEmptyServices never None."""
    options = CRDOptions(allow_empty_services=allow_empty)
    state = shared_state
    previous = convert(state, options)
    for step in steps:
        slices = dict(state.endpoint_slices)
        for svc, addresses, keep in step:
            key = ("default", f"{svc}-1")
            if keep:
                doc = slice_doc(svc, addresses, udp=svc == "dns")
                slices[key] = objects.decode("EndpointSlice", msgspec.json.encode(doc))
            else:
                slices.pop(key, None)
        new = msgspec.structs.replace(state, endpoint_slices=slices)
        full = convert(new, options)
        updated = update_endpoints(previous, state, new, options)
        if updated is not None:
            assert updated == full
        elif allow_empty and new.endpoint_slices != state.endpoint_slices:
            raise AssertionError("with allowEmptyServices an endpoints-only change is in place")
        state, previous = new, full


def test_node_port_lb_without_a_nodes_internal_ip_refuses_the_route() -> None:
    docs = [
        d
        for d in load(FIXTURES / "node-port-lb.yaml").objects
        if d["kind"] != "Node" or d["metadata"]["name"] == "node-c"
    ]  # ExternalIP only
    reasons = {p.reason for p in convert(decode_objects(docs)).problems}
    assert "nodePortLB: no node has an InternalIP address for service default/nodeport" in reasons


@settings(max_examples=fuzz.examples(full=2000, quick=200), deadline=None)
@given(
    st.text(
        alphabet=st.one_of(st.sampled_from("aZ09-_.@/: \t~é²١"), st.characters(codec="utf-8")),
        max_size=40,
    )
)
def test_normalize_keeps_the_words_joined_by_one_dash(name: str) -> None:
    """One substitution gives what splitting on runs and joining the words gave."""
    words = [part for part in re.split(r"[\W_]+", name) if part]
    assert _normalize(name) == "-".join(words)


def test_a_strategy_edge_lacks_passes_on_and_validation_refuses_its_service() -> None:
    docs = load(FIXTURES / "http-chain-and-strategy.yaml").objects
    route = docs[0]["spec"]["routes"][1]
    route["services"][0]["strategy"] = "hrw"
    result = convert(decode_objects(docs), CRDOptions(allow_cross_namespace=True))
    assert result.problems == []
    http = result.configuration.http
    assert http is not None
    name = "default-app-bb8032711cdceed5dddf"
    balancer = http.services[name].load_balancer
    assert balancer is not None and balancer.strategy == "hrw"
    rt = validate(
        result.configuration, {"http": {"middlewares": {"extra": {"addPrefix": {"prefix": "/x"}}}}}
    )
    service = rt.http_services[f"{name}@{PROVIDER}"]
    assert service.status == "disabled"
    assert any("strategy 'hrw'" in error for error in service.errors), service.errors
    assert rt.http_routers[f"{name}@{PROVIDER}"].status == "disabled"


def test_p2c_passes_on_and_is_served() -> None:
    docs = load(FIXTURES / "http-chain-and-strategy.yaml").objects
    docs[0]["spec"]["routes"][1]["services"][0]["strategy"] = "p2c"
    result = convert(decode_objects(docs), CRDOptions(allow_cross_namespace=True))
    name = "default-app-bb8032711cdceed5dddf"
    assert result.configuration.http is not None
    balancer = result.configuration.http.services[name].load_balancer
    assert balancer is not None and balancer.strategy == "p2c"
    rt = validate(
        result.configuration, {"http": {"middlewares": {"extra": {"addPrefix": {"prefix": "/x"}}}}}
    )
    assert rt.http_services[f"{name}@{PROVIDER}"].status == "enabled"


def test_node_port_lb_is_refused_when_nodes_are_not_read() -> None:
    """disableClusterScopeResources: Nodes are not read, so every route asking for
    nodePortLB on a NodePort Service is refused, naming the option; the HTTP route where
    nativeLB wins and the one on a ClusterIP Service are served as before."""
    docs = load(FIXTURES / "node-port-lb.yaml").objects
    result = convert(decode_objects(docs), CRDOptions(disable_cluster_scope_resources=True))
    reason = (
        "nodePortLB on service default/nodeport: Nodes are not read (disableClusterScopeResources)"
    )
    refused = {(p.kind, p.where) for p in result.problems if p.reason == reason}
    assert refused == {
        ("IngressRoute", "spec.routes[0]"),
        ("IngressRoute", "spec.routes[3]"),
        ("IngressRouteTCP", "spec.routes[0]"),
        ("IngressRouteUDP", "spec.routes[0]"),
    }, result.problems
    served = convert(decode_objects(docs)).configuration
    assert result.configuration.http is not None and served.http is not None
    for name, service in served.http.services.items():  # the others stay as they were
        if name in result.configuration.http.services:
            assert result.configuration.http.services[name] == service
