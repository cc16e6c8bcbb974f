"""The kubernetesCRD provider end to end: emulator -> provider -> edge -> real backends.

As in ``test_provider.py`` (whose in-process edge and helpers these tests use): a real
:class:`~tests.kube.emulator.Emulator` serves ``traefik.io/v1alpha1`` objects over a
socket to the official client in edge's reflector threads; one edge process built by
``build_providers`` from ``providers.kubernetesCRD`` serves an IngressRoute (HTTP to
``edge whoami``), an IngressRouteTCP with ``passthrough: true`` (``openssl s_client
-servername`` through it receives the backend's own certificate) and an IngressRouteUDP
(``edge whoami --udp`` echoes); an edit in the emulator shows within 1 s; the Ingress
provider runs beside it. Every wait is bounded by a deadline.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from edge.providers.kubernetes.client import CRD_RESOURCES
from edge.providers.kubernetes.provider import KubernetesCRDProvider, KubernetesIngressProvider
from tests.harness import ROOT, WHOAMI_RE, Proc, Whoami, need
from tests.integration.kubernetes import test_provider as KP
from tests.integration.peers import fingerprint_of, s_client_until
from tests.kube import objects as o
from tests.kube.emulator import Emulator

TRAEFIK = "traefik.io/v1alpha1"


# --- objects ------------------------------------------------------------------------------


def _crd(kind: str, name: str, spec: dict, namespace: str = "default") -> dict:
    return {
        "apiVersion": TRAEFIK,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def ingress_route(name: str, host: str, service: str) -> dict:
    return _crd(
        "IngressRoute",
        name,
        {
            "entryPoints": ["web"],
            "routes": [
                {
                    "match": f"Host(`{host}`)",
                    "kind": "Rule",
                    "services": [{"name": service, "port": 80}],
                }
            ],
        },
    )


def service(name: str, port: int, protocol: str = "TCP") -> dict:
    svc = o.service(name, port=port)
    svc["spec"]["ports"] = [{"name": "p", "port": port, "targetPort": port, "protocol": protocol}]
    return svc


def endpoints(name: str, service_name: str, port: int, protocol: str = "TCP") -> dict:
    eps = o.endpoint_slice(name, service_name=service_name, addresses=["127.0.0.1"], port=port)
    eps["ports"] = [{"name": "p", "port": port, "protocol": protocol}]
    return eps


# --- edge ---------------------------------------------------------------------------------


def static_config(
    emu: Emulator, ingress: bool = False, ingress_namespaces: tuple[str, ...] = ()
) -> dict:
    throttle = f"{int(KP.THROTTLE * 1000)}ms"
    kube = {"endpoint": emu.url, "token": KP.TOKEN, "throttleDuration": throttle}
    providers: dict[str, Any] = {"kubernetesCRD": dict(kube)}
    if ingress:
        providers["kubernetesIngress"] = dict(kube, namespaces=list(ingress_namespaces))
    return {
        "entryPoints": {
            "web": {"address": "127.0.0.1:0"},
            "websecure": {"address": "127.0.0.1:0"},
            "dns": {"address": "127.0.0.1:0/udp"},
            "traefik": {"address": "127.0.0.1:0"},
        },
        "providers": providers,
        "providersThrottleDuration": throttle,
        "ping": {"entryPoint": "traefik"},
        "log": {"level": "INFO"},
    }


def _fast(app: Any) -> None:
    for p in app.providers:
        if isinstance(p, (KubernetesCRDProvider, KubernetesIngressProvider)):
            p.timing = KP.FAST
            p.wait_log_interval = 0.5
        if isinstance(p, KubernetesIngressProvider):
            p.environ = {}


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(token=KP.TOKEN, bookmark_interval=1.0) as e:
        yield e


@pytest.fixture
def start_edge(emu: Emulator) -> Iterator[Callable[..., KP.InProcessEdge]]:
    started: list[KP.InProcessEdge] = []

    def start(
        ingress: bool = False,
        ingress_namespaces: tuple[str, ...] = (),
        tweak: Callable[[Any], None] | None = None,
    ) -> KP.InProcessEdge:
        def tweaked(app: Any) -> None:
            _fast(app)
            if tweak is not None:
                tweak(app)

        e = KP.InProcessEdge(static_config(emu, ingress, ingress_namespaces), tweak=tweaked)
        e.start()
        started.append(e)
        assert KP.until(lambda: e.ready() == 200, 10.0), "edge never became ready"
        return e

    yield start
    KP.stop_all(started)


@pytest.fixture(scope="module")
def udp_echo() -> Iterator[Proc]:
    """``edge whoami --udp``: a UDP echo server."""
    p = Proc(["whoami", "--name", "echo", "--udp", "127.0.0.1:0"])
    p.port = int(p.wait_for(WHOAMI_RE).group(4))  # type: ignore[attr-defined]
    yield p
    p.stop()


def udp_round_trip(port: int, data: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        s.connect(("127.0.0.1", port))
        s.send(data)
        try:
            return s.recv(65536)
        except OSError:
            return b""


# --- tests --------------------------------------------------------------------------------


def test_http_passthrough_and_udp_from_one_edge(
    emu: Emulator, start_edge, whoami: Whoami, s_server, certs, udp_echo
) -> None:
    """One edge with providers.kubernetesCRD: an IngressRoute serves HTTP, an
    IngressRouteTCP with passthrough hands the TLS connection to the backend untouched
    (the backend CA's certificate arrives, its fingerprint unchanged), an IngressRouteUDP
    echoes; the elements are named ``…@kubernetescrd``."""
    emu.create(o.service("web"))
    emu.create(KP.slice_for("web", whoami))
    emu.create(ingress_route("web", "a.test", "web"))
    emu.create(service("pt", 443))
    emu.create(endpoints("pt-1", "pt", s_server.port))
    emu.create(
        _crd(
            "IngressRouteTCP",
            "pt",
            {
                "entryPoints": ["websecure"],
                "routes": [
                    {"match": "HostSNI(`pt.test`)", "services": [{"name": "pt", "port": 443}]}
                ],
                "tls": {"passthrough": True},
            },
        )
    )
    emu.create(service("echo", 53, "UDP"))
    emu.create(endpoints("echo-1", "echo", udp_echo.port, "UDP"))  # type: ignore[attr-defined]
    emu.create(
        _crd(
            "IngressRouteUDP",
            "echo",
            {"entryPoints": ["dns"], "routes": [{"services": [{"name": "echo", "port": 53}]}]},
        )
    )
    edge = start_edge()
    assert KP.follows(edge.port(), "a.test", whoami.name)

    out = s_client_until(edge.port("websecure"), "pt.test", b"hello\n", b"olleh")
    assert b"olleh" in out  # s_server -rev answered through edge
    assert fingerprint_of(out) == certs["backend"].fingerprint

    dns = edge.port("dns")
    assert KP.until(lambda: udp_round_trip(dns, b"ping") == b"ping")

    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesCRDProvider))
    conf = provider.conversion.configuration
    assert conf.http is not None and conf.tcp is not None and conf.udp is not None
    assert provider.name == "kubernetescrd" and provider.conversion.problems == []


def test_an_edited_ingress_route_shows_within_a_second(
    emu: Emulator, start_edge, whoami: Whoami, whoami2: Whoami
) -> None:
    """An IngressRoute edited in the emulator (its Service changed), then deleted:
    each shows in routing within 1 s."""
    for name, w in (("one", whoami), ("two", whoami2)):
        emu.create(o.service(name))
        emu.create(KP.slice_for(name, w))
    emu.create(ingress_route("web", "e.test", "one"))
    edge = start_edge()
    port = edge.port()
    assert KP.follows(port, "e.test", whoami.name)

    emu.update(ingress_route("web", "e.test", "two"))
    assert KP.until(lambda: KP.served_by(port, "e.test") == whoami2.name, 1.0)

    emu.delete("IngressRoute", "default", "web")
    assert KP.until(lambda: KP.served_by(port, "e.test") == "404", 1.0)


def _closed_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_endpoint_change_updates_load_balancers_without_a_conversion(
    emu: Emulator, start_edge, whoami: Whoami, whoami2: Whoami, udp_echo, caplog
) -> None:
    """EndpointSlices changed under an IngressRoute's and an IngressRouteUDP's Services:
    the CRD provider derives its configuration from the last one (no whole conversion),
    the HTTP load balancer gets its new servers in place (no router rebuild), and the
    UDP route follows its slice too."""
    caplog.set_level(logging.INFO, KP.LOG)
    emu.create(o.service("web"))
    emu.create(KP.slice_for("web", whoami))
    emu.create(ingress_route("web", "a.test", "web"))
    emu.create(service("echo", 53, "UDP"))
    emu.create(endpoints("echo-1", "echo", _closed_udp_port(), "UDP"))
    emu.create(
        _crd(
            "IngressRouteUDP",
            "echo",
            {"entryPoints": ["dns"], "routes": [{"services": [{"name": "echo", "port": 53}]}]},
        )
    )
    edge = start_edge()
    port, dns = edge.port(), edge.port("dns")
    assert KP.follows(port, "a.test", whoami.name)
    assert udp_round_trip(dns, b"ping") == b""  # nothing listens where the slice points
    assert edge.app is not None
    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesCRDProvider))
    time.sleep(3 * KP.THROTTLE)
    rebuilds = len(KP.messages(caplog, "configuration applied:"))
    conversions, patches = provider.conversions, provider.patches

    emu.create(KP.slice_for("web", whoami2))
    emu.delete("EndpointSlice", "default", f"web-{whoami.name}")
    assert KP.until(lambda: all(KP.served_by(port, "a.test") == whoami2.name for _ in range(4)))
    assert provider.conversions == conversions and provider.patches > patches
    assert KP.until(lambda: KP.messages(caplog, "configuration applied in place"))
    assert len(KP.messages(caplog, "configuration applied:")) == rebuilds

    patches = provider.patches
    emu.update(endpoints("echo-1", "echo", udp_echo.port, "UDP"))  # type: ignore[attr-defined]
    assert KP.until(lambda: udp_round_trip(dns, b"ping") == b"ping")
    assert provider.conversions == conversions and provider.patches > patches


def test_tcp_and_udp_endpoint_changes_reach_traffic_without_a_router_rebuild(
    emu: Emulator, start_edge, whoami: Whoami, whoami2: Whoami, udp_echo, caplog
) -> None:
    """EndpointSlices changed under an IngressRouteTCP's and an IngressRouteUDP's
    Services: the TCP and UDP load balancers take their new servers in place (the
    entry points keep their router sets: nothing is rebuilt), and traffic follows: raw
    TCP (HTTP bytes relayed to whoami) reaches the new backend, the UDP route echoes."""
    caplog.set_level(logging.INFO, KP.LOG)
    emu.create(o.service("raw"))
    emu.create(KP.slice_for("raw", whoami))
    emu.create(_crd("IngressRouteTCP", "raw", {"entryPoints": ["websecure"], "routes": [
        {"match": "HostSNI(`*`)", "services": [{"name": "raw", "port": 80}]}]}))  # fmt: skip
    emu.create(service("echo", 53, "UDP"))
    emu.create(endpoints("echo-1", "echo", _closed_udp_port(), "UDP"))
    emu.create(_crd("IngressRouteUDP", "echo", {"entryPoints": ["dns"],
        "routes": [{"services": [{"name": "echo", "port": 53}]}]}))  # fmt: skip
    edge = start_edge()
    raw, dns = edge.port("websecure"), edge.port("dns")
    assert KP.follows(raw, "any.test", whoami.name)
    assert udp_round_trip(dns, b"ping") == b""  # nothing listens where the slice points
    assert edge.app is not None
    time.sleep(3 * KP.THROTTLE)
    entrypoints = edge.app.entrypoints.all
    sets = {name: entrypoints[name].routers for name in ("websecure", "dns")}
    rebuilds = len(KP.messages(caplog, "configuration applied:"))

    emu.create(KP.slice_for("raw", whoami2))
    emu.delete("EndpointSlice", "default", f"raw-{whoami.name}")
    assert KP.until(lambda: all(KP.served_by(raw, "any.test") == whoami2.name for _ in range(4)))
    emu.update(endpoints("echo-1", "echo", udp_echo.port, "UDP"))  # type: ignore[attr-defined]
    assert KP.until(lambda: udp_round_trip(dns, b"ping") == b"ping")
    # The UDP router's address table (sessions keep their server across a switch by it,
    # datagrams from a server are told from clients by it) holds the new server only.
    udp_router = entrypoints["dns"].routers.udp
    assert udp_router is not None
    assert set(udp_router.servers) == {f"127.0.0.1:{udp_echo.port}"}  # type: ignore[attr-defined]
    assert len(KP.messages(caplog, "configuration applied in place")) >= 2
    assert len(KP.messages(caplog, "configuration applied:")) == rebuilds
    assert all(entrypoints[name].routers is routers for name, routers in sets.items())


def _both_sources(
    emu: Emulator,
    start_edge,
    ingress_backend: Whoami,
    crd_backend: Whoami,
    tweak: Callable[[Any], None] | None = None,
) -> KP.InProcessEdge:
    """An edge with both providers: the Ingress ``ing`` (i.test) on ``ingress_backend``,
    the IngressRoute ``crd`` (c.test) on ``crd_backend``, each followed."""
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "ing", ingress_backend)
    emu.create(KP.ingress("ing", [("i.test", "/", "Prefix", "ing")]))
    emu.create(o.service("crd"))
    emu.create(KP.slice_for("crd", crd_backend))
    emu.create(ingress_route("crd", "c.test", "crd"))
    edge = start_edge(ingress=True, tweak=tweak)
    assert KP.follows(edge.port(), "i.test", ingress_backend.name)
    assert KP.follows(edge.port(), "c.test", crd_backend.name)
    return edge


def test_both_kubernetes_providers_at_once(emu: Emulator, start_edge, whoami, whoami2) -> None:
    """providers.kubernetesIngress and providers.kubernetesCRD in one edge: each serves
    its own objects, under its own provider name; SIGHUP converts both again; one
    stopped, the other goes on following the Services and EndpointSlices they shared."""
    edge = _both_sources(emu, start_edge, whoami, whoami2)
    port = edge.port()
    names = sorted(p.name for p in edge.app.providers)
    assert names == ["kubernetes", "kubernetescrd"]
    by_name = {p.name: p for p in edge.app.providers}
    ingress_http = by_name["kubernetes"].conversion.configuration.http
    crd_http = by_name["kubernetescrd"].conversion.configuration.http
    assert ingress_http is not None and crd_http is not None
    assert set(ingress_http.routers).isdisjoint(crd_http.routers)

    # SIGHUP: both convert again.
    ing, crd = by_name["kubernetes"], by_name["kubernetescrd"]
    before = (ing.conversions, crd.conversions)
    assert edge.loop is not None and edge.app is not None
    edge.loop.call_soon_threadsafe(edge.app.reload)
    assert KP.until(lambda: ing.conversions > before[0] and crd.conversions > before[1])

    # One stops: the other goes on reading the kinds they shared.
    crd.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("kubernetescrd")]
    emu.create(KP.slice_for("ing", whoami2))
    emu.delete("EndpointSlice", "default", f"ing-{whoami.name}")
    assert KP.follows(port, "i.test", whoami2.name)


def test_no_reflector_outlives_edge_when_a_provider_stop_waits_its_turn(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    """A busy machine at shutdown: the loop's executor has one worker, and the Ingress
    provider's stop holds it for 0.5 s, so the CRD provider's stop waits its turn while
    edge's own shutdown goes on. Edge still ends every thread of the core both share
    (reflectors, converters) before it has stopped: its stop waits for its providers,
    and stops the cores it built itself."""

    def one_worker_and_a_slow_stop(app: Any) -> None:
        app.loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        ing = next(p for p in app.providers if isinstance(p, KubernetesIngressProvider))
        stop = ing.stop

        def slow_stop(timeout: float = 3.0) -> None:
            time.sleep(0.5)
            stop(timeout)

        ing.stop = slow_stop

    edge = _both_sources(emu, start_edge, whoami, whoami, tweak=one_worker_and_a_slow_stop)
    assert KP.kube_threads()
    cores = edge.stop()
    assert KP.kube_threads() == [], cores
    assert edge.app is not None
    assert [ended for _, ended in edge.app.control.cores_stopped] == [True]


def test_no_reflector_outlives_edge_when_a_provider_stop_raises(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    """The CRD provider's stop raises before it reaches its subscription (a bug in a
    source's extra step): the provider still closes what it can, and edge stops the
    shared core itself, so no reflector or converter thread is left."""

    def failing_wake(app: Any) -> None:
        crd = next(p for p in app.providers if isinstance(p, KubernetesCRDProvider))

        def wake_extra() -> None:
            raise RuntimeError("wake_extra failed")

        crd.wake_extra = wake_extra

    edge = _both_sources(emu, start_edge, whoami, whoami, tweak=failing_wake)
    assert KP.kube_threads()
    cores = edge.stop()
    assert KP.kube_threads() == [], cores
    assert edge.app is not None
    assert [ended for _, ended in edge.app.control.cores_stopped] == [True]


SHARED_KINDS = (
    "/api/v1/services",
    "/apis/discovery.k8s.io/v1/endpointslices",
    "/api/v1/secrets",
)
OWN_KINDS = ("/apis/networking.k8s.io/v1/ingresses", "/apis/traefik.io/v1alpha1/ingressroutes")
# Ingress, IngressClass; shared; traefik.io; the CRD provider's ConfigMaps and Nodes
WATCHES = 2 + len(SHARED_KINDS) + len(CRD_RESOURCES) + 2


def test_both_providers_list_and_watch_services_slices_and_secrets_once(
    emu: Emulator, start_edge, whoami: Whoami, whoami2: Whoami
) -> None:
    """Both providers in one edge share one core: Services, EndpointSlices and Secrets
    are LISTed and WATCHed once for the two (counted at the API server); each provider
    is woken only by its own kinds; a 410 Gone (history compacted while the watches were
    away) re-LISTs each shared kind once, and both providers follow what changed."""
    edge = _both_sources(emu, start_edge, whoami, whoami)
    port = edge.port()
    assert edge.app is not None
    by_name = {p.name: p for p in edge.app.providers}
    ing, crd = by_name["kubernetes"], by_name["kubernetescrd"]
    assert ing.core is crd.core and len(ing.core.clients) == 1
    assert emu.wait_watches(WATCHES)
    for path in (*SHARED_KINDS, *OWN_KINDS):
        assert emu.count(path, watch=False) == 1, path
        assert emu.count(path, watch=True) == 1, path

    # An Ingress wakes the Ingress provider only, an IngressRoute the CRD provider only.
    time.sleep(3 * KP.THROTTLE)
    ing_rounds, crd_rounds = ing.rounds, crd.rounds
    emu.create(KP.ingress("more", [("m.test", "/", "Prefix", "ing")]))
    assert KP.follows(port, "m.test", whoami.name)
    emu.create(ingress_route("more", "n.test", "crd"))
    assert KP.follows(port, "n.test", whoami.name)
    time.sleep(3 * KP.THROTTLE)
    assert (ing.rounds, crd.rounds) == (ing_rounds + 1, crd_rounds + 1)

    # Watches stalled, both Services' endpoints moved, history compacted, watches cut:
    # every reflector gets 410 Gone and LISTs again, the shared ones once for both.
    emu.stall_watches()
    for service in ("ing", "crd"):
        emu.delete("EndpointSlice", "default", f"{service}-{whoami.name}")
        emu.create(KP.slice_for(service, whoami2))
    emu.compact()
    t0 = time.monotonic()
    emu.drop_watches()
    assert KP.follows(port, "i.test", whoami2.name)
    assert KP.follows(port, "c.test", whoami2.name)
    assert emu.wait_watches(WATCHES)
    for path in (*SHARED_KINDS, *OWN_KINDS):
        assert emu.count(path, since=t0, watch=False) == 1, path
    # and both go on following from the new LIST's watches
    for service in ("ing", "crd"):
        emu.delete("EndpointSlice", "default", f"{service}-{whoami2.name}")
        emu.create(KP.slice_for(service, whoami, name=f"{service}-back"))
    assert KP.follows(port, "i.test", whoami.name)
    assert KP.follows(port, "c.test", whoami.name)


def test_ingress_status_and_node_port_lb_read_nodes_through_one_reflector(
    emu: Emulator, whoami: Whoami
) -> None:
    """The Ingress provider's status writer (a hostNetwork DaemonSet's nodes) and the
    CRD provider's nodePortLB read Nodes through the core: one LIST and one WATCH of
    Nodes for both, and each follows a node's address."""
    emu.create(o.ingress_class("edge"))
    KP.backend_service(emu, "ing", whoami)
    emu.create(KP.ingress("ing", [("i.test", "/", "Prefix", "ing")]))
    svc = o.service("np", port=80, target_port=8080)
    svc["spec"]["type"] = "NodePort"
    svc["spec"]["ports"][0]["nodePort"] = whoami.port
    emu.create(svc)
    emu.create(_crd("IngressRoute", "np", {"entryPoints": ["web"], "routes": [
        {"match": "Host(`np.test`)",
         "services": [{"name": "np", "port": 80, "nodePortLB": True}]}]}))  # fmt: skip
    emu.create(KP._node("n1", "127.0.0.1"))
    emu.create(KP._pod("edge-a", "n1"))

    def in_a_pod(app: Any) -> None:
        _fast(app)
        for p in app.providers:
            if isinstance(p, KubernetesIngressProvider):
                p.environ = {"POD_NAME": "edge-a", "POD_NAMESPACE": "edge-system"}

    def status() -> set[str]:
        found = emu.get("Ingress", "default", "ing").get("status", {})
        return {a["ip"] for a in found.get("loadBalancer", {}).get("ingress", [])}

    edge = KP.InProcessEdge(static_config(emu, ingress=True), tweak=in_a_pod).start()
    try:
        assert KP.until(lambda: edge.ready() == 200, 10.0)
        port = edge.port()
        assert KP.follows(port, "np.test", whoami.name)
        assert KP.until(lambda: status() == {"127.0.0.1"})
        assert emu.count("/api/v1/nodes", watch=False) == 1
        assert KP.until(lambda: emu.count("/api/v1/nodes", watch=True) == 1)

        emu.update(KP._node("n1", "127.0.0.2"))  # nothing listens there: 502
        assert KP.until(lambda: status() == {"127.0.0.2"})
        assert KP.until(lambda: KP.served_by(port, "np.test") == "502")
        assert emu.count("/api/v1/nodes", watch=False) == 1
    finally:
        edge.stop()


