"""Events on the objects edge refuses, read back as ``kubectl describe`` reads them.

Edge (``edge.app.Edge`` built by ``build_providers``, in this process) reads the API
server emulator (tests/kube/emulator.py) over a socket; the Events it posts are listed
with the official ``kubernetes`` client as kubectl describe lists them: core v1 Events
in the object's namespace, with a field selector on ``involvedObject`` (name,
namespace, kind, uid). Every wait is bounded by a deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from edge.providers.kubernetes.events import CONTROLLER, GENERATION, EventRecorder, Limits
from edge.providers.kubernetes.provider import KubernetesProvider
from tests.harness import Proc, Whoami
from tests.integration.kubernetes import test_crd_provider as CP
from tests.integration.kubernetes import test_gateway_provider as GP
from tests.integration.kubernetes import test_ingress_nginx as NX
from tests.integration.kubernetes import test_provider as KP
from tests.kube import objects as o
from tests.kube.emulator import Access, Emulator

EVENTS = "/api/v1/namespaces/default/events"


# --- reading back ---------------------------------------------------------------------------


def described(
    emu: Emulator, kind: str, name: str, namespace: str = "default"
) -> list[client.CoreV1Event]:
    """The Events ``kubectl describe <kind> <name>`` shows, oldest first."""
    obj = emu.get(kind, namespace, name)
    assert obj is not None, f"{kind} {namespace}/{name} not found"
    selector = ",".join(
        [
            f"involvedObject.name={name}",
            f"involvedObject.namespace={namespace}",
            f"involvedObject.kind={kind}",
            f"involvedObject.uid={obj['metadata']['uid']}",
        ]
    )
    with client.ApiClient(o.configuration(emu.url, KP.TOKEN)) as c:
        found = client.CoreV1Api(c).list_namespaced_event(
            namespace or "default", field_selector=selector
        )
    return sorted(found.items, key=lambda e: e.metadata.creation_timestamp or "")


def warnings(emu: Emulator, kind: str, name: str) -> list[client.CoreV1Event]:
    return [e for e in described(emu, kind, name) if e.type == "Warning"]


def recorder(edge: KP.InProcessEdge) -> EventRecorder:
    assert edge.app is not None
    (found,) = {id(c.events): c.events for c in edge.app.control.cores()}.values()
    assert found is not None
    return found


def settled(edge: KP.InProcessEdge, handled: int) -> bool:
    """The recorder has handled ``handled`` observations (each created, counted or found
    counted already) and has none waiting."""
    r = recorder(edge)
    return r.created + r.counted + r.adopted >= handled and r.waiting() == 0


def tweak(instance: str, limits: Limits | None = None) -> Callable[[Any], None]:
    """Fast reflectors, no status writer, and this edge's name as an Event reporter."""

    def apply(app: Any) -> None:
        KP.fast()(app)
        CP._fast(app)
        GP._fast(app)
        for p in app.providers:
            if isinstance(p, KubernetesProvider):
                p.events.instance = instance
                if limits is not None:
                    p.events.limits = limits

    return apply


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(token=KP.TOKEN, bookmark_interval=1.0) as e:
        yield e


@pytest.fixture
def start_edge(emu: Emulator) -> Iterator[Callable[..., KP.InProcessEdge]]:
    started: list[KP.InProcessEdge] = []

    def start(
        static: dict | None = None, instance: str = "edge-a", limits: Limits | None = None
    ) -> KP.InProcessEdge:
        e = KP.InProcessEdge(static or KP.static_config(emu), tweak=tweak(instance, limits))
        e.start()
        started.append(e)
        assert KP.until(lambda: e.ready() == 200, 10.0), "edge never became ready"
        return e

    yield start
    KP.stop_all(started)


def bad_ingress(*more: tuple[str, str, str, str], **spec: Any) -> dict:
    """b.test/ names a Service that does not exist; ``more`` paths after it."""
    return KP.ingress("bad", [("b.test", "/", "Prefix", "missing"), *more], **spec)


# --- an Ingress -----------------------------------------------------------------------------


