"""ingress-nginx Ingresses -> dynamic configuration: table tests over fixture files.

Each ``tests/fixtures/kubernetes/ingress-nginx/*.yaml`` is read as the Ingress
conversion's fixtures are (see ``test_ingress``): ``objects``, ``options`` (here the
``kubernetesIngressNGINX`` provider's), ``file``, ``expected`` (the whole configuration
served, stand-ins for what is left out removed), ``problems``, ``selected``,
``disabled`` and ``requests`` (``headers`` may be given: the canary routes read them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from edge.config.durations import enc_hook
from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.providers.kubernetes import ingress_nginx
from edge.providers.kubernetes.gateway import EntryPointPort
from edge.providers.kubernetes.ingress import update_endpoints
from edge.providers.kubernetes.ingress_nginx import NGINXOptions, convert, ingress_options
from edge.providers.kubernetes.objects import ClusterState, ServicesConfigMap
from edge.rules import RequestView, RouteTable, canonical_host
from tests.unit.providers.kubernetes.test_ingress import PROVIDER, decode_objects, validate

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "kubernetes" / "ingress-nginx"
CASES = sorted(FIXTURES.glob("*.yaml"))


class Request(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    path: str
    router: str | None
    host: str = ""
    tls: bool = False
    entry_point: str = "web"
    headers: dict[str, str] = {}


class Case(msgspec.Struct, forbid_unknown_fields=True):
    objects: list[dict[str, Any]] = []
    options: NGINXOptions = NGINXOptions()
    file: dict[str, Any] | None = None
    expected: dict[str, Any] | None = None
    problems: list[dict[str, str]] = []
    selected: list[str] | None = None
    disabled: list[str] = []
    requests: list[Request] = []


def load(path: Path) -> Case:
    return msgspec.convert(msgspec.yaml.decode(path.read_bytes()), Case)


def nginx_state(docs: list[dict[str, Any]]) -> ClusterState:
    """``decode_objects``, with ConfigMaps read whole as this source watches them."""
    state = decode_objects([d for d in docs if d["kind"] != "ConfigMap"])
    config_maps = {}
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            found = msgspec.json.decode(msgspec.json.encode(doc), type=ServicesConfigMap)
            config_maps[found.metadata.key] = found
    return msgspec.structs.replace(state, config_maps=config_maps)


def test_there_are_cases() -> None:
    assert len(CASES) >= 5


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path) -> None:
    case = load(path)
    result = convert(nginx_state(case.objects), case.options)

    assert [msgspec.to_builtins(p) for p in result.problems] == case.problems
    http = result.configuration.http
    stand_ins = {n for n, r in (http.routers if http else {}).items() if r.problems}
    if case.expected is not None:
        served = msgspec.to_builtins(result.configuration, enc_hook=enc_hook)
        for name in stand_ins:
            del served["http"]["routers"][name]
        if "http" in served and not served["http"].get("routers"):
            served["http"].pop("routers", None)
        assert served == case.expected
    if case.selected is not None:
        assert sorted(f"{ns}/{name}" for ns, name in result.selected) == sorted(case.selected)

    rt = validate(result.configuration, case.file)
    disabled = sorted(
        n
        for n, info in rt.http_routers.items()
        if info.status == "disabled" and n.split("@")[0] not in stand_ins
    )
    assert disabled == sorted(f"{n}@{PROVIDER}" for n in case.disabled), rt.errors()
    assert all(s.status != "disabled" for s in rt.http_services.values()), rt.errors()
    assert all(m.status != "disabled" for m in rt.http_middlewares.values()), rt.errors()
    for req in case.requests:
        entries = [
            (name, info.rule, info.priority, name)
            for name, info in rt.http_routers.items()
            if info.status != "disabled"
            and req.entry_point in info.entry_points
            and (info.config.tls is not None) == req.tls
        ]
        table: RouteTable[str] = RouteTable(entries)  # type: ignore[arg-type]
        view = RequestView(
            host=canonical_host(req.host),
            path=req.path,
            method="GET",
            headers=[(k.encode(), v.encode()) for k, v in req.headers.items()],
        )
        expected = None if req.router is None else f"{req.router}@{PROVIDER}"
        assert table.match(view) == expected, req


def test_conversion_is_deterministic() -> None:
    for path in CASES:
        case = load(path)
        first = convert(nginx_state(case.objects), case.options)
        again = convert(nginx_state(list(reversed(case.objects))), case.options)
        assert first == again, path.stem


def test_endpoint_churn_updates_the_ingress_copies_of_a_service() -> None:
    """An EndpointSlice change reaches the services an Ingress copied (backend-protocol,
    affinity) on the endpoints-only path, as a whole conversion would give them."""
    case = load(FIXTURES / "backend-protocol-and-affinity.yaml")
    old = decode_objects(case.objects)
    docs = [
        {**doc, "endpoints": [{"addresses": ["10.0.0.3"]}]}
        if doc["kind"] == "EndpointSlice"
        else doc
        for doc in case.objects
    ]
    new = decode_objects(docs)
    options = case.options
    previous = convert(old, options)
    patched = update_endpoints(previous, old, new, ingress_options(options))
    assert patched is not None
    assert patched.configuration == convert(new, options).configuration
    http = patched.configuration.http
    assert http is not None
    assert {s.load_balancer.servers[0].url for s in http.services.values() if s.load_balancer} == {
        "http://10.0.0.3:8080",
        "https://10.0.0.3:8080",
    }


_KEYS = sorted(
    {
        *ingress_nginx._KNOWN,
        *ingress_nginx.NOT_YET,
        "configuration-snippet",
        "unknown-key",
    }
)
_VALUES = st.one_of(
    st.sampled_from(["true", "false", "on", "off", "0", "10", "-1", "", "cookie", "HTTPS",
                     "/$1", "/a(/|$)(.*)", "10.0.0.0/8", "http://a.test/x", "1m", "a/b",
                     "X-Canary", "99999999999999999999"]),
    st.text(max_size=20),
)  # fmt: skip


@pytest.fixture(scope="module")
def canary_case() -> Case:
    """canary.yaml, read once: the property test below edits copies of its Ingresses
    (reading the YAML was three quarters of each example's time)."""
    return load(FIXTURES / "canary.yaml")


@given(
    main=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=6),
    canary=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4),
)
@example(main={"rewrite-target": "\x1b"}, canary={})  # a control character in the target
@example(main={"whitelist-source-range": ""}, canary={})  # no range: no allowlist
@example(main={"rewrite-target": "/$1"}, canary={})  # a group no path has
@settings(max_examples=300, deadline=None)
def test_no_annotation_makes_the_conversion_raise(
    canary_case: Case, main: dict[str, str], canary: dict[str, str]
) -> None:
    """Whatever the annotations say, the conversion answers: routes or problems naming
    them, and what it serves validates."""
    docs = []
    for doc in canary_case.objects:
        if doc["kind"] == "Ingress" and doc["metadata"]["name"] in ("main", "main-canary"):
            extra = main if doc["metadata"]["name"] == "main" else {"canary": "true", **canary}
            doc = {
                **doc,
                "metadata": {
                    **doc["metadata"],
                    "annotations": {
                        f"nginx.ingress.kubernetes.io/{k}": v for k, v in extra.items()
                    },
                },
            }
        docs.append(doc)
    result = convert(decode_objects(docs))
    for problem in result.problems:
        assert problem.ingress.startswith("default/")
    rt = validate(result.configuration)
    stand_ins = {
        n
        for n, r in (result.configuration.http.routers if result.configuration.http else {}).items()
        if r.problems
    }
    assert all(
        info.status != "disabled" or n.split("@")[0] in stand_ins
        for n, info in rt.http_routers.items()
    ), rt.errors()


