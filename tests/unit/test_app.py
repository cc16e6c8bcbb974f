"""The endpoints-only path: a change that touches only servers updates them in place;
and the providers the app builds (Kubernetes sources on one cluster share one core).

Real Dataplane listeners over real validated snapshots (nothing bound: the
routers are read from the entrypoints). What must hold after an endpoints-only
change: the router objects are the very same (no rebuild), the services hand
out the new servers, pooled connections to servers that stay are still there,
and the weighted rotation goes on where it was. Anything else is a full rebuild.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
import uvloop

from edge.app import ControlPlane, Dataplane, build_providers
from edge.config.diff import changed_servers
from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.config.static import StaticConfig
from edge.providers.kubernetes.provider import KubernetesCRDProvider, KubernetesIngressProvider


def conf(
    servers: list[tuple[str, int]], *, rule: str = "Host(`a.test`)", extra: dict | None = None
) -> Configuration:
    http: dict[str, Any] = {
        "routers": {
            "r": {"rule": rule, "service": "s"},
            "other": {"rule": "Host(`b.test`)", "service": "t"},
        },
        "services": {
            "s": {"loadBalancer": {"servers": [{"url": u, "weight": w} for u, w in servers]}},
            "t": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}]}},
        },
    }
    if extra:
        http.update(extra)
    return msgspec.convert({"http": http}, Configuration)


@pytest.fixture
def dataplane():
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    static = msgspec.convert({"entryPoints": {"web": {"address": "127.0.0.1:0"}}}, StaticConfig)
    plane = Dataplane(static, loop)

    def apply(c: Configuration) -> None:
        plane.apply(build_runtime(merge({"file": c}), {"web": "tcp"}, previous=plane.runtime))

    plane.apply_conf = apply
    yield plane
    plane.transports.close()
    loop.close()


def picks(plane: Dataplane, n: int) -> list[str]:
    service = plane.entrypoints.all["web"].router.by_host["a.test"].service
    return [service.pick().server.url for _ in range(n)]


A, B, C = "http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003"


class Idle:
    """A pooled connection as the pool sees one."""

    idle_deadline = 0.0

    def is_reusable(self) -> bool:
        return True

    def close(self) -> None: ...


def test_an_endpoints_only_change_updates_servers_in_place(dataplane):
    dataplane.apply_conf(conf([(A, 1), (B, 2)]))
    router = dataplane.entrypoints.all["web"].router
    route = router.by_host["a.test"]
    assert picks(dataplane, 3) == [B, A, B]
    transport = dataplane.transports.get("default@internal")
    server_b = route.service.pick().server
    assert server_b.url == B
    idle = Idle()
    transport.put_idle(server_b, idle)  # a pooled connection to B, which stays
    dataplane.apply_conf(conf([(A, 1), (B, 2), (C, 3)]))
    assert dataplane.entrypoints.all["web"].router is router, "no router rebuild"
    assert router.by_host["a.test"] is route
    assert dataplane.transports.get("default@internal") is transport
    assert transport.take_idle(server_b) is idle, "the pool of a server that stays is kept"
    got = picks(dataplane, 12)
    assert got.count(A) == 2 and got.count(B) == 4 and got.count(C) == 6


def test_the_rotation_goes_on_for_servers_that_stay(dataplane):
    dataplane.apply_conf(conf([(A, 1), (B, 3)]))
    first = picks(dataplane, 2)  # the rotation is now partway through
    dataplane.apply_conf(conf([(A, 1), (B, 3), (C, 0)]))  # C never picked: same rotation as before
    carried = picks(dataplane, 6)
    fresh_plane_sequence = first + carried
    dataplane.apply_conf(
        conf([(A, 1), (B, 3)], rule="Host(`a.test`) || Host(`c.test`)")
    )  # full rebuild
    restarted = picks(dataplane, 8)
    assert fresh_plane_sequence == restarted, (
        "in place, the rotation continued exactly where it was"
    )


def test_a_server_list_can_grow_from_one_and_shrink_to_none(dataplane):
    dataplane.apply_conf(conf([(A, 1)]))
    router = dataplane.entrypoints.all["web"].router
    assert picks(dataplane, 2) == [A, A]
    dataplane.apply_conf(conf([(A, 1), (B, 1)]))
    assert dataplane.entrypoints.all["web"].router is router
    assert sorted(picks(dataplane, 2)) == [A, B], "the one-server shortcut follows the update"
    dataplane.apply_conf(conf([]))
    assert dataplane.entrypoints.all["web"].router is router
    assert router.by_host["a.test"].service.pick() is None


@pytest.mark.parametrize(
    "change",
    [
        {"rule": "Host(`a.test`) || Host(`x.test`)"},
        {"extra": {"middlewares": {"m": {"addPrefix": {"prefix": "/p"}}}}},
    ],
)
def test_anything_else_rebuilds_the_routers(dataplane, change):
    dataplane.apply_conf(conf([(A, 1)]))
    router = dataplane.entrypoints.all["web"].router
    dataplane.apply_conf(conf([(A, 1)], **change))
    assert dataplane.entrypoints.all["web"].router is not router


def test_changed_servers_tells_an_endpoints_only_change():
    base = conf([(A, 1)])
    assert changed_servers(base, base) == []
    assert changed_servers(base, conf([(A, 1), (B, 1)])) == ["s"]
    assert changed_servers(base, conf([(A, 2)])) == ["s"]
    assert changed_servers(base, conf([(A, 1)], rule="Host(`z.test`)")) is None
    replace = msgspec.structs.replace
    s = base.http.services["s"]
    no_host = replace(s, load_balancer=replace(s.load_balancer, pass_host_header=False))
    other = replace(base, http=replace(base.http, services={**base.http.services, "s": no_host}))
    assert changed_servers(base, other) is None, "passHostHeader is not a server list"
    tcp = msgspec.convert(
        {"tcp": {"services": {"x": {"loadBalancer": {"servers": []}}}}}, Configuration
    ).tcp
    assert changed_servers(base, replace(base, tcp=tcp)) is None


# --- build_providers: one Kubernetes core per cluster ---------------------------------------


def kube_static(ingress: dict[str, Any], crd: dict[str, Any]) -> StaticConfig:
    return msgspec.convert(
        {"providers": {"kubernetesIngress": ingress, "kubernetesCRD": crd}}, StaticConfig
    )


CLUSTER = {"endpoint": "http://127.0.0.1:1", "token": "t0ken"}


def kube_sources(static: StaticConfig) -> tuple[KubernetesIngressProvider, KubernetesCRDProvider]:
    ingress, crd = build_providers(static)
    assert isinstance(ingress, KubernetesIngressProvider)
    assert isinstance(crd, KubernetesCRDProvider)
    return ingress, crd


def test_kubernetes_sources_reading_one_cluster_share_its_core():
    """Same endpoint and credentials, other namespaces and selectors: one core, both
    sources subscribed to it (nothing connects until a source starts)."""
    ingress, crd = kube_sources(
        kube_static(
            {**CLUSTER, "namespaces": ["a"], "labelSelector": "x=1"},
            {**CLUSTER, "namespaces": ["b"], "labelSelector": "y=2"},
        )
    )
    assert ingress.core is crd.core
    assert ingress.view.core is crd.view.core is crd.core
    assert (ingress.view.namespaces, crd.view.namespaces) == (("a",), ("b",))


@pytest.mark.parametrize(
    "other",
    [{"endpoint": "http://127.0.0.1:2"}, {"token": "another"}],
    ids=["another endpoint", "another token"],
)
def test_kubernetes_sources_on_another_cluster_or_credentials_have_their_own_core(other):
    ingress, crd = kube_sources(kube_static(CLUSTER, {**CLUSTER, **other}))
    assert ingress.core is not crd.core


def test_a_control_plane_is_not_ready_before_its_providers_start(tmp_path):
    # /ready may be asked between the entry points' binding and start(): with
    # nothing expected yet, "every provider delivered" would be vacuously true.
    dynamic = tmp_path / "dynamic.yaml"
    dynamic.write_text("http: {}\n")
    static = msgspec.convert(
        {
            "entryPoints": {"web": {"address": "127.0.0.1:0"}},
            "providers": {"file": {"filename": str(dynamic)}},
        },
        StaticConfig,
    )
    loop = uvloop.new_event_loop()
    try:
        control = ControlPlane(static, loop, listeners=[])
        assert [p.name for p in control.providers] == ["file"]
        assert not control.ready
    finally:
        loop.close()