def test_an_invalid_ingress_gets_one_warning_per_reason_counted_on_repeats(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    """One Warning naming the reason; the Ingress changed and still refused for it: the
    same Event counted again; a change that is not in the spec: no count; a second
    reason: a second Event; fixed: one Normal Event and no warning after."""
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "app", whoami)
    emu.create(bad_ingress())
    edge = start_edge()
    assert KP.until(lambda: len(warnings(emu, "Ingress", "bad")) == 1)
    (event,) = warnings(emu, "Ingress", "bad")
    assert event.reason == "ServiceNotFound"
    assert "service default/missing not found" in event.message
    assert "spec.rules[0].http.paths[0]" in event.message
    assert event.count == 1 and event.first_timestamp == event.last_timestamp
    assert event.reporting_component == CONTROLLER and event.reporting_instance == "edge-a"
    assert event.source.component == CONTROLLER
    assert event.involved_object.api_version == "networking.k8s.io/v1"
    assert event.metadata.annotations[GENERATION] == "1"

    # Changed (a path added), refused for the same reason: counted on the same Event.
    ing = emu.get("Ingress", "default", "bad")
    ing["spec"] = bad_ingress(("b.test", "/ok", "Exact", "app"))["spec"]
    emu.update(ing)
    assert KP.follows(edge.port(), "b.test", "w1", "/ok")
    assert KP.until(lambda: [e.count for e in warnings(emu, "Ingress", "bad")] == [2])
    (again,) = warnings(emu, "Ingress", "bad")
    assert again.metadata.name == event.metadata.name
    assert again.metadata.annotations[GENERATION] == "2"

    # A label is no new refusal: converted again, nothing counted.
    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesProvider))
    before, handled = provider.conversions, recorder(edge).requests
    emu.patch("Ingress", "default", "bad", {"metadata": {"labels": {"team": "a"}}})
    assert KP.until(lambda: provider.conversions > before)
    assert KP.until(lambda: recorder(edge).waiting() == 0)
    assert recorder(edge).requests == handled
    assert [e.count for e in warnings(emu, "Ingress", "bad")] == [2]

    # A second reason: a second Event (and the first counted: the spec changed again).
    ing = emu.get("Ingress", "default", "bad")
    tls = [{"hosts": ["b.test"], "secretName": "nowhere"}]
    ing["spec"] = bad_ingress(("b.test", "/ok", "Exact", "app"), tls=tls)["spec"]
    emu.update(ing)
    assert KP.until(lambda: len(warnings(emu, "Ingress", "bad")) == 2)
    assert KP.until(
        lambda: (
            sorted((e.reason, e.count) for e in warnings(emu, "Ingress", "bad"))
            == [("SecretNotFound", 1), ("ServiceNotFound", 3)]
        )
    )

    # Fixed: one Normal Event; further changes bring no warning.
    KP.backend_service(emu, "missing", whoami)
    ing = emu.get("Ingress", "default", "bad")
    ing["spec"] = bad_ingress(("b.test", "/ok", "Exact", "app"))["spec"]
    emu.update(ing)
    assert KP.follows(edge.port(), "b.test", "w1", "/")

    def normal() -> list[tuple[str, int]]:
        return [(e.reason, e.count) for e in described(emu, "Ingress", "bad") if e.type == "Normal"]

    assert KP.until(lambda: normal() == [("Resolved", 1)])
    ing = emu.get("Ingress", "default", "bad")
    ing["spec"]["rules"][0]["http"]["paths"][1]["path"] = "/fine"
    emu.update(ing)
    assert KP.follows(edge.port(), "b.test", "w1", "/fine")
    assert KP.until(lambda: recorder(edge).waiting() == 0)
    assert sorted((e.reason, e.count) for e in warnings(emu, "Ingress", "bad")) == [
        ("SecretNotFound", 1),
        ("ServiceNotFound", 3),
    ]
    assert normal() == [("Resolved", 1)]


def test_a_refusal_that_comes_back_is_counted_again(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    """The Service comes and goes, the Ingress unchanged: each return of the refusal
    counts once on its Event; each resolution once on the Normal one."""
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "app", whoami)
    emu.create(bad_ingress())
    edge = start_edge()
    assert KP.until(lambda: [e.count for e in warnings(emu, "Ingress", "bad")] == [1])
    for n in (2, 3):
        # the slice first, so no round sees the Service without endpoints (another reason)
        emu.create(KP.slice_for("missing", whoami))
        emu.create(o.service("missing"))
        assert KP.follows(edge.port(), "b.test", "w1")
        emu.delete("Service", "default", "missing")
        emu.delete("EndpointSlice", "default", f"missing-{whoami.name}")
        assert KP.until(lambda: KP.served_by(edge.port(), "b.test") == "404")
        assert KP.until(lambda n=n: [e.count for e in warnings(emu, "Ingress", "bad")] == [n])
    resolved = [e.count for e in described(emu, "Ingress", "bad") if e.type == "Normal"]
    assert resolved == [2]


