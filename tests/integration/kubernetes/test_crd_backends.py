"""How CRD services reach their backends, end to end: ServersTransport and
ServersTransportTCP objects naming Secrets and ConfigMaps, and nodePortLB.

A real :class:`~tests.kube.emulator.Emulator` serves the objects to one in-process edge
(``providers.kubernetesCRD``, as ``test_provider.py`` runs it); the upstreams are
``openssl s_server`` demanding a client certificate from a CA of their own (``-Verify
1``): ``-www`` answers HTTP with a page naming the client certificate it got, ``-rev``
echoes lines reversed over TLS. curl through an IngressRoute whose ServersTransport has
``certificatesSecrets`` reaches the HTTPS upstream as the Secret's certificate; the same
upstream through a transport without one answers 502 (the handshake is refused);
a transport naming a missing Secret disables the route with its reason; raw TCP
through an IngressRouteTCP with a ServersTransportTCP's ``tls.certificatesSecrets``
gets its echo. The Secret deleted, the route goes (404) within a bounded wait. rootCAs
from a Secret's ``ca.crt`` and a ConfigMap's ``tls.ca`` verify the upstream, another
CA's do not (502). nodePortLB reaches whoami through a Node's InternalIP and nodePort.
A TraefikService failover whose main Service (ExternalName, with a healthCheck) fails
its check sends curl to the fallback Service, and back once the check passes.
An IngressRoute service's ``sticky.cookie`` and a TraefikService's ``weighted.sticky``
keep curl's cookie jar on one backend.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from edge.providers.kubernetes.provider import KubernetesCRDProvider
from tests.fixtures.tls.pki import PKI
from tests.harness import need
from tests.integration.kubernetes import test_provider as KP
from tests.integration.peers import Process, Scripted
from tests.kube import objects as o
from tests.kube.emulator import Emulator

TRAEFIK = "traefik.io/v1alpha1"
CLIENT_CN = "edge-upstream-client"


# --- peers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream_tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The upstreams' certificate, the CA they trust for clients, and edge's client pair."""
    folder = tmp_path_factory.mktemp("upstream-tls")
    client_ca = PKI("upstream client CA")
    client = client_ca.issue(cn=CLIENT_CN, client=True)
    server_ca = PKI("upstream server CA")
    crt, key = server_ca.issue("upstream.test").write(folder, "server")
    return {"crt": crt, "key": key, "client_ca": client_ca.write_ca(folder, "client-ca"),
            "client": client, "server_ca": server_ca.cert_pem,
            "other_ca": PKI("another CA").cert_pem}  # fmt: skip


def s_server(tls: dict[str, Any], mode: str) -> Process:
    """``openssl s_server`` in ``mode`` (``-www`` or ``-rev``) that requires a client
    certificate signed by the client CA."""
    args = [need("openssl"), "s_server", "-accept", "127.0.0.1:0", "-cert", tls["crt"],
            "-key", tls["key"], "-Verify", "1", "-CAfile", tls["client_ca"], mode,
            "-naccept", "200"]  # fmt: skip
    p = Process(args, r"ACCEPT .*:(\d+)")
    p.port = int(p.match.group(1))  # type: ignore[attr-defined]
    return p


@pytest.fixture(scope="module")
def www(upstream_tls: dict[str, Any]) -> Iterator[Process]:
    p = s_server(upstream_tls, "-www")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def rev(upstream_tls: dict[str, Any]) -> Iterator[Process]:
    p = s_server(upstream_tls, "-rev")
    yield p
    p.stop()


# --- objects ------------------------------------------------------------------------------


def crd(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": TRAEFIK, "kind": kind,
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}  # fmt: skip


def upstream(name: str, port: int) -> list[dict[str, Any]]:
    """A Service (port 8443, ``https``) and its slice pointing at 127.0.0.1:``port``."""
    svc = o.service(name, port=8443, target_port=port)
    svc["spec"]["ports"][0]["name"] = "https"
    eps = o.endpoint_slice(f"{name}-1", service_name=name, addresses=["127.0.0.1"], port=port)
    eps["ports"][0]["name"] = "https"
    return [svc, eps]


def http_route(host: str, transport: str) -> dict[str, Any]:
    return {"match": f"Host(`{host}`)",
            "services": [{"name": "www", "port": 8443, "scheme": "https",
                          "serversTransport": transport}]}  # fmt: skip


