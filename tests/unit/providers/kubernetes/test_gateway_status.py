"""What the Gateway provider writes into status (:mod:`edge.providers.kubernetes.gateway_status`):
nothing when the object holds it already, transition times kept while a condition's
status holds, other controllers' route parents kept."""

from __future__ import annotations

from edge.providers.kubernetes.gateway import CONTROLLER_NAME, Condition, WantedStatus
from edge.providers.kubernetes.gateway_status import merge_conditions, status_patch

NOW = "2026-11-28T18:00:00Z"
BEFORE = "2026-11-01T00:00:00Z"


def cond(kind: str, ok: bool, reason: str, gen: int = 3) -> dict:
    return Condition(kind, ok, reason).to_builtins(gen)


def test_transition_time_kept_while_the_status_holds_and_set_when_it_changes() -> None:
    held = [{**cond("Accepted", True, "Accepted", 2), "lastTransitionTime": BEFORE},
            {**cond("Programmed", True, "Programmed", 2), "lastTransitionTime": BEFORE}]  # fmt: skip
    out = merge_conditions(
        held, [cond("Accepted", True, "Accepted"), cond("Programmed", False, "Invalid")], NOW
    )
    assert [(c["type"], c["lastTransitionTime"], c["observedGeneration"]) for c in out] == [
        ("Accepted", BEFORE, 3), ("Programmed", NOW, 3)]  # fmt: skip


def test_no_write_when_the_object_holds_the_wanted_status() -> None:
    wanted = WantedStatus(
        "GatewayClass", ("", "edge"), 3, {"conditions": [cond("Accepted", True, "Accepted")]}
    )
    first = status_patch({}, wanted, CONTROLLER_NAME, NOW)
    assert first is not None and first["conditions"][0]["lastTransitionTime"] == NOW
    # the written status comes back: a later round (another pod, another time) writes nothing
    assert status_patch(first, wanted, CONTROLLER_NAME, "2026-11-28T19:00:00Z") is None
    # a new generation is a write, keeping the time
    newer = WantedStatus(
        "GatewayClass", ("", "edge"), 4, {"conditions": [cond("Accepted", True, "Accepted", 4)]}
    )
    again = status_patch(first, newer, CONTROLLER_NAME, "2026-11-28T19:00:00Z")
    assert again is not None and again["conditions"][0]["lastTransitionTime"] == NOW


def test_gateway_listeners_merge_by_name_and_addresses_are_not_touched() -> None:
    li = {
        "name": "http",
        "attachedRoutes": 1,
        "supportedKinds": [],
        "conditions": [cond("Accepted", True, "Accepted")],
    }
    held = {"addresses": [{"value": "10.0.0.1"}],
            "listeners": [{**li, "attachedRoutes": 0, "conditions": [{**cond("Accepted", True, "Accepted"), "lastTransitionTime": BEFORE}]}]}  # fmt: skip
    patch = status_patch(
        held, WantedStatus("Gateway", ("d", "g"), 3, {"listeners": [li]}), CONTROLLER_NAME, NOW
    )
    assert patch is not None and "addresses" not in patch
    assert patch["listeners"][0]["attachedRoutes"] == 1
    assert patch["listeners"][0]["conditions"][0]["lastTransitionTime"] == BEFORE


def test_route_parents_of_other_controllers_are_kept() -> None:
    ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "d", "name": "g"}
    other = {"parentRef": {"name": "x"}, "controllerName": "example.com/other", "conditions": []}
    stale = {
        "parentRef": {"name": "old", "namespace": "d"},
        "controllerName": CONTROLLER_NAME,
        "conditions": [],
    }
    mine = {
        "parentRef": ref,
        "controllerName": CONTROLLER_NAME,
        "conditions": [cond("Accepted", True, "Accepted")],
    }
    patch = status_patch(
        {"parents": [other, stale]},
        WantedStatus("HTTPRoute", ("d", "r"), 3, {"parents": [mine]}),
        CONTROLLER_NAME,
        NOW,
    )
    assert patch is not None
    assert [p["controllerName"] for p in patch["parents"]] == ["example.com/other", CONTROLLER_NAME]
    assert patch["parents"][0] == other and patch["parents"][1]["parentRef"] == ref
    assert (
        status_patch(
            patch,
            WantedStatus("HTTPRoute", ("d", "r"), 3, {"parents": [mine]}),
            CONTROLLER_NAME,
            NOW,
        )
        is None
    )