def test_providers_reading_other_namespaces_share_one_cluster_wide_reflector(
    emu: Emulator, start_edge, whoami: Whoami, whoami2: Whoami
) -> None:
    """The Ingress provider in namespace ``ing``, the CRD provider in all: Services and
    EndpointSlices are listed once, cluster-wide, none in ``ing`` alone; each provider
    serves its own; a slice changed in ``default`` wakes the CRD provider only."""
    emu.create(o.ingress_class("edge"))
    emu.create(o.service("app", "ing"))
    slice_ing = KP.slice_for("app", whoami)
    slice_ing["metadata"]["namespace"] = "ing"
    emu.create(slice_ing)
    ing_obj = KP.ingress("app", [("i.test", "/", "Prefix", "app")])
    ing_obj["metadata"]["namespace"] = "ing"
    emu.create(ing_obj)
    emu.create(o.service("crd"))
    emu.create(KP.slice_for("crd", whoami))
    emu.create(ingress_route("crd", "c.test", "crd"))
    edge = start_edge(ingress=True, ingress_namespaces=("ing",))
    port = edge.port()
    assert KP.follows(port, "i.test", whoami.name)
    assert KP.follows(port, "c.test", whoami.name)
    for path in SHARED_KINDS:
        assert emu.count(path, watch=False) == 1, path
        head, _, plural = path.rpartition("/")
        assert emu.count(f"{head}/namespaces/ing/{plural}") == 0, path
    assert emu.count("/apis/networking.k8s.io/v1/namespaces/ing/ingresses", watch=False) == 1
    assert edge.app is not None
    by_name = {p.name: p for p in edge.app.providers}
    ing, crd = by_name["kubernetes"], by_name["kubernetescrd"]
    assert set(ing.view.snapshot()["Service"]) == {("ing", "app")}
    assert set(crd.view.snapshot()["Service"]) == {("ing", "app"), ("default", "crd")}

    time.sleep(3 * KP.THROTTLE)
    ing_rounds, crd_rounds = ing.rounds, crd.rounds
    emu.create(KP.slice_for("crd", whoami2))
    emu.delete("EndpointSlice", "default", f"crd-{whoami.name}")
    assert KP.follows(port, "c.test", whoami2.name)
    time.sleep(3 * KP.THROTTLE)
    assert ing.rounds == ing_rounds and crd.rounds > crd_rounds