# --- tcp-services / udp-services ------------------------------------------------------------

_L4_OBJECTS: list[dict[str, Any]] = [
    {"kind": "Service", "metadata": {"name": "db", "namespace": "data"},
     "spec": {"ports": [{"port": 5432, "name": "pg"}]}},
    {"kind": "EndpointSlice",
     "metadata": {"name": "db-1", "namespace": "data", "labels": {"kubernetes.io/service-name": "db"}},
     "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.2"]}, {"addresses": ["10.0.0.1"]}],
     "ports": [{"name": "pg", "port": 15432}]},
    {"kind": "Service", "metadata": {"name": "dns", "namespace": "kube-system"},
     "spec": {"ports": [{"port": 53, "name": "dns", "protocol": "UDP"}]}},
    {"kind": "EndpointSlice",
     "metadata": {"name": "dns-1", "namespace": "kube-system",
                  "labels": {"kubernetes.io/service-name": "dns"}},
     "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.53"]}],
     "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}]},
]  # fmt: skip
_ENTRY_POINTS = [
    EntryPointPort("pg", 5432),
    EntryPointPort("pg-proxied", 6432),
    EntryPointPort("other", 5433),
    EntryPointPort("dns", 53, udp=True),
]


def test_tcp_and_udp_services_entries_become_routes_on_the_entry_point_of_their_port() -> None:
    tcp = ("ingress-nginx/tcp-services", {
        "5432": "data/db:5432",           # by number
        "6432": "data/db:pg::PROXY",      # by name; PROXY v1 to the backends
        "7000": "data/db:5432",           # no entry point on 7000
        "5433": "data/missing:1",         # no such Service
        "abc": "data/db:5432",            # not a port
        "8000": "data/db:5432:PROXY",     # PROXY from clients: the entry point's setting
        "9000": "not an entry",
    })  # fmt: skip
    udp = ("ingress-nginx/udp-services", {"53": "kube-system/dns:53", "54": "kube-system/dns:53"})
    result = ingress_nginx.convert_services(decode_objects(_L4_OBJECTS), tcp, udp, _ENTRY_POINTS)
    assert result.tcp is not None and result.udp is not None
    served_tcp = {n: r for n, r in result.tcp.routers.items() if not r.problems}
    assert msgspec.to_builtins(
        msgspec.structs.replace(result.tcp, routers=served_tcp)
    ) == {
        "routers": {
            "tcp-services-5432": {"rule": "HostSNI(`*`)", "service": "tcp-services-5432",
                                  "entryPoints": ["pg"]},
            "tcp-services-6432": {"rule": "HostSNI(`*`)", "service": "tcp-services-6432",
                                  "entryPoints": ["pg-proxied"]},
        },
        "services": {
            "tcp-services-5432": {"loadBalancer": {"servers": [
                {"address": "10.0.0.1:15432"}, {"address": "10.0.0.2:15432"}]}},
            "tcp-services-6432": {"loadBalancer": {"servers": [
                {"address": "10.0.0.1:15432"}, {"address": "10.0.0.2:15432"}],
                "proxyProtocol": {"version": 1}}},
        },
    }  # fmt: skip
    served_udp = {n: r for n, r in result.udp.routers.items() if not r.problems}
    assert msgspec.to_builtins(
        msgspec.structs.replace(result.udp, routers=served_udp)
    ) == {
        "routers": {"udp-services-53": {"service": "udp-services-53", "entryPoints": ["dns"]}},
        "services": {"udp-services-53": {"loadBalancer": {"servers": [
            {"address": "10.0.0.53:5353"}]}}},
    }  # fmt: skip
    assert [str(p) for p in result.problems] == [
        "configmap ingress-nginx/tcp-services: data.abc: 'abc' is not a port",
        "configmap ingress-nginx/tcp-services: data.5433: service data/missing not found",
        "configmap ingress-nginx/tcp-services: data.7000: no TCP entry point listens on port 7000",
        "configmap ingress-nginx/tcp-services: data.8000: PROXY from clients is the entry "
        "point's setting: set proxyProtocol on the entry point of port 8000 and drop the "
        "first PROXY",
        "configmap ingress-nginx/tcp-services: data.9000: 'not an entry' is not "
        "<namespace>/<service>:<port>[:PROXY][:PROXY]",
        "configmap ingress-nginx/udp-services: data.54: no UDP entry point listens on port 54",
    ]
    # Each entry left out has a router of its name disabled with the reason, which the
    # API and edge check show; the others are served.
    conf = Configuration(tcp=result.tcp, udp=result.udp)
    rt = build_runtime(
        merge({PROVIDER: conf}), {"pg": "tcp", "pg-proxied": "tcp", "other": "tcp", "dns": "udp"}
    )
    disabled = {
        name.split("@")[0]: info.errors[0]
        for name, info in [*rt.tcp_routers.items(), *rt.udp_routers.items()]
        if info.status == "disabled"
    }
    assert disabled == {
        "tcp-services-abc": str(result.problems[0]),
        "tcp-services-5433": str(result.problems[1]),
        "tcp-services-7000": str(result.problems[2]),
        "tcp-services-8000": str(result.problems[3]),
        "tcp-services-9000": str(result.problems[4]),
        "udp-services-54": str(result.problems[5]),
    }
    assert all(
        info.status == "enabled"
        for n, info in rt.tcp_routers.items()
        if n.split("@")[0] in served_tcp
    ), rt.errors()
    assert rt.udp_routers[f"udp-services-53@{PROVIDER}"].status == "enabled"