def test_two_edges_on_one_api_server_post_each_event_once(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    """Two edges (two pods of the DaemonSet) see the same refusal: one Event, counted
    once; the Ingress changed: counted once more, not twice; a third edge starting
    (a pod restarted) counts nothing."""
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "app", whoami)
    emu.create(bad_ingress())
    a = start_edge(instance="edge-a")
    b = start_edge(instance="edge-b")
    assert KP.until(lambda: settled(a, 1) and settled(b, 1))
    (event,) = warnings(emu, "Ingress", "bad")
    assert event.count == 1
    assert recorder(a).created + recorder(b).created == 1

    ing = emu.get("Ingress", "default", "bad")
    ing["spec"] = bad_ingress(("b.test", "/ok", "Exact", "app"))["spec"]
    emu.update(ing)
    assert KP.until(lambda: settled(a, 2) and settled(b, 2))
    assert [(e.metadata.name, e.count) for e in warnings(emu, "Ingress", "bad")] == [
        (event.metadata.name, 2)
    ]
    assert recorder(a).counted + recorder(b).counted == 1

    c = start_edge(instance="edge-c")
    assert KP.until(lambda: settled(c, 1))
    assert recorder(c).adopted == 1 and recorder(c).created + recorder(c).counted == 0
    assert [e.count for e in warnings(emu, "Ingress", "bad")] == [2]


HANDLED = r"kubernetes: events: Event .*: (created|counted: \d+|counted already)$"


def test_two_edge_processes_post_one_event_counted_once(
    emu: Emulator, tmp_path: Path, whoami: Whoami
) -> None:
    """Two ``edge run`` processes (two pods: their own POD_NAME) on one API server: one
    Event, created by one and found counted by the other; the Ingress changed: counted
    by one, found counted by the other."""
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "app", whoami)
    emu.create(bad_ingress())
    static = KP.static_config(emu)
    static["log"] = {"level": "DEBUG"}
    path = tmp_path / "edge.yaml"
    path.write_text(yaml.safe_dump(static))
    procs = [Proc(["run", "-c", str(path)], env={"POD_NAME": f"edge-{x}"}) for x in "ab"]

    def outcomes() -> list[str]:
        return sorted(m.group(1) for p in procs for m in p.all_matches(HANDLED))

    try:
        assert KP.until(lambda: len(outcomes()) == 2, 30.0), [p.log for p in procs]
        assert outcomes() == ["counted already", "created"]
        (event,) = warnings(emu, "Ingress", "bad")
        assert event.count == 1 and event.reporting_instance in ("edge-a", "edge-b")
        ing = emu.get("Ingress", "default", "bad")
        ing["spec"] = bad_ingress(("b.test", "/ok", "Exact", "app"))["spec"]
        emu.update(ing)
        assert KP.until(lambda: len(outcomes()) == 4, 30.0), [p.log for p in procs]
        assert outcomes() == ["counted already", "counted already", "counted: 2", "created"]
        assert [(e.metadata.name, e.count) for e in warnings(emu, "Ingress", "bad")] == [
            (event.metadata.name, 2)
        ]
    finally:
        for p in procs:
            p.stop()


# --- other sources --------------------------------------------------------------------------


