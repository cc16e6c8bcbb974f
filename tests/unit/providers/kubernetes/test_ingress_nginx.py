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
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.config.durations import enc_hook
from edge.providers.kubernetes import ingress_nginx
from edge.providers.kubernetes.ingress import update_endpoints
from edge.providers.kubernetes.ingress_nginx import NGINXOptions, convert, ingress_options
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


def test_there_are_cases() -> None:
    assert len(CASES) >= 5


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path) -> None:
    case = load(path)
    result = convert(decode_objects(case.objects), case.options)

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
        first = convert(decode_objects(case.objects), case.options)
        again = convert(decode_objects(list(reversed(case.objects))), case.options)
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


@given(
    main=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=6),
    canary=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4),
)
@settings(max_examples=300, deadline=None)
def test_no_annotation_makes_the_conversion_raise(
    main: dict[str, str], canary: dict[str, str]
) -> None:
    """Whatever the annotations say, the conversion answers: routes or problems naming
    them, and what it serves validates."""
    base_case = load(FIXTURES / "canary.yaml")
    docs = []
    for doc in base_case.objects:
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
