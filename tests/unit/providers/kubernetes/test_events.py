"""The pure part of edge's Kubernetes Events: names, bodies, the round-to-round
bookkeeping, the rule that decides whether an observation counts, the token bucket."""

from __future__ import annotations

import re

import msgspec
import pytest

from edge.providers.kubernetes.events import (
    CONTROLLER,
    GENERATION,
    NAME_MAX,
    NORMAL,
    RESOLVED,
    WARNING,
    EventState,
    ObjectRef,
    Observation,
    Refusal,
    TokenBucket,
    Tracker,
    bump_patch,
    counts,
    create_body,
    event_name,
    reason_code,
    resolved,
    timestamp,
)

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
ING = ObjectRef("networking.k8s.io/v1", "Ingress", "default", "web", "uid-1")
CLASS = ObjectRef("gateway.networking.k8s.io/v1", "GatewayClass", "", "edge", "uid-9")


def refusal(
    message: str = "spec.rules[0]: service default/a not found",
    generation: int = 1,
    ref: ObjectRef = ING,
    reason: str = "ServiceNotFound",
) -> Refusal:
    return Refusal(ref, generation, WARNING, reason, message)


def state(
    generation: int, instance: str = "edge-a", last: float = 1000.0, count: int = 1
) -> EventState:
    read = {
        "metadata": {"resourceVersion": "7", "annotations": {GENERATION: str(generation)}},
        "count": count,
        "lastTimestamp": timestamp(last),
        "reportingInstance": instance,
    }
    return msgspec.convert(read, EventState)


def observed(r: Refusal, seen: float = 1000.0, again: bool = False) -> Observation:
    return Observation(r, r.event, seen, again)


# --- names ------------------------------------------------------------------------------


def test_an_event_name_is_the_same_for_the_same_refusal_and_differs_otherwise() -> None:
    one = refusal().event
    assert one == refusal().event  # every pod computes the same
    assert one.startswith("web.") and DNS_SUBDOMAIN.fullmatch(one)
    others = {
        refusal(message="spec.rules[1]: service default/a not found").event,
        refusal(reason="PortNotFound").event,
        refusal(ref=ING._replace(uid="uid-2")).event,  # made again: a new object
        Refusal(ING, 1, NORMAL, "ServiceNotFound", refusal().message).event,
    }
    assert one not in others and len(others) == 4
    assert refusal(generation=5).event == one  # the generation is counted, not named


def test_a_long_object_name_is_cut_to_a_valid_event_name() -> None:
    long = ING._replace(name="a" * 240 + "-b" * 6)
    name = event_name(long, WARNING, "X", "m")
    assert len(name) == NAME_MAX and DNS_SUBDOMAIN.fullmatch(name)
    cut = event_name(long._replace(name="x" * 235 + "-yy"), WARNING, "X", "m")
    assert cut[235] == "." and DNS_SUBDOMAIN.fullmatch(cut)  # no "-." where it was cut


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("service-not-found", "ServiceNotFound"),
        ("invalid-annotation", "InvalidAnnotation"),
        ("no-endpoints", "NoEndpoints"),
    ],
)
def test_reasons_from_problem_kinds(kind: str, reason: str) -> None:
    assert reason_code(kind) == reason


# --- bodies -------------------------------------------------------------------------------


def test_the_event_created_is_what_kubectl_describe_reads() -> None:
    obs = observed(refusal(generation=3), seen=86400.0)
    body = create_body(obs, "edge-abc", "node-1")
    assert body["metadata"] == {
        "name": obs.name,
        "namespace": "default",
        "annotations": {GENERATION: "3"},
    }
    assert body["involvedObject"] == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "namespace": "default",
        "name": "web",
        "uid": "uid-1",
    }
    assert (body["type"], body["reason"], body["count"]) == (WARNING, "ServiceNotFound", 1)
    assert body["firstTimestamp"] == body["lastTimestamp"] == "1970-01-02T00:00:00Z"
    assert body["source"] == {"component": CONTROLLER, "host": "node-1"}
    assert (body["reportingComponent"], body["reportingInstance"]) == (CONTROLLER, "edge-abc")


def test_a_cluster_scoped_objects_events_go_to_the_default_namespace() -> None:
    body = create_body(observed(refusal(ref=CLASS)), "edge-a", "")
    assert body["metadata"]["namespace"] == "default"
    assert "namespace" not in body["involvedObject"]
    assert body["source"] == {"component": CONTROLLER}


def test_a_long_message_is_cut() -> None:
    body = create_body(observed(refusal(message="x" * 5000)), "edge-a", "")
    assert len(body["message"]) == 1024 and body["message"].endswith("...")