def test_an_ingress_nginx_class_ingress_gets_a_warning_with_its_reason(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    """The kubernetesIngressNGINX source: an annotation edge does not serve refuses the
    Ingress, and the Event says which."""
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    KP.backend_service(emu, "app", whoami)
    emu.create(NX.nginx_ingress("good", "good.test", [("/", "Prefix", "app")]))
    cert = {"auth-tls-secret": "default/client-ca"}
    emu.create(NX.nginx_ingress("client-cert", "c.test", [("/", "Prefix", "app")], cert))
    static = KP.static_config(emu)
    static["providers"] = {
        "kubernetesIngressNGINX": {
            "endpoint": emu.url,
            "token": KP.TOKEN,
            "throttleDuration": "100ms",
        }
    }
    edge = start_edge(static)
    assert KP.follows(edge.port(), "good.test", "w1")
    assert KP.until(lambda: len(warnings(emu, "Ingress", "client-cert")) == 1)
    (event,) = warnings(emu, "Ingress", "client-cert")
    assert event.reason == "InvalidAnnotation"
    assert "auth-tls-secret is not supported" in event.message
    assert described(emu, "Ingress", "good") == []


def test_an_ingress_route_naming_a_missing_service_gets_a_warning(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    KP.backend_service(emu, "app", whoami)
    emu.create(CP.ingress_route("good", "a.test", "app"))
    emu.create(CP.ingress_route("bad", "b.test", "missing"))
    edge = start_edge(CP.static_config(emu))
    assert KP.follows(edge.port("web"), "a.test", "w1")
    assert KP.until(lambda: len(warnings(emu, "IngressRoute", "bad")) == 1)
    (event,) = warnings(emu, "IngressRoute", "bad")
    assert event.reason == "Refused" and "missing" in event.message
    assert event.involved_object.api_version == "traefik.io/v1alpha1"
    assert described(emu, "IngressRoute", "good") == []


def test_an_http_route_with_a_missing_backend_gets_a_warning(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    ports = GP.Ports()
    emu.create(GP.gateway_class())
    emu.create(GP.gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    GP.backends(emu, v1=whoami)
    emu.create(GP.http_route("good", [{"backendRefs": [GP.to("v1")]}], ["a.test"]))
    emu.create(GP.http_route("bad", [{"backendRefs": [GP.to("nowhere")]}], ["b.test"]))
    start_edge(GP.static_config(emu, ports))
    assert KP.until(lambda: GP.who(ports.web, "/", "a.test") == "w1")
    assert KP.until(lambda: len(warnings(emu, "HTTPRoute", "bad")) == 1)
    (event,) = warnings(emu, "HTTPRoute", "bad")
    assert "BackendNotFound" in event.message and "nowhere" in event.message
    assert event.involved_object.api_version == "gateway.networking.k8s.io/v1"
    assert described(emu, "HTTPRoute", "good") == []


# --- what Events may not hold up --------------------------------------------------------------


def test_refused_event_writes_hold_up_neither_routes_nor_changes(
    emu: Emulator, start_edge, whoami: Whoami, caplog: pytest.LogCaptureFixture
) -> None:
    """Every Event write refused (403, as without the RBAC grant): edge serves, follows
    changes, says so once (not once per object), and once the writes are allowed the
    Events come."""
    caplog.set_level(logging.INFO, "edge.providers.kubernetes.events")
    refusing = [True]

    def authorize(access: Access) -> bool:
        writes = access.verb in ("create", "patch")
        return not (refusing[0] and access.resource == "events" and writes)

    emu.authorizer = authorize
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "app", whoami)
    emu.create(bad_ingress(("b.test", "/ok", "Exact", "app")))
    emu.create(KP.ingress("bad2", [("d.test", "/", "Prefix", "missing")]))
    edge = start_edge()
    assert KP.follows(edge.port(), "b.test", "w1", "/ok")
    assert KP.until(lambda: recorder(edge).failures >= 3)
    emu.create(KP.ingress("more", [("c.test", "/", "Prefix", "app")]))
    assert KP.follows(edge.port(), "c.test", "w1")
    assert warnings(emu, "Ingress", "bad") == []
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "403 Forbidden" in said and "k8s/rbac.yaml" in said
    refusing[0] = False
    assert KP.until(lambda: len(warnings(emu, "Ingress", "bad")) == 1, 20.0)
    assert KP.until(lambda: len(warnings(emu, "Ingress", "bad2")) == 1, 20.0)
    assert any("written again" in r.getMessage() for r in caplog.records)


def test_event_writes_keep_to_their_rate(emu: Emulator, start_edge, whoami: Whoami) -> None:
    """Eight refused Ingresses, 5 writes a second after a burst of 1: each Event is read
    (404) then created, 16 requests spread over at least 3 s."""
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "app", whoami)
    for i in range(8):
        emu.create(KP.ingress(f"bad{i}", [(f"b{i}.test", "/", "Prefix", "missing")]))
    start_edge(limits=Limits(rate=5.0, burst=1))
    assert KP.until(lambda: all(len(warnings(emu, "Ingress", f"bad{i}")) == 1 for i in range(8)))
    times = [r.at for r in emu.requests if r.path.startswith(EVENTS) and r.method != "GET"]
    assert len(times) == 16
    assert times[-1] - times[0] >= 15 / 5.0 - 0.1
