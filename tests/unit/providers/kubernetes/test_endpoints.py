"""Endpoint churn helpers of :mod:`edge.providers.kubernetes.endpoints`: which
snapshots differ in EndpointSlices alone, and which Services' slices changed."""

from __future__ import annotations

from typing import Any

import msgspec

from edge.providers.kubernetes import objects
from edge.providers.kubernetes.endpoints import changed_services, endpoints_only
from edge.providers.kubernetes.objects import ClusterState


def eps(name: str, service: str, addresses: list[str], ns: str = "default") -> Any:
    doc = {"metadata": {"name": name, "namespace": ns,
                        "labels": {"kubernetes.io/service-name": service} if service else {}},
           "addressType": "IPv4", "endpoints": [{"addresses": addresses}],
           "ports": [{"name": "http", "port": 8080}]}  # fmt: skip
    return objects.decode("EndpointSlice", msgspec.json.encode(doc))


def table(*slices: Any) -> dict[tuple[str, str], Any]:
    return {s.metadata.key: s for s in slices}


def test_changed_services_names_the_owners_of_slices_added_removed_or_changed() -> None:
    a1, b1, c1 = eps("a-1", "a", ["10.0.0.1"]), eps("b-1", "b", ["10.0.0.2"]), eps("c-1", "c", [])
    old = table(a1, b1, c1, eps("x-1", "", ["10.0.0.9"]))
    assert changed_services(old, dict(old)) == set()  # the same objects passed on
    new = table(a1, eps("b-1", "b", ["10.0.0.3"]), eps("d-1", "d", ["10.0.0.4"]))
    assert changed_services(old, new) == {("default", "b"), ("default", "c"), ("default", "d")}
    # A slice moved to another Service (relabelled) changes both.
    assert changed_services(table(a1), table(eps("a-1", "e", ["10.0.0.1"]))) == {
        ("default", "a"),
        ("default", "e"),
    }
    other_ns = table(eps("a-1", "a", ["10.0.0.1"], ns="prod"))
    assert changed_services({}, other_ns) == {("prod", "a")}


def test_endpoints_only_compares_every_other_table() -> None:
    before = ClusterState(endpoint_slices=table(eps("a-1", "a", ["10.0.0.1"])))
    after = msgspec.structs.replace(before, endpoint_slices=table(eps("a-1", "a", ["10.0.0.2"])))
    assert endpoints_only(before, after)
    assert not endpoints_only(before, before)
    equal = msgspec.structs.replace(before, endpoint_slices=dict(before.endpoint_slices))
    assert not endpoints_only(before, equal)  # equal tables: nothing changed
    for field in msgspec.structs.fields(ClusterState):
        if field.name == "endpoint_slices":
            continue
        other = msgspec.structs.replace(after, **{field.name: {("default", "x"): object()}})
        assert not endpoints_only(before, other), field.name