def client_secret(tls: dict[str, Any]) -> dict[str, Any]:
    pair = tls["client"]
    b64 = base64.b64encode
    return o.secret("upstream-client", cert=b64(pair.cert_pem.encode()).decode(),
                    key=b64(pair.key_pem.encode()).decode())  # fmt: skip


# --- edge ---------------------------------------------------------------------------------


def static_config(emu: Emulator, **crd_options: Any) -> dict[str, Any]:
    """One edge on ``emu``; ``crd_options``: more keys of ``providers.kubernetesCRD``."""
    throttle = f"{int(KP.THROTTLE * 1000)}ms"
    return {
        "entryPoints": {
            "web": {"address": "127.0.0.1:0"},
            "tcp": {"address": "127.0.0.1:0"},
            "traefik": {"address": "127.0.0.1:0"},
        },
        "providers": {
            "kubernetesCRD": {
                "endpoint": emu.url,
                "token": KP.TOKEN,
                "throttleDuration": throttle,
                **crd_options,
            }
        },
        "providersThrottleDuration": throttle,
        "ping": {"entryPoint": "traefik"},
        "log": {"level": "INFO"},
    }


def fast(app: Any) -> None:
    for p in app.providers:
        if isinstance(p, KubernetesCRDProvider):
            p.timing = KP.FAST
            p.wait_log_interval = 0.5


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(token=KP.TOKEN, bookmark_interval=1.0) as e:
        yield e


@pytest.fixture
def start_edge(emu: Emulator) -> Iterator[Callable[..., KP.InProcessEdge]]:
    started: list[KP.InProcessEdge] = []

    def start(**crd_options: Any) -> KP.InProcessEdge:
        e = KP.InProcessEdge(static_config(emu, **crd_options), tweak=fast).start()
        started.append(e)
        assert KP.until(lambda: e.ready() == 200, 10.0), "edge never became ready"
        return e

    yield start
    for e in started:
        e.stop()