def test_edge_check_lists_the_crd_routes_left_out(emu: Emulator, tmp_path, whoami) -> None:
    """``edge check`` with providers.kubernetesCRD lists the cluster once: a route to a
    missing Service is named with its reason, the other is enabled under
    ``@kubernetescrd``."""
    emu.create(o.service("app"))
    emu.create(KP.slice_for("app", whoami))
    emu.create(ingress_route("good", "a.test", "app"))
    emu.create(ingress_route("bad", "b.test", "missing"))
    path = tmp_path / "edge.yaml"
    path.write_text(yaml.safe_dump(static_config(emu)))
    out = subprocess.run(
        [sys.executable, "-m", "edge", "check", "-c", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "kubernetescrd: IngressRoute default/bad" in out.stdout, out.stdout
    assert "service default/missing not found" in out.stdout, out.stdout
    assert "@kubernetescrd: enabled" in out.stdout, out.stdout


def test_a_chain_middleware_runs_the_middlewares_it_names(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    """An IngressRoute using a chain Middleware whose members are Traefik's ``{name,
    namespace}`` references: curl's request reaches the backend with the prefix
    stripped and the header added, in the chain's order."""
    emu.create(o.service("web"))
    emu.create(KP.slice_for("web", whoami))
    emu.create(_crd("Middleware", "strip", {"stripPrefix": {"prefixes": ["/shop"]}}))
    headers = {"customRequestHeaders": {"X-Chained": "yes"}}
    emu.create(_crd("Middleware", "mark", {"headers": headers}))
    chain = {"middlewares": [{"name": "strip"}, {"name": "mark", "namespace": "default"}]}
    emu.create(_crd("Middleware", "both", {"chain": chain}))
    route = ingress_route("web", "chain.test", "web")
    route["spec"]["routes"][0]["middlewares"] = [{"name": "both"}]
    emu.create(route)
    edge = start_edge()
    assert KP.follows(edge.port(), "chain.test", whoami.name, "/shop/cart")

    out = subprocess.run(
        [need("curl"), "-s", "-m", "10", "-H", "Host: chain.test",
         f"http://127.0.0.1:{edge.port()}/shop/cart"],
        capture_output=True, text=True, timeout=20, check=True,
    )  # fmt: skip
    seen = json.loads(out.stdout)
    assert seen["path"] == "/cart"
    assert seen["headers"].get("X-Chained") == ["yes"], seen["headers"]
    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesCRDProvider))
    assert provider.conversion.problems == []


def test_basic_auth_reads_its_users_from_a_secret_and_follows_it(
    emu: Emulator, start_edge, whoami: Whoami
) -> None:
    """A basicAuth Middleware naming a kubernetes.io/basic-auth Secret: curl without
    credentials gets 401, with the Secret's gets through; the password changed in the
    Secret is the one asked for within a second."""

    def basic_auth_secret(password: str) -> dict:
        data = {"username": b"alice", "password": password.encode()}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "admin", "namespace": "default"},
            "type": "kubernetes.io/basic-auth",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }

    def status(user: str | None) -> int:
        auth = ["-u", user] if user else []
        out = subprocess.run(
            [need("curl"), "-s", "-o", "/dev/null", "-m", "10", "-w", "%{http_code}",
             "-H", "Host: auth.test", *auth, f"http://127.0.0.1:{edge.port()}/"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        return int(out.stdout or 0)

    emu.create(o.service("web"))
    emu.create(KP.slice_for("web", whoami))
    emu.create(basic_auth_secret("s3cret"))
    emu.create(_crd("Middleware", "login", {"basicAuth": {"secret": "admin"}}))
    route = ingress_route("web", "auth.test", "web")
    route["spec"]["routes"][0]["middlewares"] = [{"name": "login"}]
    emu.create(route)
    edge = start_edge()
    assert KP.until(lambda: status(None) == 401, 10.0)
    assert status("alice:s3cret") == 200
    assert status("alice:wrong") == 401

    emu.update(basic_auth_secret("n3w"))
    assert KP.until(lambda: status("alice:n3w") == 200, 1.0)
    assert status("alice:s3cret") == 401