def test_a_count_is_a_patch_on_the_version_read() -> None:
    patch = bump_patch(
        state(1, count=4, last=2000.0), observed(refusal(generation=2), 1500.0), "edge-b", ""
    )
    assert patch["metadata"] == {"resourceVersion": "7", "annotations": {GENERATION: "2"}}
    assert patch["count"] == 5
    assert patch["lastTimestamp"] == timestamp(2000.0)  # never back in time
    assert patch["reportingInstance"] == "edge-b"


# --- whether an observation counts ---------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "again", "held", "by", "seen", "expected"),
    [
        (2, False, 1, "edge-b", 1000.0, True),  # the object changed, still refused
        (1, False, 2, "edge-b", 1000.0, False),  # this pod is behind: counted already
        (1, False, 1, "edge-b", 5000.0, False),  # first seen here: another pod counted it
        (1, False, 1, "edge-a", 5000.0, False),  # this pod, restarted: counted already
        (1, True, 1, "edge-a", 1000.5, True),  # back again, last counted by this pod
        (1, True, 1, "edge-b", 1010.0, False),  # back again: the other pod counted it
        (1, True, 1, "edge-b", 1060.0, True),  # back again, long after the other's
        (1, True, 1, "edge-b", 940.0, True),  # ... or long before
    ],
)
def test_what_counts(
    generation: int, again: bool, held: int, by: str, seen: float, expected: bool
) -> None:
    obs = observed(refusal(generation=generation), seen=seen, again=again)
    assert counts(obs, state(held, instance=by, last=1000.0), "edge-a", 60.0) is expected


# --- rounds -------------------------------------------------------------------------------


def test_rounds_observe_new_returning_and_changed_refusals_once() -> None:
    t = Tracker()
    gens = {ING: 1}
    r = refusal()
    obs, withdrawn = t.round([r, r], gens.get, 1.0)
    assert obs == [Observation(r, r.event, 1.0, False)]
    assert withdrawn == [resolved(ING, 1).event]  # newly refused: no Resolved may follow
    assert t.round([r], gens.get, 2.0) == ([], [])  # still there: nothing new
    r2 = refusal(generation=2)
    assert t.round([r2], gens.get, 3.0) == ([Observation(r2, r.event, 3.0, False)], [])
    assert t.round([r2], gens.get, 4.0) == ([], [])


def test_a_refusal_gone_is_withdrawn_and_its_object_resolved_then_it_comes_back() -> None:
    t = Tracker()
    gens = {ING: 1}
    r = refusal()
    t.round([r], gens.get, 1.0)
    obs, withdrawn = t.round([], gens.get, 2.0)
    (ok,) = obs
    assert withdrawn == [r.event]
    assert (ok.refusal.type, ok.refusal.reason, ok.again) == (NORMAL, RESOLVED, False)
    obs, withdrawn = t.round([r], gens.get, 3.0)
    assert obs == [Observation(r, r.event, 3.0, True)]  # back: a recurrence
    assert withdrawn == [ok.name]  # a Resolved still waiting is stale
    (ok2,), _ = t.round([], gens.get, 4.0)
    assert ok2.name == ok.name and ok2.again


def test_one_of_two_refusals_gone_resolves_nothing() -> None:
    t = Tracker()
    a, b = refusal("a"), refusal("b")
    t.round([a, b], {ING: 1}.get, 1.0)  # ING refused twice
    assert t.round([b], {ING: 1}.get, 2.0) == ([], [a.event])


def test_an_object_deleted_is_not_resolved_and_forgotten() -> None:
    t = Tracker()
    r = refusal()
    t.round([r], {ING: 1}.get, 1.0)
    assert t.round([], {}.get, 2.0) == ([], [r.event])
    assert t.known == {}
    (obs,), _ = t.round([r], {ING: 1}.get, 3.0)
    assert not obs.again


def test_what_a_tracker_remembers_is_bounded() -> None:
    t = Tracker(known=3)
    for i in range(10):
        t.round([refusal(f"m{i}")], {ING: 1}.get, float(i))
    assert len(t.known) == 3


# --- rate --------------------------------------------------------------------------------


def test_the_token_bucket_allows_a_burst_then_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)
    now[0] = 0.5
    assert bucket.take() == 0.0
    assert bucket.take() == pytest.approx(0.5)
    now[0] = 100.0
    assert [bucket.take() for _ in range(4)][:3] == [0.0, 0.0, 0.0]  # saved: 3 at most
