"""Review of what ships (k8s/, the Dockerfile, the README): edge run as k8s/ deploys it.

edge is started as the DaemonSet starts it: ``edge run`` on the ConfigMap's own
``edge.yaml`` (its entry points moved to free loopback ports, nothing else changed)
with the DaemonSet's environment, its Ingress provider pointed at the in-memory API
server (tests/kube/emulator.py) holding the IngressClass of k8s/ingressclass.yaml and
an Ingress whose backend is a real ``edge whoami`` process. Requests are real HTTP on
127.0.0.1; every wait has a deadline.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness import LISTEN_RE, ROOT, Proc, Whoami, get
from tests.kube import objects as o
from tests.kube.configmap import configmap_static
from tests.kube.emulator import Emulator

K8S = ROOT / "k8s"
TOKEN = "edge-shipping-review"
HOST = "web.example.test"
NAMESPACE = "edge-system"


def manifest(name: str, kind: str) -> dict:
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d and d["kind"] == kind]
    assert len(docs) == 1, f"{name}: one {kind} expected"
    return docs[0]


class DeployedEdge:
    """edge on the ConfigMap's configuration, as one pod of the DaemonSet runs it."""

    def __init__(
        self, tmp: Path, emu: Emulator, *, cpu_limit: int = 1, accept_grace: str | None = None
    ) -> None:
        static = configmap_static(accept_grace)  # the ConfigMap's own keys, a shorter wait
        for ep in static["entryPoints"].values():  # the same entry points on free loopback ports
            ep["address"] = "127.0.0.1:0" + ("/udp" if ep["address"].endswith("/udp") else "")
        for provider in static["providers"].values():  # kubernetesIngress, kubernetesCRD
            provider.update(endpoint=emu.url, token=TOKEN)
        static["providersThrottleDuration"] = "100ms"
        path = tmp / "edge.yaml"
        path.write_text(yaml.safe_dump(static))
        self.static = static
        # The DaemonSet's environment (EDGE_CPU_LIMIT: its workers: auto runs that many).
        env = {
            "POD_NAME": "edge-abcde",
            "POD_NAMESPACE": NAMESPACE,
            "NODE_NAME": "edge-worker",
            "EDGE_CPU_LIMIT": str(cpu_limit),
        }
        self.proc = Proc(["run", "--config", str(path)], env=env)
        self.ports: dict[str, int] = {}
        tcp = [n for n, ep in static["entryPoints"].items() if not ep["address"].endswith("/udp")]
        deadline = time.monotonic() + 15
        while set(tcp) - set(self.ports) and time.monotonic() < deadline:
            for m in self.proc.all_matches(LISTEN_RE.pattern):
                self.ports[m.group(1)] = int(m.group(3))
            time.sleep(0.02)
        assert not set(tcp) - set(self.ports), "entry points did not start:\n" + self.proc.log

    @property
    def ping_port(self) -> int:
        return self.ports[self.static["ping"]["entryPoint"]]

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if get(self.ping_port, "/ready")[0] == 200:
                return
            time.sleep(0.05)
        raise TimeoutError("edge never became ready:\n" + self.proc.log)


@pytest.fixture
def deployed(tmp_path: Path, request) -> Iterator[tuple[DeployedEdge, Whoami]]:
    # No accept grace unless a test asks: the ConfigMap's 10 s would hold each teardown's SIGTERM.
    options = {"accept_grace": "0s", **getattr(request, "param", {})}
    backend = Whoami("app")
    try:
        with Emulator(token=TOKEN) as emu:
            emu.create(manifest("ingressclass.yaml", "IngressClass"))
            emu.create(o.service("app", target_port=backend.port))
            emu.create(
                o.endpoint_slice(
                    "app-1", service_name="app", addresses=["127.0.0.1"], port=backend.port
                )
            )
            emu.create(o.ingress("app", host=HOST, service="app", ingress_class="edge"))
            edge = DeployedEdge(tmp_path, emu, **options)
            try:
                edge.wait_ready()
                yield edge, backend
            finally:
                edge.proc.stop()
    finally:
        backend.stop()


def test_ingress_routes_stay_off_the_health_port(deployed):
    """The ping entry point (:8082, open on every edge node for the load balancer's health
    checks and the kubelet's probes) answers /ping and /ready and serves no Ingress route.
    Traefik attaches a router without entryPoints to every TCP entry point except the one
    named ``traefik``; the ConfigMap named its ping entry point ``ping``, so every Ingress
    was also served on the health port of every edge node."""
    edge, _ = deployed
    web = edge.ports["web"]
    deadline = time.monotonic() + 10
    while get(web, "/", host=HOST)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, _, body = get(web, "/", host=HOST)
    assert status == 200 and b'"name":"app"' in body, (status, body)  # the route is live on web

    status, _, body = get(edge.ping_port, "/", host=HOST)
    assert status == 404, f"the health port served the Ingress route: {status} {body[:200]!r}"
    assert get(edge.ping_port, "/ping")[0] == 200
    assert get(edge.ping_port, "/ready")[0] == 200


@pytest.mark.parametrize(
    "deployed",
    [{"cpu_limit": 1, "accept_grace": "1500ms"}, {"cpu_limit": 2, "accept_grace": "1500ms"}],
    ids=["one-process", "workers-2"],
    indirect=True,
)
def test_sigterm_keeps_the_node_serving_while_it_leaves_rotation(deployed):
    """A rolling update SIGTERMs the pod of a node the load balancer still sends to. The
    ConfigMap's entry points keep accepting for requestAcceptGraceTimeout while /ready
    (and /ping) answer 503 on the health port, so a load balancer health-checking /ready
    takes the node out before its ports refuse connections; then edge drains and exits 0.
    Without the key (before), every port refused new connections the moment SIGTERM came,
    so connections the load balancer still sent were refused until its checks failed.
    (The grace is the ConfigMap's key with a shorter value, to keep the test short.)"""
    edge, _ = deployed
    web = edge.ports["web"]
    deadline = time.monotonic() + 10
    while get(web, "/", host=HOST)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get(web, "/", host=HOST)[0] == 200
    start = time.monotonic()
    edge.proc.signal(signal.SIGTERM)
    edge.proc.wait_for(r"stopping", timeout=5)
    time.sleep(0.3)
    status, _, body = get(web, "/", host=HOST)
    assert status == 200 and b'"name":"app"' in body, f"a new connection after SIGTERM: {status}"
    assert get(edge.ping_port, "/ready")[0] == 503, "the health port still says ready"
    assert edge.proc.proc.wait(timeout=20) == 0, edge.proc.log[-3000:]
    assert time.monotonic() - start >= 1.4
    assert get(web, "/", host=HOST)[0] == 0  # then the port is closed