def test_tcp_services_routes_sit_beside_the_ssl_passthrough_routers() -> None:
    """with_services keeps what the Ingresses made (ssl-passthrough's TCP routers, the
    HTTP routes) and adds the ConfigMaps' TCP and UDP routes."""
    case = load(FIXTURES / "ssl-passthrough.yaml")
    state = decode_objects(case.objects + _L4_OBJECTS)
    conversion = convert(state, case.options)
    assert conversion.configuration.tcp is not None
    passthrough = dict(conversion.configuration.tcp.routers)
    l4 = ingress_nginx.convert_services(
        state,
        ("ingress-nginx/tcp-services", {"5432": "data/db:5432"}),
        ("ingress-nginx/udp-services", {"53": "kube-system/dns:53"}),
        _ENTRY_POINTS,
    )
    merged = ingress_nginx.with_services(conversion, l4).configuration
    assert merged.http == conversion.configuration.http
    assert merged.tcp is not None and merged.udp is not None
    assert merged.tcp.routers == {**passthrough, "tcp-services-5432": l4.tcp.routers["tcp-services-5432"]}  # type: ignore[union-attr]  # fmt: skip
    assert set(merged.tcp.services) == {
        *conversion.configuration.tcp.services,
        "tcp-services-5432",
    }
    assert merged.udp == l4.udp
    empty = ingress_nginx.convert_services(state, None, None, _ENTRY_POINTS)
    assert ingress_nginx.with_services(conversion, empty) == conversion