def curl(port: int, host: str) -> tuple[int, str]:
    """(status, body) of ``curl http://127.0.0.1:port/ -H Host: host``; 0 if none."""
    out = subprocess.run(
        [need("curl"), "-s", "-m", "10", "-H", f"Host: {host}", "-w", "\n%{http_code}",
         f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body


def tcp_round_trip(port: int, data: bytes, expect: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` over plain TCP and read until ``expect`` (or EOF, or ``timeout``)."""
    got = b""
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        while expect not in got and time.monotonic() < deadline:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
    return got


# --- tests --------------------------------------------------------------------------------


def test_transports_present_the_client_certificate_their_secrets_hold(
    emu: Emulator, start_edge, upstream_tls: dict[str, Any], www: Process, rev: Process
) -> None:
    for obj in (*upstream("www", www.port), *upstream("rev", rev.port)):  # type: ignore[attr-defined]
        emu.create(obj)
    emu.create(client_secret(upstream_tls))
    emu.create(
        crd(
            "ServersTransport",
            "mtls",
            {"insecureSkipVerify": True, "certificatesSecrets": ["upstream-client"]},
        )
    )
    emu.create(crd("ServersTransport", "plain", {"insecureSkipVerify": True}))
    emu.create(
        crd(
            "ServersTransport",
            "broken",
            {"insecureSkipVerify": True, "certificatesSecrets": ["missing"]},
        )
    )
    emu.create(
        crd(
            "ServersTransportTCP",
            "mtls-tcp",
            {"tls": {"insecureSkipVerify": True, "certificatesSecrets": ["upstream-client"]}},
        )
    )
    emu.create(
        crd(
            "IngressRoute",
            "app",
            {
                "entryPoints": ["web"],
                "routes": [
                    http_route("mtls.test", "mtls"),
                    http_route("plain.test", "plain"),
                    http_route("broken.test", "broken"),
                ],
            },
        )
    )
    emu.create(crd("IngressRouteTCP", "echo", {"entryPoints": ["tcp"], "routes": [
        {"match": "HostSNI(`*`)",
         "services": [{"name": "rev", "port": 8443, "tls": True,
                       "serversTransport": "mtls-tcp"}]}]}))  # fmt: skip
    edge = start_edge()
    web = edge.port("web")

    assert KP.until(lambda: curl(web, "mtls.test")[0] == 200, 10.0)
    status, page = curl(web, "mtls.test")
    assert status == 200 and f"Subject: CN={CLIENT_CN}" in page  # s_server saw edge's cert
    assert curl(web, "plain.test")[0] == 502  # no client certificate: refused upstream
    assert curl(web, "broken.test")[0] == 404  # the route is disabled
    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesCRDProvider))
    reasons = [str(p) for p in provider.conversion.problems]
    assert "ServersTransport default/broken: spec: certificatesSecrets[0]: secret " \
           "default/missing not found" in reasons  # fmt: skip

    assert b"olleh" in tcp_round_trip(edge.port("tcp"), b"hello\n", b"olleh")

    # The Secret gone: the transports that name it are refused, and so are their routes.
    emu.delete("Secret", "default", "upstream-client")
    assert KP.until(lambda: curl(web, "mtls.test")[0] == 404, 10.0)
    # No TCP router left: the entry point reads the bytes as HTTP, and answers 400.
    answer = tcp_round_trip(edge.port("tcp"), b"hello\n", b"olleh", timeout=2.0)
    assert b"olleh" not in answer and answer.startswith(b"HTTP/1.1 400")


def test_transports_verify_upstreams_with_ca_bundles_of_secrets_and_config_maps(
    emu: Emulator, start_edge, upstream_tls: dict[str, Any], www: Process
) -> None:
    """rootCAs from a Secret's ca.crt and from a ConfigMap's tls.ca verify the upstream
    (its name, upstream.test, and its CA); a bundle of another CA does not (502)."""
    for obj in upstream("www", www.port):  # type: ignore[attr-defined]
        emu.create(obj)
    emu.create(client_secret(upstream_tls))
    ca_secret = client_secret(upstream_tls)
    ca_secret["metadata"]["name"] = "upstream-ca"
    ca_secret["data"]["ca.crt"] = base64.b64encode(upstream_tls["server_ca"].encode()).decode()
    emu.create(ca_secret)
    for name, pem in (
        ("upstream-ca", upstream_tls["server_ca"]),
        ("other-ca", upstream_tls["other_ca"]),
    ):
        emu.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default"},
                "data": {"tls.ca": pem},
            }
        )
    for name, root in (
        ("by-secret", {"secret": "upstream-ca"}),
        ("by-config-map", {"configMap": "upstream-ca"}),
        ("wrong-ca", {"configMap": "other-ca"}),
    ):
        emu.create(
            crd(
                "ServersTransport",
                name,
                {
                    "serverName": "upstream.test",
                    "rootCAs": [root],
                    "certificatesSecrets": ["upstream-client"],
                },
            )
        )
    emu.create(crd("IngressRoute", "app", {"entryPoints": ["web"], "routes": [
        http_route("secret.test", "by-secret"), http_route("config.test", "by-config-map"),
        http_route("wrong.test", "wrong-ca")]}))  # fmt: skip
    edge = start_edge()
    web = edge.port("web")

    assert KP.until(lambda: curl(web, "secret.test")[0] == 200, 10.0)
    assert f"Subject: CN={CLIENT_CN}" in curl(web, "secret.test")[1]
    assert curl(web, "config.test")[0] == 200
    assert curl(web, "wrong.test")[0] == 502  # the upstream's certificate does not verify


def test_node_port_lb_goes_to_the_nodes_internal_ips(emu: Emulator, start_edge, whoami) -> None:
    """nodePortLB: the servers are the Nodes' InternalIPs with the Service port's
    nodePort (here whoami's own port on 127.0.0.1, as a node would forward it); a node
    address changed moves them within a bounded wait."""
    svc = o.service("web", port=80, target_port=8080)
    svc["spec"]["type"] = "NodePort"
    svc["spec"]["ports"][0]["nodePort"] = whoami.port
    emu.create(svc)
    emu.create(KP._node("node-a", "127.0.0.1", external="203.0.113.1"))
    emu.create(crd("IngressRoute", "app", {"entryPoints": ["web"], "routes": [
        {"match": "Host(`node.test`)",
         "services": [{"name": "web", "port": 80, "nodePortLB": True}]}]}))  # fmt: skip
    edge = start_edge()
    web = edge.port("web")
    assert KP.until(lambda: KP.served_by(web, "node.test") == whoami.name, 10.0)
    # The node's InternalIP moves where nothing listens: edge follows (502).
    emu.update(KP._node("node-a", "127.0.0.2"))
    assert KP.until(lambda: curl(web, "node.test")[0] == 502, 10.0)


def test_opaque_secrets_hold_client_certificates_and_ca_bundles(
    emu: Emulator, start_edge, upstream_tls: dict[str, Any], www: Process
) -> None:
    """Secrets of every type are read, as Traefik reads them: a client certificate and a
    CA bundle in Opaque Secrets reach the upstream. A Secret changed in its metadata
    alone (a Helm release relabelled) converts nothing; its CA changed, the transport
    follows (502 under another CA)."""
    b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    for obj in upstream("www", www.port):  # type: ignore[attr-defined]
        emu.create(obj)
    pair = upstream_tls["client"]
    opaque = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque"}
    emu.create(
        {
            **opaque,
            "metadata": {"name": "client", "namespace": "default"},
            "data": {"tls.crt": b64(pair.cert_pem), "tls.key": b64(pair.key_pem)},
        }
    )
    emu.create(
        {
            **opaque,
            "metadata": {"name": "ca", "namespace": "default"},
            "data": {"ca.crt": b64(upstream_tls["server_ca"])},
        }
    )
    helm = {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
            "metadata": {"name": "sh.helm.release.v1.app.v1", "namespace": "default",
                         "labels": {"status": "deployed"}},
            "data": {"release": b64("x" * 50_000)}}  # fmt: skip
    emu.create(helm)
    emu.create(crd("ServersTransport", "opaque", {"serverName": "upstream.test",
        "rootCAs": [{"secret": "ca"}], "certificatesSecrets": ["client"]}))  # fmt: skip
    emu.create(crd("IngressRoute", "app", {"entryPoints": ["web"], "routes": [
        http_route("opaque.test", "opaque")]}))  # fmt: skip
    edge = start_edge()
    web = edge.port("web")
    assert KP.until(lambda: curl(web, "opaque.test")[0] == 200, 10.0)
    assert f"Subject: CN={CLIENT_CN}" in curl(web, "opaque.test")[1]

    provider = next(p for p in edge.app.providers if isinstance(p, KubernetesCRDProvider))
    conversions = provider.conversions
    helm["metadata"]["labels"] = {"status": "superseded"}
    emu.update(helm)
    assert KP.until(
        lambda: (
            provider.view.get("Secret", "default", helm["metadata"]["name"]).metadata.labels.get(
                "status"
            )
            == "superseded"
        ),
        10.0,
    )
    time.sleep(5 * KP.THROTTLE)  # rounds past the throttle window would have run
    assert provider.conversions == conversions

    emu.update({**opaque, "metadata": {"name": "ca", "namespace": "default"},
                "data": {"ca.crt": b64(upstream_tls["other_ca"])}})  # fmt: skip
    assert KP.until(lambda: curl(web, "opaque.test")[0] == 502, 10.0)
    assert provider.conversions > conversions


@pytest.fixture
def scripted() -> Iterator[tuple[Scripted, Scripted]]:
    made = (Scripted("primary"), Scripted("spare"))
    yield made
    for s in made:
        s.stop()


def test_failover_goes_to_its_fallback_while_the_main_service_fails_its_health_check(
    emu: Emulator, start_edge, scripted: tuple[Scripted, Scripted]
) -> None:
    """A TraefikService failover: ``service`` an ExternalName Service (healthCheck is
    Traefik's for those alone) at the primary backend, ``fallback`` a Service whose
    slice holds the spare. The primary's /health turned 500, curl is answered by the
    spare within a bounded wait; turned 200 again, by the primary."""
    primary, spare = scripted
    emu.create({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "primary", "namespace": "default"},
                "spec": {"type": "ExternalName", "externalName": "127.0.0.1",
                         "ports": [{"name": "http", "port": primary.port}]}})  # fmt: skip
    emu.create(o.service("spare", port=80, target_port=spare.port))
    emu.create(o.endpoint_slice("spare-1", service_name="spare", addresses=["127.0.0.1"],
                                port=spare.port))  # fmt: skip
    check = {"path": "/health", "interval": "200ms", "timeout": "1s"}
    emu.create(crd("TraefikService", "ha", {"failover": {
        "service": {"name": "primary", "port": primary.port, "healthCheck": check},
        "fallback": {"name": "spare", "port": 80}}}))  # fmt: skip
    emu.create(crd("IngressRoute", "app", {"entryPoints": ["web"], "routes": [
        {"match": "Host(`ha.test`)",
         "services": [{"name": "ha", "kind": "TraefikService"}]}]}))  # fmt: skip
    edge = start_edge(allowExternalNameServices=True)
    web = edge.port("web")
    assert KP.until(lambda: curl(web, "ha.test") == (200, "primary"), 10.0)
    # The healthCheck runs against the ExternalName's address.
    assert KP.until(lambda: primary.checks > 0, 5.0)

    primary.health = 500
    began = time.monotonic()
    assert KP.until(lambda: curl(web, "ha.test") == (200, "spare"), 10.0)
    left = time.monotonic() - began
    assert all(curl(web, "ha.test") == (200, "spare") for _ in range(5))

    primary.health = 200
    began = time.monotonic()
    assert KP.until(lambda: curl(web, "ha.test") == (200, "primary"), 10.0)
    back = time.monotonic() - began
    print(f"failover to the fallback in {left:.2f}s, back in {back:.2f}s", file=sys.stderr)


def sticky_curl(port: int, host: str, jar: Any) -> tuple[str, list[str]]:
    """(body, Set-Cookie values) of one curl request keeping ``jar`` (``-b``/``-c``)."""
    out = subprocess.run(
        [need("curl"), "-sS", "-i", "-m", "10", "-b", str(jar), "-c", str(jar),
         "-H", f"Host: {host}", f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    head, _, body = out.stdout.replace("\r\n", "\n").partition("\n\n")
    cookies = [line.split(":", 1)[1].strip() for line in head.split("\n")
               if line.lower().startswith("set-cookie:")]  # fmt: skip
    return body, cookies


def test_sticky_services_keep_a_client_on_its_backend(
    emu: Emulator, start_edge, scripted: tuple[Scripted, Scripted], tmp_path
) -> None:
    """An IngressRoute service with ``sticky.cookie`` over a Service whose two slices hold
    two backends: curl with a cookie jar gets the cookie of the backend that answered
    (Traefik's value, the SHA-256 of its URL) and stays on it; a TraefikService's
    ``weighted.sticky`` keeps a client on one child Service the same way."""
    emu.create(o.service("web", port=80, target_port=8080))
    for s in scripted:
        eps = o.endpoint_slice(f"web-{s.name}", service_name="web", addresses=["127.0.0.1"],
                               port=s.port)  # fmt: skip
        eps["ports"][0]["name"] = "http"
        emu.create(eps)
    for s in scripted:
        emu.create(o.service(s.name, port=80, target_port=s.port))
        emu.create(o.endpoint_slice(f"{s.name}-1", service_name=s.name,
                                    addresses=["127.0.0.1"], port=s.port))  # fmt: skip
    emu.create(crd("TraefikService", "split", {"weighted": {
        "services": [{"name": "primary", "port": 80}, {"name": "spare", "port": 80}],
        "sticky": {"cookie": {"name": "split"}}}}))  # fmt: skip
    emu.create(crd("IngressRoute", "app", {"entryPoints": ["web"], "routes": [
        {"match": "Host(`sticky.test`)", "services": [
            {"name": "web", "port": 80, "sticky": {"cookie": {"name": "s", "httpOnly": True}}}]},
        {"match": "Host(`split.test`)",
         "services": [{"name": "split", "kind": "TraefikService"}]}]}))  # fmt: skip
    edge = start_edge()
    web = edge.port("web")
    names = {s.name for s in scripted}
    assert KP.until(lambda: curl(web, "sticky.test")[1] in names, 10.0)
    # Both backends in the rotation before the client arrives.
    assert KP.until(lambda: {curl(web, "sticky.test")[1] for _ in range(4)} == names, 10.0)

    jar = tmp_path / "jar"
    first, cookies = sticky_curl(web, "sticky.test", jar)
    port = {s.name: s.port for s in scripted}[first]
    url = f"http://127.0.0.1:{port}"
    assert cookies == [f"s={hashlib.sha256(url.encode()).hexdigest()[:16]}; Path=/; HttpOnly"]
    for _ in range(6):
        assert sticky_curl(web, "sticky.test", jar) == (first, [])

    jar = tmp_path / "split-jar"
    first, cookies = sticky_curl(web, "split.test", jar)
    child = f"default-{first}-80"  # as Traefik's CRD provider names it
    assert cookies == [f"split={hashlib.sha256(child.encode()).hexdigest()[:16]}; Path=/"]
    for _ in range(6):
        assert sticky_curl(web, "split.test", jar) == (first, [])
