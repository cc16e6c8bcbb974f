"""k8s/examples/gateway/ as written, through the API server emulator and a real edge.

The example's Gateway API objects (and the Services, Secrets and namespace of
k8s/examples/ they name) go into :class:`~tests.kube.emulator.Emulator` as the API
server would store them; the only edit is the listeners' ports, moved from the
ConfigMap's entry points (80, 443, 8053/udp) to free ones, since listeners bind to
entry points by port. The backends run the examples' own command lines: ``edge
whoami`` for whoami-web and whoami-api, and crd/echo.yaml's arguments (with its
Secret's certificate) for the echo. Real clients check each route: ``http.client``
(HTTP), ``curl`` (HTTPS, verified against the example's certificate), ``openssl
s_client`` (passthrough: the echo's own certificate; terminated: the Gateway's), a
UDP socket, and a grpcio client for the GRPCRoute, whose Service ("yours", the
example says) is made here: a grpcio server behind an h2c port; the statuses edge
writes back are read with the ``kubernetes`` client.
"""

from __future__ import annotations

import base64
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client as kc
import pytest
import yaml

from tests.harness import Proc, Whoami, need
from tests.integration.http.grpcpeers import Echo
from tests.integration.kubernetes import test_gateway_provider as TG
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_grpcroute import call
from tests.integration.peers import fingerprint_of, s_client_until
from tests.kube.emulator import Emulator

# The Gateway provider tests' fixtures: the emulator, an edge on given ports, the client.
emu, start_edge, api = TG.emu, TG.start_edge, TG.api

EXAMPLES = Path(__file__).resolve().parents[3] / "k8s/examples"
NAMESPACE = "edge-demo"
# The ConfigMap's entry points the example's listeners name by port.
ENTRY_PORTS = {80: "web", 443: "websecure", 8053: "dns"}


def stored(doc: dict) -> dict:
    """A document as the API server stores it: a Secret's stringData becomes data."""
    if "stringData" in doc:
        data = doc.setdefault("data", {})
        for k, v in doc.pop("stringData").items():
            data[k] = base64.b64encode(v.encode()).decode()
    return doc


def documents(*relative: str) -> list[dict]:
    return [
        stored(d)
        for name in relative
        for d in yaml.safe_load_all((EXAMPLES / name).read_text())
        if d
    ]


def gateway_documents() -> list[dict]:
    """Every document k8s/examples/gateway/kustomization.yaml lists, in its order."""
    (kustomization,) = documents("gateway/kustomization.yaml")
    return documents(*(f"gateway/{name}" for name in kustomization["resources"]))


def secret_pem(doc: dict, key: str) -> str:
    return base64.b64decode(doc["data"][key]).decode()


def cert_fingerprint(pem: str) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    return x509.load_pem_x509_certificate(pem.encode()).fingerprint(hashes.SHA256()).hex()


@pytest.fixture
def echo_pod(tmp_path: Path) -> Iterator[dict[str, int]]:
    """crd/echo.yaml's container: its arguments, listening on free ports of 127.0.0.1,
    with its Secret mounted where the arguments read it. Its ports by protocol."""
    (deployment,) = [d for d in documents("crd/echo.yaml") if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    (secret,) = [
        d
        for d in documents("crd/echo-tls-secret.yaml")
        if d["metadata"]["name"] == volume["secret"]["secretName"]
    ]
    folder = tmp_path / "echo-tls"
    folder.mkdir()
    for key in secret["data"]:
        (folder / key).write_text(secret_pem(secret, key))
    args = [
        "127.0.0.1:0" if a.startswith("0.0.0.0:") else a.replace(mount["mountPath"], str(folder))
        for a in container["args"]
    ]
    proc = Proc(args)
    try:
        ports = {
            kind: int(proc.wait_for(rf"whoami echo: {kind} on 127\.0\.0\.1:(\d+)")[1])
            for kind in ("tls", "tcp", "udp")
        }
        yield ports
    finally:
        proc.stop()


def endpoint_slice(service: dict, ports: dict[str, int]) -> dict:
    """The slice the EndpointSlice controller would write for ``service`` with one pod on
    127.0.0.1 whose named ports are ``ports``."""
    name = service["metadata"]["name"]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-1",
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
        "ports": [
            {"name": p["name"], "port": ports[p["targetPort"]], "protocol": p["protocol"]}
            for p in service["spec"]["ports"]
        ],
    }


def on_free_ports(gateway: dict, ports: TG.Ports) -> dict:
    free = {"web": ports.web, "websecure": ports.websecure, "dns": ports.dns}
    for listener in gateway["spec"]["listeners"]:
        listener["port"] = free[ENTRY_PORTS[listener["port"]]]
    return gateway


def curl_https(port: int, host: str, path: str, ca: Path) -> str:
    out = subprocess.run(
        [need("curl"), "-sS", "--max-time", "5", "--cacert", str(ca),
         "--resolve", f"{host}:{port}:127.0.0.1", f"https://{host}:{port}{path}"],
        capture_output=True, text=True, timeout=15,
    )  # fmt: skip
    return out.stdout if out.returncode == 0 else f"curl {out.returncode}: {out.stderr}"


def udp_echo(port: int) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.5)
        sock.sendto(b"ping", ("127.0.0.1", port))
        try:
            return sock.recv(64)
        except OSError:
            return b""