# --- default backends ------------------------------------------------------------------


def test_endpoint_churn_reaches_the_default_backend_and_the_failover_it_sits_in() -> None:
    """A default-backend's failover switches by itself as endpoints come and go: the
    endpoints-only path updates both its members (the backend's and the default
    backend's) as a whole conversion would."""
    case = load(FIXTURES / "default-backend.yaml")
    old = nginx_state(case.objects)
    docs = []
    for doc in case.objects:
        if doc["kind"] == "EndpointSlice" and doc["metadata"]["name"] == "web-1":
            doc = {**doc, "endpoints": [{"addresses": ["10.0.0.1"]}]}  # web is back
        elif doc["kind"] == "EndpointSlice" and doc["metadata"]["name"] == "maintenance-1":
            doc = {**doc, "endpoints": [{"addresses": ["10.0.0.8"]}]}
        docs.append(doc)
    new = nginx_state(docs)
    previous = convert(old, case.options)
    patched = update_endpoints(previous, old, new, ingress_options(case.options))
    assert patched is not None
    assert patched.configuration == convert(new, case.options).configuration
    http = patched.configuration.http
    assert http is not None
    assert http.services["default-web-80"].load_balancer.servers[0].url == "http://10.0.0.1:8080"  # type: ignore[union-attr]
    for name in ("default-maintenance-page", "default-maintenance-page-default-sticky"):
        assert http.services[name].load_balancer.servers[0].url == "http://10.0.0.8:8080"  # type: ignore[union-attr]


def test_a_default_backend_service_that_cannot_be_served_is_a_disabled_router() -> None:
    """defaultBackendService naming a missing Service: the catch-all stands in, disabled
    with the reason (the API and edge check show it, the provider logs it); the
    Ingresses are served, without the custom errors that Service would answer."""
    case = load(FIXTURES / "default-backend-service.yaml")
    docs = [d for d in case.objects if d["metadata"].get("namespace") != "ingress-nginx"]
    result = convert(nginx_state(docs), case.options)
    http = result.configuration.http
    assert http is not None
    assert http.routers["default-backend.all"].problems == [
        "defaultBackendService ingress-nginx/default-http-backend: service "
        "ingress-nginx/default-http-backend not found"
    ]
    # The Ingress is served; its custom errors wait for that page service to exist.
    assert result.problems == []
    assert http.routers["default-app-app-example-com-api-tls"].middlewares == []
    rt = validate(result.configuration)
    assert rt.http_routers[f"default-backend.all@{PROVIDER}"].status == "disabled"
    options = msgspec.structs.replace(case.options, default_backend_service="")
    assert (
        "default-backend.all"
        not in convert(nginx_state(case.objects), options).configuration.http.routers
    )  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("target", "path", "replacement"),
    [
        ("/$1", "/v1", "/"),  # no group in the path: nginx puts an empty string
        ("/$2", "/a(/|$)(.*)", "/${2}"),
        ("/$12", "/a(/|$)(.*)", "/${1}2"),  # nginx's captures are one digit
        ("/x/${2}/$3", "/a(/|$)(.*)", "/x/${2}/"),
        ("/$0", "/a", "/${0}"),
        ("/plain", "/a", "/plain"),
    ],
)
def test_rewrite_target_captures_are_read_as_nginx_reads_them(
    target: str, path: str, replacement: str
) -> None:
    assert ingress_nginx.nginx_captures(target, f"(?i)^{path}") == replacement