def test_the_gateway_example_serves_http_https_passthrough_tcp_and_udp(
    emu: Emulator,
    start_edge: Any,
    api: kc.CustomObjectsApi,
    echo_pod: dict[str, int],
    tmp_path: Path,
) -> None:
    docs = gateway_documents()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "GatewayClass",
            "Secret",
            "Gateway",
            "HTTPRoute",
            "GRPCRoute",
            "TLSRoute",
            "TCPRoute",
            "UDPRoute",
        ]
    )
    ports = TG.Ports()
    (gateway,) = [d for d in docs if d["kind"] == "Gateway"]
    assert {li["port"] for li in gateway["spec"]["listeners"]} == set(ENTRY_PORTS)
    on_free_ports(gateway, ports)

    services = {
        d["metadata"]["name"]: d
        for d in documents("whoami.yaml", "crd/echo.yaml")
        if d["kind"] == "Service"
    }
    echo_secret = stored(documents("crd/echo-tls-secret.yaml")[0])
    for doc in [*documents("namespace.yaml"), *services.values(), echo_secret, *docs]:
        emu.create(doc)
    web, api_backend = Whoami("web"), Whoami("api")
    grpc_echo = Echo()
    try:
        emu.create(endpoint_slice(services["whoami-web"], {"http": web.port}))
        emu.create(endpoint_slice(services["whoami-api"], {"http": api_backend.port}))
        emu.create(endpoint_slice(services["echo"], echo_pod))
        start_edge(ports)
        host = "gateway.example.test"

        # HTTPRoute on web (:80): /whoami rewritten to / for whoami-web, the rest to api.
        assert KP.until(lambda: TG.who(ports.web, "/whoami/x", host) == "web")
        status, _, seen = TG.get(ports.web, "/whoami/x", host)
        assert (status, seen["path"]) == (200, "/x")
        assert TG.who(ports.web, "/other", host) == "api"
        assert TG.who(ports.web, "/", "elsewhere.example.test") == "404"

        # ... and on websecure (:443), terminated with gateway-tls, verified by curl.
        (gw_secret,) = [d for d in docs if d["kind"] == "Secret"]
        ca = tmp_path / "gateway.crt"
        ca.write_text(secret_pem(gw_secret, "tls.crt"))
        answer = curl_https(ports.websecure, host, "/whoami/", ca)
        assert '"name": "web"' in answer or '"name":"web"' in answer, answer

        # TLSRoute, passthrough: the echo's own certificate, the echo's TLS port.
        out = s_client_until(ports.websecure, "echo-gateway.example.test", b"hello\n", b"hello")
        assert b"hello" in out
        assert fingerprint_of(out) == cert_fingerprint(secret_pem(echo_secret, "tls.crt"))

        # TCPRoute on a Terminate listener: the Gateway's certificate, the echo's TCP port.
        out = s_client_until(ports.websecure, "tcp-gateway.example.test", b"hello\n", b"hello")
        assert b"hello" in out
        assert fingerprint_of(out) == cert_fingerprint(secret_pem(gw_secret, "tls.crt"))

        # UDPRoute on udp (:8053).
        assert KP.until(lambda: udp_echo(ports.dns) == b"ping")

        # GRPCRoute on web (:80): UNAVAILABLE until its Service exists, then served (h2c).
        grpc_host = "grpc.gateway.example.test"
        echoes = {"grpc-echo": grpc_echo}
        assert call(ports.web, echoes, authority=grpc_host) == "UNAVAILABLE:503"
        grpc_service = {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "grpc-echo", "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "grpc", "port": 8080, "targetPort": "grpc",
                                "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}]},
        }  # fmt: skip
        emu.create(grpc_service)
        emu.create(endpoint_slice(grpc_service, {"grpc": grpc_echo.port}))
        assert KP.until(lambda: call(ports.web, echoes, authority=grpc_host) == "grpc-echo")
        assert grpc_echo.metadata[-1]["x-gateway"] == "edge"

        # The status edge wrote back on each route and on the Gateway's listeners.
        def parents(plural: str, name: str) -> list[tuple[str | None, dict]]:
            """(sectionName, conditions) of each parent entry edge wrote."""
            obj = api.get_namespaced_custom_object(TG.GROUP, "v1", NAMESPACE, plural, name)
            return [
                (p["parentRef"].get("sectionName"), TG.conds(p["conditions"]))
                for p in obj.get("status", {}).get("parents", [])
                if p["controllerName"] == TG.CONTROLLER_NAME
            ]

        for (plural, name), sections in {
            ("httproutes", "whoami"): ["web", "websecure"],
            ("grpcroutes", "grpc-echo"): ["web"],
            ("tlsroutes", "echo"): ["passthrough"],
            ("tcproutes", "echo"): ["tcp-tls"],
            ("udproutes", "echo"): ["udp"],
        }.items():
            want_parents = [(s, TG.ACCEPTED) for s in sections]
            assert KP.until(lambda p=plural, n=name, w=want_parents: sorted(parents(p, n)) == w), (
                plural,
                parents(plural, name),
            )

        def attached() -> dict[str, int]:
            st = api.get_namespaced_custom_object(
                TG.GROUP, "v1", NAMESPACE, "gateways", gateway["metadata"]["name"]
            ).get("status", {})
            return {li["name"]: li.get("attachedRoutes") for li in st.get("listeners", [])}

        want = {"web": 2, "websecure": 1, "passthrough": 1, "tcp-tls": 1, "udp": 1}
        assert KP.until(lambda: attached() == want), attached()
    finally:
        web.stop()
        api_backend.stop()
        grpc_echo.stop()
